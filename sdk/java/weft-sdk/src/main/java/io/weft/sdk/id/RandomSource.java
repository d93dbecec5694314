package io.weft.sdk.id;

/** A source of 64-bit draws for ID generation. Implementations need not be thread-safe. */
@FunctionalInterface
public interface RandomSource {
  /** Returns the next 64-bit draw. */
  long nextLong();
}
