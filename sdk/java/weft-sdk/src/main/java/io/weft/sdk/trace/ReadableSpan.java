package io.weft.sdk.trace;

import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;

/**
 * The read-only view of an ended span that exporters encode. Timestamps are Unix nanoseconds.
 */
public interface ReadableSpan {
  long traceIdHigh();

  long traceIdLow();

  long spanId();

  /** The W3C trace flags byte. */
  byte traceFlags();

  WeftTraceState traceState();

  /** The span context these IDs make (a new object on each call). */
  default WeftSpanContext spanContext() {
    return WeftSpanContext.create(traceIdHigh(), traceIdLow(), spanId(), traceFlags(),
        traceState());
  }

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

  int eventCount();

  String eventName(int i);

  long eventEpochNanos(int i);

  /** The attributes of event {@code i}, or null (possibly empty) when it has none. */
  AttributeList eventAttributes(int i);

  int droppedEvents();

  int linkCount();

  WeftSpanContext linkContext(int i);

  /** The attributes of link {@code i}, or null (possibly empty) when it has none. */
  AttributeList linkAttributes(int i);

  int droppedLinks();

  StatusCode statusCode();

  /** The status description (empty unless the code is ERROR). */
  String statusMessage();

  InstrumentationScope scope();
}
