package io.weft.sdk.sampling;

import io.opentelemetry.api.trace.SpanKind;
import io.weft.sdk.internal.Json;
import io.weft.sdk.internal.RateLimitedLogger;
import io.weft.sdk.trace.WeftSpanContext;
import java.io.Closeable;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * Samples by a strategy polled from a Jaeger-compatible endpoint (spec/sampling.md
 * "JaegerRemote"). Until the first successful fetch, and whenever a fetch fails, the current
 * sampler stays in place.
 */
public final class JaegerRemoteSampler implements Sampler, Closeable {
  private static final Logger LOG = Logger.getLogger(JaegerRemoteSampler.class.getName());
  private static final RateLimitedLogger ERRORS = new RateLimitedLogger(LOG, 60_000);

  private final URI uri;
  private final int maxOperations;
  private final HttpClient client;
  private final ScheduledExecutorService poller;
  private volatile Sampler current;
  private volatile Strategy strategy;

  private JaegerRemoteSampler(Builder b) {
    this.uri = URI.create(b.endpoint + (b.endpoint.contains("?") ? "&" : "?") + "service="
        + URLEncoder.encode(b.serviceName, StandardCharsets.UTF_8));
    this.maxOperations = b.maxOperations;
    this.current = b.initialSampler;
    this.client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    this.poller = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "weft-jaeger-remote-sampler");
      t.setDaemon(true);
      return t;
    });
    poller.scheduleWithFixedDelay(this::poll, 0, b.pollingIntervalMillis, TimeUnit.MILLISECONDS);
  }

  public static Builder builder(String serviceName) {
    return new Builder(serviceName);
  }

  /** Fetches the strategy once; failures keep the current sampler. */
  void poll() {
    try {
      HttpRequest req = HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(10)).GET().build();
      HttpResponse<String> resp = client.send(req, HttpResponse.BodyHandlers.ofString());
      if (resp.statusCode() / 100 != 2) {
        ERRORS.log("jaeger remote sampling: status " + resp.statusCode() + " from " + uri);
        return;
      }
      Strategy s = Strategy.parse(resp.body(), maxOperations);
      if (s == null) {
        ERRORS.log("jaeger remote sampling: invalid strategy from " + uri);
        return;
      }
      Strategy old = strategy;
      if (old != null) {
        s.keepStateFrom(old);
      }
      strategy = s;
      current = s;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      ERRORS.log("jaeger remote sampling: fetch from " + uri + " failed: " + e);
    }
  }

  @Override
  public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
      String name, SpanKind kind) {
    return current.shouldSample(parent, traceIdHigh, traceIdLow, name, kind);
  }

  @Override
  public String getDescription() {
    return "JaegerRemoteSampler{" + current.getDescription() + "}";
  }

  @Override
  public void close() {
    poller.shutdownNow();
  }

  /** Options with the defaults of spec/sampling.md. */
  public static final class Builder {
    private final String serviceName;
    private String endpoint = "http://localhost:5778/sampling";
    private long pollingIntervalMillis = 60_000;
    private Sampler initialSampler = Sampler.traceIdRatioBased(0.001);
    private int maxOperations = 2000;

    Builder(String serviceName) {
      this.serviceName = Objects.requireNonNull(serviceName);
    }

    public Builder setEndpoint(String endpoint) {
      this.endpoint = endpoint;
      return this;
    }

    public Builder setPollingInterval(Duration d) {
      this.pollingIntervalMillis = Math.max(1, d.toMillis());
      return this;
    }

    public Builder setInitialSampler(Sampler s) {
      this.initialSampler = s;
      return this;
    }

    public Builder setMaxOperations(int n) {
      this.maxOperations = n;
      return this;
    }

    public JaegerRemoteSampler build() {
      return new JaegerRemoteSampler(this);
    }
  }

  /**
   * A parsed strategy: the sampler a Jaeger {@code SamplingStrategyResponse} selects, with
   * per-operation samplers created on demand.
   */
  public static final class Strategy implements Sampler {
    private final Sampler single; // probabilistic or rate limiting; null for per-operation
    private final Map<String, Double> listed; // operation -> ratio (first entry wins)
    private final double defaultProbability;
    private final double lowerBound;
    private final int maxOperations;
    private final ConcurrentHashMap<String, GuaranteedThroughputSampler> tracked =
        new ConcurrentHashMap<>();
    private final TraceIdRatioBasedSampler fallback;

    private Strategy(Sampler single, Map<String, Double> listed, double defaultProbability,
        double lowerBound, int maxOperations) {
      this.single = single;
      this.listed = listed;
      this.defaultProbability = defaultProbability;
      this.lowerBound = lowerBound;
      this.maxOperations = maxOperations;
      this.fallback = new TraceIdRatioBasedSampler(defaultProbability);
    }

    /** Parses a strategy body; null when it is not a valid strategy. */
    public static Strategy parse(String body, int maxOperations) {
      Object doc;
      try {
        doc = Json.parse(body);
      } catch (IllegalArgumentException e) {
        return null;
      }
      if (!(doc instanceof Map)) {
        return null;
      }
      Map<?, ?> m = (Map<?, ?>) doc;
      try {
        Object ops = m.get("operationSampling");
        if (ops != null && ops != Json.NULL) {
          if (!(ops instanceof Map)) {
            return null;
          }
          Map<?, ?> o = (Map<?, ?>) ops;
          double def = clamp(num(o, "defaultSamplingProbability"));
          double lb = num(o, "defaultLowerBoundTracesPerSecond");
          Map<String, Double> listed = new java.util.LinkedHashMap<>();
          Object per = o.get("perOperationStrategies");
          if (per != null && per != Json.NULL) {
            if (!(per instanceof List)) {
              return null;
            }
            for (Object e : (List<?>) per) {
              if (!(e instanceof Map)) {
                return null;
              }
              Map<?, ?> em = (Map<?, ?>) e;
              Object name = em.get("operation");
              if (!(name instanceof String)) {
                return null;
              }
              Map<?, ?> ps = obj(em, "probabilisticSampling");
              double r = ps == null ? 0 : clamp(num(ps, "samplingRate"));
              listed.putIfAbsent((String) name, r);
            }
          }
          return new Strategy(null, listed, def, lb, maxOperations);
        }
        Map<?, ?> ps = obj(m, "probabilisticSampling");
        if (ps != null) {
          return new Strategy(new TraceIdRatioBasedSampler(clamp(num(ps, "samplingRate"))), null,
              0, 0, maxOperations);
        }
        Map<?, ?> rl = obj(m, "rateLimitingSampling");
        if (rl != null) {
          return new Strategy(
              new RateLimitingSampler(num(rl, "maxTracesPerSecond"), System::nanoTime), null, 0,
              0, maxOperations);
        }
        return null;
      } catch (IllegalArgumentException e) {
        return null;
      }
    }

    private static Map<?, ?> obj(Map<?, ?> m, String k) {
      Object v = m.get(k);
      if (v == null || v == Json.NULL) {
        return null;
      }
      if (!(v instanceof Map)) {
        throw new IllegalArgumentException(k + " is not an object");
      }
      return (Map<?, ?>) v;
    }

    private static double num(Map<?, ?> m, String k) {
      Object v = m.get(k);
      if (v == null || v == Json.NULL) {
        return 0;
      }
      if (!(v instanceof Double)) {
        throw new IllegalArgumentException(k + " is not a number");
      }
      return (Double) v;
    }

    private static double clamp(double r) {
      return Math.max(0, Math.min(1, r));
    }

    /** The sampler this strategy uses for spans named {@code operation}. */
    public Sampler samplerFor(String operation) {
      if (single != null) {
        return single;
      }
      GuaranteedThroughputSampler s = tracked.get(operation);
      if (s != null) {
        return s;
      }
      Double listedRatio = listed.get(operation);
      if (listedRatio == null && tracked.size() >= maxOperations) {
        return fallback;
      }
      double ratio = listedRatio != null ? listedRatio : defaultProbability;
      return tracked.computeIfAbsent(operation,
          k -> new GuaranteedThroughputSampler(ratio, lowerBound));
    }

    void keepStateFrom(Strategy old) {
      old.tracked.forEach((op, s) -> {
        Double r = listed == null ? null : listed.getOrDefault(op, defaultProbability);
        if (r != null && r == s.getRatio() && s.getLowerBound() == lowerBound) {
          tracked.putIfAbsent(op, s);
        }
      });
    }

    @Override
    public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
        String name, SpanKind kind) {
      return samplerFor(name).shouldSample(parent, traceIdHigh, traceIdLow, name, kind);
    }

    @Override
    public String getDescription() {
      return single != null ? single.getDescription()
          : "PerOperation{default:" + defaultProbability + ",lowerBound:" + lowerBound + "}";
    }
  }

  /**
   * Samples by ratio, and at least about {@code lowerBound} spans per second by a token bucket.
   */
  public static final class GuaranteedThroughputSampler implements Sampler {
    private final TraceIdRatioBasedSampler ratio;
    private final RateLimitingSampler limiter;
    private final double lowerBound;

    GuaranteedThroughputSampler(double ratio, double lowerBound) {
      this.ratio = new TraceIdRatioBasedSampler(ratio);
      this.limiter = new RateLimitingSampler(lowerBound, System::nanoTime);
      this.lowerBound = lowerBound;
    }

    public double getRatio() {
      return ratio.getRatio();
    }

    public double getLowerBound() {
      return lowerBound;
    }

    @Override
    public SamplingResult shouldSample(WeftSpanContext parent, long traceIdHigh, long traceIdLow,
        String name, SpanKind kind) {
      SamplingResult r = ratio.shouldSample(parent, traceIdHigh, traceIdLow, name, kind);
      if (r.decision().isSampled()) {
        limiter.tryAcquire();
        return r;
      }
      return limiter.shouldSample(parent, traceIdHigh, traceIdLow, name, kind);
    }

    @Override
    public String getDescription() {
      return "GuaranteedThroughput{" + ratio.getRatio() + "," + lowerBound + "}";
    }
  }
}
