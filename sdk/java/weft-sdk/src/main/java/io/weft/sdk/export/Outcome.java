package io.weft.sdk.export;

/**
 * The result of one export attempt (spec/otlp.md "Retry"): success (possibly partial), retryable
 * (with the server-requested delay when there is one) or permanent.
 */
public final class Outcome {
  public enum Kind {
    SUCCESS,
    RETRYABLE,
    PERMANENT
  }

  public static final Outcome SUCCESS = new Outcome(Kind.SUCCESS, -1, 0, "", false, null);
  public static final Outcome RETRYABLE = new Outcome(Kind.RETRYABLE, -1, 0, "", false, null);
  public static final Outcome PERMANENT = new Outcome(Kind.PERMANENT, -1, 0, "", false, null);

  private final Kind kind;
  private final long delayMillis;
  private final long rejectedSpans;
  private final String errorMessage;
  private final boolean partial;
  private final String detail;

  Outcome(Kind kind, long delayMillis, long rejectedSpans, String errorMessage, boolean partial,
      String detail) {
    this.kind = kind;
    this.delayMillis = delayMillis;
    this.rejectedSpans = rejectedSpans;
    this.errorMessage = errorMessage;
    this.partial = partial;
    this.detail = detail;
  }

  public static Outcome retryable(long delayMillis, String detail) {
    return new Outcome(Kind.RETRYABLE, delayMillis, 0, "", false, detail);
  }

  public static Outcome permanent(String detail) {
    return new Outcome(Kind.PERMANENT, -1, 0, "", false, detail);
  }

  /** A success carrying the server's partial-success answer. */
  public static Outcome success(long rejectedSpans, String errorMessage) {
    boolean partial = rejectedSpans > 0 || !errorMessage.isEmpty();
    return partial ? new Outcome(Kind.SUCCESS, -1, rejectedSpans, errorMessage, true, null)
        : SUCCESS;
  }

  public Kind kind() {
    return kind;
  }

  /** The server-requested delay in milliseconds, or -1 when the server set none. */
  public long delayMillis() {
    return delayMillis;
  }

  public long rejectedSpans() {
    return rejectedSpans;
  }

  public String errorMessage() {
    return errorMessage;
  }

  public boolean partial() {
    return partial;
  }

  /** What went wrong, for logs; null on success. */
  public String detail() {
    return detail;
  }

  @Override
  public String toString() {
    return kind + (delayMillis >= 0 ? " delay=" + delayMillis + "ms" : "")
        + (detail != null ? " (" + detail + ")" : "");
  }
}
