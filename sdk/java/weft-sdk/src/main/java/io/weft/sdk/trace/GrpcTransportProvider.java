package io.weft.sdk.trace;

import io.weft.sdk.export.OtlpTransport;
import java.util.Map;

/**
 * Creates the OTLP/gRPC transport. Implemented by the optional {@code weft-sdk-grpc} module and
 * found through {@link java.util.ServiceLoader}.
 */
public interface GrpcTransportProvider {
  /** A transport to {@code endpoint} ({@code http://host:4317}). */
  OtlpTransport create(String endpoint, boolean gzip, Map<String, String> headers);
}
