package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Logger;

/**
 * OTEP 235 consistent probability sampling (spec/sampling.md "ConsistentProbability"): sampled
 * when the randomness R (the parent's {@code rv}, else the trace ID's low 56 bits) is at least the
 * rejection threshold T; a sampled span carries {@code ot=th:...}.
 */
public final class ConsistentProbabilitySampler implements Sampler {
  private static final Logger LOG = Logger.getLogger(ConsistentProbabilitySampler.class.getName());
  private static final AtomicBoolean WARNED = new AtomicBoolean();

  private final double probability;
  private final boolean off;
  private final String th;
  private final long threshold;

  ConsistentProbabilitySampler(double p) {
    if (Double.isNaN(p) || p < 0 || p > 1) {
      LOG.warning("consistent probability " + p + " is outside [0, 1], clamped");
    }
    if (!(p > 0)) {
      p = 0;
    } else if (p > 1) {
      p = 1;
    }
    this.probability = p;
    this.off = p == 0;
    this.th = off ? null : th(p);
    this.threshold = off ? 0 : thresholdOf(th);
  }

  /** The {@code th} value for probability {@code p} in (0, 1], precision 4. */
  public static String th(double p) {
    if (p == 1) {
      return "0";
    }
    int e = Math.getExponent(p) + 1; // frexp exponent: p = m * 2^e with 0.5 <= m < 1
    int precision = Math.max(1, Math.min(12, 4 + Math.floorDiv(-e, 4)));
    double q = 2.0 - p;
    q = q + Math.scalb(1.0, -4 * precision - 1);
    String digits;
    if (q >= 2.0) {
      digits = "fffffffffffff";
    } else {
      long frac = Double.doubleToRawLongBits(q) & ((1L << 52) - 1);
      String h = Long.toHexString(frac);
      digits = "0".repeat(13 - h.length()) + h;
    }
    String t = digits.substring(0, precision);
    int end = t.length();
    while (end > 0 && t.charAt(end - 1) == '0') {
      end--;
    }
    return end == 0 ? "0" : t.substring(0, end);
  }

  /** The 56-bit threshold of a {@code th} string. */
  public static long thresholdOf(String th) {
    return Long.parseLong(th, 16) << (4 * (14 - th.length()));
  }

  public double getProbability() {
    return probability;
  }

  @Override
  public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind) {
    if (off) {
      return SamplingResult.DROP;
    }
    WeftTraceState pts = parent.weftTraceState();
    long r = OtMember.randomness(pts, traceIdLow);
    if (OtMember.presumedRandom(parent) && OtMember.subkey(pts, "rv") == null
        && WARNED.compareAndSet(false, true)) {
      LOG.warning("consistent probability sampling presumes trace ID randomness for a parent "
          + "without the random flag (OpenTelemetry compatibility warning)");
    }
    if (r < threshold) {
      return SamplingResult.DROP;
    }
    return SamplingResult.of(SamplingDecision.RECORD_AND_SAMPLE, OtMember.setTh(pts, th), pts);
  }

  @Override
  public String getDescription() {
    return "ConsistentProbability{" + probability + "}";
  }

  @Override
  public String toString() {
    return getDescription();
  }
}
