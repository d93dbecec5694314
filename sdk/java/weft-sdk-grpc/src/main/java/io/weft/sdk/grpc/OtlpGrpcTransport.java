package io.weft.sdk.grpc;

import io.grpc.CallOptions;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.MetadataUtils;
import io.weft.sdk.export.OtlpRetry;
import io.weft.sdk.export.OtlpTransport;
import io.weft.sdk.export.Outcome;
import io.weft.sdk.trace.Version;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * OTLP/gRPC (spec/otlp.md "OTLP/gRPC"): the unary {@code TraceService/Export} call over grpc-java,
 * with the request bytes the weft encoder produced passed through a byte-array marshaller (no
 * protobuf-java message objects), gzip message compression by default, and
 * {@code google.rpc.RetryInfo} read from the status details.
 */
public final class OtlpGrpcTransport implements OtlpTransport {
  static final MethodDescriptor.Marshaller<byte[]> BYTES = new MethodDescriptor.Marshaller<>() {
    @Override
    public InputStream stream(byte[] value) {
      return new ByteArrayInputStream(value);
    }

    @Override
    public byte[] parse(InputStream stream) {
      try {
        return stream.readAllBytes();
      } catch (IOException e) {
        throw new IllegalStateException("reading the grpc response failed", e);
      }
    }
  };

  /** The OTLP trace export method, on raw bytes. */
  public static final MethodDescriptor<byte[], byte[]> EXPORT =
      MethodDescriptor.<byte[], byte[]>newBuilder().setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("opentelemetry.proto.collector.trace.v1.TraceService/Export")
          .setRequestMarshaller(BYTES).setResponseMarshaller(BYTES).build();

  static final Metadata.Key<byte[]> STATUS_DETAILS =
      Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

  private final String endpoint;
  private final ManagedChannel channel;
  private final boolean gzip;
  private final Metadata headers = new Metadata();

  /**
   * @param endpoint {@code http://host:port} (plain text) or {@code host:port}
   */
  public OtlpGrpcTransport(String endpoint, boolean gzip, Map<String, String> headers) {
    this.endpoint = endpoint;
    URI u = URI.create(endpoint.contains("://") ? endpoint : "http://" + endpoint);
    int port = u.getPort() > 0 ? u.getPort() : 4317;
    NettyChannelBuilder b = NettyChannelBuilder.forAddress(u.getHost(), port)
        .userAgent("weft-sdk-java/" + Version.VERSION);
    if (!"https".equals(u.getScheme())) {
      b.usePlaintext();
    }
    this.channel = b.build();
    this.gzip = gzip;
    headers.forEach((k, v) -> this.headers.put(
        Metadata.Key.of(k.toLowerCase(java.util.Locale.ROOT), Metadata.ASCII_STRING_MARSHALLER),
        v));
  }

  @Override
  public Outcome send(byte[] body, int len, long timeoutNanos) {
    CallOptions opts = CallOptions.DEFAULT.withDeadlineAfter(Math.max(1_000_000, timeoutNanos),
        TimeUnit.NANOSECONDS);
    if (gzip) {
      opts = opts.withCompression("gzip");
    }
    try {
      byte[] resp = ClientCalls.blockingUnaryCall(
          io.grpc.ClientInterceptors.intercept(channel,
              MetadataUtils.newAttachHeadersInterceptor(headers)),
          EXPORT, opts, Arrays.copyOf(body, len));
      return OtlpRetry.classifyGrpc("OK", -1, resp);
    } catch (StatusRuntimeException e) {
      Status st = e.getStatus();
      long delay = -1;
      Metadata trailers = e.getTrailers();
      if (trailers != null) {
        byte[] details = trailers.get(STATUS_DETAILS);
        if (details != null) {
          delay = RetryInfo.delayMillis(details);
        }
      }
      return OtlpRetry.classifyGrpc(st.getCode().name(), delay, null);
    }
  }

  @Override
  public String describe() {
    return endpoint + " (grpc)";
  }

  @Override
  public void close() {
    channel.shutdownNow();
  }
}
