package io.weft.sdk.trace;

import java.util.Map;

/** The resource of a provider: attributes (including {@code service.name}) and a schema URL. */
public final class Resource {
  private final AttributeList attributes;
  private final String schemaUrl;

  public Resource(AttributeList attributes, String schemaUrl) {
    this.attributes = attributes == null ? new AttributeList() : attributes;
    this.schemaUrl = schemaUrl;
  }

  /** A resource with {@code service.name} and the SDK's telemetry attributes. */
  public static Resource create(String serviceName) {
    AttributeList a = new AttributeList();
    a.putString("service.name", serviceName);
    a.putString("telemetry.sdk.name", "weft");
    a.putString("telemetry.sdk.language", "java");
    a.putString("telemetry.sdk.version", Version.VERSION);
    return new Resource(a, null);
  }

  /**
   * From {@code OTEL_SERVICE_NAME} and {@code OTEL_RESOURCE_ATTRIBUTES}
   * ({@code k=v,k=v}, values percent-decoded); {@code service.name} defaults to
   * {@code unknown_service:java}.
   */
  public static Resource fromEnv(Map<String, String> env) {
    AttributeList a = new AttributeList();
    String svc = env.get("OTEL_SERVICE_NAME");
    String ra = env.get("OTEL_RESOURCE_ATTRIBUTES");
    String fromAttrs = null;
    AttributeList rest = new AttributeList();
    if (ra != null) {
      for (String kv : ra.split(",")) {
        int eq = kv.indexOf('=');
        if (eq <= 0) {
          continue;
        }
        String k = kv.substring(0, eq).trim();
        String v = java.net.URLDecoder.decode(kv.substring(eq + 1).trim().replace("+", "%2B"),
            java.nio.charset.StandardCharsets.UTF_8);
        if (k.equals("service.name")) {
          fromAttrs = v;
        } else {
          rest.putString(k, v);
        }
      }
    }
    String name = svc != null && !svc.isBlank() ? svc
        : fromAttrs != null ? fromAttrs : "unknown_service:java";
    a.putString("service.name", name);
    for (int i = 0; i < rest.size(); i++) {
      a.putString(rest.key(i), (String) rest.objectValue(i));
    }
    a.putString("telemetry.sdk.name", "weft");
    a.putString("telemetry.sdk.language", "java");
    a.putString("telemetry.sdk.version", Version.VERSION);
    return new Resource(a, null);
  }

  public AttributeList attributes() {
    return attributes;
  }

  /** The schema URL, or null. */
  public String schemaUrl() {
    return schemaUrl;
  }
}
