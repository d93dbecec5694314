package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.sampling.JaegerRemoteSampler;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.sampling.SamplingDecision;
import io.weft.sdk.trace.WeftSpanContext;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** The polling half of the Jaeger remote sampler, against a real HTTP strategy endpoint. */
class JaegerRemoteSamplerTest {
  static SamplingDecision decide(Sampler s, String op) {
    return s.shouldSample(WeftSpanContext.INVALID, 1, 0x0123456789abcdefL, op, SpanKind.SERVER)
        .decision();
  }

  @Test
  void pollsTheStrategyAndKeepsTheLastGoodOneOnErrors() throws Exception {
    AtomicReference<String> body = new AtomicReference<>("<html>502</html>");
    AtomicReference<Integer> status = new AtomicReference<>(200);
    List<String> queries = new CopyOnWriteArrayList<>();
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/sampling", ex -> {
      queries.add(ex.getRequestURI().getRawQuery());
      byte[] b = body.get().getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(status.get(), b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    try (JaegerRemoteSampler s = JaegerRemoteSampler.builder("check out")
        .setEndpoint("http://127.0.0.1:" + server.getAddress().getPort() + "/sampling")
        .setPollingInterval(Duration.ofMillis(50))
        .setInitialSampler(Sampler.traceIdRatioBased(0.0)).build()) {
      waitFor(() -> queries.size() >= 2);
      assertEquals("service=check+out", queries.get(0));
      assertEquals(SamplingDecision.DROP, decide(s, "op"), "an invalid body keeps the initial");

      body.set("{\"probabilisticSampling\": {\"samplingRate\": 1.0}}");
      waitFor(() -> decide(s, "op") == SamplingDecision.RECORD_AND_SAMPLE);

      status.set(500);
      body.set("{\"probabilisticSampling\": {\"samplingRate\": 0.0}}");
      int seen = queries.size();
      waitFor(() -> queries.size() >= seen + 2);
      assertEquals(SamplingDecision.RECORD_AND_SAMPLE, decide(s, "op"), "a 500 keeps the last");

      status.set(200);
      body.set("{\"operationSampling\": {\"defaultSamplingProbability\": 0.0, "
          + "\"perOperationStrategies\": [{\"operation\": \"hot\", "
          + "\"probabilisticSampling\": {\"samplingRate\": 1.0}}]}}");
      waitFor(() -> decide(s, "cold") == SamplingDecision.DROP);
      assertEquals(SamplingDecision.RECORD_AND_SAMPLE, decide(s, "hot"));
      assertTrue(s.getDescription().contains("PerOperation"), s.getDescription());
    } finally {
      server.stop(0);
    }
  }

  static void waitFor(java.util.function.BooleanSupplier cond) throws InterruptedException {
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (!cond.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "condition not met within 10 s");
      Thread.sleep(20);
    }
  }
}
