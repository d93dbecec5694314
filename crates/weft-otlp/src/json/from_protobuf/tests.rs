//! `write_resource_spans_json` against the reference: prost's `TracesData::decode` followed by
//! `resource_spans_to_json`. Both must accept the same bytes and write the same text.

use crate::json::fixtures::{SID, TID, every_field_resource_spans, kv, some_any};

use super::{Msg, ProtobufError, ProtobufProblem, RECURSION_LIMIT, Ty, write_resource_spans_json};
use crate::json::resource_spans_to_json;
use crate::pb::common::any_value::Value as V;
use crate::pb::common::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList};
use crate::pb::resource::Resource;
use crate::pb::trace::{ResourceSpans, ScopeSpans, Span, Status, TracesData, span};
use crate::wire::{next_field, put_bytes, put_fixed64, put_tag, put_varint, put_varint_field};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message;
use serde_json::{Value, json};

/// The new writer's text for `pb`, in brackets.
fn new_text(pb: &[u8]) -> Result<String, ProtobufError> {
    let mut out = b"[".to_vec();
    let mut first = true;
    write_resource_spans_json(pb, &mut first, &mut out)?;
    out.push(b']');
    Ok(String::from_utf8(out).expect("JSON is UTF-8"))
}

/// The tree path's text for `pb`: what the Tempo endpoint wrote before.
fn old_text(pb: &[u8]) -> Result<String, prost::DecodeError> {
    let td = TracesData::decode(pb)?;
    Ok(serde_json::to_string(&resource_spans_to_json(&td.resource_spans)).expect("serializes"))
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Whether `serde_json::Map` sorts its keys (it does unless the `preserve_order` feature is on).
/// Then the two paths write the same bytes, not just the same values.
fn maps_are_sorted() -> bool {
    let mut m = serde_json::Map::new();
    m.insert("b".into(), Value::Null);
    m.insert("a".into(), Value::Null);
    m.keys().next().map(String::as_str) == Some("a")
}

/// Whether two renderings are the same JSON: the same value, and the same text when maps are
/// sorted. Text nested deeper than serde_json's parser allows (128) is compared as text only.
fn same_json(new: &str, old: &str) -> Result<(), String> {
    match (serde_json::from_str::<Value>(new), serde_json::from_str::<Value>(old)) {
        (Ok(a), Ok(b)) if a != b => return Err(format!("values differ:\n{a}\n{b}")),
        (Ok(_), Ok(_)) => {}
        (Err(e), _) | (_, Err(e)) if !maps_are_sorted() => return Err(format!("not JSON: {e}")),
        _ => {}
    }
    if maps_are_sorted() && new != old {
        return Err(format!("texts differ:\n{new}\n{old}"));
    }
    Ok(())
}

/// Both paths accept `pb` and write the same text; returns it.
#[track_caller]
fn same(pb: &[u8]) -> String {
    let old = old_text(pb).unwrap_or_else(|e| panic!("prost rejects {pb:02x?}: {e}"));
    let new = new_text(pb).unwrap_or_else(|e| panic!("write_resource_spans_json rejects {pb:02x?}: {e}"));
    if let Err(e) = same_json(&new, &old) {
        panic!("{e}\nfor {pb:02x?}");
    }
    new
}

/// Both paths reject `pb`; returns the new writer's error.
#[track_caller]
fn rejected(pb: &[u8]) -> ProtobufError {
    assert!(old_text(pb).is_err(), "prost accepts {pb:02x?}");
    new_text(pb).expect_err("write_resource_spans_json accepts")
}

#[track_caller]
fn rejected_as(pb: &[u8], problem: ProtobufProblem) {
    assert_eq!(rejected(pb).problem, problem, "for {pb:02x?}");
}

// ---- building protobuf by hand ----

fn ld(field: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, field, payload);
    out
}

fn vi(field: u32, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint_field(&mut out, field, v);
    out
}

fn f64_field(field: u32, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_fixed64(&mut out, field, v);
    out
}

fn f32_field(field: u32, v: u32) -> Vec<u8> {
    let mut out = Vec::new();
    put_tag(&mut out, field, 5);
    out.extend_from_slice(&v.to_le_bytes());
    out
}

/// A group field `field` holding `content`.
fn group(field: u32, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_tag(&mut out, field, 3);
    out.extend_from_slice(content);
    put_tag(&mut out, field, 4);
    out
}

/// A `TracesData` whose only span has these fields.
fn span_pb(fields: &[u8]) -> Vec<u8> {
    ld(1, &ld(2, &ld(2, fields)))
}

/// A `TracesData` whose only span has one attribute with this `AnyValue` payload.
fn value_pb(any: &[u8]) -> Vec<u8> {
    span_pb(&ld(9, &[ld(1, b"k"), ld(2, any)].concat()))
}

/// The JSON of the only span of `text`.
fn the_span(text: &str) -> Value {
    parse(text)[0]["scopeSpans"][0]["spans"][0].clone()
}

/// The JSON of the first attribute's value of the only span of `text`.
fn the_value(text: &str) -> Value {
    the_span(text)["attributes"][0]["value"].clone()
}

fn every_field_message() -> TracesData {
    TracesData {
        resource_spans: every_field_resource_spans(),
    }
}

