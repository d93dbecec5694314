package io.weft.sdk.id;

import io.weft.sdk.internal.PerThread;
import java.security.SecureRandom;

/**
 * The wyrand PRNG (spec/ids.md "PRNG requirements"): 64 bits of state, one 128-bit multiply per
 * draw. Not thread-safe; {@link #current()} gives each thread its own instance, seeded from
 * {@link SecureRandom} the first time the thread asks.
 *
 * <p>The JVM has no {@code fork()} without {@code exec}, so no reseeding after fork is needed.
 */
public final class WyRand implements RandomSource {
  private static final long INCREMENT = 0xa0761d6478bd642fL;
  private static final long XOR = 0xe7037ed1a0b428dbL;
  private static final SecureRandom SEEDER = new SecureRandom();

  private long state;

  /** Creates a generator with the given seed (for tests and vectors). */
  public WyRand(long seed) {
    this.state = seed;
  }

  /**
   * Returns this thread's generator. It lives in {@link PerThread}, beside the thread's export
   * lane, so that starting a span makes one {@code ThreadLocal} lookup for both. (A shared
   * SplittableRandom or ThreadLocalRandom would also do, but wyrand gives the stream the spec's
   * vectors pin.)
   */
  public static WyRand current() {
    return PerThread.current().rng;
  }

  /** A generator seeded from {@link SecureRandom}. */
  public static WyRand seeded() {
    return new WyRand(seed());
  }

  private static long seed() {
    byte[] b;
    synchronized (SEEDER) {
      b = SEEDER.generateSeed(8);
    }
    return Hex.getLong(b, 0);
  }

  @Override
  public long nextLong() {
    long s = state + INCREMENT;
    state = s;
    long b = s ^ XOR;
    long hi = Math.multiplyHigh(s, b) + ((s >> 63) & b) + ((b >> 63) & s);
    return hi ^ (s * b);
  }
}
