package io.weft.sdk.trace;

import io.opentelemetry.api.trace.SpanBuilder;
import io.opentelemetry.api.trace.Tracer;

/** A tracer: one instrumentation scope of a {@link WeftTracerProvider}. */
final class WeftTracer implements Tracer {
  private final TracerSharedState shared;
  private final InstrumentationScope scope;

  WeftTracer(TracerSharedState shared, InstrumentationScope scope) {
    this.shared = shared;
    this.scope = scope;
  }

  @Override
  public SpanBuilder spanBuilder(String spanName) {
    return new WeftSpanBuilder(shared, scope, spanName);
  }

  @Override
  public boolean isEnabled() {
    return !shared.shutdown;
  }

  InstrumentationScope scope() {
    return scope;
  }
}
