package io.weft.sdk.trace;

import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.api.trace.TraceStateBuilder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BiConsumer;

/**
 * An immutable W3C tracestate (spec/propagation.md "tracestate extract"), with the Level 2 key
 * grammar. The OpenTelemetry API's own builder applies Level 1 {@code tenant@system} limits, so weft
 * carries its own implementation of the {@link TraceState} interface.
 *
 * <p>Members keep their order and no key appears twice. The canonical serialisation is computed
 * at most once.
 */
public final class WeftTraceState implements TraceState {
  /** The empty tracestate. */
  public static final WeftTraceState EMPTY = new WeftTraceState(new String[0], 0);

  static final int MAX_MEMBERS = 32;
  static final int MAX_HEADER = 512;
  static final int MAX_MEMBER_TO_KEEP = 128;

  // keys at even, values at odd indices
  private final String[] kv;
  private final int size;
  private String canonical;

  private WeftTraceState(String[] kv, int size) {
    this.kv = kv;
    this.size = size;
  }

  /** Converts any {@link TraceState} to a weft one (members that weft's grammar refuses are kept). */
  public static WeftTraceState of(TraceState ts) {
    if (ts instanceof WeftTraceState) {
      return (WeftTraceState) ts;
    }
    if (ts == null || ts.isEmpty()) {
      return EMPTY;
    }
    List<String> l = new ArrayList<>();
    ts.forEach((k, v) -> {
      l.add(k);
      l.add(v);
    });
    return new WeftTraceState(l.toArray(new String[0]), l.size() / 2);
  }

  /**
   * Parses the values of the {@code tracestate} header lines, joined by {@code ,}. Returns the
   * tracestate, or {@link #EMPTY} when the header is absent or invalid (it is then discarded whole).
   */
  public static WeftTraceState parse(List<String> headerValues) {
    if (headerValues == null || headerValues.isEmpty()) {
      return EMPTY;
    }
    List<String> kv = new ArrayList<>();
    int received = 0;
    for (String value : headerValues) {
      int n = value.length();
      int start = 0;
      while (start <= n) {
        int comma = value.indexOf(',', start);
        int end = comma < 0 ? n : comma;
        int a = start;
        int b = end;
        while (a < b && isOws(value.charAt(a))) {
          a++;
        }
        while (b > a && isOws(value.charAt(b - 1))) {
          b--;
        }
        if (a < b) {
          received++;
          if (received > MAX_MEMBERS) {
            return EMPTY;
          }
          int eq = value.indexOf('=', a);
          if (eq < 0 || eq >= b) {
            return EMPTY;
          }
          if (!validKey(value, a, eq) || !validValue(value, eq + 1, b)) {
            return EMPTY;
          }
          String key = value.substring(a, eq);
          boolean dup = false;
          for (int i = 0; i < kv.size(); i += 2) {
            if (kv.get(i).equals(key)) {
              dup = true;
              break;
            }
          }
          if (!dup) {
            kv.add(key);
            kv.add(value.substring(eq + 1, b));
          }
        }
        if (comma < 0) {
          break;
        }
        start = comma + 1;
      }
    }
    if (kv.isEmpty()) {
      return EMPTY;
    }
    return new WeftTraceState(kv.toArray(new String[0]), kv.size() / 2);
  }

  /**
   * Parses a canonical string ({@code k=v,k=v}); returns {@link #EMPTY} for an empty or invalid one.
   */
  public static WeftTraceState parse(String canonical) {
    if (canonical == null || canonical.isEmpty()) {
      return EMPTY;
    }
    return parse(Collections.singletonList(canonical));
  }

  static boolean isOws(char c) {
    return c == ' ' || c == '\t';
  }

