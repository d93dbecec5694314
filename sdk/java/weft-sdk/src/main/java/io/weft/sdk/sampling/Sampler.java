package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.trace.WeftSpanContext;

/**
 * Decides whether a new span is sampled (spec/sampling.md). Called once per span after the trace
 * ID is chosen and before the span ID is generated. Implementations are thread-safe.
 *
 * <p>Trace IDs are passed as two longs (bytes 0-7 and 8-15, big-endian) so that no sampler forces
 * the hex form of an ID (spec/ids.md "Lazy hex").
 */
public interface Sampler {
  /**
   * Returns the decision for a span.
   *
   * @param parent the parent span context, or {@link WeftSpanContext#INVALID} for a root span
   */
  SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind);

  /** A description such as {@code TraceIdRatioBased{0.5}}. */
  String getDescription();

  static Sampler alwaysOn() {
    return AlwaysOnSampler.INSTANCE;
  }

  static Sampler alwaysOff() {
    return AlwaysOffSampler.INSTANCE;
  }

  static Sampler traceIdRatioBased(double ratio) {
    return new TraceIdRatioBasedSampler(ratio);
  }

  static Sampler consistentProbability(double probability) {
    return new ConsistentProbabilitySampler(probability);
  }

  static Sampler rateLimiting(double spansPerSecond) {
    return new RateLimitingSampler(spansPerSecond, System::nanoTime);
  }

  static ParentBasedSampler.Builder parentBasedBuilder(Sampler root) {
    return ParentBasedSampler.builder(root);
  }

  static Sampler parentBased(Sampler root) {
    return ParentBasedSampler.builder(root).build();
  }
}
