package io.weft.sdk.export;

import java.util.concurrent.atomic.AtomicLong;

/**
 * An {@link AtomicLong} followed by a cache line of padding, so that two counters allocated one
 * after the other (a queue's head and tail) never share a cache line: without it the producer's
 * CAS on the tail invalidated the consumer's line holding the head on every span
 * (span_sampled_* benchmarks; docs/benchmarks/java-sdk-floor.md).
 */
@SuppressWarnings("unused")
final class PaddedCounter extends AtomicLong {
  private static final long serialVersionUID = 1L;
  private long p1;
  private long p2;
  private long p3;
  private long p4;
  private long p5;
  private long p6;
  private long p7;
}
