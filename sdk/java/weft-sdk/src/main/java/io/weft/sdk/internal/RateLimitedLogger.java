package io.weft.sdk.internal;

import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

/** Logs at most one message per interval; the others are counted and reported with the next. */
public final class RateLimitedLogger {
  private final Logger logger;
  private final long intervalMillis;
  private final AtomicLong next = new AtomicLong();
  private final AtomicLong suppressed = new AtomicLong();

  public RateLimitedLogger(Logger logger, long intervalMillis) {
    this.logger = logger;
    this.intervalMillis = intervalMillis;
  }

  /** Logs {@code message} at WARNING unless a message was logged within the interval. */
  public void log(String message) {
    long now = System.currentTimeMillis();
    long n = next.get();
    if (now >= n && next.compareAndSet(n, now + intervalMillis)) {
      long s = suppressed.getAndSet(0);
      logger.log(Level.WARNING, s == 0 ? message : message + " (" + s + " similar suppressed)");
    } else {
      suppressed.incrementAndGet();
    }
  }
}
