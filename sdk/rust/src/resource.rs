//! The resource every exported span belongs to.

use opentelemetry::KeyValue;

/// The SDK's single resource: attributes, an optional schema URL and a dropped count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resource {
    /// Resource attributes.
    pub attributes: Vec<KeyValue>,
    /// Schema URL.
    pub schema_url: Option<String>,
    /// Attributes dropped before the resource reached the SDK.
    pub dropped_attributes_count: u32,
}

impl Resource {
    /// Returns a resource with `service.name` and the `telemetry.sdk.*` attributes.
    pub fn new(service_name: impl Into<String>) -> Self {
        Resource {
            attributes: vec![
                KeyValue::new("service.name", service_name.into()),
                KeyValue::new("telemetry.sdk.name", "weft"),
                KeyValue::new("telemetry.sdk.language", "rust"),
                KeyValue::new("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
            ],
            schema_url: None,
            dropped_attributes_count: 0,
        }
    }

    /// Builds the resource from `OTEL_SERVICE_NAME` (default `unknown_service`) and
    /// `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`, percent-decoded; `service.name` there is used
    /// when `OTEL_SERVICE_NAME` is unset).
    pub fn from_env() -> Self {
        let mut extra: Vec<(String, String)> = Vec::new();
        if let Ok(v) = std::env::var("OTEL_RESOURCE_ATTRIBUTES") {
            for kv in v.split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    let k = k.trim();
                    if let (false, Some(v)) = (k.is_empty(), crate::baggage::percent_decode(v.trim(), false)) {
                        extra.push((k.to_owned(), v));
                    }
                }
            }
        }
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| extra.iter().find(|(k, _)| k == "service.name").map(|(_, v)| v.clone()))
            .unwrap_or_else(|| "unknown_service".into());
        let mut r = Resource::new(service);
        for (k, v) in extra {
            if k != "service.name" {
                r.attributes.push(KeyValue::new(k, v));
            }
        }
        r
    }

    /// Returns the `service.name` attribute.
    pub fn service_name(&self) -> Option<String> {
        self.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "service.name")
            .map(|kv| kv.value.as_str().into_owned())
    }

    /// Adds or replaces an attribute.
    pub fn with_attribute(mut self, kv: KeyValue) -> Self {
        self.attributes.retain(|a| a.key != kv.key);
        self.attributes.push(kv);
        self
    }
}
