//! Stored OTLP spans as Zipkin v2 spans, for the Zipkin query API. The inverse of
//! [`super::to_otlp`] for spans that came in as Zipkin (a Zipkin span reads back as Zipkin
//! wrote it, up to the normalisations Zipkin applies itself), and the Collector's Zipkin
//! exporter mapping for the others. Names are lower-cased, as Zipkin stores them.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value};
use weft_otlp::pb::trace::Span as OtlpSpan;

use super::{Kind, keys};
use crate::otlp::{kind, status};

/// A Zipkin network endpoint, as text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OutEndpoint {
    pub service_name: Option<String>,
    pub ipv4: Option<String>,
    pub ipv6: Option<String>,
    pub port: Option<u16>,
}

/// A Zipkin v2 span, ready to be written as JSON or tested by a Zipkin query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutSpan {
    pub trace_id: String,
    pub parent_id: Option<String>,
    pub id: String,
    pub kind: Option<Kind>,
    pub name: Option<String>,
    /// Microseconds; 0 when absent.
    pub timestamp: u64,
    /// Microseconds; 0 when absent.
    pub duration: u64,
    pub local: Option<OutEndpoint>,
    pub remote: Option<OutEndpoint>,
    pub annotations: Vec<(u64, String)>,
    pub tags: BTreeMap<String, String>,
    pub shared: bool,
    pub debug: bool,
}

impl OutSpan {
    pub fn local_service(&self) -> Option<&str> {
        self.local.as_ref().and_then(|e| e.service_name.as_deref())
    }

    pub fn remote_service(&self) -> Option<&str> {
        self.remote.as_ref().and_then(|e| e.service_name.as_deref())
    }

    /// Zipkin v2 JSON, fields omitted when empty, as Zipkin writes them.
    pub fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("traceId".into(), json!(self.trace_id));
        if let Some(p) = &self.parent_id {
            m.insert("parentId".into(), json!(p));
        }
        m.insert("id".into(), json!(self.id));
        if let Some(k) = self.kind {
            m.insert("kind".into(), json!(k.as_str()));
        }
        if let Some(n) = &self.name {
            m.insert("name".into(), json!(n));
        }
        if self.timestamp != 0 {
            m.insert("timestamp".into(), json!(self.timestamp));
        }
        if self.duration != 0 {
            m.insert("duration".into(), json!(self.duration));
        }
        if let Some(e) = &self.local {
            m.insert("localEndpoint".into(), endpoint_json(e));
        }
        if let Some(e) = &self.remote {
            m.insert("remoteEndpoint".into(), endpoint_json(e));
        }
        if !self.annotations.is_empty() {
            let a: Vec<Json> = self
                .annotations
                .iter()
                .map(|(t, v)| json!({"timestamp": t, "value": v}))
                .collect();
            m.insert("annotations".into(), Json::Array(a));
        }
        if !self.tags.is_empty() {
            m.insert("tags".into(), json!(self.tags));
        }
        if self.debug {
            m.insert("debug".into(), json!(true));
        }
        if self.shared {
            m.insert("shared".into(), json!(true));
        }
        Json::Object(m)
    }
}

fn endpoint_json(e: &OutEndpoint) -> Json {
    let mut m = Map::new();
    if let Some(s) = &e.service_name {
        m.insert("serviceName".into(), json!(s));
    }
    if let Some(s) = &e.ipv4 {
        m.insert("ipv4".into(), json!(s));
    }
    if let Some(s) = &e.ipv6 {
        m.insert("ipv6".into(), json!(s));
    }
    if let Some(p) = e.port {
        m.insert("port".into(), json!(p));
    }
    Json::Object(m)
}

/// Zipkin's trace ID text: 16 hex digits when the high half is zero, else 32.
pub fn trace_id_hex(id: &[u8]) -> String {
    if id.len() == 16 && id[..8] == [0; 8] {
        weft_core::hex(&id[8..])
    } else {
        weft_core::hex(id)
    }
}

/// An attribute value as Zipkin tag text (the Collector's `AsString`).
pub fn value_text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(b)) => {
            use std::fmt::Write;
            // The Collector writes bytes as base64; hex is unambiguous and needs no codec.
            b.iter().fold(String::new(), |mut s, x| {
                let _ = write!(s, "{x:02x}");
                s
            })
        }
        Some(other) => any_json(&AnyValue {
            value: Some(other.clone()),
        })
        .to_string(),
    }
}

fn any_json(v: &AnyValue) -> Json {
    match &v.value {
        None => Json::Null,
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::BytesValue(b)) => json!(weft_core::hex(b)),
        Some(any_value::Value::ArrayValue(a)) => Json::Array(a.values.iter().map(any_json).collect()),
        Some(any_value::Value::KvlistValue(l)) => Json::Object(
            l.values
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Json::Null, any_json)))
                .collect(),
        ),
    }
}

