package io.weft.sdk.propagation;

import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.ContextPropagators;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.context.propagation.TextMapSetter;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.logging.Logger;

/**
 * An ordered list of propagators (spec/propagation.md "Composite propagator"): extract runs each
 * in order on the previous one's context (the last valid span context wins, baggage accumulates);
 * inject runs each in order.
 */
public final class CompositePropagator implements TextMapPropagator {
  private static final Logger LOG = Logger.getLogger(CompositePropagator.class.getName());

  private final List<TextMapPropagator> propagators;
  private final List<String> fields;

  private CompositePropagator(List<TextMapPropagator> propagators) {
    this.propagators = List.copyOf(propagators);
    Set<String> f = new LinkedHashSet<>();
    for (TextMapPropagator p : propagators) {
      f.addAll(p.fields());
    }
    this.fields = Collections.unmodifiableList(new ArrayList<>(f));
  }

  /** A composite of the given propagators, in order. */
  public static CompositePropagator of(TextMapPropagator... propagators) {
    return new CompositePropagator(List.of(propagators));
  }

  /**
   * A composite from {@code OTEL_PROPAGATORS}-style names: {@code tracecontext}, {@code baggage},
   * {@code b3}, {@code b3multi}, {@code xray}, {@code jaeger}, {@code none}. A name listed twice is
   * used once; an unknown name is logged and ignored.
   */
  public static CompositePropagator fromNames(List<String> names) {
    List<TextMapPropagator> out = new ArrayList<>();
    Set<String> seen = new LinkedHashSet<>();
    for (String raw : names) {
      String n = raw.trim();
      if (n.isEmpty() || !seen.add(n)) {
        continue;
      }
      switch (n) {
        case "tracecontext":
          out.add(W3CTraceContextPropagator.getInstance());
          break;
        case "baggage":
          out.add(W3CBaggagePropagator.getInstance());
          break;
        case "b3":
          out.add(B3Propagator.injectingSingleHeader());
          break;
        case "b3multi":
          out.add(B3Propagator.injectingMultiHeaders());
          break;
        case "xray":
          out.add(XrayPropagator.getInstance());
          break;
        case "jaeger":
          out.add(JaegerPropagator.getInstance());
          break;
        case "none":
          break;
        default:
          LOG.warning("unknown propagator " + n + " in OTEL_PROPAGATORS, ignored");
      }
    }
    return new CompositePropagator(out);
  }

  /** From {@code OTEL_PROPAGATORS} (default {@code tracecontext,baggage}). */
  public static CompositePropagator fromEnv() {
    String v = System.getenv("OTEL_PROPAGATORS");
    if (v == null || v.isBlank()) {
      v = "tracecontext,baggage";
    }
    return fromNames(List.of(v.split(",")));
  }

  /** The propagators as OpenTelemetry {@link ContextPropagators}. */
  public ContextPropagators toContextPropagators() {
    return ContextPropagators.create(this);
  }

  @Override
  public Collection<String> fields() {
    return fields;
  }

  @Override
  public <C> void inject(Context context, C carrier, TextMapSetter<C> setter) {
    for (TextMapPropagator p : propagators) {
      p.inject(context, carrier, setter);
    }
  }

  @Override
  public <C> Context extract(Context context, C carrier, TextMapGetter<C> getter) {
    if (context == null) {
      context = Context.root();
    }
    for (TextMapPropagator p : propagators) {
      context = p.extract(context, carrier, getter);
    }
    return context;
  }

  @Override
  public String toString() {
    return "CompositePropagator" + propagators;
  }
}
