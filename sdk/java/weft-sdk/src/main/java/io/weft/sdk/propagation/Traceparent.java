package io.weft.sdk.propagation;

import io.weft.sdk.id.Hex;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;

/**
 * The allocation-free {@code traceparent} codec (spec/propagation.md "traceparent extract" and
 * "traceparent inject"). {@link #parse} fills this mutable holder, which a request loop can reuse,
 * and {@link #format} writes into a caller's {@code char[55]}.
 *
 * <p>{@link W3CTraceContextPropagator} uses the same code behind the OpenTelemetry API.
 */
public final class Traceparent {
  /** The length of a version-00 header. */
  public static final int LEN = 55;

  public long traceIdHigh;
  public long traceIdLow;
  public long spanId;
  /** The trace flags after masking (00: sampled and random; future versions: sampled only). */
  public byte flags;

  private int bad;
  /** {@code len} lowercase hex digits at {@code off}; a bad digit makes {@link #bad} negative. */
  private long hex(String v, int off, int len) {
    long x = 0;
    int b = 0;
    for (int i = off; i < off + len; i++) {
      int d = Hex.lowerOrNegative(v.charAt(i));
      b |= d;
      x = (x << 4) | (d & 0xf);
    }
    bad |= b;
    return x;
  }

  /**
   * Parses a trimmed {@code traceparent} value into this holder. Returns false (leaving the holder
   * in an unspecified state) when the value is invalid.
   */
  public boolean parse(String v) {
    int n = v.length();
    if (n < LEN || v.charAt(2) != '-' || v.charAt(35) != '-' || v.charAt(52) != '-') {
      return false;
    }
    bad = 0;
    // One pass over the 50 hex digits with the validity check folded into an OR: no substring,
    // no branch per character (traceparent_extract benchmark).
    int version = (int) hex(v, 0, 2);
    long hi = hex(v, 3, 16);
    long lo = hex(v, 19, 16);
    long sid = hex(v, 36, 16);
    int f = (int) hex(v, 53, 2);
    if (bad < 0 || version == 0xff || (hi | lo) == 0 || sid == 0) {
      return false;
    }
    if (version == 0 ? n != LEN : n > LEN && v.charAt(LEN) != '-') {
      return false;
    }
    traceIdHigh = hi;
    traceIdLow = lo;
    spanId = sid;
    flags = (byte) (version == 0 ? f & 0x03 : f & 0x01);
    return true;
  }

  /** The parsed context as a remote span context. */
  public WeftSpanContext toSpanContext(WeftTraceState ts) {
    return WeftSpanContext.createRemote(traceIdHigh, traceIdLow, spanId, flags, ts, false, false,
        null);
  }

  /**
   * Writes {@code 00-{trace}-{span}-{flags}} into {@code out[0..55)}. Flags are masked to sampled
   * and random.
   */
  public static void format(long traceIdHigh, long traceIdLow, long spanId, byte flags,
      char[] out) {
    out[0] = '0';
    out[1] = '0';
    out[2] = '-';
    Hex.writeLong(traceIdHigh, out, 3);
    Hex.writeLong(traceIdLow, out, 19);
    out[35] = '-';
    Hex.writeLong(spanId, out, 36);
    out[52] = '-';
    Hex.writeByte(flags & 0x03, out, 53);
  }

  /** Writes the header for {@code sc} into {@code out[0..55)}. */
  public static void format(WeftSpanContext sc, char[] out) {
    format(sc.traceIdHigh(), sc.traceIdLow(), sc.spanIdLong(), sc.flags(), out);
  }

  /** Returns the header value for {@code sc}. */
  public static String format(WeftSpanContext sc) {
    char[] c = new char[LEN];
    format(sc, c);
    return new String(c);
  }
}
