package io.weft.examples;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.weft.sdk.internal.Json;
import io.weft.sdk.propagation.W3CTraceContextPropagator;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftTracerProvider;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;

/**
 * The service the W3C trace-context test harness drives ({@code test/test.py} of
 * github.com/w3c/trace-context): {@code POST /test} with a JSON array of {@code {"url",
 * "arguments"}}. The service extracts {@code traceparent}/{@code tracestate} from the request,
 * starts a server span under them (a new trace when they are absent or invalid) and, for each
 * element, POSTs {@code arguments} to {@code url} under a client span of its own whose context is
 * injected into that request, so that every outgoing request carries its own parent-id
 * (spec/propagation.md "Outgoing requests").
 *
 * <p>Usage: {@code java -cp ... io.weft.examples.TraceContextService [PORT]} (default 5000).
 * Spans are exported with OTLP when {@code OTEL_EXPORTER_OTLP_ENDPOINT} is set.
 */
public final class TraceContextService implements AutoCloseable {
  private static final TextMapGetter<HttpExchange> GETTER = new TextMapGetter<>() {
    @Override
    public Iterable<String> keys(HttpExchange ex) {
      return ex.getRequestHeaders().keySet();
    }

    @Override
    public String get(HttpExchange ex, String key) {
      return ex == null ? null : ex.getRequestHeaders().getFirst(key);
    }

    @Override
    public Iterator<String> getAll(HttpExchange ex, String key) {
      List<String> v = ex == null ? null : ex.getRequestHeaders().get(key);
      return v == null ? Collections.emptyIterator() : v.iterator();
    }
  };

  private final HttpServer server;
  private final WeftTracerProvider provider;
  private final Tracer tracer;
  private final TextMapPropagator propagator = W3CTraceContextPropagator.getInstance();
  private final HttpClient client = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).version(HttpClient.Version.HTTP_1_1).build();

  public TraceContextService(int port, WeftTracerProvider provider) throws IOException {
    this.provider = provider;
    this.tracer = provider.get("io.weft.examples.tracecontext");
    this.server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
    server.createContext("/test", this::handle);
    server.setExecutor(Executors.newFixedThreadPool(8));
    server.start();
  }

  public int port() {
    return server.getAddress().getPort();
  }

  private void handle(HttpExchange ex) throws IOException {
    try (ex) {
      Context parent = propagator.extract(Context.root(), ex, GETTER);
      Span server = tracer.spanBuilder("tracecontext-service").setParent(parent)
          .setSpanKind(SpanKind.SERVER).startSpan();
      byte[] body;
      try (InputStream in = ex.getRequestBody()) {
        body = in.readAllBytes();
      }
      Object doc;
      try {
        doc = Json.parse(new String(body, StandardCharsets.UTF_8));
      } catch (IllegalArgumentException e) {
        doc = null;
      }
      if (!(doc instanceof List)) {
        server.setStatus(StatusCode.ERROR, "expected a JSON array");
        server.end();
        byte[] msg = "expected a JSON array\n".getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(400, msg.length);
        ex.getResponseBody().write(msg);
        return;
      }
      try (Scope s = server.makeCurrent()) {
        for (Object call : (List<?>) doc) {
          if (!(call instanceof Map) || !(((Map<?, ?>) call).get("url") instanceof String)) {
            continue;
          }
          String url = (String) ((Map<?, ?>) call).get("url");
          Object args = ((Map<?, ?>) call).get("arguments");
          callOut(url, toJson(args == null ? Json.NULL : args));
        }
      }
      server.end();
      ex.sendResponseHeaders(200, -1);
    }
  }

  /** One outgoing request under its own client span. */
  private void callOut(String url, String json) {
    Span span = tracer.spanBuilder("POST").setSpanKind(SpanKind.CLIENT)
        .setAttribute("http.request.method", "POST").setAttribute("url.full", url).startSpan();
    HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(url))
        .timeout(Duration.ofSeconds(10)).header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(json));
    propagator.inject(Context.current().with(span), rb, HttpRequest.Builder::setHeader);
    try {
      HttpResponse<Void> r = client.send(rb.build(), HttpResponse.BodyHandlers.discarding());
      span.setAttribute("http.response.status_code", (long) r.statusCode());
    } catch (IOException | IllegalArgumentException e) {
      span.setStatus(StatusCode.ERROR, e.toString());
      System.err.println("tracecontext-service: calling " + url + " failed: " + e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      span.end();
    }
  }

  /** Serialises a value from {@link Json#parse} back to JSON. */
  static String toJson(Object v) {
    StringBuilder sb = new StringBuilder();
    write(v, sb);
    return sb.toString();
  }

  private static void write(Object v, StringBuilder sb) {
    if (v == null || v == Json.NULL) {
      sb.append("null");
    } else if (v instanceof String) {
      sb.append('"');
      for (char c : ((String) v).toCharArray()) {
        if (c == '"' || c == '\\') {
          sb.append('\\').append(c);
        } else if (c < 0x20) {
          sb.append(String.format("\\u%04x", (int) c));
        } else {
          sb.append(c);
        }
      }
      sb.append('"');
    } else if (v instanceof Double) {
      double d = (Double) v;
      sb.append(d == Math.rint(d) && Math.abs(d) < 1e15 ? String.valueOf((long) d)
          : String.valueOf(d));
    } else if (v instanceof Boolean) {
      sb.append(v);
    } else if (v instanceof List) {
      sb.append('[');
      boolean first = true;
      for (Object o : (List<?>) v) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        write(o, sb);
      }
      sb.append(']');
    } else if (v instanceof Map) {
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        write(String.valueOf(e.getKey()), sb);
        sb.append(':');
        write(e.getValue(), sb);
      }
      sb.append('}');
    }
  }

  @Override
  public void close() {
    server.stop(0);
    ((java.util.concurrent.ExecutorService) server.getExecutor()).shutdownNow();
    provider.shutdown(Duration.ofSeconds(5));
  }

  static WeftTracerProvider provider() {
    Map<String, String> env = System.getenv();
    if (env.containsKey("OTEL_EXPORTER_OTLP_ENDPOINT")
        || env.containsKey("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
      return WeftTracerProvider.builder().fromEnv().build();
    }
    return WeftTracerProvider.builder().setResource(Resource.create("tracecontext-service"))
        .build();
  }

  public static void main(String[] args) throws Exception {
    int port = 5000;
    if (args.length > 0) {
      try {
        port = Integer.parseInt(args[0]);
      } catch (NumberFormatException e) {
        System.err.println("usage: TraceContextService [PORT]: " + e.getMessage());
        System.exit(2);
      }
    }
    TraceContextService svc = new TraceContextService(port, provider());
    Runtime.getRuntime().addShutdownHook(new Thread(svc::close));
    System.err.println("tracecontext-service listening on http://127.0.0.1:" + svc.port()
        + "/test");
    Thread.currentThread().join();
  }
}
