package io.weft.sdk.export;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.Tracer;
import io.weft.sdk.sampling.Sampler;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.SpanLimits;
import io.weft.sdk.trace.SpanRecord;
import io.weft.sdk.trace.WeftTracerProvider;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** Export lanes (ExportPipeline "Design constraints"): rings one thread leases and offers to alone. */
class LaneTest {
  /** An exporter that adds the name of each span it is given to {@code names}, and recycles. */
  static SpanExporter collecting(Collection<String> names) {
    return new SpanExporter() {
      @Override
      public void export(Resource resource, List<? extends ReadableSpan> batch,
          ExportStats stats) {
        for (ReadableSpan s : batch) {
          names.add(s.name());
        }
        stats.exported.add(batch.size());
      }

      @Override
      public boolean retainsSpans() {
        return false;
      }
    };
  }

  /** The ring's next span, or null. */
  static SpanRecord poll(ExportPipeline.Ring ring) {
    List<SpanRecord> out = new ArrayList<>();
    return ring.drainTo(out, new int[1], 0, 1, 0) == 1 ? out.get(0) : null;
  }

  @Test
  void aDrainTakesARunInOrderAndCanLeaveTheNewestSpans() {
    ExportPipeline.Ring ring = new ExportPipeline.Ring(8);
    List<SpanRecord> offered = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      SpanRecord r = rec();
      offered.add(r);
      assertEquals(i, ring.offer(r));
    }
    List<SpanRecord> out = new ArrayList<>();
    int[] from = new int[8];
    assertEquals(4, ring.drainTo(out, from, 3, 8, 2), "the newest two stay");
    assertEquals(offered.subList(0, 4), out);
    assertEquals(3, from[0]);
    assertEquals(3, from[3]);
    assertEquals(0, ring.drainTo(out, from, 3, 8, 2), "nothing beyond what it keeps");
    assertEquals(1, ring.drainTo(out, from, 3, 1, 0), "at most max");
    assertEquals(1, ring.drainTo(out, from, 3, 8, 0));
    assertEquals(offered, out);
    assertEquals(0, ring.size());
    assertEquals(6, ring.offer(rec()), "the freed slots are offered again");
  }

  static SpanRecord rec() {
    return new SpanRecord(new SpanLimits(8, 100, 8, 8, 8, 8));
  }

  @Test
  void aLeasedRingRefusesOtherProducersAndFreesOnlyAfterItsOwnerDied() throws Exception {
    ExportPipeline.Ring ring = new ExportPipeline.Ring(4);
    SpanRecord a = rec();
    assertEquals(0, ring.offer(a), "not leased: any thread offers");
    AtomicReference<Boolean> leased = new AtomicReference<>();
    Thread owner = new Thread(() -> {
      leased.set(ring.lease(Thread.currentThread()));
      ring.offerOwned(rec());
      ring.offerOwned(rec());
    });
    owner.start();
    owner.join();
    assertTrue(leased.get());
    assertFalse(ring.lease(Thread.currentThread()), "one lessee at a time");
    assertEquals(-1, ring.offer(rec()), "a leased ring refuses offers from other threads");
    assertEquals(3, ring.size());
    ring.freeIfOwnerDead();
    assertSame(owner, ring.owner(), "not freed while the dead owner's spans are queued");
    assertSame(a, poll(ring));
    assertTrue(poll(ring) != null && poll(ring) != null);
    assertNull(poll(ring));
    ring.freeIfOwnerDead();
    assertNull(ring.owner());
    assertEquals(3, ring.offer(rec()), "freed: the sequence continues for every producer");
    assertTrue(ring.lease(Thread.currentThread()));
  }

  @Test
  void theLesseesOfferStopsWhenFull() {
    ExportPipeline.Ring ring = new ExportPipeline.Ring(2);
    assertTrue(ring.lease(Thread.currentThread()));
    assertEquals(0, ring.offerOwned(rec()));
    assertEquals(1, ring.offerOwned(rec()));
    assertEquals(-1, ring.offerOwned(rec()));
    poll(ring);
    assertEquals(2, ring.offerOwned(rec()));
  }

  @Test
  void aSingleConsumerPoolHandsOutWhatWasOffered() {
    RecordPool pool = new RecordPool(2);
    assertNull(pool.pollSingle());
    SpanRecord a = rec();
    SpanRecord b = rec();
    assertTrue(pool.offer(a));
    assertTrue(pool.offer(b));
    assertFalse(pool.offer(rec()), "full");
    assertSame(a, pool.pollSingle());
    assertTrue(pool.offer(a));
    assertSame(b, pool.pollSingle());
    assertSame(a, pool.pollSingle());
    assertNull(pool.pollSingle());
  }

  /**
   * A drain leaves the newest spans of each ring to their producer unless it must take all; a
   * thread that ends a few spans and goes quiet while another keeps full batches going out (so
   * the schedule delay never passes between exports) still has its spans exported within a few
   * delays. Before, they waited until the load stopped.
   */
  @Test
  void spansLeftInAQuietRingGoOutWithinTheDelayUnderLoad() throws Exception {
    Set<String> exported = Collections.synchronizedSet(new HashSet<>());
    SpanExporter exporter = collecting(exported);
    WeftTracerProvider provider = WeftTracerProvider.builder().setSampler(Sampler.alwaysOn())
        .setExporter(exporter)
        .setBatchConfig(new ExportPipeline.Config().setMaxQueueSize(1 << 16)
            .setMaxExportBatchSize(512).setScheduleDelay(Duration.ofMillis(200)))
        .build();
    AtomicBoolean stop = new AtomicBoolean();
    try {
      Tracer t = provider.get("t");
      Thread busy = new Thread(() -> {
        while (!stop.get()) {
          t.spanBuilder("load").startSpan().end();
        }
      });
      busy.start();
      Thread quiet = new Thread(() -> {
        for (int i = 0; i < 5; i++) {
          t.spanBuilder("quiet-" + i).startSpan().end();
        }
      });
      quiet.start();
      quiet.join();
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      while (System.nanoTime() < deadline && exported.stream().filter(n -> n.startsWith("quiet")).count() < 5) {
        Thread.sleep(20);
      }
      assertTrue(busy.isAlive(), "the load ran throughout");
      stop.set(true);
      busy.join();
      assertEquals(5, exported.stream().filter(n -> n.startsWith("quiet")).count(),
          "the quiet thread's spans were exported while the load went on");
    } finally {
      stop.set(true);
      provider.shutdown(Duration.ofSeconds(10));
    }
  }

  /**
   * More threads than lanes, spans ended on the thread that started them and on another one, and
   * threads that die so that their lanes go to new threads: every span is exported exactly once.
   */
  @Test
  void everySpanIsExportedOnceWhateverThreadEndsIt() throws Exception {
    List<String> names = Collections.synchronizedList(new ArrayList<>());
    SpanExporter exporter = collecting(names);
    WeftTracerProvider provider = WeftTracerProvider.builder().setSampler(Sampler.alwaysOn())
        .setExporter(exporter)
        .setBatchConfig(new ExportPipeline.Config().setMaxQueueSize(1 << 16)
            .setMaxExportBatchSize(64).setScheduleDelay(Duration.ofMillis(1)))
        .build();
    try {
      Tracer t = provider.get("t");
      BlockingQueue<Span> handoff = new ArrayBlockingQueue<>(1 << 16);
      int perThread = 2000;
      int waves = 3;
      int threads = 6; // more than the lanes of any machine with fewer than 6 cores
      for (int w = 0; w < waves; w++) {
        Thread[] ts = new Thread[threads];
        for (int k = 0; k < threads; k++) {
          String prefix = w + "-" + k + "-";
          ts[k] = new Thread(() -> {
            for (int i = 0; i < perThread; i++) {
              Span s = t.spanBuilder(prefix + i).startSpan();
              s.setAttribute("i", (long) i);
              if (i % 3 == 0) {
                handoff.add(s); // ended by the next thread that drains the hand-off
              } else {
                s.end();
              }
              Span other = handoff.poll();
              if (other != null) {
                other.end();
              }
            }
          });
          ts[k].start();
        }
        for (Thread th : ts) {
          th.join(); // the wave's threads die; the next wave leases their lanes again
        }
      }
      for (Span s; (s = handoff.poll()) != null; ) {
        s.end();
      }
      assertTrue(provider.forceFlush(Duration.ofSeconds(10)));
      assertEquals(0, provider.stats().droppedQueueFull.sum());
      Set<String> unique = new HashSet<>(names);
      assertEquals(names.size(), unique.size(), "no span exported twice");
      assertEquals(waves * threads * perThread, unique.size());
    } finally {
      provider.shutdown(Duration.ofSeconds(5));
    }
  }
}
