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
    // holder parseSpanContext makes is scalar-replaced (traceparent_extract (weft_api): 96 B),
    // and the parse of the Latin-1 path compiles under InlineSmallCode (see parseLatin1).
    byte[] latin1 = Latin1.bytes(v);
    return latin1 != null ? parseLatin1(latin1, n) : parseChars(v, n);
  }

  /**
   * A Latin-1 string's own bytes ({@link Latin1}): the six 8-digit words are loaded unchecked
   * ({@code s.length == n >= LEN}, checked by {@link #parse}), validated together with one
   * branch and packed two at a time ({@link Hex#hexBits}, {@link Hex#decode16}); the version and
   * flags go through the same word check.
   *
   * <p>Why a loop that loads each word twice: written out with the six words held from check to
   * pack, C2 spilled registers and compiled {@code parse} to more than the 2,500 bytes
   * ({@code InlineSmallCode}) below which it inlines a compiled method into its caller. Each
   * call then paid ~9 ns (traceparent_extract: 32.3 ns held, 28.0 ns reloaded; 36.3 before).
   */
  private boolean parseLatin1(byte[] s, int n) {
    long head = Latin1.load8(s, 0); // version, '-', 5 digits of the trace ID
    long tail = Latin1.load8(s, 47); // 5 digits of the span ID, '-', flags
    // the version and flags digits in one word, the other digits '0'
    long vf = 0x3030303000000000L | (head >>> 48) << 16 | (tail & 0xffff);
    long good = Hex.hexBits(vf);
    for (int i = 0; i < 6; i++) {
      good &= Hex.hexBits(Latin1.load8(s, 3 + 8 * i + (i >> 2))); // 3, 11, 19, 27, 36, 44
    }
    if ((good & Hex.HIGH_BITS) != Hex.HIGH_BITS || (head & 0xff0000000000L) != 0x2d0000000000L
        || (tail & 0xff0000L) != 0x2d0000L || Latin1.at(s, 35) != '-') {
      return false;
    }
    // The four digits' nibbles, one per low byte (version, then flags), taken out with shifts,
    // not a decode16 (traceparent_extract: 26.9 -> 26.5 ns side by side). The flags pass as x: set
    // keeps only their two low bits, which are the low bits of x.
    int x = (int) Hex.nibbles(vf);
    return set(x >>> 20 & 0xf0 | x >>> 16 & 0x0f,
        Hex.decode16(Latin1.load8(s, 3), Latin1.load8(s, 11)),
        Hex.decode16(Latin1.load8(s, 19), Latin1.load8(s, 27)),
        Hex.decode16(Latin1.load8(s, 36), Latin1.load8(s, 44)),
        x, n, n > LEN && Latin1.at(s, LEN) != '-');
  }

  /** Any other string (a character above U+00FF, or {@link Latin1} off), through charAt. */
  private boolean parseChars(String v, int n) {
    if (v.charAt(2) != '-' || v.charAt(35) != '-' || v.charAt(52) != '-') {
      return false;
    }
    int version = Hex.hex2(v, 0);
    long a = Hex.hex8(v, 3);
    long b = Hex.hex8(v, 11);
    long c = Hex.hex8(v, 19);
    long d = Hex.hex8(v, 27);
    long e = Hex.hex8(v, 36);
    long f = Hex.hex8(v, 44);
    int fl = Hex.hex2(v, 53);
    // every hex part is -1 when it held a bad digit: one sign test validates them all
    if ((version | fl | a | b | c | d | e | f) < 0) {
      return false;
    }
    return set(version, a << 32 | b, c << 32 | d, e << 32 | f, fl, n,
        n > LEN && v.charAt(LEN) != '-');
  }

  /**
   * Checks what the digits alone do not (version ff, zero IDs, the length) and stores. Only the two
   * low bits of {@code fl} are read.
   */
  private boolean set(int version, long hi, long lo, long sid, int fl, int n,
      boolean badSuffix) {
    if (version == 0xff || (hi | lo) == 0 || sid == 0) {
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
   * Parses a {@code traceparent} value, with or without surrounding spaces and tabs, into a remote
   * span context with an empty trace state, or returns null when it is invalid. Allocates only
   * the span context.
   *
   * <p>The value is parsed as it is first, and trimmed only when that fails: a value that parses
   * untrimmed has a digit first, and after the 55th character (version 00: nothing; a later
   * version: a {@code -}) only a suffix, so trimming would change nothing parsed. That saves
   * reading both ends of every header before the parse (traceparent_extract (weft_api): 3 ns).
   */
  public static WeftSpanContext parseSpanContext(String v) {
    Traceparent tp = new Traceparent(); // scalar-replaced once parse is inlined
    return tp.parse(v) ? tp.toSpanContext(WeftTraceState.EMPTY) : parseTrimmed(v);
  }

  /** {@link #parseSpanContext} of a value that did not parse as it is: trimmed, if that helps. */
  private static WeftSpanContext parseTrimmed(String v) {
    String t = Carriers.trim(v);
    if (t == v) {
      return null;
    }
    Traceparent tp = new Traceparent();
    return tp.parse(t) ? tp.toSpanContext(WeftTraceState.EMPTY) : null;
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
