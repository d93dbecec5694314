//! Results in the JSON shapes of Tempo's HTTP API (`tempopb` messages in proto3 JSON): 64-bit
//! integers are strings (`startTimeUnixNano`, `durationNanos`, `intValue`, `inspectedBytes`),
//! 32-bit ones numbers (`durationMs`, `matched`, `inspectedTraces`), and attribute values are
//! OTLP `AnyValue`s (`{"stringValue": "x"}`).
//!
//! Every reply has exactly the fields of its `tempopb` message in Tempo 3 (`SearchResponse`,
//! `SearchTagsResponse`, `SearchTagsV2Response`, `SearchTagValues(V2)Response`,
//! `QueryRangeResponse`, `QueryInstantResponse`), nothing more: Grafana's backend and
//! tempo-cli decode some of them strictly and fail on any unknown field. What weft can say
//! beyond them (blocks inspected and skipped, truncated tag values) goes in `x-weft-*` response
//! headers ([`crate::query`]).

use serde_json::{Value as Json, json};
use weft_traceql::{Series, Value};

use weft_engine::search::{Hit, HitSpan, HitSpanset, ServiceCount};

use weft_core::hex;

/// A trace ID as Tempo prints it in search results: lowercase hex without leading zeros
/// (`/api/traces/<id>` pads it back).
pub fn trace_id_text(id: &[u8; 16]) -> String {
    let h = hex(id);
    let t = h.trim_start_matches('0');
    if t.is_empty() { "0".to_owned() } else { t.to_owned() }
}

/// A value as an OTLP JSON `AnyValue`. Durations, statuses and kinds (which OTLP lacks) are
/// strings as TraceQL prints them (`1.5s`, `error`, `server`).
pub fn any_value(v: &Value) -> Json {
    match v {
        Value::Str(s) => json!({ "stringValue": s }),
        Value::Int(i) => json!({ "intValue": i.to_string() }),
        Value::Float(f) if f.is_finite() => json!({ "doubleValue": f }),
        Value::Float(f) => json!({ "stringValue": f.to_string() }),
        Value::Bool(b) => json!({ "boolValue": b }),
        Value::Duration(d) => json!({ "stringValue": duration_text(*d) }),
        Value::Status(s) => json!({ "stringValue": s.name() }),
        Value::Kind(k) => json!({ "stringValue": k.name() }),
        Value::Nil => json!({}),
        Value::Array(vs) => json!({ "arrayValue": { "values": vs.iter().map(any_value).collect::<Vec<_>>() } }),
    }
}

/// A duration as TraceQL writes it, in the largest unit that keeps it whole: `1500ms`, `2s`.
pub fn duration_text(ns: i64) -> String {
    for (unit, size) in [
        ("h", 3_600_000_000_000i64),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns != 0 && ns % size == 0 {
            return format!("{}{unit}", ns / size);
        }
    }
    format!("{ns}ns")
}

fn key_values(kvs: &[(String, Value)]) -> Json {
    Json::Array(
        kvs.iter()
            .map(|(k, v)| json!({ "key": k, "value": any_value(v) }))
            .collect(),
    )
}

fn span(s: &HitSpan) -> Json {
    let mut o = json!({
        "spanID": hex(&s.span_id),
        "name": s.name,
        "startTimeUnixNano": s.start_unix_nano.to_string(),
        "durationNanos": s.duration_nano.to_string(),
    });
    if !s.attributes.is_empty() {
        o["attributes"] = key_values(&s.attributes);
    }
    o
}

fn spanset(s: &HitSpanset) -> Json {
    let mut o = json!({
        "spans": s.spans.iter().map(span).collect::<Vec<_>>(),
        "matched": s.matched,
    });
    if !s.attributes.is_empty() {
        o["attributes"] = key_values(&s.attributes);
    }
    o
}

/// One trace of a search response. `spanSet` (the first spanset) is Tempo's older field,
/// which Grafana still reads when `spanSets` is absent.
pub fn hit(h: &Hit) -> Json {
    let sets: Vec<Json> = h.spansets.iter().map(spanset).collect();
    let mut o = json!({
        "traceID": trace_id_text(&h.trace_id),
        "rootServiceName": if h.root_service_name.is_empty() { "<root span not yet received>" } else { &h.root_service_name },
        "startTimeUnixNano": h.start_unix_nano.to_string(),
        "durationMs": h.duration_nano / 1_000_000,
    });
    if !h.root_trace_name.is_empty() {
        o["rootTraceName"] = json!(h.root_trace_name);
    }
    if let Some(first) = sets.first() {
        o["spanSet"] = first.clone();
    }
    o["spanSets"] = Json::Array(sets);
    o["serviceStats"] = service_stats(&h.service_stats);
    o
}

