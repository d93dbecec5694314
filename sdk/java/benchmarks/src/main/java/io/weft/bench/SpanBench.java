package io.weft.bench;

import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.weft.sdk.trace.WeftTracerProvider;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Threads;

/**
 * Span start+end: unsampled, sampled with 0 and 4 attributes, 10 attributes and 1 event; and a
 * span with 2 attributes to the export queue from 1 and 2 threads. Every span goes through the
 * batch processor's queue. The unsampled and sampled scenarios return nothing to the blackhole
 * so that, as in an application, the span does not escape (which lets escape analysis work).
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class SpanBench {
  @State(Scope.Benchmark)
  public static class Sdks {
    WeftTracerProvider weftSampled;
    WeftTracerProvider weftUnsampled;
    SdkTracerProvider otelSampled;
    SdkTracerProvider otelUnsampled;
    Tracer weftOn;
    Tracer weftOff;
    Tracer otelOn;
    Tracer otelOff;

    @Setup(Level.Trial)
    public void setup() {
      weftSampled = Providers.weft(true);
      weftUnsampled = Providers.weft(false);
      otelSampled = Providers.otel(true);
      otelUnsampled = Providers.otel(false);
      weftOn = weftSampled.get("bench");
      weftOff = weftUnsampled.get("bench");
      otelOn = otelSampled.get("bench");
      otelOff = otelUnsampled.get("bench");
    }

    @TearDown(Level.Trial)
    public void teardown() {
      System.out.println("\nWEFT_STATS " + weftSampled.stats());
      weftSampled.shutdown(Duration.ofSeconds(5));
      weftUnsampled.shutdown(Duration.ofSeconds(5));
      otelSampled.shutdown().join(5, TimeUnit.SECONDS);
      otelUnsampled.shutdown().join(5, TimeUnit.SECONDS);
    }
  }

  @Benchmark
  public void span_unsampled_weft(Sdks s) {
    SpanScenario.run(s.weftOff, 0, false);
  }

  @Benchmark
  public void span_unsampled_otel(Sdks s) {
    SpanScenario.run(s.otelOff, 0, false);
  }

  @Benchmark
  public void span_sampled_0_attrs_weft(Sdks s) {
    SpanScenario.run(s.weftOn, 0, false);
  }

  @Benchmark
  public void span_sampled_0_attrs_otel(Sdks s) {
    SpanScenario.run(s.otelOn, 0, false);
  }

  @Benchmark
  public void span_sampled_4_attrs_weft(Sdks s) {
    SpanScenario.run(s.weftOn, 4, false);
  }

  @Benchmark
  public void span_sampled_4_attrs_otel(Sdks s) {
    SpanScenario.run(s.otelOn, 4, false);
  }

  @Benchmark
  public void span_sampled_10_attrs_1_event_weft(Sdks s) {
    SpanScenario.run(s.weftOn, 10, true);
  }

  @Benchmark
  public void span_sampled_10_attrs_1_event_otel(Sdks s) {
    SpanScenario.run(s.otelOn, 10, true);
  }

  @Benchmark
  @Threads(1)
  public void export_queue_1_thread_weft(Sdks s) {
    SpanScenario.run(s.weftOn, 2, false);
  }

  @Benchmark
  @Threads(1)
  public void export_queue_1_thread_otel(Sdks s) {
    SpanScenario.run(s.otelOn, 2, false);
  }

  @Benchmark
  @Threads(2)
  public void export_queue_2_thread_weft(Sdks s) {
    SpanScenario.run(s.weftOn, 2, false);
  }

  @Benchmark
  @Threads(2)
  public void export_queue_2_thread_otel(Sdks s) {
    SpanScenario.run(s.otelOn, 2, false);
  }
}
