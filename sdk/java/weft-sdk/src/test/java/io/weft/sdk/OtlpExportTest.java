package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.KeyValue;
import io.opentelemetry.api.common.Value;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import io.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.trace.v1.ResourceSpans;
import io.opentelemetry.proto.trace.v1.ScopeSpans;
import io.weft.sdk.export.ExportPipeline;
import io.weft.sdk.export.ExportStats;
import io.weft.sdk.export.OtlpExporter;
import io.weft.sdk.export.OtlpHttpTransport;
import io.weft.sdk.id.Hex;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import io.weft.sdk.trace.WeftTracerProvider;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Exports through the real pipeline and HTTP transport to a real OTLP/HTTP receiver, and checks
 * the request field for field after decoding with the official opentelemetry-proto classes.
 */
class OtlpExportTest {
  static WeftTracerProvider provider(String url, Duration timeout) {
    return WeftTracerProvider.builder().setResource(Resource.create("interop"))
        .setSampler(Sampler.alwaysOn())
        .setExporter(new OtlpExporter(new OtlpHttpTransport(url, true,
            Map.of("x-test", "yes")), timeout))
        .setBatchConfig(new ExportPipeline.Config().setMaxQueueSize(256)
            .setMaxExportBatchSize(64).setScheduleDelay(Duration.ofMillis(50)))
        .build();
  }

  static String str(AnyValue v) {
    return v.getStringValue();
  }

