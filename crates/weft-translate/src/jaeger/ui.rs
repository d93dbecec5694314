//! Stored OTLP spans as Jaeger shows them: the JSON model of Jaeger's query API (what Jaeger UI
//! reads), converted by the OpenTelemetry Collector's `ptrace` → Jaeger rules, and Jaeger's own
//! search matching (every condition on one span; tags among the span's tags, its process's tags
//! and its logs' fields, compared as text).

use base64::Engine;
use serde_json::{Map, Value as Json, json};
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value};
use weft_otlp::pb::trace::{Span as OtlpSpan, TracesData};

use crate::otlp::{kind, status};

/// A tag value of Jaeger's model.
#[derive(Debug, Clone, PartialEq)]
pub enum TagVal {
    Str(String),
    Bool(bool),
    Int(i64),
    Float(f64),
    Binary(Vec<u8>),
}

impl TagVal {
    fn from_any(v: Option<&AnyValue>) -> TagVal {
        match v.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => TagVal::Str(s.clone()),
            Some(any_value::Value::BoolValue(b)) => TagVal::Bool(*b),
            Some(any_value::Value::IntValue(i)) => TagVal::Int(*i),
            Some(any_value::Value::DoubleValue(d)) => TagVal::Float(*d),
            Some(any_value::Value::BytesValue(b)) => TagVal::Binary(b.to_vec()),
            Some(_) => TagVal::Str(crate::zipkin::out::value_text(v)),
            None => TagVal::Str(String::new()),
        }
    }

    /// As Jaeger compares tags in a search: the value's text.
    pub fn text(&self) -> String {
        match self {
            TagVal::Str(s) => s.clone(),
            TagVal::Bool(b) => b.to_string(),
            TagVal::Int(i) => i.to_string(),
            TagVal::Float(f) => f.to_string(),
            TagVal::Binary(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        }
    }

    fn json(&self, key: &str) -> Json {
        let (t, v) = match self {
            TagVal::Str(s) => ("string", json!(s)),
            TagVal::Bool(b) => ("bool", json!(b)),
            TagVal::Int(i) => ("int64", json!(i)),
            TagVal::Float(f) => ("float64", json!(f)),
            TagVal::Binary(b) => ("binary", json!(base64::engine::general_purpose::STANDARD.encode(b))),
        };
        json!({"key": key, "type": t, "value": v})
    }
}

pub type Tags = Vec<(String, TagVal)>;

/// One span of Jaeger's model.
#[derive(Debug, Clone)]
pub struct UiSpan {
    pub trace_id: String,
    pub span_id: String,
    pub operation: String,
    /// (CHILD_OF?, trace ID, span ID); the parent first.
    pub references: Vec<(bool, String, String)>,
    pub start_us: u64,
    pub duration_us: u64,
    pub tags: Tags,
    pub logs: Vec<(u64, Tags)>,
    /// Index into [`UiTrace::processes`].
    pub process: usize,
    /// `server`, `client`, `producer`, `consumer`, `internal` or empty.
    pub kind: &'static str,
}

/// A service and its tags.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub service: String,
    pub tags: Tags,
}

/// Spans with their processes (one per distinct resource).
#[derive(Debug, Clone, Default)]
pub struct UiTrace {
    pub spans: Vec<UiSpan>,
    pub processes: Vec<Process>,
}

/// Jaeger's trace ID text: 16 hex digits when the high half is zero, else 32.
pub fn trace_id_hex(id: &[u8]) -> String {
    crate::zipkin::out::trace_id_hex(id)
}

fn tags_of(attrs: &[KeyValue]) -> Tags {
    attrs
        .iter()
        .map(|kv| (kv.key.clone(), TagVal::from_any(kv.value.as_ref())))
        .collect()
}

/// The service a resource names, as the Collector: `service.name`, else
/// `OTLPResourceNoServiceName`.
fn process_of(resource: &[KeyValue]) -> Process {
    let service = resource
        .iter()
        .find(|kv| kv.key == "service.name")
        .map(|kv| crate::zipkin::out::value_text(kv.value.as_ref()))
        .unwrap_or_else(|| "OTLPResourceNoServiceName".into());
    Process {
        service,
        tags: tags_of(
            &resource
                .iter()
                .filter(|kv| kv.key != "service.name")
                .cloned()
                .collect::<Vec<_>>(),
        ),
    }
}

