package io.weft.sdk.propagation;

import io.opentelemetry.api.baggage.BaggageEntryMetadata;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.context.propagation.TextMapSetter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

/** W3C Baggage (spec/propagation.md "W3C Baggage"), with the 180-member and 8192-byte limits. */
public final class W3CBaggagePropagator implements TextMapPropagator {
  private static final W3CBaggagePropagator INSTANCE = new W3CBaggagePropagator();
  private static final List<String> FIELDS = List.of("baggage");
  static final int MAX_MEMBERS = 180;
  static final int MAX_BYTES = 8192;

  private W3CBaggagePropagator() {}

  public static W3CBaggagePropagator getInstance() {
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
    String h = serialize(limit(Carriers.baggage(context)));
    if (!h.isEmpty()) {
      setter.set(carrier, "baggage", h);
    }
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
      List<String> values = Carriers.all(getter, carrier, "baggage");
      if (values.isEmpty()) {
        return context;
      }
      WeftBaggage.Builder b = (WeftBaggage.Builder) Carriers.baggage(context).toBuilder();
      parseInto(String.join(",", values), b);
      return context.with(limit(b.build()));
    } catch (RuntimeException e) {
      return context;
    }
  }

  static void parseInto(String header, WeftBaggage.Builder b) {
    for (String piece : header.split(",", -1)) {
      piece = Carriers.trim(piece);
      if (piece.isEmpty()) {
        continue;
      }
      String[] parts = piece.split(";", -1);
      String nv = parts[0];
      int eq = nv.indexOf('=');
      if (eq < 0) {
        continue;
      }
      String key = Carriers.trim(nv.substring(0, eq));
      String raw = Carriers.trim(nv.substring(eq + 1));
      if (!Carriers.isToken(key) || !allBaggageOctets(raw)) {
        continue;
      }
      String value = Carriers.percentDecode(raw, false);
      if (value == null) {
        continue;
      }
      String meta = properties(parts, 1);
      if (meta == null) {
        continue;
      }
      b.put(key, value, BaggageEntryMetadata.create(meta));
    }
  }

  /** Canonical property list of parts[from..], or null when a property is invalid. */
  static String properties(String[] parts, int from) {
    StringBuilder sb = new StringBuilder();
    for (int i = from; i < parts.length; i++) {
      String p = Carriers.trim(parts[i]);
      if (p.isEmpty()) {
        continue;
      }
      int eq = p.indexOf('=');
      String canon;
      if (eq < 0) {
        if (!Carriers.isToken(p)) {
          return null;
        }
        canon = p;
      } else {
        String k = Carriers.trim(p.substring(0, eq));
        String v = Carriers.trim(p.substring(eq + 1));
        if (!Carriers.isToken(k) || !allBaggageOctets(v)) {
          return null;
        }
        canon = k + "=" + v;
      }
      if (sb.length() > 0) {
        sb.append(';');
      }
      sb.append(canon);
    }
    return sb.toString();
  }

  static boolean allBaggageOctets(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (!Carriers.isBaggageOctet(s.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  /** The serialised form of one entry, or null when it is not injectable. */
  static String member(WeftBaggage.Entry e) {
    if (!Carriers.isToken(e.key())) {
      return null;
    }
    StringBuilder sb = new StringBuilder(e.key().length() + e.getValue().length() + 1);
    sb.append(e.key()).append('=');
    for (byte x : e.getValue().getBytes(StandardCharsets.UTF_8)) {
      int c = x & 0xff;
      if (Carriers.isBaggageOctet(c) && c != '%') {
        sb.append((char) c);
      } else {
        sb.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
            .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
      }
    }
    String meta = e.getMetadata().getValue();
    if (meta != null && !meta.isEmpty()) {
      String canon = properties(meta.split(";", -1), 0);
      if (canon != null && !canon.isEmpty()) {
        sb.append(';').append(canon);
      }
    }
    return sb.toString();
  }

  /** Applies the member and byte limits, in order, dropping only members that do not fit. */
  static WeftBaggage limit(WeftBaggage b) {
    if (b.size() == 0) {
      return b;
    }
    int members = 0;
    int bytes = 0;
    boolean dropped = false;
    List<WeftBaggage.Entry> kept = new ArrayList<>(b.size());
    for (WeftBaggage.Entry e : b.entries()) {
      String m = member(e);
      int len = m == null ? 0 : m.getBytes(StandardCharsets.UTF_8).length;
      int add = m == null ? 0 : (members == 0 ? len : len + 1);
      if (m != null && (members + 1 > MAX_MEMBERS || bytes + add > MAX_BYTES)) {
        dropped = true;
        continue;
      }
      if (m != null) {
        members++;
        bytes += add;
      }
      kept.add(e);
    }
    if (!dropped) {
      return b;
    }
    WeftBaggage.Builder nb = WeftBaggage.builder();
    for (WeftBaggage.Entry e : kept) {
      nb.put(e.key(), e.getValue(), e.getMetadata());
    }
    return nb.build();
  }

  static String serialize(WeftBaggage b) {
    StringBuilder sb = new StringBuilder();
    for (WeftBaggage.Entry e : b.entries()) {
      String m = member(e);
      if (m == null) {
        continue;
      }
      if (sb.length() > 0) {
        sb.append(',');
      }
      sb.append(m);
    }
    return sb.toString();
  }

  @Override
  public String toString() {
    return "W3CBaggagePropagator";
  }
}
