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

  /**
   * Parses {@code 1-{1..8 hex}-{24 hex}} (lowercase) at {@code s[off, end)} into this holder;
   * returns false when malformed or all zero.
   */
  public boolean parse(CharSequence s, int off, int end) {
    int n = end - off;
    if (n < 28 || n > LEN || s.charAt(off) != '1' || s.charAt(off + 1) != '-') {
      return false;
    }
    int dash = end - 25;
    if (s.charAt(dash) != '-') {
      return false;
    }
    int epochLen = dash - off - 2;
    if (epochLen < 1 || epochLen > 8 || !Hex.isLowerHex(s, off + 2, epochLen)
        || !Hex.isLowerHex(s, dash + 1, 24)) {
      return false;
    }
    long hi = (Hex.parseLong(s, off + 2, epochLen) << 32) | Hex.parseLong(s, dash + 1, 8);
    long lo = Hex.parseLong(s, dash + 9, 16);
    if ((hi | lo) == 0) {
      return false;
    }
    high = hi;
    low = lo;
    return true;
  }
}
