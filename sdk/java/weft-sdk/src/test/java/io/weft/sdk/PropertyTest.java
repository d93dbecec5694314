package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.baggage.Baggage;
import io.opentelemetry.api.baggage.BaggageEntryMetadata;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
import io.weft.sdk.export.OtlpEncoder;
import io.weft.sdk.export.OtlpRetry;
import io.weft.sdk.id.Hex;
import io.weft.sdk.id.XrayTraceId;
import io.weft.sdk.internal.Json;
import io.weft.sdk.propagation.B3Propagator;
import io.weft.sdk.propagation.CompositePropagator;
import io.weft.sdk.propagation.JaegerPropagator;
import io.weft.sdk.propagation.Traceparent;
import io.weft.sdk.propagation.W3CBaggagePropagator;
import io.weft.sdk.propagation.W3CTraceContextPropagator;
import io.weft.sdk.propagation.WeftBaggage;
import io.weft.sdk.propagation.XrayPropagator;
import io.weft.sdk.sampling.JaegerRemoteSampler;
import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.InstrumentationScope;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.List;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.Size;
import net.jqwik.api.constraints.StringLength;

/** Round trips for every header format and "no input throws" for every decoder of outside input. */
class PropertyTest {
  static final List<TextMapPropagator> ALL = List.of(W3CTraceContextPropagator.getInstance(),
      W3CBaggagePropagator.getInstance(), B3Propagator.injectingSingleHeader(),
      B3Propagator.injectingMultiHeaders(), XrayPropagator.getInstance(),
      JaegerPropagator.getInstance(),
      CompositePropagator.fromNames(List.of("tracecontext", "baggage", "b3", "xray", "jaeger")));

  static final List<String> HEADERS = List.of("traceparent", "tracestate", "baggage", "b3",
      "X-B3-TraceId", "X-B3-SpanId", "X-B3-ParentSpanId", "X-B3-Sampled", "X-B3-Flags",
      "X-Amzn-Trace-Id", "uber-trace-id", "uberctx-a", "uberctx-B");

  @Provide
  Arbitrary<WeftSpanContext> contexts() {
    Arbitrary<Long> any = Arbitraries.longs();
    Arbitrary<Long> nonZero = Arbitraries.longs().filter(x -> x != 0);
    return Combinators.combine(any, nonZero, nonZero, Arbitraries.of((byte) 0, (byte) 1,
        (byte) 2, (byte) 3)).as((hi, lo, sid, f) -> WeftSpanContext.createRemote(hi, lo, sid, f,
            WeftTraceState.EMPTY, false, false, null));
  }

  /** Header-like strings: mostly the characters the parsers care about, some arbitrary. */
  @Provide
  Arbitrary<String> headerValues() {
    Arbitrary<String> alphabet = Arbitraries.strings().withChars("0123456789abcdefABCDEF-=;,:%+ \t@*/_dx?")
        .ofMaxLength(120);
    Arbitrary<String> anything = Arbitraries.strings().ofMaxLength(200);
    Arbitrary<String> nearValid = Arbitraries.of(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        "4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7:0:1",
        "80f198ee56343ba864fe8b2a57d3eff7-05e3ac9a4f6e3b90-1-e457b5a2e4d86bd1")
        .flatMap(s -> Arbitraries.integers().between(0, s.length()).flatMap(cut ->
            Arbitraries.strings().ofMaxLength(3).map(ins -> s.substring(0, cut) + ins
                + s.substring(cut))));
    return Arbitraries.oneOf(alphabet, anything, nearValid);
  }

  @Property(tries = 300)
  void traceparentRoundTrips(@ForAll("contexts") WeftSpanContext sc) {
    String h = Traceparent.format(sc);
    Traceparent tp = new Traceparent();
    assertTrue(tp.parse(h), h);
    assertEquals(sc.traceIdHigh(), tp.traceIdHigh);
    assertEquals(sc.traceIdLow(), tp.traceIdLow);
    assertEquals(sc.spanIdLong(), tp.spanId);
    assertEquals(sc.flags() & 3, tp.flags);
  }

