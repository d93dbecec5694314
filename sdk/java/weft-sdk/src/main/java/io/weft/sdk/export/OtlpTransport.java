package io.weft.sdk.export;

/**
 * Sends one encoded {@code ExportTraceServiceRequest} and classifies the answer. Implementations:
 * {@link OtlpHttpTransport} here, gRPC in the {@code weft-sdk-grpc} module. Called from the export
 * thread only; must give up by {@code timeoutNanos}.
 */
public interface OtlpTransport extends AutoCloseable {
  /**
   * Sends {@code body[0, len)} (uncompressed; the transport compresses as configured). Returns the
   * classified outcome; never throws for network or server errors.
   */
  Outcome send(byte[] body, int len, long timeoutNanos) throws InterruptedException;

  /** A name for logs, such as the endpoint. */
  String describe();

  @Override
  default void close() {}
}