  @Test
  void everyFieldSurvivesTheWire() throws Exception {
    try (OtlpReceiver rx = new OtlpReceiver()) {
      WeftTracerProvider p = provider(rx.url(), Duration.ofSeconds(10));
      Tracer t = p.tracerBuilder("io.weft.interop").setInstrumentationVersion("1.2.3")
          .setSchemaUrl("https://opentelemetry.io/schemas/1.26.0").build();
      Tracer other = p.get("other");
      WeftSpanContext linked = WeftSpanContext.createRemote(0x0af7651916cd43ddL,
          0x8448eb211c80319cL, 0xb9c7c989f97918e1L, (byte) 1,
          WeftTraceState.parse("rojo=00f067aa0ba902b7"), false, false, null);
      Span root = t.spanBuilder("POST /checkout").setSpanKind(SpanKind.SERVER)
          .setAttribute("http.request.method", "POST")
          .addLink(linked, Attributes.of(AttributeKey.longKey("messaging.batch.index"), 7L))
          .setStartTimestamp(1_700_000_000_123_456_789L, TimeUnit.NANOSECONDS)
          .startSpan();
      root.setAttribute("http.response.status_code", 500L);
      root.setAttribute("retry.delta", -3L);
      root.setAttribute("server.load", 0.75);
      root.setAttribute("cache.hit", true);
      root.setAttribute("unicode.text", "grüße, 世界");
      root.setAttribute(AttributeKey.stringArrayKey("accept"), List.of("application/json", "text/plain"));
      root.setAttribute(AttributeKey.longArrayKey("backoffs"), List.of(100L, 200L));
      root.setAttribute("user", Value.of(KeyValue.of("id", Value.of(42L)),
          KeyValue.of("roles", Value.of(Value.of("admin"), Value.of("ops")))));
      root.setAttribute("digest", Value.of(new byte[] {0, (byte) 0xff, 0x10}));
      root.addEvent("exception", Attributes.of(AttributeKey.stringKey("exception.type"),
          "PaymentDeclined"), 1_700_000_000_500_000_000L, TimeUnit.NANOSECONDS);
      root.setStatus(StatusCode.ERROR, "payment failed");
      Span child;
      try (Scope s = root.makeCurrent()) {
        child = other.spanBuilder("SELECT").setSpanKind(SpanKind.CLIENT).startSpan();
        child.setStatus(StatusCode.OK);
        child.end();
      }
      root.end(1_700_000_000_987_654_321L, TimeUnit.NANOSECONDS);
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      ExportStats stats = p.stats();
      assertEquals(2, stats.exported.sum(), stats.toString());
      assertEquals(0, stats.dropped());
      p.shutdown(Duration.ofSeconds(5));

      assertEquals(1, rx.requests.size());
      Map<String, List<String>> h = rx.requestHeaders.get(0);
      assertEquals(List.of("application/x-protobuf"), h.get("Content-type"));
      assertEquals(List.of("gzip"), h.get("Content-encoding"));
      assertTrue(h.get("User-agent").get(0).startsWith("weft-sdk-java/"));
      assertEquals(List.of("yes"), h.get("X-test"));

      ExportTraceServiceRequest req = rx.requests.get(0);
      assertEquals(1, req.getResourceSpansCount());
      ResourceSpans rs = req.getResourceSpans(0);
      assertEquals("service.name", rs.getResource().getAttributes(0).getKey());
      assertEquals("interop", str(rs.getResource().getAttributes(0).getValue()));
      assertEquals(2, rs.getScopeSpansCount(), "one ScopeSpans per scope, in order");
      ScopeSpans other0 = rs.getScopeSpans(0);
      assertEquals("other", other0.getScope().getName());
      ScopeSpans main = rs.getScopeSpans(1);
      assertEquals("io.weft.interop", main.getScope().getName());
      assertEquals("1.2.3", main.getScope().getVersion());
      assertEquals("https://opentelemetry.io/schemas/1.26.0", main.getSchemaUrl());

      WeftSpanContext rc = (WeftSpanContext) root.getSpanContext();
      io.opentelemetry.proto.trace.v1.Span c = other0.getSpans(0);
      assertEquals("SELECT", c.getName());
      assertEquals(io.opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_CLIENT, c.getKind());
      assertArrayEquals(rc.getTraceIdBytes(), c.getTraceId().toByteArray());
      assertArrayEquals(rc.getSpanIdBytes(), c.getParentSpanId().toByteArray());
      assertArrayEquals(child.getSpanContext().getSpanIdBytes(), c.getSpanId().toByteArray());
      assertEquals(io.opentelemetry.proto.trace.v1.Status.StatusCode.STATUS_CODE_OK,
          c.getStatus().getCode());
      assertEquals(0x103, c.getFlags());

      io.opentelemetry.proto.trace.v1.Span r = main.getSpans(0);
      assertEquals("POST /checkout", r.getName());
      assertEquals(io.opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_SERVER, r.getKind());
      assertArrayEquals(rc.getTraceIdBytes(), r.getTraceId().toByteArray());
      assertArrayEquals(rc.getSpanIdBytes(), r.getSpanId().toByteArray());
      assertEquals(ByteString.EMPTY, r.getParentSpanId());
      assertEquals(1_700_000_000_123_456_789L, r.getStartTimeUnixNano());
      assertEquals(1_700_000_000_987_654_321L, r.getEndTimeUnixNano());
      assertEquals(0x103, r.getFlags());
      assertEquals("", r.getTraceState());
      List<io.opentelemetry.proto.common.v1.KeyValue> a = r.getAttributesList();
      assertEquals(List.of("http.request.method", "http.response.status_code", "retry.delta",
          "server.load", "cache.hit", "unicode.text", "accept", "backoffs", "user", "digest"),
          a.stream().map(io.opentelemetry.proto.common.v1.KeyValue::getKey).toList());
      assertEquals("POST", a.get(0).getValue().getStringValue());
      assertEquals(500, a.get(1).getValue().getIntValue());
      assertEquals(-3, a.get(2).getValue().getIntValue());
      assertEquals(0.75, a.get(3).getValue().getDoubleValue());
      assertTrue(a.get(4).getValue().getBoolValue());
      assertEquals("grüße, 世界", a.get(5).getValue().getStringValue());
      assertEquals(List.of("application/json", "text/plain"), a.get(6).getValue()
          .getArrayValue().getValuesList().stream().map(AnyValue::getStringValue).toList());
      assertEquals(List.of(100L, 200L), a.get(7).getValue().getArrayValue().getValuesList()
          .stream().map(AnyValue::getIntValue).toList());
      var kv = a.get(8).getValue().getKvlistValue();
      assertEquals("id", kv.getValues(0).getKey());
      assertEquals(42, kv.getValues(0).getValue().getIntValue());
      assertEquals("ops", kv.getValues(1).getValue().getArrayValue().getValues(1)
          .getStringValue());
      assertArrayEquals(new byte[] {0, (byte) 0xff, 0x10},
          a.get(9).getValue().getBytesValue().toByteArray());
      assertEquals(1, r.getEventsCount());
      assertEquals("exception", r.getEvents(0).getName());
      assertEquals(1_700_000_000_500_000_000L, r.getEvents(0).getTimeUnixNano());
      assertEquals("PaymentDeclined", r.getEvents(0).getAttributes(0).getValue()
          .getStringValue());
      assertEquals(1, r.getLinksCount());
      var l = r.getLinks(0);
      assertEquals("0af7651916cd43dd8448eb211c80319c", Hex.of(l.getTraceId().toByteArray()));
      assertEquals("b9c7c989f97918e1", Hex.of(l.getSpanId().toByteArray()));
      assertEquals("rojo=00f067aa0ba902b7", l.getTraceState());
      assertEquals(0x301, l.getFlags());
      assertEquals(7, l.getAttributes(0).getValue().getIntValue());
      assertEquals(io.opentelemetry.proto.trace.v1.Status.StatusCode.STATUS_CODE_ERROR,
          r.getStatus().getCode());
      assertEquals("payment failed", r.getStatus().getMessage());
    }
  }

