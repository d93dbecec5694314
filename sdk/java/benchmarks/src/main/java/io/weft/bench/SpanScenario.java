package io.weft.bench;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.Tracer;

/** The span scenarios, written once against the OpenTelemetry API and run on both SDKs. */
final class SpanScenario {
  static final String[] KEYS = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"};

  private SpanScenario() {}

  static Span run(Tracer tracer, int attributes, boolean event) {
    Span span = tracer.spanBuilder("op").startSpan();
    for (int i = 0; i < attributes; i++) {
      if ((i & 1) == 0) {
        span.setAttribute(KEYS[i], (long) i);
      } else {
        span.setAttribute(KEYS[i], "value");
      }
    }
    if (event) {
      span.addEvent("event");
    }
    span.end();
    return span;
  }
}
