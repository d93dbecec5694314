package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.opentelemetry.api.baggage.Baggage;
import io.opentelemetry.api.baggage.BaggageEntryMetadata;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.weft.sdk.id.Hex;
import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.id.WyRand;
import io.weft.sdk.id.XrayTraceId;
import io.weft.sdk.propagation.B3Propagator;
import io.weft.sdk.propagation.CompositePropagator;
import io.weft.sdk.propagation.JaegerPropagator;
import io.weft.sdk.propagation.W3CBaggagePropagator;
import io.weft.sdk.propagation.W3CTraceContextPropagator;
import io.weft.sdk.propagation.WeftBaggage;
import io.weft.sdk.propagation.XrayPropagator;
import io.weft.sdk.sampling.ConsistentProbabilitySampler;
import io.weft.sdk.sampling.JaegerRemoteSampler;
import io.weft.sdk.sampling.ParentBasedSampler;
import io.weft.sdk.sampling.RateLimitingSampler;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.sampling.SamplingResult;
import io.weft.sdk.sampling.TraceIdRatioBasedSampler;
import io.weft.sdk.trace.Flags;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Runs every vector of every file in {@code spec/vectors/*.json} (spec/README.md
 * "Conformance"). A file without a runner, an unknown operation or an unknown version fails.
 */
class VectorsTest {
  /**
   * Vectors this SDK deliberately skips, by name, with the reason. Empty: every vector runs. A
   * name listed here that is not in the files fails the run, so the list cannot go stale.
   */
  static final Map<String, String> SKIPPED = Map.of();

  private static final Map<String, Consumer<JsonObject>> RUNNERS = new LinkedHashMap<>();

  static {
    RUNNERS.put("ids.json", VectorsTest::ids);
    for (String f : List.of("traceparent.json", "tracestate.json", "b3.json", "xray.json",
        "jaeger.json", "baggage.json", "composite.json")) {
      RUNNERS.put(f, VectorsTest::propagation);
    }
    RUNNERS.put("sampling.json", VectorsTest::sampling);
    RUNNERS.put("otlp.json", OtlpVectors::run);
  }

  static List<Path> files() throws IOException {
    try (Stream<Path> s = Files.list(Vectors.dir())) {
      return s.filter(p -> p.getFileName().toString().endsWith(".json")).sorted()
          .collect(Collectors.toList());
    }
  }

  @Test
  void everyVectorFileHasARunner() throws IOException {
    List<Path> files = files();
    assertTrue(files.size() >= 10, "expected the spec's vector files, found " + files);
    for (Path p : files) {
      assertTrue(RUNNERS.containsKey(p.getFileName().toString()),
          "no runner for vector file " + p.getFileName());
    }
  }

  @Test
  void skipListNamesExistingVectors() throws IOException {
    List<String> names = new ArrayList<>();
    for (Path p : files()) {
      for (JsonElement v : JsonParser.parseString(Files.readString(p)).getAsJsonObject()
          .getAsJsonArray("vectors")) {
        names.add(v.getAsJsonObject().get("name").getAsString());
      }
    }
    for (String skipped : SKIPPED.keySet()) {
      assertTrue(names.contains(skipped), "skip list names unknown vector " + skipped);
    }
  }

  @TestFactory
  Stream<DynamicNode> vectors() throws IOException {
    List<DynamicNode> out = new ArrayList<>();
    for (Path p : files()) {
      String file = p.getFileName().toString();
      JsonObject doc = JsonParser.parseString(Files.readString(p)).getAsJsonObject();
      assertEquals(1, doc.get("version").getAsInt(), file + ": unknown vector format version");
      Consumer<JsonObject> runner = RUNNERS.get(file);
      List<DynamicTest> tests = new ArrayList<>();
      for (JsonElement e : doc.getAsJsonArray("vectors")) {
        JsonObject v = e.getAsJsonObject();
        String name = v.get("name").getAsString();
        if (SKIPPED.containsKey(name)) {
          continue; // listed with its reason in SKIPPED
        }
        tests.add(DynamicTest.dynamicTest(name, () -> {
          if (runner == null) {
            fail("no runner for " + file);
          }
          runner.accept(v);
        }));
      }
      assertFalse(tests.isEmpty(), file + " has no vectors");
      out.add(DynamicContainer.dynamicContainer(file, tests));
    }
    return out.stream();
  }

  // ---- helpers ----

  static String str(JsonObject o, String k) {
    JsonElement e = o.get(k);
    return e == null || e.isJsonNull() ? null : e.getAsString();
  }

  static long u64(String hex) {
    return Long.parseUnsignedLong(hex, 16);
  }

  /** A fake PRNG returning scripted draws and counting them. */
  static final class Scripted implements io.weft.sdk.id.RandomSource {
    final long[] draws;
    int used;

    Scripted(JsonArray a) {
      draws = new long[a.size()];
      for (int i = 0; i < a.size(); i++) {
        draws[i] = u64(a.get(i).getAsString());
      }
    }

    @Override
    public long nextLong() {
      if (used >= draws.length) {
        throw new AssertionError("generator drew more than the " + draws.length + " scripted draws");
      }
      return draws[used++];
    }
  }

  // ---- ids.json ----

  static void ids(JsonObject v) {
    JsonObject in = v.getAsJsonObject("input");
    JsonObject ex = v.getAsJsonObject("expected");
    switch (v.get("operation").getAsString()) {
      case "hex_encode": {
        JsonArray b = in.getAsJsonArray("bytes");
        byte[] bytes = new byte[b.size()];
        for (int i = 0; i < bytes.length; i++) {
          bytes[i] = (byte) b.get(i).getAsInt();
        }
        assertEquals(str(ex, "hex"), Hex.of(bytes));
        break;
      }
      case "validate": {
        String hex = str(in, "hex");
        boolean valid = "trace_id".equals(str(in, "kind")) ? Hex.isValidTraceId(hex)
            : Hex.isValidSpanId(hex);
        assertEquals(ex.get("valid").getAsBoolean(), valid);
        break;
      }
      case "generate": {
        String kind = str(in, "kind");
        if (kind.equals("trace_flags")) {
          String pf = str(in, "parent_trace_flags");
          byte flags = Flags.child(pf == null ? -1 : Integer.parseInt(pf, 16),
              in.get("sampled").getAsBoolean());
          assertEquals(str(ex, "trace_flags"), String.format("%02x", flags & 0xff));
          break;
        }
        Scripted r = new Scripted(in.getAsJsonArray("draws"));
        String id;
        if (kind.equals("trace_id")) {
          IdGenerator.TraceId t = IdGenerator.random().nextTraceId(r, new IdGenerator.TraceId());
          id = Hex.ofTraceId(t.high, t.low);
        } else {
          id = Hex.ofLong(IdGenerator.random().nextSpanId(r));
        }
        assertEquals(str(ex, "id"), id);
        assertEquals(ex.get("draws_used").getAsInt(), r.used);
        break;
      }
      case "generate_xray": {
        long nanos = Long.parseUnsignedLong(str(in, "unix_nanos"));
        Scripted r = new Scripted(in.getAsJsonArray("draws"));
        IdGenerator.TraceId t = IdGenerator.xray(() -> nanos).nextTraceId(r,
            new IdGenerator.TraceId());
        assertEquals(str(ex, "trace_id"), Hex.ofTraceId(t.high, t.low));
        assertEquals(str(ex, "xray_root"), XrayTraceId.toString(t.high, t.low));
        break;
      }
      case "prng_wyrand": {
        WyRand w = new WyRand(u64(str(in, "seed")));
        JsonArray outs = ex.getAsJsonArray("outputs");
        assertEquals(in.get("count").getAsInt(), outs.size());
        for (JsonElement o : outs) {
          assertEquals(o.getAsString(), Hex.ofLong(w.nextLong()));
        }
        break;
      }
      default:
        fail("unknown ids operation " + v.get("operation"));
    }
  }

  // ---- propagation ----

  static TextMapPropagator propagator(JsonObject in) {
    if (in.has("propagators")) {
      List<String> names = new ArrayList<>();
      for (JsonElement e : in.getAsJsonArray("propagators")) {
        names.add(e.getAsString());
      }
      return CompositePropagator.fromNames(names);
    }
    JsonObject p = in.getAsJsonObject("propagator");
    String name = str(p, "name");
    switch (name) {
      case "tracecontext":
        return W3CTraceContextPropagator.getInstance();
      case "baggage":
        return W3CBaggagePropagator.getInstance();
      case "b3":
        return "multi".equals(str(p, "inject_encoding")) ? B3Propagator.injectingMultiHeaders()
            : B3Propagator.injectingSingleHeader();
      case "b3multi":
        return B3Propagator.injectingMultiHeaders();
      case "xray":
        return XrayPropagator.getInstance();
      case "jaeger":
        return JaegerPropagator.getInstance();
      default:
        throw new AssertionError("unknown propagator " + name);
    }
  }

  static WeftTraceState traceState(String canonical) {
    WeftTraceState ts = WeftTraceState.parse(canonical == null ? "" : canonical);
    if (canonical != null && !canonical.isEmpty()) {
      assertEquals(canonical, ts.toString(), "vector tracestate did not parse back");
    }
    return ts;
  }

  static WeftSpanContext context(JsonObject c, boolean remote) {
    String t = str(c, "trace_id");
    byte flags = (byte) Integer.parseInt(str(c, "trace_flags"), 16);
    WeftTraceState ts = traceState(str(c, "tracestate"));
    long hi = u64(t.substring(0, 16));
    long lo = u64(t.substring(16));
    long sid = u64(str(c, "span_id"));
    if (!remote) {
      return WeftSpanContext.create(hi, lo, sid, flags, ts);
    }
    return WeftSpanContext.createRemote(hi, lo, sid, flags, ts,
        c.has("b3_debug") && c.get("b3_debug").getAsBoolean(),
        c.has("jaeger_debug") && c.get("jaeger_debug").getAsBoolean(), str(c, "xray_lineage"));
  }

  static WeftBaggage baggage(JsonArray a) {
    WeftBaggage.Builder b = WeftBaggage.builder();
    if (a != null) {
      for (JsonElement e : a) {
        JsonObject o = e.getAsJsonObject();
        b.put(str(o, "key"), str(o, "value"), BaggageEntryMetadata.create(str(o, "metadata")));
      }
    }
    return b.build();
  }

  static Map<String, String> headersOf(JsonObject o) {
    Map<String, String> m = new LinkedHashMap<>();
    for (Map.Entry<String, JsonElement> e : o.entrySet()) {
      m.put(e.getKey(), e.getValue().getAsString());
    }
    return m;
  }

  static void propagation(JsonObject v) {
    JsonObject in = v.getAsJsonObject("input");
    JsonObject ex = v.getAsJsonObject("expected");
    TextMapPropagator p = propagator(in);
    switch (v.get("operation").getAsString()) {
      case "extract": {
        TestCarrier carrier = new TestCarrier();
        for (Map.Entry<String, JsonElement> h : in.getAsJsonObject("headers").entrySet()) {
          for (JsonElement val : h.getValue().getAsJsonArray()) {
            carrier.add(h.getKey(), val.getAsString());
          }
        }
        Context ctx = p.extract(Context.root(), carrier, TestCarrier.GETTER);
        Span span = Span.fromContextOrNull(ctx);
        boolean valid = ex.get("valid").getAsBoolean();
        if (!valid) {
          assertTrue(span == null || !span.getSpanContext().isValid(),
              "expected no span context, got " + span);
        } else {
          assertNotNull(span, "expected a span context");
          WeftSpanContext sc = WeftSpanContext.of(span.getSpanContext());
          assertEquals(str(ex, "trace_id"), sc.getTraceId());
          assertEquals(str(ex, "span_id"), sc.getSpanId());
          assertEquals(str(ex, "trace_flags"), sc.getTraceFlags().asHex());
          assertEquals(ex.get("is_remote").getAsBoolean(), sc.isRemote());
          assertEquals(str(ex, "tracestate"), sc.weftTraceState().toString());
          assertEquals(ex.has("b3_debug") && ex.get("b3_debug").getAsBoolean(), sc.b3Debug());
          assertEquals(ex.has("jaeger_debug") && ex.get("jaeger_debug").getAsBoolean(),
              sc.jaegerDebug());
          assertEquals(str(ex, "xray_lineage"), sc.xrayLineage());
          if (ex.has("reinject")) {
            TestCarrier out = new TestCarrier();
            p.inject(Context.root().with(Span.wrap(sc)), out, TestCarrier.SETTER);
            assertEquals(headersOf(ex.getAsJsonObject("reinject")), out.injected);
          }
        }
        Baggage b = Baggage.fromContextOrNull(ctx);
        List<List<String>> got = new ArrayList<>();
        if (b != null) {
          b.forEach((k, e) -> got.add(List.of(k, e.getValue(), e.getMetadata().getValue())));
        }
        List<List<String>> want = new ArrayList<>();
        if (ex.has("baggage")) {
          for (JsonElement e : ex.getAsJsonArray("baggage")) {
            JsonObject o = e.getAsJsonObject();
            want.add(List.of(str(o, "key"), str(o, "value"), str(o, "metadata")));
          }
        }
        assertEquals(want, got, "baggage");
        break;
      }
      case "inject": {
        Context ctx = Context.root();
        if (in.has("context") && !in.get("context").isJsonNull()) {
          ctx = ctx.with(Span.wrap(context(in.getAsJsonObject("context"), true)));
        }
        if (in.has("baggage")) {
          ctx = ctx.with(baggage(in.getAsJsonArray("baggage")));
        }
        TestCarrier out = new TestCarrier();
        p.inject(ctx, out, TestCarrier.SETTER);
        assertEquals(headersOf(ex.getAsJsonObject("headers")), out.injected);
        break;
      }
      default:
        fail("unknown propagation operation " + v.get("operation"));
    }
  }

  // ---- sampling.json ----

  static Sampler sampler(JsonObject s) {
    switch (str(s, "type")) {
      case "always_on":
        return Sampler.alwaysOn();
      case "always_off":
        return Sampler.alwaysOff();
      case "trace_id_ratio":
        return Sampler.traceIdRatioBased(s.get("ratio").getAsDouble());
      case "consistent_probability":
        return Sampler.consistentProbability(s.get("probability").getAsDouble());
      case "parent_based": {
        ParentBasedSampler.Builder b = Sampler.parentBasedBuilder(sampler(s.getAsJsonObject("root")));
        if (s.has("remote_parent_sampled")) {
          b.setRemoteParentSampled(sampler(s.getAsJsonObject("remote_parent_sampled")));
        }
        if (s.has("remote_parent_not_sampled")) {
          b.setRemoteParentNotSampled(sampler(s.getAsJsonObject("remote_parent_not_sampled")));
        }
        if (s.has("local_parent_sampled")) {
          b.setLocalParentSampled(sampler(s.getAsJsonObject("local_parent_sampled")));
        }
        if (s.has("local_parent_not_sampled")) {
          b.setLocalParentNotSampled(sampler(s.getAsJsonObject("local_parent_not_sampled")));
        }
        return b.build();
      }
      default:
        throw new AssertionError("unknown sampler " + s);
    }
  }

  static void sampling(JsonObject v) {
    JsonObject in = v.getAsJsonObject("input");
    JsonObject ex = v.getAsJsonObject("expected");
    switch (v.get("operation").getAsString()) {
      case "trace_id_ratio_bound": {
        double r = in.get("ratio").getAsDouble();
        if (ex.has("sample_all")) {
          assertTrue(ex.get("sample_all").getAsBoolean());
          assertTrue(r >= 1.0);
          assertTrue(((TraceIdRatioBasedSampler) Sampler.traceIdRatioBased(r)).samples(-1L));
        } else {
          assertEquals(str(ex, "bound"), Hex.ofLong(TraceIdRatioBasedSampler.bound(r)));
        }
        break;
      }
      case "threshold_encode": {
        String th = ConsistentProbabilitySampler.th(in.get("probability").getAsDouble());
        assertEquals(str(ex, "th"), th);
        String t = Long.toHexString(ConsistentProbabilitySampler.thresholdOf(th));
        assertEquals(str(ex, "threshold"), "0".repeat(14 - t.length()) + t);
        break;
      }
      case "should_sample": {
        Sampler s = sampler(in.getAsJsonObject("sampler"));
        String t = str(in, "trace_id");
        WeftSpanContext parent = WeftSpanContext.INVALID;
        if (in.has("parent") && !in.get("parent").isJsonNull()) {
          JsonObject po = in.getAsJsonObject("parent");
          parent = context(po, po.get("is_remote").getAsBoolean());
        }
        SamplingResult r = s.shouldSample(parent, u64(t.substring(0, 16)), u64(t.substring(16)),
            str(in, "name"), SpanKind.INTERNAL);
        assertEquals(str(ex, "decision"), r.decision().name());
        assertEquals(str(ex, "tracestate"), r.traceState(parent.weftTraceState()).toString());
        break;
      }
      case "rate_limit_sequence": {
        JsonArray calls = in.getAsJsonArray("calls_ns");
        long[] clock = new long[calls.size() + 1];
        clock[0] = Long.parseLong(str(in, "created_ns"));
        for (int i = 0; i < calls.size(); i++) {
          clock[i + 1] = Long.parseLong(calls.get(i).getAsString());
        }
        int[] tick = {0};
        RateLimitingSampler s = new RateLimitingSampler(in.get("spans_per_second").getAsDouble(),
            () -> clock[tick[0]++]);
        JsonArray want = ex.getAsJsonArray("sampled");
        for (int i = 0; i < calls.size(); i++) {
          SamplingResult r = s.shouldSample(WeftSpanContext.INVALID, 1, 1, "op",
              SpanKind.INTERNAL);
          assertEquals(want.get(i).getAsBoolean(), r.decision().isSampled(), "call " + i);
        }
        break;
      }
      case "jaeger_remote_resolve": {
        JaegerRemoteSampler.Strategy st = JaegerRemoteSampler.Strategy.parse(str(in, "body"), 2000);
        boolean valid = ex.get("valid").getAsBoolean();
        if (!valid) {
          assertNull(st, "expected an invalid strategy");
          break;
        }
        assertNotNull(st, "expected a valid strategy");
        JsonObject want = ex.getAsJsonObject("samplers");
        for (JsonElement op : in.getAsJsonArray("operations")) {
          Sampler got = st.samplerFor(op.getAsString());
          JsonObject w = want.getAsJsonObject(op.getAsString());
          switch (str(w, "type")) {
            case "trace_id_ratio":
              assertTrue(got instanceof TraceIdRatioBasedSampler, got.getDescription());
              assertEquals(w.get("ratio").getAsDouble(),
                  ((TraceIdRatioBasedSampler) got).getRatio());
              break;
            case "rate_limiting":
              assertTrue(got instanceof RateLimitingSampler, got.getDescription());
              assertEquals(w.get("spans_per_second").getAsDouble(),
                  ((RateLimitingSampler) got).getRate());
              break;
            case "guaranteed_throughput":
              assertTrue(got instanceof JaegerRemoteSampler.GuaranteedThroughputSampler,
                  got.getDescription());
              JaegerRemoteSampler.GuaranteedThroughputSampler g =
                  (JaegerRemoteSampler.GuaranteedThroughputSampler) got;
              assertEquals(w.get("ratio").getAsDouble(), g.getRatio());
              assertEquals(w.get("lower_bound").getAsDouble(), g.getLowerBound());
              break;
            default:
              fail("unknown sampler type " + w);
          }
        }
        break;
      }
      default:
        fail("unknown sampling operation " + v.get("operation"));
    }
  }

  static long httpDate(String s) {
    return ZonedDateTime.parse(s, DateTimeFormatter.RFC_1123_DATE_TIME).toInstant().toEpochMilli();
  }

  static void assertBytes(byte[] want, byte[] got) {
    assertArrayEquals(want, got, () -> "want " + Hex.of(want) + "\n got " + Hex.of(got));
  }
}
