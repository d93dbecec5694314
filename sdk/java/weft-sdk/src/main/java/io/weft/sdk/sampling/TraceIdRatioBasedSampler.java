package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;

/**
 * The stable OpenTelemetry ratio sampler on the low 64 bits (spec/sampling.md
 * "TraceIdRatioBased"): sampled when {@code (low64 >>> 1) < trunc(ratio * 2^63)}.
 */
public final class TraceIdRatioBasedSampler implements Sampler {
  private final double ratio;
  private final boolean all;
  private final long bound;

  TraceIdRatioBasedSampler(double ratio) {
    this.ratio = ratio;
    this.all = ratio >= 1;
    this.bound = bound(ratio);
  }

  /** {@code trunc(r * 2^63)}, 0 for r <= 0 or NaN; meaningless when r >= 1. */
  public static long bound(double ratio) {
    if (!(ratio > 0)) {
      return 0;
    }
    if (ratio >= 1) {
      return Long.MAX_VALUE;
    }
    return (long) (ratio * 9223372036854775808.0);
  }

  public double getRatio() {
    return ratio;
  }

  /** Whether {@code traceIdLow} is sampled. */
  public boolean samples(long traceIdLow) {
    return all || (traceIdLow >>> 1) < bound;
  }

  @Override
  public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind) {
    if (!samples(traceIdLow)) {
      return SamplingResult.DROP;
    }
    WeftTraceState pts = parent.weftTraceState();
    return SamplingResult.of(SamplingDecision.RECORD_AND_SAMPLE, OtMember.eraseTh(pts), pts);
  }

  @Override
  public String getDescription() {
    return "TraceIdRatioBased{" + ratio + "}";
  }

  @Override
  public String toString() {
    return getDescription();
  }
}
