package io.weft.sdk.trace;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.Value;
import java.util.ArrayList;
import java.util.List;

/**
 * Attributes in recording order, with a count limit, a value length limit and a count of what
 * the limits dropped (spec/otlp.md: "a repeated attribute key keeps its first position with its
 * last value").
 *
 * <p>Values are kept unboxed: a type tag per entry, numbers in a {@code long[]} (doubles as raw
 * bits) and everything else in an {@code Object[]}. {@code Span.setAttribute(String, long)}
 * therefore allocates neither a boxed {@code Long} nor an {@link AttributeKey} (the
 * span_sampled_4_attrs benchmark). Not thread-safe: the owning span synchronises.
 *
 * <p>Sealed: a {@link SpanRecord} is its span's attribute list (see there why), and nothing else
 * extends it.
 */
public sealed class AttributeList permits SpanRecord {
  public static final byte STRING = 0;
  public static final byte BOOLEAN = 1;
  public static final byte LONG = 2;
  public static final byte DOUBLE = 3;
  public static final byte STRING_ARRAY = 4;
  public static final byte BOOLEAN_ARRAY = 5;
  public static final byte LONG_ARRAY = 6;
  public static final byte DOUBLE_ARRAY = 7;
  /** An {@link Value} (any OTLP AnyValue: bytes, kvlist, nested arrays, empty). */
  public static final byte VALUE = 8;

  private final int maxCount;
  private final int maxValueLength;
  private String[] keys;
  private int[] hashes;
  private byte[] types;
  private long[] nums;
  private Object[] objs;
  private int size;
  private int dropped;

  public AttributeList(int maxCount, int maxValueLength) {
    this.maxCount = maxCount;
    this.maxValueLength = maxValueLength;
  }

  /** An unlimited list. */
  public AttributeList() {
    this(Integer.MAX_VALUE, Integer.MAX_VALUE);
  }

  /** A limited copy of {@code attributes}, or null when it is empty. */
  public static AttributeList of(Attributes attributes, int maxCount, int maxValueLength) {
    if (attributes == null || attributes.isEmpty()) {
      return null;
    }
    AttributeList l = new AttributeList(maxCount, maxValueLength);
    attributes.forEach(l::putAny);
    return l;
  }

  public int size() {
    return size;
  }

  /**
   * Empties the list for reuse, keeping its arrays unless they hold more than {@code keep}
   * entries; drops every reference to the old keys and values.
   */
  public void clear(int keep) {
    if (keys != null) {
      if (keys.length > keep) {
        keys = null;
        hashes = null;
        types = null;
        nums = null;
        objs = null;
      } else {
        java.util.Arrays.fill(keys, 0, size, null);
        java.util.Arrays.fill(objs, 0, size, null);
      }
    }
    size = 0;
    dropped = 0;
  }

  /** Puts every entry of {@code attributes} (which may be null). */
  public void putAll(Attributes attributes) {
    if (attributes != null && !attributes.isEmpty()) {
      attributes.forEach(this::putAny);
    }
  }

  /** How many attributes the count limit dropped. */
  public int dropped() {
    return dropped;
  }

  /** Adds to the dropped count (attributes discarded before they reached this list). */
  public void addDropped(int n) {
    dropped += n;
  }

  public String key(int i) {
    return keys[i];
  }

  public byte type(int i) {
    return types[i];
  }

  public long longValue(int i) {
    return nums[i];
  }

  public double doubleValue(int i) {
    return Double.longBitsToDouble(nums[i]);
  }

  public boolean booleanValue(int i) {
    return nums[i] != 0;
  }

  public Object objectValue(int i) {
    return objs[i];
  }

  /** Returns the index to write key's value at, or -1 when the count limit drops it. */
  private int slot(String key) {
    // The keys' hashes are kept in an int[], so that looking for a repeated key scans one small
    // array instead of loading every key String (span_sampled_10_attrs_1_event benchmark: the
    // scan was 18 % of the span's time); equal hashes are confirmed by identity first, since
    // instrumentation passes the same constant key strings every time.
    int h = key.hashCode();
    int[] hs = hashes;
    for (int i = 0; i < size; i++) {
      if (hs[i] == h) {
        String k = keys[i];
        if (k == key || k.equals(key)) {
          return i;
        }
      }
    }
    if (size >= maxCount) {
      dropped++;
      return -1;
    }
    if (keys == null) {
      int cap = Math.min(8, maxCount);
      keys = new String[cap];
      hashes = new int[cap];
      types = new byte[cap];
      nums = new long[cap];
      objs = new Object[cap];
    } else if (size == keys.length) {
      int cap = (int) Math.min((long) maxCount, 2L * size);
      keys = java.util.Arrays.copyOf(keys, cap);
      hashes = java.util.Arrays.copyOf(hashes, cap);
      types = java.util.Arrays.copyOf(types, cap);
      nums = java.util.Arrays.copyOf(nums, cap);
      objs = java.util.Arrays.copyOf(objs, cap);
    }
    keys[size] = key;
    hashes[size] = h;
    return size++;
  }

