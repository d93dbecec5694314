package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.opentelemetry.api.common.KeyValue;
import io.opentelemetry.api.common.Value;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.weft.sdk.export.OtlpEncoder;
import io.weft.sdk.export.OtlpRetry;
import io.weft.sdk.export.Outcome;
import io.weft.sdk.export.ProtoWriter;
import io.weft.sdk.id.Hex;
import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.InstrumentationScope;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.Resource;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The otlp.json runner. */
final class OtlpVectors {
  private OtlpVectors() {}

  static void run(JsonObject v) {
    JsonObject in = v.getAsJsonObject("input");
    JsonObject ex = v.getAsJsonObject("expected");
    switch (v.get("operation").getAsString()) {
      case "encode_request": {
        Resource resource = resource(in.getAsJsonObject("resource"));
        List<ReadableSpan> spans = new ArrayList<>();
        for (JsonElement ss : in.getAsJsonArray("scope_spans")) {
          JsonObject so = ss.getAsJsonObject();
          InstrumentationScope scope = scope(so.getAsJsonObject("scope"),
              VectorsTest.str(so, "schema_url"));
          for (JsonElement sp : so.getAsJsonArray("spans")) {
            spans.add(span(sp.getAsJsonObject(), scope));
          }
        }
        ProtoWriter w = new OtlpEncoder().encode(resource, spans);
        byte[] got = w.toByteArray();
        VectorsTest.assertBytes(Hex.decode(VectorsTest.str(ex, "hex")), got);
        assertEquals(ex.get("length").getAsInt(), got.length);
        break;
      }
      case "decode_response": {
        OtlpRetry.PartialSuccess p = OtlpRetry.decodeResponse(Hex.decode(VectorsTest.str(in,
            "hex")));
        assertEquals(ex.get("rejected_spans").getAsLong(), p.rejectedSpans);
        assertEquals(VectorsTest.str(ex, "error_message"), p.errorMessage);
        assertEquals(ex.get("partial").getAsBoolean(), p.partial);
        break;
      }
      case "classify_response": {
        Outcome o;
        if (in.has("error")) {
          o = OtlpRetry.classifyError(VectorsTest.str(in, "error"));
        } else if ("grpc".equals(VectorsTest.str(in, "transport"))) {
          long delay = in.has("retry_info_delay_ms") ? in.get("retry_info_delay_ms").getAsLong()
              : -1;
          o = OtlpRetry.classifyGrpc(VectorsTest.str(in, "code"), delay, null);
        } else {
          Map<String, List<String>> headers = new LinkedHashMap<>();
          for (Map.Entry<String, JsonElement> e : in.getAsJsonObject("headers").entrySet()) {
            List<String> vals = new ArrayList<>();
            for (JsonElement x : e.getValue().getAsJsonArray()) {
              vals.add(x.getAsString());
            }
            headers.put(e.getKey(), vals);
          }
          long now = in.has("now") ? VectorsTest.httpDate(VectorsTest.str(in, "now"))
              : System.currentTimeMillis();
          o = OtlpRetry.classifyHttp(in.get("status").getAsInt(), headers, new byte[0], now);
        }
        assertEquals(VectorsTest.str(ex, "outcome").toUpperCase(), o.kind().name());
        long wantDelay = ex.has("delay_ms") ? ex.get("delay_ms").getAsLong() : -1;
        assertEquals(wantDelay, o.delayMillis(), "delay_ms");
        break;
      }
      case "backoff": {
        double[] r = OtlpRetry.backoffRange(in.get("retry").getAsInt());
        if (ex.has("give_up")) {
          assertTrue(ex.get("give_up").getAsBoolean());
          assertNull(r, "expected no further retry");
        } else {
          assertEquals(ex.get("min_ms").getAsDouble(), r[0]);
          assertEquals(ex.get("max_ms").getAsDouble(), r[1]);
        }
        break;
      }
      case "parse_retry_after": {
        Long d = OtlpRetry.parseRetryAfter(VectorsTest.str(in, "value"),
            VectorsTest.httpDate(VectorsTest.str(in, "now")));
        JsonElement want = ex.get("delay_ms");
        if (want == null || want.isJsonNull()) {
          assertNull(d);
        } else {
          assertEquals(want.getAsLong(), d);
        }
        break;
      }
      default:
        fail("unknown otlp operation " + v.get("operation"));
    }
  }

  static Resource resource(JsonObject r) {
    AttributeList a = attributes(r.getAsJsonArray("attributes"));
    if (a == null) {
      a = new AttributeList();
    }
    if (r.has("dropped_attributes_count")) {
      a.addDropped(r.get("dropped_attributes_count").getAsInt());
    }
    return new Resource(a, VectorsTest.str(r, "schema_url"));
  }

  static InstrumentationScope scope(JsonObject s, String schemaUrl) {
    AttributeList a = attributes(s.getAsJsonArray("attributes"));
    if (s.has("dropped_attributes_count")) {
      if (a == null) {
        a = new AttributeList();
      }
      a.addDropped(s.get("dropped_attributes_count").getAsInt());
    }
    return new InstrumentationScope(VectorsTest.str(s, "name"), VectorsTest.str(s, "version"),
        schemaUrl, a);
  }