  /** Level 2 key: ( lcalpha / DIGIT ) 0*255( keychar ). */
  public static boolean validKey(CharSequence s, int from, int to) {
    int len = to - from;
    if (len < 1 || len > 256) {
      return false;
    }
    char c0 = s.charAt(from);
    if (!((c0 >= 'a' && c0 <= 'z') || (c0 >= '0' && c0 <= '9'))) {
      return false;
    }
    for (int i = from + 1; i < to; i++) {
      char c = s.charAt(i);
      boolean ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'
          || c == '*' || c == '/' || c == '@';
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  /** Value: 1-256 chars in 0x20-0x7E except ',' and '=', not ending in a space. */
  public static boolean validValue(CharSequence s, int from, int to) {
    int len = to - from;
    if (len < 1 || len > 256) {
      return false;
    }
    for (int i = from; i < to; i++) {
      char c = s.charAt(i);
      if (c < 0x20 || c > 0x7e || c == ',' || c == '=') {
        return false;
      }
    }
    return s.charAt(to - 1) != ' ';
  }

  @Override
  public String get(String key) {
    for (int i = 0; i < 2 * size; i += 2) {
      if (kv[i].equals(key)) {
        return kv[i + 1];
      }
    }
    return null;
  }

  /** Returns the key of member {@code i}. */
  public String keyAt(int i) {
    return kv[2 * i];
  }

  /** Returns the value of member {@code i}. */
  public String valueAt(int i) {
    return kv[2 * i + 1];
  }

  @Override
  public int size() {
    return size;
  }

  @Override
  public boolean isEmpty() {
    return size == 0;
  }

  @Override
  public void forEach(BiConsumer<String, String> consumer) {
    for (int i = 0; i < 2 * size; i += 2) {
      consumer.accept(kv[i], kv[i + 1]);
    }
  }

  @Override
  public Map<String, String> asMap() {
    Map<String, String> m = new LinkedHashMap<>();
    forEach(m::put);
    return Collections.unmodifiableMap(m);
  }

  @Override
  public TraceStateBuilder toBuilder() {
    return new Builder(this);
  }

  /** Returns a tracestate with {@code key=value} at the front (replacing any member of that key). */
  public WeftTraceState withFront(String key, String value) {
    List<String> l = new ArrayList<>(2 * size + 2);
    l.add(key);
    l.add(value);
    for (int i = 0; i < 2 * size; i += 2) {
      if (!kv[i].equals(key)) {
        l.add(kv[i]);
        l.add(kv[i + 1]);
      }
    }
    if (l.size() > 2 * MAX_MEMBERS) {
      l.subList(2 * MAX_MEMBERS, l.size()).clear();
    }
    return new WeftTraceState(l.toArray(new String[0]), l.size() / 2);
  }

  /** Returns a tracestate without the member {@code key}. */
  public WeftTraceState without(String key) {
    if (get(key) == null) {
      return this;
    }
    List<String> l = new ArrayList<>(2 * size);
    for (int i = 0; i < 2 * size; i += 2) {
      if (!kv[i].equals(key)) {
        l.add(kv[i]);
        l.add(kv[i + 1]);
      }
    }
    return l.isEmpty() ? EMPTY : new WeftTraceState(l.toArray(new String[0]), l.size() / 2);
  }

  /** The canonical serialisation: members joined by {@code ,}, no whitespace, not truncated. */
  @Override
  public String toString() {
    String c = canonical;
    if (c == null) {
      StringBuilder sb = new StringBuilder();
      for (int i = 0; i < 2 * size; i += 2) {
        if (i > 0) {
          sb.append(',');
        }
        sb.append(kv[i]).append('=').append(kv[i + 1]);
      }
      c = sb.toString();
      canonical = c; // racy single-check: String is immutable, recomputation is harmless
    }
    return c;
  }

  /**
   * The value to inject (spec/propagation.md "tracestate inject"): the canonical form truncated to
   * 512 characters, right-most members over 128 characters removed first.
   */
  public String toHeader() {
    String c = toString();
    if (c.length() <= MAX_HEADER) {
      return c;
    }
    boolean[] removed = new boolean[size];
    int len = c.length();
    for (int i = size - 1; i >= 0 && len > MAX_HEADER; i--) {
      int mlen = kv[2 * i].length() + 1 + kv[2 * i + 1].length();
      if (mlen > MAX_MEMBER_TO_KEEP) {
        removed[i] = true;
        len -= mlen + 1;
      }
    }
    for (int i = size - 1; i >= 0 && len > MAX_HEADER; i--) {
      if (!removed[i]) {
        removed[i] = true;
        len -= kv[2 * i].length() + 2 + kv[2 * i + 1].length();
      }
    }
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < size; i++) {
      if (!removed[i]) {
        if (sb.length() > 0) {
          sb.append(',');
        }
        sb.append(kv[2 * i]).append('=').append(kv[2 * i + 1]);
      }
    }
    return sb.toString();
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof WeftTraceState && toString().equals(o.toString());
  }

  @Override
  public int hashCode() {
    return toString().hashCode();
  }

  /** The {@link TraceStateBuilder}: {@code put} moves the key to the front, invalid input is ignored. */
  static final class Builder implements TraceStateBuilder {
    private WeftTraceState ts;

    Builder(WeftTraceState ts) {
      this.ts = ts;
    }

    @Override
    public TraceStateBuilder put(String key, String value) {
      if (key != null && value != null && validKey(key, 0, key.length())
          && validValue(value, 0, value.length())) {
        ts = ts.withFront(key, value);
      }
      return this;
    }

    @Override
    public TraceStateBuilder remove(String key) {
      if (key != null) {
        ts = ts.without(key);
      }
      return this;
    }

    @Override
    public TraceState build() {
      return ts;
    }
  }
}
