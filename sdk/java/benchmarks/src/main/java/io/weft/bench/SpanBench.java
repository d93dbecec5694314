package io.weft.bench;

import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.weft.sdk.trace.WeftTracerProvider;
import io.weft.sdk.export.ExportStats;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
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
 *
 * <p>Each benchmark counts the spans it starts (a plain per-thread counter, the same for both
 * SDKs) and, after the trial, prints {@code SPAN_DROPS <dropped> <started>}: spans the export
 * queue dropped, counted by weft's stats or, for the OpenTelemetry SDK, as started minus exported
 * once shutdown has flushed the queue. bench.sh reports the ratio as drops/op: a nonzero figure
 * means part of the time measured was the cheaper drop path.
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
    final Providers.Noop otelOnExporter = new Providers.Noop();
    final Providers.Noop otelOffExporter = new Providers.Noop();
    final List<Count> counts = new CopyOnWriteArrayList<>();

    @Setup(Level.Trial)
    public void setup() {
      weftSampled = Providers.weft(true);
      weftUnsampled = Providers.weft(false);
      otelSampled = Providers.otel(true, otelOnExporter);
      otelUnsampled = Providers.otel(false, otelOffExporter);
      weftOn = weftSampled.get("bench");
      weftOff = weftUnsampled.get("bench");
      otelOn = otelSampled.get("bench");
      otelOff = otelUnsampled.get("bench");
    }

    @TearDown(Level.Trial)
    public void teardown() {
      weftSampled.shutdown(Duration.ofSeconds(30));
      weftUnsampled.shutdown(Duration.ofSeconds(5));
      otelSampled.shutdown().join(30, TimeUnit.SECONDS);
      otelUnsampled.shutdown().join(5, TimeUnit.SECONDS);
      long started = 0;
      for (Count c : counts) {
        started += c.spans;
      }
      ExportStats w = weftSampled.stats();
      long weftSeen = w.exported.sum() + w.droppedQueueFull.sum();
      long otelExported = otelOnExporter.exported.sum();
      long dropped = weftSeen > 0 ? w.droppedQueueFull.sum()
          : otelExported > 0 ? started - otelExported : 0;
      System.out.println("\nSPAN_DROPS " + dropped + " " + started);
    }
  }

  /** The spans one benchmark thread started. */
  @State(Scope.Thread)
  public static class Count {
    long spans;

    @Setup(Level.Trial)
    public void register(Sdks s) {
      s.counts.add(this);
    }
  }

  @Benchmark
  public void span_unsampled_weft(Sdks s, Count c) {
    SpanScenario.run(s.weftOff, 0, false);
    c.spans++;
  }

  @Benchmark
  public void span_unsampled_otel(Sdks s, Count c) {
    SpanScenario.run(s.otelOff, 0, false);
    c.spans++;
  }

  @Benchmark
  public void span_sampled_0_attrs_weft(Sdks s, Count c) {
    SpanScenario.run(s.weftOn, 0, false);
    c.spans++;
  }

  @Benchmark
  public void span_sampled_0_attrs_otel(Sdks s, Count c) {
    SpanScenario.run(s.otelOn, 0, false);
    c.spans++;
  }

  @Benchmark
  public void span_sampled_4_attrs_weft(Sdks s, Count c) {
    SpanScenario.run(s.weftOn, 4, false);
    c.spans++;
  }

  @Benchmark
  public void span_sampled_4_attrs_otel(Sdks s, Count c) {
    SpanScenario.run(s.otelOn, 4, false);
    c.spans++;
  }

  @Benchmark
  public void span_sampled_10_attrs_1_event_weft(Sdks s, Count c) {
    SpanScenario.run(s.weftOn, 10, true);
    c.spans++;
  }

  @Benchmark
  public void span_sampled_10_attrs_1_event_otel(Sdks s, Count c) {
    SpanScenario.run(s.otelOn, 10, true);
    c.spans++;
  }

  @Benchmark
  @Threads(1)
  public void export_queue_1_thread_weft(Sdks s, Count c) {
    SpanScenario.run(s.weftOn, 2, false);
    c.spans++;
  }

  @Benchmark
  @Threads(1)
  public void export_queue_1_thread_otel(Sdks s, Count c) {
    SpanScenario.run(s.otelOn, 2, false);
    c.spans++;
  }

  @Benchmark
  @Threads(2)
  public void export_queue_2_thread_weft(Sdks s, Count c) {
    SpanScenario.run(s.weftOn, 2, false);
    c.spans++;
  }

  @Benchmark
  @Threads(2)
  public void export_queue_2_thread_otel(Sdks s, Count c) {
    SpanScenario.run(s.otelOn, 2, false);
    c.spans++;
  }
}