/// Tempo's `serviceStats`: a map from service name to `{"spanCount": n, "errorCount": e}`,
/// where proto3 JSON leaves out a zero `errorCount`.
fn service_stats(stats: &[ServiceCount]) -> Json {
    let mut m = serde_json::Map::new();
    for s in stats {
        let mut o = json!({ "spanCount": s.spans });
        if s.errors > 0 {
            o["errorCount"] = json!(s.errors);
        }
        m.insert(s.service.clone(), o);
    }
    Json::Object(m)
}

/// What a query looked at: Tempo's `SearchMetrics` (and `MetadataMetrics`) plus the block
/// counts weft reports in headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inspected {
    pub bytes: u64,
    pub traces: u64,
    pub spans: u64,
    pub blocks: u64,
    pub skipped_blocks: u64,
    pub total_blocks: u64,
    pub total_block_bytes: u64,
    /// Units of work done and planned ([`weft_engine::search::ScanProgress`]): 1 and 1 for a
    /// query that does not count them.
    pub completed_jobs: u64,
    pub total_jobs: u64,
}

impl Inspected {
    /// These figures with the job counts of a scan's last progress report, when it told one.
    pub fn with_jobs(mut self, p: Option<weft_engine::search::ScanProgress>) -> Inspected {
        if let Some(p) = p {
            self.completed_jobs = p.completed_jobs;
            self.total_jobs = p.total_jobs;
        }
        self
    }
}

/// Tempo's `SearchMetrics` (fields 1–7 in Tempo 3), the `metrics` of search and metrics
/// replies.
pub fn metrics(m: &Inspected) -> Json {
    json!({
        "inspectedTraces": m.traces,
        "inspectedBytes": m.bytes.to_string(),
        "totalBlocks": m.total_blocks,
        "completedJobs": m.completed_jobs,
        "totalJobs": m.total_jobs,
        "totalBlockBytes": m.total_block_bytes.to_string(),
        "inspectedSpans": m.spans.to_string(),
    })
}

/// Tempo's `MetadataMetrics`, the `metrics` of the tag and tag-values replies (it has no
/// trace or span counts).
pub fn metadata_metrics(m: &Inspected) -> Json {
    json!({
        "inspectedBytes": m.bytes.to_string(),
        "totalJobs": m.total_jobs,
        "completedJobs": m.completed_jobs,
        "totalBlocks": m.total_blocks,
        "totalBlockBytes": m.total_block_bytes.to_string(),
    })
}

/// [`search_response`] as JSON text, written a trace at a time as the client takes it: the
/// whole tree of 10,000 traces with 1,000 spans each held several GB before it was written.
pub fn search_response_body(hits: Vec<Hit>, m: &Inspected) -> axum::body::Body {
    // The keys in the order `search_response`'s map writes them.
    crate::query::reply::streamed_json_items(
        format!("{{\"metrics\":{},\"traces\":[", metrics(m)),
        hits.into_iter().map(|h| hit(&h)),
        "]}".to_owned(),
    )
}

/// `GET /api/search` as a tree: what [`search_response_body`] writes.
#[cfg(test)]
pub fn search_response(hits: &[Hit], m: &Inspected) -> Json {
    json!({
        "traces": hits.iter().map(hit).collect::<Vec<_>>(),
        "metrics": metrics(m),
    })
}

fn labels(ls: &[(String, Value)]) -> Json {
    Json::Array(
        ls.iter()
            .map(|(k, v)| {
                let value = match v {
                    Value::Nil => json!({ "stringValue": "<nil>" }),
                    v => any_value(v),
                };
                json!({ "key": k, "value": value })
            })
            .collect(),
    )
}

