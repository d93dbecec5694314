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

  private PerThread() {}

  /** Returns this thread's state. */
  public static PerThread current() {
    return CURRENT.get();
  }
}
