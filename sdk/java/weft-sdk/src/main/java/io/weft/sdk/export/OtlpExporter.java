package io.weft.sdk.export;

import io.weft.sdk.internal.RateLimitedLogger;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.Resource;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.logging.Logger;

/**
 * Encodes batches as OTLP and sends them through a transport with bounded retry (spec/otlp.md
 * "Retry"): at most 5 attempts, jittered exponential back-off or the server's delay, all within a
 * per-batch deadline. Drops are counted by reason and logged at most once a minute per reason.
 */
public final class OtlpExporter implements SpanExporter {
  private static final Logger LOG = Logger.getLogger(OtlpExporter.class.getName());

  private final OtlpTransport transport;
  private final long timeoutNanos;
  private final OtlpEncoder encoder = new OtlpEncoder();
  private final CountDownLatch shutdown = new CountDownLatch(1);
  private final LongSupplier monoNanos;
  private final RateLimitedLogger permanentLog = new RateLimitedLogger(LOG, 60_000);
  private final RateLimitedLogger exhaustedLog = new RateLimitedLogger(LOG, 60_000);
  private final RateLimitedLogger deadlineLog = new RateLimitedLogger(LOG, 60_000);
  private final RateLimitedLogger rejectedLog = new RateLimitedLogger(LOG, 60_000);

  public OtlpExporter(OtlpTransport transport, Duration timeout) {
    this(transport, timeout, System::nanoTime);
  }

  OtlpExporter(OtlpTransport transport, Duration timeout, LongSupplier monoNanos) {
    this.transport = transport;
    this.timeoutNanos = timeout.toNanos();
    this.monoNanos = monoNanos;
  }

  /** An OTLP/HTTP exporter to {@code endpoint} with gzip and a 10 s deadline. */
  public static OtlpExporter http(String endpoint) {
    return new OtlpExporter(new OtlpHttpTransport(endpoint, true, java.util.Map.of()),
        Duration.ofSeconds(10));
  }

  /** Batches are encoded before the call returns; the spans are not kept. */
  @Override
  public boolean retainsSpans() {
    return false;
  }

  public OtlpTransport transport() {
    return transport;
  }

  @Override
  public void export(Resource resource, List<? extends ReadableSpan> batch, ExportStats stats)
      throws InterruptedException {
    if (batch.isEmpty()) {
      return;
    }
    ProtoWriter w = encoder.encode(resource, batch);
    int n = batch.size();
    long deadline = monoNanos.getAsLong() + timeoutNanos;
    for (int attempt = 1; ; attempt++) {
      long remaining = deadline - monoNanos.getAsLong();
      if (remaining <= 0) {
        stats.droppedDeadline.add(n);
        deadlineLog.log("otlp export to " + transport.describe() + ": deadline passed, dropped "
            + n + " spans");
        return;
      }
      Outcome o = transport.send(w.array(), w.size(), remaining);
      switch (o.kind()) {
        case SUCCESS:
          if (o.partial()) {
            stats.rejected.add(o.rejectedSpans());
            stats.exported.add(n - Math.min(n, o.rejectedSpans()));
            rejectedLog.log("otlp export to " + transport.describe() + ": server rejected "
                + o.rejectedSpans() + " spans: " + o.errorMessage());
          } else {
            stats.exported.add(n);
          }
          return;
        case PERMANENT:
          stats.droppedPermanent.add(n);
          permanentLog.log("otlp export to " + transport.describe() + " failed permanently ("
              + o.detail() + "), dropped " + n + " spans");
          return;
        default:
          break;
      }
      if (shutdown.getCount() == 0) {
        stats.droppedShutdown.add(n); // shut down while retrying: one immediate retry was made
        return;
      }
      double[] range = OtlpRetry.backoffRange(attempt);
      if (range == null) {
        stats.droppedRetriesExhausted.add(n);
        exhaustedLog.log("otlp export to " + transport.describe() + ": " + o.detail()
            + " after " + attempt + " attempts, dropped " + n + " spans");
        return;
      }
      long sleepNanos = o.delayMillis() >= 0 ? TimeUnit.MILLISECONDS.toNanos(o.delayMillis())
          : (long) (1e6 * (range[0] + ThreadLocalRandom.current().nextDouble() * (range[1]
              - range[0])));
      if (monoNanos.getAsLong() + sleepNanos > deadline) {
        stats.droppedDeadline.add(n);
        deadlineLog.log("otlp export to " + transport.describe() + ": " + o.detail()
            + ", next retry after the deadline, dropped " + n + " spans");
        return;
      }
      // Shutdown interrupts the sleep; the loop then retries once at once.
      shutdown.await(sleepNanos, TimeUnit.NANOSECONDS);
    }
  }

  @Override
  public void shutdown() {
    shutdown.countDown();
    transport.close();
  }
}
