package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import io.opentelemetry.proto.trace.v1.TracesData;
import io.weft.sdk.export.ExportStats;
import io.weft.sdk.export.OtlpExporter;
import io.weft.sdk.export.OtlpHttpTransport;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTracerProvider;
import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * End to end against the real {@code weft} binary named by {@code WEFT_BIN}: exports over OTLP/HTTP
 * and reads the trace back through {@code GET /api/traces/<id>}. Skipped, with the reason, when
 * {@code WEFT_BIN} is unset ({@code make test} sets it).
 */
public class WeftBackendTest {
  /** A weft process on free loopback ports with its own data directory. */
  public static final class Weft implements AutoCloseable {
    public final Process process;
    public final Path dir;
    public final int httpPort;
    public final int grpcPort;
    public final int otlpHttpPort;
    public final Path log;

    Weft(Process process, Path dir, int httpPort, int grpcPort, int otlpHttpPort, Path log) {
      this.process = process;
      this.dir = dir;
      this.httpPort = httpPort;
      this.grpcPort = grpcPort;
      this.otlpHttpPort = otlpHttpPort;
      this.log = log;
    }

    /** Starts {@code bin} and waits until {@code /ready} answers 200. */
    public static Weft start(String bin) throws Exception {
      return start(bin, Map.of());
    }

    /** {@link #start(String)} with {@code extra} variables after the defaults (they win). */
    public static Weft start(String bin, Map<String, String> extra) throws Exception {
      int[] ports = freePorts(4);
      Path dir = Files.createTempDirectory("weft-java-e2e");
      Path log = dir.resolve("weft.log");
      ProcessBuilder pb = new ProcessBuilder(bin, "--data-dir", dir.resolve("data").toString(),
          "--listen-host", "127.0.0.1", "--http-port", String.valueOf(ports[0]),
          "--otlp-grpc-port", String.valueOf(ports[1]), "--otlp-http-port",
          String.valueOf(ports[2]));
      Map<String, String> env = pb.environment();
      env.keySet().removeIf(k -> k.startsWith("WEFT_"));
      env.put("WEFT_ZIPKIN_PORT", String.valueOf(ports[3]));
      env.put("WEFT_JAEGER_HTTP_PORT", "0");
      env.put("WEFT_JAEGER_GRPC_PORT", "0");
      env.put("WEFT_JAEGER_QUERY_PORT", "0");
      env.put("WEFT_XRAY_PORT", "0");
      env.put("WEFT_JAEGER_COMPACT_PORT", "0");
      env.put("WEFT_JAEGER_BINARY_PORT", "0");
      env.put("WEFT_SAMPLING_HTTP_PORT", "0"); // newer binaries serve Jaeger remote sampling
      env.put("WEFT_SAMPLING_GRPC_PORT", "0");
      env.putAll(extra);
      pb.redirectErrorStream(true).redirectOutput(log.toFile());
      Weft w = new Weft(pb.start(), dir, ports[0], ports[1], ports[2], log);
      HttpClient c = HttpClient.newHttpClient();
      long deadline = System.nanoTime() + 60_000_000_000L;
      String last = "no answer";
      while (System.nanoTime() < deadline) {
        if (!w.process.isAlive()) {
          w.close();
          fail("weft exited with " + w.process.exitValue() + ": " + w.logTail());
        }
        try {
          HttpResponse<String> r = c.send(HttpRequest.newBuilder(
              URI.create("http://127.0.0.1:" + w.httpPort + "/ready")).build(),
              HttpResponse.BodyHandlers.ofString());
          last = r.statusCode() + " " + r.body();
          if (r.statusCode() == 200 && portOpen(w.otlpHttpPort) && portOpen(w.grpcPort)) {
            return w;
          }
        } catch (IOException e) {
          last = e.toString();
        }
        Thread.sleep(100);
      }
      w.close();
      throw new AssertionError("weft did not become ready within 60 s (" + last + ")");
    }

    static boolean portOpen(int port) {
      try (java.net.Socket s = new java.net.Socket("127.0.0.1", port)) {
        return true;
      } catch (IOException e) {
        return false;
      }
    }

    static int[] freePorts(int n) throws IOException {
      List<ServerSocket> held = new ArrayList<>();
      int[] ports = new int[n];
      try {
        for (int i = 0; i < n; i++) {
          ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress());
          held.add(s);
          ports[i] = s.getLocalPort();
        }
      } finally {
        for (ServerSocket s : held) {
          s.close();
        }
      }
      return ports;
    }

