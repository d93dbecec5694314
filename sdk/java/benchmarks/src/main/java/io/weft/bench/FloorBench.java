package io.weft.bench;

import io.opentelemetry.context.Context;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.locks.LockSupport;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * A lower bound for the sampled span scenarios of {@link SpanBench}: only the operations that any
 * SDK behind the OpenTelemetry API must make for them, with no SDK around them, run in the same
 * JMH run as the two SDKs so that bench.sh can set the bound beside OpenTelemetry's time.
 *
 * <p>What a sampled span start+end cannot avoid, and what this does for it:
 * <ul>
 *   <li>the parent: {@code Context.current()}, the API's thread-local context;
 *   <li>IDs: three random longs (a 128-bit trace ID and a 64-bit span ID) from
 *       {@link ThreadLocalRandom}, which keeps its state in the {@code Thread} object (no lookup);
 *   <li>the start and end times: a {@code System.nanoTime()} each;
 *   <li>the span: one 64-byte object, since the application may keep it after {@code end()};
 *   <li>thread safety, which the API requires of every span method: one atomic instruction per
 *       call that changes the span ({@code setAttribute}, {@code addEvent}, {@code end}, whose
 *       second call must do nothing);
 *   <li>the hand-off to an export thread, as a batch span processor does: one thread-local lookup,
 *       a release store of the span into a single-producer ring and of the ring's tail, and every
 *       1,024 spans an unpark of the export thread if it sleeps. The export thread reads each
 *       span's times (as an exporter reads what it encodes), takes all but the newest 32 spans
 *       when woken and sleeps while fewer than 512 wait.
 * </ul>
 * An attribute is a key and a value stored into arrays that belong to the thread (no allocation,
 * no search for a key set before, nothing for the export thread to read), and an event reads the
 * clock and stores its name. Everything an SDK does besides (sampling, the span's context, limits,
 * checks, keeping attributes until they are exported) adds to this, so a target below this bound
 * cannot be met by any design on the machine that measured it.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class FloorBench {
  private static final VarHandle STATE;

  static {
    try {
      STATE = MethodHandles.lookup().findVarHandle(Span.class, "state", int.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /** A span's fields: IDs, parent, times, a lock state (64 bytes with compressed pointers). */
  static final class Span {
    final long traceIdHigh;
    final long traceIdLow;
    final long spanId;
    final long start;
    long end;
    final Context parent;
    int state; // 0 open, 1 locked, 2 ended

    Span(long traceIdHigh, long traceIdLow, long spanId, long start, Context parent) {
      this.traceIdHigh = traceIdHigh;
      this.traceIdLow = traceIdLow;
      this.spanId = spanId;
      this.start = start;
      this.parent = parent;
    }
  }

  /**
   * The benchmark thread's ring of ended spans and its export thread. JMH runs these benchmarks on
   * one thread, the ring's one producer; the ring is not safe for more. What the producer writes
   * per span is in its {@link Lane}, apart from the fields here, which it only reads.
   */
  @State(Scope.Benchmark)
  public static class Export {
    static final int CAPACITY = 1 << 18;
    static final int WAKE = 1024;
    static final int KEEP = 32;
    final AtomicReferenceArray<Span> slots = new AtomicReferenceArray<>(CAPACITY);
    final AtomicLong tail = new AtomicLong();
    final AtomicLong head = new AtomicLong(); // written by the export thread once per drain
    volatile boolean parked;
    volatile boolean stop;
    long exported; // export thread only, once per drain: the sum of the spans' durations
    private Thread worker;

    @Setup(Level.Trial)
    public void start() {
      worker = new Thread(this::run, "floor-export");
      worker.setDaemon(true);
      worker.start();
    }

    @TearDown(Level.Trial)
    public void stop() throws InterruptedException {
      stop = true;
      LockSupport.unpark(worker);
      worker.join();
    }

    private void run() {
      long h = 0;
      while (!stop) {
        long n = tail.get() - h - KEEP;
        long got = 0;
        long sum = 0;
        for (; got < n; got++) {
          int i = (int) (h + got) & (CAPACITY - 1);
          Span s = slots.get(i);
          if (s == null) {
            break;
          }
          sum += s.end - s.start;
          slots.lazySet(i, null);
        }
        h += got;
        if (got > 0) {
          head.lazySet(h);
          exported += sum;
        }
        if (got == 0 || tail.get() - h - KEEP < 512) {
          parked = true;
          if (!stop && tail.get() - h - KEEP < 512) {
            LockSupport.parkNanos(1_000_000);
          }
          parked = false;
        }
      }
    }
  }

  /** What belongs to the producing thread: its ring position and its spans' attributes. */
  static final class Lane {
    Export ring; // the ring tail and headCache belong to (a new one per JMH trial)
    long tail;
    long headCache;
    final String[] keys = new String[16];
    final Object[] values = new Object[16];
    final long[] longs = new long[16];
    int attrs;
  }

  private static final ThreadLocal<Lane> LANE = ThreadLocal.withInitial(Lane::new);

  private static Span start() {
    Context parent = Context.current();
    ThreadLocalRandom r = ThreadLocalRandom.current();
    return new Span(r.nextLong(), r.nextLong(), r.nextLong(), System.nanoTime(), parent);
  }

  private static void lock(Span s) {
    if (!STATE.compareAndSet(s, 0, 1)) {
      throw new AssertionError();
    }
  }

  private static void end(Span s, Lane lane, Export e) {
    if (!STATE.compareAndSet(s, 0, 2)) {
      throw new AssertionError();
    }
    s.end = System.nanoTime();
    if (lane.ring != e) {
      lane.ring = e;
      lane.tail = 0;
      lane.headCache = 0;
    }
    long t = lane.tail;
    if (t - lane.headCache >= Export.CAPACITY) { // the ring holds a quarter of a second of spans
      while (t - (lane.headCache = e.head.get()) >= Export.CAPACITY) {
        Thread.onSpinWait();
      }
    }
    e.slots.lazySet((int) t & (Export.CAPACITY - 1), s);
    e.tail.lazySet(t + 1);
    lane.tail = t + 1;
    lane.attrs = 0;
    if ((t & (Export.WAKE - 1)) == Export.WAKE - 1 && e.parked) {
      LockSupport.unpark(e.worker);
    }
  }

  private static void scenario(Export e, int attributes, boolean event) {
    Span s = start();
    Lane lane = LANE.get();
    for (int i = 0; i < attributes; i++) { // as SpanScenario: long and String values alternately
      lock(s);
      int n = lane.attrs;
      lane.keys[n] = SpanScenario.KEYS[i];
      if ((i & 1) == 0) {
        lane.longs[n] = i;
      } else {
        lane.values[n] = "value";
      }
      lane.attrs = n + 1;
      STATE.setRelease(s, 0);
    }
    if (event) {
      lock(s);
      int n = lane.attrs;
      lane.keys[n] = "event";
      lane.longs[n] = System.nanoTime();
      lane.attrs = n + 1;
      STATE.setRelease(s, 0);
    }
    end(s, lane, e);
  }

  @Benchmark
  public void floor_span_sampled_0_attrs(Export e) {
    scenario(e, 0, false);
  }

  @Benchmark
  public void floor_span_sampled_4_attrs(Export e) {
    scenario(e, 4, false);
  }

  @Benchmark
  public void floor_span_sampled_10_attrs_1_event(Export e) {
    scenario(e, 10, true);
  }
}
