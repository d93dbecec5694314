package io.weft.sdk;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.context.propagation.ContextPropagators;
import io.weft.sdk.propagation.CompositePropagator;
import io.weft.sdk.trace.WeftTracerProvider;
import java.io.Closeable;

/**
 * An {@link OpenTelemetry} made of a {@link WeftTracerProvider} and weft propagators, for code that
 * takes an {@code OpenTelemetry} instance (the OpenTelemetry Java instrumentation libraries).
 */
public final class WeftOpenTelemetry implements OpenTelemetry, Closeable {
  private final WeftTracerProvider tracerProvider;
  private final ContextPropagators propagators;

  public WeftOpenTelemetry(WeftTracerProvider tracerProvider, ContextPropagators propagators) {
    this.tracerProvider = tracerProvider;
    this.propagators = propagators;
  }

  /** Everything from the environment ({@code OTEL_*}, including {@code OTEL_PROPAGATORS}). */
  public static WeftOpenTelemetry fromEnv() {
    return new WeftOpenTelemetry(WeftTracerProvider.builder().fromEnv().build(),
        CompositePropagator.fromEnv().toContextPropagators());
  }

  @Override
  public TracerProvider getTracerProvider() {
    return tracerProvider;
  }

  public WeftTracerProvider getWeftTracerProvider() {
    return tracerProvider;
  }

  @Override
  public ContextPropagators getPropagators() {
    return propagators;
  }

  @Override
  public void close() {
    tracerProvider.close();
  }
}
