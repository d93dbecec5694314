package io.weft.sdk.trace;

import io.weft.sdk.export.ExportPipeline;
import io.weft.sdk.export.OtlpExporter;
import io.weft.sdk.export.OtlpHttpTransport;
import io.weft.sdk.export.OtlpTransport;
import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.sampling.JaegerRemoteSampler;
import io.weft.sdk.sampling.Sampler;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.logging.Logger;

/** Reads the OpenTelemetry environment variables into a provider builder. */
final class EnvConfig {
  private static final Logger LOG = Logger.getLogger(EnvConfig.class.getName());

  private EnvConfig() {}

  static void apply(WeftTracerProvider.Builder b, Map<String, String> env) {
    Resource resource = Resource.fromEnv(env);
    b.setResource(resource);
    b.setSpanLimits(SpanLimits.fromEnv(env));
    b.setSampler(sampler(env, (String) resource.attributes().get("service.name")));
    if ("xray".equals(env.get("WEFT_ID_GENERATOR"))) {
      b.setIdGenerator(IdGenerator.xray());
    }
    ExportPipeline.Config batch = new ExportPipeline.Config()
        .setMaxQueueSize(SpanLimits.intEnv(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048))
        .setMaxExportBatchSize(SpanLimits.intEnv(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
        .setScheduleDelay(Duration.ofMillis(SpanLimits.intEnv(env, "OTEL_BSP_SCHEDULE_DELAY",
            5000)));
    b.setBatchConfig(batch);
    String exporter = env.getOrDefault("OTEL_TRACES_EXPORTER", "otlp");
    if (exporter.equals("none")) {
      return;
    }
    String protocol = first(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    boolean grpc = protocol.equals("grpc");
    String endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if (endpoint == null || endpoint.isBlank()) {
      String base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT");
      if (base == null || base.isBlank()) {
        endpoint = grpc ? "http://localhost:4317" : "http://localhost:4318/v1/traces";
      } else {
        endpoint = grpc ? base : base.replaceAll("/+$", "") + "/v1/traces";
      }
    }
    boolean gzip = !"none".equals(first(env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"));
    Map<String, String> headers = headers(first(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS", ""));
    String timeout = first(env, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT",
        "10000");
    long timeoutMs;
    try {
      timeoutMs = Math.max(1, Long.parseLong(timeout));
    } catch (NumberFormatException e) {
      LOG.warning("invalid OTEL_EXPORTER_OTLP_TIMEOUT " + timeout + ", using 10000 ms");
      timeoutMs = 10_000;
    }
    OtlpTransport transport;
    if (grpc) {
      transport = grpcTransport(endpoint, gzip, headers);
      if (transport == null) {
        LOG.warning("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs io.weft:weft-sdk-grpc on the class "
            + "path; exporting with http/protobuf to " + endpoint);
        transport = new OtlpHttpTransport(endpoint, gzip, headers);
      }
    } else {
      transport = new OtlpHttpTransport(endpoint, gzip, headers);
    }
    b.setExporter(new OtlpExporter(transport, Duration.ofMillis(timeoutMs)));
  }

  /** Finds the gRPC transport of the optional module through {@link ServiceLoader}. */
  private static OtlpTransport grpcTransport(String endpoint, boolean gzip,
      Map<String, String> headers) {
    for (GrpcTransportProvider p : ServiceLoader.load(GrpcTransportProvider.class)) {
      return p.create(endpoint, gzip, headers);
    }
    return null;
  }

  static String first(Map<String, String> env, String a, String b, String def) {
    String v = env.get(a);
    if (v == null || v.isBlank()) {
      v = env.get(b);
    }
    return v == null || v.isBlank() ? def : v.trim();
  }

  static Map<String, String> headers(String v) {
    Map<String, String> m = new LinkedHashMap<>();
    for (String kv : v.split(",")) {
      int eq = kv.indexOf('=');
      if (eq <= 0) {
        continue;
      }
      m.put(kv.substring(0, eq).trim(),
          URLDecoder.decode(kv.substring(eq + 1).trim().replace("+", "%2B"),
              StandardCharsets.UTF_8));
    }
    return m;
  }

  static Sampler sampler(Map<String, String> env, String serviceName) {
    String name = env.getOrDefault("OTEL_TRACES_SAMPLER", "parentbased_always_on").trim();
    String arg = env.get("OTEL_TRACES_SAMPLER_ARG");
    boolean parent = name.startsWith("parentbased_");
    String base = parent ? name.substring("parentbased_".length()) : name;
    Sampler s;
    switch (base) {
      case "always_on":
        s = Sampler.alwaysOn();
        break;
      case "always_off":
        s = Sampler.alwaysOff();
        break;
      case "traceidratio":
        s = Sampler.traceIdRatioBased(number(arg, 1.0));
        break;
      case "consistent_probability":
        s = Sampler.consistentProbability(number(arg, 1.0));
        break;
      case "rate_limiting":
        s = Sampler.rateLimiting(number(arg, 100.0));
        break;
      case "jaeger_remote": {
        JaegerRemoteSampler.Builder jb = JaegerRemoteSampler.builder(serviceName);
        if (arg != null) {
          for (String kv : arg.split(",")) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
              continue;
            }
            String k = kv.substring(0, eq).trim();
            String v = kv.substring(eq + 1).trim();
            switch (k) {
              case "endpoint":
                jb.setEndpoint(v);
                break;
              case "pollingIntervalMs":
                jb.setPollingInterval(Duration.ofMillis((long) number(v, 60000)));
                break;
              case "initialSamplingRate":
                jb.setInitialSampler(Sampler.traceIdRatioBased(number(v, 0.001)));
                break;
              default:
                break;
            }
          }
        }
        s = jb.build();
        break;
      }
      default:
        LOG.warning("unknown OTEL_TRACES_SAMPLER " + name + ", using parentbased_always_on");
        return Sampler.parentBased(Sampler.alwaysOn());
    }
    return parent ? Sampler.parentBased(s) : s;
  }

  private static double number(String v, double def) {
    if (v == null || v.isBlank()) {
      return def;
    }
    try {
      return Double.parseDouble(v.trim());
    } catch (NumberFormatException e) {
      LOG.warning("invalid OTEL_TRACES_SAMPLER_ARG " + v + ", using " + def);
      return def;
    }
  }
}
