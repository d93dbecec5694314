package io.weft.sdk.trace;

import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import java.util.Arrays;

/**
 * Everything a sampled span records besides its IDs, stored flat: the span's attributes are the
 * record's own (it is an {@link AttributeList}), events and links are parallel arrays. This is
 * what the exporter encodes.
 *
 * <p>Why a record is its attribute list rather than holding one: a recycled record is cold when
 * a span takes it (it was last written about a thousand spans before), and each object between
 * the pool and the attribute arrays is one more cache miss that the next load waits for. As one
 * object the chain is pool slot, record, arrays (span_sampled_10_attrs_1_event: −4 to −8 ns in
 * three alternated runs; docs/benchmarks/java-sdk-floor.md).
 *
 * <p><b>Recycling.</b> A record belongs to one live span at a time. The span gives it up when it
 * ends (under the span's lock, and never touches it again), so an ended span that the application
 * still holds cannot see or change the record after it has been exported and handed to a new span.
 * The export pipeline recycles a record after its batch has been exported, only when the exporter
 * declares that it keeps no reference to the batch ({@code SpanExporter.retainsSpans()}); its arrays
 * are kept, so a span started in steady state allocates only its {@link RecordingSpan}.
 *
 * <p>Not thread-safe: the owning span, builder, or (after the hand-off) export thread is the only
 * one that touches it.
 */
public final class SpanRecord extends AttributeList implements ReadableSpan {
  /** Arrays that grew past this many entries are dropped on recycling, to bound pooled memory. */
  private static final int KEEP = 32;

  SpanLimits limits;
  InstrumentationScope scope;
  long traceIdHigh;
  long traceIdLow;
  long spanId;
  byte flags;
  WeftTraceState traceState;
  long parentSpanId;
  boolean parentRemote;
  String name;
  SpanKind kind;
  long startEpochNanos;
  long startMono;
  long endEpochNanos;
  StatusCode statusCode;
  String statusMessage;
  // The thread that took the record and the export lane that thread holds alone (-1 for none):
  // ending the span on that thread publishes it with a plain release store (ExportPipeline).
  private Thread producer;
  private int lane = -1;

  private int eventCount;
  private int droppedEvents;
  private String[] eventNames;
  private long[] eventTimes;
  private AttributeList[] eventAttributes; // entries reused; an entry's size is 0 when it has none

  private int linkCount;
  private int droppedLinks;
  private WeftSpanContext[] linkContexts;
  private AttributeList[] linkAttributes;

  /** An empty record for spans limited by {@code limits}. */
  public SpanRecord(SpanLimits limits) {
    super(limits.maxAttributes, limits.maxAttributeValueLength);
    this.limits = limits;
    clear();
  }

  /**
   * Empties the record for reuse, keeping its arrays (unless they grew large) but no reference to
   * the previous span's keys, values, names or contexts.
   */
  public void clear() {
    scope = null;
    traceState = null;
    name = null;
    kind = SpanKind.INTERNAL;
    statusCode = StatusCode.UNSET;
    statusMessage = "";
    parentSpanId = 0;
    parentRemote = false;
    endEpochNanos = 0;
    clear(KEEP);
    if (eventCount > 0) {
      Arrays.fill(eventNames, 0, eventCount, null);
      for (int i = 0; i < eventCount; i++) {
        eventAttributes[i].clear(KEEP);
      }
    }
    if (eventNames != null && eventNames.length > KEEP) {
      eventNames = null;
      eventTimes = null;
      eventAttributes = null;
    }
    eventCount = 0;
    droppedEvents = 0;
    if (linkCount > 0) {
      Arrays.fill(linkContexts, 0, linkCount, null);
      for (int i = 0; i < linkCount; i++) {
        linkAttributes[i].clear(KEEP);
      }
    }
    if (linkContexts != null && linkContexts.length > KEEP) {
      linkContexts = null;
      linkAttributes = null;
    }
    linkCount = 0;
    droppedLinks = 0;
  }

  /**
   * For the export pipeline: records that {@code producer} took this record and holds export lane
   * {@code lane} alone (-1 for none).
   */
  public void producer(Thread producer, int lane) {
    this.producer = producer;
    this.lane = lane;
  }

  /** The thread given to {@link #producer(Thread, int)}. */
  public Thread producer() {
    return producer;
  }

  /** The lane given to {@link #producer(Thread, int)}. */
  public int lane() {
    return lane;
  }

  /** The span's attributes: the record's own (see the class comment). */
  AttributeList attrs() {
    return this;
  }

  void addEvent(String name, Attributes attributes, long epochNanos) {
    if (eventCount >= limits.maxEvents) {
      droppedEvents++;
      return;
    }
    int i = eventCount;
    if (eventNames == null || i == eventNames.length) {
      int cap = (int) Math.min(limits.maxEvents, eventNames == null ? 4L : 2L * i);
      eventNames = eventNames == null ? new String[cap] : Arrays.copyOf(eventNames, cap);
      eventTimes = eventTimes == null ? new long[cap] : Arrays.copyOf(eventTimes, cap);
      eventAttributes = eventAttributes == null ? new AttributeList[cap]
          : Arrays.copyOf(eventAttributes, cap);
    }
    AttributeList a = eventAttributes[i];
    if (a == null) {
      a = new AttributeList(limits.maxAttributesPerEvent, limits.maxAttributeValueLength);
      eventAttributes[i] = a;
    }
    a.putAll(attributes);
    eventNames[i] = name;
    eventTimes[i] = epochNanos;
    eventCount = i + 1;
  }

  void addLink(WeftSpanContext context, Attributes attributes) {
    if (linkCount >= limits.maxLinks) {
      droppedLinks++;
      return;
    }
    int i = linkCount;
    if (linkContexts == null || i == linkContexts.length) {
      int cap = (int) Math.min(limits.maxLinks, linkContexts == null ? 2L : 2L * i);
      linkContexts = linkContexts == null ? new WeftSpanContext[cap]
          : Arrays.copyOf(linkContexts, cap);
      linkAttributes = linkAttributes == null ? new AttributeList[cap]
          : Arrays.copyOf(linkAttributes, cap);
    }
    AttributeList a = linkAttributes[i];
    if (a == null) {
      a = new AttributeList(limits.maxAttributesPerLink, limits.maxAttributeValueLength);
      linkAttributes[i] = a;
    }
    a.putAll(attributes);
    linkContexts[i] = context;
    linkCount = i + 1;
  }

  @Override
  public long traceIdHigh() {
    return traceIdHigh;
  }

  @Override
  public long traceIdLow() {
    return traceIdLow;
  }

  @Override
  public long spanId() {
    return spanId;
  }

  @Override
  public byte traceFlags() {
    return flags;
  }

  @Override
  public WeftTraceState traceState() {
    return traceState;
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
  public String name() {
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
  public long endEpochNanos() {
    return endEpochNanos;
  }

  @Override
  public AttributeList attributes() {
    return size() == 0 && dropped() == 0 ? null : this;
  }

  @Override
  public int eventCount() {
    return eventCount;
  }

  @Override
  public String eventName(int i) {
    return eventNames[i];
  }

  @Override
  public long eventEpochNanos(int i) {
    return eventTimes[i];
  }

  @Override
  public AttributeList eventAttributes(int i) {
    return eventAttributes[i];
  }

  @Override
  public int droppedEvents() {
    return droppedEvents;
  }

  @Override
  public int linkCount() {
    return linkCount;
  }

  @Override
  public WeftSpanContext linkContext(int i) {
    return linkContexts[i];
  }

  @Override
  public AttributeList linkAttributes(int i) {
    return linkAttributes[i];
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
}
