package io.weft.sdk.sampling;

/** The decision of a {@link Sampler}. */
public enum SamplingDecision {
  DROP,
  RECORD_ONLY,
  RECORD_AND_SAMPLE;

  public boolean isSampled() {
    return this == RECORD_AND_SAMPLE;
  }

  public boolean isRecording() {
    return this != DROP;
  }
}
