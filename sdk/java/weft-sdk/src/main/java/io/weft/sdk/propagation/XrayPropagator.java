package io.weft.sdk.propagation;

import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapPropagator;
import io.opentelemetry.context.propagation.TextMapSetter;
import io.weft.sdk.id.Hex;
import io.weft.sdk.id.XrayTraceId;
import io.weft.sdk.internal.Latin1;
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

  /**
   * Parses a trimmed header value; null when invalid. Allocates the span context and, when the
   * header has one, the {@code Lineage} string; nothing else.
   */
  public static WeftSpanContext parse(String v) {
    // The form X-Ray SDKs and the X-Ray service write, Root, Parent and Sampled at fixed offsets,
    // is decoded without scanning for its fields (xray_parse (weft_header) benchmark). A header
    // that only looks canonical (a Root value holding a ';', say) goes through the scan, so the
    // answer is always the scan's.
    if (v.length() == LEN) {
      byte[] latin1 = Latin1.bytes(v);
      WeftSpanContext sc = latin1 != null ? canonical(v, latin1)
          : v.startsWith("Root=") && v.startsWith(";Parent=", 40) && v.startsWith(";Sampled=", 64)
              ? decode(v, 5, 40, 48, 64, 73, LEN, -1, -1) : null;
      if (sc != null) {
        return sc;
      }
    }
    return scan(v);
  }

  // "Root=" as the word at 0 holds it once shifted down past the three bytes after it
  private static final long ROOT = word("\0\0\0Root=");
  private static final long PARENT = word(";Parent=");
  private static final long SAMPLED = word("Sampled=");

  /** Eight ASCII characters as {@link Latin1#load8} reads them. */
  private static long word(String s) {
    long w = 0;
    for (int i = 0; i < 8; i++) {
      w = w << 8 | s.charAt(i);
    }
    return w;
  }

  /**
   * The canonical header from its Latin-1 bytes ({@code s.length == LEN}): the field names are
   * compared 8 bytes at a time and the parent's 16 digits checked and packed as two words, where
   * {@code startsWith} compared 22 characters one by one and {@link Hex#hex8} checked each word
   * with its own bounds test and branch (xray_parse (weft_header): 33.5 -> 19.1-20.4 ns; checking
   * the trace ID's words with the parent's, one branch for all six, measured no better). Null when
   * anything differs; {@link #parse} then scans.
   */
  private static WeftSpanContext canonical(String v, byte[] s) {
    long p1 = Latin1.load8(s, 48);
    long p2 = Latin1.load8(s, 56);
    int f = Latin1.at(s, 73);
    if ((Latin1.load8(s, 0) >>> 24) != ROOT || Latin1.load8(s, 40) != PARENT
        || Latin1.load8(s, 65) != SAMPLED || Latin1.at(s, 64) != ';'
        || (Hex.hexBits(p1) & Hex.hexBits(p2) & Hex.HIGH_BITS) != Hex.HIGH_BITS
        || (f != '1' && f != '0' && f != '?')) {
      return null;
    }
    long sid = Hex.decode16(p1, p2);
    XrayTraceId id = new XrayTraceId(); // scalar-replaced once parse is inlined
    if (sid == 0 || !id.parse(v, 5, 40)) {
      return null;
    }
    return WeftSpanContext.createRemote(id.high, id.low, sid,
        f == '1' ? WeftSpanContext.SAMPLED : 0, WeftTraceState.EMPTY, false, false, null);
  }

  private static WeftSpanContext scan(String v) {
    // Fields are kept as index ranges into v and decoded in place: no substring per field and no
    // string switch (xray_parse (weft_header) benchmark).
    int root = -1;
    int rootEnd = -1;
    int parent = -1;
    int parentEnd = -1;
    int sampled = -1;
    int sampledEnd = -1;
    int lineage = -1;
    int lineageEnd = -1;
    int n = v.length();
    int start = 0;
    while (true) {
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
        int keyEnd = eq;
        while (keyEnd > a && Carriers.isOws(v.charAt(keyEnd - 1))) {
          keyEnd--;
        }
        int val = eq + 1;
        while (val < b && Carriers.isOws(v.charAt(val))) {
          val++;
        }
        int keyLen = keyEnd - a;
        if (keyLen == 4 && v.startsWith("Root", a)) {
          root = val;
          rootEnd = b;
        } else if (keyLen == 6 && v.startsWith("Parent", a)) {
          parent = val;
          parentEnd = b;
        } else if (keyLen == 7 && v.startsWith("Sampled", a)) {
          sampled = val;
          sampledEnd = b;
        } else if (keyLen == 7 && v.startsWith("Lineage", a)) {
          lineage = val;
          lineageEnd = b;
        }
      }
      if (semi < 0) {
        break;
      }
      start = semi + 1;
    }
    return decode(v, root, rootEnd, parent, parentEnd, sampled, sampledEnd, lineage, lineageEnd);
  }

  /** Decodes the fields found at these index ranges of {@code v} (-1 when absent). */
  private static WeftSpanContext decode(String v, int root, int rootEnd, int parent, int parentEnd,
      int sampled, int sampledEnd, int lineage, int lineageEnd) {
    if (root < 0 || parentEnd - parent != 16) {
      return null;
    }
    XrayTraceId id = new XrayTraceId(); // scalar-replaced once parse is inlined
    if (!id.parse(v, root, rootEnd)) {
      return null;
    }
    long p1 = Hex.hex8(v, parent);
    long p2 = Hex.hex8(v, parent + 8);
    long sid = p1 << 32 | p2;
    if ((p1 | p2) < 0 || sid == 0) {
      return null;
    }
    byte flags = 0;
    if (sampled >= 0) {
      char c = sampledEnd - sampled == 1 ? v.charAt(sampled) : 0;
      if (c == '1') {
        flags = WeftSpanContext.SAMPLED;
      } else if (c != '0' && c != '?') {
        return null;
      }
    }
    return WeftSpanContext.createRemote(id.high, id.low, sid, flags, WeftTraceState.EMPTY, false,
        false, lineage < 0 ? null : v.substring(lineage, lineageEnd));
  }

  @Override
  public String toString() {
    return "XrayPropagator";
  }
}
