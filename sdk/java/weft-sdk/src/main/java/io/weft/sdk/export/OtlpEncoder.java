package io.weft.sdk.export;

import io.opentelemetry.api.common.KeyValue;
import io.opentelemetry.api.common.Value;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.InstrumentationScope;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * Encodes a batch of spans as an OTLP {@code ExportTraceServiceRequest}, byte for byte as
 * spec/otlp.md fixes it: ascending field order, defaults omitted, one {@code ResourceSpans}, one
 * {@code ScopeSpans} per distinct scope in order of first appearance. Not thread-safe: the export
 * thread owns one encoder and reuses its buffer for every batch.
 */
public final class OtlpEncoder {
  private final ProtoWriter w = new ProtoWriter(64 * 1024);
  private final List<InstrumentationScope> scopes = new ArrayList<>();
  private final List<List<ReadableSpan>> byScope = new ArrayList<>();

  /**
   * Encodes {@code spans} and returns the writer holding the bytes (valid until the next call).
   */
  public ProtoWriter encode(Resource resource, List<? extends ReadableSpan> spans) {
    w.reset();
    scopes.clear();
    for (List<ReadableSpan> l : byScope) {
      l.clear();
    }
    for (ReadableSpan s : spans) {
      InstrumentationScope sc = s.scope();
      int idx = -1;
      for (int i = 0; i < scopes.size(); i++) {
        InstrumentationScope x = scopes.get(i);
        if (x == sc || x.equals(sc)) {
          idx = i;
          break;
        }
      }
      if (idx < 0) {
        idx = scopes.size();
        scopes.add(sc);
        if (byScope.size() <= idx) {
          byScope.add(new ArrayList<>());
        }
      }
      byScope.get(idx).add(s);
    }
    int rs = w.begin(1); // ResourceSpans
    int res = w.begin(1); // Resource (always written)
    AttributeList ra = resource.attributes();
    attributes(1, ra);
    if (ra != null && ra.dropped() > 0) {
      w.tag(2, ProtoWriter.VARINT);
      w.varint(ra.dropped());
    }
    w.end(res);
    for (int i = 0; i < scopes.size(); i++) {
      InstrumentationScope sc = scopes.get(i);
      int ss = w.begin(2); // ScopeSpans
      int scm = w.begin(1); // InstrumentationScope (always written)
      if (!sc.name().isEmpty()) {
        w.stringField(1, sc.name());
      }
      if (sc.version() != null && !sc.version().isEmpty()) {
        w.stringField(2, sc.version());
      }
      attributes(3, sc.attributes());
      if (sc.attributes() != null && sc.attributes().dropped() > 0) {
        w.tag(4, ProtoWriter.VARINT);
        w.varint(sc.attributes().dropped());
      }
      w.end(scm);
      for (ReadableSpan s : byScope.get(i)) {
        span(s);
      }
      if (sc.schemaUrl() != null && !sc.schemaUrl().isEmpty()) {
        w.stringField(3, sc.schemaUrl());
      }
      w.end(ss);
    }
    if (resource.schemaUrl() != null && !resource.schemaUrl().isEmpty()) {
      w.stringField(3, resource.schemaUrl());
    }
    w.end(rs);
    return w;
  }

  private static int kind(SpanKind k) {
    switch (k) {
      case SERVER:
        return 2;
      case CLIENT:
        return 3;
      case PRODUCER:
        return 4;
      case CONSUMER:
        return 5;
      default:
        return 1;
    }
  }

  /** The OTLP flags: W3C flags, has-is-remote bit, is-remote bit. */
  static int flags(byte traceFlags, boolean remote) {
    return (traceFlags & 0xff) | 0x100 | (remote ? 0x200 : 0);
  }

