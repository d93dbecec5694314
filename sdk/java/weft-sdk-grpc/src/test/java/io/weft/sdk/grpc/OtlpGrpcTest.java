package io.weft.sdk.grpc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ServerCalls;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
import io.weft.sdk.WeftBackendTest;
import io.weft.sdk.export.OtlpExporter;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftTracerProvider;
import java.io.ByteArrayOutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** OTLP/gRPC against a real grpc-java server and against the weft binary. */
class OtlpGrpcTest {
  final List<ExportTraceServiceRequest> requests = Collections.synchronizedList(new ArrayList<>());
  final List<String> encodings = Collections.synchronizedList(new ArrayList<>());
  final ConcurrentLinkedQueue<Status> script = new ConcurrentLinkedQueue<>();
  final AtomicInteger calls = new AtomicInteger();

  Server server() throws Exception {
    ServerServiceDefinition svc = ServerServiceDefinition
        .builder("opentelemetry.proto.collector.trace.v1.TraceService")
        .addMethod(OtlpGrpcTransport.EXPORT, ServerCalls.asyncUnaryCall((req, obs) -> {
          calls.incrementAndGet();
          Status st = script.poll();
          if (st != null) {
            Metadata trailers = new Metadata();
            trailers.put(OtlpGrpcTransport.STATUS_DETAILS, retryInfoStatus(st.getCode().value(), 1));
            obs.onError(st.asRuntimeException(trailers));
            return;
          }
          try {
            requests.add(ExportTraceServiceRequest.parseFrom(req));
          } catch (Exception e) {
            obs.onError(Status.INVALID_ARGUMENT.withDescription(e.toString()).asRuntimeException());
            return;
          }
          obs.onNext(new byte[0]);
          obs.onCompleted();
        })).build();
    return NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
        .addService(svc)
        .intercept(new io.grpc.ServerInterceptor() {
          @Override
          public <Q, R> io.grpc.ServerCall.Listener<Q> interceptCall(io.grpc.ServerCall<Q, R> call,
              Metadata headers, io.grpc.ServerCallHandler<Q, R> next) {
            encodings.add(headers.get(Metadata.Key.of("grpc-encoding",
                Metadata.ASCII_STRING_MARSHALLER)));
            return next.startCall(call, headers);
          }
        }).build().start();
  }

  /** A google.rpc.Status with one RetryInfo detail of {@code seconds}. */
  static byte[] retryInfoStatus(int code, int seconds) {
    byte[] type = RetryInfo.TYPE.getBytes(StandardCharsets.UTF_8);
    byte[] duration = {0x08, (byte) seconds};
    byte[] retryInfo = concat(new byte[] {0x0a, (byte) duration.length}, duration);
    byte[] any = concat(new byte[] {0x0a, (byte) type.length}, type,
        new byte[] {0x12, (byte) retryInfo.length}, retryInfo);
    return concat(new byte[] {0x08, (byte) code, 0x1a, (byte) any.length}, any);
  }

  static byte[] concat(byte[]... parts) {
    ByteArrayOutputStream o = new ByteArrayOutputStream();
    for (byte[] p : parts) {
      o.writeBytes(p);
    }
    return o.toByteArray();
  }

  static WeftTracerProvider provider(String endpoint) {
    return WeftTracerProvider.builder().setResource(Resource.create("weft-java-e2e"))
        .setSampler(Sampler.alwaysOn())
        .setExporter(new OtlpExporter(new OtlpGrpcTransport(endpoint, true, Map.of("x-test", "1")),
            Duration.ofSeconds(10)))
        .build();
  }

  @Test
  void retryInfoIsReadFromStatusDetails() {
    assertEquals(1000, RetryInfo.delayMillis(retryInfoStatus(14, 1)));
    assertEquals(-1, RetryInfo.delayMillis(new byte[] {0x08, 0x0e}));
    assertEquals(-1, RetryInfo.delayMillis(new byte[] {(byte) 0xff}));
  }

  @Test
  void exportsToAGrpcServerAndRetriesUnavailableWithRetryInfo() throws Exception {
    Server s = server();
    try {
      script.add(Status.UNAVAILABLE);
      WeftTracerProvider p = provider("http://127.0.0.1:" + s.getPort());
      Tracer t = p.get("grpc-test");
      Span span = t.spanBuilder("op").startSpan();
      span.setAttribute("k", "v");
      span.end();
      long start = System.nanoTime();
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      long ms = (System.nanoTime() - start) / 1_000_000;
      assertEquals(2, calls.get());
      assertTrue(ms >= 950, "slept RetryInfo's 1 s (took " + ms + " ms)");
      assertEquals(1, p.stats().exported.sum(), p.stats().toString());
      p.shutdown(Duration.ofSeconds(5));
      assertEquals(1, requests.size());
      var got = requests.get(0).getResourceSpans(0).getScopeSpans(0).getSpans(0);
      assertEquals("op", got.getName());
      assertArrayEquals(span.getSpanContext().getTraceIdBytes(), got.getTraceId().toByteArray());
      assertEquals("v", got.getAttributes(0).getValue().getStringValue());
      assertEquals("gzip", encodings.get(encodings.size() - 1));
    } finally {
      s.shutdownNow();
    }
  }

  @Test
  void permanentGrpcStatusDrops() throws Exception {
    Server s = server();
    try {
      script.add(Status.INVALID_ARGUMENT);
      WeftTracerProvider p = provider("127.0.0.1:" + s.getPort());
      p.get("t").spanBuilder("op").startSpan().end();
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      assertEquals(1, calls.get());
      assertEquals(1, p.stats().droppedPermanent.sum());
      p.shutdown(Duration.ofSeconds(5));
    } finally {
      s.shutdownNow();
    }
  }

  @Test
  void spansExportedOverGrpcAreReadBackFromWeft() throws Exception {
    String bin = WeftBackendTest.weftBin();
    try (WeftBackendTest.Weft weft = WeftBackendTest.Weft.start(bin)) {
      WeftTracerProvider p = provider("http://127.0.0.1:" + weft.grpcPort);
      Map<String, Span> sent = WeftBackendTest.recordTrace(p.get("e2e"), "grpc");
      assertTrue(p.forceFlush(Duration.ofSeconds(20)));
      assertEquals(3, p.stats().exported.sum(), p.stats() + "\n" + weft.logTail());
      p.shutdown(Duration.ofSeconds(5));
      String id = sent.get("grpc root").getSpanContext().getTraceId();
      WeftBackendTest.assertTraceMatches(weft.readTrace(id, 3), sent, "grpc");
    }
  }
}
