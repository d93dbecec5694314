package io.weft.sdk.propagation;

import io.opentelemetry.api.baggage.Baggage;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import io.weft.sdk.trace.WeftSpanContext;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

/** Header handling shared by the propagators (spec/propagation.md "Carriers"). */
final class Carriers {
  private Carriers() {}

  static boolean isOws(char c) {
    return c == ' ' || c == '\t';
  }

  /** Trims SP and HTAB only. */
  static String trim(String s) {
    int a = 0;
    int b = s.length();
    while (a < b && isOws(s.charAt(a))) {
      a++;
    }
    while (b > a && isOws(s.charAt(b - 1))) {
      b--;
    }
    return a == 0 && b == s.length() ? s : s.substring(a, b);
  }

  /**
   * Whether a getter class overrides {@code getAll}. The default {@code getAll} wraps {@code get}
   * in a new singleton iterator; for getters that do not override it, {@link #single} reads the
   * one value with {@code get} and allocates nothing (traceparent_extract benchmark).
   */
  private static final ClassValue<Boolean> MULTI_VALUED = new ClassValue<>() {
    @Override
    protected Boolean computeValue(Class<?> type) {
      try {
        return type.getMethod("getAll", Object.class, String.class).getDeclaringClass()
            != TextMapGetter.class;
      } catch (NoSuchMethodException | SecurityException e) {
        return true;
      }
    }
  };

  /** Marks a header present more than once in {@link #single}. */
  static final String DUPLICATE = new String("duplicate");

  /** Whether {@code getter} overrides {@code getAll}: look it up once per extract. */
  static boolean multiValued(TextMapGetter<?> getter) {
    return MULTI_VALUED.get(getter.getClass());
  }

  /**
   * The only value of a header that must appear at most once: null when absent,
   * {@link #DUPLICATE} (compare by identity) when present more than once; untrimmed.
   * {@code multiValued}: {@link #multiValued} of the getter.
   */
  static <C> String single(boolean multiValued, TextMapGetter<C> getter, C carrier, String name) {
    if (!multiValued) {
      return getter.get(carrier, name);
    }
    Iterator<String> it = getter.getAll(carrier, name);
    if (it == null || !it.hasNext()) {
      return null;
    }
    String v = it.next();
    return it.hasNext() ? DUPLICATE : v;
  }

  /** Every value of a header, trimmed, in order; empty when absent. */
  static <C> List<String> all(TextMapGetter<C> getter, C carrier, String name) {
    return all(multiValued(getter), getter, carrier, name);
  }

  /** {@link #all} with {@link #multiValued} already known. */
  static <C> List<String> all(boolean multiValued, TextMapGetter<C> getter, C carrier,
      String name) {
    if (!multiValued) {
      String v = getter.get(carrier, name);
      return v == null ? List.of() : List.of(trim(v));
    }
    Iterator<String> it = getter.getAll(carrier, name);
    if (it == null || !it.hasNext()) {
      return List.of();
    }
    List<String> out = new ArrayList<>(2);
    while (it.hasNext()) {
      String v = it.next();
      if (v != null) {
        out.add(trim(v));
      }
    }
    return out;
  }

  /** The first value of a single-valued header, trimmed; null when absent or empty. */
  static <C> String first(TextMapGetter<C> getter, C carrier, String name) {
    String v = getter.get(carrier, name);
    if (v == null) {
      return null;
    }
    v = trim(v);
    return v.isEmpty() ? null : v;
  }

  /** The valid span context of {@code ctx}, or null. */
  static WeftSpanContext spanContext(Context ctx) {
    Span span = Span.fromContextOrNull(ctx);
    if (span == null) {
      return null;
    }
    WeftSpanContext sc = WeftSpanContext.of(span.getSpanContext());
    return sc.isValid() ? sc : null;
  }