/// What [`every_field_message`] renders as, written out independently of both renderers.
fn every_field_json() -> Value {
    json!([{
        "resource": {
            "attributes": [{"key": "service.name", "value": {"stringValue": "api"}}],
            "droppedAttributesCount": 1
        },
        "scopeSpans": [{
            "scope": {
                "name": "lib", "version": "1.2",
                "attributes": [{"key": "s", "value": {"boolValue": true}}],
                "droppedAttributesCount": 2
            },
            "spans": [{
                "traceId": TID, "spanId": SID, "traceState": "a=b", "parentSpanId": "0102030405060708",
                "flags": 257, "name": "GET /", "kind": 2,
                "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000000000500",
                "attributes": [
                    {"key": "i", "value": {"intValue": "-42"}},
                    {"key": "d", "value": {"doubleValue": 2.5}},
                    {"key": "b", "value": {"bytesValue": "AQID"}},
                    {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "x"}]}}},
                    {"key": "m", "value": {"kvlistValue": {"values": [{"key": "n", "value": {"boolValue": false}}]}}}
                ],
                "droppedAttributesCount": 3,
                "events": [{
                    "timeUnixNano": "5", "name": "ev",
                    "attributes": [{"key": "e", "value": {"intValue": "7"}}],
                    "droppedAttributesCount": 4
                }],
                "droppedEventsCount": 5,
                "links": [{
                    "traceId": TID, "spanId": SID, "traceState": "x=y",
                    "attributes": [{"key": "l", "value": {"stringValue": ""}}],
                    "droppedAttributesCount": 6, "flags": 1
                }],
                "droppedLinksCount": 7,
                "status": {"message": "boom", "code": 2}
            }],
            "schemaUrl": "https://scope"
        }],
        "schemaUrl": "https://resource"
    }])
}

#[test]
fn every_field_of_every_message() {
    let text = same(&every_field_message().encode_to_vec());
    assert_eq!(parse(&text), every_field_json());
}

#[test]
fn defaults_are_omitted_and_empty_messages_kept() {
    let td = TracesData {
        resource_spans: vec![
            ResourceSpans {
                resource: Some(Resource::default()),
                scope_spans: vec![
                    ScopeSpans {
                        scope: Some(InstrumentationScope::default()),
                        spans: vec![Span {
                            attributes: vec![KeyValue::default()],
                            events: vec![span::Event::default()],
                            links: vec![span::Link::default()],
                            status: Some(Status::default()),
                            ..Default::default()
                        }],
                        schema_url: String::new(),
                    },
                    ScopeSpans::default(),
                ],
                schema_url: String::new(),
            },
            ResourceSpans::default(),
        ],
    };
    let text = same(&td.encode_to_vec());
    assert_eq!(
        parse(&text),
        json!([
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "scope": {"name": ""},
                        "spans": [{
                            "traceId": "", "spanId": "", "name": "", "kind": 0,
                            "startTimeUnixNano": "0", "endTimeUnixNano": "0",
                            "attributes": [{"key": "", "value": {}}],
                            "events": [{"timeUnixNano": "0", "name": ""}],
                            "links": [{"traceId": "", "spanId": ""}],
                            "status": {}
                        }]
                    },
                    {"spans": []}
                ]
            },
            {"scopeSpans": []}
        ])
    );
    // A span without a status still has an empty one; no resource spans write nothing.
    assert_eq!(the_span(&same(&span_pb(b"")))["status"], json!({}));
    assert_eq!(same(b""), "[]");
    assert_eq!(same(&TracesData::default().encode_to_vec()), "[]");
}

