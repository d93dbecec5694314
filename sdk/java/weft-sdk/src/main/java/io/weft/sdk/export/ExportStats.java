package io.weft.sdk.export;

import java.util.concurrent.atomic.LongAdder;

/**
 * Counters of a pipeline: spans exported, and spans dropped by reason (spec/otlp.md: {@code
 * queue_full}, {@code permanent}, {@code retries_exhausted}, {@code deadline}, {@code rejected}).
 */
public final class ExportStats {
  public final LongAdder exported = new LongAdder();
  public final LongAdder droppedQueueFull = new LongAdder();
  public final LongAdder droppedPermanent = new LongAdder();
  public final LongAdder droppedRetriesExhausted = new LongAdder();
  public final LongAdder droppedDeadline = new LongAdder();
  public final LongAdder rejected = new LongAdder();
  public final LongAdder droppedShutdown = new LongAdder();

  /** All dropped spans, every reason. */
  public long dropped() {
    return droppedQueueFull.sum() + droppedPermanent.sum() + droppedRetriesExhausted.sum()
        + droppedDeadline.sum() + rejected.sum() + droppedShutdown.sum();
  }

  @Override
  public String toString() {
    return "ExportStats{exported=" + exported.sum() + ", queue_full=" + droppedQueueFull.sum()
        + ", permanent=" + droppedPermanent.sum() + ", retries_exhausted="
        + droppedRetriesExhausted.sum() + ", deadline=" + droppedDeadline.sum() + ", rejected="
        + rejected.sum() + ", shutdown=" + droppedShutdown.sum() + "}";
  }
}
