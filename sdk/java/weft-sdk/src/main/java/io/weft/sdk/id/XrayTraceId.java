package io.weft.sdk.id;

import io.weft.sdk.internal.Latin1;

/**
 * The X-Ray form of a trace ID, {@code 1-{8 hex epoch}-{24 hex}} (35 characters), formatted into
 * and parsed from caller buffers without allocating (the X-Ray benchmarks beside the AWS X-Ray SDK's
 * {@code TraceID}).
 */
public final class XrayTraceId {
  /** The length of {@code 1-xxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx}. */
  public static final int LEN = 35;

  public long high;
  public long low;

  /** Writes the X-Ray form of {@code (high, low)} into {@code out[off, off+35)}. */
  public static void format(long high, long low, char[] out, int off) {
    out[off] = '1';
    out[off + 1] = '-';
    Hex.writeInt((int) (high >>> 32), out, off + 2);
    out[off + 10] = '-';
    Hex.writeInt((int) high, out, off + 11);
    Hex.writeLong(low, out, off + 19);
  }

  /** The X-Ray form as a new string. */
  public static String toString(long high, long low) {
    char[] c = new char[LEN];
    format(high, low, c, 0);
    return new String(c);
  }

  /**
   * Parses {@code 1-{1..8 hex}-{24 hex}} (lowercase) at {@code s[off, end)} into this holder;
   * returns false (leaving the holder unchanged) when malformed or all zero.
   *
   * <p>One pass: the 24 hex digits of the random part and an 8-digit epoch go through
   * {@link Hex#hex8} (SWAR), a shorter epoch digit by digit; every part returns -1 when bad, so one
   * sign test validates them all (xray_parse benchmark).
   */
  public boolean parse(String s, int off, int end) {
    int n = end - off;
    if (n < 28 || n > LEN) {
      return false;
    }
    byte[] latin1 = Latin1.bytes(s);
    if (latin1 != null && n == LEN) {
      return parseLatin1(latin1, off);
    }
    if (s.charAt(off) != '1' || s.charAt(off + 1) != '-') {
      return false;
    }
    int dash = end - 25;
    if (s.charAt(dash) != '-') {
      return false;
    }
    long epoch;
    long a;
    long b;
    long c;
    if (latin1 != null) { // a short epoch: the string's bytes read once (Latin1)
      epoch = shortHex(s, off + 2, dash);
      a = Hex.hex8(latin1, dash + 1);
      b = Hex.hex8(latin1, dash + 9);
      c = Hex.hex8(latin1, dash + 17);
    } else {
      epoch = n == LEN ? Hex.hex8(s, off + 2) : shortHex(s, off + 2, dash);
      a = Hex.hex8(s, dash + 1);
      b = Hex.hex8(s, dash + 9);
      c = Hex.hex8(s, dash + 17);
    }
    return set(epoch, a, b, c);
  }

  /**
   * The usual case, an 8-digit epoch, from the string's Latin-1 bytes: one range check, four
   * unchecked 8-byte loads validated with one branch ({@link Hex#hexBits}; 14.1 ns with a check
   * and a branch per word, 12.1–12.5 ns now, against 34.1–34.7 ns for the AWS SDK's
   * {@code TraceID.fromString}), the separators tested on the bytes too, not through
   * {@code charAt} (a coder test and a bounds check each).
   */
  private boolean parseLatin1(byte[] s, int off) {
    if (off < 0 || off > s.length - LEN) { // not off + LEN: it can overflow
      return false;
    }
    long e = Latin1.load8(s, off + 2);
    long a = Latin1.load8(s, off + 11);
    long b = Latin1.load8(s, off + 19);
    long c = Latin1.load8(s, off + 27);
    long good = Hex.hexBits(e) & Hex.hexBits(a) & Hex.hexBits(b) & Hex.hexBits(c);
    if ((good & Hex.HIGH_BITS) != Hex.HIGH_BITS || Latin1.at(s, off) != '1'
        || Latin1.at(s, off + 1) != '-' || Latin1.at(s, off + 10) != '-') {
      return false;
    }
    long hi = Hex.decode16(e, a);
    long lo = Hex.decode16(b, c);
    if ((hi | lo) == 0) {
      return false;
    }
    high = hi;
    low = lo;
    return true;
  }

  private boolean set(long epoch, long a, long b, long c) {
    if ((epoch | a | b | c) < 0) {
      return false;
    }
    long hi = epoch << 32 | a;
    long lo = b << 32 | c;
    if ((hi | lo) == 0) {
      return false;
    }
    high = hi;
    low = lo;
    return true;
  }

  private static long shortHex(String s, int from, int to) {
    if (to <= from) {
      return -1;
    }
    long x = 0;
    for (int i = from; i < to; i++) {
      int d = Hex.lowerOrNegative(s.charAt(i));
      if (d < 0) {
        return -1;
      }
      x = x << 4 | d;
    }
    return x;
  }
}