  private void span(ReadableSpan s) {
    WeftTraceState ts = s.traceState();
    int m = w.begin(2);
    w.tag(1, ProtoWriter.LEN);
    w.varint(16);
    w.idBytes(s.traceIdHigh());
    w.idBytes(s.traceIdLow());
    w.tag(2, ProtoWriter.LEN);
    w.varint(8);
    w.idBytes(s.spanId());
    if (ts != null && !ts.isEmpty()) {
      w.stringField(3, ts.toString());
    }
    if (s.parentSpanId() != 0) {
      w.tag(4, ProtoWriter.LEN);
      w.varint(8);
      w.idBytes(s.parentSpanId());
    }
    if (!s.name().isEmpty()) {
      w.stringField(5, s.name());
    }
    w.tag(6, ProtoWriter.VARINT);
    w.varint(kind(s.kind()));
    w.tag(7, ProtoWriter.FIXED64);
    w.fixed64(s.startEpochNanos());
    w.tag(8, ProtoWriter.FIXED64);
    w.fixed64(s.endEpochNanos());
    AttributeList a = s.attributes();
    attributes(9, a);
    if (a != null && a.dropped() > 0) {
      w.tag(10, ProtoWriter.VARINT);
      w.varint(a.dropped());
    }
    for (int i = 0; i < s.eventCount(); i++) {
      int em = w.begin(11);
      w.tag(1, ProtoWriter.FIXED64);
      w.fixed64(s.eventEpochNanos(i));
      String name = s.eventName(i);
      if (!name.isEmpty()) {
        w.stringField(2, name);
      }
      AttributeList ea = s.eventAttributes(i);
      attributes(3, ea);
      if (ea != null && ea.dropped() > 0) {
        w.tag(4, ProtoWriter.VARINT);
        w.varint(ea.dropped());
      }
      w.end(em);
    }
    if (s.droppedEvents() > 0) {
      w.tag(12, ProtoWriter.VARINT);
      w.varint(s.droppedEvents());
    }
    for (int i = 0; i < s.linkCount(); i++) {
      WeftSpanContext lc = s.linkContext(i);
      int lm = w.begin(13);
      w.tag(1, ProtoWriter.LEN);
      w.varint(16);
      w.idBytes(lc.traceIdHigh());
      w.idBytes(lc.traceIdLow());
      w.tag(2, ProtoWriter.LEN);
      w.varint(8);
      w.idBytes(lc.spanIdLong());
      if (!lc.weftTraceState().isEmpty()) {
        w.stringField(3, lc.weftTraceState().toString());
      }
      AttributeList la = s.linkAttributes(i);
      attributes(4, la);
      if (la != null && la.dropped() > 0) {
        w.tag(5, ProtoWriter.VARINT);
        w.varint(la.dropped());
      }
      w.tag(6, ProtoWriter.FIXED32);
      w.fixed32(flags(lc.flags(), lc.isRemote()));
      w.end(lm);
    }
    if (s.droppedLinks() > 0) {
      w.tag(14, ProtoWriter.VARINT);
      w.varint(s.droppedLinks());
    }
    StatusCode code = s.statusCode();
    String msg = s.statusMessage();
    if (code != StatusCode.UNSET || (msg != null && !msg.isEmpty())) {
      int sm = w.begin(15);
      if (msg != null && !msg.isEmpty()) {
        w.stringField(2, msg);
      }
      if (code != StatusCode.UNSET) {
        w.tag(3, ProtoWriter.VARINT);
        w.varint(code == StatusCode.OK ? 1 : 2);
      }
      w.end(sm);
    }
    w.tag(16, ProtoWriter.FIXED32);
    w.fixed32(flags(s.traceFlags(), s.parentRemote()));
    w.end(m);
  }

  private void attributes(int field, AttributeList a) {
    if (a == null) {
      return;
    }
    for (int i = 0; i < a.size(); i++) {
      int kv = w.begin(field);
      w.stringField(1, a.key(i));
      int v = w.begin(2);
      switch (a.type(i)) {
        case AttributeList.STRING:
          w.stringField(1, (String) a.objectValue(i));
          break;
        case AttributeList.BOOLEAN:
          w.tag(2, ProtoWriter.VARINT);
          w.varint(a.longValue(i));
          break;
        case AttributeList.LONG:
          w.tag(3, ProtoWriter.VARINT);
          w.varint(a.longValue(i));
          break;
        case AttributeList.DOUBLE:
          w.tag(4, ProtoWriter.FIXED64);
          w.fixed64(a.longValue(i));
          break;
        case AttributeList.VALUE:
          anyValueBody((Value<?>) a.objectValue(i));
          break;
        default:
          int arr = w.begin(5);
          for (Object o : (List<?>) a.objectValue(i)) {
            int av = w.begin(1);
            scalar(o);
            w.end(av);
          }
          w.end(arr);
      }
      w.end(v);
      w.end(kv);
    }
  }

  private void scalar(Object o) {
    if (o instanceof String) {
      w.stringField(1, (String) o);
    } else if (o instanceof Boolean) {
      w.tag(2, ProtoWriter.VARINT);
      w.varint((Boolean) o ? 1 : 0);
    } else if (o instanceof Long || o instanceof Integer) {
      w.tag(3, ProtoWriter.VARINT);
      w.varint(((Number) o).longValue());
    } else if (o instanceof Double) {
      w.tag(4, ProtoWriter.FIXED64);
      w.fixed64(Double.doubleToRawLongBits((Double) o));
    }
  }

  /** Writes the body of an AnyValue (exactly one oneof member; nothing for an empty value). */
  @SuppressWarnings("unchecked")
  private void anyValueBody(Value<?> v) {
    switch (v.getType()) {
      case STRING:
        w.stringField(1, (String) v.getValue());
        break;
      case BOOLEAN:
        w.tag(2, ProtoWriter.VARINT);
        w.varint((Boolean) v.getValue() ? 1 : 0);
        break;
      case LONG:
        w.tag(3, ProtoWriter.VARINT);
        w.varint((Long) v.getValue());
        break;
      case DOUBLE:
        w.tag(4, ProtoWriter.FIXED64);
        w.fixed64(Double.doubleToRawLongBits((Double) v.getValue()));
        break;
      case ARRAY: {
        int arr = w.begin(5);
        for (Value<?> e : (List<Value<?>>) v.getValue()) {
          int av = w.begin(1);
          anyValueBody(e);
          w.end(av);
        }
        w.end(arr);
        break;
      }
      case KEY_VALUE_LIST: {
        int kvl = w.begin(6);
        for (KeyValue kv : (List<KeyValue>) v.getValue()) {
          int m = w.begin(1);
          w.stringField(1, kv.getKey());
          int av = w.begin(2);
          anyValueBody(kv.getValue());
          w.end(av);
          w.end(m);
        }
        w.end(kvl);
        break;
      }
      case BYTES: {
        ByteBuffer bb = ((ByteBuffer) v.getValue()).duplicate();
        byte[] b = new byte[bb.remaining()];
        bb.get(b);
        w.bytesField(7, b);
        break;
      }
      default:
        break; // EMPTY: an AnyValue with no member
    }
  }
}
