//! Fixtures shared by the JSON converters' tests.

use crate::pb::common::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value::Value as V};
use crate::pb::resource::Resource;
use crate::pb::trace::{ResourceSpans, ScopeSpans, Span, Status, span};

pub(crate) const TID: &str = "5b8efff798038103d269b633813fc60c";
pub(crate) const SID: &str = "eee19b7ec3c1b174";

pub(crate) fn some_any(v: V) -> Option<AnyValue> {
    Some(AnyValue { value: Some(v) })
}

pub(crate) fn kv(key: &str, v: V) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: some_any(v),
    }
}

/// A request with every field of every message set, each to a value other than its default.
pub(crate) fn every_field_resource_spans() -> Vec<ResourceSpans> {
    let tid = hex::decode(TID).unwrap();
    let sid = hex::decode(SID).unwrap();
    vec![ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", V::StringValue("api".into()))],
            dropped_attributes_count: 1,
        }),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: "lib".into(),
                version: "1.2".into(),
                attributes: vec![kv("s", V::BoolValue(true))],
                dropped_attributes_count: 2,
            }),
            spans: vec![Span {
                trace_id: tid.clone().into(),
                span_id: sid.clone().into(),
                trace_state: "a=b".into(),
                parent_span_id: vec![1, 2, 3, 4, 5, 6, 7, 8].into(),
                flags: 257,
                name: "GET /".into(),
                kind: 2,
                start_time_unix_nano: 1_700_000_000_000_000_000,
                end_time_unix_nano: 1_700_000_000_000_000_500,
                attributes: vec![
                    kv("i", V::IntValue(-42)),
                    kv("d", V::DoubleValue(2.5)),
                    kv("b", V::BytesValue(vec![1, 2, 3].into())),
                    kv(
                        "a",
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
                        "m",
                        V::KvlistValue(KeyValueList {
                            values: vec![kv("n", V::BoolValue(false))],
                        }),
                    ),
                ],
                dropped_attributes_count: 3,
                events: vec![span::Event {
                    time_unix_nano: 5,
                    name: "ev".into(),
                    attributes: vec![kv("e", V::IntValue(7))],
                    dropped_attributes_count: 4,
                }],
                dropped_events_count: 5,
                links: vec![span::Link {
                    trace_id: tid.into(),
                    span_id: sid.into(),
                    trace_state: "x=y".into(),
                    attributes: vec![kv("l", V::StringValue(String::new()))],
                    dropped_attributes_count: 6,
                    flags: 1,
                }],
                dropped_links_count: 7,
                status: Some(Status {
                    message: "boom".into(),
                    code: 2,
                }),
            }],
            schema_url: "https://scope".into(),
        }],
        schema_url: "https://resource".into(),
    }]
}
