package io.weft.sdk.propagation;

import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.context.propagation.TextMapSetter;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.Collection;
import java.util.List;

/** W3C Trace Context Level 2: {@code traceparent} and {@code tracestate}. */
public final class W3CTraceContextPropagator implements TextMapPropagator {
  private static final W3CTraceContextPropagator INSTANCE = new W3CTraceContextPropagator();
  private static final List<String> FIELDS = List.of("traceparent", "tracestate");

  private W3CTraceContextPropagator() {}

  public static W3CTraceContextPropagator getInstance() {
    return INSTANCE;
  }

  @Override
  public Collection<String> fields() {
    return FIELDS;
  }

  @Override
  public <C> void inject(Context context, C carrier, TextMapSetter<C> setter) {
    if (context == null || setter == null) {
      return;
    }
    WeftSpanContext sc = Carriers.spanContext(context);
    if (sc == null) {
      return;
    }
    setter.set(carrier, "traceparent", sc.traceparentHeader());
    WeftTraceState ts = sc.weftTraceState();
    if (!ts.isEmpty()) {
      String h = ts.toHeader();
      if (!h.isEmpty()) {
        setter.set(carrier, "tracestate", h);
      }
    }
  }

  @Override
  public <C> Context extract(Context context, C carrier, TextMapGetter<C> getter) {
    if (context == null) {
      context = Context.root();
    }
    if (getter == null) {
      return context;
    }
    try {
      WeftSpanContext sc = extractSpanContext(carrier, getter);
      return sc == null ? context : Carriers.withSpanContext(context, sc);
    } catch (RuntimeException e) {
      return context; // never let a hostile header reach the application
    }
  }

  /** Extracts the span context, or null when there is no valid {@code traceparent}. */
  public <C> WeftSpanContext extractSpanContext(C carrier, TextMapGetter<C> getter) {
    boolean multiValued = Carriers.multiValued(getter);
    String v = Carriers.single(multiValued, getter, carrier, "traceparent");
    if (v == null || v == Carriers.DUPLICATE) {
      return null; // absent, or present more than once
    }
    WeftSpanContext sc = Traceparent.parseSpanContext(v); // trims only when it must
    if (sc == null) {
      return null;
    }
    List<String> ts = Carriers.all(multiValued, getter, carrier, "tracestate");
    return ts.isEmpty() ? sc : sc.withTraceState(WeftTraceState.parse(ts));
  }

  @Override
  public String toString() {
    return "W3CTraceContextPropagator";
  }
}
