package io.weft.sdk.sampling;

import io.weft.sdk.trace.WeftTraceState;

/**
 * A decision and the tracestate of the new span. A null {@link #traceState()} means "the parent's
 * tracestate, unchanged" so that the common results are shared constants and sampling allocates
 * nothing (the unsampled-span benchmark counts bytes per span).
 */
public final class SamplingResult {
  public static final SamplingResult DROP = new SamplingResult(SamplingDecision.DROP, null);
  public static final SamplingResult RECORD_ONLY =
      new SamplingResult(SamplingDecision.RECORD_ONLY, null);
  public static final SamplingResult RECORD_AND_SAMPLE =
      new SamplingResult(SamplingDecision.RECORD_AND_SAMPLE, null);

  private final SamplingDecision decision;
  private final WeftTraceState traceState;

  private SamplingResult(SamplingDecision decision, WeftTraceState traceState) {
    this.decision = decision;
    this.traceState = traceState;
  }

  /** A result with a tracestate that differs from the parent's (or the parent's when equal). */
  public static SamplingResult of(SamplingDecision decision, WeftTraceState traceState,
      WeftTraceState parentTraceState) {
    if (traceState == parentTraceState || traceState == null) {
      return decision == SamplingDecision.DROP ? DROP
          : decision == SamplingDecision.RECORD_ONLY ? RECORD_ONLY : RECORD_AND_SAMPLE;
    }
    return new SamplingResult(decision, traceState);
  }

  public SamplingDecision decision() {
    return decision;
  }

  /** The tracestate for the new span, or null for the parent's unchanged. */
  public WeftTraceState traceState() {
    return traceState;
  }

  /** The tracestate for the new span given the parent's. */
  public WeftTraceState traceState(WeftTraceState parent) {
    return traceState == null ? parent : traceState;
  }
}
