package io.weft.sdk.grpc;

/**
 * Reads {@code google.rpc.RetryInfo.retry_delay} out of a serialised {@code google.rpc.Status}
 * (the {@code grpc-status-details-bin} trailer) without protobuf-java.
 */
final class RetryInfo {
  static final String TYPE = "type.googleapis.com/google.rpc.RetryInfo";

  private RetryInfo() {}

  /** The delay in milliseconds, or -1 when the status carries no valid RetryInfo. */
  static long delayMillis(byte[] status) {
    try {
      Reader r = new Reader(status, 0, status.length);
      while (r.more()) {
        int tag = r.tag();
        if (tag == ((3 << 3) | 2)) { // Status.details: Any
          Reader any = r.sub();
          String type = null;
          Reader value = null;
          while (any.more()) {
            int t = any.tag();
            if (t == ((1 << 3) | 2)) {
              type = any.string();
            } else if (t == ((2 << 3) | 2)) {
              value = any.sub();
            } else {
              any.skip(t);
            }
          }
          if (TYPE.equals(type) && value != null) {
            long secs = 0;
            long nanos = 0;
            while (value.more()) {
              int t = value.tag();
              if (t == ((1 << 3) | 2)) { // retry_delay: Duration
                Reader d = value.sub();
                while (d.more()) {
                  int dt = d.tag();
                  if (dt == (1 << 3)) {
                    secs = d.varint();
                  } else if (dt == (2 << 3)) {
                    nanos = d.varint();
                  } else {
                    d.skip(dt);
                  }
                }
              } else {
                value.skip(t);
              }
            }
            long ms = secs * 1000 + nanos / 1_000_000;
            return ms < 0 ? -1 : ms;
          }
        } else {
          r.skip(tag);
        }
      }
    } catch (IllegalArgumentException e) {
      return -1;
    }
    return -1;
  }

  /** A minimal protobuf reader. */
  static final class Reader {
    private final byte[] b;
    private int pos;
    private final int end;

    Reader(byte[] b, int pos, int end) {
      this.b = b;
      this.pos = pos;
      this.end = end;
    }

    boolean more() {
      return pos < end;
    }

    int tag() {
      long t = varint();
      if (t <= 0 || t > Integer.MAX_VALUE) {
        throw new IllegalArgumentException("bad tag");
      }
      return (int) t;
    }

    long varint() {
      long v = 0;
      for (int shift = 0; shift < 64; shift += 7) {
        if (pos >= end) {
          throw new IllegalArgumentException("truncated");
        }
        int x = b[pos++] & 0xff;
        v |= (long) (x & 0x7f) << shift;
        if ((x & 0x80) == 0) {
          return v;
        }
      }
      throw new IllegalArgumentException("varint too long");
    }

    Reader sub() {
      long n = varint();
      if (n < 0 || n > end - pos) {
        throw new IllegalArgumentException("bad length");
      }
      Reader r = new Reader(b, pos, pos + (int) n);
      pos += (int) n;
      return r;
    }

    String string() {
      Reader s = sub();
      return new String(b, s.pos, s.end - s.pos, java.nio.charset.StandardCharsets.UTF_8);
    }

    void skip(int tag) {
      switch (tag & 7) {
        case 0:
          varint();
          break;
        case 1:
          advance(8);
          break;
        case 2:
          sub();
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
}