  @Test
  void retryableStatusHonoursRetryAfterThenSucceeds() throws Exception {
    try (OtlpReceiver rx = new OtlpReceiver()) {
      rx.script.add(new OtlpReceiver.Answer(503, Map.of("Retry-After", "1"), null));
      WeftTracerProvider p = provider(rx.url(), Duration.ofSeconds(10));
      long start = System.nanoTime();
      p.get("t").spanBuilder("s").startSpan().end();
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      long ms = (System.nanoTime() - start) / 1_000_000;
      assertEquals(2, rx.hits.get());
      assertTrue(ms >= 950, "slept the server's Retry-After (took " + ms + " ms)");
      assertEquals(1, p.stats().exported.sum());
      assertEquals(1, rx.requests.size());
      p.shutdown(Duration.ofSeconds(5));
    }
  }

  @Test
  void permanentStatusDropsAtOnce() throws Exception {
    try (OtlpReceiver rx = new OtlpReceiver()) {
      rx.script.add(new OtlpReceiver.Answer(400, Map.of("Retry-After", "1"), null));
      WeftTracerProvider p = provider(rx.url(), Duration.ofSeconds(10));
      p.get("t").spanBuilder("s").startSpan().end();
      p.get("t").spanBuilder("s2").startSpan().end();
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      assertEquals(1, rx.hits.get());
      assertEquals(2, p.stats().droppedPermanent.sum());
      p.shutdown(Duration.ofSeconds(5));
    }
  }

  @Test
  void partialSuccessIsCountedAndNotRetried() throws Exception {
    try (OtlpReceiver rx = new OtlpReceiver()) {
      // partial_success { rejected_spans: 1, error_message: "too big" }
      byte[] body = io.opentelemetry.proto.collector.trace.v1
              .ExportTraceServiceResponse.newBuilder().setPartialSuccess(
                  io.opentelemetry.proto.collector.trace.v1.ExportTracePartialSuccess.newBuilder()
                      .setRejectedSpans(1).setErrorMessage("too big")).build().toByteArray();
      rx.script.add(new OtlpReceiver.Answer(200, Map.of(), body));
      WeftTracerProvider p = provider(rx.url(), Duration.ofSeconds(10));
      p.get("t").spanBuilder("a").startSpan().end();
      p.get("t").spanBuilder("b").startSpan().end();
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      assertEquals(1, rx.hits.get());
      assertEquals(1, p.stats().rejected.sum());
      assertEquals(1, p.stats().exported.sum());
      p.shutdown(Duration.ofSeconds(5));
    }
  }

  @Test
  void backendDownKeepsMemoryBoundedAndCountsDrops() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort(); // closed again: connections are refused
    }
    WeftTracerProvider p = provider("http://127.0.0.1:" + port + "/v1/traces",
        Duration.ofMillis(1500));
    Tracer t = p.get("t");
    for (int i = 0; i < 5000; i++) {
      t.spanBuilder("s").startSpan().end();
    }
    ExportStats st = p.stats();
    assertTrue(st.droppedQueueFull.sum() > 0, "a full queue drops: " + st);
    assertTrue(st.droppedQueueFull.sum() <= 5000);
    long start = System.nanoTime();
    boolean drained = p.shutdown(Duration.ofSeconds(2));
    long ms = (System.nanoTime() - start) / 1_000_000;
    assertTrue(ms < 6000, "shutdown kept its timeout (took " + ms + " ms)");
    assertEquals(0, st.exported.sum());
    if (drained) {
      assertEquals(5000, st.dropped(), "every span is accounted for: " + st);
    }
    assertTrue(st.droppedDeadline.sum() + st.droppedRetriesExhausted.sum()
        + st.droppedShutdown.sum() > 0, "batches given up are counted: " + st);
  }

  @Test
  void shutdownInterruptsBackoff() throws Exception {
    try (OtlpReceiver rx = new OtlpReceiver()) {
      for (int i = 0; i < 10; i++) {
        rx.script.add(new OtlpReceiver.Answer(503, Map.of("Retry-After", "4"), null));
      }
      WeftTracerProvider p = provider(rx.url(), Duration.ofSeconds(30));
      p.get("t").spanBuilder("s").startSpan().end();
      p.forceFlush(Duration.ofMillis(300)); // the first attempt has happened; back-off runs
      long start = System.nanoTime();
      p.shutdown(Duration.ofSeconds(1));
      long ms = (System.nanoTime() - start) / 1_000_000;
      assertTrue(ms < 3000, "shutdown interrupted the 4 s back-off (took " + ms + " ms)");
      assertEquals(1, p.stats().droppedShutdown.sum(), p.stats().toString());
    }
  }
}
