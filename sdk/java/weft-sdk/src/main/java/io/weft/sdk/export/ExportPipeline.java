package io.weft.sdk.export;

import io.weft.sdk.internal.PerThread;
import io.weft.sdk.internal.RateLimitedLogger;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.SpanLimits;
import io.weft.sdk.trace.SpanRecord;
import io.weft.sdk.trace.SpanSink;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.locks.LockSupport;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The batch pipeline: ended spans go into bounded lock-free queues, one export thread drains them
 * into batches and hands each batch to the exporter.
 *
 * <p><b>Design constraints.</b> Ending a span never blocks and takes no lock. There are
 * {@code nextPow2(2 * CPUs)} ring buffers. The first half are shared: a thread offers into one
 * chosen by its ID with one CAS on the ring's tail. Each ring of the second half is a <i>lane</i>
 * that one thread leases the first time it starts a span in this pipeline (while one is free) and
 * holds until it dies: only that thread offers into it, with two release stores and no CAS, and
 * only it takes records from the lane's pool, also without a CAS (span_sampled_* benchmarks; each
 * CAS was 8–10 ns of a ~180 ns span). A span that ends on another thread than the one that started
 * it goes to a shared ring. When the chosen ring is full the span goes to any ring not leased;
 * when all are full it is dropped, counted and logged at most once a minute. The export thread
 * frees the lane of a thread that has died once the lane is empty. It takes spans a run from
 * each ring at a time and leaves the newest few of each ring to their producer's cache, taking
 * them too on a flush and at least once per schedule delay (see {@link #drain}). Memory stays
 * bounded while the backend is down: the rings plus one batch (the exporter retries one batch at
 * a time while the rings fill and then drop).
 *
 * <p><b>Record recycling.</b> Beside each ring is a pool of {@link SpanRecord}s that new spans
 * take their record from (clearing it). When the exporter does not keep the spans of a batch
 * ({@link SpanExporter#retainsSpans()} is false), the export thread returns each record to the
 * pool of the ring it came from once the batch is exported. The export thread is the pools' only
 * producer: the record of a span dropped because the queue is full, or recorded but not sampled,
 * is left to the garbage collector. A pooled record still references its last span's values until
 * it is reused; the pools are small (a few thousand records at most). The span object itself is
 * never recycled: it gives up its record when it ends (see {@link SpanRecord}).
 */
public final class ExportPipeline implements SpanSink {
  private static final Logger LOG = Logger.getLogger(ExportPipeline.class.getName());

  private static final AtomicLong IDS = new AtomicLong();

  /** This pipeline's number in {@link PerThread#sinkId} (never 0). */
  private final long id = IDS.incrementAndGet();
  private final Ring[] rings;
  private final RecordPool[] pools;
  private final boolean recycle;
  private final int ringMask;
  /** Rings {@code [0, shared)} are shared, the rest are lanes. */
  private final int shared;
  private final int wakeMask;
  private final int batchSize;
  /** Spans a ring keeps back from a drain that need not take all (see {@link #drain}). */
  private final int keep;
  /** The ring the next drain starts at (export thread only). */
  private int nextRing;
  private final long delayNanos;
  private final Resource resource;
  private final SpanExporter exporter;
  private final ExportStats stats = new ExportStats();
  private final RateLimitedLogger queueFullLog = new RateLimitedLogger(LOG, 60_000);
  private final Thread worker;
  private volatile boolean parked;
  private volatile boolean stopping;
  private final AtomicLong flushRequested = new AtomicLong();
  private volatile long flushDone;
  private final Object flushLock = new Object();

  /** Batch options (OTEL_BSP_* defaults). */
  public static final class Config {
    int maxQueueSize = 2048;
    int maxExportBatchSize = 512;
    long scheduleDelayMillis = 5000;

    public Config setMaxQueueSize(int n) {
      maxQueueSize = Math.max(1, n);
      return this;
    }

    public Config setMaxExportBatchSize(int n) {
      maxExportBatchSize = Math.max(1, n);
      return this;
    }

    public Config setScheduleDelay(Duration d) {
      scheduleDelayMillis = Math.max(1, d.toMillis());
      return this;
    }

    public int maxQueueSize() {
      return maxQueueSize;
    }
  }

  public ExportPipeline(Resource resource, SpanExporter exporter, Config config) {
    this.resource = resource;
    this.exporter = exporter;
    int n = Integer.highestOneBit(Math.max(1, 2 * Runtime.getRuntime().availableProcessors() - 1))
        << 1;
    int per = Math.max(16, Integer.highestOneBit(Math.max(1, config.maxQueueSize / n - 1)) << 1);
    this.rings = new Ring[n];
    for (int i = 0; i < n; i++) {
      rings[i] = new Ring(per);
    }
    this.recycle = !exporter.retainsSpans();
    this.ringMask = n - 1;
    this.shared = n / 2;
    this.batchSize = Math.min(config.maxExportBatchSize, config.maxQueueSize);
    // Two cache lines of compressed references, and never more than a small part of a batch or a
    // ring, so that a drain always has something to take once a batch is waiting.
    this.keep = Math.min(32, Math.min(batchSize, per) / 16);
    // Wake the exporter when a ring crosses a multiple of a quarter of its capacity (a power of two
    // so that the check on span end is one AND), which leaves three quarters as slack while it
    // wakes up. Not more often: LockSupport.unpark is a futex wake of several microseconds, and
    // waking every 128 spans cost 16 % of the span_sampled_0_attrs benchmark's CPU time. At least
    // every 1,024 spans, though, so that a large queue does not hold many ended spans (and their
    // records) before the exporter runs.
    int wake = Integer.highestOneBit(Math.max(1, Math.min(per / 4, 1024)));
    this.wakeMask = wake - 1;
    // A pool holds the records of the spans exported since a producer last took one: about a wake
    // interval, plus slack for an exporter that runs late. A pool much larger than that only keeps
    // more records alive, for the garbage collector to copy and promote (a 2^18-record pool made
    // span_sampled_4_attrs several times slower; docs/benchmarks/java-sdk-floor.md). When it is
    // empty, a span allocates a new record.
    int poolSize = Math.min(per, 4 * wake);
    this.pools = new RecordPool[n];
    for (int i = 0; i < n; i++) {
      pools[i] = new RecordPool(poolSize);
    }
    this.delayNanos = config.scheduleDelayMillis * 1_000_000L;
    this.worker = new Thread(this::run, "weft-span-exporter");
    worker.setDaemon(true);
    worker.start();
  }

  public ExportStats stats() {
    return stats;
  }

  // Records are cleared by the thread that takes them, not by the export thread that returns them:
  // the export thread then only reads a record (to encode it), and the application thread does not
  // have to fetch cache lines the export thread has just written (span_sampled_* benchmarks).
  @Override
  public SpanRecord acquire(SpanLimits limits, PerThread thread) {
    int lane = thread.sinkId == id ? thread.lane : lease(thread);
    SpanRecord r = lane >= 0 ? pools[lane].pollSingle() : pools[sharedRing()].poll();
    if (r == null) {
      r = new SpanRecord(limits);
    } else {
      r.clear();
    }
    r.producer(Thread.currentThread(), lane);
    return r;
  }

  /**
   * Leases a free lane to the calling thread, or records that there is none. A thread that held a
   * lane in another pipeline keeps it until it dies, unused: leases are only ever given up by the
   * export thread, once their thread has died, so that a span's end never races a change of owner.
   */
  private int lease(PerThread thread) {
    thread.sinkId = id;
    thread.lane = -1;
    Thread me = Thread.currentThread();
    for (int i = shared; i < rings.length; i++) {
      if (rings[i].lease(me)) {
        thread.lane = i;
        break;
      }
    }
    return thread.lane;
  }

  private int sharedRing() {
    return (int) Thread.currentThread().getId() & (shared - 1);
  }

  @Override
  public void release(SpanRecord span) {
    // Left to the garbage collector: only the export thread returns records to the pools, which
    // lets it do so without a CAS (RecordPool). Spans recorded but not sampled are rare.
  }

  @Override
  public void onEnd(SpanRecord span) {
    int ring = span.lane();
    long t;
    if (ring >= 0 && span.producer() == Thread.currentThread()) {
      t = rings[ring].offerOwned(span); // this thread holds the lane until it dies
    } else {
      ring = sharedRing();
      t = rings[ring].offer(span);
    }
    if (t < 0) {
      offerElsewhere(span, ring);
      return;
    }
    if ((t & wakeMask) == wakeMask && parked) {
      LockSupport.unpark(worker);
    }
  }

  // The thread's own ring is full: the other rings take the span, so that one busy thread can use
  // the whole queue size (OTEL_BSP_MAX_QUEUE_SIZE), and the span is dropped only when all are full.
  // Leased lanes refuse offers from any thread (Ring.offer), so this one uses only its own lane,
  // the shared rings and the lanes not leased.
  private void offerElsewhere(SpanRecord span, int full) {
    for (int i = 1; i < rings.length; i++) {
      if (rings[(full + i) & ringMask].offer(span) >= 0) {
        if (parked) {
          LockSupport.unpark(worker);
        }
        return;
      }
    }
    stats.droppedQueueFull.increment();
    queueFullLog.log("export queue full, span dropped"); // its record is left to the GC
  }

  /**
   * Takes spans into the batch, a run from each ring in turn (starting one ring further each call,
   * so that no ring waits behind the others), up to a full batch. Unless {@code all}, the last
   * {@link #keep} spans of each ring are left where they are: those slots share cache lines with
   * the ones its producer is writing, and reading right behind a producer moved each line between
   * the cores once per span, not once per line (export_queue_2_thread: the export thread's time per
   * span; docs/benchmarks/java-sdk-floor.md).
   */
  private int drain(List<SpanRecord> batch, int[] from, boolean all) {
    int got = 0;
    int skip = all ? 0 : keep;
    int start = nextRing++;
    for (int k = 0; k < rings.length && batch.size() < batchSize; k++) {
      int i = (start + k) & ringMask;
      got += rings[i].drainTo(batch, from, i, batchSize - batch.size(), skip);
    }
    return got;
  }

  /** Spans that {@link #drain} would take now without {@code all}. */
  private long drainable() {
    long n = 0;
    for (Ring r : rings) {
      n += Math.max(0, r.size() - keep);
    }
    return n;
  }

  private boolean queued() {
    for (Ring r : rings) {
      if (r.size() > 0) {
        return true;
      }
    }
    return false;
  }

  private void export(List<SpanRecord> batch, int[] from) {
    try {
      exporter.export(resource, batch, stats);
    } catch (InterruptedException e) {
      stats.droppedShutdown.add(batch.size());
      Thread.currentThread().interrupt();
    } catch (RuntimeException e) {
      stats.droppedPermanent.add(batch.size());
      LOG.log(Level.WARNING, "span exporter failed", e);
    }
    if (recycle) {
      for (int i = 0; i < batch.size(); i++) {
        pools[from[i]].offer(batch.get(i));
      }
    }
    batch.clear();
    freeDeadLanes();
  }

  // Thread.isAlive() is a native call; this runs once per exported batch and before parking.
  private void freeDeadLanes() {
    for (int i = shared; i < rings.length; i++) {
      rings[i].freeIfOwnerDead();
    }
  }

  private void run() {
    List<SpanRecord> batch = new ArrayList<>(batchSize);
    int[] from = new int[batchSize];
    long next = System.nanoTime() + delayNanos;
    // When a drain next takes the spans it leaves to their producers (see drain): at least once
    // per schedule delay, however often full batches go out, so that a ring whose producer has
    // gone quiet (or died, whose lane is then freed) is not left holding them.
    long sweep = next;
    while (true) {
      long flushTicket = flushRequested.get();
      boolean stop = stopping;
      long now = System.nanoTime();
      boolean urgent = flushTicket > flushDone || stop;
      boolean all = urgent || now >= next || now >= sweep;
      int got = drain(batch, from, all);
      if (all) {
        sweep = now + delayNanos;
      }
      if (batch.size() >= batchSize || (!batch.isEmpty() && (now >= next || urgent))) {
        export(batch, from);
        next = System.nanoTime() + delayNanos;
        continue;
      }
      if (urgent && batch.isEmpty() && !queued()) {
        flushDone = flushTicket;
        synchronized (flushLock) {
          flushLock.notifyAll();
        }
        if (stop) {
          return;
        }
        continue;
      }
      if (now >= next) {
        next = now + delayNanos;
      }
      if (got == 0 && (all ? queued() : drainable() > 0)) {
        // A producer has claimed a slot but not yet published its span (it may have been
        // descheduled between the two): give it the CPU instead of spinning on the slot.
        Thread.yield();
      } else {
        freeDeadLanes();
        parked = true;
        // Park until a producer's ring crosses a wake mark (onEnd) or the delay is up, unless a
        // batch is already waiting, as OpenTelemetry's batch processor waits for a full batch.
        // Not "unless anything is waiting": producers that keep ending spans keep the rings from
        // ever being empty, and the exporter then took spans a few at a time right behind them,
        // on the cache lines they write (export_queue_1_thread: the process's CPU 14.7 -> 14.1 s
        // in a 10.6 s run, the same ns per span; docs/benchmarks/java-sdk-floor.md).
        if (drainable() < batchSize - batch.size() && flushRequested.get() == flushDone
            && !stopping) {
          LockSupport.parkNanos(this, Math.max(1, Math.min(next, sweep) - now));
        }
        parked = false;
      }
      if (Thread.interrupted()) {
        return;
      }
    }
  }

  /** Exports everything queued before the call; returns whether that finished in time. */
  public boolean forceFlush(Duration timeout) {
    long ticket = flushRequested.incrementAndGet();
    LockSupport.unpark(worker);
    long deadline = System.nanoTime() + timeout.toNanos();
    synchronized (flushLock) {
      while (flushDone < ticket) {
        long left = deadline - System.nanoTime();
        if (left <= 0 || !worker.isAlive()) {
          return flushDone >= ticket;
        }
        try {
          flushLock.wait(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
    }
    return true;
  }

  /**
   * Exports what is queued and stops the export thread. Returns whether that finished within
   * {@code timeout}; after the timeout the exporter's back-off is interrupted and the rest dropped.
   */
  public boolean shutdown(Duration timeout) {
    stopping = true;
    boolean ok = forceFlush(timeout);
    exporter.shutdown();
    if (!ok) {
      worker.interrupt();
    }
    try {
      worker.join(Math.max(1, timeout.toMillis()));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return ok;
  }

  /**
   * A bounded multi-producer single-consumer ring. Producers claim a slot with one CAS on
   * {@code tail} and publish the span with a release store; the consumer takes slots in order,
   * clears them and advances {@code head}. A slot still null at {@code head} is being published and
   * is read on the next pass.
   *
   * <p>A ring can be leased to one thread ({@link #lease}): the {@link #LEASED} bit of
   * {@code tail} is set by a CAS, after which every other producer's CAS fails (they check the bit
   * first, and a CAS begun before it was set fails because the tail changed), and the lessee
   * publishes with {@link #offerOwned}: the slot and then the tail, two release stores. The export
   * thread clears the bit once the lessee has died ({@link #freeIfOwnerDead}); the lessee's last
   * stores happen-before that, since it observed the thread's termination.
   */
  static final class Ring {
    static final long LEASED = 1L << 62;

    private final AtomicReferenceArray<SpanRecord> slots;
    private final int mask;
    private final int capacity;
    // tail and head sit on different cache lines so that producers' CAS on tail does not
    // invalidate the consumer's line holding head on every span.
    private final AtomicLong tail = new PaddedCounter();
    private final AtomicLong head = new PaddedCounter();
    private volatile Thread owner;

    Ring(int capacity) {
      this.capacity = capacity;
      this.mask = capacity - 1;
      this.slots = new AtomicReferenceArray<>(capacity);
    }

    // The producers' last view of head. Reading head itself on every offer would pull the cache
    // line the consumer writes; a stale view only makes a producer re-read it when the ring looks
    // full (export_queue_* benchmarks).
    private long headCache;

    /** Offers from any thread; returns the slot's position, or -1 when full or leased. */
    long offer(SpanRecord s) {
      while (true) {
        long t = tail.get();
        if ((t & LEASED) != 0) {
          return -1;
        }
        if (t - headCache >= capacity) {
          long h = head.get();
          headCache = h;
          if (t - h >= capacity) {
            return -1;
          }
        }
        if (tail.compareAndSet(t, t + 1)) {
          slots.lazySet((int) t & mask, s);
          return t;
        }
      }
    }

    /** Offers from the lessee only; returns the slot's position, or -1 when full. */
    long offerOwned(SpanRecord s) {
      long tl = tail.get(); // only this thread changes tail while it holds the lease
      long t = tl & ~LEASED;
      if (t - headCache >= capacity) {
        long h = head.get();
        headCache = h;
        if (t - h >= capacity) {
          return -1;
        }
      }
      slots.lazySet((int) t & mask, s);
      tail.lazySet(tl + 1);
      return t;
    }

    /** Leases the ring to {@code thread}; returns false when it is leased already. */
    boolean lease(Thread thread) {
      for (long t = tail.get(); (t & LEASED) == 0; t = tail.get()) {
        if (tail.compareAndSet(t, t | LEASED)) {
          owner = thread;
          return true;
        }
      }
      return false;
    }

    /** Export thread: ends the lease of a thread that has died, once its spans are taken. */
    void freeIfOwnerDead() {
      Thread o = owner;
      if (o != null && !o.isAlive() && size() == 0) {
        owner = null;
        long t = tail.get();
        tail.set(t & ~LEASED);
      }
    }

    /** The thread holding the lease, or null. */
    Thread owner() {
      return owner;
    }

    /**
     * Moves up to {@code max} spans, in order, to {@code out} (noting {@code ring} for each in
     * {@code from}), leaving the last {@code keep} spans of the ring; stops at a slot still being
     * published. Returns how many it moved. Export thread only.
     */
    int drainTo(List<SpanRecord> out, int[] from, int ring, int max, int keep) {
      long h = head.get();
      long n = Math.min(max, (tail.get() & ~LEASED) - h - keep);
      int got = 0;
      while (got < n) {
        int i = (int) (h + got) & mask;
        SpanRecord s = slots.get(i);
        if (s == null) {
          break;
        }
        slots.lazySet(i, null);
        from[out.size()] = ring;
        out.add(s);
        got++;
      }
      if (got > 0) {
        head.lazySet(h + got);
      }
      return got;
    }

    long size() {
      return (tail.get() & ~LEASED) - head.get();
    }
  }
}
