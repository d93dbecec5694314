//! The `tempopb` messages of Tempo's gRPC `StreamingQuerier` (Tempo 3), as protobuf: the
//! requests Grafana sends and the replies it decodes. Field numbers and names are Tempo's (the
//! wire contract); `spec/tempo-streaming.md` lists them. Attribute values are OTLP's
//! `KeyValue`/`AnyValue`, which `tempopb.common.v1` carries unchanged on the wire.

use prost::Message;
use weft_engine::search::{Hit, HitSpan, HitSpanset};
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value};
use weft_traceql::{Series, Value};

use super::json::{Inspected, duration_text, trace_id_text};

#[derive(Clone, PartialEq, Message)]
pub struct SearchRequest {
    #[prost(map = "string, string", tag = "1")]
    pub tags: std::collections::HashMap<String, String>,
    #[prost(uint32, tag = "2")]
    pub min_duration_ms: u32,
    #[prost(uint32, tag = "3")]
    pub max_duration_ms: u32,
    #[prost(uint32, tag = "4")]
    pub limit: u32,
    #[prost(uint32, tag = "5")]
    pub start: u32,
    #[prost(uint32, tag = "6")]
    pub end: u32,
    #[prost(string, tag = "8")]
    pub query: String,
    #[prost(uint32, tag = "9")]
    pub spans_per_span_set: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchResponse {
    #[prost(message, repeated, tag = "1")]
    pub traces: Vec<TraceSearchMetadata>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<SearchMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TraceSearchMetadata {
    #[prost(string, tag = "1")]
    pub trace_id: String,
    #[prost(string, tag = "2")]
    pub root_service_name: String,
    #[prost(string, tag = "3")]
    pub root_trace_name: String,
    #[prost(uint64, tag = "4")]
    pub start_time_unix_nano: u64,
    #[prost(uint32, tag = "5")]
    pub duration_ms: u32,
    #[prost(message, optional, tag = "6")]
    pub span_set: Option<SpanSet>,
    #[prost(message, repeated, tag = "7")]
    pub span_sets: Vec<SpanSet>,
    #[prost(map = "string, message", tag = "8")]
    pub service_stats: std::collections::HashMap<String, ServiceStats>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SpanSet {
    #[prost(message, repeated, tag = "1")]
    pub spans: Vec<Span>,
    #[prost(uint32, tag = "2")]
    pub matched: u32,
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Span {
    #[prost(string, tag = "1")]
    pub span_id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(uint64, tag = "3")]
    pub start_time_unix_nano: u64,
    #[prost(uint64, tag = "4")]
    pub duration_nanos: u64,
    #[prost(message, repeated, tag = "5")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ServiceStats {
    #[prost(uint32, tag = "1")]
    pub span_count: u32,
    #[prost(uint32, tag = "2")]
    pub error_count: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchMetrics {
    #[prost(uint32, tag = "1")]
    pub inspected_traces: u32,
    #[prost(uint64, tag = "2")]
    pub inspected_bytes: u64,
    #[prost(uint32, tag = "3")]
    pub total_blocks: u32,
    #[prost(uint32, tag = "4")]
    pub completed_jobs: u32,
    #[prost(uint32, tag = "5")]
    pub total_jobs: u32,
    #[prost(uint64, tag = "6")]
    pub total_block_bytes: u64,
    #[prost(uint64, tag = "7")]
    pub inspected_spans: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryRangeRequest {
    #[prost(string, tag = "1")]
    pub query: String,
    /// Unix nanoseconds.
    #[prost(uint64, tag = "2")]
    pub start: u64,
    #[prost(uint64, tag = "3")]
    pub end: u64,
    /// Nanoseconds.
    #[prost(uint64, tag = "4")]
    pub step: u64,
    #[prost(uint32, tag = "16")]
    pub exemplars: u32,
    #[prost(uint32, tag = "17")]
    pub max_series: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryRangeResponse {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<TimeSeries>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<SearchMetrics>,
    /// `PartialStatus`: 0 complete, 1 partial.
    #[prost(int32, tag = "3")]
    pub status: i32,
    #[prost(string, tag = "4")]
    pub message: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<KeyValue>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub exemplars: Vec<Exemplar>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Exemplar {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<KeyValue>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(int64, tag = "3")]
    pub timestamp_ms: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(int64, tag = "2")]
    pub timestamp_ms: i64,
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryInstantRequest {
    #[prost(string, tag = "1")]
    pub query: String,
    #[prost(uint64, tag = "2")]
    pub start: u64,
    #[prost(uint64, tag = "3")]
    pub end: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryInstantResponse {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<InstantSeries>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<SearchMetrics>,
    #[prost(int32, tag = "3")]
    pub status: i32,
    #[prost(string, tag = "4")]
    pub message: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct InstantSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<KeyValue>,
    #[prost(double, tag = "2")]
    pub value: f64,
}

/// A TraceQL value as an OTLP `AnyValue`, as [`super::json::any_value`] writes it in JSON.
fn any_value(v: &Value) -> AnyValue {
    use any_value::Value as V;
    let value = match v {
        Value::Str(s) => Some(V::StringValue(s.clone())),
        Value::Int(i) => Some(V::IntValue(*i)),
        Value::Float(f) if f.is_finite() => Some(V::DoubleValue(*f)),
        Value::Float(f) => Some(V::StringValue(f.to_string())),
        Value::Bool(b) => Some(V::BoolValue(*b)),
        Value::Duration(d) => Some(V::StringValue(duration_text(*d))),
        Value::Status(s) => Some(V::StringValue(s.name().to_owned())),
        Value::Kind(k) => Some(V::StringValue(k.name().to_owned())),
        Value::Nil => None,
        Value::Array(vs) => Some(V::ArrayValue(weft_otlp::pb::common::ArrayValue {
            values: vs.iter().map(any_value).collect(),
        })),
    };
    AnyValue { value }
}

fn key_values(kvs: &[(String, Value)]) -> Vec<KeyValue> {
    kvs.iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: Some(any_value(v)),
        })
        .collect()
}

/// Series labels: a nil label reads `<nil>`, as in the JSON replies.
fn labels(kvs: &[(String, Value)]) -> Vec<KeyValue> {
    kvs.iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: Some(match v {
                Value::Nil => AnyValue {
                    value: Some(any_value::Value::StringValue("<nil>".into())),
                },
                v => any_value(v),
            }),
        })
        .collect()
}

fn span(s: &HitSpan) -> Span {
    Span {
        span_id: weft_core::hex(&s.span_id),
        name: s.name.clone(),
        start_time_unix_nano: s.start_unix_nano,
        duration_nanos: s.duration_nano,
        attributes: key_values(&s.attributes),
    }
}

fn span_set(s: &HitSpanset) -> SpanSet {
    SpanSet {
        spans: s.spans.iter().map(span).collect(),
        matched: s.matched as u32,
        attributes: key_values(&s.attributes),
    }
}

/// One trace of a search reply, as [`super::json::hit`] writes it in JSON.
pub fn hit(h: &Hit) -> TraceSearchMetadata {
    let sets: Vec<SpanSet> = h.spansets.iter().map(span_set).collect();
    TraceSearchMetadata {
        trace_id: trace_id_text(&h.trace_id),
        root_service_name: if h.root_service_name.is_empty() {
            "<root span not yet received>".into()
        } else {
            h.root_service_name.clone()
        },
        root_trace_name: h.root_trace_name.clone(),
        start_time_unix_nano: h.start_unix_nano,
        duration_ms: (h.duration_nano / 1_000_000) as u32,
        span_set: sets.first().cloned(),
        span_sets: sets,
        service_stats: h
            .service_stats
            .iter()
            .map(|s| {
                (
                    s.service.clone(),
                    ServiceStats {
                        span_count: s.spans,
                        error_count: s.errors,
                    },
                )
            })
            .collect(),
    }
}

pub fn metrics(m: &Inspected) -> SearchMetrics {
    SearchMetrics {
        inspected_traces: m.traces.min(u64::from(u32::MAX)) as u32,
        inspected_bytes: m.bytes,
        total_blocks: m.total_blocks as u32,
        completed_jobs: m.completed_jobs.min(u64::from(u32::MAX)) as u32,
        total_jobs: m.total_jobs.min(u64::from(u32::MAX)) as u32,
        total_block_bytes: m.total_block_bytes,
        inspected_spans: m.spans,
    }
}

/// `PartialStatus.PARTIAL` of Tempo's metrics replies (`COMPLETE` is 0).
pub const PARTIAL: i32 = 1;

/// A range reply: one sample per step that has a value, at the step's start.
pub fn query_range(series: &[Series], start_ns: u64, step_ns: u64, m: &Inspected) -> QueryRangeResponse {
    QueryRangeResponse {
        series: series
            .iter()
            .map(|s| TimeSeries {
                labels: labels(&s.labels),
                samples: s
                    .values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| {
                        Some(Sample {
                            timestamp_ms: ((start_ns + i as u64 * step_ns) / 1_000_000) as i64,
                            value: (*v)?,
                        })
                    })
                    .collect(),
                exemplars: super::json::exemplars(s, start_ns, step_ns)
                    .into_iter()
                    .map(|e| Exemplar {
                        labels: labels(&e.labels),
                        value: e.value,
                        timestamp_ms: e.timestamp_ms as i64,
                    })
                    .collect(),
            })
            .collect(),
        metrics: Some(metrics(m)),
        status: 0,
        message: String::new(),
    }
}

/// An instant reply: each series' one value.
pub fn query_instant(series: &[Series], m: &Inspected) -> QueryInstantResponse {
    QueryInstantResponse {
        series: series
            .iter()
            .filter_map(|s| {
                Some(InstantSeries {
                    labels: labels(&s.labels),
                    value: s.values.first().copied().flatten()?,
                })
            })
            .collect(),
        metrics: Some(metrics(m)),
        status: 0,
        message: String::new(),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagsRequest {
    #[prost(string, tag = "1")]
    pub scope: String,
    #[prost(string, tag = "2")]
    pub query: String,
    #[prost(uint32, tag = "3")]
    pub start: u32,
    #[prost(uint32, tag = "4")]
    pub end: u32,
    #[prost(uint32, tag = "5")]
    pub max_tags_per_scope: u32,
    #[prost(uint32, tag = "6")]
    pub stale_values_threshold: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagsResponse {
    #[prost(string, repeated, tag = "1")]
    pub tag_names: Vec<String>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<MetadataMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagsV2Response {
    #[prost(message, repeated, tag = "1")]
    pub scopes: Vec<SearchTagsV2Scope>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<MetadataMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagsV2Scope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub tags: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagValuesRequest {
    #[prost(string, tag = "1")]
    pub tag_name: String,
    #[prost(string, tag = "2")]
    pub query: String,
    #[prost(uint32, tag = "4")]
    pub start: u32,
    #[prost(uint32, tag = "5")]
    pub end: u32,
    #[prost(uint32, tag = "6")]
    pub max_tag_values: u32,
    #[prost(uint32, tag = "7")]
    pub stale_value_threshold: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagValuesResponse {
    #[prost(string, repeated, tag = "1")]
    pub tag_values: Vec<String>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<MetadataMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TagValue {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct SearchTagValuesV2Response {
    #[prost(message, repeated, tag = "1")]
    pub tag_values: Vec<TagValue>,
    #[prost(message, optional, tag = "2")]
    pub metrics: Option<MetadataMetrics>,
}

/// What a tag lookup read (`tempopb.MetadataMetrics`).
#[derive(Clone, PartialEq, Message)]
pub struct MetadataMetrics {
    #[prost(uint64, tag = "1")]
    pub inspected_bytes: u64,
    #[prost(uint32, tag = "2")]
    pub total_jobs: u32,
    #[prost(uint32, tag = "3")]
    pub completed_jobs: u32,
    #[prost(uint32, tag = "4")]
    pub total_blocks: u32,
    #[prost(uint64, tag = "5")]
    pub total_block_bytes: u64,
}

/// A tag lookup's metrics, as `/api/v2/search/tags` gives them in JSON.
pub fn metadata_metrics(m: &Inspected) -> MetadataMetrics {
    MetadataMetrics {
        inspected_bytes: m.bytes,
        total_jobs: m.total_jobs.min(u64::from(u32::MAX)) as u32,
        completed_jobs: m.completed_jobs.min(u64::from(u32::MAX)) as u32,
        total_blocks: m.total_blocks.min(u64::from(u32::MAX)) as u32,
        total_block_bytes: m.total_block_bytes,
    }
}
