package io.weft.sdk.trace;

/** The SDK version, sent in {@code User-Agent} and {@code telemetry.sdk.version}. */
public final class Version {
  public static final String VERSION = "0.1.0";

  private Version() {}
}
