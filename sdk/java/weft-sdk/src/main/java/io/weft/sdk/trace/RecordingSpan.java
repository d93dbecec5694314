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
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A recording span. It is also the record the exporter encodes: ending it hands this object to
 * the export queue without copying.
 *
 * <p>Mutators synchronise on the span (the API requires thread safety); an uncontended monitor is
 * one CAS, cheaper than the copy-on-write or lock objects the alternatives need. Once ended, the
 * span ignores mutations, so the exporter reads it without a lock (the queue hand-off orders the
 * writes before the reads).
 */
public final class RecordingSpan implements Span, ReadableSpan {
  private static final long NO_MONO = Long.MIN_VALUE;

  private final TracerSharedState shared;
  private final InstrumentationScope scope;
  private final WeftSpanContext context;
  private final long parentSpanId;
  private final boolean parentRemote;
  private final SpanKind kind;
  private final long startEpochNanos;
  private final long startMono;
  private final boolean sampled;
  private String name;
  private AttributeList attributes;
  private List<SpanEvent> events;
  private int droppedEvents;
  private List<SpanLink> links;
  private int droppedLinks;
  private StatusCode statusCode = StatusCode.UNSET;
  private String statusMessage = "";
  private long endEpochNanos;
  private boolean ended;

  RecordingSpan(TracerSharedState shared, InstrumentationScope scope, WeftSpanContext context,
      long parentSpanId, boolean parentRemote, String name, SpanKind kind, long startEpochNanos,
      long startMono, AttributeList attributes, List<SpanLink> links, int droppedLinks) {
    this.shared = shared;
    this.scope = scope;
    this.context = context;
    this.parentSpanId = parentSpanId;
    this.parentRemote = parentRemote;
    this.name = name;
    this.kind = kind;
    this.startEpochNanos = startEpochNanos;
    this.startMono = startMono;
    this.attributes = attributes;
    this.links = links;
    this.droppedLinks = droppedLinks;
    this.sampled = context.isSampled();
  }

  static long noMono() {
    return NO_MONO;
  }

  private AttributeList attrs() {
    AttributeList a = attributes;
    if (a == null) {
      a = new AttributeList(shared.limits.maxAttributes, shared.limits.maxAttributeValueLength);
      attributes = a;
    }
    return a;
  }

