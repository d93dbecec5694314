//! Bodies both decoders accept, decoded alike: every field of every message in camelCase or
//! snake_case, integers and enums in either form, every `AnyValue` kind, empty messages, long
//! values, duplicate keys and their precedence, and unknown keys.

use super::*;

fn every_field_json() -> Value {
    json!({"resourceSpans": [{
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
                "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": 1700000000000000500u64,
                "attributes": [
                    {"key": "i", "value": {"intValue": "-42"}},
                    {"key": "d", "value": {"doubleValue": 2.5}},
                    {"key": "b", "value": {"bytesValue": "AQID"}},
                    {"key": "a", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "x"}]}}},
                    {"key": "m", "value": {"kvlistValue": {"values": [{"key": "n", "value": {"boolValue": false}}]}}}
                ],
                "droppedAttributesCount": 3,
                "events": [{
                    "timeUnixNano": "5", "name": "ev",
                    "attributes": [{"key": "e", "value": {"intValue": 7}}],
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
    }]})
}

fn every_field_message() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: every_field_resource_spans(),
    }
}

fn snake_keys(v: Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (snake(&k), snake_keys(v))).collect()),
        Value::Array(a) => Value::Array(a.into_iter().map(snake_keys).collect()),
        other => other,
    }
}

#[test]
fn every_field_of_every_message() {
    let json = every_field_json().to_string();
    assert_eq!(ok(&json), every_field_message());
}

#[test]
fn snake_case_keys() {
    let json = snake_keys(every_field_json()).to_string();
    assert!(json.contains("\"start_time_unix_nano\""), "{json}");
    assert_eq!(ok(&json), every_field_message());
}

