package io.weft.bench;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapSetter;
import io.weft.sdk.propagation.Traceparent;
import io.weft.sdk.propagation.W3CTraceContextPropagator;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;

/**
 * traceparent extract from a reused carrier and inject into a reused carrier. {@code _weft} is
 * weft's allocation-free codec ({@link Traceparent} into a reused holder or {@code char[55]});
 * {@code _weft_api} is weft's propagator through the OpenTelemetry {@code TextMapPropagator} API,
 * which must return a new {@code Context}; {@code _otel} is the OpenTelemetry SDK's propagator.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class TraceparentBench {
  static final String TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

  static final TextMapGetter<Map<String, String>> GETTER = new TextMapGetter<>() {
    @Override
    public Iterable<String> keys(Map<String, String> c) {
      return c.keySet();
    }

    @Override
    public String get(Map<String, String> c, String key) {
      return c.get(key);
    }
  };
  static final TextMapSetter<Map<String, String>> SETTER = Map::put;

  final Map<String, String> in = new HashMap<>(Map.of("traceparent", TP));
  final Map<String, String> out = new HashMap<>();
  final Traceparent holder = new Traceparent();
  final char[] buf = new char[Traceparent.LEN];
  final W3CTraceContextPropagator weft = W3CTraceContextPropagator.getInstance();
  final io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator otel =
      io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator.getInstance();
  final WeftSpanContext weftCtx = WeftSpanContext.create(0x4bf92f3577b34da6L,
      0xa3ce929d0e0e4736L, 0x00f067aa0ba902b7L, (byte) 1, WeftTraceState.EMPTY);
  final Context weftContext = Context.root().with(Span.wrap(weftCtx));
  final Context otelContext = Context.root().with(Span.wrap(SpanContext.create(
      "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", TraceFlags.getSampled(),
      TraceState.getDefault())));

  @Benchmark
  public long traceparent_extract_weft() {
    if (!holder.parse(in.get("traceparent"))) {
      throw new AssertionError();
    }
    return holder.traceIdLow ^ holder.spanId;
  }

  @Benchmark
  public Context traceparent_extract_weft_api() {
    return weft.extract(Context.root(), in, GETTER);
  }

  @Benchmark
  public Context traceparent_extract_otel() {
    return otel.extract(Context.root(), in, GETTER);
  }

  @Benchmark
  public char[] traceparent_inject_weft() {
    Traceparent.format(weftCtx, buf);
    return buf;
  }

  @Benchmark
  public Map<String, String> traceparent_inject_weft_api() {
    weft.inject(weftContext, out, SETTER);
    return out;
  }

  @Benchmark
  public Map<String, String> traceparent_inject_otel() {
    otel.inject(otelContext, out, SETTER);
    return out;
  }
}