#[test]
fn every_any_value_kind() {
    let cases: Vec<(Option<AnyValue>, Value)> = vec![
        (None, json!({})),
        (Some(AnyValue::default()), json!({})),
        (some_any(V::StringValue("s".into())), json!({"stringValue": "s"})),
        (some_any(V::StringValue(String::new())), json!({"stringValue": ""})),
        (
            some_any(V::StringValue("q\"b\\n\n\t\r\u{8}\u{c}\u{0}\u{1f}\u{7f}é😀</".into())),
            json!({"stringValue": "q\"b\\n\n\t\r\u{8}\u{c}\u{0}\u{1f}\u{7f}é😀</"}),
        ),
        (some_any(V::BoolValue(true)), json!({"boolValue": true})),
        (some_any(V::BoolValue(false)), json!({"boolValue": false})),
        (some_any(V::IntValue(0)), json!({"intValue": "0"})),
        (
            some_any(V::IntValue(i64::MIN)),
            json!({"intValue": "-9223372036854775808"}),
        ),
        (
            some_any(V::IntValue(i64::MAX)),
            json!({"intValue": "9223372036854775807"}),
        ),
        (some_any(V::DoubleValue(2.5)), json!({"doubleValue": 2.5})),
        (some_any(V::DoubleValue(0.0)), json!({"doubleValue": 0.0})),
        (some_any(V::DoubleValue(-0.0)), json!({"doubleValue": -0.0})),
        (some_any(V::DoubleValue(1e300)), json!({"doubleValue": 1e300})),
        (
            some_any(V::DoubleValue(f64::MIN_POSITIVE)),
            json!({"doubleValue": f64::MIN_POSITIVE}),
        ),
        (some_any(V::DoubleValue(f64::NAN)), json!({"doubleValue": "NaN"})),
        (
            some_any(V::DoubleValue(f64::INFINITY)),
            json!({"doubleValue": "Infinity"}),
        ),
        (
            some_any(V::DoubleValue(f64::NEG_INFINITY)),
            json!({"doubleValue": "-Infinity"}),
        ),
        (some_any(V::BytesValue(Vec::new().into())), json!({"bytesValue": ""})),
        (
            some_any(V::BytesValue(vec![0xff].into())),
            json!({"bytesValue": "/w=="}),
        ),
        (
            some_any(V::BytesValue(vec![0xfb, 0xef].into())),
            json!({"bytesValue": "++8="}),
        ),
        (
            some_any(V::BytesValue(b"hello".to_vec().into())),
            json!({"bytesValue": "aGVsbG8="}),
        ),
        (
            some_any(V::BytesValue(b"hel".to_vec().into())),
            json!({"bytesValue": "aGVs"}),
        ),
        (
            some_any(V::ArrayValue(ArrayValue::default())),
            json!({"arrayValue": {"values": []}}),
        ),
        (
            some_any(V::KvlistValue(KeyValueList::default())),
            json!({"kvlistValue": {"values": []}}),
        ),
        (
            some_any(V::ArrayValue(ArrayValue {
                values: vec![
                    AnyValue::default(),
                    AnyValue {
                        value: Some(V::KvlistValue(KeyValueList {
                            values: vec![
                                KeyValue {
                                    key: "x".into(),
                                    value: None,
                                },
                                kv(
                                    "y",
                                    V::ArrayValue(ArrayValue {
                                        values: vec![AnyValue {
                                            value: Some(V::BoolValue(true)),
                                        }],
                                    }),
                                ),
                            ],
                        })),
                    },
                ],
            })),
            json!({"arrayValue": {"values": [
                {},
                {"kvlistValue": {"values": [
                    {"key": "x", "value": {}},
                    {"key": "y", "value": {"arrayValue": {"values": [{"boolValue": true}]}}}
                ]}}
            ]}}),
        ),
    ];
    for (value, expected) in cases {
        let mut td = TracesData {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span::default()],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        td.resource_spans[0].scope_spans[0].spans[0].attributes = vec![KeyValue {
            key: "k".into(),
            value: value.clone(),
        }];
        let text = same(&td.encode_to_vec());
        assert_eq!(the_value(&text), expected, "for {value:?}");
    }
}

/// Every double's bit pattern writes as `serde_json` writes it (the same shortest form).
#[test]
fn doubles_write_as_serde_json_writes_them() {
    for bits in [
        0u64,
        1,
        0x7fef_ffff_ffff_ffff,
        0x8000_0000_0000_0001,
        0x7ff0_0000_0000_0001,
        0xfff8_0000_0000_0000,
        0x3fb9_9999_9999_999a,
        0x4330_0000_0000_0000,
        0x44b5_2d02_c7e1_4af6,
    ] {
        same(&value_pb(&f64_field(4, bits)));
    }
}

/// Strings are escaped as `serde_json` escapes them, every control character included.
#[test]
fn strings_are_escaped_as_serde_json_escapes_them() {
    let all: String = (0u32..0x80)
        .filter_map(char::from_u32)
        .chain("é€😀\u{2028}".chars())
        .collect();
    let text = same(&span_pb(&[ld(5, all.as_bytes()), ld(3, all.as_bytes())].concat()));
    assert_eq!(the_span(&text)["name"], json!(all));
    assert_eq!(the_span(&text)["traceState"], json!(all));
}

/// Hex IDs of any length, as `hex::encode` writes them.
#[test]
fn ids_of_any_length() {
    for id in [&b""[..], &[0xab], &[0; 16], &[0xff; 33]] {
        let link = ld(13, &[ld(1, id), ld(2, id)].concat());
        let text = same(&span_pb(&[ld(1, id), ld(2, id), ld(4, id), link].concat()));
        let s = the_span(&text);
        assert_eq!(s["traceId"], json!(hex::encode(id)));
        assert_eq!(s["links"][0]["spanId"], json!(hex::encode(id)));
    }
}

#[test]
fn integers_are_truncated_as_prost_truncates_them() {
    // `uint32` and enum fields keep the low 32 bits of a 64-bit varint.
    let text = same(&span_pb(
        &[
            vi(10, (1 << 32) | 7),
            vi(12, 1 << 32),
            vi(6, u64::MAX),
            vi(14, u64::MAX),
        ]
        .concat(),
    ));
    let s = the_span(&text);
    assert_eq!(s["droppedAttributesCount"], json!(7));
    assert_eq!(s.get("droppedEventsCount"), None);
    assert_eq!(s["kind"], json!(-1));
    assert_eq!(s["droppedLinksCount"], json!(u32::MAX));
    // A bool is any non-zero varint.
    assert_eq!(the_value(&same(&value_pb(&vi(2, 1 << 40)))), json!({"boolValue": true}));
    assert_eq!(the_value(&same(&value_pb(&vi(3, u64::MAX)))), json!({"intValue": "-1"}));
}

// ---- unusual but valid encodings ----

/// A small splitmix64 generator for the rewrites.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Encodes one field with a value as `next_field` returns it.
fn field(number: u32, wire_type: u8, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_tag(&mut out, number, wire_type);
    if wire_type == 2 {
        put_varint(&mut out, value.len() as u64);
    }
    out.extend_from_slice(value);
    out
}

/// The fields of a valid message without groups: number, wire type, value.
fn fields_of(buf: &[u8]) -> Vec<(u32, u8, &[u8])> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let (number, wire_type, value) = next_field(buf, &mut pos).expect("valid protobuf");
        out.push((number, wire_type, &buf[value]));
    }
    out
}

