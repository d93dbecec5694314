package io.weft.sdk.trace;

import java.util.Map;

/**
 * Span limits (OpenTelemetry defaults: 128 of each, unlimited value length). What a limit drops is
 * counted and exported as the {@code dropped_*_count} fields.
 */
public final class SpanLimits {
  public static final SpanLimits DEFAULT = new SpanLimits(128, Integer.MAX_VALUE, 128, 128, 128,
      128);

  final int maxAttributes;
  final int maxAttributeValueLength;
  final int maxEvents;
  final int maxLinks;
  final int maxAttributesPerEvent;
  final int maxAttributesPerLink;

  public SpanLimits(int maxAttributes, int maxAttributeValueLength, int maxEvents, int maxLinks,
      int maxAttributesPerEvent, int maxAttributesPerLink) {
    this.maxAttributes = maxAttributes;
    this.maxAttributeValueLength = maxAttributeValueLength;
    this.maxEvents = maxEvents;
    this.maxLinks = maxLinks;
    this.maxAttributesPerEvent = maxAttributesPerEvent;
    this.maxAttributesPerLink = maxAttributesPerLink;
  }

  /**
   * From {@code OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT}, {@code OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT},
   * {@code OTEL_SPAN_EVENT_COUNT_LIMIT}, {@code OTEL_SPAN_LINK_COUNT_LIMIT},
   * {@code OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT}, {@code OTEL_LINK_ATTRIBUTE_COUNT_LIMIT} (and the
   * general {@code OTEL_ATTRIBUTE_COUNT_LIMIT} / {@code OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT}).
   */
  public static SpanLimits fromEnv(Map<String, String> env) {
    int attrs = intEnv(env, "OTEL_ATTRIBUTE_COUNT_LIMIT", 128);
    int len = intEnv(env, "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", Integer.MAX_VALUE);
    return new SpanLimits(intEnv(env, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", attrs),
        intEnv(env, "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", len),
        intEnv(env, "OTEL_SPAN_EVENT_COUNT_LIMIT", 128),
        intEnv(env, "OTEL_SPAN_LINK_COUNT_LIMIT", 128),
        intEnv(env, "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", attrs),
        intEnv(env, "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", attrs));
  }

  static int intEnv(Map<String, String> env, String name, int def) {
    String v = env.get(name);
    if (v == null || v.isBlank()) {
      return def;
    }
    try {
      int n = Integer.parseInt(v.trim());
      return n < 0 ? def : n;
    } catch (NumberFormatException e) {
      java.util.logging.Logger.getLogger(SpanLimits.class.getName())
          .warning("invalid " + name + " " + v + ", using " + def);
      return def;
    }
  }

  public int maxAttributes() {
    return maxAttributes;
  }

  public int maxAttributeValueLength() {
    return maxAttributeValueLength;
  }

  public int maxEvents() {
    return maxEvents;
  }

  public int maxLinks() {
    return maxLinks;
  }
}
