package io.weft.sdk;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.GZIPInputStream;

/**
 * A real OTLP/HTTP receiver on a loopback port: it decodes each request with the official
 * {@code opentelemetry-proto} classes and answers with scripted statuses.
 */
final class OtlpReceiver implements AutoCloseable {
  /** One scripted answer. */
  static final class Answer {
    final int status;
    final Map<String, String> headers;
    final byte[] body;

    Answer(int status, Map<String, String> headers, byte[] body) {
      this.status = status;
      this.headers = headers;
      this.body = body;
    }
  }

  final HttpServer server;
  final List<ExportTraceServiceRequest> requests = Collections.synchronizedList(new ArrayList<>());
  final List<Map<String, List<String>>> requestHeaders =
      Collections.synchronizedList(new ArrayList<>());
  final ConcurrentLinkedQueue<Answer> script = new ConcurrentLinkedQueue<>();
  final AtomicInteger hits = new AtomicInteger();
  volatile long delayMillis;

  OtlpReceiver() throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/v1/traces", this::handle);
    server.start();
  }

  String url() {
    return "http://127.0.0.1:" + server.getAddress().getPort() + "/v1/traces";
  }

  private void handle(HttpExchange ex) throws IOException {
    hits.incrementAndGet();
    try (InputStream in = ex.getRequestBody()) {
      byte[] raw = in.readAllBytes();
      String enc = ex.getRequestHeaders().getFirst("Content-Encoding");
      byte[] body = "gzip".equals(enc)
          ? new GZIPInputStream(new ByteArrayInputStream(raw)).readAllBytes() : raw;
      if (delayMillis > 0) {
        Thread.sleep(delayMillis);
      }
      Answer a = script.poll();
      if (a == null || a.status / 100 == 2) {
        requests.add(ExportTraceServiceRequest.parseFrom(body));
        requestHeaders.add(Map.copyOf(ex.getRequestHeaders()));
      }
      int status = a == null ? 200 : a.status;
      byte[] resp = a == null || a.body == null ? new byte[0] : a.body;
      if (a != null) {
        a.headers.forEach((k, v) -> ex.getResponseHeaders().add(k, v));
      }
      ex.getResponseHeaders().add("Content-Type", "application/x-protobuf");
      ex.sendResponseHeaders(status, resp.length == 0 ? -1 : resp.length);
      if (resp.length > 0) {
        ex.getResponseBody().write(resp);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      ex.close();
    }
  }

  @Override
  public void close() {
    server.stop(0);
  }
}
