package io.weft.sdk.trace;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.Value;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.weft.sdk.id.WallClock;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.TimeUnit;

/**
 * A recording span: the span's IDs, and the {@link SpanRecord} holding what it records until it
 * ends. This object is the one allocation of a sampled span in steady state (the record comes
 * from the export pipeline's pool).
 *
 * <p>Mutators take the span's lock (the API requires thread safety) and write into the record.
 * {@link #end()} detaches the record under the lock and hands it to the export queue; from then on
 * the span never touches the record again, so an ended span the application still holds keeps
 * answering {@link #getSpanContext()} and ignores mutations, whatever the pipeline does with the
 * record (see {@link SpanRecord} "Recycling").
 */
public final class RecordingSpan implements Span {
  private static final long NO_MONO = Long.MIN_VALUE;
  private static final VarHandle LOCK;

  static {
    try {
      LOCK = MethodHandles.lookup().findVarHandle(RecordingSpan.class, "lock", int.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  private final SpanSink sink;
  private final long traceIdHigh;
  private final long traceIdLow;
  private final long spanId;
  private final byte flags;
  private final WeftTraceState traceState;
  // Built on first getSpanContext() (children, propagation), not per span: a racy single-check
  // cache of an object with final fields, so any thread sees a complete one.
  private WeftSpanContext context;
  private SpanRecord rec; // null once ended; guarded by lock
  private int lock; // 0 free, 1 held

  RecordingSpan(SpanSink sink, long traceIdHigh, long traceIdLow, long spanId, byte flags,
      WeftTraceState traceState, SpanRecord rec) {
    this.sink = sink;
    this.traceIdHigh = traceIdHigh;
    this.traceIdLow = traceIdLow;
    this.spanId = spanId;
    this.flags = flags;
    this.traceState = traceState;
    this.rec = rec;
  }

  static long noMono() {
    return NO_MONO;
  }

  // A one-CAS lock released with a plain release store, rather than a monitor (a CAS to enter and
  // another to exit): every setAttribute and end() takes it, and spans are almost never shared
  // between threads (span_sampled_10_attrs_1_event benchmark).
  private void lock() {
    if (!LOCK.compareAndSet(this, 0, 1)) {
      lockSlow();
    }
  }

  private void lockSlow() {
    for (int spins = 0; !LOCK.compareAndSet(this, 0, 1); spins++) {
      if (spins < 64) {
        Thread.onSpinWait();
      } else {
        Thread.yield();
      }
    }
  }

  private void unlock() {
    LOCK.setRelease(this, 0);
  }

  @Override
  public Span setAttribute(String key, String value) {
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putString(key, value);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, long value) {
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putLong(key, value);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, double value) {
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putDouble(key, value);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, boolean value) {
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putBoolean(key, value);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, Value<?> value) {
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putValue(key, value);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public <T> Span setAttribute(AttributeKey<T> key, T value) {
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putKey(key, value);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span setAllAttributes(Attributes attributes) {
    if (attributes == null || attributes.isEmpty()) {
      return this;
    }
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.attrs().putAll(attributes);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span addEvent(String name) {
    return addEventAt(name, null, Long.MIN_VALUE);
  }

  @Override
  public Span addEvent(String name, Attributes attributes) {
    return addEventAt(name, attributes, Long.MIN_VALUE);
  }

  @Override
  public Span addEvent(String name, Attributes attributes, long timestamp, TimeUnit unit) {
    return addEventAt(name, attributes, unit.toNanos(timestamp));
  }

  @Override
  public Span addEvent(String name, long timestamp, TimeUnit unit) {
    return addEventAt(name, null, unit.toNanos(timestamp));
  }

  /** Now, on the span's clock: the monotonic clock read at start, unless the start was given. */
  private static long now(SpanRecord r) {
    return r.startMono == NO_MONO ? WallClock.nowNanos()
        : r.startEpochNanos + (System.nanoTime() - r.startMono);
  }

  private Span addEventAt(String name, Attributes attributes, long epochNanos) {
    if (name == null) {
      return this;
    }
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.addEvent(name, attributes, epochNanos == Long.MIN_VALUE ? now(r) : epochNanos);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span setStatus(StatusCode code, String description) {
    if (code == null) {
      return this;
    }
    lock();
    try {
      SpanRecord r = rec;
      if (r != null && r.statusCode != StatusCode.OK) {
        r.statusCode = code;
        r.statusMessage = code == StatusCode.ERROR && description != null ? description : "";
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span recordException(Throwable exception, Attributes additional) {
    if (exception == null) {
      return this;
    }
    StringWriter sw = new StringWriter();
    exception.printStackTrace(new PrintWriter(sw));
    io.opentelemetry.api.common.AttributesBuilder b = Attributes.builder()
        .put("exception.type", exception.getClass().getName())
        .put("exception.stacktrace", sw.toString());
    if (exception.getMessage() != null) {
      b.put("exception.message", exception.getMessage());
    }
    if (additional != null) {
      b.putAll(additional);
    }
    return addEvent("exception", b.build());
  }

  @Override
  public Span updateName(String name) {
    if (name == null) {
      return this;
    }
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.name = name;
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public Span addLink(SpanContext spanContext, Attributes attributes) {
    if (spanContext == null || !spanContext.isValid()) {
      return this;
    }
    WeftSpanContext c = WeftSpanContext.of(spanContext);
    lock();
    try {
      SpanRecord r = rec;
      if (r != null) {
        r.addLink(c, attributes);
      }
    } finally {
      unlock();
    }
    return this;
  }

  @Override
  public void end() {
    endAt(Long.MIN_VALUE);
  }

  @Override
  public void end(long timestamp, TimeUnit unit) {
    endAt(unit.toNanos(timestamp));
  }

  private void endAt(long epochNanos) {
    SpanRecord r;
    lock();
    r = rec;
    rec = null;
    unlock();
    if (r == null) {
      return; // ended before
    }
    // Only this thread holds r now. Durations come from the monotonic clock read at start, so
    // that a wall-clock step during the span never makes it end before it starts.
    r.endEpochNanos = epochNanos != Long.MIN_VALUE ? epochNanos : now(r);
    if ((flags & WeftSpanContext.SAMPLED) != 0) {
      sink.onEnd(r);
    } else {
      sink.release(r);
    }
  }

  @Override
  public SpanContext getSpanContext() {
    return spanContext();
  }

  /** This span's context, built on first use. */
  public WeftSpanContext spanContext() {
    WeftSpanContext c = context;
    if (c == null) {
      c = WeftSpanContext.create(traceIdHigh, traceIdLow, spanId, flags, traceState);
      context = c;
    }
    return c;
  }

  @Override
  public boolean isRecording() {
    lock();
    boolean recording = rec != null;
    unlock();
    return recording;
  }

  /** Whether {@link #end()} was called. */
  public boolean hasEnded() {
    return !isRecording();
  }

  @Override
  public String toString() {
    return "RecordingSpan{context=" + spanContext() + "}";
  }
}
