package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;

/**
 * Chooses a delegate by the parent (spec/sampling.md "ParentBased") and applies the threshold
 * consistency check to its result.
 */
public final class ParentBasedSampler implements Sampler {
  private final Sampler root;
  private final Sampler remoteSampled;
  private final Sampler remoteNotSampled;
  private final Sampler localSampled;
  private final Sampler localNotSampled;

  private ParentBasedSampler(Builder b) {
    this.root = b.root;
    this.remoteSampled = b.remoteSampled;
    this.remoteNotSampled = b.remoteNotSampled;
    this.localSampled = b.localSampled;
    this.localNotSampled = b.localNotSampled;
  }

  static Builder builder(Sampler root) {
    return new Builder(root);
  }

  @Override
  public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind) {
    Sampler s;
    if (!parent.isValid()) {
      s = root;
    } else if (parent.isRemote()) {
      s = parent.isSampled() ? remoteSampled : remoteNotSampled;
    } else {
      s = parent.isSampled() ? localSampled : localNotSampled;
    }
    SamplingResult r = s.shouldSample(parent, traceIdHigh, traceIdLow, name, kind);
    if (r.decision() != SamplingDecision.RECORD_AND_SAMPLE) {
      return r;
    }
    WeftTraceState pts = parent.weftTraceState();
    WeftTraceState ts = r.traceState(pts);
    if (ts.get("ot") == null) {
      return r; // no threshold: nothing to check (the common case, without allocation)
    }
    long t = OtMember.threshold(ts);
    if (t >= 0 && OtMember.randomness(ts, traceIdLow) < t) {
      return SamplingResult.of(SamplingDecision.RECORD_AND_SAMPLE, OtMember.eraseTh(ts), pts);
    }
    return r;
  }

  @Override
  public String getDescription() {
    return "ParentBased{root:" + root.getDescription() + ",remoteParentSampled:"
        + remoteSampled.getDescription() + ",remoteParentNotSampled:"
        + remoteNotSampled.getDescription() + ",localParentSampled:"
        + localSampled.getDescription() + ",localParentNotSampled:"
        + localNotSampled.getDescription() + "}";
  }

  @Override
  public String toString() {
    return getDescription();
  }

  /** Builds a {@link ParentBasedSampler}; unset slots take their defaults. */
  public static final class Builder {
    private final Sampler root;
    private Sampler remoteSampled = Sampler.alwaysOn();
    private Sampler remoteNotSampled = Sampler.alwaysOff();
    private Sampler localSampled = Sampler.alwaysOn();
    private Sampler localNotSampled = Sampler.alwaysOff();

    Builder(Sampler root) {
      this.root = root;
    }

    public Builder setRemoteParentSampled(Sampler s) {
      remoteSampled = s;
      return this;
    }

    public Builder setRemoteParentNotSampled(Sampler s) {
      remoteNotSampled = s;
      return this;
    }

    public Builder setLocalParentSampled(Sampler s) {
      localSampled = s;
      return this;
    }

    public Builder setLocalParentNotSampled(Sampler s) {
      localNotSampled = s;
      return this;
    }

    public ParentBasedSampler build() {
      return new ParentBasedSampler(this);
    }
  }
}
