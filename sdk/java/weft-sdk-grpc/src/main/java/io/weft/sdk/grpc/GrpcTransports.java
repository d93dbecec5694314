package io.weft.sdk.grpc;

import io.weft.sdk.export.OtlpTransport;
import io.weft.sdk.trace.GrpcTransportProvider;
import java.util.Map;

/**
 * Makes {@code OTEL_EXPORTER_OTLP_PROTOCOL=grpc} work when this module is on the class path (found by
 * {@link java.util.ServiceLoader}).
 */
public final class GrpcTransports implements GrpcTransportProvider {
  @Override
  public OtlpTransport create(String endpoint, boolean gzip, Map<String, String> headers) {
    return new OtlpGrpcTransport(endpoint, gzip, headers);
  }
}