    public String logTail() {
      try {
        String s = Files.readString(log);
        return s.length() > 4000 ? s.substring(s.length() - 4000) : s;
      } catch (IOException e) {
        return "(no log)";
      }
    }

    /**
     * Reads a trace as {@code TracesData}, retrying until it holds at least {@code spans} spans or
     * 30 s pass.
     */
    public TracesData readTrace(String traceIdHex, int spans) throws Exception {
      HttpClient c = HttpClient.newHttpClient();
      long deadline = System.nanoTime() + 30_000_000_000L;
      String last = "";
      while (System.nanoTime() < deadline) {
        HttpResponse<byte[]> r = c.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
            + httpPort + "/api/traces/" + traceIdHex)).header("Accept", "application/protobuf")
            .build(), HttpResponse.BodyHandlers.ofByteArray());
        last = String.valueOf(r.statusCode());
        if (r.statusCode() == 200) {
          TracesData d = TracesData.parseFrom(r.body());
          int n = d.getResourceSpansList().stream().flatMap(x -> x.getScopeSpansList().stream())
              .mapToInt(x -> x.getSpansCount()).sum();
          if (n >= spans) {
            return d;
          }
          last = "200 with " + n + " spans";
        } else if (r.statusCode() != 404) {
          fail("GET /api/traces/" + traceIdHex + ": " + r.statusCode() + " "
              + new String(r.body()));
        }
        Thread.sleep(200);
      }
      throw new AssertionError("trace " + traceIdHex + " not readable within 30 s (" + last
          + ")\n" + logTail());
    }

    @Override
    public void close() {
      process.destroy();
      try {
        process.waitFor(10, java.util.concurrent.TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      process.destroyForcibly();
      try (Stream<Path> s = Files.walk(dir)) {
        s.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
      } catch (IOException e) {
        // best effort
      }
    }
  }

  /** Returns {@code $WEFT_BIN}, or marks the calling test skipped with the reason. */
  public static String weftBin() {
    String bin = System.getenv("WEFT_BIN");
    if (bin == null || bin.isBlank()) {
      System.err.println("SKIPPED: WEFT_BIN is not set; not running the end-to-end test against "
          + "the weft binary");
    }
    Assumptions.assumeTrue(bin != null && !bin.isBlank(),
        "WEFT_BIN is not set: the end-to-end test against the weft binary is skipped "
            + "(make test sets it; locally WEFT_BIN=/path/to/target/debug/weft)");
    return bin;
  }

  /** Records a server span with two children; returns the spans by name. */
  public static Map<String, Span> recordTrace(Tracer tracer, String label) {
    Map<String, Span> spans = new HashMap<>();
    Span root = tracer.spanBuilder(label + " root").setSpanKind(SpanKind.SERVER).startSpan();
    spans.put(label + " root", root);
    try (Scope s = root.makeCurrent()) {
      for (int i = 0; i < 2; i++) {
        Span child = tracer.spanBuilder(label + " child " + i).startSpan();
        child.setAttribute("child.index", (long) i);
        child.setAttribute("label", label);
        child.addEvent("work");
        child.setStatus(StatusCode.OK);
        child.end();
        spans.put(label + " child " + i, child);
      }
    }
    root.end();
    return spans;
  }

  /** Checks that every recorded span came back with its IDs, parent, kind and attributes. */
  public static void assertTraceMatches(TracesData d, Map<String, Span> sent, String label) {
    Map<String, io.opentelemetry.proto.trace.v1.Span> got = new HashMap<>();
    d.getResourceSpansList().forEach(rs -> {
      assertEquals("weft-java-e2e", rs.getResource().getAttributesList().stream()
          .filter(kv -> kv.getKey().equals("service.name")).findFirst().orElseThrow()
          .getValue().getStringValue());
      rs.getScopeSpansList().forEach(ss -> ss.getSpansList().forEach(s -> got.put(s.getName(), s)));
    });
    assertEquals(sent.keySet(), got.keySet());
    WeftSpanContext root = (WeftSpanContext) sent.get(label + " root").getSpanContext();
    for (Map.Entry<String, Span> e : sent.entrySet()) {
      io.opentelemetry.proto.trace.v1.Span s = got.get(e.getKey());
      assertArrayEquals(e.getValue().getSpanContext().getTraceIdBytes(),
          s.getTraceId().toByteArray());
      assertArrayEquals(e.getValue().getSpanContext().getSpanIdBytes(),
          s.getSpanId().toByteArray());
      if (e.getKey().contains("child")) {
        assertArrayEquals(root.getSpanIdBytes(), s.getParentSpanId().toByteArray());
        assertEquals(label, s.getAttributesList().stream()
            .filter(kv -> kv.getKey().equals("label")).findFirst().orElseThrow().getValue()
            .getStringValue());
        assertEquals("work", s.getEvents(0).getName());
        assertEquals(io.opentelemetry.proto.trace.v1.Status.StatusCode.STATUS_CODE_OK,
            s.getStatus().getCode());
      } else {
        assertEquals(io.opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_SERVER,
            s.getKind());
        assertTrue(s.getParentSpanId().isEmpty());
      }
      assertTrue(s.getEndTimeUnixNano() >= s.getStartTimeUnixNano());
    }
  }

  /**
   * The Jaeger remote sampler polls the weft binary's own {@code /sampling} (Jaeger remote
   * sampling served by weft) and samples by the strategies file weft serves.
   */
  @Test
  void jaegerRemoteSamplerFollowsTheStrategiesWeftServes() throws Exception {
    String bin = weftBin();
    Path file = Files.createTempFile("weft-strategies", ".json");
    Files.writeString(file, "{\"service_strategies\": [{\"service\": \"checkout\", \"type\": \"probabilistic\","
        + " \"param\": 1.0, \"operation_strategies\": [{\"operation\": \"GET /health\","
        + " \"type\": \"probabilistic\", \"param\": 0}]}]}");
    int port = Weft.freePorts(1)[0];
    try (Weft weft = Weft.start(bin, Map.of("WEFT_SAMPLING_HTTP_PORT", String.valueOf(port),
            "WEFT_SAMPLING_STRATEGIES_FILE", file.toString()));
        io.weft.sdk.sampling.JaegerRemoteSampler sampler =
            io.weft.sdk.sampling.JaegerRemoteSampler.builder("checkout")
                .setEndpoint("http://127.0.0.1:" + port + "/sampling")
                .setPollingInterval(Duration.ofMillis(100))
                .setInitialSampler(Sampler.traceIdRatioBased(0.5))
                .build()) {
      java.util.SplittableRandom rnd = new java.util.SplittableRandom(42);
      java.util.function.Predicate<String> sampled = name -> sampler.shouldSample(
              WeftSpanContext.INVALID, rnd.nextLong(), rnd.nextLong(), name,
              SpanKind.SERVER)
          .decision() == io.weft.sdk.sampling.SamplingDecision.RECORD_AND_SAMPLE;
      // Until the first fetch the initial sampler keeps half; the strategy keeps no health check.
      long deadline = System.nanoTime() + 15_000_000_000L;
      for (int dropped = 0; dropped < 200; ) {
        if (sampled.test("GET /health")) {
          dropped = 0;
          assertTrue(System.nanoTime() < deadline, "the sampler did not take weft's strategy within 15 s");
          Thread.sleep(20);
        } else {
          dropped++;
        }
      }
      for (int i = 0; i < 1000; i++) {
        assertTrue(!sampled.test("GET /health") && sampled.test("POST /pay"),
            "decision " + i + " does not follow weft's strategy (health 0, everything else 1)");
      }
    } finally {
      Files.deleteIfExists(file);
    }
  }

  @Test
  void spansExportedOverHttpAreReadBackFromWeft() throws Exception {
    String bin = weftBin();
    try (Weft weft = Weft.start(bin)) {
      WeftTracerProvider p = WeftTracerProvider.builder()
          .setResource(Resource.create("weft-java-e2e")).setSampler(Sampler.alwaysOn())
          .setExporter(new OtlpExporter(new OtlpHttpTransport("http://127.0.0.1:"
              + weft.otlpHttpPort + "/v1/traces", true, Map.of()), Duration.ofSeconds(10)))
          .build();
      Map<String, Span> sent = recordTrace(p.get("e2e"), "http");
      assertTrue(p.forceFlush(Duration.ofSeconds(20)));
      ExportStats st = p.stats();
      assertEquals(3, st.exported.sum(), st + "\n" + weft.logTail());
      assertEquals(0, st.dropped(), st.toString());
      p.shutdown(Duration.ofSeconds(5));
      String id = sent.get("http root").getSpanContext().getTraceId();
      assertTraceMatches(weft.readTrace(id, 3), sent, "http");
    }
  }
}
