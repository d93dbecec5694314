package io.weft.sdk.propagation;

import io.weft.sdk.id.Hex;
import io.weft.sdk.internal.Latin1;
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
   * unchanged) when the value is invalid.
   */
  public boolean parse(String v) {
    int n = v.length();
    if (n < LEN) {
      return false;
    }
    // Three small methods rather than one: parse stays small enough for C2 to inline, so the
    // holder parseSpanContext makes is scalar-replaced (traceparent_extract (weft_api): 96 B).
    byte[] latin1 = Latin1.bytes(v);
    return latin1 != null ? parseLatin1(latin1, n) : parseChars(v, n);
  }

  /** A Latin-1 string's own bytes ({@link Latin1}), 8 digits per load. */
  private boolean parseLatin1(byte[] s, int n) {
    if (s[2] != '-' || s[35] != '-' || s[52] != '-') {
      return false;
    }
    return set(Hex.hex2(s, 0), Hex.hex8(s, 3), Hex.hex8(s, 11), Hex.hex8(s, 19), Hex.hex8(s, 27),
        Hex.hex8(s, 36), Hex.hex8(s, 44), Hex.hex2(s, 53), n, n > LEN && s[LEN] != '-');
  }

  /** Any other string (a character above U+00FF, or {@link Latin1} off), through charAt. */
  private boolean parseChars(String v, int n) {
    if (v.charAt(2) != '-' || v.charAt(35) != '-' || v.charAt(52) != '-') {
      return false;
    }
    return set(Hex.hex2(v, 0), Hex.hex8(v, 3), Hex.hex8(v, 11), Hex.hex8(v, 19), Hex.hex8(v, 27),
        Hex.hex8(v, 36), Hex.hex8(v, 44), Hex.hex2(v, 53), n, n > LEN && v.charAt(LEN) != '-');
  }

  /**
   * Validates the decoded fields and stores them. Every hex part is -1 when it held a bad digit,
   * so one sign test of their OR validates the whole header (one pass over the 50 digits).
   */
  private boolean set(int version, long a, long b, long c, long d, long e, long f, int fl, int n,
      boolean badSuffix) {
    if ((version | fl | a | b | c | d | e | f) < 0 || version == 0xff) {
      return false;
    }
    long hi = a << 32 | b;
    long lo = c << 32 | d;
    long sid = e << 32 | f;
    if ((hi | lo) == 0 || sid == 0) {
      return false;
    }
    if (version == 0 ? n != LEN : badSuffix) {
      return false;
    }
    traceIdHigh = hi;
    traceIdLow = lo;
    spanId = sid;
    flags = (byte) (version == 0 ? fl & 0x03 : fl & 0x01);
    return true;
  }

  /**
   * Parses a trimmed {@code traceparent} value into a remote span context with an empty trace
   * state, or returns null when it is invalid. Allocates only the span context.
   */
  public static WeftSpanContext parseSpanContext(String v) {
    Traceparent tp = new Traceparent(); // scalar-replaced once parse is inlined
    return tp.parse(v) ? tp.toSpanContext(WeftTraceState.EMPTY) : null;
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
