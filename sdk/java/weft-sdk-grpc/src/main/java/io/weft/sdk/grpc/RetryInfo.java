package io.weft.sdk.grpc;

import io.weft.sdk.export.ProtoReader;

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
      ProtoReader r = new ProtoReader(status, 0, status.length);
      while (r.more()) {
        int tag = r.tag();
        if (tag == ((3 << 3) | 2)) { // Status.details: Any
          ProtoReader any = r.message();
          String type = null;
          ProtoReader value = null;
          while (any.more()) {
            int t = any.tag();
            if (t == ((1 << 3) | 2)) {
              type = any.string();
            } else if (t == ((2 << 3) | 2)) {
              value = any.message();
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
                ProtoReader d = value.message();
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
}