fn singular_message(msg: Msg, number: u32) -> bool {
    matches!(
        (msg, number),
        (Msg::ResourceSpans, 1) | (Msg::ScopeSpans, 1) | (Msg::Span, 15) | (Msg::KeyValue, 2) | (Msg::AnyValue, 5 | 6)
    )
}

/// What a rewrite may do to a valid encoding. Each kind keeps the decoded message the same.
#[derive(Clone, Copy, Default)]
struct Rewrites {
    /// Puts the fields in a random order, keeping the relative order of the occurrences of each
    /// field (and of all members of `AnyValue`'s oneof).
    reorder: bool,
    /// Adds unknown fields of every wire type, groups included.
    unknown: bool,
    /// Precedes singular scalar fields (and oneof members) with other values, which lose.
    overridden: bool,
    /// Splits singular messages into two occurrences, which prost merges.
    split: bool,
    /// Anything at all, the message included: shuffles every field and repeats any.
    scramble: bool,
}

struct Rewriter {
    rng: Rng,
    what: Rewrites,
    percent: u64,
}

impl Rewriter {
    fn chance(&mut self) -> bool {
        self.rng.chance(self.percent)
    }

    /// Rewrites the message `buf`; returns it and the offsets where its fields end.
    fn message(&mut self, msg: Msg, buf: &[u8]) -> (Vec<u8>, Vec<usize>) {
        // (ordering group, encoded field)
        let mut items: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut unknown_group = 1 << 40;
        let mut unknown = |this: &mut Self, items: &mut Vec<(u64, Vec<u8>)>| {
            if this.what.unknown && this.chance() {
                unknown_group += 1;
                items.push((unknown_group, this.unknown_field(msg)));
            }
        };
        unknown(self, &mut items);
        for (number, wire_type, value) in fields_of(buf) {
            let group = if msg == Msg::AnyValue && (1..=7).contains(&number) {
                0
            } else {
                u64::from(number)
            };
            let ty = msg.field(number).expect("a known field");
            if self.what.overridden && self.chance() {
                if msg == Msg::AnyValue {
                    let junk = self.junk_any(number);
                    items.push((group, junk));
                } else if let Some(junk) = self.junk(number, ty) {
                    items.push((group, junk));
                }
            }
            match ty {
                Ty::Message(m) => {
                    let (inner, ends) = self.message(m, value);
                    if self.what.split && singular_message(msg, number) && self.chance() {
                        let cut = if ends.is_empty() || self.rng.chance(20) {
                            0
                        } else {
                            ends[self.rng.below(ends.len())]
                        };
                        items.push((group, field(number, 2, &inner[..cut])));
                        items.push((group, field(number, 2, &inner[cut..])));
                    } else {
                        items.push((group, field(number, 2, &inner)));
                    }
                }
                _ => items.push((group, field(number, wire_type, value))),
            }
            if self.what.scramble && self.chance() {
                let dup = items[self.rng.below(items.len())].clone();
                items.push(dup);
            }
            unknown(self, &mut items);
        }
        if self.what.scramble {
            for i in (1..items.len()).rev() {
                let j = self.rng.below(i + 1);
                items.swap(i, j);
            }
        } else if self.what.reorder {
            let salt = self.rng.next();
            items.sort_by_key(|(group, _)| {
                let mut r = Rng(salt ^ group.wrapping_mul(0x2545_f491_4f6c_dd1d));
                r.next()
            });
        }
        let mut out = Vec::new();
        let mut ends = Vec::new();
        for (_, f) in items {
            out.extend_from_slice(&f);
            ends.push(out.len());
        }
        (out, ends)
    }

    /// Another valid value for field `number` of type `ty`, or `None` for a repeated field.
    fn junk(&mut self, number: u32, ty: Ty) -> Option<Vec<u8>> {
        let v = self.rng.next();
        Some(match ty {
            Ty::Varint => vi(number, v),
            Ty::Fixed32 => f32_field(number, v as u32),
            Ty::Fixed64 => f64_field(number, v),
            Ty::Str => ld(number, ["", "junk", "\"é\n"][self.rng.below(3)].as_bytes()),
            Ty::Bytes => ld(number, &v.to_le_bytes()[..self.rng.below(9)]),
            Ty::Message(_) => return None,
        })
    }

    /// Some member of `AnyValue`'s oneof, which a later member `number` overrides (a message
    /// member is not followed by itself, which would merge rather than override).
    fn junk_any(&mut self, number: u32) -> Vec<u8> {
        let v = self.rng.next();
        match self.rng.below(7) {
            4 | 5 if number == 5 || number == 6 => vi(3, v),
            0 => ld(1, b"junk"),
            1 => vi(2, v & 1),
            2 => vi(3, v),
            3 => f64_field(4, v),
            4 => ld(5, &ld(1, &vi(3, v))),
            5 => ld(6, &ld(1, &ld(1, b"junk"))),
            _ => ld(7, &v.to_le_bytes()),
        }
    }

    fn unknown_field(&mut self, msg: Msg) -> Vec<u8> {
        let number = loop {
            let n = match self.rng.below(4) {
                0 => 17 + self.rng.below(30) as u32,
                1 => 1000,
                2 => (1 << 29) - 1,
                _ => 1 + self.rng.below(16) as u32,
            };
            if msg.field(n).is_none() {
                break n;
            }
        };
        let v = self.rng.next();
        match self.rng.below(5) {
            0 => vi(number, v),
            1 => f64_field(number, v),
            2 => ld(number, &v.to_le_bytes()[..self.rng.below(9)]),
            3 => f32_field(number, v as u32),
            _ => group(
                number,
                &[vi(1, v), ld(2, b"\xff\xfe not UTF-8"), group(3, &f32_field(4, 5))].concat(),
            ),
        }
    }
}

