package io.weft.sdk.trace;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.weft.sdk.id.Hex;
import java.util.concurrent.TimeUnit;

/**
 * A span context holding its IDs as longs (spec/ids.md "Lazy hex"): the hex strings the
 * OpenTelemetry API returns from {@link #getTraceId()} and {@link #getSpanId()} are built on first
 * use, at most once per context, and cached.
 *
 * <p>It also carries the format-specific members that travel with a propagated context
 * (spec/propagation.md): the B3 and Jaeger debug states and the X-Ray {@code Lineage}.
 *
 * <p>It is also the non-recording {@link Span} that carries it in a {@link
 * io.opentelemetry.context.Context} (what {@code Span.wrap} would otherwise allocate), so that a
 * propagator's extract allocates only this object and the new {@code Context}
 * (traceparent_extract (weft_api) benchmark). As a span it records nothing.
 */
public final class WeftSpanContext implements SpanContext, Span {
  /** The W3C sampled flag. */
  public static final byte SAMPLED = 0x01;
  /** The W3C Level 2 random trace-id flag. */
  public static final byte RANDOM = 0x02;

  private static final byte REMOTE = 1;
  private static final byte B3_DEBUG = 2;
  private static final byte JAEGER_DEBUG = 4;

  /** The invalid context (all-zero IDs). */
  public static final WeftSpanContext INVALID =
      new WeftSpanContext(0, 0, 0, (byte) 0, WeftTraceState.EMPTY, false, false, false, null);

  private final long traceIdHigh;
  private final long traceIdLow;
  private final long spanId;
  private final byte flags;
  private final byte bits; // REMOTE | B3_DEBUG | JAEGER_DEBUG
  private final WeftTraceState traceState;
  private final String xrayLineage;
  // The strings built from this context, in one object made on first use, so that a context
  // nobody formats is 56 bytes rather than 72.
  private Strings strings;

  /**
   * Racy single-check caches: String is immutable (final fields), so a thread that sees a
   * non-null value sees a complete string; two threads may both compute it, which is harmless.
   */
  private static final class Strings {
    String traceIdHex;
    String spanIdHex;
    // Header values built on first inject and reused: a context injected into several requests
    // (retries, fan-out of one client span) formats its header once.
    String traceparent;
    String xrayHeader;
    String xrayTraceId;
  }

  WeftSpanContext(long traceIdHigh, long traceIdLow, long spanId, byte flags,
      WeftTraceState traceState, boolean remote, boolean b3Debug, boolean jaegerDebug,
      String xrayLineage) {
    this.traceIdHigh = traceIdHigh;
    this.traceIdLow = traceIdLow;
    this.spanId = spanId;
    this.flags = flags;
    this.traceState = traceState;
    this.bits = (byte) ((remote ? REMOTE : 0) | (b3Debug ? B3_DEBUG : 0)
        | (jaegerDebug ? JAEGER_DEBUG : 0));
    this.xrayLineage = xrayLineage;
  }

  private Strings strings() {
    Strings s = strings;
    if (s == null) {
      s = new Strings();
      strings = s;
    }
    return s;
  }

  /** A local (not remote) context. */
  public static WeftSpanContext create(long traceIdHigh, long traceIdLow, long spanId, byte flags,
      WeftTraceState traceState) {
    return new WeftSpanContext(traceIdHigh, traceIdLow, spanId, flags, traceState, false, false,
        false, null);
  }

  /** A context extracted from a request ({@code isRemote() == true}). */
  public static WeftSpanContext createRemote(long traceIdHigh, long traceIdLow, long spanId,
      byte flags, WeftTraceState traceState, boolean b3Debug, boolean jaegerDebug,
      String xrayLineage) {
    return new WeftSpanContext(traceIdHigh, traceIdLow, spanId, flags, traceState, true, b3Debug,
        jaegerDebug, xrayLineage);
  }

  /**
   * Returns {@code sc} as a weft context, converting (and parsing the hex of) a context made by
   * another implementation.
   */
  public static WeftSpanContext of(SpanContext sc) {
    if (sc instanceof WeftSpanContext) {
      return (WeftSpanContext) sc;
    }
    if (sc == null || !sc.isValid()) {
      return INVALID;
    }
    String t = sc.getTraceId();
    String s = sc.getSpanId();
    return new WeftSpanContext(Hex.parseLongAnyCase(t, 0, 16), Hex.parseLongAnyCase(t, 16, 16),
        Hex.parseLongAnyCase(s, 0, 16), sc.getTraceFlags().asByte(),
        WeftTraceState.of(sc.getTraceState()), sc.isRemote(), false, false, null);
  }

  /** A copy carrying {@code ts}. */
  public WeftSpanContext withTraceState(WeftTraceState ts) {
    return new WeftSpanContext(traceIdHigh, traceIdLow, spanId, flags, ts, isRemote(), b3Debug(),
        jaegerDebug(), xrayLineage);
  }

  public long traceIdHigh() {
    return traceIdHigh;
  }