fn attrs_json(attrs: &[KeyValue]) -> String {
    let m: Map<String, Json> = attrs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Json::Null, any_json)))
        .collect();
    Json::Object(m).to_string()
}

/// The service a resource names: `service.name`, else (as the Collector) `faas.name`,
/// `k8s.deployment.name` or `process.executable.name`.
pub fn resource_service(resource: &[KeyValue]) -> Option<(String, &'static str)> {
    for key in [
        keys::SERVICE_NAME,
        "faas.name",
        "k8s.deployment.name",
        "process.executable.name",
    ] {
        if let Some(kv) = resource.iter().find(|kv| kv.key == key) {
            return Some((value_text(kv.value.as_ref()), key));
        }
    }
    None
}

/// Converts one stored span. `resource` and `scope` are its resource attributes and
/// instrumentation scope name and version.
pub fn from_otlp(resource: &[KeyValue], scope: (&str, &str), span: &OtlpSpan) -> OutSpan {
    let service = resource_service(resource);
    let mut tags = resource_tags(resource, scope, service.as_ref().map(|(_, k)| *k));
    let mut attrs: BTreeMap<&str, &KeyValue> = BTreeMap::new();
    for kv in &span.attributes {
        attrs.insert(kv.key.as_str(), kv);
    }
    let mut take = |k: &str| attrs.remove(k).map(|kv| value_text(kv.value.as_ref()));

    let mut out = OutSpan {
        trace_id: trace_id_hex(&span.trace_id),
        ..OutSpan::default()
    };
    let original = take(keys::ORIGINAL).and_then(|o| serde_json::from_str::<Json>(&o).ok());
    let shared_id = take(keys::SHARED_ID);
    let shared_parent = take(keys::SHARED_PARENT);
    match shared_id {
        Some(id) if span.kind == i32::from(kind::SERVER) => {
            out.id = id;
            out.parent_id = shared_parent;
            out.shared = true;
        }
        _ => {
            out.id = weft_core::hex(&span.span_id);
            out.parent_id = (span.parent_span_id.len() == 8 && *span.parent_span_id != [0; 8])
                .then(|| weft_core::hex(&span.parent_span_id));
        }
    }
    out.kind = match u8::try_from(span.kind).unwrap_or(0) {
        kind::CLIENT => Some(Kind::Client),
        kind::SERVER => Some(Kind::Server),
        kind::PRODUCER => Some(Kind::Producer),
        kind::CONSUMER => Some(Kind::Consumer),
        kind::INTERNAL => {
            tags.insert(keys::SPAN_KIND.into(), "internal".into());
            None
        }
        _ => None,
    };
    out.name = Some(span.name.to_lowercase()).filter(|n| !n.is_empty());
    let start_absent = take(keys::START_ABSENT).is_some_and(|v| v == "true");
    // Zipkin has microseconds: rounded to the nearest, as the OpenTelemetry exporters and the
    // Collector round (exact for spans that came in as Zipkin); a span shorter than 0.5 µs
    // still lasted, so it lasts 1 µs.
    if !start_absent {
        out.timestamp = span.start_time_unix_nano.saturating_add(500) / 1000;
    }
    if span.end_time_unix_nano > span.start_time_unix_nano {
        out.duration = ((span.end_time_unix_nano - span.start_time_unix_nano).saturating_add(500) / 1000).max(1);
    }

    let host_ip = take(keys::NET_HOST_IP);
    let host_port = port(take(keys::NET_HOST_PORT));
    out.local = endpoint(service.map(|(s, _)| s), host_ip, host_port);
    let mut peer = take(keys::PEER_SERVICE);
    if let Some(o) = &original {
        // The remote endpoint's name as sent; a `peer.service` tag returns as a tag (below).
        peer = o.get("remoteService").and_then(Json::as_str).map(str::to_owned);
    }
    let peer_ip = take(keys::NET_PEER_IP);
    let peer_port = port(take(keys::NET_PEER_PORT));
    out.remote = endpoint(peer, peer_ip, peer_port);
    for (k, kv) in attrs {
        tags.insert(k.to_owned(), value_text(kv.value.as_ref()));
    }
    if !span.trace_state.is_empty() {
        tags.insert(keys::TRACESTATE.into(), span.trace_state.clone());
    }
    status_tags(&mut tags, span);
    link_tags(&mut tags, span);
    if let Some(o) = &original {
        restore_original(&mut out, &mut tags, o);
    }
    out.annotations = annotations(span);
    out.tags = tags;
    out
}