  static AttributeList attributes(JsonArray arr) {
    if (arr == null || arr.size() == 0) {
      return null;
    }
    AttributeList a = new AttributeList();
    for (JsonElement e : arr) {
      JsonObject kv = e.getAsJsonObject();
      String key = VectorsTest.str(kv, "key");
      JsonObject val = kv.getAsJsonObject("value");
      if (val.has("string")) {
        a.putString(key, val.get("string").getAsString());
      } else if (val.has("int")) {
        a.putLong(key, Long.parseLong(val.get("int").getAsString()));
      } else if (val.has("double")) {
        a.putDouble(key, val.get("double").getAsDouble());
      } else if (val.has("bool")) {
        a.putBoolean(key, val.get("bool").getAsBoolean());
      } else {
        a.putValue(key, value(val));
      }
    }
    return a;
  }

  static Value<?> value(JsonObject val) {
    if (val.has("string")) {
      return Value.of(val.get("string").getAsString());
    }
    if (val.has("int")) {
      return Value.of(Long.parseLong(val.get("int").getAsString()));
    }
    if (val.has("double")) {
      return Value.of(val.get("double").getAsDouble());
    }
    if (val.has("bool")) {
      return Value.of(val.get("bool").getAsBoolean());
    }
    if (val.has("bytes")) {
      return Value.of(Hex.decode(val.get("bytes").getAsString()));
    }
    if (val.has("array")) {
      List<Value<?>> l = new ArrayList<>();
      for (JsonElement e : val.getAsJsonArray("array")) {
        l.add(value(e.getAsJsonObject()));
      }
      return Value.of(l);
    }
    if (val.has("kvlist")) {
      List<KeyValue> l = new ArrayList<>();
      for (JsonElement e : val.getAsJsonArray("kvlist")) {
        JsonObject kv = e.getAsJsonObject();
        l.add(KeyValue.of(VectorsTest.str(kv, "key"), value(kv.getAsJsonObject("value"))));
      }
      return Value.of(l.toArray(new KeyValue[0]));
    }
    throw new AssertionError("unknown value " + val);
  }

  static WeftSpanContext ctx(JsonObject o, String flagsKey, boolean remote) {
    String t = VectorsTest.str(o, "trace_id");
    String ts = VectorsTest.str(o, "trace_state");
    WeftTraceState state = VectorsTest.traceState(ts);
    byte flags = (byte) Integer.parseInt(VectorsTest.str(o, flagsKey), 16);
    long hi = VectorsTest.u64(t.substring(0, 16));
    long lo = VectorsTest.u64(t.substring(16));
    long sid = VectorsTest.u64(VectorsTest.str(o, "span_id"));
    return remote ? WeftSpanContext.createRemote(hi, lo, sid, flags, state, false, false, null)
        : WeftSpanContext.create(hi, lo, sid, flags, state);
  }

  static ReadableSpan span(JsonObject o, InstrumentationScope scope) {
    VectorSpan s = new VectorSpan();
    s.scope = scope;
    s.context = ctx(o, "trace_flags", false);
    String parent = VectorsTest.str(o, "parent_span_id");
    s.parentSpanId = parent == null ? 0 : VectorsTest.u64(parent);
    s.parentRemote = o.has("parent_is_remote") && o.get("parent_is_remote").getAsBoolean();
    s.name = VectorsTest.str(o, "name");
    s.kind = SpanKind.valueOf(VectorsTest.str(o, "kind"));
    s.start = Long.parseUnsignedLong(VectorsTest.str(o, "start_time_unix_nano"));
    s.end = Long.parseUnsignedLong(VectorsTest.str(o, "end_time_unix_nano"));
    s.attributes = attributes(o.getAsJsonArray("attributes"));
    if (o.has("dropped_attributes_count")) {
      if (s.attributes == null) {
        s.attributes = new AttributeList();
      }
      s.attributes.addDropped(o.get("dropped_attributes_count").getAsInt());
    }
    if (o.has("events")) {
      List<SpanEvent> ev = new ArrayList<>();
      for (JsonElement e : o.getAsJsonArray("events")) {
        JsonObject eo = e.getAsJsonObject();
        AttributeList a = attributes(eo.getAsJsonArray("attributes"));
        if (eo.has("dropped_attributes_count")) {
          if (a == null) {
            a = new AttributeList();
          }
          a.addDropped(eo.get("dropped_attributes_count").getAsInt());
        }
        ev.add(new SpanEvent(VectorsTest.str(eo, "name"),
            Long.parseUnsignedLong(VectorsTest.str(eo, "time_unix_nano")), a));
      }
      s.events = ev;
    }
    s.droppedEvents = o.has("dropped_events_count") ? o.get("dropped_events_count").getAsInt() : 0;
    if (o.has("links")) {
      List<SpanLink> ls = new ArrayList<>();
      for (JsonElement e : o.getAsJsonArray("links")) {
        JsonObject lo = e.getAsJsonObject();
        AttributeList a = attributes(lo.getAsJsonArray("attributes"));
        if (lo.has("dropped_attributes_count")) {
          if (a == null) {
            a = new AttributeList();
          }
          a.addDropped(lo.get("dropped_attributes_count").getAsInt());
        }
        ls.add(new SpanLink(ctx(lo, "trace_flags", lo.get("is_remote").getAsBoolean()), a));
      }
      s.links = ls;
    }
    s.droppedLinks = o.has("dropped_links_count") ? o.get("dropped_links_count").getAsInt() : 0;
    if (o.has("status")) {
      JsonObject st = o.getAsJsonObject("status");
      s.statusCode = StatusCode.valueOf(VectorsTest.str(st, "code"));
      String m = VectorsTest.str(st, "message");
      s.statusMessage = m == null ? "" : m;
    }
    return s;
  }
}