/// `GET /api/metrics/query_range`: one sample per step that has a value, at the step's start.
///
/// `partial`: the message of an answer that left something out, sent as Tempo sends a partial
/// answer (`"status": "PARTIAL"` and `"message"`).
pub fn query_range_response(
    series: &[Series],
    start_ns: u64,
    step_ns: u64,
    m: &Inspected,
    partial: Option<&str>,
) -> String {
    use std::io::Write;
    // Written as text, not built as a `serde_json::Value` tree: a tree costs about 1 KB per
    // sample, the text about 50 bytes, and a query may return millions of samples.
    let points: usize = series.iter().map(|s| s.values.len()).sum();
    let mut out: Vec<u8> = Vec::with_capacity(64 + points * 48);
    out.extend_from_slice(b"{\"series\":[");
    for (k, s) in series.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"labels\":");
        serde_json::to_writer(&mut out, &labels(&s.labels)).expect("writing to memory");
        out.extend_from_slice(b",\"samples\":[");
        let mut first = true;
        for (i, v) in s.values.iter().enumerate() {
            let Some(v) = v else { continue };
            if !first {
                out.push(b',');
            }
            first = false;
            let ts = (start_ns + i as u64 * step_ns) / 1_000_000;
            let _ = write!(out, "{{\"timestampMs\":\"{ts}\",\"value\":");
            serde_json::to_writer(&mut out, v).expect("writing to memory");
            out.push(b'}');
        }
        out.push(b']');
        let exemplars = exemplars(s, start_ns, step_ns);
        if !exemplars.is_empty() {
            out.extend_from_slice(b",\"exemplars\":[");
            for (k, e) in exemplars.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"labels\":");
                serde_json::to_writer(&mut out, &labels(&e.labels)).expect("writing to memory");
                out.extend_from_slice(b",\"value\":");
                serde_json::to_writer(&mut out, &e.value).expect("writing to memory");
                let _ = write!(out, ",\"timestampMs\":\"{}\"}}", e.timestamp_ms);
            }
            out.push(b']');
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"metrics\":");
    serde_json::to_writer(&mut out, &metrics(m)).expect("writing to memory");
    if let Some(msg) = partial {
        out.extend_from_slice(b",\"status\":\"PARTIAL\",\"message\":");
        serde_json::to_writer(&mut out, msg).expect("writing to memory");
    }
    out.push(b'}');
    String::from_utf8(out).expect("serde_json writes utf-8")
}

/// An exemplar as Tempo's `Exemplar` message holds it.
pub struct ExemplarReply {
    pub labels: Vec<(String, Value)>,
    pub value: f64,
    pub timestamp_ms: u64,
}

/// The exemplars of a series as Tempo's `Exemplar` messages. Labels: `trace:id` (hex, leading
/// zeros trimmed, as Tempo writes it), `span:id` (every exemplar weft picks has one), and the
/// series' `by()` labels. A counting function's exemplar takes the series' value at its step;
/// one whose step has no value is left out, as Tempo leaves it.
pub fn exemplars(s: &Series, start_ns: u64, step_ns: u64) -> Vec<ExemplarReply> {
    s.exemplars
        .iter()
        .filter_map(|e| {
            let at = (e.timestamp_ns.checked_sub(start_ns)? / step_ns.max(1)) as usize;
            let value = match e.value {
                Some(v) => v,
                None => (*s.values.get(at)?)?,
            };
            let full = hex(&e.trace_id);
            let trimmed = full.trim_start_matches('0');
            let mut labels = vec![(
                "trace:id".to_owned(),
                Value::Str(if trimmed.is_empty() { "0" } else { trimmed }.to_owned()),
            )];
            if let Some(span) = e.span_id {
                labels.push(("span:id".to_owned(), Value::Str(hex(&span))));
            }
            labels.extend(
                s.labels
                    .iter()
                    .filter(|(k, v)| !matches!(k.as_str(), "__name__" | "__bucket" | "p") && !matches!(v, Value::Nil))
                    .cloned(),
            );
            Some(ExemplarReply {
                labels,
                value,
                timestamp_ms: e.timestamp_ns / 1_000_000,
            })
        })
        .collect()
}

/// `GET /api/metrics/query`: the query evaluated as one step over the whole range.
/// An instant reply; `partial` as for [`query_range_response`].
pub fn query_instant_response(series: &[Series], m: &Inspected, partial: Option<&str>) -> Json {
    let series: Vec<Json> = series
        .iter()
        .filter_map(|s| {
            let v = s.values.first().copied().flatten()?;
            Some(json!({ "labels": labels(&s.labels), "value": v }))
        })
        .collect();
    let mut out = json!({ "series": series, "metrics": metrics(m) });
    if let Some(msg) = partial {
        out["status"] = json!("PARTIAL");
        out["message"] = json!(msg);
    }
    out
}

/// A tag value of `/api/v2/search/tag/<tag>/values`, typed as Tempo types them: `string`,
/// `int`, `float`, `bool`, `duration`, and `keyword` for statuses and kinds; and its text.
pub fn typed(v: &Value) -> (&'static str, String) {
    match v {
        Value::Str(s) => ("string", s.clone()),
        Value::Int(i) => ("int", i.to_string()),
        Value::Float(f) => ("float", f.to_string()),
        Value::Bool(b) => ("bool", b.to_string()),
        Value::Duration(d) => ("duration", duration_text(*d)),
        Value::Status(s) => ("keyword", s.name().to_owned()),
        Value::Kind(k) => ("keyword", k.name().to_owned()),
        Value::Nil | Value::Array(_) => ("string", String::new()),
    }
}

/// The text of a value in `/api/search/tag/<tag>/values` (v1: strings only).
pub fn value_text(v: &Value) -> String {
    typed(v).1
}

#[cfg(test)]
mod tests;
