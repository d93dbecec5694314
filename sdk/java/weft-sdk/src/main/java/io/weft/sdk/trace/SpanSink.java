package io.weft.sdk.trace;

/** Receives sampled spans as they end. Must not block. */
public interface SpanSink {
  /** Takes an ended, sampled span. Called on the application thread that ended it. */
  void onEnd(RecordingSpan span);
}