fn rewrite(pb: &[u8], what: Rewrites, seed: u64, percent: u64) -> Vec<u8> {
    Rewriter {
        rng: Rng(seed),
        what,
        percent,
    }
    .message(Msg::TracesData, pb)
    .0
}

/// Each kind of rewrite, alone and all together, changes nothing in the text, and prost agrees.
#[test]
fn unusual_encodings_of_every_field_render_the_same() {
    let pb = every_field_message().encode_to_vec();
    let expected = same(&pb);
    let kinds = [
        Rewrites {
            reorder: true,
            ..Default::default()
        },
        Rewrites {
            unknown: true,
            ..Default::default()
        },
        Rewrites {
            overridden: true,
            ..Default::default()
        },
        Rewrites {
            split: true,
            ..Default::default()
        },
        Rewrites {
            reorder: true,
            unknown: true,
            overridden: true,
            split: true,
            scramble: false,
        },
    ];
    for (k, what) in kinds.into_iter().enumerate() {
        for seed in 0..20 {
            let rewritten = rewrite(&pb, what, seed, 100);
            assert_ne!(rewritten, pb, "rewrite {k} changed nothing");
            assert_eq!(same(&rewritten), expected, "rewrite {k}, seed {seed}");
        }
    }
}

#[test]
fn fields_in_reverse_order() {
    let pb = span_pb(
        &[
            ld(15, &[vi(3, 1), ld(2, b"m")].concat()),
            ld(9, &[ld(2, &vi(3, 1)), ld(1, b"b")].concat()),
            f64_field(8, 2),
            ld(5, b"n"),
            ld(9, &ld(1, b"a")),
            f64_field(7, 1),
            ld(2, &[2; 8]),
            ld(1, &[1; 16]),
        ]
        .concat(),
    );
    let s = the_span(&same(&pb));
    assert_eq!(s["attributes"][0]["key"], "b");
    assert_eq!(s["attributes"][1], json!({"key": "a", "value": {}}));
    assert_eq!(s["status"], json!({"message": "m", "code": 1}));
    assert_eq!(
        (&s["startTimeUnixNano"], &s["endTimeUnixNano"]),
        (&json!("1"), &json!("2"))
    );
}

#[test]
fn the_last_scalar_wins_even_when_it_is_the_default() {
    let s = the_span(&same(&span_pb(
        &[
            ld(5, b"first"),
            vi(10, 9),
            vi(6, 2),
            f32_field(16, 3),
            ld(3, b"t"),
            ld(4, &[1; 8]),
            ld(5, b"second"),
            vi(10, 0),
            vi(6, 0),
            f32_field(16, 0),
            ld(3, b""),
            ld(4, b""),
        ]
        .concat(),
    )));
    assert_eq!(s["name"], "second");
    assert_eq!(s["kind"], 0);
    for gone in ["droppedAttributesCount", "flags", "traceState", "parentSpanId"] {
        assert_eq!(s.get(gone), None, "{gone}");
    }
}