  @Override
  public Span setAttribute(String key, String value) {
    synchronized (this) {
      if (!ended) {
        attrs().putString(key, value);
      }
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, long value) {
    synchronized (this) {
      if (!ended) {
        attrs().putLong(key, value);
      }
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, double value) {
    synchronized (this) {
      if (!ended) {
        attrs().putDouble(key, value);
      }
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, boolean value) {
    synchronized (this) {
      if (!ended) {
        attrs().putBoolean(key, value);
      }
    }
    return this;
  }

  @Override
  public Span setAttribute(String key, Value<?> value) {
    synchronized (this) {
      if (!ended) {
        attrs().putValue(key, value);
      }
    }
    return this;
  }

  @Override
  public <T> Span setAttribute(AttributeKey<T> key, T value) {
    synchronized (this) {
      if (!ended) {
        attrs().putKey(key, value);
      }
    }
    return this;
  }

  @Override
  public Span setAllAttributes(Attributes attributes) {
    if (attributes == null || attributes.isEmpty()) {
      return this;
    }
    synchronized (this) {
      if (!ended) {
        AttributeList a = attrs();
        attributes.forEach(a::putAny);
      }
    }
    return this;
  }

  @Override
  public Span addEvent(String name) {
    return addEventAt(name, null, now());
  }

  @Override
  public Span addEvent(String name, Attributes attributes) {
    return addEventAt(name, attributes, now());
  }

  @Override
  public Span addEvent(String name, Attributes attributes, long timestamp, TimeUnit unit) {
    return addEventAt(name, attributes, unit.toNanos(timestamp));
  }

  @Override
  public Span addEvent(String name, long timestamp, TimeUnit unit) {
    return addEventAt(name, null, unit.toNanos(timestamp));
  }

  private long now() {
    return startMono == NO_MONO ? WallClock.nowNanos()
        : startEpochNanos + (System.nanoTime() - startMono);
  }

  private Span addEventAt(String name, Attributes attributes, long epochNanos) {
    if (name == null) {
      return this;
    }
    AttributeList a = AttributeList.of(attributes, shared.limits.maxAttributesPerEvent,
        shared.limits.maxAttributeValueLength);
    synchronized (this) {
      if (ended) {
        return this;
      }
      if (events == null) {
        events = new ArrayList<>(4);
      }
      if (events.size() >= shared.limits.maxEvents) {
        droppedEvents++;
      } else {
        events.add(new SpanEvent(name, epochNanos, a));
      }
    }
    return this;
  }

  @Override
  public Span setStatus(StatusCode code, String description) {
    if (code == null) {
      return this;
    }
    synchronized (this) {
      if (!ended && statusCode != StatusCode.OK) {
        statusCode = code;
        statusMessage = code == StatusCode.ERROR && description != null ? description : "";
      }
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
    synchronized (this) {
      if (!ended) {
        this.name = name;
      }
    }
    return this;
  }

  @Override
  public Span addLink(SpanContext spanContext, Attributes attributes) {
    if (spanContext == null || !spanContext.isValid()) {
      return this;
    }
    AttributeList a = AttributeList.of(attributes, shared.limits.maxAttributesPerLink,
        shared.limits.maxAttributeValueLength);
    synchronized (this) {
      if (ended) {
        return this;
      }
      if (links == null || links == Collections.<SpanLink>emptyList()) {
        links = new ArrayList<>(2);
      }
      if (links.size() >= shared.limits.maxLinks) {
        droppedLinks++;
      } else {
        links.add(new SpanLink(WeftSpanContext.of(spanContext), a));
      }
    }
    return this;
  }

  @Override
  public void end() {
    endAt(startMono == NO_MONO ? WallClock.nowNanos() : Long.MIN_VALUE);
  }

  @Override
  public void end(long timestamp, TimeUnit unit) {
    endAt(unit.toNanos(timestamp));
  }

  private void endAt(long epochNanos) {
    synchronized (this) {
      if (ended) {
        return;
      }
      // Durations come from the monotonic clock read at start, so that a wall-clock step
      // during the span never makes it end before it starts.
      endEpochNanos = epochNanos != Long.MIN_VALUE ? epochNanos
          : startEpochNanos + (System.nanoTime() - startMono);
      ended = true;
    }
    if (sampled) {
      shared.sink.onEnd(this);
    }
  }

  @Override
  public SpanContext getSpanContext() {
    return context;
  }

  @Override
  public boolean isRecording() {
    synchronized (this) {
      return !ended;
    }
  }

  @Override
  public WeftSpanContext spanContext() {
    return context;
  }

  @Override
  public long parentSpanId() {
    return parentSpanId;
  }

  @Override
  public boolean parentRemote() {
    return parentRemote;
  }

  @Override
  public synchronized String name() {
    return name;
  }

  @Override
  public SpanKind kind() {
    return kind;
  }

  @Override
  public long startEpochNanos() {
    return startEpochNanos;
  }

  @Override
  public synchronized long endEpochNanos() {
    return endEpochNanos;
  }

  /** Whether {@link #end()} was called. */
  public synchronized boolean hasEnded() {
    return ended;
  }

  @Override
  public AttributeList attributes() {
    return attributes;
  }

  @Override
  public List<SpanEvent> events() {
    return events == null ? Collections.emptyList() : events;
  }

  @Override
  public int droppedEvents() {
    return droppedEvents;
  }

  @Override
  public List<SpanLink> links() {
    return links == null ? Collections.emptyList() : links;
  }

  @Override
  public int droppedLinks() {
    return droppedLinks;
  }

  @Override
  public StatusCode statusCode() {
    return statusCode;
  }

  @Override
  public String statusMessage() {
    return statusMessage;
  }

  @Override
  public InstrumentationScope scope() {
    return scope;
  }

  @Override
  public String toString() {
    return "RecordingSpan{name=" + name + ", context=" + context + "}";
  }
}
