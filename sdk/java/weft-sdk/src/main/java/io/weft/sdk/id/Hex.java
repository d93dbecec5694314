package io.weft.sdk.id;

import io.weft.sdk.internal.Latin1;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * Lowercase hex encoding and strict decoding of IDs (spec/ids.md "Hex encoding").
 *
 * <p>Decoders return {@code -1} in {@link #digit} for anything that is not a lowercase hex digit;
 * callers that accept uppercase use {@link #digitAnyCase}.
 */
public final class Hex {
  private static final char[] DIGITS = "0123456789abcdef".toCharArray();
  // One table lookup per character instead of range checks: the traceparent extract benchmark
  // parses 48 digits per header, and branch-free lookups keep it short.
  private static final byte[] LOWER = new byte[128];
  private static final byte[] ANY = new byte[128];

  static {
    java.util.Arrays.fill(LOWER, (byte) -1);
    java.util.Arrays.fill(ANY, (byte) -1);
    for (int i = 0; i < 10; i++) {
      LOWER['0' + i] = (byte) i;
      ANY['0' + i] = (byte) i;
    }
    for (int i = 0; i < 6; i++) {
      LOWER['a' + i] = (byte) (10 + i);
      ANY['a' + i] = (byte) (10 + i);
      ANY['A' + i] = (byte) (10 + i);
    }
  }

  private Hex() {}

  /** Returns the value of a lowercase hex digit, or -1. */
  public static int digit(char c) {
    return c < 128 ? LOWER[c] : -1;
  }

  /** Returns the value of a hex digit of either case, or -1. */
  public static int digitAnyCase(char c) {
    return c < 128 ? ANY[c] : -1;
  }

  /**
   * Parses {@code len} (1..16) lowercase hex digits of {@code s} at {@code off} as an unsigned long.
   * Returns false through {@code ok[0]}-free API: callers check {@link #isLowerHex} first.
   */
  public static long parseLong(CharSequence s, int off, int len) {
    long v = 0;
    for (int i = 0; i < len; i++) {
      v = (v << 4) | LOWER[s.charAt(off + i)];
    }
    return v;
  }

  /** Parses hex digits of either case; callers check {@link #isHexAnyCase} first. */
  public static long parseLongAnyCase(CharSequence s, int off, int len) {
    long v = 0;
    for (int i = 0; i < len; i++) {
      v = (v << 4) | ANY[s.charAt(off + i)];
    }
    return v;
  }

  /**
   * The value of lowercase hex digit {@code c}, or a negative number: for one-pass parsers that
   * OR every result together and check the sign once at the end (no branch per character).
   */
  public static int lowerOrNegative(char c) {
    return c < 128 ? LOWER[c] : -1;
  }

  private static final VarHandle BIG_ENDIAN_LONG =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
  private static final long ONES = 0x0101010101010101L;
  private static final long HIGH = 0x8080808080808080L;

  /**
   * Decodes the 8 lowercase hex digits of {@code s} at {@code off} (which the caller has checked
   * are in range) into the low 32 bits of the result, or returns -1 when any of them is not a
   * lowercase hex digit.
   *
   * <p>A Latin-1 string's bytes are read 8 at a time ({@link Latin1}); otherwise the characters
   * are packed one per byte of a long. Either way they are validated and decoded together
   * (SWAR): four additions find the bytes in {@code 0-9} and in {@code a-f}, and three shift-masks
   * gather the nibbles. That replaces a table load, a branch and a dependent shift per character
   * (traceparent_extract and xray_parse benchmarks). Upper-case digits are rejected, as W3C Trace
   * Context and X-Ray require.
   */
  public static long hex8(String s, int off) {
    byte[] latin1 = Latin1.bytes(s);
    if (latin1 != null) {
      return hex8(latin1, off);
    }
    char c0 = s.charAt(off);
    char c1 = s.charAt(off + 1);
    char c2 = s.charAt(off + 2);
    char c3 = s.charAt(off + 3);
    char c4 = s.charAt(off + 4);
    char c5 = s.charAt(off + 5);
    char c6 = s.charAt(off + 6);
    char c7 = s.charAt(off + 7);
    if ((c0 | c1 | c2 | c3 | c4 | c5 | c6 | c7) >= 0x80) {
      return -1; // non-ASCII; also keeps every packed byte below 0x80 so the additions never carry
    }
    long w = (long) c0 << 56 | (long) c1 << 48 | (long) c2 << 40 | (long) c3 << 32
        | (long) c4 << 24 | (long) c5 << 16 | (long) c6 << 8 | c7;
    return swar8(w);
  }

  /**
   * {@link #hex8} over a string's Latin-1 bytes ({@link Latin1#bytes}): the 8 bytes at
   * {@code off} (in range) in one load, no per-character {@code charAt}.
   */
  public static long hex8(byte[] latin1, int off) {
    long w = (long) BIG_ENDIAN_LONG.get(latin1, off);
    return (w & HIGH) != 0 ? -1 : swar8(w);
  }

  /** {@link #hex2} over a string's Latin-1 bytes. */
  public static int hex2(byte[] latin1, int off) {
    int a = latin1[off];
    int b = latin1[off + 1];
    return (a | b) < 0 ? -1 : (LOWER[a] << 4) | LOWER[b];
  }

  /** The high bit of every byte of a long: the mask for {@link #hexBits}. */
  public static final long HIGH_BITS = HIGH;

  /**
   * For parsers that validate several words with one branch: the high bit of each byte of the
   * result is set when that byte of {@code w} (8 bytes of text, big-endian) is a lowercase hex
   * digit, so the words are all digits when {@code (hexBits(a) & hexBits(b) & ... & HIGH_BITS)
   * == HIGH_BITS}.
   *
   * <p>No separate ASCII test is needed: the lowest byte of {@code 0x80} or more gets no carry
   * from the bytes below it and fails both ranges by itself (0x80–0xff plus 0x50 or 0x1f either
   * keeps the high bit set on the upper bound's side or wraps below 0x80), so a word holding one
   * always fails, whatever the carries do above it. HeaderCodecTest checks every byte at every
   * position.
   */
  public static long hexBits(long w) {
    return ((w + 0x50 * ONES) & ~(w + 0x46 * ONES)) | ((w + 0x1f * ONES) & ~(w + 0x19 * ONES));
  }

  /**
   * The nibble values of 8 digits that {@link #hexBits} found good, one per byte: a letter is the
   * only digit with bit 6 set, and adds 9 to its low nibble.
   */
  public static long nibbles(long w) {
    long l = (w >>> 6) & ONES;
    return (w & 0x0f * ONES) + (l << 3) + l;
  }

  /**
   * The 16 digits of {@code a} (the high half) and {@code b}, two words that {@link #hexBits}
   * found good, as one long. Their nibbles are found together, interleaved in one long
   * ({@code a0 b0 a1 b1 ...}): the low nibbles of both words, plus 9 for each letter (the only
   * digits with bit 6 set). Three delta swaps then unzip it (Hacker's Delight 7-6). 30 shifts,
   * masks and adds: 12 for the nibbles and 18 for the swaps, against 32 both for each word's
   * {@link #nibbles} interleaved afterwards and for gathering each half on its own (xray_parse
   * benchmark: 12.2 -> 11.7 ns side by side).
   */
  public static long decode16(long a, long b) {
    long l = (a >>> 2 & ONES << 4) | (b >>> 6 & ONES);
    long m = ((a & 0x0f * ONES) << 4 | (b & 0x0f * ONES)) + (l << 3) + l;
    long t = (m ^ (m >>> 4)) & 0x00f000f000f000f0L;
    m ^= t ^ (t << 4);
    t = (m ^ (m >>> 8)) & 0x0000ff000000ff00L;
    m ^= t ^ (t << 8);
    t = (m ^ (m >>> 16)) & 0x00000000ffff0000L;
    return m ^ t ^ (t << 16);
  }

  /** {@link #hex8} for 8 ASCII bytes packed big-endian into {@code w}, each below 0x80. */
  static long swar8(long w) {
    // The high bit of each byte of (w + k) is set when that byte is >= 0x80 - k.
    long digit = (w + 0x50 * ONES) & ~(w + 0x46 * ONES); // 0x30 <= b <= 0x39
    long letter = (w + 0x1f * ONES) & ~(w + 0x19 * ONES); // 0x61 <= b <= 0x66
    if (((digit | letter) & HIGH) != HIGH) {
      return -1;
    }
    // '0'..'9' -> b & 0xf; 'a'..'f' -> (b & 0xf) + 9
    long n = (w & 0x0f * ONES) + ((letter & HIGH) >>> 7) * 9;
    n = (n | (n >>> 4)) & 0x00ff00ff00ff00ffL;
    n = (n | (n >>> 8)) & 0x0000ffff0000ffffL;
    return (n | (n >>> 16)) & 0xffffffffL;
  }

  /**
   * Decodes the 2 lowercase hex digits of {@code s} at {@code off} (in range), or returns a
   * negative number when either is not a lowercase hex digit.
   */
  public static int hex2(String s, int off) {
    char a = s.charAt(off);
    char b = s.charAt(off + 1);
    return a < 128 && b < 128 ? (LOWER[a] << 4) | LOWER[b] : -1;
  }

  /** Reports whether {@code s[off, off+len)} are all lowercase hex digits. */
  public static boolean isLowerHex(CharSequence s, int off, int len) {
    int bad = 0;
    for (int i = 0; i < len; i++) {
      char c = s.charAt(off + i);
      bad |= c >= 128 ? -1 : LOWER[c];
    }
    return bad >= 0;
  }

  /** Reports whether {@code s[off, off+len)} are all hex digits of either case. */
  public static boolean isHexAnyCase(CharSequence s, int off, int len) {
    int bad = 0;
    for (int i = 0; i < len; i++) {
      char c = s.charAt(off + i);
      bad |= c >= 128 ? -1 : ANY[c];
    }
    return bad >= 0;
  }

  /** Writes {@code v} as 16 lowercase hex digits into {@code out} at {@code off}. */
  public static void writeLong(long v, char[] out, int off) {
    for (int i = 15; i >= 0; i--) {
      out[off + i] = DIGITS[(int) (v & 0xf)];
      v >>>= 4;
    }
  }

  /** Writes {@code v} as 16 lowercase hex digits (ASCII) into {@code out} at {@code off}. */
  public static void writeLong(long v, byte[] out, int off) {
    for (int i = 15; i >= 0; i--) {
      out[off + i] = (byte) DIGITS[(int) (v & 0xf)];
      v >>>= 4;
    }
  }

  /** Writes the low 32 bits of {@code v} as 8 lowercase hex digits. */
  public static void writeInt(int v, char[] out, int off) {
    for (int i = 7; i >= 0; i--) {
      out[off + i] = DIGITS[v & 0xf];
      v >>>= 4;
    }
  }

  /** Writes one byte as 2 lowercase hex digits. */
  public static void writeByte(int v, char[] out, int off) {
    out[off] = DIGITS[(v >>> 4) & 0xf];
    out[off + 1] = DIGITS[v & 0xf];
  }

  /** Returns 16 lowercase hex digits. */
  public static String ofLong(long v) {
    char[] c = new char[16];
    writeLong(v, c, 0);
    return new String(c);
  }

  /** Returns 32 lowercase hex digits of a 128-bit ID. */
  public static String ofTraceId(long high, long low) {
    char[] c = new char[32];
    writeLong(high, c, 0);
    writeLong(low, c, 16);
    return new String(c);
  }

  /** Returns the lowercase hex encoding of {@code bytes}. */
  public static String of(byte[] bytes) {
    char[] c = new char[bytes.length * 2];
    for (int i = 0; i < bytes.length; i++) {
      writeByte(bytes[i] & 0xff, c, 2 * i);
    }
    return new String(c);
  }

  /** Decodes lowercase or uppercase hex into bytes; throws IllegalArgumentException if malformed. */
  public static byte[] decode(CharSequence s) {
    if ((s.length() & 1) != 0 || !isHexAnyCase(s, 0, s.length())) {
      throw new IllegalArgumentException("not hex: " + s);
    }
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) parseLongAnyCase(s, 2 * i, 2);
    }
    return out;
  }

  /** Writes {@code v} big-endian into {@code out} at {@code off}. */
  public static void putLong(byte[] out, int off, long v) {
    for (int i = 7; i >= 0; i--) {
      out[off + i] = (byte) v;
      v >>>= 8;
    }
  }

  /** Reads 8 bytes big-endian. */
  public static long getLong(byte[] in, int off) {
    long v = 0;
    for (int i = 0; i < 8; i++) {
      v = (v << 8) | (in[off + i] & 0xff);
    }
    return v;
  }

  /** The canonical trace-ID check: 32 lowercase hex digits, not all zero. */
  public static boolean isValidTraceId(CharSequence s) {
    return s.length() == 32 && isLowerHex(s, 0, 32)
        && (parseLong(s, 0, 16) | parseLong(s, 16, 16)) != 0;
  }

  /** The canonical span-ID check: 16 lowercase hex digits, not all zero. */
  public static boolean isValidSpanId(CharSequence s) {
    return s.length() == 16 && isLowerHex(s, 0, 16) && parseLong(s, 0, 16) != 0;
  }
}