/// The tags a span takes from its resource (but the attribute that names its service,
/// `service_key`) and its instrumentation scope.
fn resource_tags(resource: &[KeyValue], scope: (&str, &str), service_key: Option<&str>) -> BTreeMap<String, String> {
    let mut tags: BTreeMap<String, String> = BTreeMap::new();
    for kv in resource {
        if service_key.is_some_and(|k| k == kv.key) {
            continue;
        }
        tags.insert(kv.key.clone(), value_text(kv.value.as_ref()));
    }
    if !scope.0.is_empty() {
        tags.insert(keys::SCOPE_NAME.into(), scope.0.into());
    }
    if !scope.1.is_empty() {
        tags.insert(keys::SCOPE_VERSION.into(), scope.1.into());
    }
    tags
}

/// A port attribute's value, when it is a port.
fn port(text: Option<String>) -> Option<u16> {
    text.and_then(|p| p.parse::<u16>().ok()).filter(|p| *p > 0)
}

/// An endpoint with the service `service` (lower-cased) at `ip` and `port`, when it has a
/// service or an address.
fn endpoint(service: Option<String>, ip: Option<String>, port: Option<u16>) -> Option<OutEndpoint> {
    if service.is_none() && ip.is_none() {
        return None;
    }
    let mut e = OutEndpoint {
        service_name: service.map(|s| s.to_lowercase()).filter(|s| !s.is_empty()),
        port,
        ..OutEndpoint::default()
    };
    set_ip(&mut e, ip);
    Some(e)
}

/// The tags of the span's status: `error` (its message, or `true`) for an error, the
/// OpenTelemetry status tags for OK.
fn status_tags(tags: &mut BTreeMap<String, String>, span: &OtlpSpan) {
    let st = span.status.clone().unwrap_or_default();
    match u8::try_from(st.code).unwrap_or(0) {
        status::ERROR => {
            let m = if st.message.is_empty() {
                "true".to_owned()
            } else {
                st.message
            };
            tags.insert(keys::ERROR.into(), m);
        }
        status::OK => {
            tags.insert(keys::STATUS_CODE.into(), "OK".into());
            if !st.message.is_empty() {
                tags.insert(keys::STATUS_DESCRIPTION.into(), st.message);
            }
        }
        _ => {}
    }
}

/// One tag per link of the span: trace ID, span ID, trace state, attributes (JSON) and dropped
/// attribute count, separated by `|`.
fn link_tags(tags: &mut BTreeMap<String, String>, span: &OtlpSpan) {
    for (i, l) in span.links.iter().enumerate() {
        tags.insert(
            format!("{}{i}", keys::LINK_PREFIX),
            format!(
                "{}|{}|{}|{}|{}",
                weft_core::hex(&l.trace_id),
                weft_core::hex(&l.span_id),
                l.trace_state,
                attrs_json(&l.attributes),
                l.dropped_attributes_count
            ),
        );
    }
}

/// For a span that came in as Zipkin: the scope, status and error tags as sent (`original`),
/// instead of those made from the OTLP, and its debug flag.
fn restore_original(out: &mut OutSpan, tags: &mut BTreeMap<String, String>, original: &Json) {
    for k in [
        keys::SCOPE_NAME,
        keys::SCOPE_VERSION,
        keys::STATUS_CODE,
        keys::STATUS_DESCRIPTION,
        keys::ERROR,
    ] {
        tags.remove(k);
    }
    if let Some(sent) = original.get("tags").and_then(Json::as_object) {
        for (k, v) in sent {
            tags.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
        }
    }
    out.debug = original.get("debug").and_then(Json::as_bool).unwrap_or(false);
}

/// The span's events as Zipkin annotations, by time.
fn annotations(span: &OtlpSpan) -> Vec<(u64, String)> {
    let mut events: Vec<(u64, String)> = span
        .events
        .iter()
        .map(|e| {
            // The OpenTelemetry Zipkin exporters' form: the name alone, or with attributes
            // `{"<name>":{<attributes>}}`.
            let v = if e.attributes.is_empty() {
                e.name.clone()
            } else {
                let mut m = Map::new();
                m.insert(
                    e.name.clone(),
                    serde_json::from_str(&attrs_json(&e.attributes)).unwrap_or(Json::Null),
                );
                Json::Object(m).to_string()
            };
            (e.time_unix_nano.saturating_add(500) / 1000, v)
        })
        .collect();
    events.sort();
    events
}

fn set_ip(e: &mut OutEndpoint, ip: Option<String>) {
    if let Some(ip) = ip {
        if ip.contains(':') {
            e.ipv6 = Some(ip);
        } else {
            e.ipv4 = Some(ip);
        }
    }
}
