package io.weft.sdk.trace;

import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.weft.sdk.id.Hex;

/**
 * A span context holding its IDs as longs (spec/ids.md "Lazy hex"): the hex strings the
 * OpenTelemetry API returns from {@link #getTraceId()} and {@link #getSpanId()} are built on first
 * use, at most once per context, and cached.
 *
 * <p>It also carries the format-specific members that travel with a propagated context
 * (spec/propagation.md): the B3 and Jaeger debug states and the X-Ray {@code Lineage}.
 */
public final class WeftSpanContext implements SpanContext {
  /** The W3C sampled flag. */
  public static final byte SAMPLED = 0x01;
  /** The W3C Level 2 random trace-id flag. */
  public static final byte RANDOM = 0x02;

  /** The invalid context (all-zero IDs). */
  public static final WeftSpanContext INVALID =
      new WeftSpanContext(0, 0, 0, (byte) 0, WeftTraceState.EMPTY, false, false, false, null);

  private final long traceIdHigh;
  private final long traceIdLow;
  private final long spanId;
  private final byte flags;
  private final boolean remote;
  private final boolean b3Debug;
  private final boolean jaegerDebug;
  private final WeftTraceState traceState;
  private final String xrayLineage;
  // Racy single-check caches: String is immutable (final fields), so a thread that sees a
  // non-null value sees a complete string; two threads may both compute it, which is harmless.
  private String traceIdHex;
  private String spanIdHex;
  // Header values built on first inject and reused: a context injected into several requests
  // (retries, fan-out of one client span) formats its header once.
  private String traceparent;
  private String xrayHeader;
  private String xrayTraceId;

  WeftSpanContext(long traceIdHigh, long traceIdLow, long spanId, byte flags,
      WeftTraceState traceState, boolean remote, boolean b3Debug, boolean jaegerDebug,
      String xrayLineage) {
    this.traceIdHigh = traceIdHigh;
    this.traceIdLow = traceIdLow;
    this.spanId = spanId;
    this.flags = flags;
    this.traceState = traceState;
    this.remote = remote;
    this.b3Debug = b3Debug;
    this.jaegerDebug = jaegerDebug;
    this.xrayLineage = xrayLineage;
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
    return new WeftSpanContext(traceIdHigh, traceIdLow, spanId, flags, ts, remote, b3Debug,
        jaegerDebug, xrayLineage);
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
    return b3Debug;
  }

  public boolean jaegerDebug() {
    return jaegerDebug;
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
    String h = traceIdHex;
    if (h == null) {
      h = Hex.ofTraceId(traceIdHigh, traceIdLow);
      traceIdHex = h;
    }
    return h;
  }

  @Override
  public String getSpanId() {
    String h = spanIdHex;
    if (h == null) {
      h = Hex.ofLong(spanId);
      spanIdHex = h;
    }
    return h;
  }

  /** The {@code traceparent} header value for this context, built at most once. */
  public String traceparentHeader() {
    String h = traceparent;
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
      traceparent = h;
    }
    return h;
  }

  /** The X-Ray form of the trace ID ({@code 1-xxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx}), built once. */
  public String xrayTraceId() {
    String h = xrayTraceId;
    if (h == null) {
      h = io.weft.sdk.id.XrayTraceId.toString(traceIdHigh, traceIdLow);
      xrayTraceId = h;
    }
    return h;
  }

  /**
   * The X-Ray header value for this context, built at most once by {@code builder} (the X-Ray
   * propagator) and cached.
   */
  public String xrayHeader(java.util.function.Function<WeftSpanContext, String> builder) {
    String h = xrayHeader;
    if (h == null) {
      h = builder.apply(this);
      xrayHeader = h;
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
    return remote;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof WeftSpanContext)) {
      return false;
    }
    WeftSpanContext c = (WeftSpanContext) o;
    return traceIdHigh == c.traceIdHigh && traceIdLow == c.traceIdLow && spanId == c.spanId
        && flags == c.flags && remote == c.remote && traceState.equals(c.traceState);
  }

  @Override
  public int hashCode() {
    return Long.hashCode(traceIdHigh * 31 + traceIdLow) * 31 + Long.hashCode(spanId);
  }

  @Override
  public String toString() {
    return "WeftSpanContext{traceId=" + getTraceId() + ", spanId=" + getSpanId() + ", flags="
        + (flags & 0xff) + ", remote=" + remote + ", traceState=" + traceState + "}";
  }
}
