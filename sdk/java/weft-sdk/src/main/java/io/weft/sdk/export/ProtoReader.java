package io.weft.sdk.export;

import java.nio.charset.StandardCharsets;

/**
 * A minimal protobuf reader for response messages (OTLP partial success, gRPC status details);
 * malformed input throws IllegalArgumentException.
 */
public final class ProtoReader {
  private final byte[] b;
  private int pos;
  private final int end;

  public ProtoReader(byte[] b, int off, int end) {
    this.b = b;
    this.pos = off;
    this.end = end;
  }

  public boolean more() {
    return pos < end;
  }

  public int tag() {
    long t = varint();
    if (t <= 0 || t > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("bad tag");
    }
    return (int) t;
  }

  public long varint() {
    long v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= end) {
        throw new IllegalArgumentException("truncated varint");
      }
      int x = b[pos++] & 0xff;
      v |= (long) (x & 0x7f) << shift;
      if ((x & 0x80) == 0) {
        return v;
      }
    }
    throw new IllegalArgumentException("varint too long");
  }

  private int length() {
    long n = varint();
    if (n < 0 || n > end - pos) {
      throw new IllegalArgumentException("bad length");
    }
    return (int) n;
  }

  public ProtoReader message() {
    int n = length();
    ProtoReader r = new ProtoReader(b, pos, pos + n);
    pos += n;
    return r;
  }

  public byte[] bytes() {
    int n = length();
    byte[] out = java.util.Arrays.copyOfRange(b, pos, pos + n);
    pos += n;
    return out;
  }

  public String string() {
    int n = length();
    String s = new String(b, pos, n, StandardCharsets.UTF_8);
    pos += n;
    return s;
  }

  public void skip(int tag) {
    switch (tag & 7) {
      case 0:
        varint();
        break;
      case 1:
        advance(8);
        break;
      case 2:
        advance(length());
        break;
      case 5:
        advance(4);
        break;
      default:
        throw new IllegalArgumentException("bad wire type");
    }
  }

  private void advance(int n) {
    if (n > end - pos) {
      throw new IllegalArgumentException("truncated");
    }
    pos += n;
  }
}