fn span_kind(k: i32) -> &'static str {
    match u8::try_from(k).unwrap_or(0) {
        kind::SERVER => "server",
        kind::CLIENT => "client",
        kind::PRODUCER => "producer",
        kind::CONSUMER => "consumer",
        kind::INTERNAL => "internal",
        _ => "",
    }
}

fn ui_span(s: &OtlpSpan, scope: (&str, &str), process: usize) -> UiSpan {
    let trace_id = trace_id_hex(&s.trace_id);
    let mut references = Vec::new();
    if s.parent_span_id.len() == 8 && *s.parent_span_id != [0; 8] {
        references.push((true, trace_id.clone(), weft_core::hex(&s.parent_span_id)));
    }
    for l in &s.links {
        let child_of = l.attributes.iter().any(|kv| {
            kv.key == "opentracing.ref_type" && crate::zipkin::out::value_text(kv.value.as_ref()) == "child_of"
        });
        references.push((child_of, trace_id_hex(&l.trace_id), weft_core::hex(&l.span_id)));
    }
    let mut tags: Tags = Vec::with_capacity(s.attributes.len() + 6);
    if !scope.0.is_empty() {
        tags.push(("otel.scope.name".into(), TagVal::Str(scope.0.into())));
    }
    if !scope.1.is_empty() {
        tags.push(("otel.scope.version".into(), TagVal::Str(scope.1.into())));
    }
    tags.extend(tags_of(&s.attributes));
    let k = span_kind(s.kind);
    if !k.is_empty() {
        tags.push(("span.kind".into(), TagVal::Str(k.into())));
    }
    let st = s.status.clone().unwrap_or_default();
    match u8::try_from(st.code).unwrap_or(0) {
        status::ERROR => {
            tags.push(("otel.status_code".into(), TagVal::Str("ERROR".into())));
            tags.push(("error".into(), TagVal::Bool(true)));
        }
        status::OK => tags.push(("otel.status_code".into(), TagVal::Str("OK".into()))),
        _ => {}
    }
    if !st.message.is_empty() {
        tags.push(("otel.status_description".into(), TagVal::Str(st.message.clone())));
    }
    if !s.trace_state.is_empty() {
        tags.push(("w3c.tracestate".into(), TagVal::Str(s.trace_state.clone())));
    }
    let logs = s
        .events
        .iter()
        .map(|e| {
            let mut f: Tags = Vec::with_capacity(e.attributes.len() + 1);
            if !e.name.is_empty() {
                f.push(("event".into(), TagVal::Str(e.name.clone())));
            }
            f.extend(tags_of(&e.attributes));
            (e.time_unix_nano / 1000, f)
        })
        .collect();
    UiSpan {
        trace_id,
        span_id: weft_core::hex(&s.span_id),
        operation: s.name.clone(),
        references,
        start_us: s.start_time_unix_nano / 1000,
        duration_us: s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano) / 1000,
        tags,
        logs,
        process,
        kind: k,
    }
}

/// The SDK attributes Jaeger's query moves from a span to its process when the resource lacks
/// them (its `MoveLibraryAttributes` adjuster): some exporters (the OpenTelemetry Jaeger
/// exporters) send resource attributes as span tags.
const LIBRARY_KEYS: &[&str] = &[
    "telemetry.sdk.language",
    "telemetry.sdk.name",
    "telemetry.sdk.version",
    "telemetry.distro.name",
    "telemetry.distro.version",
];

/// Converts stored spans (of one trace, or several).
pub fn convert(data: &TracesData) -> UiTrace {
    let mut t = UiTrace::default();
    let intern = |p: Process, t: &mut UiTrace| match t.processes.iter().position(|q| *q == p) {
        Some(i) => i,
        None => {
            t.processes.push(p);
            t.processes.len() - 1
        }
    };
    let mut base: Option<(&[KeyValue], Process)> = None;
    crate::for_each_span(data, |res, sc, s| {
        if base.as_ref().is_none_or(|(r, _)| !std::ptr::eq(*r, res)) {
            base = Some((res, process_of(res)));
        }
        let base = &base.as_ref().expect("set above").1;
        let mut span = ui_span(s, sc, 0);
        let mut p = base.clone();
        let mut moved = false;
        for key in LIBRARY_KEYS {
            if p.tags.iter().any(|(k, _)| k == key) {
                continue;
            }
            if let Some(i) = span.tags.iter().position(|(k, _)| k == key) {
                p.tags.push(span.tags.remove(i));
                moved = true;
            }
        }
        span.process = intern(if moved { p } else { base.clone() }, &mut t);
        t.spans.push(span);
    });
    t
}