  public long traceIdLow() {
    return traceIdLow;
  }

  public long spanIdLong() {
    return spanId;
  }

  /** The W3C trace flags byte. */
  public byte flags() {
    return flags;
  }

  public boolean b3Debug() {
    return (bits & B3_DEBUG) != 0;
  }

  public boolean jaegerDebug() {
    return (bits & JAEGER_DEBUG) != 0;
  }

  /** The X-Ray {@code Lineage} carried with this context, or null. */
  public String xrayLineage() {
    return xrayLineage;
  }

  public WeftTraceState weftTraceState() {
    return traceState;
  }

  @Override
  public String getTraceId() {
    Strings s = strings();
    String h = s.traceIdHex;
    if (h == null) {
      h = Hex.ofTraceId(traceIdHigh, traceIdLow);
      s.traceIdHex = h;
    }
    return h;
  }

  @Override
  public String getSpanId() {
    Strings s = strings();
    String h = s.spanIdHex;
    if (h == null) {
      h = Hex.ofLong(spanId);
      s.spanIdHex = h;
    }
    return h;
  }

  /** The {@code traceparent} header value for this context, built at most once. */
  public String traceparentHeader() {
    Strings s = strings();
    String h = s.traceparent;
    if (h == null) {
      char[] c = new char[55];
      c[0] = '0';
      c[1] = '0';
      c[2] = '-';
      Hex.writeLong(traceIdHigh, c, 3);
      Hex.writeLong(traceIdLow, c, 19);
      c[35] = '-';
      Hex.writeLong(spanId, c, 36);
      c[52] = '-';
      Hex.writeByte(flags & 0x03, c, 53);
      h = new String(c);
      s.traceparent = h;
    }
    return h;
  }

  /** The X-Ray form of the trace ID ({@code 1-xxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx}), built once. */
  public String xrayTraceId() {
    Strings s = strings();
    String h = s.xrayTraceId;
    if (h == null) {
      h = io.weft.sdk.id.XrayTraceId.toString(traceIdHigh, traceIdLow);
      s.xrayTraceId = h;
    }
    return h;
  }

  /**
   * The X-Ray header value for this context, built at most once by {@code builder} (the X-Ray
   * propagator) and cached.
   */
  public String xrayHeader(java.util.function.Function<WeftSpanContext, String> builder) {
    Strings s = strings();
    String h = s.xrayHeader;
    if (h == null) {
      h = builder.apply(this);
      s.xrayHeader = h;
    }
    return h;
  }

  @Override
  public byte[] getTraceIdBytes() {
    byte[] b = new byte[16];
    Hex.putLong(b, 0, traceIdHigh);
    Hex.putLong(b, 8, traceIdLow);
    return b;
  }

  @Override
  public byte[] getSpanIdBytes() {
    byte[] b = new byte[8];
    Hex.putLong(b, 0, spanId);
    return b;
  }

  @Override
  public boolean isSampled() {
    return (flags & SAMPLED) != 0;
  }

  @Override
  public TraceFlags getTraceFlags() {
    return TraceFlags.fromByte(flags); // a cached instance per byte value: no allocation
  }

  @Override
  public TraceState getTraceState() {
    return traceState;
  }

  @Override
  public boolean isValid() {
    return (traceIdHigh | traceIdLow) != 0 && spanId != 0;
  }

  @Override
  public boolean isRemote() {
    return (bits & REMOTE) != 0;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof WeftSpanContext)) {
      return false;
    }
    WeftSpanContext c = (WeftSpanContext) o;
    return traceIdHigh == c.traceIdHigh && traceIdLow == c.traceIdLow && spanId == c.spanId
        && flags == c.flags && isRemote() == c.isRemote() && traceState.equals(c.traceState);
  }

  @Override
  public int hashCode() {
    return Long.hashCode(traceIdHigh * 31 + traceIdLow) * 31 + Long.hashCode(spanId);
  }

  @Override
  public String toString() {
    return "WeftSpanContext{traceId=" + getTraceId() + ", spanId=" + getSpanId() + ", flags="
        + (flags & 0xff) + ", remote=" + isRemote() + ", traceState=" + traceState + "}";
  }

  // As a Span: the non-recording span that carries this context.

  @Override
  public SpanContext getSpanContext() {
    return this;
  }

  @Override
  public boolean isRecording() {
    return false;
  }

  @Override
  public <T> Span setAttribute(AttributeKey<T> key, T value) {
    return this;
  }

  @Override
  public Span addEvent(String name, Attributes attributes) {
    return this;
  }

  @Override
  public Span addEvent(String name, Attributes attributes, long timestamp, TimeUnit unit) {
    return this;
  }

  @Override
  public Span setStatus(StatusCode statusCode, String description) {
    return this;
  }

  @Override
  public Span recordException(Throwable exception, Attributes additionalAttributes) {
    return this;
  }

  @Override
  public Span updateName(String name) {
    return this;
  }

  @Override
  public void end() {}

  @Override
  public void end(long timestamp, TimeUnit unit) {}
}
