package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.function.LongSupplier;

/**
 * A token bucket sampling at most {@code rate} spans per second (spec/sampling.md
 * "RateLimiting"), bursts up to {@code max(1, rate)}.
 */
public final class RateLimitingSampler implements Sampler {
  private final double rate;
  private final double maxBalance;
  private final LongSupplier monoNanos;
  private double balance;
  private long last;

  /** A sampler with an injected monotonic clock of integer nanoseconds. */
  public RateLimitingSampler(double rate, LongSupplier monoNanos) {
    this.rate = Double.isNaN(rate) || rate < 0 ? 0 : rate;
    this.maxBalance = Math.max(1.0, this.rate);
    this.monoNanos = monoNanos;
    this.balance = maxBalance;
    this.last = monoNanos.getAsLong();
  }

  public double getRate() {
    return rate;
  }

  /** Takes a token if one is there; the update is one critical section. */
  public synchronized boolean tryAcquire() {
    if (rate == 0) {
      return false;
    }
    long now = monoNanos.getAsLong();
    if (now > last) {
      double elapsed = (double) (now - last) / 1e9;
      balance = Math.min(maxBalance, balance + elapsed * rate);
      last = now;
    }
    if (balance >= 1.0) {
      balance -= 1.0;
      return true;
    }
    return false;
  }

  @Override
  public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind) {
    if (!tryAcquire()) {
      return SamplingResult.DROP;
    }
    WeftTraceState pts = parent.weftTraceState();
    return SamplingResult.of(SamplingDecision.RECORD_AND_SAMPLE, OtMember.eraseTh(pts), pts);
  }

  @Override
  public String getDescription() {
    return "RateLimitingSampler{" + rate + "}";
  }

  @Override
  public String toString() {
    return getDescription();
  }
}
