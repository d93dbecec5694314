package io.weft.sdk.export;

import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.Resource;
import java.util.List;

/**
 * Exports batches of ended spans. Called from the pipeline's export thread only, one batch at a
 * time; an implementation may block (retrying) but must return by the deadline it was built with
 * and must stop waiting when {@link #shutdown()} is called.
 */
public interface SpanExporter {
  /** Exports {@code batch}; the list is reused after the call returns. */
  void export(Resource resource, List<? extends ReadableSpan> batch, ExportStats stats)
      throws InterruptedException;

  /**
   * Whether this exporter keeps references to the spans of a batch after {@link #export} returns.
   * When false, the pipeline reuses the spans' storage for new spans once the call returns, so an
   * exporter that says false must copy what it keeps (encoding it, as OTLP does, is a copy).
   */
  default boolean retainsSpans() {
    return true;
  }

  /** Interrupts any back-off sleep and releases resources. Called once. */
  default void shutdown() {}

  /** An exporter that discards every batch (for benchmarks). */
  static SpanExporter noop() {
    return new SpanExporter() {
      @Override
      public void export(Resource resource, List<? extends ReadableSpan> batch,
          ExportStats stats) {
        stats.exported.add(batch.size());
      }

      @Override
      public boolean retainsSpans() {
        return false;
      }
    };
  }
}