fn tags_json(t: &Tags) -> Json {
    Json::Array(t.iter().map(|(k, v)| v.json(k)).collect())
}

impl UiTrace {
    /// Jaeger's JSON for one trace: spans, processes `p1`, `p2`… in order of first use.
    pub fn to_json(&self) -> Json {
        let mut order: Vec<usize> = Vec::new();
        for s in &self.spans {
            if !order.contains(&s.process) {
                order.push(s.process);
            }
        }
        let pid = |i: usize| format!("p{}", order.iter().position(|&x| x == i).unwrap_or(0) + 1);
        let spans: Vec<Json> = self
            .spans
            .iter()
            .map(|s| {
                json!({
                    "traceID": s.trace_id,
                    "spanID": s.span_id,
                    "operationName": s.operation,
                    "references": s.references.iter().map(|(c, t, sp)| json!({
                        "refType": if *c { "CHILD_OF" } else { "FOLLOWS_FROM" }, "traceID": t, "spanID": sp
                    })).collect::<Vec<_>>(),
                    "startTime": s.start_us,
                    "duration": s.duration_us,
                    "tags": tags_json(&s.tags),
                    "logs": s.logs.iter().map(|(t, f)| json!({"timestamp": t, "fields": tags_json(f)})).collect::<Vec<_>>(),
                    "processID": pid(s.process),
                    "warnings": null,
                })
            })
            .collect();
        let mut processes = Map::new();
        for &i in &order {
            let p = &self.processes[i];
            processes.insert(pid(i), json!({"serviceName": p.service, "tags": tags_json(&p.tags)}));
        }
        json!({
            "traceID": self.spans.first().map(|s| s.trace_id.clone()).unwrap_or_default(),
            "spans": spans,
            "processes": processes,
            "warnings": null,
        })
    }
}

/// The query of Jaeger's `GET /api/traces` (times in microseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Query {
    pub service: String,
    pub operation: Option<String>,
    pub tags: Vec<(String, String)>,
    pub start_min_us: u64,
    pub start_max_us: u64,
    pub duration_min_us: Option<u64>,
    pub duration_max_us: Option<u64>,
}

impl Query {
    /// Whether some span of the trace meets every condition at once, as Jaeger's storage
    /// matches: its service and operation, its start within the range, its duration within
    /// bounds, and each tag among its tags, its process's tags or its logs' fields.
    pub fn matches(&self, t: &UiTrace) -> bool {
        t.spans.iter().any(|s| {
            let p = &t.processes[s.process];
            p.service == self.service
                && self.operation.as_ref().is_none_or(|o| *o == s.operation)
                && s.start_us >= self.start_min_us
                && s.start_us <= self.start_max_us
                && self.duration_min_us.is_none_or(|d| s.duration_us >= d)
                && self.duration_max_us.is_none_or(|d| s.duration_us <= d)
                && self.tags.iter().all(|(k, v)| {
                    let hit = |tags: &Tags| tags.iter().any(|(tk, tv)| tk == k && tv.text() == *v);
                    hit(&s.tags) || hit(&p.tags) || s.logs.iter().any(|(_, f)| hit(f))
                })
        })
    }
}

/// Jaeger's dependency links: a span whose parent (in the same trace) belongs to another
/// service is one call from the parent's service to the span's.
#[derive(Debug, Default)]
pub struct Dependencies {
    order: Vec<(String, String)>,
    counts: std::collections::HashMap<(String, String), u64>,
}

impl Dependencies {
    pub fn add(&mut self, t: &UiTrace) {
        let by_id: std::collections::HashMap<&str, &UiSpan> = t.spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
        for s in &t.spans {
            let Some((_, _, parent)) = s.references.iter().find(|r| r.0 && r.1 == s.trace_id) else {
                continue;
            };
            let Some(p) = by_id.get(parent.as_str()) else { continue };
            let (ps, cs) = (&t.processes[p.process].service, &t.processes[s.process].service);
            if ps != cs {
                let key = (ps.clone(), cs.clone());
                let c = self.counts.entry(key.clone()).or_insert_with(|| {
                    self.order.push(key);
                    0
                });
                *c += 1;
            }
        }
    }

    pub fn to_json(&self) -> Json {
        Json::Array(
            self.order
                .iter()
                .map(|k| json!({"parent": k.0, "child": k.1, "callCount": self.counts[k]}))
                .collect(),
        )
    }
}
