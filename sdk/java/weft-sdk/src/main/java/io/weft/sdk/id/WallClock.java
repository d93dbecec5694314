package io.weft.sdk.id;

import java.time.Instant;

/**
 * Wall-clock Unix nanoseconds as a {@code long}: an anchor read once from {@link Instant#now()}
 * plus {@link System#nanoTime()} elapsed since, re-anchored at most once a second so that the
 * result follows wall-clock steps (NTP) within a second.
 *
 * <p>{@code Instant.now()} costs about 25 ns and allocates; {@code nanoTime} is about 15 ns and
 * does not, which is what the span start and end benchmarks pay twice per span.
 */
public final class WallClock {
  private static final long REANCHOR_NANOS = 1_000_000_000L;

  private static final class Anchor {
    final long unixNanos;
    final long monoNanos;

    Anchor(long unixNanos, long monoNanos) {
      this.unixNanos = unixNanos;
      this.monoNanos = monoNanos;
    }
  }

  private static volatile Anchor anchor = newAnchor();

  private WallClock() {}

  private static Anchor newAnchor() {
    Instant now = Instant.now();
    long mono = System.nanoTime();
    return new Anchor(now.getEpochSecond() * 1_000_000_000L + now.getNano(), mono);
  }

  /** Returns the current Unix time in nanoseconds. */
  public static long nowNanos() {
    return epochNanosAt(System.nanoTime());
  }

  /** Returns the Unix time in nanoseconds at {@code mono}, a recent {@link System#nanoTime()}. */
  public static long epochNanosAt(long mono) {
    Anchor a = anchor;
    long elapsed = mono - a.monoNanos;
    if (elapsed > REANCHOR_NANOS) {
      // A benign race: several threads may re-anchor at once; each publishes a consistent Anchor.
      a = newAnchor();
      anchor = a;
      return a.unixNanos;
    }
    return a.unixNanos + elapsed;
  }

  private static volatile long epochSeconds = Long.MIN_VALUE;

  /**
   * The current Unix time in whole seconds, read from a field that a daemon thread
   * ({@code weft-clock}, started on first use) refreshes just after every second boundary. The
   * X-Ray ID generator needs only seconds, and a field read costs about 1 ns where a clock read
   * costs about 25 ns on this class of machine (xray_create benchmark). The value lags the wall
   * clock by at most the thread's wake-up latency, typically well under a millisecond.
   */
  public static long epochSeconds() {
    long s = epochSeconds;
    if (s == Long.MIN_VALUE) {
      s = startTicker();
    }
    return s;
  }

  private static synchronized long startTicker() {
    if (epochSeconds != Long.MIN_VALUE) {
      return epochSeconds;
    }
    epochSeconds = Math.floorDiv(nowNanos(), 1_000_000_000L);
    Thread t = new Thread(() -> {
      while (true) {
        long now = nowNanos();
        epochSeconds = Math.floorDiv(now, 1_000_000_000L);
        long toNext = 1_000_000_000L - Math.floorMod(now, 1_000_000_000L);
        java.util.concurrent.locks.LockSupport.parkNanos(toNext + 200_000L);
      }
    }, "weft-clock");
    t.setDaemon(true);
    t.start();
    return epochSeconds;
  }
}
