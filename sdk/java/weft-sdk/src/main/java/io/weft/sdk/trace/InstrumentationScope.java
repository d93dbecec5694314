package io.weft.sdk.trace;

import java.util.Objects;

/** The instrumentation scope of a tracer: name, version, schema URL and attributes. */
public final class InstrumentationScope {
  private final String name;
  private final String version;
  private final String schemaUrl;
  private final AttributeList attributes;

  public InstrumentationScope(String name, String version, String schemaUrl,
      AttributeList attributes) {
    this.name = name == null ? "" : name;
    this.version = version;
    this.schemaUrl = schemaUrl;
    this.attributes = attributes;
  }

  public String name() {
    return name;
  }

  /** The version, or null. */
  public String version() {
    return version;
  }

  /** The schema URL, or null. */
  public String schemaUrl() {
    return schemaUrl;
  }

  /** The attributes, or null. */
  public AttributeList attributes() {
    return attributes;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof InstrumentationScope)) {
      return false;
    }
    InstrumentationScope s = (InstrumentationScope) o;
    return name.equals(s.name) && Objects.equals(version, s.version)
        && Objects.equals(schemaUrl, s.schemaUrl)
        && Objects.equals(String.valueOf(attributes), String.valueOf(s.attributes));
  }

  @Override
  public int hashCode() {
    return Objects.hash(name, version, schemaUrl);
  }
}
