package io.weft.sdk.internal;

import io.weft.sdk.id.WyRand;

/**
 * What the SDK keeps per application thread, behind one {@code ThreadLocal}: the thread's PRNG
 * and the export lane it holds in one export pipeline. A sampled span looks it up once when it
 * starts, for both its IDs and its record (span_sampled_* benchmarks: each lookup is a few ns).
 *
 * <p>Only the owning thread reads or writes it. It holds no reference to a pipeline (only its
 * number), so a thread does not keep a shut-down pipeline alive.
 */
public final class PerThread {
  private static final ThreadLocal<PerThread> CURRENT = ThreadLocal.withInitial(PerThread::new);

  /** This thread's generator. */
  public final WyRand rng = WyRand.seeded();
  /** The number of the pipeline {@link #lane} belongs to; 0 for none yet. */
  public long sinkId;
  /** The ring this thread holds alone in pipeline {@link #sinkId}, or -1 for none. */
  public int lane = -1;

  // The span context of the last unsampled span this thread started, handed from the span
  // builder's out-of-line start() back to its inlined startSpan(), which builds the context
  // itself so that escape analysis can remove it (WeftSpanBuilder). Written and read by the
  // owning thread only, between those two calls.
  /** The trace ID's high half. */
  public long unsampledTraceIdHigh;
  /** The trace ID's low half. */
  public long unsampledTraceIdLow;
  /** The span ID. */
  public long unsampledSpanId;
  /** The trace flags. */
  public byte unsampledFlags;
  /** The trace state (a {@code WeftTraceState}). */
  public Object unsampledTraceState;

  private PerThread() {}

  /** Returns this thread's state. */
  public static PerThread current() {
    return CURRENT.get();
  }
}
