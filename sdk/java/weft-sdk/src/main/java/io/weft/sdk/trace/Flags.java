package io.weft.sdk.trace;

/** Trace flags of new spans (spec/ids.md "The random flag"). */
public final class Flags {
  private Flags() {}

  /**
   * The flags of a new span: a root ({@code parentFlags < 0}) gets the random flag; a child copies
   * its parent's random flag; the sampled flag follows the decision.
   */
  public static byte child(int parentFlags, boolean sampled) {
    int f = parentFlags < 0 ? WeftSpanContext.RANDOM : parentFlags & WeftSpanContext.RANDOM;
    return (byte) (sampled ? f | WeftSpanContext.SAMPLED : f);
  }
}
