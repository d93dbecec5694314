package io.weft.bench;

import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.BatchSpanProcessor;
import io.opentelemetry.sdk.trace.export.SpanExporter;
import io.opentelemetry.sdk.trace.samplers.Sampler;
import io.weft.sdk.export.ExportPipeline;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftTracerProvider;
import java.util.Collection;
import java.util.concurrent.atomic.LongAdder;

/**
 * Both SDKs configured alike: AlwaysOn (AlwaysOff for unsampled), a batch processor with a
 * 1,048,576-span queue feeding an exporter that counts and discards batches. The queue is large so
 * that an export thread the scheduler leaves waiting for a few milliseconds (2 shared cores) does
 * not drop spans; {@link SpanBench} reports the drops that remain.
 */
final class Providers {
  static final int QUEUE = Integer.getInteger("bench.queue", 1 << 20);
  /** Experiments only: -Dbench.retain=true makes weft's exporter keep spans (no recycling). */
  static final boolean RETAIN = Boolean.getBoolean("bench.retain");

  private Providers() {}

  static WeftTracerProvider weft(boolean sampled) {
    return WeftTracerProvider.builder().setResource(Resource.create("bench"))
        .setSampler(sampled ? io.weft.sdk.sampling.Sampler.alwaysOn()
            : io.weft.sdk.sampling.Sampler.alwaysOff())
        .setBatchConfig(new ExportPipeline.Config().setMaxQueueSize(QUEUE))
        .setExporter(RETAIN ? new io.weft.sdk.export.SpanExporter() {
          @Override
          public void export(Resource r, java.util.List<? extends io.weft.sdk.trace.ReadableSpan> b,
              io.weft.sdk.export.ExportStats stats) {
            stats.exported.add(b.size());
          }
        } : io.weft.sdk.export.SpanExporter.noop())
        .build();
  }

  static final class Noop implements SpanExporter {
    final LongAdder exported = new LongAdder();

    @Override
    public CompletableResultCode export(Collection<SpanData> spans) {
      exported.add(spans.size());
      return CompletableResultCode.ofSuccess();
    }

    @Override
    public CompletableResultCode flush() {
      return CompletableResultCode.ofSuccess();
    }

    @Override
    public CompletableResultCode shutdown() {
      return CompletableResultCode.ofSuccess();
    }
  }

  static SdkTracerProvider otel(boolean sampled, Noop exporter) {
    return SdkTracerProvider.builder()
        .setSampler(sampled ? Sampler.alwaysOn() : Sampler.alwaysOff())
        .addSpanProcessor(BatchSpanProcessor.builder(exporter).setMaxQueueSize(QUEUE).build())
        .build();
  }
}
