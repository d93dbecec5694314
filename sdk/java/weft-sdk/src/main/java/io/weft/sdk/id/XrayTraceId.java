package io.weft.sdk.id;

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

  private int bad;
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
   * Parses {@code 1-{1..8 hex}-{24 hex}} (lowercase) at {@code s[off, end)} into this holder;
   * returns false when malformed or all zero. One pass, validity folded into an OR.
   */
  public boolean parse(String s, int off, int end) {
    int n = end - off;
    if (n < 28 || n > LEN || s.charAt(off) != '1' || s.charAt(off + 1) != '-') {
      return false;
    }
    int dash = end - 25;
    if (s.charAt(dash) != '-') {
      return false;
    }
    int epochLen = dash - off - 2;
    if (epochLen < 1) {
      return false;
    }
    bad = 0;
    long hi = (hex(s, off + 2, epochLen) << 32) | hex(s, dash + 1, 8);
    long lo = hex(s, dash + 9, 16);
    if (bad < 0 || (hi | lo) == 0) {
      return false;
    }
    high = hi;
    low = lo;
    return true;
  }
}
