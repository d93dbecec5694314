package io.weft.sdk;

import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.WeftSpanContext;

/** A span event: name, Unix nanoseconds, attributes (null when none). */
public final class SpanEvent {
  private final String name;
  private final long epochNanos;
  private final AttributeList attributes;

  public SpanEvent(String name, long epochNanos, AttributeList attributes) {
    this.name = name;
    this.epochNanos = epochNanos;
    this.attributes = attributes;
  }

  public String name() {
    return name;
  }

  public long epochNanos() {
    return epochNanos;
  }

  /** The attributes, or null. */
  public AttributeList attributes() {
    return attributes;
  }
}
