package io.weft.sdk.propagation;

import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.context.propagation.TextMapSetter;
import io.weft.sdk.id.Hex;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.Collection;
import java.util.List;

/** B3 single and multi header (spec/propagation.md "B3"); extract accepts both encodings. */
public final class B3Propagator implements TextMapPropagator {
  private static final B3Propagator SINGLE = new B3Propagator(false);
  private static final B3Propagator MULTI = new B3Propagator(true);
  private static final List<String> SINGLE_FIELDS = List.of("b3");
  private static final List<String> MULTI_FIELDS =
      List.of("x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags");

  private final boolean multi;

  private B3Propagator(boolean multi) {
    this.multi = multi;
  }

  /** Injects the single {@code b3} header (the OpenTelemetry default). */
  public static B3Propagator injectingSingleHeader() {
    return SINGLE;
  }

  /** Injects the {@code X-B3-*} headers. */
  public static B3Propagator injectingMultiHeaders() {
    return MULTI;
  }

  @Override
  public Collection<String> fields() {
    return multi ? MULTI_FIELDS : SINGLE_FIELDS;
  }

  @Override
  public <C> void inject(Context context, C carrier, TextMapSetter<C> setter) {
    if (context == null || setter == null) {
      return;
    }
    WeftSpanContext sc = Carriers.spanContext(context);
    if (sc == null) {
      return;
    }
    boolean debug = sc.b3Debug();
    boolean sampled = sc.isSampled() || debug;
    if (!multi) {
      char[] c = new char[32 + 1 + 16 + 2];
      Hex.writeLong(sc.traceIdHigh(), c, 0);
      Hex.writeLong(sc.traceIdLow(), c, 16);
      c[32] = '-';
      Hex.writeLong(sc.spanIdLong(), c, 33);
      c[49] = '-';
      c[50] = debug ? 'd' : sampled ? '1' : '0';
      setter.set(carrier, "b3", new String(c));
    } else {
      setter.set(carrier, "x-b3-traceid", sc.getTraceId());
      setter.set(carrier, "x-b3-spanid", sc.getSpanId());
      if (debug) {
        setter.set(carrier, "x-b3-flags", "1");
      } else {
        setter.set(carrier, "x-b3-sampled", sampled ? "1" : "0");
      }
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
      WeftSpanContext sc = null;
      String single = Carriers.first(getter, carrier, "b3");
      if (single != null) {
        sc = parseSingle(single);
      }
      if (sc == null) {
        sc = parseMulti(carrier, getter);
      }
      return sc == null ? context : Carriers.withSpanContext(context, sc);
    } catch (RuntimeException e) {
      return context;
    }
  }

  /** 32 or 16 lowercase hex digits, padded; null when invalid or zero. */
  private static long[] traceId(String s) {
    int n = s.length();
    if ((n != 32 && n != 16) || !Hex.isLowerHex(s, 0, n)) {
      return null;
    }
    long hi = n == 32 ? Hex.parseLong(s, 0, 16) : 0;
    long lo = Hex.parseLong(s, n - 16, 16);
    return (hi | lo) == 0 ? null : new long[] {hi, lo};
  }

  private static boolean spanIdOk(String s) {
    return s.length() == 16 && Hex.isLowerHex(s, 0, 16) && Hex.parseLong(s, 0, 16) != 0;
  }

  private static WeftSpanContext parseSingle(String v) {
    if (v.equals("0") || v.equals("1") || v.equals("d")) {
      return null;
    }
    String[] f = v.split("-", -1);
    if (f.length < 2 || f.length > 4) {
      return null;
    }
    long[] tid = traceId(f[0]);
    if (tid == null || !spanIdOk(f[1])) {
      return null;
    }
    boolean sampled = false;
    boolean debug = false;
    if (f.length >= 3) {
      switch (f[2]) {
        case "0":
          break;
        case "1":
          sampled = true;
          break;
        case "d":
          debug = true;
          sampled = true;
          break;
        default:
          return null;
      }
    }
    if (f.length == 4 && !spanIdOk(f[3])) {
      return null;
    }
    return WeftSpanContext.createRemote(tid[0], tid[1], Hex.parseLong(f[1], 0, 16),
        sampled ? WeftSpanContext.SAMPLED : 0, WeftTraceState.EMPTY, debug, false, null);
  }

  private static <C> WeftSpanContext parseMulti(C carrier, TextMapGetter<C> getter) {
    String t = Carriers.first(getter, carrier, "X-B3-TraceId");
    String s = Carriers.first(getter, carrier, "X-B3-SpanId");
    if (t == null || s == null) {
      return null;
    }
    long[] tid = traceId(t);
    if (tid == null || !spanIdOk(s)) {
      return null;
    }
    String parent = Carriers.first(getter, carrier, "X-B3-ParentSpanId");
    if (parent != null && !spanIdOk(parent)) {
      return null;
    }
    boolean sampled = false;
    String sm = Carriers.first(getter, carrier, "X-B3-Sampled");
    if (sm != null) {
      if (sm.equals("1") || sm.equalsIgnoreCase("true")) {
        sampled = true;
      } else if (!sm.equals("0") && !sm.equalsIgnoreCase("false")) {
        return null;
      }
    }
    boolean debug = "1".equals(Carriers.first(getter, carrier, "X-B3-Flags"));
    return WeftSpanContext.createRemote(tid[0], tid[1], Hex.parseLong(s, 0, 16),
        sampled || debug ? WeftSpanContext.SAMPLED : 0, WeftTraceState.EMPTY, debug, false, null);
  }

  @Override
  public String toString() {
    return multi ? "B3Propagator{multi}" : "B3Propagator{single}";
  }
}
