package io.weft.sdk;

import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.WeftSpanContext;

/** A link to another span context, with attributes (null when none). */
public final class SpanLink {
  private final WeftSpanContext context;
  private final AttributeList attributes;

  public SpanLink(WeftSpanContext context, AttributeList attributes) {
    this.context = context;
    this.attributes = attributes;
  }

  public WeftSpanContext context() {
    return context;
  }

  /** The attributes, or null. */
  public AttributeList attributes() {
    return attributes;
  }
}
