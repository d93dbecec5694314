package io.weft.bench;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.Tracer;
import io.weft.sdk.export.ExportPipeline;
import io.weft.sdk.export.ExportStats;
import io.weft.sdk.export.SpanExporter;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftTracerProvider;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;

/**
 * Where the export pipeline's CPU goes, outside JMH: {@code THREADS} application threads end
 * sampled spans with 2 attributes (export_queue_* in {@link SpanBench}) for {@code SECONDS} into
 * a pipeline with a {@code QUEUE}-span queue (default 1,048,576) and the no-op exporter. Prints
 * spans per second, the CPU time per span of the export thread and of the application threads,
 * garbage collection time and drops; with {@code SERIES=1} also the queue's length every 250 ms.
 *
 * <p>{@code java -cp benchmarks/target/benchmarks.jar io.weft.bench.ExportHarness 2 8}
 */
public final class ExportHarness {
  private static final String[] KEYS = {"k0", "k1"};

  private ExportHarness() {}

  public static void main(String[] args) throws InterruptedException {
    int threads = Integer.parseInt(args[0]);
    int seconds = Integer.parseInt(args[1]);
    int queue = args.length > 2 ? Integer.parseInt(args[2]) : 1 << 20;
    boolean series = System.getenv("SERIES") != null;
    WeftTracerProvider provider = WeftTracerProvider.builder()
        .setResource(Resource.create("bench"))
        .setSampler(Sampler.alwaysOn())
        .setBatchConfig(new ExportPipeline.Config().setMaxQueueSize(queue))
        .setExporter(SpanExporter.noop())
        .build();
    Tracer tracer = provider.get("bench");
    AtomicBoolean stop = new AtomicBoolean();
    LongAdder produced = new LongAdder();
    Thread[] producers = new Thread[threads];
    for (int k = 0; k < threads; k++) {
      producers[k] = new Thread(() -> {
        while (!stop.get()) {
          for (int j = 0; j < 1000; j++) {
            Span span = tracer.spanBuilder("op").startSpan();
            span.setAttribute(KEYS[0], 1L);
            span.setAttribute(KEYS[1], "value");
            span.end();
          }
          produced.add(1000);
        }
      });
    }
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    ExportStats stats = provider.stats();
    long gc0 = gcMillis();
    for (Thread t : producers) {
      t.start();
    }
    for (int i = 1; i <= seconds * 4; i++) {
      Thread.sleep(250);
      if (series) {
        long done = stats.exported.sum() + stats.droppedQueueFull.sum();
        System.out.printf("t=%.2f s queued=%d dropped=%d gc=%d ms%n", i / 4.0,
            produced.sum() - done, stats.droppedQueueFull.sum(), gcMillis() - gc0);
      }
    }
    long exporterCpu = 0;
    for (ThreadInfo ti : mx.dumpAllThreads(false, false)) {
      if (ti.getThreadName().equals("weft-span-exporter")) {
        exporterCpu = mx.getThreadCpuTime(ti.getThreadId());
      }
    }
    long producerCpu = 0;
    for (Thread t : producers) {
      producerCpu += mx.getThreadCpuTime(t.getId());
    }
    stop.set(true);
    for (Thread t : producers) {
      t.join();
    }
    long total = produced.sum();
    long exported = stats.exported.sum();
    System.out.printf("threads=%d spans=%d (%.2f M/s) dropped=%d exported=%d"
            + " export thread %.2f s (%.1f ns/span) producers %.2f s (%.1f ns/span) gc=%d ms%n",
        threads, total, total / 1e6 / seconds, stats.droppedQueueFull.sum(), exported,
        exporterCpu / 1e9, (double) exporterCpu / Math.max(1, exported), producerCpu / 1e9,
        (double) producerCpu / Math.max(1, total), gcMillis() - gc0);
    System.exit(0);
  }

  private static long gcMillis() {
    long sum = 0;
    for (GarbageCollectorMXBean g : ManagementFactory.getGarbageCollectorMXBeans()) {
      sum += g.getCollectionTime();
    }
    return sum;
  }
}
