package io.weft.bench;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;

/** The cost of the clock reads every sampled span makes (two per span). */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class ClockBench {
  final Object lock = new Object();
  long x;

  @Benchmark
  public long clock_nano_time() {
    return System.nanoTime();
  }

  @Benchmark
  public long lock_uncontended() {
    synchronized (lock) {
      return ++x;
    }
  }
}
