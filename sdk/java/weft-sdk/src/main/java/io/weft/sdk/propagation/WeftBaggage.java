package io.weft.sdk.propagation;

import io.opentelemetry.api.baggage.Baggage;
import io.opentelemetry.api.baggage.BaggageBuilder;
import io.opentelemetry.api.baggage.BaggageEntry;
import io.opentelemetry.api.baggage.BaggageEntryMetadata;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BiConsumer;

/**
 * An immutable baggage that keeps entry order (spec/propagation.md "W3C Baggage"): a key put again
 * takes the new value and metadata and keeps its position. The OpenTelemetry API's default
 * baggage sorts its keys, which would reorder headers on the next hop.
 */
public final class WeftBaggage implements Baggage {
  /** The empty baggage. */
  public static final WeftBaggage EMPTY = new WeftBaggage(Collections.emptyList());

  private final List<Entry> entries;

  private WeftBaggage(List<Entry> entries) {
    this.entries = entries;
  }

  /** Returns a new builder. */
  public static Builder builder() {
    return new Builder(new ArrayList<>());
  }

  /** Converts any baggage to a weft baggage (a foreign one is taken in its own iteration order). */
  public static WeftBaggage of(Baggage b) {
    if (b instanceof WeftBaggage) {
      return (WeftBaggage) b;
    }
    if (b == null || b.isEmpty()) {
      return EMPTY;
    }
    Builder builder = builder();
    b.forEach((k, e) -> builder.put(k, e.getValue(), e.getMetadata()));
    return builder.build();
  }

  /** One entry. */
  public static final class Entry implements BaggageEntry {
    final String key;
    final String value;
    final BaggageEntryMetadata metadata;

    Entry(String key, String value, BaggageEntryMetadata metadata) {
      this.key = key;
      this.value = value;
      this.metadata = metadata;
    }

    public String key() {
      return key;
    }

    @Override
    public String getValue() {
      return value;
    }

    @Override
    public BaggageEntryMetadata getMetadata() {
      return metadata;
    }

    @Override
    public String toString() {
      return key + "=" + value + (metadata.getValue().isEmpty() ? "" : ";" + metadata.getValue());
    }
  }

  /** The entries in order. */
  public List<Entry> entries() {
    return entries;
  }

  @Override
  public int size() {
    return entries.size();
  }

  @Override
  public void forEach(BiConsumer<? super String, ? super BaggageEntry> consumer) {
    for (Entry e : entries) {
      consumer.accept(e.key, e);
    }
  }

  @Override
  public Map<String, BaggageEntry> asMap() {
    Map<String, BaggageEntry> m = new LinkedHashMap<>();
    for (Entry e : entries) {
      m.put(e.key, e);
    }
    return Collections.unmodifiableMap(m);
  }

  @Override
  public String getEntryValue(String key) {
    BaggageEntry e = getEntry(key);
    return e == null ? null : e.getValue();
  }

  @Override
  public BaggageEntry getEntry(String key) {
    for (Entry e : entries) {
      if (e.key.equals(key)) {
        return e;
      }
    }
    return null;
  }

  @Override
  public BaggageBuilder toBuilder() {
    return new Builder(new ArrayList<>(entries));
  }

  @Override
  public String toString() {
    return entries.toString();
  }

  /** Builds a {@link WeftBaggage}. */
  public static final class Builder implements BaggageBuilder {
    private final List<Entry> entries;

    Builder(List<Entry> entries) {
      this.entries = entries;
    }

    @Override
    public Builder put(String key, String value, BaggageEntryMetadata metadata) {
      if (key == null || value == null) {
        return this;
      }
      Entry e = new Entry(key, value, metadata == null ? BaggageEntryMetadata.empty() : metadata);
      for (int i = 0; i < entries.size(); i++) {
        if (entries.get(i).key.equals(key)) {
          entries.set(i, e);
          return this;
        }
      }
      entries.add(e);
      return this;
    }

    @Override
    public Builder put(String key, String value) {
      return put(key, value, BaggageEntryMetadata.empty());
    }

    @Override
    public Builder remove(String key) {
      entries.removeIf(e -> e.key.equals(key));
      return this;
    }

    @Override
    public WeftBaggage build() {
      return entries.isEmpty() ? EMPTY : new WeftBaggage(List.copyOf(entries));
    }
  }
}