#[test]
fn repeated_singular_messages_merge() {
    // Resource: attributes append, the count's last value wins.
    let rs = [
        ld(1, &[ld(1, &ld(1, b"a")), vi(2, 5)].concat()),
        ld(2, b""),
        ld(1, &[ld(1, &ld(1, b"b")), vi(2, 6)].concat()),
    ]
    .concat();
    let v = parse(&same(&ld(1, &rs)));
    assert_eq!(
        v[0]["resource"],
        json!({"attributes": [{"key": "a", "value": {}}, {"key": "b", "value": {}}], "droppedAttributesCount": 6})
    );
    // Scope: name from one occurrence, version from another.
    let ss = [ld(1, &ld(1, b"lib")), ld(2, b""), ld(1, &ld(2, b"1.0"))].concat();
    let v = parse(&same(&ld(1, &ld(2, &ss))));
    assert_eq!(v[0]["scopeSpans"][0]["scope"], json!({"name": "lib", "version": "1.0"}));
    // Status: the code of one, the message of another, a later code wins.
    let st = [ld(15, &vi(3, 2)), ld(15, &ld(2, b"m")), ld(15, &vi(3, 1))].concat();
    assert_eq!(
        the_span(&same(&span_pb(&st)))["status"],
        json!({"message": "m", "code": 1})
    );
    // A key/value pair's value: its occurrences form one AnyValue, whose last member wins.
    let attr = |values: &[Vec<u8>]| {
        let kv: Vec<u8> = std::iter::once(ld(1, b"k"))
            .chain(values.iter().map(|v| ld(2, v)))
            .collect::<Vec<_>>()
            .concat();
        the_value(&same(&span_pb(&ld(9, &kv))))
    };
    assert_eq!(attr(&[ld(1, b"s"), vi(3, 4)]), json!({"intValue": "4"}));
    assert_eq!(attr(&[vi(3, 4), Vec::new()]), json!({"intValue": "4"}));
    assert_eq!(attr(&[Vec::new(), Vec::new()]), json!({}));
    let array = |items: &[i64]| {
        ld(
            5,
            &items
                .iter()
                .map(|i| ld(1, &vi(3, *i as u64)))
                .collect::<Vec<_>>()
                .concat(),
        )
    };
    let ints = |items: &[i64]| json!({"arrayValue": {"values": items.iter().map(|i| json!({"intValue": i.to_string()})).collect::<Vec<_>>()}});
    // Consecutive arrays merge, across occurrences of the value and unknown fields.
    assert_eq!(attr(&[array(&[1, 2]), array(&[3])]), ints(&[1, 2, 3]));
    assert_eq!(
        attr(&[[array(&[1]), vi(99, 0), array(&[2])].concat(), array(&[3])]),
        ints(&[1, 2, 3])
    );
    // Another member in between starts over.
    assert_eq!(attr(&[array(&[1]), ld(1, b"s"), array(&[2])]), ints(&[2]));
    assert_eq!(
        attr(&[array(&[1]), ld(1, b"s"), array(&[2]), array(&[3])]),
        ints(&[2, 3])
    );
    assert_eq!(
        attr(&[[array(&[1]), ld(1, b"s"), array(&[2]), array(&[3])].concat()]),
        ints(&[2, 3])
    );
    assert_eq!(attr(&[[array(&[1]), vi(2, 1)].concat(), array(&[2, 3])]), ints(&[2, 3]));
    assert_eq!(attr(&[array(&[1]), ld(6, b""), array(&[2])]), ints(&[2]));
    // Kvlists merge the same way.
    let kvlist = |keys: &[&str]| {
        ld(
            6,
            &keys
                .iter()
                .map(|k| ld(1, &ld(1, k.as_bytes())))
                .collect::<Vec<_>>()
                .concat(),
        )
    };
    assert_eq!(
        attr(&[kvlist(&["a"]), kvlist(&["b"])]),
        json!({"kvlistValue": {"values": [{"key": "a", "value": {}}, {"key": "b", "value": {}}]}})
    );
    // A merged array's elements with merged values of their own.
    let nested = ld(
        5,
        &ld(1, &[ld(5, &ld(1, &vi(3, 1))), ld(5, &ld(1, &vi(3, 2)))].concat()),
    );
    assert_eq!(
        attr(&[nested.clone(), nested]),
        json!({"arrayValue": {"values": [ints(&[1, 2]), ints(&[1, 2])]}})
    );
    // A key/value pair in a merged kvlist, with its own merged value.
    let pair = ld(
        6,
        &ld(1, &[ld(1, b"x"), ld(2, &array(&[1])), ld(2, &array(&[2]))].concat()),
    );
    assert_eq!(
        attr(&[pair.clone(), pair]),
        json!({"kvlistValue": {"values": [{"key": "x", "value": ints(&[1, 2])}, {"key": "x", "value": ints(&[1, 2])}]}})
    );
}

#[test]
fn unknown_fields_and_groups_are_skipped() {
    let unknowns = [
        vi(1000, 1),
        f64_field(999, 2),
        ld(77, b"\xff not UTF-8"),
        f32_field(536_870_911, 3),
        group(50, &[vi(1, 1), group(2, &ld(3, b"x")), group(2, b"")].concat()),
        group(51, b""),
    ]
    .concat();
    // In the TracesData, a span, a status (whose field 1 is reserved) and an AnyValue.
    let plain = same(&span_pb(&[ld(5, b"n"), ld(15, b""), ld(9, &ld(2, &vi(3, 1)))].concat()));
    let pb = [
        unknowns.clone(),
        span_pb(
            &[
                unknowns.clone(),
                ld(5, b"n"),
                ld(15, &[vi(1, 5), unknowns.clone()].concat()),
                ld(9, &ld(2, &[unknowns.clone(), vi(3, 1), unknowns.clone()].concat())),
            ]
            .concat(),
        ),
    ]
    .concat();
    assert_eq!(same(&pb), plain);
}

// ---- invalid input ----

#[test]
fn invalid_utf8_in_any_string_is_an_error() {
    let bad = b"a\xffb";
    let cases = [
        ld(1, &ld(3, bad)),                            // ResourceSpans.schema_url
        ld(1, &ld(2, &ld(3, bad))),                    // ScopeSpans.schema_url
        ld(1, &ld(2, &ld(1, &ld(1, bad)))),            // InstrumentationScope.name
        ld(1, &ld(2, &ld(1, &ld(2, bad)))),            // InstrumentationScope.version
        span_pb(&ld(3, bad)),                          // Span.trace_state
        span_pb(&ld(5, bad)),                          // Span.name
        span_pb(&ld(11, &ld(2, bad))),                 // Event.name
        span_pb(&ld(13, &ld(3, bad))),                 // Link.trace_state
        span_pb(&ld(15, &ld(2, bad))),                 // Status.message
        span_pb(&ld(9, &ld(1, bad))),                  // KeyValue.key
        value_pb(&ld(1, bad)),                         // AnyValue.string_value
        ld(1, &ld(1, &ld(1, &ld(1, bad)))),            // a resource attribute's key
        value_pb(&ld(5, &ld(1, &ld(1, bad)))),         // in an array
        value_pb(&ld(6, &ld(1, &ld(1, bad)))),         // in a kvlist
        span_pb(&[ld(5, bad), ld(5, b"ok")].concat()), // overridden
        value_pb(&[ld(1, bad), vi(3, 1)].concat()),    // an overridden oneof member
        value_pb(&[ld(5, &ld(1, &ld(1, bad))), vi(3, 1)].concat()),
    ];
    for pb in cases {
        assert!(matches!(rejected(&pb).problem, ProtobufProblem::Utf8(_)), "{pb:02x?}");
    }
    // Bytes fields hold anything.
    same(&span_pb(&[ld(1, bad), ld(2, bad), ld(4, bad)].concat()));
    same(&value_pb(&ld(7, bad)));
}

