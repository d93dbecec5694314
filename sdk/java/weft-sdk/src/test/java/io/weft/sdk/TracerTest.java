package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import io.weft.sdk.export.SpanExporter;
import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.propagation.Traceparent;
import io.weft.sdk.propagation.W3CTraceContextPropagator;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.RecordingSpan;
import io.weft.sdk.trace.SpanLimits;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTracerProvider;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class TracerTest {
  /** Collects exported spans (the real pipeline feeds it). */
  static final class Collecting implements SpanExporter {
    final List<ReadableSpan> spans = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void export(io.weft.sdk.trace.Resource resource,
        List<? extends ReadableSpan> batch, io.weft.sdk.export.ExportStats stats) {
      spans.addAll(batch);
      stats.exported.add(batch.size());
    }
  }

  final Collecting exporter = new Collecting();
  WeftTracerProvider provider;

  WeftTracerProvider provider(Sampler sampler, SpanLimits limits) {
    provider = WeftTracerProvider.builder().setSampler(sampler).setSpanLimits(limits)
        .setExporter(exporter).build();
    return provider;
  }

  @AfterEach
  void close() {
    if (provider != null) {
      provider.shutdown(Duration.ofSeconds(5));
    }
  }

  @Test
  void rootSpanGetsRandomAndSampledFlagsAndChildInheritsTrace() {
    Tracer t = provider(Sampler.alwaysOn(), SpanLimits.DEFAULT).get("test");
    Span root = t.spanBuilder("root").startSpan();
    WeftSpanContext rc = (WeftSpanContext) root.getSpanContext();
    assertEquals(0x03, rc.flags());
    assertTrue(rc.isValid());
    assertFalse(rc.isRemote());
    Span child;
    try (Scope s = root.makeCurrent()) {
      child = t.spanBuilder("child").startSpan();
    }
    WeftSpanContext cc = (WeftSpanContext) child.getSpanContext();
    assertEquals(rc.getTraceId(), cc.getTraceId());
    assertNotEquals(rc.getSpanId(), cc.getSpanId());
    child.end();
    root.end();
    assertTrue(provider.forceFlush(Duration.ofSeconds(5)));
    assertEquals(2, exporter.spans.size());
    ReadableSpan c = exporter.spans.get(0);
    assertEquals("child", c.name());
    assertEquals(rc.spanIdLong(), c.parentSpanId());
    assertFalse(c.parentRemote());
    assertTrue(c.endEpochNanos() >= c.startEpochNanos());
    assertTrue(c.startEpochNanos() > 1_600_000_000_000_000_000L, "Unix nanoseconds");
  }

  @Test
  void remoteParentWithoutRandomFlagIsNotGivenOne() {
    Tracer t = provider(Sampler.parentBased(Sampler.alwaysOn()), SpanLimits.DEFAULT).get("t");
    Traceparent tp = new Traceparent();
    assertTrue(tp.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    Context parent = Context.root().with(Span.wrap(tp.toSpanContext(
        io.weft.sdk.trace.WeftTraceState.EMPTY)));
    Span s = t.spanBuilder("server").setParent(parent).setSpanKind(SpanKind.SERVER).startSpan();
    WeftSpanContext sc = (WeftSpanContext) s.getSpanContext();
    assertEquals(0x01, sc.flags());
    assertEquals("4bf92f3577b34da6a3ce929d0e0e4736", sc.getTraceId());
    s.end();
    provider.forceFlush(Duration.ofSeconds(5));
    assertTrue(exporter.spans.get(0).parentRemote());
  }

  @Test
  void unsampledSpanHasAContextButIsNotExported() {
    Tracer t = provider(Sampler.alwaysOff(), SpanLimits.DEFAULT).get("t");
    Span s = t.spanBuilder("x").startSpan();
    assertFalse(s.isRecording());
    assertTrue(s.getSpanContext().isValid());
    assertEquals(0x02, s.getSpanContext().getTraceFlags().asByte());
    s.setAttribute("k", "v").end();
    provider.forceFlush(Duration.ofSeconds(5));
    assertTrue(exporter.spans.isEmpty());
  }

  @Test
  void limitsDropAndCount() {
    SpanLimits limits = new SpanLimits(2, 3, 1, 1, 1, 1);
    Tracer t = provider(Sampler.alwaysOn(), limits).get("t");
    Span s = t.spanBuilder("x").startSpan();
    s.setAttribute("a", "abcdef").setAttribute("b", 1L).setAttribute("c", true)
        .setAttribute("a", "xy");
    s.addEvent("e1", Attributes.of(AttributeKey.stringKey("p"), "1",
        AttributeKey.stringKey("q"), "2"));
    s.addEvent("e2");
    s.addLink(WeftSpanContext.create(1, 2, 3, (byte) 1, io.weft.sdk.trace.WeftTraceState.EMPTY));
    s.addLink(WeftSpanContext.create(1, 2, 4, (byte) 1, io.weft.sdk.trace.WeftTraceState.EMPTY));
    s.setStatus(StatusCode.ERROR, "bad");
    s.end();
    s.setAttribute("late", 1L); // after end: ignored
    provider.forceFlush(Duration.ofSeconds(5));
    ReadableSpan r = exporter.spans.get(0);
    assertEquals(2, r.attributes().size());
    assertEquals("xy", r.attributes().get("a"), "repeated key: first position, last value");
    assertEquals(1L, r.attributes().get("b"));
    assertEquals(1, r.attributes().dropped());
    assertEquals(1, r.eventCount());
    assertEquals(1, r.droppedEvents());
    assertEquals(1, r.eventAttributes(0).size());
    assertEquals(1, r.eventAttributes(0).dropped());
    assertEquals(1, r.linkCount());
    assertEquals(1, r.droppedLinks());
    assertEquals(StatusCode.ERROR, r.statusCode());
    assertEquals("bad", r.statusMessage());
  }

  @Test
  void valueLengthLimitTruncates() {
    Tracer t = provider(Sampler.alwaysOn(), new SpanLimits(10, 3, 10, 10, 10, 10)).get("t");
    t.spanBuilder("x").setAttribute("s", "abcdef").startSpan().end();
    provider.forceFlush(Duration.ofSeconds(5));
    assertEquals("abc", exporter.spans.get(0).attributes().get("s"));
  }

  @Test
  void endTwiceExportsOnceAndExplicitTimestampsAreKept() {
    Tracer t = provider(Sampler.alwaysOn(), SpanLimits.DEFAULT).get("t");
    Span s = t.spanBuilder("x").setStartTimestamp(1_000, TimeUnit.SECONDS).startSpan();
    s.end(2_000, TimeUnit.SECONDS);
    s.end();
    provider.forceFlush(Duration.ofSeconds(5));
    assertEquals(1, exporter.spans.size());
    assertEquals(1_000_000_000_000L, exporter.spans.get(0).startEpochNanos());
    assertEquals(2_000_000_000_000L, exporter.spans.get(0).endEpochNanos());
    assertFalse(((RecordingSpan) s).isRecording());
  }

  /** spec/propagation.md "Outgoing requests": one client span, one parent-id per request. */
  @Test
  void eachOutgoingRequestCarriesItsOwnParentId() {
    Tracer t = provider(Sampler.parentBased(Sampler.alwaysOn()), SpanLimits.DEFAULT).get("t");
    for (String incoming : new String[] {
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", null, "00-zz"}) {
      TestCarrier in = new TestCarrier();
      if (incoming != null) {
        in.add("traceparent", incoming);
      }
      Context extracted = W3CTraceContextPropagator.getInstance().extract(Context.root(), in,
          TestCarrier.GETTER);
      Span server = t.spanBuilder("server").setParent(extracted).setSpanKind(SpanKind.SERVER)
          .startSpan();
      Set<String> parents = new HashSet<>();
      Set<String> traces = new HashSet<>();
      try (Scope s = server.makeCurrent()) {
        for (int i = 0; i < 3; i++) {
          Span client = t.spanBuilder("call").setSpanKind(SpanKind.CLIENT).startSpan();
          TestCarrier out = new TestCarrier();
          W3CTraceContextPropagator.getInstance().inject(Context.current().with(client), out,
              TestCarrier.SETTER);
          String tp = out.injected.get("traceparent");
          assertNotNull(tp);
          traces.add(tp.substring(3, 35));
          parents.add(tp.substring(36, 52));
          client.end();
        }
      }
      server.end();
      assertEquals(1, traces.size(), "one trace per incoming request");
      assertEquals(3, parents.size(), "every outgoing request has its own parent-id");
      if (incoming != null && incoming.length() == 55) {
        assertEquals("4bf92f3577b34da6a3ce929d0e0e4736", traces.iterator().next());
      }
    }
  }

  @Test
  void xrayGeneratorPutsEpochSecondsFirst() {
    provider = WeftTracerProvider.builder().setIdGenerator(IdGenerator.xray())
        .setExporter(exporter).build();
    long before = System.currentTimeMillis() / 1000;
    Span s = provider.get("t").spanBuilder("x").startSpan();
    long secs = ((WeftSpanContext) s.getSpanContext()).traceIdHigh() >>> 32;
    assertTrue(secs >= before && secs <= before + 2, "epoch seconds " + secs);
    s.end();
  }

  @Test
  void hexIsBuiltOnceAndCached() {
    WeftSpanContext c = WeftSpanContext.create(1, 2, 3, (byte) 1,
        io.weft.sdk.trace.WeftTraceState.EMPTY);
    String a = c.getTraceId();
    assertSame(a, c.getTraceId());
    assertSame(c.getSpanId(), c.getSpanId());
    assertEquals("00000000000000010000000000000002", a);
  }

  @Test
  void concurrentSpansAreAllExported() throws Exception {
    Tracer t = provider(Sampler.alwaysOn(), SpanLimits.DEFAULT).get("t");
    int threads = 4;
    int per = 400;
    List<Thread> ts = new ArrayList<>();
    for (int i = 0; i < threads; i++) {
      Thread th = new Thread(() -> {
        for (int j = 0; j < per; j++) {
          t.spanBuilder("s").startSpan().setAttribute("j", (long) j).end();
          if (j % 100 == 0) {
            provider.forceFlush(Duration.ofSeconds(5));
          }
        }
      });
      th.start();
      ts.add(th);
    }
    for (Thread th : ts) {
      th.join();
    }
    assertTrue(provider.forceFlush(Duration.ofSeconds(10)));
    assertEquals(threads * per, exporter.spans.size() + provider.stats().droppedQueueFull.sum());
    assertEquals(threads * per, provider.stats().exported.sum()
        + provider.stats().droppedQueueFull.sum());
  }
}
