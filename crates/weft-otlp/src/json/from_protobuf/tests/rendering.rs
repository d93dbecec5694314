//! Valid input renders as the reference renders it: every field of every message, defaults
//! omitted, every `AnyValue` kind, doubles, escaped strings, IDs of any length and integers.

use super::*;

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
