package io.weft.sdk.export;

import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.List;
import java.util.Map;

/** The retry rules of spec/otlp.md: classification, back-off, {@code Retry-After}, responses. */
public final class OtlpRetry {
  /** At most this many attempts per batch (the first and 4 retries). */
  public static final int MAX_ATTEMPTS = 5;

  private OtlpRetry() {}

  /**
   * Classifies an HTTP response. {@code headers} maps names (any case) to values;
   * {@code nowMillis} is the clock for HTTP-date {@code Retry-After} values.
   */
  public static Outcome classifyHttp(int status, Map<String, List<String>> headers, byte[] body,
      long nowMillis) {
    if (status >= 200 && status < 300) {
      PartialSuccess p = decodeResponse(body == null ? new byte[0] : body);
      return Outcome.success(p.rejectedSpans, p.errorMessage);
    }
    if (status == 429 || status == 502 || status == 503 || status == 504) {
      long delay = -1;
      if (status == 429 || status == 503) {
        String ra = header(headers, "Retry-After");
        if (ra != null) {
          Long d = parseRetryAfter(ra, nowMillis);
          delay = d == null ? -1 : d;
        }
      }
      return Outcome.retryable(delay, "http status " + status);
    }
    return Outcome.permanent("http status " + status);
  }

  static String header(Map<String, List<String>> headers, String name) {
    if (headers == null) {
      return null;
    }
    for (Map.Entry<String, List<String>> e : headers.entrySet()) {
      if (e.getKey() != null && e.getKey().equalsIgnoreCase(name) && !e.getValue().isEmpty()) {
        return e.getValue().get(0);
      }
    }
    return null;
  }

  /** A connection-level failure (refused, reset, DNS, TLS, timeout): always retryable. */
  public static Outcome classifyError(String what) {
    return Outcome.retryable(-1, what);
  }

  /**
   * Classifies a gRPC status by name ({@code OK}, {@code UNAVAILABLE}, ...);
   * {@code retryInfoDelayMillis} is the {@code google.rpc.RetryInfo} delay or -1 when absent.
   */
  public static Outcome classifyGrpc(String code, long retryInfoDelayMillis, byte[] body) {
    switch (code) {
      case "OK": {
        PartialSuccess p = decodeResponse(body == null ? new byte[0] : body);
        return Outcome.success(p.rejectedSpans, p.errorMessage);
      }
      case "CANCELLED":
      case "DEADLINE_EXCEEDED":
      case "ABORTED":
      case "OUT_OF_RANGE":
      case "UNAVAILABLE":
      case "DATA_LOSS":
        return Outcome.retryable(retryInfoDelayMillis, "grpc status " + code);
      case "RESOURCE_EXHAUSTED":
        return retryInfoDelayMillis >= 0
            ? Outcome.retryable(retryInfoDelayMillis, "grpc status " + code)
            : Outcome.permanent("grpc status " + code);
      default:
        return Outcome.permanent("grpc status " + code);
    }
  }

  /**
   * The sleep range before retry {@code k} (1-based) in milliseconds, {@code [c/2, c]} with
   * {@code c = min(5 s, 1 s * 1.5^(k-1))}; null when no such retry is allowed.
   */
  public static double[] backoffRange(int retry) {
    if (retry < 1 || retry >= MAX_ATTEMPTS) {
      return null;
    }
    double c = Math.min(5000.0, 1000.0 * Math.pow(1.5, retry - 1));
    return new double[] {c / 2, c};
  }

  /**
   * Parses {@code Retry-After}: a non-negative integer of seconds, or an HTTP-date (the delay
   * until then, 0 if past). Returns null for anything else.
   */
  public static Long parseRetryAfter(String value, long nowMillis) {
    if (value == null) {
      return null;
    }
    String v = value.trim();
    if (v.isEmpty()) {
      return null;
    }
    boolean digits = true;
    for (int i = 0; i < v.length(); i++) {
      if (v.charAt(i) < '0' || v.charAt(i) > '9') {
        digits = false;
        break;
      }
    }
    if (digits) {
      try {
        long s = Long.parseLong(v);
        return s > Long.MAX_VALUE / 1000 ? Long.MAX_VALUE : s * 1000;
      } catch (NumberFormatException e) {
        return null;
      }
    }
    try {
      long at = ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME).toInstant()
          .toEpochMilli();
      return Math.max(0, at - nowMillis);
    } catch (DateTimeParseException e) {
      return null;
    }
  }

  /** The parsed {@code ExportTraceServiceResponse.partial_success}. */
  public static final class PartialSuccess {
    public final long rejectedSpans;
    public final String errorMessage;
    public final boolean partial;

    PartialSuccess(long rejectedSpans, String errorMessage) {
      this.rejectedSpans = rejectedSpans;
      this.errorMessage = errorMessage;
      this.partial = rejectedSpans > 0 || !errorMessage.isEmpty();
    }
  }

  /**
   * Decodes an {@code ExportTraceServiceResponse}; unknown fields are skipped, and a body that is
   * not valid protobuf counts as a full success (the server said 2xx).
   */
  public static PartialSuccess decodeResponse(byte[] body) {
    try {
      ProtoReader r = new ProtoReader(body, 0, body.length);
      long rejected = 0;
      String msg = "";
      while (r.more()) {
        int tag = r.tag();
        if (tag == ((1 << 3) | 2)) {
          ProtoReader p = r.message();
          while (p.more()) {
            int t = p.tag();
            if (t == ((1 << 3) | 0)) {
              rejected = p.varint();
            } else if (t == ((2 << 3) | 2)) {
              msg = p.string();
            } else {
              p.skip(t);
            }
          }
        } else {
          r.skip(tag);
        }
      }
      return new PartialSuccess(rejected, msg);
    } catch (IllegalArgumentException e) {
      return new PartialSuccess(0, "");
    }
  }
}
