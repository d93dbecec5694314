package io.weft.sdk.propagation;

import io.opentelemetry.api.baggage.BaggageEntryMetadata;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.context.propagation.TextMapSetter;
import io.weft.sdk.id.Hex;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.TreeMap;

/** Jaeger {@code uber-trace-id} and {@code uberctx-*} baggage (spec/propagation.md "Jaeger"). */
public final class JaegerPropagator implements TextMapPropagator {
  private static final JaegerPropagator INSTANCE = new JaegerPropagator();
  private static final List<String> FIELDS = List.of("uber-trace-id");
  private static final String PREFIX = "uberctx-";

  private JaegerPropagator() {}

  public static JaegerPropagator getInstance() {
    return INSTANCE;
  }

  @Override
  public Collection<String> fields() {
    return FIELDS;
  }

  @Override
  public <C> void inject(Context context, C carrier, TextMapSetter<C> setter) {
    if (context == null || setter == null) {
      return;
    }
    WeftSpanContext sc = Carriers.spanContext(context);
    if (sc != null) {
      String flags = !sc.isSampled() ? "0" : sc.jaegerDebug() ? "3" : "1";
      setter.set(carrier, "uber-trace-id",
          sc.getTraceId() + ":" + sc.getSpanId() + ":0:" + flags);
    }
    for (WeftBaggage.Entry e : Carriers.baggage(context).entries()) {
      String k = e.key();
      if (!Carriers.isToken(k) || !k.equals(k.toLowerCase(Locale.ROOT))) {
        continue;
      }
      setter.set(carrier, PREFIX + k, encode(e.getValue()));
    }
  }

  private static String encode(String v) {
    StringBuilder sb = new StringBuilder();
    for (byte x : v.getBytes(StandardCharsets.UTF_8)) {
      int c = x & 0xff;
      if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
          || c == '.' || c == '_' || c == '~') {
        sb.append((char) c);
      } else {
        sb.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
            .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
      }
    }
    return sb.toString();
  }

  @Override
  public <C> Context extract(Context context, C carrier, TextMapGetter<C> getter) {
    if (context == null) {
      context = Context.root();
    }
    if (getter == null) {
      return context;
    }
    try {
      String v = Carriers.first(getter, carrier, "uber-trace-id");
      WeftSpanContext sc = v == null ? null : parse(v);
      Context out = sc == null ? context : Carriers.withSpanContext(context, sc);
      TreeMap<String, String> bag = new TreeMap<>();
      Iterable<String> keys = getter.keys(carrier);
      if (keys != null) {
        for (String name : keys) {
          if (name == null || name.length() <= PREFIX.length()
              || !name.regionMatches(true, 0, PREFIX, 0, PREFIX.length())) {
            continue;
          }
          String key = name.substring(PREFIX.length()).toLowerCase(Locale.ROOT);
          if (bag.containsKey(key)) {
            continue;
          }
          String raw = Carriers.first(getter, carrier, name);
          if (raw == null) {
            continue;
          }
          String value = Carriers.percentDecode(raw, true);
          if (value == null || value.isEmpty()) {
            continue;
          }
          bag.put(key, value);
        }
      }
      if (!bag.isEmpty()) {
        WeftBaggage.Builder b = (WeftBaggage.Builder) Carriers.baggage(out).toBuilder();
        bag.forEach((k, val) -> b.put(k, val, BaggageEntryMetadata.empty()));
        out = out.with(W3CBaggagePropagator.limit(b.build()));
      }
      return out;
    } catch (RuntimeException e) {
      return context;
    }
  }

  /** Parses a trimmed {@code uber-trace-id} value; null when invalid. */
  public static WeftSpanContext parse(String v) {
    if (v.indexOf('%') >= 0) {
      v = Carriers.percentDecode(v, false);
      if (v == null) {
        return null;
      }
    }
    String[] f = v.split(":", -1);
    if (f.length != 4) {
      return null;
    }
    String t = f[0];
    String s = f[1];
    String fl = f[3];
    if (t.isEmpty() || t.length() > 32 || !Hex.isLowerHex(t, 0, t.length())) {
      return null;
    }
    if (s.isEmpty() || s.length() > 16 || !Hex.isLowerHex(s, 0, s.length())) {
      return null;
    }
    if (fl.isEmpty() || fl.length() > 2 || !Hex.isHexAnyCase(fl, 0, fl.length())) {
      return null;
    }
    long hi = t.length() > 16 ? Hex.parseLong(t, 0, t.length() - 16) : 0;
    long lo = Hex.parseLong(t, Math.max(0, t.length() - 16), Math.min(16, t.length()));
    long sid = Hex.parseLong(s, 0, s.length());
    if ((hi | lo) == 0 || sid == 0) {
      return null;
    }
    int flags = (int) Hex.parseLongAnyCase(fl, 0, fl.length());
    boolean sampled = (flags & 1) != 0;
    boolean debug = sampled && (flags & 2) != 0;
    return WeftSpanContext.createRemote(hi, lo, sid, sampled ? WeftSpanContext.SAMPLED : 0,
        WeftTraceState.EMPTY, false, debug, null);
  }

  @Override
  public String toString() {
    return "JaegerPropagator";
  }
}
