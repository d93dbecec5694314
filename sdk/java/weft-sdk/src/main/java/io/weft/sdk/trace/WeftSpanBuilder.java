package io.weft.sdk.trace;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanBuilder;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.context.Context;
import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.id.WallClock;
import io.weft.sdk.id.WyRand;
import io.weft.sdk.sampling.SamplingDecision;
import io.weft.sdk.sampling.SamplingResult;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Builds one span. Creation follows the OpenTelemetry order: trace ID (new, or the parent's),
 * then the sampler, then the span ID (spec/ids.md "Generation").
 */
final class WeftSpanBuilder extends IdGenerator.TraceId implements SpanBuilder {
  private final TracerSharedState shared;
  private final InstrumentationScope scope;
  private final String name;
  private Context parent;
  private boolean noParent;
  private SpanKind kind = SpanKind.INTERNAL;
  private AttributeList attributes;
  private List<SpanLink> links;
  private int droppedLinks;
  private long startEpochNanos = Long.MIN_VALUE;

  WeftSpanBuilder(TracerSharedState shared, InstrumentationScope scope, String name) {
    this.shared = shared;
    this.scope = scope;
    this.name = name == null || name.isEmpty() ? "<unspecified span name>" : name;
  }

  @Override
  public SpanBuilder setParent(Context context) {
    if (context != null) {
      this.parent = context;
      this.noParent = false;
    }
    return this;
  }

  @Override
  public SpanBuilder setNoParent() {
    this.noParent = true;
    this.parent = null;
    return this;
  }

  @Override
  public SpanBuilder addLink(SpanContext spanContext) {
    return addLink(spanContext, Attributes.empty());
  }

  @Override
  public SpanBuilder addLink(SpanContext spanContext, Attributes attributes) {
    if (spanContext == null || !spanContext.isValid()) {
      return this;
    }
    if (links == null) {
      links = new ArrayList<>(2);
    }
    if (links.size() >= shared.limits.maxLinks) {
      droppedLinks++;
    } else {
      links.add(new SpanLink(WeftSpanContext.of(spanContext),
          AttributeList.of(attributes, shared.limits.maxAttributesPerLink,
              shared.limits.maxAttributeValueLength)));
    }
    return this;
  }

  private AttributeList attrs() {
    if (attributes == null) {
      attributes =
          new AttributeList(shared.limits.maxAttributes, shared.limits.maxAttributeValueLength);
    }
    return attributes;
  }

  @Override
  public SpanBuilder setAttribute(String key, String value) {
    attrs().putString(key, value);
    return this;
  }

  @Override
  public SpanBuilder setAttribute(String key, long value) {
    attrs().putLong(key, value);
    return this;
  }

  @Override
  public SpanBuilder setAttribute(String key, double value) {
    attrs().putDouble(key, value);
    return this;
  }

  @Override
  public SpanBuilder setAttribute(String key, boolean value) {
    attrs().putBoolean(key, value);
    return this;
  }

  @Override
  public <T> SpanBuilder setAttribute(AttributeKey<T> key, T value) {
    attrs().putKey(key, value);
    return this;
  }

  @Override
  public SpanBuilder setSpanKind(SpanKind spanKind) {
    if (spanKind != null) {
      this.kind = spanKind;
    }
    return this;
  }

  @Override
  public SpanBuilder setStartTimestamp(long startTimestamp, TimeUnit unit) {
    if (startTimestamp >= 0 && unit != null) {
      this.startEpochNanos = unit.toNanos(startTimestamp);
    }
    return this;
  }

  /** The parent span context: explicit, none, or the current context's. */
  private WeftSpanContext parentSpanContext() {
    Context parentContext = noParent ? Context.root()
        : parent != null ? parent : Context.current();
    Span parentSpan = Span.fromContextOrNull(parentContext);
    return parentSpan == null ? WeftSpanContext.INVALID
        : WeftSpanContext.of(parentSpan.getSpanContext());
  }

  // startSpan is kept small, with the recording path in its own method, so that the JIT inlines it
  // into the caller; then escape analysis removes the builder, the span context and the
  // non-recording span of an unsampled span that does not leave the caller (span_unsampled
  // benchmark: 0 B/op). The builder is also the trace-ID holder, for the same reason.
  @Override
  public Span startSpan() {
    WeftSpanContext p = parentSpanContext();
    WyRand rng = WyRand.current();
    IdGenerator ids = shared.idGenerator;
    if (p.isValid()) {
      high = p.traceIdHigh();
      low = p.traceIdLow();
    } else {
      ids.nextTraceId(rng, this);
    }
    SamplingResult r = shared.sampler.shouldSample(p, high, low, name, kind);
    long spanId = ids.nextSpanId(rng);
    SamplingDecision d = r.decision();
    WeftSpanContext sc = WeftSpanContext.create(high, low, spanId,
        Flags.child(p.isValid() ? p.flags() : -1, d == SamplingDecision.RECORD_AND_SAMPLE),
        r.traceState(p.weftTraceState()));
    if (d == SamplingDecision.DROP || shared.shutdown) {
      return new NonRecordingSpan(sc);
    }
    return recording(sc, p);
  }

  private Span recording(WeftSpanContext sc, WeftSpanContext p) {
    long mono;
    long start;
    if (startEpochNanos == Long.MIN_VALUE) {
      mono = System.nanoTime();
      start = WallClock.epochNanosAt(mono);
    } else {
      mono = RecordingSpan.noMono();
      start = startEpochNanos;
    }
    return new RecordingSpan(shared, scope, sc, p.isValid() ? p.spanIdLong() : 0,
        p.isValid() && p.isRemote(), name, kind, start, mono, attributes,
        links == null ? Collections.emptyList() : links, droppedLinks);
  }
}
