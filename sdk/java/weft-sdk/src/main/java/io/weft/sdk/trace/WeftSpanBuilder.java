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
import io.weft.sdk.internal.PerThread;
import io.weft.sdk.sampling.SamplingDecision;
import io.weft.sdk.sampling.SamplingResult;
import java.util.concurrent.TimeUnit;

/**
 * Builds one span. Creation follows the OpenTelemetry order: trace ID (new, or the parent's),
 * then the sampler, then the span ID (spec/ids.md "Generation").
 */
final class WeftSpanBuilder implements SpanBuilder {
  private final TracerSharedState shared;
  private final InstrumentationScope scope;
  private final String name;
  private Context parent;
  private boolean noParent;
  private SpanKind kind = SpanKind.INTERNAL;
  // Attributes and links set before startSpan() go straight into the record the span will own.
  // They go to the first span this builder starts; a second startSpan() starts without them.
  private SpanRecord rec;
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
    rec().addLink(WeftSpanContext.of(spanContext), attributes);
    return this;
  }

  private SpanRecord rec() {
    if (rec == null) {
      rec = shared.sink.acquire(shared.limits, PerThread.current());
    }
    return rec;
  }

  @Override
  public SpanBuilder setAttribute(String key, String value) {
    rec().attrs().putString(key, value);
    return this;
  }

  @Override
  public SpanBuilder setAttribute(String key, long value) {
    rec().attrs().putLong(key, value);
    return this;
  }

  @Override
  public SpanBuilder setAttribute(String key, double value) {
    rec().attrs().putDouble(key, value);
    return this;
  }

  @Override
  public SpanBuilder setAttribute(String key, boolean value) {
    rec().attrs().putBoolean(key, value);
    return this;
  }

  @Override
  public <T> SpanBuilder setAttribute(AttributeKey<T> key, T value) {
    rec().attrs().putKey(key, value);
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

  // startSpan only hands the builder's fields to start(), so that it stays a few bytecodes and a
  // few dozen bytes of machine code: the JIT always inlines it into the caller, and escape analysis
  // removes the builder (the API's spanBuilder() object). When startSpan did the work itself, C2
  // compiled it on its own (startSpan is called from every instrumented method), into more than
  // InlineSmallCode (2,500 bytes), and from then on refused to inline it ("already compiled into a
  // big method" under -XX:+PrintInlining), so every span also allocated its 64-byte builder
  // (span_sampled_* benchmarks; docs/benchmarks/java-sdk-floor.md).
  //
  // An unsampled span is its span context (a WeftSpanContext is a non-recording Span), and it is
  // built here, not in start(): start() leaves its fields in the thread's PerThread and returns
  // that object, so the context is created in the inlined code, where escape analysis removes it
  // when the caller does not keep the span (span_unsampled: 0 B). Created in start(), it escaped
  // through start()'s return and cost 56 B per unsampled span.
  @Override
  public Span startSpan() {
    SpanRecord r = rec;
    rec = null;
    Object o = start(shared, scope, name, kind, parent, noParent, startEpochNanos, r);
    if (o instanceof RecordingSpan) {
      return (RecordingSpan) o;
    }
    PerThread t = (PerThread) o; // unsampled: built here, where escape analysis can remove it
    return new WeftSpanContext(t.unsampledTraceIdHigh, t.unsampledTraceIdLow, t.unsampledSpanId,
        t.unsampledFlags, (WeftTraceState) t.unsampledTraceState, false, false, false, null);
  }

  // One method for the whole start, on purpose: at more than FreqInlineSize (325) bytecodes it is
  // never inlined, so startSpan above stays small wherever it is compiled. It takes the builder's
  // fields, not the builder, which therefore does not escape. Its compiled code is 5-10 KB (the
  // record pool, clearing a recycled record, the sampler), far above what C2 inlines anyway.
  // StartSpanShapeTest checks both sizes.
  //
  // Returns the RecordingSpan of a sampled span; for an unsampled one it writes the new span
  // context's fields into the thread's PerThread and returns that, for startSpan to build the
  // context (no wrapper around it: one allocation at most, none once escape analysis has run).
  private static Object start(TracerSharedState shared, InstrumentationScope scope, String name,
      SpanKind kind, Context parent, boolean noParent, long startEpochNanos, SpanRecord rec) {
    Context parentContext = noParent ? Context.root()
        : parent != null ? parent : Context.current();
    Span parentSpan = Span.fromContextOrNull(parentContext);
    WeftSpanContext p = parentSpan == null ? WeftSpanContext.INVALID
        : WeftSpanContext.of(parentSpan.getSpanContext());
    PerThread thread = PerThread.current(); // one lookup for the PRNG and the record's lane
    WyRand rng = thread.rng;
    IdGenerator ids = shared.idGenerator;
    long high;
    long low;
    if (p.isValid()) {
      high = p.traceIdHigh();
      low = p.traceIdLow();
    } else {
      IdGenerator.TraceId id = ids.nextTraceId(rng, new IdGenerator.TraceId()); // scalar-replaced
      high = id.high;
      low = id.low;
    }
    SamplingResult result = shared.sampler.shouldSample(p, high, low, name, kind);
    long spanId = ids.nextSpanId(rng);
    SamplingDecision d = result.decision();
    byte flags = Flags.child(p.isValid() ? p.flags() : -1,
        d == SamplingDecision.RECORD_AND_SAMPLE);
    WeftTraceState ts = result.traceState(p.weftTraceState());
    if (d == SamplingDecision.DROP || shared.shutdown) {
      thread.unsampledTraceIdHigh = high; // a builder's record: to the GC
      thread.unsampledTraceIdLow = low;
      thread.unsampledSpanId = spanId;
      thread.unsampledFlags = flags;
      thread.unsampledTraceState = ts;
      return thread;
    }
    SpanRecord r = rec != null ? rec : shared.sink.acquire(shared.limits, thread);
    if (startEpochNanos == Long.MIN_VALUE) {
      r.startMono = System.nanoTime();
      r.startEpochNanos = WallClock.epochNanosAt(r.startMono);
    } else {
      r.startMono = RecordingSpan.noMono();
      r.startEpochNanos = startEpochNanos;
    }
    r.scope = scope;
    r.name = name;
    r.kind = kind;
    r.traceIdHigh = high;
    r.traceIdLow = low;
    r.spanId = spanId;
    r.flags = flags;
    r.traceState = ts;
    if (p.isValid()) {
      r.parentSpanId = p.spanIdLong();
      r.parentRemote = p.isRemote();
    }
    return new RecordingSpan(shared.sink, high, low, spanId, flags, ts, r);
  }
}
