package io.weft.bench;

import io.opentelemetry.context.Context;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;

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
 *   <li>the hand-off to an export thread: one thread-local lookup for a per-thread ring and one
 *       release store into it (no consumer, so no cache line ever comes back from another core).
 * </ul>
 * An attribute is a key and a value stored into arrays that belong to the thread (no allocation,
 * no search for a key set before), and an event reads the clock and stores its name. Everything
 * an SDK does besides (sampling, the span's context, limits, checks, the consumer's side of the
 * ring) adds to this, so a target below this bound cannot be met by any design.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class FloorBench {
  private static final VarHandle STATE;
  private static final VarHandle SLOT = MethodHandles.arrayElementVarHandle(Object[].class);

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

  /** The thread's ring of ended spans and the arrays its spans' attributes go into. */
  static final class Lane {
    final Object[] ring = new Object[1024];
    long tail;
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

  private static void end(Span s, Lane lane) {
    if (!STATE.compareAndSet(s, 0, 2)) {
      throw new AssertionError();
    }
    s.end = System.nanoTime();
    long t = lane.tail;
    SLOT.setRelease(lane.ring, (int) t & 1023, s);
    lane.tail = t + 1;
    lane.attrs = 0;
  }

  private static void scenario(int attributes, boolean event) {
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
    end(s, lane);
  }

  @Benchmark
  public void floor_span_sampled_0_attrs() {
    scenario(0, false);
  }

  @Benchmark
  public void floor_span_sampled_4_attrs() {
    scenario(4, false);
  }

  @Benchmark
  public void floor_span_sampled_10_attrs_1_event() {
    scenario(10, true);
  }
}
