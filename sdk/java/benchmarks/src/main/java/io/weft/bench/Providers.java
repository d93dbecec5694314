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

/**
 * Both SDKs configured alike: AlwaysOn (AlwaysOff for unsampled), a batch processor with a
 * 65,536-span queue feeding an exporter that discards batches.
 */
final class Providers {
  static final int QUEUE = 65_536;

  private Providers() {}

  static WeftTracerProvider weft(boolean sampled) {
    return WeftTracerProvider.builder().setResource(Resource.create("bench"))
        .setSampler(sampled ? io.weft.sdk.sampling.Sampler.alwaysOn()
            : io.weft.sdk.sampling.Sampler.alwaysOff())
        .setBatchConfig(new ExportPipeline.Config().setMaxQueueSize(QUEUE))
        .build(); // the default exporter discards batches (SpanExporter.noop())
  }

  static final class Noop implements SpanExporter {
    @Override
    public CompletableResultCode export(Collection<SpanData> spans) {
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

  static SdkTracerProvider otel(boolean sampled) {
    return SdkTracerProvider.builder()
        .setSampler(sampled ? Sampler.alwaysOn() : Sampler.alwaysOff())
        .addSpanProcessor(BatchSpanProcessor.builder(new Noop()).setMaxQueueSize(QUEUE).build())
        .build();
  }
}