#[test]
fn integers_as_numbers_or_strings_enums_as_names_or_numbers() {
    let s = first_span(&ok(&span_with(
        r#","startTimeUnixNano":1,"endTimeUnixNano":"18446744073709551615","flags":"+3","droppedAttributesCount":4294967297,"kind":"SPAN_KIND_CONSUMER","status":{"code":"STATUS_CODE_ERROR"}"#,
    )))
    .clone();
    assert_eq!(s.start_time_unix_nano, 1);
    assert_eq!(s.end_time_unix_nano, u64::MAX);
    assert_eq!(s.flags, 3);
    // Truncated to 32 bits, as `request_from_json` does.
    assert_eq!(s.dropped_attributes_count, 1);
    assert_eq!(s.kind, 5);
    assert_eq!(s.status.unwrap().code, 2);
    // Any i32 is accepted as an enum number, negative ones included.
    assert_eq!(first_span(&ok(&span_with(r#","kind":-7"#))).kind, -7);
    assert_eq!(
        first_span(&ok(&span_with(r#","kind":0,"flags":0,"droppedLinksCount":"0""#))).kind,
        0
    );
    // Zero after truncation is omitted like any zero.
    assert_eq!(first_span(&ok(&span_with(r#","flags":4294967296"#))).flags, 0);
}

#[test]
fn every_any_value_kind() {
    let cases: &[(&str, Option<AnyValue>)] = &[
        (r#"{"stringValue":"s"}"#, some_any(V::StringValue("s".into()))),
        (r#"{"stringValue":""}"#, some_any(V::StringValue(String::new()))),
        (r#"{"boolValue":false}"#, some_any(V::BoolValue(false))),
        (
            r#"{"intValue":"-9223372036854775808"}"#,
            some_any(V::IntValue(i64::MIN)),
        ),
        (r#"{"intValue":9223372036854775807}"#, some_any(V::IntValue(i64::MAX))),
        (r#"{"intValue":0}"#, some_any(V::IntValue(0))),
        (r#"{"int_value":"+5"}"#, some_any(V::IntValue(5))),
        (r#"{"doubleValue":-1.5e3}"#, some_any(V::DoubleValue(-1500.0))),
        (r#"{"doubleValue":3}"#, some_any(V::DoubleValue(3.0))),
        (r#"{"doubleValue":"0.25"}"#, some_any(V::DoubleValue(0.25))),
        (r#"{"doubleValue":"Infinity"}"#, some_any(V::DoubleValue(f64::INFINITY))),
        (
            r#"{"double_value":"-Infinity"}"#,
            some_any(V::DoubleValue(f64::NEG_INFINITY)),
        ),
        (r#"{"bytesValue":""}"#, some_any(V::BytesValue(Vec::new().into()))),
        (
            r#"{"bytes_value":"aGVsbG8="}"#,
            some_any(V::BytesValue(b"hello".to_vec().into())),
        ),
        (r#"{"arrayValue":{}}"#, some_any(V::ArrayValue(ArrayValue::default()))),
        (
            r#"{"kvlistValue":{"values":[]}}"#,
            some_any(V::KvlistValue(KeyValueList::default())),
        ),
        (
            r#"{"array_value":{"values":[{"kvlist_value":{"values":[{"key":"x","value":{"arrayValue":{"values":[{},{"boolValue":true}]}}}]}}]}}"#,
            some_any(V::ArrayValue(ArrayValue {
                values: vec![AnyValue {
                    value: Some(V::KvlistValue(KeyValueList {
                        values: vec![kv(
                            "x",
                            V::ArrayValue(ArrayValue {
                                values: vec![
                                    AnyValue::default(),
                                    AnyValue {
                                        value: Some(V::BoolValue(true)),
                                    },
                                ],
                            }),
                        )],
                    })),
                }],
            })),
        ),
        // Present but empty gives `Some(AnyValue { value: None })`; null or missing gives `None`.
        ("{}", Some(AnyValue::default())),
        (r#"{"stringValue":null}"#, Some(AnyValue::default())),
        ("null", None),
    ];
    for (json, expected) in cases {
        assert_eq!(&attr_value(&attr(json)), expected, "for {json}");
    }
    let nan = attr_value(&attr(r#"{"doubleValue":"NaN"}"#));
    assert!(matches!(nan, Some(AnyValue { value: Some(V::DoubleValue(d)) }) if d.is_nan()));
    let s = first_span(&ok(&span_with(r#","attributes":[{"key":"k"},{}]"#))).clone();
    assert_eq!(
        s.attributes,
        vec![
            KeyValue {
                key: "k".into(),
                value: None
            },
            KeyValue::default()
        ]
    );
}

#[test]
fn present_but_empty_messages_are_some_default() {
    let req = ok(&format!(
        r#"{{"resourceSpans":[{{"resource":{{}},"scopeSpans":[{{"scope":{{}},"spans":[{{"traceId":"{TID}","spanId":"{SID}","status":{{}},"events":[{{}}],"links":[{{"traceId":"{TID}","spanId":"{SID}"}}]}}]}},{{}}]}},{{}}]}}"#
    ));
    let rs = &req.resource_spans;
    assert_eq!(rs.len(), 2);
    assert_eq!(rs[0].resource, Some(Resource::default()));
    assert_eq!(rs[1], ResourceSpans::default());
    assert_eq!(rs[0].scope_spans[0].scope, Some(InstrumentationScope::default()));
    assert_eq!(rs[0].scope_spans[1], ScopeSpans::default());
    let s = first_span(&req);
    assert_eq!(s.status, Some(Status::default()));
    assert_eq!(s.events, vec![span::Event::default()]);
    assert_eq!(s.links.len(), 1);
    // Null and missing mean absent.
    let req = ok(r#"{"resourceSpans":[{"resource":null,"scopeSpans":null,"schemaUrl":null}]}"#);
    assert_eq!(req.resource_spans, vec![ResourceSpans::default()]);
    assert_eq!(ok("{}"), ExportTraceServiceRequest::default());
    assert_eq!(ok(r#"{"resourceSpans":null}"#), ExportTraceServiceRequest::default());
}

/// Messages of 128 bytes or more move right to make room for a longer length.
#[test]
fn long_values_get_multi_byte_lengths() {
    for n in [0, 1, 120, 127, 128, 300, 16_383, 16_384, 70_000, 2_100_000] {
        let s = "x".repeat(n);
        let v = attr_value(&attr(&format!(
            r#"{{"arrayValue":{{"values":[{{"stringValue":"{s}"}}]}}}}"#
        )));
        let Some(AnyValue {
            value: Some(V::ArrayValue(a)),
        }) = v
        else {
            panic!("not an array: {v:?}")
        };
        assert_eq!(a.values[0].value, Some(V::StringValue(s)));
        let b = B64.encode(vec![7u8; n]);
        let v = attr_value(&attr(&format!(r#"{{"bytesValue":"{b}"}}"#)));
        assert_eq!(v, some_any(V::BytesValue(vec![7u8; n].into())));
    }
}

#[test]
fn duplicate_keys_last_wins() {
    let name = |fields: &str| first_span(&ok(&span_with(fields))).name.clone();
    assert_eq!(name(r#","name":"a","name":"b""#), "b");
    assert_eq!(
        name(r#","name":"a","attributes":[{"key":"x"}],"name":"b","traceState":"t","name":"","name":"c""#),
        "c"
    );
    // An overridden occurrence is ignored even when it is invalid.
    assert_eq!(name(r#","name":5,"name":"ok""#), "ok");
    ok(&with_span(&format!(
        r#"{{"traceId":"zz","traceId":"{TID}","spanId":"{SID}"}}"#
    )));
    fails_at(
        &with_span(&format!(r#"{{"traceId":"{TID}","traceId":"zz","spanId":"{SID}"}}"#)),
        &format!("{SPANS}.traceId"),
        r#"expected 32 hex characters, got "zz""#,
    );
    // A later null overrides an earlier value: the field is absent.
    fails_at(
        &with_span(&format!(r#"{{"traceId":"{TID}","traceId":null,"spanId":"{SID}"}}"#)),
        &format!("{SPANS}.traceId"),
        "expected 32 hex characters, got 0",
    );
    let s = first_span(&ok(&span_with(
        r#","attributes":[{"key":"a","value":{"intValue":"bad"}}],"name":"n","attributes":[{"key":"b"}],"events":[{}],"attributes":[]"#,
    )))
    .clone();
    assert!(s.attributes.is_empty());
    assert_eq!((s.name.as_str(), s.events.len()), ("n", 1));
    let req = ok(r#"{"resourceSpans":[{"schemaUrl":"a"}],"resourceSpans":[{"schemaUrl":"b"},{}]}"#);
    assert_eq!(req.resource_spans.len(), 2);
    assert_eq!(req.resource_spans[0].schema_url, "b");
}

#[test]
fn camel_case_beats_snake_case_in_either_order() {
    let state = |fields: &str| first_span(&ok(&span_with(fields))).trace_state.clone();
    assert_eq!(state(r#","trace_state":"snake""#), "snake");
    assert_eq!(state(r#","trace_state":"snake","traceState":"camel""#), "camel");
    assert_eq!(state(r#","traceState":"camel","trace_state":"snake""#), "camel");
    // The losing alias is never looked at.
    assert_eq!(state(r#","trace_state":[],"traceState":"camel""#), "camel");
    // A camelCase null still hides the snake_case key.
    assert_eq!(state(r#","traceState":null,"trace_state":"snake""#), "");
    assert_eq!(state(r#","trace_state":"snake","traceState":null"#), "");
    ok(&with_span(&format!(
        r#"{{"trace_id":"zz","traceId":"{TID}","span_id":"{SID}"}}"#
    )));
    fails_at(
        &with_span(&format!(r#"{{"traceId":null,"trace_id":"{TID}","spanId":"{SID}"}}"#)),
        &format!("{SPANS}.traceId"),
        "expected 32 hex characters, got 0",
    );
}

#[test]
fn any_value_takes_the_first_present_member() {
    let cases: &[(&str, Option<AnyValue>)] = &[
        (
            r#"{"bytesValue":"!!","stringValue":"s"}"#,
            some_any(V::StringValue("s".into())),
        ),
        (r#"{"intValue":"x","boolValue":true}"#, some_any(V::BoolValue(true))),
        (
            r#"{"kvlistValue":{"values":[{"value":{"intValue":"bad"}}]},"arrayValue":{"values":[]}}"#,
            some_any(V::ArrayValue(ArrayValue::default())),
        ),
        (
            r#"{"stringValue":"s","stringValue":null,"intValue":"1"}"#,
            some_any(V::IntValue(1)),
        ),
        (r#"{"stringValue":null,"doubleValue":"NaN","bytesValue":""}"#, None),
        (
            r#"{"string_value":"snake","intValue":2}"#,
            some_any(V::StringValue("snake".into())),
        ),
        (r#"{"unknownValue":1,"bool_value":true}"#, some_any(V::BoolValue(true))),
    ];
    for (json, expected) in cases {
        let got = attr_value(&attr(json));
        if expected.is_none() {
            assert!(
                matches!(got, Some(AnyValue { value: Some(V::DoubleValue(d)) }) if d.is_nan()),
                "{json}"
            );
        } else {
            assert_eq!(&got, expected, "for {json}");
        }
    }
    fails_at(
        &attr(r#"{"arrayValue":[],"stringValue":5}"#),
        &format!("{SPANS}.attributes[0].value.stringValue"),
        "expected a string",
    );
}

#[test]
fn unknown_keys_are_ignored() {
    let json = format!(
        r#"{{"x":[[{{"y":null}}]],"resourceSpans":[{{"z":{{"scopeSpans":7}},"scopeSpans":[{{"spans":[{{"traceId":"{TID}","q":"\u00e9\n","spanId":"{SID}","attributes":[{{"key":"k","extra":[1,2.5,-3,true],"value":{{"stringValue":"v","more":{{}}}}}}]}}]}}]}}]}}"#
    );
    let s = first_span(&ok(&json)).clone();
    assert_eq!(s.attributes, vec![kv("k", V::StringValue("v".into()))]);
    // Escaped keys are matched after unescaping, as `serde_json::Map` does.
    assert_eq!(first_span(&ok(&span_with(r#","na\u006de":"n""#))).name, "n");
}

/// Many duplicate keys cost no more than one each: the dead ranges merge.
#[test]
fn many_duplicates_stay_linear() {
    let mut fields = String::new();
    for i in 0..20_000 {
        fields.push_str(&format!(
            r#","name":"n{i}","traceState":"t{i}","attributes":[{{"key":"{i}"}}]"#
        ));
    }
    let s = first_span(&ok(&span_with(&fields))).clone();
    assert_eq!((s.name.as_str(), s.trace_state.as_str()), ("n19999", "t19999"));
    assert_eq!(
        s.attributes,
        vec![KeyValue {
            key: "19999".into(),
            value: None
        }]
    );
}
