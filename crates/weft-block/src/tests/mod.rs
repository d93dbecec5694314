//! The block's tests, by topic, and the fixtures they share: a deterministic request with every
//! field, its head columns, and spans flattened for field-by-field comparison.

mod column_append;
mod dedicated_columns;
mod foreign_layout;
mod golden;
mod integrity;
mod metric_columns;
mod round_trip;

use super::*;
use prost::Message;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value::Value as V,
};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, Status, TracesData, span};
use weft_storage::MemoryStorage;

fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

/// A deterministic request: `traces` traces of `per_trace` spans over two services, with every
/// attribute type, events, links, status and trace state.
pub(crate) fn sample_request(traces: u32, per_trace: u32, seed: u8) -> ExportTraceServiceRequest {
    let mut rs = Vec::new();
    for svc in 0..2u32 {
        let mut spans = Vec::new();
        for t in 0..traces {
            for s in 0..per_trace {
                if (t + s) % 2 != svc {
                    continue;
                }
                let mut tid = [0u8; 16];
                tid[0] = seed;
                tid[1..5].copy_from_slice(&(t.wrapping_mul(2654435761)).to_be_bytes());
                tid[15] = 1;
                let mut sid = [0u8; 8];
                sid[0] = seed;
                sid[1..5].copy_from_slice(&t.to_be_bytes());
                sid[5..7].copy_from_slice(&(s as u16).to_be_bytes());
                sid[7] = 7;
                let mut parent = sid;
                parent[5..7].copy_from_slice(&0u16.to_be_bytes());
                let start = 1_700_000_000_000_000_000u64 + u64::from(t) * 1_000_000 + u64::from(s) * 1000;
                spans.push(Span {
                    trace_id: tid.to_vec().into(),
                    span_id: sid.to_vec().into(),
                    trace_state: if s == 1 { "ro=1,vendor=x".into() } else { String::new() },
                    parent_span_id: if s == 0 {
                        Default::default()
                    } else {
                        parent.to_vec().into()
                    },
                    flags: 0x301,
                    name: format!("op-{}", s % 3),
                    kind: (s % 6) as i32,
                    start_time_unix_nano: start,
                    end_time_unix_nano: start + 5000 + u64::from(s),
                    attributes: vec![
                        kv("str", V::StringValue(format!("v{t}"))),
                        kv("int", V::IntValue(-(t as i64))),
                        kv("dbl", V::DoubleValue(1.5)),
                        kv("bool", V::BoolValue(true)),
                        kv(
                            "arr",
                            V::ArrayValue(ArrayValue {
                                values: vec![
                                    AnyValue {
                                        value: Some(V::IntValue(1)),
                                    },
                                    AnyValue {
                                        value: Some(V::StringValue("x".into())),
                                    },
                                ],
                            }),
                        ),
                        kv(
                            "kv",
                            V::KvlistValue(KeyValueList {
                                values: vec![kv("inner", V::BoolValue(false))],
                            }),
                        ),
                        kv("bytes", V::BytesValue(vec![0, 1, 2, 255].into())),
                    ],
                    dropped_attributes_count: s % 2,
                    events: if s == 0 {
                        vec![span::Event {
                            time_unix_nano: start + 10,
                            name: "ev".into(),
                            attributes: vec![kv("e", V::IntValue(3))],
                            dropped_attributes_count: 0,
                        }]
                    } else {
                        vec![]
                    },
                    dropped_events_count: 0,
                    links: if s == 2 {
                        vec![span::Link {
                            trace_id: vec![9; 16].into(),
                            span_id: vec![8; 8].into(),
                            trace_state: "a=b".into(),
                            attributes: vec![kv("l", V::StringValue("x".into()))],
                            dropped_attributes_count: 1,
                            flags: 1,
                        }]
                    } else {
                        vec![]
                    },
                    dropped_links_count: 0,
                    status: if s == 3 {
                        Some(Status {
                            message: "boom".into(),
                            code: 2,
                        })
                    } else {
                        None
                    },
                });
            }
        }
        rs.push(ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", V::StringValue(format!("svc-{svc}"))),
                    kv("host", V::StringValue("h".into())),
                ],
                dropped_attributes_count: 0,
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    version: "1.0".into(),
                    attributes: vec![],
                    dropped_attributes_count: 0,
                }),
                spans,
                schema_url: "https://s/1".into(),
            }],
            schema_url: "https://r/1".into(),
        });
    }
    ExportTraceServiceRequest { resource_spans: rs }
}

/// Collects (resource, scope, span) triples for comparison, ignoring grouping and order.
/// A span with its resource and scope, and their schema URLs, for field-by-field comparison.
type FlatSpan = (Option<Resource>, String, Option<InstrumentationScope>, String, Span);

fn flatten(rs: &[ResourceSpans]) -> Vec<FlatSpan> {
    let mut out = Vec::new();
    for r in rs {
        for ss in &r.scope_spans {
            for s in &ss.spans {
                out.push((
                    r.resource.clone(),
                    r.schema_url.clone(),
                    ss.scope.clone(),
                    ss.schema_url.clone(),
                    s.clone(),
                ));
            }
        }
    }
    out.sort_by(|a, b| a.4.span_id.cmp(&b.4.span_id));
    out
}

fn trace_ids(req: &ExportTraceServiceRequest) -> Vec<[u8; 16]> {
    let mut ids: Vec<[u8; 16]> = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.trace_id[..].try_into().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn spans_of(req: &ExportTraceServiceRequest, id: &[u8; 16]) -> Vec<FlatSpan> {
    flatten(&req.resource_spans)
        .into_iter()
        .filter(|x| x.4.trace_id[..] == id[..])
        .collect()
}

fn decode_rows(rows: &[SpanRow]) -> Vec<FlatSpan> {
    let td = TracesData::decode(&row::encode_traces_data(rows)[..]).unwrap();
    flatten(&td.resource_spans)
}

fn columns_of(req: &ExportTraceServiceRequest) -> SpanColumns {
    let bytes = req.encode_to_vec();
    let mut summary = weft_otlp::request::RequestSummary::default();
    weft_otlp::request::validate_request(&bytes, &mut summary).unwrap();
    let mut cols = SpanColumns::default();
    cols.push_request(&bytes).unwrap();
    cols
}

/// `sample_request` plus attributes that become dedicated columns: a low-cardinality string,
/// a key that is mostly an int and sometimes a string, and a key repeated within a span.
fn with_dedicatable_attributes(mut req: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let mut i = 0usize;
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            for s in &mut ss.spans {
                i += 1;
                s.attributes
                    .push(kv("http.method", V::StringValue(["GET", "POST", "PUT"][i % 3].into())));
                s.attributes.push(if i.is_multiple_of(10) {
                    kv("mixed", V::StringValue("ten".into()))
                } else {
                    kv("mixed", V::IntValue(i as i64 % 7))
                });
                if i.is_multiple_of(4) {
                    s.attributes.push(kv("http.method", V::StringValue("again".into())));
                }
            }
        }
    }
    req
}

/// Attributes sorted by key (stable, so repeated keys keep their order): dedicated values are
/// appended after the generic ones, and OTLP gives attribute order no meaning.
fn normalized(mut spans: Vec<FlatSpan>) -> Vec<FlatSpan> {
    for s in &mut spans {
        s.4.attributes.sort_by(|a, b| a.key.cmp(&b.key));
    }
    spans
}
