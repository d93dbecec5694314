package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.trace.WeftSpanContext;

final class AlwaysOffSampler implements Sampler {
  static final AlwaysOffSampler INSTANCE = new AlwaysOffSampler();

  @Override
  public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind) {
    return SamplingResult.DROP;
  }

  @Override
  public String getDescription() {
    return "AlwaysOffSampler";
  }

  @Override
  public String toString() {
    return getDescription();
  }
}
