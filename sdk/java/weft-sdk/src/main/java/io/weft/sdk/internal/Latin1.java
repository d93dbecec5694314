package io.weft.sdk.internal;

import java.lang.reflect.Field;
import java.util.Arrays;

/**
 * Read-only access to the bytes a {@code String} keeps when every character is Latin-1.
 *
 * <p>Why: header parsing (traceparent, X-Ray) reads 32–48 hex digits per header. Through
 * {@code String.charAt} every shape measured about 1 ns per character (bounds check and widening
 * per call), which put the parse at 0.8–1.0 of the peer SDKs it must beat by 3×
 * (docs/benchmarks/java-sdk-floor.md). The JDK stores such a string as one byte per character
 * (compact strings, JDK 9+), with a coder field saying so: reading that array 8 bytes at a time
 * validates and decodes 8 digits in a few instructions, and the coder proves that no character
 * is above {@code U+00FF} (a proof the public API cannot give without a second pass or a copy).
 *
 * <p>The fields are reached through {@code sun.misc.Unsafe} (module {@code jdk.unsupported}),
 * only on JDK 17 to 22 and on processors that allow unaligned 8-byte loads ({@link #load8}:
 * x86-64, AArch64, ppc64le, s390x): from JDK 23 its memory-access methods are deprecated for
 * removal and JDK 24 warns on their first use. Anything unexpected at class initialization (a
 * field missing, a layout that does not read back as written, a security manager refusing)
 * turns this off, and {@link #bytes} returns null for every string, so callers fall back to
 * {@code charAt}.
 *
 * <p>Internal: callers must never write into the array returned, since the string would change.
 */
public final class Latin1 {
  private static final sun.misc.Unsafe UNSAFE;
  private static final long VALUE;
  private static final long CODER;
  private static final long BYTES;
  private static final boolean LITTLE_ENDIAN =
      java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN;

  static {
    sun.misc.Unsafe u = null;
    long value = -1;
    long coder = -1;
    long bytes = -1;
    try {
      // load8 reads 8 bytes at any offset: only where unaligned loads are allowed.
      boolean unaligned = java.util.Set.of("amd64", "x86_64", "aarch64", "ppc64le", "s390x")
          .contains(System.getProperty("os.arch", ""));
      if (unaligned && Runtime.version().feature() <= 22
          && !Boolean.getBoolean("weft.sdk.noUnsafe")) {
        Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
        f.setAccessible(true);
        sun.misc.Unsafe candidate = (sun.misc.Unsafe) f.get(null);
        Field valueField = String.class.getDeclaredField("value");
        Field coderField = String.class.getDeclaredField("coder");
        if (valueField.getType() == byte[].class && coderField.getType() == byte.class) {
          long vo = candidate.objectFieldOffset(valueField);
          long co = candidate.objectFieldOffset(coderField);
          if (readsBack(candidate, vo, co)) {
            u = candidate;
            value = vo;
            coder = co;
            bytes = candidate.arrayBaseOffset(byte[].class);
          }
          byte[] probe = {0, 1, 2, 3, 4, 5, 6, 7, 8};
          if (u != null && (u.getLong(probe, bytes + 1) != (LITTLE_ENDIAN ? 0x0807060504030201L
              : 0x0102030405060708L) || u.getByte(probe, bytes + 8) != 8)) {
            u = null; // an array layout this class does not expect
          }
        }
      }
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      u = null;
    }
    UNSAFE = u;
    VALUE = value;
    CODER = coder;
    BYTES = bytes;
  }

  private Latin1() {}

  /** Whether {@link #bytes} can return arrays on this JVM. */
  public static boolean enabled() {
    return UNSAFE != null;
  }

  /**
   * The string's characters, one byte each, when the JVM stores it as Latin-1; otherwise null
   * (a character above {@code U+00FF}, compact strings off, this class disabled, or a null
   * string). The array is the string's own: never write into it.
   */
  public static byte[] bytes(String s) {
    sun.misc.Unsafe u = UNSAFE;
    // A null string must not reach Unsafe (a read at an absolute address): callers then throw
    // the NullPointerException of charAt, as before.
    if (u == null || s == null || u.getByte(s, CODER) != 0) {
      return null;
    }
    return (byte[]) u.getObject(s, VALUE);
  }

  /**
   * The 8 bytes of {@code a} at {@code off}, big-endian, in one unchecked load: the caller must
   * have checked {@code 0 <= off && off + 8 <= a.length} (one check for several loads), and
   * {@code a} must come from {@link #bytes} (so this class is enabled).
   */
  public static long load8(byte[] a, int off) {
    long w = UNSAFE.getLong(a, BYTES + off);
    return LITTLE_ENDIAN ? Long.reverseBytes(w) : w;
  }

  /** The byte of {@code a} at {@code i}, unchecked: as {@link #load8}, the caller checked. */
  public static byte at(byte[] a, int i) {
    return UNSAFE.getByte(a, BYTES + i);
  }

  /** Checks the layout on strings whose storage is known: Latin-1, and one that cannot be. */
  private static boolean readsBack(sun.misc.Unsafe u, long value, long coder) {
    String latin = new String(new char[] {'0', 'f', '-', '\u00e9'});
    String wide = new String(new char[] {'0', '\u0132'});
    if (u.getByte(latin, coder) != 0 || u.getByte(wide, coder) == 0) {
      return false; // compact strings off (-XX:-CompactStrings), or another encoding
    }
    Object o = u.getObject(latin, value);
    return o instanceof byte[]
        && Arrays.equals((byte[]) o, new byte[] {'0', 'f', '-', (byte) 0xe9});
  }
}
