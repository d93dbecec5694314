package io.weft.sdk.trace;

import io.weft.sdk.internal.PerThread;

/**
 * Where span records come from and where ended sampled spans go. Must not block. Called on
 * application threads.
 */
public interface SpanSink {
  /**
   * An empty record for a new span (cleared if recycled), limited by {@code limits}, taken on the
   * calling thread, whose state is {@code thread}.
   */
  SpanRecord acquire(SpanLimits limits, PerThread thread);

  /** Takes the record of an ended, sampled span. */
  void onEnd(SpanRecord span);

  /** Takes back a record no exporter will see (a recording span that was not sampled). */
  void release(SpanRecord span);
}
