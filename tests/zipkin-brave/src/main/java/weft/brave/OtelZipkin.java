package weft.brave;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import io.opentelemetry.exporter.zipkin.ZipkinSpanExporter;
import io.opentelemetry.sdk.resources.Resource;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.SdkTracerProviderBuilder;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.util.concurrent.TimeUnit;
import zipkin2.reporter.Encoding;
import zipkin2.reporter.SpanBytesEncoder;
import zipkin2.reporter.urlconnection.URLConnectionSender;

/**
 * Records one trace with the OpenTelemetry Java SDK and exports it with the OpenTelemetry Zipkin
 * exporter, in the given encoding, to every endpoint given (`.../api/v2/spans`). The trace: a
 * server root with attributes of every type and an event, a failing client child with
 * `peer.service`, and an internal span. Prints the trace ID.
 *
 * <p>Usage: {@code OtelZipkin JSON|PROTO3 http://host:port/api/v2/spans [more endpoints...]}
 */
public final class OtelZipkin {
  public static void main(String[] args) throws Exception {
    boolean proto3 = args[0].equals("PROTO3");
    Resource resource =
        Resource.getDefault()
            .merge(
                Resource.create(
                    Attributes.of(
                        AttributeKey.stringKey("service.name"), "shop-java",
                        AttributeKey.stringKey("host.name"), "h-2")));
    SdkTracerProviderBuilder b = SdkTracerProvider.builder().setResource(resource);
    for (int i = 1; i < args.length; i++) {
      // JSON through the exporter's default sender (OkHttp). Proto3 needs a sender whose
      // Content-Type says so: the default one's says JSON, which Zipkin and weft both refuse.
      ZipkinSpanExporter exporter =
          proto3
              ? ZipkinSpanExporter.builder()
                  .setEncoder(SpanBytesEncoder.PROTO3)
                  .setSender(
                      URLConnectionSender.newBuilder().endpoint(args[i]).encoding(Encoding.PROTO3).build())
                  .build()
              : ZipkinSpanExporter.builder().setEndpoint(args[i]).build();
      b.addSpanProcessor(SimpleSpanProcessor.create(exporter));
    }
    SdkTracerProvider provider = b.build();
    Tracer t = provider.get("shop.instrumentation", "3.0");
    Span root = t.spanBuilder("POST /cart").setSpanKind(SpanKind.SERVER).startSpan();
    String traceId;
    try (Scope ignored = root.makeCurrent()) {
      root.setAttribute("http.method", "POST");
      root.setAttribute("items", 3L);
      root.setAttribute("ratio", 0.5);
      root.setAttribute("cached", true);
      root.addEvent("validated", Attributes.of(AttributeKey.stringKey("rule"), "max-items"));
      Span db = t.spanBuilder("INSERT cart").setSpanKind(SpanKind.CLIENT).startSpan();
      db.setAttribute("peer.service", "postgres");
      db.setAttribute("net.peer.name", "db.local");
      db.setStatus(StatusCode.ERROR, "deadlock");
      Thread.sleep(2);
      db.end();
      Span local = t.spanBuilder("render").startSpan();
      Thread.sleep(1);
      local.end();
      traceId = root.getSpanContext().getTraceId();
    } finally {
      root.end();
    }
    provider.forceFlush().join(10, TimeUnit.SECONDS);
    provider.shutdown().join(10, TimeUnit.SECONDS);
    System.out.println(traceId);
  }
}
