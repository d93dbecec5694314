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

  /**
   * Parses a trimmed {@code traceparent} value into this holder. Returns false (leaving the holder
   * in an unspecified state) when the value is invalid.
   */
  public boolean parse(CharSequence v) {
    int n = v.length();
    if (n < LEN) {
      return false;
    }
    char v0 = v.charAt(0);
    char v1 = v.charAt(1);
    int d0 = Hex.digit(v0);
    int d1 = Hex.digit(v1);
    if (d0 < 0 || d1 < 0 || v.charAt(2) != '-') {
      return false;
    }
    int version = (d0 << 4) | d1;
    if (version == 0xff) {
      return false;
    }
    if (version == 0) {
      if (n != LEN) {
        return false;
      }
    } else if (n > LEN && v.charAt(LEN) != '-') {
      return false;
    }
    if (v.charAt(35) != '-' || v.charAt(52) != '-') {
      return false;
    }
    // One pass of table lookups over the 50 hex digits, then the arithmetic: no substring.
    if (!Hex.isLowerHex(v, 3, 32) || !Hex.isLowerHex(v, 36, 16) || !Hex.isLowerHex(v, 53, 2)) {
      return false;
    }
    long hi = Hex.parseLong(v, 3, 16);
    long lo = Hex.parseLong(v, 19, 16);
    long sid = Hex.parseLong(v, 36, 16);
    if ((hi | lo) == 0 || sid == 0) {
      return false;
    }
    int f = (int) Hex.parseLong(v, 53, 2);
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
