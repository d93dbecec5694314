package io.weft.sdk;

import io.opentelemetry.context.propagation.TextMapGetter;
import io.opentelemetry.context.propagation.TextMapSetter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * An HTTP-like carrier as spec/README.md describes it: header names are case-insensitive (keys that
 * differ only in case are concatenated in order), and every value of a header is visible.
 */
public final class TestCarrier {
  /** Lowercased name to values, in order. */
  public final Map<String, List<String>> headers = new LinkedHashMap<>();
  /** Names as first received. */
  public final Map<String, String> names = new LinkedHashMap<>();
  /** What inject set: name to value. */
  public final Map<String, String> injected = new LinkedHashMap<>();

  public TestCarrier add(String name, String value) {
    String k = name.toLowerCase(Locale.ROOT);
    headers.computeIfAbsent(k, x -> new ArrayList<>()).add(value);
    names.putIfAbsent(k, name);
    return this;
  }

  public static final TextMapGetter<TestCarrier> GETTER = new TextMapGetter<>() {
    @Override
    public Iterable<String> keys(TestCarrier c) {
      return new ArrayList<>(c.names.values());
    }

    @Override
    public String get(TestCarrier c, String key) {
      if (c == null) {
        return null;
      }
      List<String> v = c.headers.get(key.toLowerCase(Locale.ROOT));
      return v == null || v.isEmpty() ? null : v.get(0);
    }

    @Override
    public Iterator<String> getAll(TestCarrier c, String key) {
      if (c == null) {
        return Collections.emptyIterator();
      }
      List<String> v = c.headers.get(key.toLowerCase(Locale.ROOT));
      return v == null ? Collections.emptyIterator() : v.iterator();
    }
  };

  public static final TextMapSetter<TestCarrier> SETTER = (c, k, v) -> {
    if (c != null) {
      c.injected.put(k, v);
    }
  };
}
