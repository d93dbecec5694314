package weft.brave;

import brave.Span;
import brave.Tracer;
import brave.Tracing;
import brave.propagation.TraceContext;
import java.util.ArrayList;
import java.util.List;
import zipkin2.reporter.Encoding;
import zipkin2.reporter.brave.AsyncZipkinSpanHandler;
import zipkin2.reporter.urlconnection.URLConnectionSender;

/**
 * Records one trace with Brave and reports it, with the given encoding, to every endpoint given
 * (`.../api/v2/spans`). The trace: a server root in `gateway` with tags and an annotation, a
 * client call to `users` whose server side joins the client's span ID (Brave's default with B3,
 * reported as a shared span), a failing client call to an uninstrumented `postgres`, and a
 * local span. Prints the trace ID.
 *
 * <p>Usage: {@code Report JSON|PROTO3 http://host:port/api/v2/spans [more endpoints...]}
 */
public final class Report {
  public static void main(String[] args) throws Exception {
    Encoding encoding = Encoding.valueOf(args[0]);
    List<AsyncZipkinSpanHandler> handlers = new ArrayList<>();
    List<URLConnectionSender> senders = new ArrayList<>();
    for (int i = 1; i < args.length; i++) {
      URLConnectionSender sender =
          URLConnectionSender.newBuilder().endpoint(args[i]).encoding(encoding).build();
      senders.add(sender);
      handlers.add(AsyncZipkinSpanHandler.create(sender));
    }
    Tracing.Builder gatewayB = Tracing.newBuilder().localServiceName("gateway").localIp("10.3.0.1").localPort(8080);
    Tracing.Builder usersB = Tracing.newBuilder().localServiceName("users").localIp("10.3.0.2").localPort(9000);
    for (AsyncZipkinSpanHandler h : handlers) {
      gatewayB.addSpanHandler(h);
      usersB.addSpanHandler(h);
    }
    Tracing gateway = gatewayB.build();
    Tracing users = usersB.build();
    Tracer gt = gateway.tracer();
    Span root = gt.newTrace().kind(Span.Kind.SERVER).name("GET /checkout").start();
    root.tag("http.method", "GET").tag("http.path", "/checkout").annotate("auth.checked");
    root.remoteIpAndPort("192.168.7.7", 55123);

    Span call = gt.newChild(root.context()).kind(Span.Kind.CLIENT).name("GET /users/{id}").start();
    call.remoteServiceName("users");
    call.remoteIpAndPort("10.3.0.2", 9000);
    TraceContext onTheWire = call.context();
    // The server joins the incoming span ID: a shared span.
    Span server = users.tracer().joinSpan(onTheWire).kind(Span.Kind.SERVER).name("GET /users/{id}").start();
    server.tag("user.id", "42").error(new IllegalStateException("user 42 is locked"));
    Thread.sleep(3);
    server.finish();
    call.finish();

    Span db = gt.newChild(root.context()).kind(Span.Kind.CLIENT).name("select order").start();
    db.remoteServiceName("postgres").tag("sql.query", "select 1");
    db.remoteIpAndPort("10.3.0.3", 5432);
    db.error(new RuntimeException("connection refused"));
    db.finish();

    Span local = gt.newChild(root.context()).name("render").start();
    Thread.sleep(2);
    local.finish();
    root.finish();

    gateway.close();
    users.close();
    for (AsyncZipkinSpanHandler h : handlers) {
      h.flush();
      h.close();
    }
    for (URLConnectionSender s : senders) {
      s.close();
    }
    System.out.println(root.context().traceIdString());
  }
}