  @Property(tries = 200)
  void everyPropagatorRoundTripsASpanContext(@ForAll("contexts") WeftSpanContext sc) {
    if ((sc.traceIdHigh() | sc.traceIdLow()) == 0) {
      return;
    }
    for (TextMapPropagator p : List.of(W3CTraceContextPropagator.getInstance(),
        B3Propagator.injectingSingleHeader(), B3Propagator.injectingMultiHeaders(),
        XrayPropagator.getInstance(), JaegerPropagator.getInstance())) {
      TestCarrier c = new TestCarrier();
      p.inject(Context.root().with(Span.wrap(sc)), c, TestCarrier.SETTER);
      TestCarrier in = new TestCarrier();
      c.injected.forEach(in::add);
      WeftSpanContext got = WeftSpanContext.of(Span.fromContext(p.extract(Context.root(), in,
          TestCarrier.GETTER)).getSpanContext());
      assertEquals(sc.getTraceId(), got.getTraceId(), p.toString());
      assertEquals(sc.getSpanId(), got.getSpanId(), p.toString());
      assertEquals(sc.isSampled(), got.isSampled(), p.toString());
    }
  }

  @Property(tries = 200)
  void xrayIdRoundTrips(@ForAll long hi, @ForAll long lo) {
    if ((hi | lo) == 0) {
      return;
    }
    String s = XrayTraceId.toString(hi, lo);
    XrayTraceId t = new XrayTraceId();
    assertTrue(t.parse(s, 0, s.length()));
    assertEquals(hi, t.high);
    assertEquals(lo, t.low);
  }

  /** A valid header with up to four characters replaced, inserted or deleted. */
  static Arbitrary<String> mutated(String valid) {
    Arbitrary<Character> c = Arbitraries.of('0', '1', '9', 'a', 'f', 'g', 'A', 'F', '-', ';', '=',
        ' ', '\u00e9', '\u00b0', '\u0130', '\u0000');
    Arbitrary<int[]> edit = Combinators.combine(Arbitraries.integers().between(0, 2),
        Arbitraries.integers().between(0, valid.length())).as((k, i) -> new int[] {k, i});
    return Combinators.combine(edit.list().ofMaxSize(4), c.list().ofSize(4)).as((edits, chars) -> {
      StringBuilder sb = new StringBuilder(valid);
      for (int j = 0; j < edits.size(); j++) {
        int at = Math.min(edits.get(j)[1], sb.length());
        switch (edits.get(j)[0]) {
          case 0 -> { if (at < sb.length()) { sb.setCharAt(at, chars.get(j)); } }
          case 1 -> sb.insert(at, chars.get(j));
          default -> { if (at < sb.length()) { sb.deleteCharAt(at); } }
        }
      }
      return sb.toString();
    });
  }

