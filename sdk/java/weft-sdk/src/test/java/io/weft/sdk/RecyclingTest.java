package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.weft.sdk.export.ExportStats;
import io.weft.sdk.export.SpanExporter;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.SpanLimits;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import io.weft.sdk.trace.WeftTracerProvider;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Span records are reused once exported (SpanRecord "Recycling"): an ended span the application
 * still holds must never see or change the record its successor now owns.
 */
class RecyclingTest {
  /** Copies what it checks while exporting, as OTLP encoding does, and lets records be reused. */
  static final class Copying implements SpanExporter {
    final List<String> spans = Collections.synchronizedList(new ArrayList<>());
    final Map<Object, Boolean> seen = Collections.synchronizedMap(new IdentityHashMap<>());
    volatile int reused;

    @Override
    public void export(Resource resource, List<? extends ReadableSpan> batch, ExportStats stats) {
      for (ReadableSpan s : batch) {
        if (seen.put(s, true) != null) {
          reused++;
        }
        spans.add(s.name() + " " + s.attributes() + " dropped=" + dropped(s) + " events="
            + s.eventCount() + "/" + s.droppedEvents() + " links=" + s.linkCount() + "/"
            + s.droppedLinks() + " " + s.statusCode());
      }
      stats.exported.add(batch.size());
    }

    static int dropped(ReadableSpan s) {
      return s.attributes() == null ? 0 : s.attributes().dropped();
    }

    @Override
    public boolean retainsSpans() {
      return false;
    }
  }

  WeftTracerProvider provider;

  @AfterEach
  void close() {
    if (provider != null) {
      provider.shutdown(Duration.ofSeconds(5));
    }
  }

  static final SpanContext LINK =
      WeftSpanContext.create(1, 2, 3, (byte) 1, WeftTraceState.EMPTY);

  @Test
  void anEndedSpanCannotCorruptTheSpanThatReusesItsRecord() {
    Copying exporter = new Copying();
    provider = WeftTracerProvider.builder().setSampler(Sampler.alwaysOn())
        .setSpanLimits(new SpanLimits(2, 100, 1, 1, 1, 1)).setExporter(exporter).build();
    Tracer t = provider.get("t");

    Span a = t.spanBuilder("a").setAttribute("k", "a").startSpan();
    a.setAttribute("k2", 2L).setAttribute("k3", 3L); // over the limit: dropped=1
    a.addEvent("e1", Attributes.of(AttributeKey.longKey("x"), 1L, AttributeKey.longKey("y"), 2L));
    a.addEvent("e2");
    a.addLink(LINK).addLink(LINK);
    a.setStatus(StatusCode.ERROR, "a failed");
    SpanContext ac = a.getSpanContext();
    a.end();
    assertTrue(provider.forceFlush(Duration.ofSeconds(5)));
    assertEquals("a {k=a, k2=2} dropped=1 events=1/1 links=1/1 ERROR", exporter.spans.get(0));

    // One thread: the next span takes the record a used.
    Span b = t.spanBuilder("b").startSpan();
    b.setAttribute("k", "b");
    // Every mutator of the ended span a: none may reach b's record.
    a.setAttribute("k", "corrupt").setAttribute("late", 1L).setAttribute("d", 1.5)
        .setAttribute("f", true).setAttribute(AttributeKey.stringKey("g"), "x");
    a.setAllAttributes(Attributes.of(AttributeKey.stringKey("h"), "x"));
    a.addEvent("corrupt").addLink(LINK).updateName("corrupt").setStatus(StatusCode.OK);
    a.recordException(new RuntimeException("corrupt"));
    a.end();
    assertFalse(a.isRecording());
    assertEquals(ac, a.getSpanContext(), "an ended span keeps its context");
    b.end();
    assertTrue(provider.forceFlush(Duration.ofSeconds(5)));

    assertTrue(exporter.reused > 0, "the second span reused the first one's record");
    assertEquals(2, exporter.spans.size(), "a's second end() exports nothing");
    assertEquals("b {k=b} dropped=0 events=0/0 links=0/0 UNSET", exporter.spans.get(1),
        "a recycled record starts empty, limits and drop counts included");
  }

  /** Every exported span carries exactly what its own thread set, while records cycle. */
  @Test
  void recycledRecordsStayConsistentUnderConcurrentSpans() throws Exception {
    List<String> bad = Collections.synchronizedList(new ArrayList<>());
    java.util.concurrent.atomic.AtomicLong exported = new java.util.concurrent.atomic.AtomicLong();
    SpanExporter checking = new SpanExporter() {
      @Override
      public void export(Resource resource, List<? extends ReadableSpan> batch,
          ExportStats stats) {
        for (ReadableSpan s : batch) {
          Object id = s.attributes() == null ? null : s.attributes().get("id");
          if (!s.name().equals(id) || s.attributes().size() != 3 || s.eventCount() != 1
              || !s.eventName(0).equals(s.name())) {
            bad.add(s.name() + " " + s.attributes());
          }
        }
        exported.addAndGet(batch.size());
        stats.exported.add(batch.size());
      }

      @Override
      public boolean retainsSpans() {
        return false;
      }
    };
    provider = WeftTracerProvider.builder().setSampler(Sampler.alwaysOn()).setExporter(checking)
        .setBatchConfig(new io.weft.sdk.export.ExportPipeline.Config().setMaxQueueSize(256)
            .setMaxExportBatchSize(32).setScheduleDelay(Duration.ofMillis(1)))
        .build();
    Tracer t = provider.get("t");
    int threads = 4;
    int perThread = 3000;
    Thread[] ts = new Thread[threads];
    for (int k = 0; k < threads; k++) {
      int base = k * perThread;
      ts[k] = new Thread(() -> {
        for (int i = 0; i < perThread; i++) {
          String name = "s" + (base + i);
          Span s = t.spanBuilder(name).setAttribute("id", name).startSpan();
          s.setAttribute("n", (long) i).setAttribute("t", "x");
          s.addEvent(name);
          s.end();
        }
      });
      ts[k].start();
    }
    for (Thread th : ts) {
      th.join();
    }
    assertTrue(provider.forceFlush(Duration.ofSeconds(10)));
    assertEquals(List.of(), bad);
    assertEquals(threads * perThread, exported.get() + provider.stats().droppedQueueFull.sum());
  }

  @Test
  void spansAreNotReusedWhileTheExporterKeepsThem() {
    TracerTest.Collecting exporter = new TracerTest.Collecting();
    provider = WeftTracerProvider.builder().setSampler(Sampler.alwaysOn()).setExporter(exporter)
        .build();
    Tracer t = provider.get("t");
    for (int i = 0; i < 100; i++) {
      t.spanBuilder("s" + i).setAttribute("i", (long) i).startSpan().end();
      if (i % 10 == 9) {
        provider.forceFlush(Duration.ofSeconds(5));
      }
    }
    assertEquals(100, exporter.spans.size());
    for (int i = 0; i < 100; i++) {
      ReadableSpan s = exporter.spans.get(i);
      assertEquals("s" + i, s.name());
      assertEquals((long) i, s.attributes().get("i"));
      assertNull(s.attributes().get("corrupt"));
    }
  }
}