#[test]
fn malformed_input_is_an_error() {
    rejected_as(&[0x0a], ProtobufProblem::Varint);
    rejected_as(&[0x0a, 0x05, 1, 2], ProtobufProblem::Overrun);
    rejected_as(&[0x0a, 0x80], ProtobufProblem::Varint);
    rejected_as(&[0x00], ProtobufProblem::Key);
    rejected_as(&[0x07], ProtobufProblem::Key);
    rejected_as(&[0x0e], ProtobufProblem::WireType(6));
    rejected_as(&[0x0f, 0x00], ProtobufProblem::WireType(7));
    // A key above 32 bits.
    rejected_as(&[0x80, 0x80, 0x80, 0x80, 0x10], ProtobufProblem::Key);
    // End of a group that did not start, a group that does not end, or ends as another.
    rejected_as(&[0x0c], ProtobufProblem::EndGroup);
    rejected_as(&group(9, b"")[..1], ProtobufProblem::Overrun);
    rejected_as(&[0x4b, 0x54], ProtobufProblem::EndGroup);
    // A known field with the wrong wire type; a group as a known field.
    rejected_as(
        &vi(1, 1),
        ProtobufProblem::Mismatch {
            field: 1,
            expected: 2,
            found: 0,
        },
    );
    rejected_as(
        &span_pb(&ld(6, b"")),
        ProtobufProblem::Mismatch {
            field: 6,
            expected: 0,
            found: 2,
        },
    );
    rejected_as(
        &span_pb(&vi(7, 1)),
        ProtobufProblem::Mismatch {
            field: 7,
            expected: 1,
            found: 0,
        },
    );
    rejected_as(
        &span_pb(&f64_field(16, 1)),
        ProtobufProblem::Mismatch {
            field: 16,
            expected: 5,
            found: 1,
        },
    );
    rejected_as(
        &group(1, b""),
        ProtobufProblem::Mismatch {
            field: 1,
            expected: 2,
            found: 3,
        },
    );
    // A nested message whose last field runs past its end.
    rejected_as(&span_pb(&[0x2a, 0x03, b'a']), ProtobufProblem::Overrun);
}