  @Provide
  Arbitrary<String> traceparents() {
    return mutated("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  }

  @Provide
  Arbitrary<String> xrayHeaders() {
    return mutated("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1");
  }

  /** The traceparent rules checked character by character (Hex's charAt helpers). */
  static boolean validTraceparent(String v) {
    int n = v.length();
    if (n < 55 || v.charAt(2) != '-' || v.charAt(35) != '-' || v.charAt(52) != '-'
        || !Hex.isLowerHex(v, 0, 2) || !Hex.isLowerHex(v, 3, 32) || !Hex.isLowerHex(v, 36, 16)
        || !Hex.isLowerHex(v, 53, 2)) {
      return false;
    }
    long version = Hex.parseLong(v, 0, 2);
    return version != 0xff && (Hex.parseLong(v, 3, 16) | Hex.parseLong(v, 19, 16)) != 0
        && Hex.parseLong(v, 36, 16) != 0
        && (version == 0 ? n == 55 : n == 55 || v.charAt(55) == '-');
  }

  @Property(tries = 2000)
  void traceparentParsingAgreesWithTheRulesAndNeverThrows(@ForAll("traceparents") String v) {
    Traceparent tp = new Traceparent();
    boolean ok = tp.parse(v);
    assertEquals(validTraceparent(v), ok, v);
    if (ok) {
      assertEquals(Hex.parseLong(v, 3, 16), tp.traceIdHigh, v);
      assertEquals(Hex.parseLong(v, 19, 16), tp.traceIdLow, v);
      assertEquals(Hex.parseLong(v, 36, 16), tp.spanId, v);
    }
  }

  /**
   * Traceparent.parseSpanContext parses the value as it is and trims only when that fails: the
   * same answer as parsing the trimmed value, whatever spaces and tabs surround it, for version 00
   * and for a later version with a suffix.
   */
  @Property(tries = 3000)
  void aTraceparentParsesAsItsTrimmedValue(@ForAll("paddedTraceparents") String v) {
    int a = 0;
    int b = v.length();
    while (a < b && (v.charAt(a) == ' ' || v.charAt(a) == '\t')) {
      a++;
    }
    while (b > a && (v.charAt(b - 1) == ' ' || v.charAt(b - 1) == '\t')) {
      b--;
    }
    Traceparent want = new Traceparent();
    boolean ok = want.parse(v.substring(a, b));
    WeftSpanContext got = Traceparent.parseSpanContext(v);
    assertEquals(ok, got != null, v);
    if (ok) {
      assertEquals(want.traceIdHigh, got.traceIdHigh(), v);
      assertEquals(want.traceIdLow, got.traceIdLow(), v);
      assertEquals(want.spanId, got.spanIdLong(), v);
      assertEquals(want.flags, got.flags(), v);
    }
  }

  @Provide
  Arbitrary<String> paddedTraceparents() {
    Arbitrary<String> ows = Arbitraries.of("", "", " ", "\t", "  ", " \t ");
    Arbitrary<String> value = Arbitraries.oneOf(
        mutated("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        mutated("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-what \tnext"));
    return Combinators.combine(ows, value, ows).as((x, y, z) -> x + y + z);
  }

  @Property(tries = 2000)
  void xrayHeaderParsingNeverThrowsAndTheFixedOffsetsAgreeWithTheScan(
      @ForAll("xrayHeaders") String v) {
    WeftSpanContext fast = XrayPropagator.parse(v);
    WeftSpanContext scanned = XrayPropagator.parse(" " + v); // 75+ characters: always scanned
    assertEquals(scanned == null, fast == null, v);
    if (fast != null) {
      assertEquals(scanned.getTraceId(), fast.getTraceId(), v);
      assertEquals(scanned.getSpanId(), fast.getSpanId(), v);
      assertEquals(scanned.isSampled(), fast.isSampled(), v);
    }
    int root = v.indexOf("Root=");
    if (root >= 0) {
      new XrayTraceId().parse(v, root + 5, Math.min(v.length(), root + 40));
    }
  }

  @Provide
  Arbitrary<String> tokens() {
    return Arbitraries.strings().withChars("abcxyzABZ019!#$&'*+-.^_`|~").ofMinLength(1)
        .ofMaxLength(12);
  }

  @Property(tries = 300)
  void baggageRoundTrips(@ForAll("tokens") String key, @ForAll @StringLength(max = 40) String value) {
    if (value.chars().anyMatch(ch -> Character.isSurrogate((char) ch))) {
      return; // lone surrogates are not UTF-8 encodable
    }
    Baggage b = WeftBaggage.builder().put(key, value, BaggageEntryMetadata.empty()).build();
    TestCarrier c = new TestCarrier();
    W3CBaggagePropagator.getInstance().inject(Context.root().with(b), c, TestCarrier.SETTER);
    TestCarrier in = new TestCarrier();
    c.injected.forEach(in::add);
    Baggage got = Baggage.fromContext(W3CBaggagePropagator.getInstance().extract(Context.root(),
        in, TestCarrier.GETTER));
    assertEquals(value, got.getEntryValue(key));
  }

  @Property(tries = 300)
  void tracestateCanonicalFormRoundTrips(
      @ForAll @Size(max = 40) List<@StringLength(min = 1, max = 8) String> keys) {
    StringBuilder sb = new StringBuilder();
    for (String k : keys) {
      String key = k.toLowerCase().replaceAll("[^a-z0-9_*/@-]", "a");
      if (!Character.isLetterOrDigit(key.charAt(0))) {
        key = "k" + key;
      }
      if (sb.length() > 0) {
        sb.append(',');
      }
      sb.append(key).append('=').append("v").append(key.length());
    }
    WeftTraceState ts = WeftTraceState.parse(sb.toString());
    if (keys.size() > 32 || keys.isEmpty()) {
      assertTrue(ts.isEmpty());
      return;
    }
    assertEquals(ts.toString(), WeftTraceState.parse(ts.toString()).toString());
    assertTrue(ts.size() <= keys.size());
    assertTrue(ts.toHeader().length() <= 512);
  }

  @Property(tries = 1000)
  void noHeaderMakesAPropagatorThrow(@ForAll("headerValues") String v1,
      @ForAll("headerValues") String v2, @ForAll("headerValues") String v3) {
    for (String h : HEADERS) {
      TestCarrier c = new TestCarrier().add(h, v1).add(h, v2).add("traceparent", v3)
          .add("b3", v2).add("x-amzn-trace-id", v3).add("uber-trace-id", v1);
      for (TextMapPropagator p : ALL) {
        Context ctx = p.extract(Context.root(), c, TestCarrier.GETTER);
        TestCarrier out = new TestCarrier();
        p.inject(ctx, out, TestCarrier.SETTER);
      }
    }
  }

  @Property(tries = 500)
  void decodersOfOutsideInputNeverThrowUnexpectedly(@ForAll byte[] bytes, @ForAll String text) {
    OtlpRetry.decodeResponse(bytes);
    OtlpRetry.parseRetryAfter(text, 0);
    JaegerRemoteSampler.Strategy.parse(text, 10);
    try {
      Json.parse(text);
    } catch (IllegalArgumentException expected) {
      // invalid JSON is reported as IllegalArgumentException, nothing else
    }
    WeftTraceState.parse(text);
    XrayPropagator.parse(text);
    JaegerPropagator.parse(text);
    new Traceparent().parse(text);
  }

  @Property(tries = 100)
  void otlpEncodingDecodesWithTheOfficialClasses(@ForAll("contexts") WeftSpanContext sc,
      @ForAll @StringLength(max = 30) String name, @ForAll long attr, @ForAll double d,
      @ForAll @StringLength(max = 30) String s) throws Exception {
    if (name.chars().anyMatch(ch -> Character.isSurrogate((char) ch)) || s.chars().anyMatch(ch -> Character.isSurrogate((char) ch))) {
      return;
    }
    VectorSpan span = new VectorSpan();
    span.context = sc;
    span.name = name;
    span.kind = SpanKind.CLIENT;
    span.start = 5;
    span.end = 7;
    span.attributes = new AttributeList();
    span.attributes.putLong("l", attr);
    span.attributes.putDouble("d", d);
    span.attributes.putString("s", s);
    span.scope = new InstrumentationScope("x", null, null, null);
    byte[] bytes = new OtlpEncoder().encode(Resource.create("p"), List.of(span)).toByteArray();
    ExportTraceServiceRequest r = ExportTraceServiceRequest.parseFrom(bytes);
    io.opentelemetry.proto.trace.v1.Span got = r.getResourceSpans(0).getScopeSpans(0).getSpans(0);
    assertEquals(sc.getTraceId(), Hex.of(got.getTraceId().toByteArray()));
    assertEquals(sc.getSpanId(), Hex.of(got.getSpanId().toByteArray()));
    assertEquals(name, got.getName());
    assertEquals(attr, got.getAttributes(0).getValue().getIntValue());
    assertEquals(Double.doubleToRawLongBits(d),
        Double.doubleToRawLongBits(got.getAttributes(1).getValue().getDoubleValue()));
    assertEquals(s, got.getAttributes(2).getValue().getStringValue());
    assertEquals(r.toByteArray().length, bytes.length, "canonical: re-serialises to the same size");
  }
}
