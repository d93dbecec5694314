package io.weft.sdk.trace;

import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import java.util.List;

/**
 * The read-only view of an ended span that exporters encode. Timestamps are Unix nanoseconds.
 */
public interface ReadableSpan {
  WeftSpanContext spanContext();

  /** The parent's span ID, or 0 for a root span. */
  long parentSpanId();

  /** Whether the parent span context was remote. */
  boolean parentRemote();

  String name();

  SpanKind kind();

  long startEpochNanos();

  long endEpochNanos();

  /** The attributes, or null when none were set. */
  AttributeList attributes();

  /** The events (possibly empty). */
  List<SpanEvent> events();

  int droppedEvents();

  /** The links (possibly empty). */
  List<SpanLink> links();

  int droppedLinks();

  StatusCode statusCode();

  /** The status description (empty unless the code is ERROR). */
  String statusMessage();

  InstrumentationScope scope();
}
