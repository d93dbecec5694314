package weft.sampling;

import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.context.Context;
import io.opentelemetry.sdk.extension.trace.jaeger.sampler.JaegerRemoteSampler;
import io.opentelemetry.sdk.trace.IdGenerator;
import io.opentelemetry.sdk.trace.samplers.SamplingDecision;
import java.time.Duration;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Samples root spans with the OpenTelemetry Java Jaeger remote sampler polling a gRPC endpoint,
 * and prints how many of each operation it sampled and how long each operation's loop took, as
 * JSON.
 *
 * <p>The sampler polls once a minute, its default. Each poll builds a new sampler, and a new rate
 * limiter starts with a full balance, so a faster poll landing inside a loop would hand out a
 * second burst of credits.
 *
 * <p>Usage: {@code Remote http://127.0.0.1:5779 SERVICE N OP...}
 */
public final class Remote {
  public static void main(String[] args) throws Exception {
    String endpoint = args[0];
    String service = args[1];
    int n = Integer.parseInt(args[2]);
    JaegerRemoteSampler sampler =
        JaegerRemoteSampler.builder()
            .setEndpoint(endpoint)
            .setServiceName(service)
            .setPollingInterval(Duration.ofSeconds(60))
            .build();
    String initial = sampler.toString();
    long deadline = System.nanoTime() + 15_000_000_000L;
    while (sampler.toString().equals(initial)) {
      if (System.nanoTime() > deadline) {
        System.err.println("no strategy fetched within 15 s from " + endpoint + ": " + initial);
        System.exit(2);
      }
      Thread.sleep(20);
    }
    IdGenerator ids = IdGenerator.random();
    Map<String, Integer> sampled = new LinkedHashMap<>();
    Map<String, Double> seconds = new LinkedHashMap<>();
    for (int i = 3; i < args.length; i++) {
      String op = args[i];
      int count = 0;
      long start = System.nanoTime();
      for (int k = 0; k < n; k++) {
        SamplingDecision d =
            sampler
                .shouldSample(
                    Context.root(), ids.generateTraceId(), op, SpanKind.SERVER, Attributes.empty(), Collections.emptyList())
                .getDecision();
        if (d == SamplingDecision.RECORD_AND_SAMPLE) {
          count++;
        }
      }
      seconds.put(op, (System.nanoTime() - start) / 1e9);
      sampled.put(op, count);
    }
    sampler.close();
    StringBuilder out = new StringBuilder("{\"sampled\": {");
    String sep = "";
    for (Map.Entry<String, Integer> e : sampled.entrySet()) {
      out.append(sep).append('"').append(e.getKey().replace("\"", "\\\"")).append("\": ").append(e.getValue());
      sep = ", ";
    }
    out.append("}, \"seconds\": {");
    sep = "";
    for (Map.Entry<String, Double> e : seconds.entrySet()) {
      out.append(sep).append('"').append(e.getKey().replace("\"", "\\\"")).append("\": ").append(e.getValue());
      sep = ", ";
    }
    out.append("}}");
    System.out.println(out);
  }
}