  public void putString(String key, String value) {
    if (key == null || value == null) {
      return;
    }
    int i = slot(key);
    if (i >= 0) {
      types[i] = STRING;
      objs[i] = value.length() > maxValueLength ? value.substring(0, maxValueLength) : value;
      nums[i] = 0;
    }
  }

  public void putLong(String key, long value) {
    if (key == null) {
      return;
    }
    int i = slot(key);
    if (i >= 0) {
      types[i] = LONG;
      nums[i] = value;
      objs[i] = null;
    }
  }

  public void putDouble(String key, double value) {
    if (key == null) {
      return;
    }
    int i = slot(key);
    if (i >= 0) {
      types[i] = DOUBLE;
      nums[i] = Double.doubleToRawLongBits(value);
      objs[i] = null;
    }
  }

  public void putBoolean(String key, boolean value) {
    if (key == null) {
      return;
    }
    int i = slot(key);
    if (i >= 0) {
      types[i] = BOOLEAN;
      nums[i] = value ? 1 : 0;
      objs[i] = null;
    }
  }

  /** Puts an {@link Value} (bytes, kvlist, nested arrays and the plain types). */
  public void putValue(String key, Value<?> value) {
    if (key == null || value == null) {
      return;
    }
    switch (value.getType()) {
      case STRING:
        putString(key, (String) value.getValue());
        return;
      case LONG:
        putLong(key, (Long) value.getValue());
        return;
      case DOUBLE:
        putDouble(key, (Double) value.getValue());
        return;
      case BOOLEAN:
        putBoolean(key, (Boolean) value.getValue());
        return;
      default:
        int i = slot(key);
        if (i >= 0) {
          types[i] = VALUE;
          objs[i] = value;
          nums[i] = 0;
        }
    }
  }

  private void putList(String key, byte type, List<?> value) {
    if (key == null || value == null) {
      return;
    }
    int i = slot(key);
    if (i >= 0) {
      if (type == STRING_ARRAY && maxValueLength != Integer.MAX_VALUE) {
        List<String> t = new ArrayList<>(value.size());
        for (Object o : value) {
          String s = (String) o;
          t.add(s != null && s.length() > maxValueLength ? s.substring(0, maxValueLength) : s);
        }
        value = t;
      }
      types[i] = type;
      objs[i] = List.copyOf(value.stream().filter(java.util.Objects::nonNull)
          .collect(java.util.stream.Collectors.toList()));
      nums[i] = 0;
    }
  }

  /** {@link #putKey} for the wildcard types of {@code Attributes.forEach}. */
  @SuppressWarnings("unchecked")
  public void putAny(AttributeKey<?> key, Object value) {
    putKey((AttributeKey<Object>) key, value);
  }

  /** Puts a value under an {@link AttributeKey}, dispatching on its type. */
  @SuppressWarnings("unchecked")
  public <T> void putKey(AttributeKey<T> key, T value) {
    if (key == null || value == null) {
      return;
    }
    String k = key.getKey();
    if (k == null || k.isEmpty()) {
      return;
    }
    switch (key.getType()) {
      case STRING:
        putString(k, (String) value);
        break;
      case BOOLEAN:
        putBoolean(k, (Boolean) value);
        break;
      case LONG:
        putLong(k, ((Number) value).longValue());
        break;
      case DOUBLE:
        putDouble(k, ((Number) value).doubleValue());
        break;
      case STRING_ARRAY:
        putList(k, STRING_ARRAY, (List<?>) value);
        break;
      case BOOLEAN_ARRAY:
        putList(k, BOOLEAN_ARRAY, (List<?>) value);
        break;
      case LONG_ARRAY:
        putList(k, LONG_ARRAY, (List<?>) value);
        break;
      case DOUBLE_ARRAY:
        putList(k, DOUBLE_ARRAY, (List<?>) value);
        break;
      case VALUE:
        putValue(k, (Value<?>) value);
        break;
      default:
        break;
    }
  }

  /** The value at {@code i} as a Java object (boxed), for tests and debugging. */
  public Object get(int i) {
    switch (types[i]) {
      case LONG:
        return nums[i];
      case DOUBLE:
        return doubleValue(i);
      case BOOLEAN:
        return nums[i] != 0;
      default:
        return objs[i];
    }
  }

  /** The value of {@code key} (boxed), or null. */
  public Object get(String key) {
    for (int i = 0; i < size; i++) {
      if (keys[i].equals(key)) {
        return get(i);
      }
    }
    return null;
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("{");
    for (int i = 0; i < size; i++) {
      if (i > 0) {
        sb.append(", ");
      }
      sb.append(keys[i]).append('=').append(get(i));
    }
    return sb.append('}').toString();
  }
}
