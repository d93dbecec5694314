package io.weft.sdk.export;

import java.util.Arrays;

/**
 * A growable protobuf writer into one reused {@code byte[]}. Nested messages are written in place:
 * {@link #begin} remembers where the body starts and {@link #end} inserts the minimal varint
 * length in front of it, moving the body (one {@code arraycopy} per level; OTLP nests at most six
 * levels deep). This avoids both a size pre-pass and a tree of message objects.
 */
public final class ProtoWriter {
  static final int VARINT = 0;
  static final int FIXED64 = 1;
  static final int LEN = 2;
  static final int FIXED32 = 5;

  private byte[] buf;
  private int pos;

  public ProtoWriter(int initialCapacity) {
    buf = new byte[Math.max(64, initialCapacity)];
  }

  /** Forgets what was written; keeps the buffer. */
  public void reset() {
    pos = 0;
  }

  public int size() {
    return pos;
  }

  /** The backing array; bytes {@code [0, size())} are the message. */
  public byte[] array() {
    return buf;
  }

  public byte[] toByteArray() {
    return Arrays.copyOf(buf, pos);
  }

  private void ensure(int n) {
    if (pos + n > buf.length) {
      buf = Arrays.copyOf(buf, Math.max(buf.length * 2, pos + n));
    }
  }

  void tag(int field, int wireType) {
    varint((field << 3) | wireType);
  }

  void varint(long v) {
    ensure(10);
    while ((v & ~0x7fL) != 0) {
      buf[pos++] = (byte) ((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    buf[pos++] = (byte) v;
  }

  static int varintSize(long v) {
    int n = 1;
    while ((v & ~0x7fL) != 0) {
      n++;
      v >>>= 7;
    }
    return n;
  }

  void fixed64(long v) {
    ensure(8);
    for (int i = 0; i < 8; i++) {
      buf[pos++] = (byte) v;
      v >>>= 8;
    }
  }

  void fixed32(int v) {
    ensure(4);
    for (int i = 0; i < 4; i++) {
      buf[pos++] = (byte) v;
      v >>>= 8;
    }
  }

  /** Writes a big-endian long as 8 raw bytes (IDs). */
  void idBytes(long v) {
    ensure(8);
    for (int i = 7; i >= 0; i--) {
      buf[pos + i] = (byte) v;
      v >>>= 8;
    }
    pos += 8;
  }

  void bytesField(int field, byte[] b) {
    tag(field, LEN);
    varint(b.length);
    ensure(b.length);
    System.arraycopy(b, 0, buf, pos, b.length);
    pos += b.length;
  }

  void raw(byte[] b, int off, int len) {
    ensure(len);
    System.arraycopy(b, off, buf, pos, len);
    pos += len;
  }

  /** Writes a string field (even when empty). */
  void stringField(int field, String s) {
    tag(field, LEN);
    int n = s.length();
    // ASCII fast path: the length is the char count and each char is one byte, so attribute keys
    // and most values are copied without the UTF-8 encoder or a temporary byte[].
    boolean ascii = true;
    for (int i = 0; i < n; i++) {
      if (s.charAt(i) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) {
      varint(n);
      ensure(n);
      for (int i = 0; i < n; i++) {
        buf[pos++] = (byte) s.charAt(i);
      }
      return;
    }
    byte[] b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    varint(b.length);
    raw(b, 0, b.length);
  }

  /** Starts a length-delimited field; returns the mark for {@link #end}. */
  int begin(int field) {
    tag(field, LEN);
    return pos;
  }

  /** Ends a field started with {@link #begin}: inserts its length before the body. */
  void end(int mark) {
    int len = pos - mark;
    int n = varintSize(len);
    ensure(n);
    System.arraycopy(buf, mark, buf, mark + n, len);
    int p = mark;
    long v = len;
    while ((v & ~0x7fL) != 0) {
      buf[p++] = (byte) ((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    buf[p] = (byte) v;
    pos += n;
  }
}
