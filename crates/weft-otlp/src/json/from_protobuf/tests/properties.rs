//! Property tests: generated, edited, scrambled and arbitrary bytes, on which the writer and
//! prost agree.

use super::rewrite::{Rewrites, rewrite};
use super::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(String::new()),
        5 => "[a-z.]{1,8}",
        2 => "(?s).{0,6}",
        1 => vec(prop::sample::select(vec!["\"", "\\", "\u{0}", "\u{1f}", "\u{7f}", "é", "\n", "😀", "\u{2028}"]), 0..5)
            .prop_map(|v| v.concat()),
    ]
}

fn small_u32() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 1 => 1..10u32, 1 => any::<u32>()]
}

fn small_u64() -> impl Strategy<Value = u64> {
    prop_oneof![2 => Just(0u64), 1 => 1..1000u64, 2 => any::<u64>()]
}

/// Any double; `same_values` filters the ones serde_json does not parse back exactly.
fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => any::<f64>(),
        2 => any::<u64>().prop_map(f64::from_bits),
        1 => (-1000i32..1000).prop_map(f64::from),
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(-0.0), Just(0.0)],
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = bytes::Bytes> {
    vec(any::<u8>(), 0..max).prop_map(Into::into)
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
        bytes(10).prop_map(|b| Some(V::BytesValue(b))),
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

/// An ID: mostly the right length, sometimes not (the renderers write any length as hex).
fn id(len: usize) -> impl Strategy<Value = bytes::Bytes> {
    prop_oneof![
        8 => vec(any::<u8>(), len).prop_map(Into::into),
        1 => bytes(20),
    ]
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
    (id(16), id(8), text(), attributes(), small_u32(), small_u32()).prop_map(
        |(trace_id, span_id, trace_state, attributes, dropped, flags)| span::Link {
            trace_id,
            span_id,
            trace_state,
            attributes,
            dropped_attributes_count: dropped,
            flags,
        },
    )
}

fn enum_value(names: usize) -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0..names as i32, 1 => any::<i32>()]
}

