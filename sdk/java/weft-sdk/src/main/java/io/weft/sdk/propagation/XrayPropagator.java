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

/**
 * AWS X-Ray {@code X-Amzn-Trace-Id} (spec/propagation.md "AWS X-Ray"), with {@code Lineage} carried
 * through unchanged.
 */
public final class XrayPropagator implements TextMapPropagator {
  private static final XrayPropagator INSTANCE = new XrayPropagator();
  private static final List<String> FIELDS = List.of("x-amzn-trace-id");

  private XrayPropagator() {}

  public static XrayPropagator getInstance() {
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
      setter.set(carrier, "x-amzn-trace-id", sc.xrayHeader(XrayPropagator::header));
    }
  }

  /**
   * The header value for {@code sc}:
   * {@code Root=1-{8 hex}-{24 hex};Parent={16 hex};Sampled={0|1}[;Lineage=...]}.
   */
  public static String header(WeftSpanContext sc) {
    String lineage = sc.xrayLineage();
    int n = 5 + 1 + 1 + 8 + 1 + 24 + 8 + 16 + 9 + 1;
    char[] c = new char[n];
    writeHeader(sc.traceIdHigh(), sc.traceIdLow(), sc.spanIdLong(), sc.isSampled(), c);
    String s = new String(c);
    return lineage == null ? s : s + ";Lineage=" + lineage;
  }

  /** The length of a header without {@code Lineage}. */
  public static final int LEN = 74;

  /**
   * Writes the header (without {@code Lineage}) into {@code out[0..74)}; allocation-free.
   */
  public static void writeHeader(long hi, long lo, long spanId, boolean sampled, char[] out) {
    "Root=1-".getChars(0, 7, out, 0);
    Hex.writeInt((int) (hi >>> 32), out, 7);
    out[15] = '-';
    Hex.writeInt((int) hi, out, 16);
    Hex.writeLong(lo, out, 24);
    ";Parent=".getChars(0, 8, out, 40);
    Hex.writeLong(spanId, out, 48);
    ";Sampled=".getChars(0, 9, out, 64);
    out[73] = sampled ? '1' : '0';
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
      String v = Carriers.first(getter, carrier, "X-Amzn-Trace-Id");
      if (v == null) {
        return context;
      }
      WeftSpanContext sc = parse(v);
      return sc == null ? context : Carriers.withSpanContext(context, sc);
    } catch (RuntimeException e) {
      return context;
    }
  }

  /** Parses a trimmed header value; null when invalid. */
  public static WeftSpanContext parse(String v) {
    String root = null;
    String parent = null;
    String sampled = null;
    String lineage = null;
    int n = v.length();
    int start = 0;
    while (start <= n) {
      int semi = v.indexOf(';', start);
      int end = semi < 0 ? n : semi;
      int a = start;
      int b = end;
      while (a < b && Carriers.isOws(v.charAt(a))) {
        a++;
      }
      while (b > a && Carriers.isOws(v.charAt(b - 1))) {
        b--;
      }
      if (a < b) {
        int eq = v.indexOf('=', a);
        if (eq < 0 || eq >= b) {
          return null;
        }
        String key = Carriers.trim(v.substring(a, eq));
        String val = Carriers.trim(v.substring(eq + 1, b));
        switch (key) {
          case "Root":
            root = val;
            break;
          case "Parent":
            parent = val;
            break;
          case "Sampled":
            sampled = val;
            break;
          case "Lineage":
            lineage = val;
            break;
          default:
            break;
        }
      }
      if (semi < 0) {
        break;
      }
      start = semi + 1;
    }
    if (root == null || parent == null) {
      return null;
    }
    // Root: 1-{1..8 hex epoch}-{24 hex}
    int d1 = root.indexOf('-');
    int d2 = d1 < 0 ? -1 : root.indexOf('-', d1 + 1);
    if (d1 != 1 || root.charAt(0) != '1' || d2 < 0) {
      return null;
    }
    int epochLen = d2 - d1 - 1;
    int uniqueLen = root.length() - d2 - 1;
    if (epochLen < 1 || epochLen > 8 || uniqueLen != 24 || !Hex.isLowerHex(root, 2, epochLen)
        || !Hex.isLowerHex(root, d2 + 1, 24)) {
      return null;
    }
    long epoch = Hex.parseLong(root, 2, epochLen);
    long hi = (epoch << 32) | Hex.parseLong(root, d2 + 1, 8);
    long lo = Hex.parseLong(root, d2 + 9, 16);
    if (parent.length() != 16 || !Hex.isLowerHex(parent, 0, 16)) {
      return null;
    }
    long sid = Hex.parseLong(parent, 0, 16);
    if ((hi | lo) == 0 || sid == 0) {
      return null;
    }
    byte flags = 0;
    if (sampled != null) {
      if (sampled.equals("1")) {
        flags = WeftSpanContext.SAMPLED;
      } else if (!sampled.equals("0") && !sampled.equals("?")) {
        return null;
      }
    }
    return WeftSpanContext.createRemote(hi, lo, sid, flags, WeftTraceState.EMPTY, false, false,
        lineage);
  }

  @Override
  public String toString() {
    return "XrayPropagator";
  }
}
