package io.weft.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftTracerProvider;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Drives the example the way the W3C harness does: a POST /test with headers written on the wire
 * (so a header can be repeated), and a receiving server standing in for the harness's callback
 * endpoint that records the trace headers of each call the service makes.
 */
class TraceContextServiceTest {
  HttpServer harness;
  TraceContextService service;
  final List<List<String>> received = Collections.synchronizedList(new ArrayList<>());

  @BeforeEach
  void start() throws Exception {
    harness = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    harness.createContext("/callback", ex -> {
      try (ex; InputStream in = ex.getRequestBody()) {
        String body = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        List<String> tp = ex.getRequestHeaders().get("traceparent");
        List<String> ts = ex.getRequestHeaders().get("tracestate");
        received.add(List.of(tp == null ? "" : String.join("|", tp),
            ts == null ? "" : String.join("|", ts), body));
        ex.sendResponseHeaders(200, -1);
      }
    });
    harness.start();
    service = new TraceContextService(0, WeftTracerProvider.builder()
        .setResource(Resource.create("tracecontext-service-test")).build());
  }

  @AfterEach
  void stop() {
    service.close();
    harness.stop(0);
  }

  /** Sends POST /test with raw header lines; returns the status line. */
  String post(List<String> headerLines, int calls) throws Exception {
    String cb = "http://127.0.0.1:" + harness.getAddress().getPort() + "/callback";
    StringBuilder body = new StringBuilder("[");
    for (int i = 0; i < calls; i++) {
      body.append(i > 0 ? "," : "").append("{\"url\":\"").append(cb)
          .append("\",\"arguments\":[{\"n\":").append(i).append("}]}");
    }
    body.append(']');
    byte[] b = body.toString().getBytes(StandardCharsets.UTF_8);
    try (Socket s = new Socket("127.0.0.1", service.port())) {
      StringBuilder req = new StringBuilder("POST /test HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          + "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " + b.length
          + "\r\n");
      for (String h : headerLines) {
        req.append(h).append("\r\n");
      }
      req.append("\r\n");
      s.getOutputStream().write(req.toString().getBytes(StandardCharsets.UTF_8));
      s.getOutputStream().write(b);
      s.getOutputStream().flush();
      String resp = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      return resp.substring(0, resp.indexOf('\r'));
    }
  }

  void assertDistinctParents(String traceId) {
    Set<String> traces = new HashSet<>();
    Set<String> parents = new HashSet<>();
    for (List<String> r : received) {
      String tp = r.get(0);
      assertEquals(55, tp.length(), tp);
      traces.add(tp.substring(3, 35));
      parents.add(tp.substring(36, 52));
    }
    assertEquals(1, traces.size());
    assertEquals(received.size(), parents.size(), "each outgoing call has its own parent-id");
    if (traceId != null) {
      assertEquals(traceId, traces.iterator().next());
    }
  }

  @Test
  void validTraceparentIsContinuedWithOneParentIdPerCall() throws Exception {
    assertEquals("HTTP/1.1 200 OK", post(List.of(
        "traceparent: 00-12345678901234567890123456789012-1234567890123456-01",
        "tracestate: foo=1"), 3));
    assertEquals(3, received.size());
    assertDistinctParents("12345678901234567890123456789012");
    for (List<String> r : received) {
      assertTrue(r.get(0).endsWith("-01"));
      assertNotEquals("1234567890123456", r.get(0).substring(36, 52));
      assertEquals("foo=1", r.get(1));
    }
    assertEquals("[{\"n\":0}]", received.get(0).get(2));
  }

  @Test
  void missingOrInvalidTraceparentStartsOneNewTrace() throws Exception {
    post(List.of(), 2);
    assertDistinctParents(null);
    received.clear();
    post(List.of("traceparent: 00-12345678901234567890123456789012-0000000000000000-01"), 2);
    assertDistinctParents(null);
    assertNotEquals("12345678901234567890123456789012", received.get(0).get(0).substring(3, 35));
  }

  @Test
  void duplicatedTraceparentIsIgnored() throws Exception {
    post(List.of("traceparent: 00-12345678901234567890123456789012-1234567890123456-01",
        "traceparent: 00-12345678901234567890123456789012-1234567890123456-01"), 1);
    assertNotEquals("12345678901234567890123456789012", received.get(0).get(0).substring(3, 35));
  }

  @Test
  void duplicatedTracestateKeyKeepsTheFirstMember() throws Exception {
    post(List.of("traceparent: 00-12345678901234567890123456789012-1234567890123456-01",
        "tracestate: foo=1,foo=2", "tracestate: bar=3"), 1);
    assertEquals("foo=1,bar=3", received.get(0).get(1));
  }

  @Test
  void notAJsonArrayIsABadRequest() throws Exception {
    HttpServer unused = harness;
    assertTrue(unused != null);
    try (Socket s = new Socket("127.0.0.1", service.port())) {
      s.getOutputStream().write(("POST /test HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
          + "Content-Length: 2\r\n\r\n{}").getBytes(StandardCharsets.UTF_8));
      String resp = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(resp.startsWith("HTTP/1.1 400"), resp);
    }
  }
}
