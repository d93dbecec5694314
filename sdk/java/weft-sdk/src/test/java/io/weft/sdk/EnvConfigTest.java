package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.weft.sdk.propagation.CompositePropagator;
import io.weft.sdk.trace.WeftTracerProvider;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** The OTEL_* environment variables, applied to a real provider exporting to a real receiver. */
class EnvConfigTest {
  @Test
  void environmentConfiguresResourceSamplerLimitsAndExporter() throws Exception {
    try (OtlpReceiver rx = new OtlpReceiver()) {
      Map<String, String> env = Map.of(
          "OTEL_SERVICE_NAME", "env-svc",
          "OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,team=a%20b",
          "OTEL_TRACES_SAMPLER", "parentbased_traceidratio",
          "OTEL_TRACES_SAMPLER_ARG", "1.0",
          "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1",
          "OTEL_BSP_SCHEDULE_DELAY", "20",
          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rx.url(),
          "OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t1",
          "OTEL_EXPORTER_OTLP_COMPRESSION", "none",
          "OTEL_EXPORTER_OTLP_TIMEOUT", "not-a-number");
      WeftTracerProvider p = WeftTracerProvider.builder().fromEnv(env).build();
      assertTrue(p.getSampler().getDescription().startsWith("ParentBased{root:TraceIdRatioBased{1.0}"),
          p.getSampler().getDescription());
      Span s = p.get("env").spanBuilder("op").startSpan();
      s.setAttribute("a", 1L).setAttribute("b", 2L);
      s.end();
      assertTrue(p.forceFlush(Duration.ofSeconds(10)));
      p.shutdown(Duration.ofSeconds(5));
      assertEquals(1, rx.requests.size());
      Map<String, List<String>> h = rx.requestHeaders.get(0);
      assertEquals(List.of("t1"), h.get("X-tenant"));
      assertEquals(null, h.get("Content-encoding"), "OTEL_EXPORTER_OTLP_COMPRESSION=none");
      var rs = rx.requests.get(0).getResourceSpans(0);
      Map<String, String> res = rs.getResource().getAttributesList().stream()
          .collect(Collectors.toMap(KeyValue::getKey, kv -> kv.getValue().getStringValue()));
      assertEquals("env-svc", res.get("service.name"));
      assertEquals("prod", res.get("deployment.environment.name"));
      assertEquals("a b", res.get("team"));
      assertEquals("weft", res.get("telemetry.sdk.name"));
      var span = rs.getScopeSpans(0).getSpans(0);
      assertEquals(1, span.getAttributesCount());
      assertEquals(1, span.getDroppedAttributesCount());
    }
  }

  @Test
  void propagatorNamesAreReadInOrderOnceEach() {
    CompositePropagator c = CompositePropagator.fromNames(
        List.of("b3multi", "tracecontext", "b3multi", "bogus", "xray"));
    assertEquals(List.of("x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags",
        "traceparent", "tracestate", "x-amzn-trace-id"), List.copyOf(c.fields()));
    assertTrue(CompositePropagator.fromNames(List.of("none")).fields().isEmpty());
  }
}
