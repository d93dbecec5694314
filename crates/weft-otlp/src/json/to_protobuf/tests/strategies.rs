//! Generated requests for the property tests: every message with text, small numbers, doubles
//! serde_json reads back exactly, and nested `AnyValue`s.

use super::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => Just(String::new()), 5 => "[a-z.]{1,8}", 2 => "(?s).{0,6}"]
}

fn small_u32() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 1 => 1..10u32, 1 => any::<u32>()]
}

fn small_u64() -> impl Strategy<Value = u64> {
    prop_oneof![2 => Just(0u64), 1 => 1..1000u64, 2 => any::<u64>()]
}

/// Doubles that survive serde_json's float parsing exactly, and the special values.
fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => any::<f64>().prop_filter("round-trips through serde_json", |d| {
            d.is_finite() && serde_json::from_str::<f64>(&serde_json::to_string(d).unwrap()).ok() == Some(*d)
        }),
        1 => (-1000i32..1000).prop_map(f64::from),
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(-0.0), Just(0.0)],
    ]
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        Just(None),
        text().prop_map(V::StringValue).prop_map(Some),
        any::<bool>().prop_map(V::BoolValue).prop_map(Some),
        prop_oneof![Just(0i64), any::<i64>()]
            .prop_map(V::IntValue)
            .prop_map(Some),
        double().prop_map(V::DoubleValue).prop_map(Some),
        vec(any::<u8>(), 0..10).prop_map(|b| Some(V::BytesValue(b.into()))),
    ]
    .prop_map(|value| AnyValue { value });
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|values| AnyValue {
                value: Some(V::ArrayValue(ArrayValue { values })),
            }),
            vec((text(), option::of(inner)), 0..4).prop_map(|kvs| AnyValue {
                value: Some(V::KvlistValue(KeyValueList {
                    values: kvs.into_iter().map(|(key, value)| KeyValue { key, value }).collect(),
                })),
            }),
        ]
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    vec((text(), option::of(any_value())), 0..4)
        .prop_map(|kvs| kvs.into_iter().map(|(key, value)| KeyValue { key, value }).collect())
}

fn event() -> impl Strategy<Value = span::Event> {
    (small_u64(), text(), attributes(), small_u32()).prop_map(|(time_unix_nano, name, attributes, dropped)| {
        span::Event {
            time_unix_nano,
            name,
            attributes,
            dropped_attributes_count: dropped,
        }
    })
}

fn link() -> impl Strategy<Value = span::Link> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 8]>(),
        text(),
        attributes(),
        small_u32(),
        small_u32(),
    )
        .prop_map(|(t, s, trace_state, attributes, dropped, flags)| span::Link {
            trace_id: t.to_vec().into(),
            span_id: s.to_vec().into(),
            trace_state,
            attributes,
            dropped_attributes_count: dropped,
            flags,
        })
}

fn enum_value(names: usize) -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0..names as i32, 1 => any::<i32>()]
}

fn a_span() -> impl Strategy<Value = Span> {
    (
        (
            any::<[u8; 16]>(),
            any::<[u8; 8]>(),
            option::of(any::<[u8; 8]>()),
            text(),
            small_u32(),
            text(),
        ),
        (enum_value(6), small_u64(), small_u64(), attributes(), small_u32()),
        (
            vec(event(), 0..3),
            small_u32(),
            vec(link(), 0..2),
            small_u32(),
            option::of((text(), enum_value(3))),
        ),
    )
        .prop_map(
            |(
                (t, s, parent, trace_state, flags, name),
                (kind, start, end, attributes, dropped_attributes_count),
                (events, dropped_events_count, links, dropped_links_count, status),
            )| Span {
                trace_id: t.to_vec().into(),
                span_id: s.to_vec().into(),
                trace_state,
                parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default().into(),
                flags,
                name,
                kind,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes,
                dropped_attributes_count,
                events,
                dropped_events_count,
                links,
                dropped_links_count,
                status: status.map(|(message, code)| Status { message, code }),
            },
        )
}

pub(super) fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let scope = (text(), text(), attributes(), small_u32()).prop_map(|(name, version, attributes, dropped)| {
        InstrumentationScope {
            name,
            version,
            attributes,
            dropped_attributes_count: dropped,
        }
    });
    let scope_spans =
        (option::of(scope), vec(a_span(), 0..3), text()).prop_map(|(scope, spans, schema_url)| ScopeSpans {
            scope,
            spans,
            schema_url,
        });
    let resource = (attributes(), small_u32()).prop_map(|(attributes, dropped)| Resource {
        attributes,
        dropped_attributes_count: dropped,
    });
    let resource_spans =
        (option::of(resource), vec(scope_spans, 0..3), text()).prop_map(|(resource, scope_spans, schema_url)| {
            ResourceSpans {
                resource,
                scope_spans,
                schema_url,
            }
        });
    vec(resource_spans, 0..3).prop_map(|resource_spans| ExportTraceServiceRequest { resource_spans })
}