fn a_span() -> impl Strategy<Value = Span> {
    (
        (
            id(16),
            id(8),
            prop_oneof![Just(bytes::Bytes::new()), id(8)],
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
                (trace_id, span_id, parent_span_id, trace_state, flags, name),
                (kind, start, end, attributes, dropped_attributes_count),
                (events, dropped_events_count, links, dropped_links_count, status),
            )| Span {
                trace_id,
                span_id,
                trace_state,
                parent_span_id,
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

fn traces_data() -> impl Strategy<Value = TracesData> {
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
    vec(resource_spans, 0..4).prop_map(|resource_spans| TracesData { resource_spans })
}

/// Whether every double in `td` reads back from serde_json's text exactly (serde_json's parser
/// is not exact for every double without its `float_roundtrip` feature).
fn doubles_round_trip(td: &TracesData) -> bool {
    fn any(v: &AnyValue) -> bool {
        match &v.value {
            Some(V::DoubleValue(d)) => {
                !d.is_finite() || serde_json::from_str::<f64>(&serde_json::to_string(d).unwrap()).ok() == Some(*d)
            }
            Some(V::ArrayValue(a)) => a.values.iter().all(any),
            Some(V::KvlistValue(l)) => kvs(&l.values),
            _ => true,
        }
    }
    fn kvs(list: &[KeyValue]) -> bool {
        list.iter().all(|kv| kv.value.as_ref().is_none_or(any))
    }
    td.resource_spans.iter().all(|rs| {
        rs.resource.as_ref().is_none_or(|r| kvs(&r.attributes))
            && rs.scope_spans.iter().all(|ss| {
                ss.scope.as_ref().is_none_or(|s| kvs(&s.attributes))
                    && ss.spans.iter().all(|s| {
                        kvs(&s.attributes)
                            && s.events.iter().all(|e| kvs(&e.attributes))
                            && s.links.iter().all(|l| kvs(&l.attributes))
                    })
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The writer's text parses to exactly `resource_spans_to_json`'s value (and is its text),
    /// however the resource spans are split across calls.
    #[test]
    fn matches_the_tree_renderer(td in traces_data(), split in any::<prop::sample::Index>()) {
        let pb = td.encode_to_vec();
        let new = new_text(&pb).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let tree = resource_spans_to_json(&td.resource_spans);
        if doubles_round_trip(&td) {
            prop_assert_eq!(parse(&new), tree.clone());
        }
        prop_assert_eq!(parse(&new), parse(&tree.to_string()));
        if maps_are_sorted() {
            prop_assert_eq!(&new, &tree.to_string());
        }
        let k = split.index(td.resource_spans.len() + 1);
        let (a, b) = td.resource_spans.split_at(k);
        let mut out = b"[".to_vec();
        let mut first = true;
        for part in [a, b] {
            let part = TracesData { resource_spans: part.to_vec() }.encode_to_vec();
            write_resource_spans_json(&part, &mut first, &mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        out.push(b']');
        prop_assert_eq!(first, td.resource_spans.is_empty());
        prop_assert_eq!(String::from_utf8(out).unwrap(), new);
    }

    /// Reordered fields, unknown fields, overridden scalars and split messages: the same text as
    /// the plain encoding, and prost agrees.
    #[test]
    fn unusual_encodings_render_the_same(td in traces_data(), seed in any::<u64>(), percent in 5..60u64) {
        let pb = td.encode_to_vec();
        let what = Rewrites { reorder: true, unknown: true, overridden: true, split: true, scramble: false };
        let rewritten = rewrite(&pb, what, seed, percent);
        prop_assert!(agree(&rewritten)?);
        prop_assert_eq!(new_text(&rewritten).unwrap(), new_text(&pb).unwrap());
    }

    /// Shuffled and repeated fields at every level (repeated singular messages included): prost
    /// and the writer agree.
    #[test]
    fn scrambled_encodings_agree_with_prost(td in traces_data(), seed in any::<u64>(), percent in 5..60u64) {
        let what = Rewrites { reorder: false, unknown: true, overridden: true, split: true, scramble: true };
        agree(&rewrite(&td.encode_to_vec(), what, seed, percent))?;
    }

    /// Byte edits of valid encodings (mostly invalid): same outcome as prost, no panic.
    #[test]
    fn edited_bytes_agree_with_prost(
        td in traces_data(),
        seed in any::<u64>(),
        edits in vec((any::<prop::sample::Index>(), 0..4u8, any::<u8>()), 1..4),
    ) {
        let what = Rewrites { unknown: seed % 2 == 0, split: true, ..Default::default() };
        let mut pb = rewrite(&td.encode_to_vec(), what, seed, 20);
        for (at, op, b) in edits {
            let i = at.index(pb.len() + 1);
            match op {
                0 => pb.insert(i, b),
                1 if i < pb.len() => { pb.remove(i); }
                2 if i < pb.len() => pb[i] = b,
                _ => {
                    let end = (i + (b as usize % 16)).min(pb.len());
                    let chunk = pb[i.min(end)..end].to_vec();
                    pb.splice(i..i, chunk);
                }
            }
        }
        agree(&pb)?;
    }

    #[test]
    fn arbitrary_bytes_agree_with_prost(pb in vec(any::<u8>(), 0..256)) {
        agree(&pb)?;
    }

    /// Arbitrary bytes built from the tags and lengths these messages use, to get past the
    /// first few bytes more often.
    #[test]
    fn protobuf_ish_bytes_agree_with_prost(pb in vec(prop::sample::select(
        vec![0x0a, 0x12, 0x1a, 0x22, 0x2a, 0x4a, 0x3a, 0x08, 0x10, 0x18, 0x21, 0x29, 0x39, 0x50,
             0x7a, 0x85, 0x01, 0x0b, 0x0c, 0x00, 0x02, 0x03, 0x04, 0x80, 0xff]), 0..128)) {
        agree(&pb)?;
    }
}