  /**
   * {@code ctx} with {@code sc} as its span (the context is its own non-recording span); one
   * object when {@code ctx} is the root ({@link RemoteParentContext}).
   */
  static Context withSpanContext(Context ctx, WeftSpanContext sc) {
    return RemoteParentContext.with(ctx, sc);
  }

  static WeftBaggage baggage(Context ctx) {
    Baggage b = Baggage.fromContextOrNull(ctx);
    return b == null ? WeftBaggage.EMPTY : WeftBaggage.of(b);
  }

  /** RFC 7230 token. */
  static boolean isToken(String s) {
    if (s.isEmpty()) {
      return false;
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
          || "!#$%&'*+-.^_`|~".indexOf(c) >= 0;
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  static boolean isBaggageOctet(int b) {
    return b == 0x21 || (b >= 0x23 && b <= 0x2b) || (b >= 0x2d && b <= 0x3a)
        || (b >= 0x3c && b <= 0x5b) || (b >= 0x5d && b <= 0x7e);
  }

  /**
   * Decodes bytes as UTF-8 replacing each byte that is not part of a well-formed sequence with
   * one U+FFFD (as Go's decoder does; spec/propagation.md baggage rule 7).
   */
  static String decodeUtf8Lenient(byte[] b, int len) {
    StringBuilder sb = new StringBuilder(len);
    int i = 0;
    while (i < len) {
      int c = b[i] & 0xff;
      if (c < 0x80) {
        sb.append((char) c);
        i++;
        continue;
      }
      int need;
      int cp;
      int lo = 0x80;
      int hi = 0xbf;
      if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        cp = c & 0x1f;
      } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        cp = c & 0x0f;
        if (c == 0xe0) {
          lo = 0xa0;
        } else if (c == 0xed) {
          hi = 0x9f;
        }
      } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        cp = c & 0x07;
        if (c == 0xf0) {
          lo = 0x90;
        } else if (c == 0xf4) {
          hi = 0x8f;
        }
      } else {
        sb.append('\ufffd');
        i++;
        continue;
      }
      if (i + need >= len) {
        sb.append('\ufffd'); // truncated sequence
        i++;
        continue;
      }
      boolean ok = true;
      for (int k = 1; k <= need; k++) {
        int cc = b[i + k] & 0xff;
        int l = k == 1 ? lo : 0x80;
        int h = k == 1 ? hi : 0xbf;
        if (cc < l || cc > h) {
          ok = false;
          break;
        }
        cp = (cp << 6) | (cc & 0x3f);
      }
      if (!ok) {
        sb.append('\ufffd');
        i++;
        continue;
      }
      sb.appendCodePoint(cp);
      i += need + 1;
    }
    return sb.toString();
  }

  /**
   * Percent-decodes {@code s}; {@code plusIsSpace} for form encoding. Returns null when a
   * {@code %} is not followed by two hex digits.
   */
  static String percentDecode(String s, boolean plusIsSpace) {
    if (s.indexOf('%') < 0 && (!plusIsSpace || s.indexOf('+') < 0)) {
      boolean ascii = true;
      for (int i = 0; i < s.length(); i++) {
        if (s.charAt(i) >= 0x80) {
          ascii = false;
          break;
        }
      }
      if (ascii) {
        return s;
      }
    }
    byte[] in = s.getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[in.length];
    int n = 0;
    for (int i = 0; i < in.length; i++) {
      byte c = in[i];
      if (c == '%') {
        if (i + 2 >= in.length) {
          return null;
        }
        int h = io.weft.sdk.id.Hex.digitAnyCase((char) (in[i + 1] & 0xff));
        int l = io.weft.sdk.id.Hex.digitAnyCase((char) (in[i + 2] & 0xff));
        if (h < 0 || l < 0) {
          return null;
        }
        out[n++] = (byte) ((h << 4) | l);
        i += 2;
      } else if (c == '+' && plusIsSpace) {
        out[n++] = ' ';
      } else {
        out[n++] = c;
      }
    }
    return decodeUtf8Lenient(out, n);
  }
}