/// Prost accepts varints of up to 10 bytes whose value fits 64 bits; so does the writer.
#[test]
fn varints_as_prost_reads_them() {
    let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    let pb = span_pb(&[&[0x50][..], &max].concat());
    assert_eq!(the_span(&same(&pb))["droppedAttributesCount"], json!(u32::MAX));
    // Padded: 5 becomes 0x85 0x80 … 0x00.
    let padded = [0x85, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    let pb = span_pb(&[&[0x50][..], &padded].concat());
    assert_eq!(the_span(&same(&pb))["droppedAttributesCount"], json!(5));
    // Overflowing 64 bits, or longer than 10 bytes.
    let mut over = max;
    over[9] = 0x02;
    rejected_as(&span_pb(&[&[0x50][..], &over].concat()), ProtobufProblem::Varint);
    let long = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    rejected_as(&span_pb(&[&[0x50][..], &long].concat()), ProtobufProblem::Varint);
}

#[test]
fn every_truncation_agrees_with_prost() {
    let pb = every_field_message().encode_to_vec();
    let mut accepted = 0;
    for len in 0..pb.len() {
        if agree(&pb[..len]).expect("agrees") {
            accepted += 1;
        }
    }
    // The empty prefix is a valid, empty TracesData; every other prefix cuts the one field.
    assert_eq!(accepted, 1);
    let rewritten = rewrite(
        &pb,
        Rewrites {
            unknown: true,
            ..Default::default()
        },
        7,
        60,
    );
    for len in 0..rewritten.len() {
        agree(&rewritten[..len]).expect("agrees");
    }
}

/// `AnyValue`s nested `levels` arrays deep under a span attribute.
fn nested_arrays(levels: usize) -> Vec<u8> {
    let mut v = vi(3, 1);
    for _ in 0..levels {
        v = ld(5, &ld(1, &v));
    }
    value_pb(&v)
}

#[test]
fn nesting_is_limited_as_prost_limits_it() {
    // TracesData > ResourceSpans > ScopeSpans > Span > KeyValue > AnyValue is 5 levels, each
    // array 2 more: the deepest message, an ArrayValue, or its AnyValue, must be at most 100 deep.
    let limit = (RECURSION_LIMIT as usize - 5) / 2;
    same(&nested_arrays(limit));
    rejected_as(&nested_arrays(limit + 1), ProtobufProblem::TooDeep);
    // An empty ArrayValue at level 100 is fine, an unknown field in it is not.
    let last = ld(5, &[]);
    let mut deepest = last.clone();
    let mut deepest_unknown = ld(5, &vi(9, 1));
    for _ in 0..limit {
        deepest = ld(5, &ld(1, &deepest));
        deepest_unknown = ld(5, &ld(1, &deepest_unknown));
    }
    same(&value_pb(&deepest));
    rejected_as(&value_pb(&deepest_unknown), ProtobufProblem::TooDeep);
    // Groups in unknown fields count too: a span's fields (level 4) may hold 97 nested groups.
    let mut g = Vec::new();
    for _ in 0..(RECURSION_LIMIT as usize - 3) {
        g = group(17, &g);
    }
    same(&span_pb(&g));
    rejected_as(&span_pb(&group(17, &g)), ProtobufProblem::TooDeep);
}

/// The deepest nesting prost accepts renders, for arrays, kvlists and merged kvlists (the
/// deepest recursion and the most stack), and one level more is refused.
#[test]
fn the_deepest_nesting_of_every_shape_renders() {
    type Wrap = fn(Vec<u8>) -> Vec<u8>;
    let shapes: [(&str, Wrap); 3] = [
        ("arrays", |v| ld(5, &ld(1, &v))),
        ("kvlists", |v| ld(6, &ld(1, &[ld(1, b"k"), ld(2, &v)].concat()))),
        ("merged kvlists", |v| {
            let kv = [ld(1, b"k"), ld(2, b""), ld(2, &v), ld(2, b"")].concat();
            [ld(6, &ld(1, &kv)), ld(6, &[]), ld(6, &ld(1, b""))].concat()
        }),
    ];
    for (name, wrap) in shapes {
        let mut v = vi(3, 1);
        let mut levels = 0;
        while old_text(&value_pb(&wrap(v.clone()))).is_ok() {
            v = wrap(v);
            levels += 1;
        }
        assert!(levels > 25, "{name}: {levels}");
        same(&value_pb(&v));
        rejected_as(&value_pb(&wrap(v)), ProtobufProblem::TooDeep);
    }
}

/// Absurd nesting fails fast, without deep recursion.
#[test]
fn absurd_nesting_is_an_error() {
    // Kvlists in kvlists, 64 KiB of them, written from the inside out.
    let mut v = Vec::new();
    while v.len() < 1 << 16 {
        v = ld(6, &ld(1, &ld(2, &v)));
    }
    rejected_as(&value_pb(&v), ProtobufProblem::TooDeep);
    // Half a million nested groups of unknown field 17 that never end.
    rejected_as(&span_pb(&[0x8b, 0x01].repeat(500_000)), ProtobufProblem::TooDeep);
}

// ---- the caller's side ----

#[test]
fn comma_flag_carries_across_calls() {
    let td = every_field_message();
    let one = td.resource_spans[0].clone();
    let pb = TracesData {
        resource_spans: vec![one.clone(), one.clone()],
    }
    .encode_to_vec();
    let single = TracesData {
        resource_spans: vec![one],
    }
    .encode_to_vec();
    let mut out = b"[".to_vec();
    let mut first = true;
    write_resource_spans_json(&single, &mut first, &mut out).unwrap();
    assert!(!first);
    // Nothing to write: neither a comma nor a change to the flag.
    write_resource_spans_json(b"", &mut first, &mut out).unwrap();
    write_resource_spans_json(&single, &mut first, &mut out).unwrap();
    out.push(b']');
    assert_eq!(String::from_utf8(out).unwrap(), same(&pb));
    let mut first = true;
    let mut out = Vec::new();
    write_resource_spans_json(b"", &mut first, &mut out).unwrap();
    assert!(first && out.is_empty());
}

#[test]
fn an_error_leaves_the_output_and_flag_as_they_were() {
    let pb = [every_field_message().encode_to_vec(), span_pb(&ld(5, b"\xff"))].concat();
    for first in [true, false] {
        let mut flag = first;
        let mut out = b"[{}".to_vec();
        let e = write_resource_spans_json(&pb, &mut flag, &mut out).unwrap_err();
        assert_eq!(e.problem, ProtobufProblem::Utf8(5));
        assert_eq!((out.as_slice(), flag), (&b"[{}"[..], first));
    }
}

#[test]
fn errors_say_where() {
    let ok = every_field_message().encode_to_vec();
    let pb = [ok.clone(), span_pb(&ld(5, b"\xff"))].concat();
    let e = new_text(&pb).unwrap_err();
    // The span's name field: after the first resource spans, three tags and lengths in.
    assert_eq!(e.at, ok.len() + 6);
    assert_eq!(
        e.to_string(),
        format!(
            "invalid protobuf TracesData at byte {}: string field 5 is not valid UTF-8",
            ok.len() + 6
        )
    );
}

// ---- property tests ----

/// Checks that the writer agrees with prost on `pb`: same text, or both reject it (and then the
/// writer leaves its output alone). Returns whether `pb` was accepted.
fn agree(pb: &[u8]) -> Result<bool, TestCaseError> {
    let old = old_text(pb);
    let mut out = Vec::new();
    let mut first = true;
    let new = write_resource_spans_json(pb, &mut first, &mut out);
    match (old, new) {
        (Ok(old), Ok(())) => {
            let new = format!("[{}]", String::from_utf8(out).expect("JSON is UTF-8"));
            same_json(&new, &old).map_err(|e| TestCaseError::fail(format!("{e}\ninput: {pb:02x?}")))?;
            Ok(true)
        }
        (Err(_), Err(_)) => {
            prop_assert!(out.is_empty() && first);
            Ok(false)
        }
        (old, new) => Err(TestCaseError::fail(format!(
            "prost: {:?}\nwrite_resource_spans_json: {:?}\ninput: {pb:02x?}",
            old.map(|_| ()),
            new
        ))),
    }
}

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
