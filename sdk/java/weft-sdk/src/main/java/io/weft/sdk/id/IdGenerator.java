package io.weft.sdk.id;

/**
 * Generates trace and span IDs (spec/ids.md "Generation"). A trace ID is two 64-bit draws
 * (bytes 0-7, then 8-15), redrawn while all zero; a span ID is one draw, redrawn while zero.
 *
 * <p>The X-Ray generator overwrites bytes 0-3 with the Unix time in whole seconds.
 *
 * <p>IDs are returned as longs rather than objects so that generation never allocates: the high
 * half is written into {@link #traceIdHigh} by {@link #nextTraceIdLow}, which callers on one thread
 * read straight after (the generator is stateless otherwise, so one instance serves every thread
 * through {@link TraceId}).
 */
public abstract class IdGenerator {
  IdGenerator() {}

  /** The default generator: every byte random. */
  public static IdGenerator random() {
    return Random.INSTANCE;
  }

  /** The X-Ray compatible generator, reading {@link WallClock#epochSeconds()}. */
  public static IdGenerator xray() {
    return new Xray(WallClock::epochSeconds);
  }

  /** The X-Ray compatible generator with an injected clock of Unix nanoseconds (for tests). */
  public static IdGenerator xray(java.util.function.LongSupplier unixNanos) {
    return new Xray(() -> Long.divideUnsigned(unixNanos.getAsLong(), 1_000_000_000L));
  }

  /** Whether this generator is the X-Ray one. */
  public abstract boolean isXray();

  /**
   * Draws a trace ID into {@code out}. Returns {@code out}.
   */
  public abstract TraceId nextTraceId(RandomSource r, TraceId out);

  /** Draws a span ID: one draw, redrawn while zero. */
  public long nextSpanId(RandomSource r) {
    long v;
    do {
      v = r.nextLong();
    } while (v == 0);
    return v;
  }

  /**
   * A mutable holder for a generated 128-bit trace ID. A holder that does not leave the method
   * that made it is removed by escape analysis (the span builder's), so generating a trace ID
   * allocates nothing.
   */
  public static class TraceId {
    public long high;
    public long low;
  }

  private static final class Random extends IdGenerator {
    static final Random INSTANCE = new Random();

    @Override
    public boolean isXray() {
      return false;
    }

    @Override
    public TraceId nextTraceId(RandomSource r, TraceId out) {
      long hi;
      long lo;
      do {
        hi = r.nextLong();
        lo = r.nextLong();
      } while ((hi | lo) == 0);
      out.high = hi;
      out.low = lo;
      return out;
    }
  }

  private static final class Xray extends IdGenerator {
    private final java.util.function.LongSupplier epochSeconds;

    Xray(java.util.function.LongSupplier epochSeconds) {
      this.epochSeconds = epochSeconds;
    }

    @Override
    public boolean isXray() {
      return true;
    }

    @Override
    public TraceId nextTraceId(RandomSource r, TraceId out) {
      long hi;
      long lo;
      do {
        hi = r.nextLong();
        lo = r.nextLong();
        hi = (epochSeconds.getAsLong() << 32) | (hi & 0xffffffffL);
      } while ((hi | lo) == 0);
      out.high = hi;
      out.low = lo;
      return out;
    }
  }
}
