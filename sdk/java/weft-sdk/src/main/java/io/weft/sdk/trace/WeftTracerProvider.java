package io.weft.sdk.trace;

import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.api.trace.TracerBuilder;
import io.opentelemetry.api.trace.TracerProvider;
import io.weft.sdk.export.ExportPipeline;
import io.weft.sdk.export.ExportStats;
import io.weft.sdk.export.SpanExporter;
import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.sampling.Sampler;
import java.io.Closeable;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The weft implementation of the OpenTelemetry {@link TracerProvider}: code written against
 * {@code io.opentelemetry.api} switches to weft by building this provider instead of the
 * OpenTelemetry SDK's.
 *
 * <pre>{@code
 * WeftTracerProvider provider = WeftTracerProvider.builder()
 *     .setResource(Resource.create("checkout"))
 *     .setExporter(io.weft.sdk.export.OtlpExporter.http("http://127.0.0.1:4318/v1/traces"))
 *     .build();
 * Tracer tracer = provider.get("my-library");
 * }</pre>
 */
public final class WeftTracerProvider implements TracerProvider, Closeable {
  private final TracerSharedState shared;
  private final ExportPipeline pipeline;
  private final Resource resource;
  private final Map<InstrumentationScope, WeftTracer> tracers = new ConcurrentHashMap<>();

  private WeftTracerProvider(Builder b) {
    this.resource = b.resource;
    this.pipeline = new ExportPipeline(b.resource, b.exporter, b.batch);
    this.shared = new TracerSharedState(b.sampler, b.idGenerator, b.limits, pipeline);
  }

  public static Builder builder() {
    return new Builder();
  }

  @Override
  public Tracer get(String instrumentationScopeName) {
    return tracer(new InstrumentationScope(instrumentationScopeName, null, null, null));
  }

  @Override
  public Tracer get(String instrumentationScopeName, String instrumentationScopeVersion) {
    return tracer(new InstrumentationScope(instrumentationScopeName, instrumentationScopeVersion,
        null, null));
  }

  @Override
  public TracerBuilder tracerBuilder(String instrumentationScopeName) {
    return new TracerBuilder() {
      private String version;
      private String schemaUrl;

      @Override
      public TracerBuilder setSchemaUrl(String url) {
        schemaUrl = url;
        return this;
      }

      @Override
      public TracerBuilder setInstrumentationVersion(String v) {
        version = v;
        return this;
      }

      @Override
      public Tracer build() {
        return tracer(new InstrumentationScope(instrumentationScopeName, version, schemaUrl,
            null));
      }
    };
  }

  private Tracer tracer(InstrumentationScope scope) {
    return tracers.computeIfAbsent(scope, s -> new WeftTracer(shared, s));
  }

  public Resource getResource() {
    return resource;
  }

  public Sampler getSampler() {
    return shared.sampler;
  }

  /** Export counters: exported and dropped spans by reason. */
  public ExportStats stats() {
    return pipeline.stats();
  }

  /** Exports every span ended before the call; returns whether that finished in time. */
  public boolean forceFlush(Duration timeout) {
    return pipeline.forceFlush(timeout);
  }

  /**
   * Exports what is queued and stops; later spans are not recorded. Returns whether the queue was
   * exported within {@code timeout}.
   */
  public boolean shutdown(Duration timeout) {
    shared.shutdown = true;
    return pipeline.shutdown(timeout);
  }

  /** {@link #shutdown(Duration)} with 10 seconds. */
  @Override
  public void close() {
    shutdown(Duration.ofSeconds(10));
  }

  /** Options for {@link WeftTracerProvider}. */
  public static final class Builder {
    private Resource resource = Resource.create("unknown_service:java");
    private Sampler sampler = Sampler.parentBased(Sampler.alwaysOn());
    private IdGenerator idGenerator = IdGenerator.random();
    private SpanLimits limits = SpanLimits.DEFAULT;
    private SpanExporter exporter = SpanExporter.noop();
    private ExportPipeline.Config batch = new ExportPipeline.Config();

    public Builder setResource(Resource resource) {
      this.resource = Objects.requireNonNull(resource);
      return this;
    }

    public Builder setSampler(Sampler sampler) {
      this.sampler = Objects.requireNonNull(sampler);
      return this;
    }

    public Builder setIdGenerator(IdGenerator idGenerator) {
      this.idGenerator = Objects.requireNonNull(idGenerator);
      return this;
    }

    public Builder setSpanLimits(SpanLimits limits) {
      this.limits = Objects.requireNonNull(limits);
      return this;
    }

    public Builder setExporter(SpanExporter exporter) {
      this.exporter = Objects.requireNonNull(exporter);
      return this;
    }

    public Builder setBatchConfig(ExportPipeline.Config batch) {
      this.batch = Objects.requireNonNull(batch);
      return this;
    }

    /**
     * Reads the standard variables: {@code OTEL_SERVICE_NAME}, {@code OTEL_RESOURCE_ATTRIBUTES},
     * {@code OTEL_TRACES_SAMPLER(_ARG)}, {@code OTEL_SPAN_*_LIMIT}, {@code OTEL_BSP_*},
     * {@code OTEL_EXPORTER_OTLP_{,TRACES_}{ENDPOINT,PROTOCOL,HEADERS,COMPRESSION,TIMEOUT}}.
     * {@code OTEL_EXPORTER_OTLP_PROTOCOL=grpc} needs the {@code weft-sdk-grpc} module.
     */
    public Builder fromEnv() {
      return fromEnv(System.getenv());
    }

    /** {@link #fromEnv()} over the given variables. */
    public Builder fromEnv(Map<String, String> env) {
      EnvConfig.apply(this, env);
      return this;
    }

    public WeftTracerProvider build() {
      return new WeftTracerProvider(this);
    }
  }
}
