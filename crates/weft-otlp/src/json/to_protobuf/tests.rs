//! `request_json_to_protobuf` against the tree decoder `request_from_json`, which is the reference:
//! both must accept the same bodies, produce the same message and report the same error.

use crate::json::fixtures::{SID, TID, every_field_resource_spans, kv, some_any};

use super::request_json_to_protobuf;
use crate::json::{JsonError, request_from_json, resource_spans_to_json};
use crate::pb::collector::ExportTraceServiceRequest;
use crate::pb::common::any_value::Value as V;
use crate::pb::common::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList};
use crate::pb::resource::Resource;
use crate::pb::trace::{ResourceSpans, ScopeSpans, Span, Status, span};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message;
use serde_json::{Value, json};

const SPANS: &str = "$.resourceSpans[0].scopeSpans[0].spans[0]";

/// Both decoders accept `json` and agree; returns the message.
#[track_caller]
fn ok(json: &str) -> ExportTraceServiceRequest {
    let old = request_from_json(json.as_bytes()).unwrap_or_else(|e| panic!("request_from_json rejects {json}: {e}"));
    let bytes = request_json_to_protobuf(json.as_bytes())
        .unwrap_or_else(|e| panic!("request_json_to_protobuf rejects {json}: {e}"));
    let new = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("output decodes");
    // Compared as encodings so that NaN doubles compare equal.
    assert_eq!(new.encode_to_vec(), old.encode_to_vec(), "decoders disagree on {json}");
    assert_eq!(
        bytes.len(),
        old.encoded_len(),
        "output longer than prost's encoding of {json}"
    );
    new
}

/// Both decoders reject `json` with the same error; returns it.
#[track_caller]
fn fails(json: &str) -> JsonError {
    let old = request_from_json(json.as_bytes()).expect_err("request_from_json accepts");
    let new = request_json_to_protobuf(json.as_bytes()).expect_err("request_json_to_protobuf accepts");
    assert_eq!(
        (&new.path, &new.problem),
        (&old.path, &old.problem),
        "errors differ for {json}"
    );
    new
}

#[track_caller]
fn fails_at(json: &str, path: &str, problem: &str) {
    let e = fails(json);
    assert_eq!((e.path.as_str(), e.problem.as_str()), (path, problem), "for {json}");
}

fn with_span(span: &str) -> String {
    format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{span}]}}]}}]}}"#)
}

/// A body whose only span has the given extra fields.
fn span_with(fields: &str) -> String {
    with_span(&format!(r#"{{"traceId":"{TID}","spanId":"{SID}"{fields}}}"#))
}

/// A body whose only span has one attribute `k` with this JSON value.
fn attr(value: &str) -> String {
    span_with(&format!(r#","attributes":[{{"key":"k","value":{value}}}]"#))
}

fn first_span(req: &ExportTraceServiceRequest) -> &Span {
    &req.resource_spans[0].scope_spans[0].spans[0]
}

fn attr_value(json: &str) -> Option<AnyValue> {
    first_span(&ok(json)).attributes[0].value.clone()
}

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

fn snake(camel: &str) -> String {
    let mut s = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
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

/// IDs of the wrong length, with a character that is not hex, missing, or not a string.
#[test]
fn id_errors_name_the_path_and_problem() {
    let cases: Vec<(String, String, &str)> = vec![
        (
            with_span(&format!(r#"{{"traceId":"{}","spanId":"{SID}"}}"#, "zz".repeat(16))),
            format!("{SPANS}.traceId"),
            r#"expected 32 hex characters, got "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz""#,
        ),
        (
            with_span(&format!(r#"{{"traceId":"{TID}","spanId":"0102"}}"#)),
            format!("{SPANS}.spanId"),
            "expected 16 hex characters, got 4",
        ),
        (
            with_span(&format!(r#"{{"traceId":"{TID}","spanId":"abc"}}"#)),
            format!("{SPANS}.spanId"),
            r#"expected 16 hex characters, got "abc""#,
        ),
        (
            with_span(&format!(r#"{{"traceId":"{TID}","spanId":"0g"}}"#)),
            format!("{SPANS}.spanId"),
            r#"expected 16 hex characters, got "0g""#,
        ),
        (
            with_span(&format!(r#"{{"spanId":"{SID}"}}"#)),
            format!("{SPANS}.traceId"),
            "expected 32 hex characters, got 0",
        ),
        (
            with_span(&format!(r#"{{"traceId":"{TID}","spanId":""}}"#)),
            format!("{SPANS}.spanId"),
            "expected 16 hex characters, got 0",
        ),
        (
            with_span(&format!(r#"{{"traceId":"{TID}","spanId":7}}"#)),
            format!("{SPANS}.spanId"),
            "expected a string",
        ),
        (
            span_with(r#","parentSpanId":"01""#),
            format!("{SPANS}.parentSpanId"),
            "expected 16 hex characters, got 2",
        ),
        (
            span_with(&format!(r#","links":[{{"traceId":"{TID}"}}]"#)),
            format!("{SPANS}.links[0].spanId"),
            "expected 16 hex characters, got 0",
        ),
    ];
    for (json, path, problem) in cases {
        fails_at(&json, &path, problem);
    }
}

/// Integers, timestamps, counts and enums of the wrong type or out of range.
#[test]
fn number_and_enum_errors_name_the_path_and_problem() {
    let cases: Vec<(String, String, &str)> = vec![
        (
            span_with(r#","startTimeUnixNano":true"#),
            format!("{SPANS}.startTimeUnixNano"),
            "expected an integer",
        ),
        (
            span_with(r#","endTimeUnixNano":-1"#),
            format!("{SPANS}.endTimeUnixNano"),
            "expected a non-negative integer",
        ),
        (
            span_with(r#","flags":1.0"#),
            format!("{SPANS}.flags"),
            "expected a non-negative integer",
        ),
        (
            span_with(r#","droppedLinksCount":"x""#),
            format!("{SPANS}.droppedLinksCount"),
            r#"expected an integer, got "x""#,
        ),
        (
            span_with(r#","droppedEventsCount":" 1""#),
            format!("{SPANS}.droppedEventsCount"),
            r#"expected an integer, got " 1""#,
        ),
        (
            span_with(r#","kind":"SPAN_KIND_BOGUS""#),
            format!("{SPANS}.kind"),
            r#"unknown enum value "SPAN_KIND_BOGUS""#,
        ),
        (
            span_with(r#","kind":2147483648"#),
            format!("{SPANS}.kind"),
            "expected an enum integer",
        ),
        (
            span_with(r#","kind":{}"#),
            format!("{SPANS}.kind"),
            "expected an enum integer",
        ),
        (
            span_with(r#","status":{"code":"OK"}"#),
            format!("{SPANS}.status.code"),
            r#"unknown enum value "OK""#,
        ),
        (
            span_with(r#","events":[{"timeUnixNano":"1e3"}]"#),
            format!("{SPANS}.events[0].timeUnixNano"),
            r#"expected an integer, got "1e3""#,
        ),
    ];
    for (json, path, problem) in cases {
        fails_at(&json, &path, problem);
    }
}

/// A message, list or string where the JSON holds another type, at every level.
#[test]
fn shape_errors_name_the_path_and_problem() {
    let cases: Vec<(String, String, &str)> = vec![
        (
            span_with(r#","status":[]"#),
            format!("{SPANS}.status"),
            "expected an object",
        ),
        (span_with(r#","name":{}"#), format!("{SPANS}.name"), "expected a string"),
        (
            span_with(r#","events":{}"#),
            format!("{SPANS}.events"),
            "expected an array",
        ),
        (
            span_with(r#","events":[{},null]"#),
            format!("{SPANS}.events[1]"),
            "expected an object",
        ),
        (
            span_with(r#","attributes":[{"key":1}]"#),
            format!("{SPANS}.attributes[0].key"),
            "expected a string",
        ),
        (
            span_with(r#","attributes":[5]"#),
            format!("{SPANS}.attributes[0]"),
            "expected an object",
        ),
        (
            r#"{"resourceSpans":{}}"#.into(),
            "$.resourceSpans".into(),
            "expected an array",
        ),
        (
            r#"{"resourceSpans":[{"resource":[]}]}"#.into(),
            "$.resourceSpans[0].resource".into(),
            "expected an object",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"scope":{"version":1}}]}]}"#.into(),
            "$.resourceSpans[0].scopeSpans[0].scope.version".into(),
            "expected a string",
        ),
        ("[]".into(), "$".into(), "expected an object"),
        ("null".into(), "$".into(), "expected an object"),
        ("\"x\"".into(), "$".into(), "expected an object"),
    ];
    for (json, path, problem) in cases {
        fails_at(&json, &path, problem);
    }
}

/// Attribute values of every kind holding the wrong type, out of range or badly encoded.
#[test]
fn attribute_value_errors_name_the_path_and_problem() {
    let a0 = format!("{SPANS}.attributes[0].value");
    let cases: Vec<(String, String, &str)> = vec![
        (
            attr(r#"{"bytesValue":"AQI"}"#),
            format!("{a0}.bytesValue"),
            "invalid base64: Invalid padding",
        ),
        (
            attr(r#"{"bytesValue":"A!=="}"#),
            format!("{a0}.bytesValue"),
            "invalid base64: Invalid symbol 33, offset 1.",
        ),
        (attr("[]"), a0.clone(), "expected an object"),
        (
            attr(r#"{"intValue":1.5}"#),
            format!("{a0}.intValue"),
            "expected an integer",
        ),
        (
            attr(r#"{"intValue":9223372036854775808}"#),
            format!("{a0}.intValue"),
            "expected an integer",
        ),
        (
            attr(r#"{"intValue":"1.0"}"#),
            format!("{a0}.intValue"),
            r#"expected an integer, got "1.0""#,
        ),
        (
            attr(r#"{"boolValue":"true"}"#),
            format!("{a0}.boolValue"),
            "expected a boolean",
        ),
        (
            attr(r#"{"doubleValue":"one"}"#),
            format!("{a0}.doubleValue"),
            r#"expected a number, got "one""#,
        ),
        (
            attr(r#"{"doubleValue":[]}"#),
            format!("{a0}.doubleValue"),
            "expected a number",
        ),
        (
            attr(r#"{"arrayValue":{"values":{}}}"#),
            format!("{a0}.arrayValue.values"),
            "expected an array",
        ),
        (
            attr(r#"{"arrayValue":{"values":[{},null]}}"#),
            format!("{a0}.arrayValue.values[1]"),
            "expected an object",
        ),
        (
            attr(r#"{"kvlistValue":{"values":[{"key":"a","value":{"intValue":true}}]}}"#),
            format!("{a0}.kvlistValue.values[0].value.intValue"),
            "expected an integer",
        ),
    ];
    for (json, path, problem) in cases {
        fails_at(&json, &path, problem);
    }
}

#[test]
fn invalid_json_is_reported_at_the_root() {
    for json in [
        &b"{\"resourceSpans\":["[..],
        b"{} x",
        b"",
        b"{\"a\":1,}",
        b"{\"resourceSpans\":[{\"scopeSpans\":5}], ",
        // A semantic error before the syntax error: the syntax error still wins.
        b"{\"resourceSpans\":[{\"scopeSpans\":5}],\"x\":[1 2]}",
        b"{\"x\":1e400}",
        b"{\"x\":\"\xff\"}",
        b"{\"x\":\"\\ud800\"}",
    ] {
        let old = request_from_json(json).expect_err("request_from_json accepts");
        let new = request_json_to_protobuf(json).expect_err("request_json_to_protobuf accepts");
        assert_eq!((&new.path, &new.problem), (&old.path, &old.problem));
        assert_eq!(new.path, "$");
        assert!(new.problem.starts_with("invalid JSON: "), "{new:?}");
    }
    // serde_json's recursion limit applies inside ignored values too.
    let deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
    let e = fails(&deep);
    assert!(e.problem.contains("recursion limit exceeded"), "{e:?}");
    let shallow = format!(r#"{{"x":{}{}}}"#, "[".repeat(100), "]".repeat(100));
    ok(&shallow);
}

#[test]
fn the_first_error_is_the_one_the_tree_decoder_reports() {
    // Field order, not document order: traceId is read before status.
    let json = with_span(r#"{"status":{"code":"nope"},"traceId":"zz","spanId":"00"}"#);
    fails_at(
        &json,
        &format!("{SPANS}.traceId"),
        r#"expected 32 hex characters, got "zz""#,
    );
    // Dropped counts are read before events.
    fails_at(
        &span_with(r#","events":[{"name":1}],"droppedLinksCount":true"#),
        &format!("{SPANS}.droppedLinksCount"),
        "expected an integer",
    );
    // A key/value pair's value is read before its key.
    fails_at(
        &span_with(r#","attributes":[{"key":1,"value":{"intValue":"x"}}]"#),
        &format!("{SPANS}.attributes[0].value.intValue"),
        r#"expected an integer, got "x""#,
    );
    // The first invalid element of an array.
    fails_at(
        &with_span(&format!(
            r#"{{"traceId":"{TID}","spanId":"{SID}"}},{{"spanId":1}},{{"name":2}}"#
        )),
        "$.resourceSpans[0].scopeSpans[0].spans[1].traceId",
        "expected 32 hex characters, got 0",
    );
}

/// Nested attribute values: an `AnyValue` deeper than `MAX_DEPTH` is rejected, whatever it holds.
#[test]
fn attribute_nesting_limit() {
    fn arrays(levels: usize, leaf: &str) -> String {
        let mut v = leaf.to_string();
        for _ in 0..levels {
            v = format!(r#"{{"arrayValue":{{"values":[{v}]}}}}"#);
        }
        v
    }
    fn kvlists(levels: usize) -> String {
        let mut v = r#"{"intValue":1}"#.to_string();
        for _ in 0..levels {
            v = format!(r#"{{"kvlistValue":{{"values":[{{"key":"k","value":{v}}}]}}}}"#);
        }
        v
    }
    let limit = crate::request::MAX_DEPTH as usize;
    // The attribute's own value is at depth 1, each array adds 1.
    ok(&attr(&arrays(limit - 1, r#"{"intValue":1}"#)));
    for leaf in [r#"{"intValue":1}"#, "{}", "null", "5", r#"{"arrayValue":[]}"#] {
        let e = fails(&attr(&arrays(limit, leaf)));
        assert_eq!(e.problem, "attribute nesting too deep", "{leaf}");
        let depth_path: String = ".arrayValue.values[0]".repeat(limit);
        assert_eq!(e.path, format!("{SPANS}.attributes[0].value{depth_path}"));
    }
    // Each kvlist adds 2.
    ok(&attr(&kvlists((limit - 1) / 2)));
    let e = fails(&attr(&kvlists(limit / 2)));
    assert_eq!(e.problem, "attribute nesting too deep");
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

// ---- property tests ----

/// Checks that both decoders agree on `body`: same message, or the same error.
fn agree(body: &[u8]) -> Result<bool, TestCaseError> {
    let old = request_from_json(body);
    let new = request_json_to_protobuf(body);
    match (old, new) {
        (Ok(old), Ok(bytes)) => {
            let new = ExportTraceServiceRequest::decode(bytes.as_slice())
                .map_err(|e| TestCaseError::fail(format!("output does not decode: {e}")))?;
            prop_assert_eq!(new.encode_to_vec(), old.encode_to_vec());
            prop_assert_eq!(bytes.len(), old.encoded_len());
            Ok(true)
        }
        (Err(old), Err(new)) => {
            prop_assert_eq!((old.path, old.problem), (new.path, new.problem));
            Ok(false)
        }
        (old, new) => Err(TestCaseError::fail(format!(
            "request_from_json: {:?}\nrequest_json_to_protobuf: {:?}\nbody: {}",
            old.map(|_| ()),
            new.map(|_| ()),
            String::from_utf8_lossy(body)
        ))),
    }
}

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

fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
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

/// A tiny deterministic generator for rendering choices (splitmix64).
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

/// JSON with room for duplicate keys, rendered as text.
enum J {
    Raw(String),
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
}

fn raw(v: impl serde::Serialize) -> J {
    J::Raw(serde_json::to_string(&v).unwrap())
}

impl J {
    fn write(&self, rng: &mut Rng, out: &mut String) {
        let ws = |rng: &mut Rng, out: &mut String| {
            if rng.chance(5) {
                out.push_str([" ", "\n", "\t ", "\r\n"][rng.below(4)]);
            }
        };
        match self {
            J::Raw(s) => out.push_str(s),
            J::Obj(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    ws(rng, out);
                    v.write(rng, out);
                }
                ws(rng, out);
                out.push('}');
            }
            J::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    v.write(rng, out);
                }
                out.push(']');
            }
        }
    }
}

/// Renders a request as OTLP/JSON in a randomly chosen style: snake_case or camelCase keys,
/// integers as numbers or strings, enums as names or numbers, defaults omitted, explicit or null,
/// overridden duplicate keys and snake_case aliases holding junk, ignored `AnyValue` members,
/// unknown keys, shuffled key order and whitespace. Every choice keeps the decoded message equal
/// to the original.
struct Styler {
    rng: Rng,
}

type Groups = Vec<Vec<(String, J)>>;

const MEMBERS: [(&str, &str); 7] = [
    ("stringValue", "string_value"),
    ("boolValue", "bool_value"),
    ("intValue", "int_value"),
    ("doubleValue", "double_value"),
    ("arrayValue", "array_value"),
    ("kvlistValue", "kvlist_value"),
    ("bytesValue", "bytes_value"),
];

impl Styler {
    fn junk(&mut self, depth: u32) -> J {
        let pick = if depth == 0 {
            self.rng.below(10)
        } else {
            self.rng.below(12)
        };
        match pick {
            0 => J::Raw("null".into()),
            1 => raw(self.rng.chance(50)),
            2 => raw(self.rng.next() as i64),
            3 => raw(-1.5),
            4 => raw(["", "zz", "NaN", "+1", "-5", "SPAN_KIND_SERVER", "!!", "0102", TID][self.rng.below(9)]),
            5 => raw(self.rng.next()),
            6 => J::Raw("1e300".into()),
            7 => J::Obj(Vec::new()),
            8 => J::Arr(Vec::new()),
            9 => raw("\u{e9}\u{1F600}\"\\"),
            10 => J::Arr((0..self.rng.below(3)).map(|_| self.junk(depth - 1)).collect()),
            _ => J::Obj(
                (0..self.rng.below(3))
                    .map(|_| {
                        let k = ["traceId", "values", "stringValue", "a"][self.rng.below(4)].to_string();
                        (k, self.junk(depth - 1))
                    })
                    .collect(),
            ),
        }
    }

    /// Adds a field. `default` fields may be left out or given as null.
    fn field(&mut self, o: &mut Groups, camel: &str, snake: &str, value: J, default: bool) {
        let value = if default {
            match self.rng.below(4) {
                0 | 1 => return,
                2 => J::Raw("null".into()),
                _ => value,
            }
        } else {
            value
        };
        let aliased = camel != snake;
        let use_snake = aliased && self.rng.chance(30);
        let key = if use_snake { snake } else { camel };
        let mut group = Vec::new();
        if self.rng.chance(10) {
            let junk = self.junk(2);
            group.push((key.to_string(), junk));
        }
        group.push((key.to_string(), value));
        if aliased && !use_snake && self.rng.chance(10) {
            let junk = (snake.to_string(), self.junk(2));
            if self.rng.chance(50) {
                group.insert(0, junk);
            } else {
                group.push(junk);
            }
        }
        o.push(group);
    }

    /// A field that must decode as absent.
    fn absent(&mut self, o: &mut Groups, camel: &str, snake: &str) {
        if self.rng.chance(30) {
            self.field(o, camel, snake, J::Raw("null".into()), false);
        }
    }

    fn finish(&mut self, mut o: Groups) -> J {
        if self.rng.chance(10) {
            let junk = self.junk(3);
            o.push(vec![(
                ["unknownField", "x_y", "TraceId", ""][self.rng.below(4)].to_string(),
                junk,
            )]);
        }
        for i in (1..o.len()).rev() {
            let j = self.rng.below(i + 1);
            o.swap(i, j);
        }
        J::Obj(o.into_iter().flatten().collect())
    }

    fn string(&mut self, o: &mut Groups, camel: &str, snake: &str, s: &str) {
        self.field(o, camel, snake, raw(s), s.is_empty());
    }

    fn uint(&mut self, o: &mut Groups, camel: &str, snake: &str, v: u64, bits32: bool) {
        // A 32-bit field is read as 64 bits and truncated, so high bits may be added.
        let v = if bits32 && self.rng.chance(5) { v | (1 << 40) } else { v };
        let j = if self.rng.chance(50) {
            raw(v)
        } else {
            raw(v.to_string())
        };
        self.field(o, camel, snake, j, v as u32 == 0 && (bits32 || v == 0));
    }

    fn enumeration(&mut self, o: &mut Groups, camel: &str, v: i32, names: &[&str]) {
        let j = match usize::try_from(v).ok().and_then(|i| names.get(i)) {
            Some(name) if self.rng.chance(50) => raw(name),
            _ => raw(v),
        };
        self.field(o, camel, camel, j, v == 0);
    }

    fn hex_id(&mut self, o: &mut Groups, camel: &str, snake: &str, b: &[u8]) {
        let h = if self.rng.chance(20) {
            hex::encode_upper(b)
        } else {
            hex::encode(b)
        };
        self.field(o, camel, snake, raw(h), b.is_empty());
    }

    fn messages<T>(&mut self, o: &mut Groups, camel: &str, snake: &str, items: &[T], f: impl Fn(&mut Self, &T) -> J) {
        let arr = J::Arr(items.iter().map(|x| f(self, x)).collect());
        self.field(o, camel, snake, arr, items.is_empty());
    }

    fn attributes(&mut self, o: &mut Groups, attrs: &[KeyValue]) {
        self.messages(o, "attributes", "attributes", attrs, Self::key_value);
    }

    fn key_value(&mut self, kv: &KeyValue) -> J {
        let mut o = Groups::new();
        self.string(&mut o, "key", "key", &kv.key);
        match &kv.value {
            Some(v) => {
                let j = self.any_value(v);
                self.field(&mut o, "value", "value", j, false);
            }
            None => self.absent(&mut o, "value", "value"),
        }
        self.finish(o)
    }

    fn double(&mut self, d: f64) -> J {
        if d.is_nan() {
            raw("NaN")
        } else if d.is_infinite() {
            raw(if d > 0.0 { "Infinity" } else { "-Infinity" })
        } else if d != 0.0 && d.fract() == 0.0 && d.abs() < 1e15 && self.rng.chance(30) {
            J::Raw(format!("{}", d as i64))
        } else if self.rng.chance(20) {
            raw(serde_json::to_string(&d).unwrap())
        } else {
            raw(d)
        }
    }

    fn any_value(&mut self, v: &AnyValue) -> J {
        let (member, value) = match &v.value {
            None => (MEMBERS.len(), None),
            Some(V::StringValue(s)) => (0, Some(raw(s))),
            Some(V::BoolValue(b)) => (1, Some(raw(b))),
            Some(V::IntValue(i)) => (
                2,
                Some(if self.rng.chance(50) {
                    raw(i)
                } else {
                    raw(i.to_string())
                }),
            ),
            Some(V::DoubleValue(d)) => (3, Some(self.double(*d))),
            Some(V::ArrayValue(a)) => {
                let mut o = Groups::new();
                self.messages(&mut o, "values", "values", &a.values, Self::any_value);
                (4, Some(self.finish(o)))
            }
            Some(V::KvlistValue(k)) => {
                let mut o = Groups::new();
                self.messages(&mut o, "values", "values", &k.values, Self::key_value);
                (5, Some(self.finish(o)))
            }
            Some(V::BytesValue(b)) => (6, Some(raw(B64.encode(b)))),
        };
        let mut value = value;
        let mut o = Groups::new();
        for (i, (camel, snake)) in MEMBERS.iter().enumerate() {
            if i == member {
                let j = value.take().expect("one member");
                self.field(&mut o, camel, snake, j, false);
            } else if i < member {
                // A member that would win must be absent.
                self.absent(&mut o, camel, snake);
            } else if self.rng.chance(10) {
                // A member that loses is ignored, even when invalid.
                let key = if self.rng.chance(50) { camel } else { snake };
                let junk = self.junk(2);
                o.push(vec![(key.to_string(), junk)]);
            }
        }
        self.finish(o)
    }

    fn span(&mut self, s: &Span) -> J {
        let mut o = Groups::new();
        self.hex_id(&mut o, "traceId", "trace_id", &s.trace_id);
        self.hex_id(&mut o, "spanId", "span_id", &s.span_id);
        self.string(&mut o, "traceState", "trace_state", &s.trace_state);
        self.hex_id(&mut o, "parentSpanId", "parent_span_id", &s.parent_span_id);
        self.uint(&mut o, "flags", "flags", s.flags.into(), true);
        self.string(&mut o, "name", "name", &s.name);
        self.enumeration(&mut o, "kind", s.kind, crate::json::KINDS);
        self.uint(
            &mut o,
            "startTimeUnixNano",
            "start_time_unix_nano",
            s.start_time_unix_nano,
            false,
        );
        self.uint(
            &mut o,
            "endTimeUnixNano",
            "end_time_unix_nano",
            s.end_time_unix_nano,
            false,
        );
        self.attributes(&mut o, &s.attributes);
        self.uint(
            &mut o,
            "droppedAttributesCount",
            "dropped_attributes_count",
            s.dropped_attributes_count.into(),
            true,
        );
        self.messages(&mut o, "events", "events", &s.events, |r, e| {
            let mut o = Groups::new();
            r.uint(&mut o, "timeUnixNano", "time_unix_nano", e.time_unix_nano, false);
            r.string(&mut o, "name", "name", &e.name);
            r.attributes(&mut o, &e.attributes);
            r.uint(
                &mut o,
                "droppedAttributesCount",
                "dropped_attributes_count",
                e.dropped_attributes_count.into(),
                true,
            );
            r.finish(o)
        });
        self.uint(
            &mut o,
            "droppedEventsCount",
            "dropped_events_count",
            s.dropped_events_count.into(),
            true,
        );
        self.messages(&mut o, "links", "links", &s.links, |r, l| {
            let mut o = Groups::new();
            r.hex_id(&mut o, "traceId", "trace_id", &l.trace_id);
            r.hex_id(&mut o, "spanId", "span_id", &l.span_id);
            r.string(&mut o, "traceState", "trace_state", &l.trace_state);
            r.attributes(&mut o, &l.attributes);
            r.uint(
                &mut o,
                "droppedAttributesCount",
                "dropped_attributes_count",
                l.dropped_attributes_count.into(),
                true,
            );
            r.uint(&mut o, "flags", "flags", l.flags.into(), true);
            r.finish(o)
        });
        self.uint(
            &mut o,
            "droppedLinksCount",
            "dropped_links_count",
            s.dropped_links_count.into(),
            true,
        );
        match &s.status {
            Some(st) => {
                let mut so = Groups::new();
                self.string(&mut so, "message", "message", &st.message);
                self.enumeration(&mut so, "code", st.code, crate::json::STATUS_CODES);
                let j = self.finish(so);
                self.field(&mut o, "status", "status", j, false);
            }
            None => self.absent(&mut o, "status", "status"),
        }
        self.finish(o)
    }

    fn scope_spans(&mut self, ss: &ScopeSpans) -> J {
        let mut o = Groups::new();
        match &ss.scope {
            Some(s) => {
                let mut so = Groups::new();
                self.string(&mut so, "name", "name", &s.name);
                self.string(&mut so, "version", "version", &s.version);
                self.attributes(&mut so, &s.attributes);
                self.uint(
                    &mut so,
                    "droppedAttributesCount",
                    "dropped_attributes_count",
                    s.dropped_attributes_count.into(),
                    true,
                );
                let j = self.finish(so);
                self.field(&mut o, "scope", "scope", j, false);
            }
            None => self.absent(&mut o, "scope", "scope"),
        }
        self.messages(&mut o, "spans", "spans", &ss.spans, Self::span);
        self.string(&mut o, "schemaUrl", "schema_url", &ss.schema_url);
        self.finish(o)
    }

    fn resource_spans(&mut self, rs: &ResourceSpans) -> J {
        let mut o = Groups::new();
        match &rs.resource {
            Some(r) => {
                let mut ro = Groups::new();
                self.attributes(&mut ro, &r.attributes);
                self.uint(
                    &mut ro,
                    "droppedAttributesCount",
                    "dropped_attributes_count",
                    r.dropped_attributes_count.into(),
                    true,
                );
                let j = self.finish(ro);
                self.field(&mut o, "resource", "resource", j, false);
            }
            None => self.absent(&mut o, "resource", "resource"),
        }
        self.messages(&mut o, "scopeSpans", "scope_spans", &rs.scope_spans, Self::scope_spans);
        self.string(&mut o, "schemaUrl", "schema_url", &rs.schema_url);
        self.finish(o)
    }

    fn render(req: &ExportTraceServiceRequest, seed: u64) -> String {
        let mut r = Styler { rng: Rng(seed) };
        let mut o = Groups::new();
        r.messages(
            &mut o,
            "resourceSpans",
            "resource_spans",
            &req.resource_spans,
            Self::resource_spans,
        );
        let j = r.finish(o);
        let mut out = String::new();
        j.write(&mut r.rng, &mut out);
        out
    }
}

/// What `resource_spans_to_json` loses: it always writes a status and a key/value pair's value.
fn as_tree_renderer_writes_it(mut req: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    fn kvs(list: &mut [KeyValue]) {
        for kv in list {
            let v = kv.value.get_or_insert_default();
            match &mut v.value {
                Some(V::KvlistValue(l)) => kvs(&mut l.values),
                Some(V::ArrayValue(a)) => values(&mut a.values),
                _ => {}
            }
        }
    }
    fn values(vs: &mut [AnyValue]) {
        for v in vs {
            match &mut v.value {
                Some(V::KvlistValue(l)) => kvs(&mut l.values),
                Some(V::ArrayValue(a)) => values(&mut a.values),
                _ => {}
            }
        }
    }
    for rs in &mut req.resource_spans {
        if let Some(r) = &mut rs.resource {
            kvs(&mut r.attributes);
        }
        for ss in &mut rs.scope_spans {
            if let Some(s) = &mut ss.scope {
                kvs(&mut s.attributes);
            }
            for s in &mut ss.spans {
                s.status.get_or_insert_default();
                kvs(&mut s.attributes);
                for e in &mut s.events {
                    kvs(&mut e.attributes);
                }
                for l in &mut s.links {
                    kvs(&mut l.attributes);
                }
            }
        }
    }
    req
}

/// Picks a random node of `v` and replaces it with junk, removes it or turns it to null.
fn mutate(v: &mut Value, rng: &mut Rng, styler: &mut Styler) {
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
    fn nth<'a>(v: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
        if *n == 0 {
            return Some(v);
        }
        *n -= 1;
        match v {
            Value::Array(a) => a.iter_mut().find_map(|x| nth(x, n)),
            Value::Object(o) => o.values_mut().find_map(|x| nth(x, n)),
            _ => None,
        }
    }
    let mut n = rng.below(count(v));
    let node = nth(v, &mut n).expect("node exists");
    match rng.below(6) {
        0 => *node = Value::Null,
        1 => {
            if let Value::Object(o) = node
                && !o.is_empty()
            {
                let k = o.keys().nth(rng.below(o.len())).unwrap().clone();
                let x = o.remove(&k).unwrap();
                if rng.chance(50) {
                    o.insert(snake(&k), x);
                }
            }
        }
        2 => {
            if let Value::String(s) = node {
                let mut len = s.len().saturating_sub(1 + rng.below(3));
                while !s.is_char_boundary(len) {
                    len -= 1;
                }
                s.truncate(len);
            }
        }
        3 => {
            if let Value::Array(a) = node {
                a.push(Value::Null);
            }
        }
        _ => {
            let mut text = String::new();
            styler.junk(2).write(rng, &mut text);
            *node = serde_json::from_str(&text).expect("junk is JSON");
        }
    }
}

const JSONISH: &[u8] = b"{}[]\":,0123456789-+.eEtrufalsn \\uxAZ";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every style of a valid request decodes to that request, and to what `request_from_json` returns.
    #[test]
    fn styled_json_matches_tree_decoder_and_original(req in request(), seed in any::<u64>()) {
        let json = Styler::render(&req, seed);
        let old = request_from_json(json.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        let bytes = request_json_to_protobuf(json.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        let new = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("output decodes");
        prop_assert_eq!(new.encode_to_vec(), old.encode_to_vec(), "{}", json);
        prop_assert_eq!(new.encode_to_vec(), req.encode_to_vec(), "{}", json);
        prop_assert_eq!(bytes.len(), req.encoded_len());
    }

    /// `resource_spans_to_json` output decodes to the original, give or take what that renderer adds.
    #[test]
    fn tree_rendered_json_round_trips(req in request()) {
        let json = json!({ "resourceSpans": resource_spans_to_json(&req.resource_spans) }).to_string();
        prop_assert!(agree(json.as_bytes())?, "rejected: {}", json);
        let bytes = request_json_to_protobuf(json.as_bytes()).expect("accepted");
        let new = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("output decodes");
        prop_assert_eq!(new.encode_to_vec(), as_tree_renderer_writes_it(req).encode_to_vec());
    }

    /// Valid JSON with one to three nodes replaced, removed, renamed or nulled: same outcome.
    #[test]
    fn mutated_documents_agree(req in request(), seed in any::<u64>(), mutations in 1..4usize) {
        let mut v = json!({ "resourceSpans": resource_spans_to_json(&req.resource_spans) });
        let mut rng = Rng(seed);
        let mut styler = Styler { rng: Rng(seed ^ 1) };
        for _ in 0..mutations {
            mutate(&mut v, &mut rng, &mut styler);
        }
        agree(&serde_json::to_vec(&v).unwrap())?;
    }

    /// Byte edits of styled documents (mostly invalid JSON): same outcome, no panic.
    #[test]
    fn edited_bytes_agree(
        req in request(),
        seed in any::<u64>(),
        edits in vec((any::<prop::sample::Index>(), 0..4u8, any::<u8>()), 1..4),
    ) {
        let mut body = Styler::render(&req, seed).into_bytes();
        for (at, op, b) in edits {
            let i = at.index(body.len() + 1);
            let c = if b < 200 { JSONISH[b as usize % JSONISH.len()] } else { b };
            match op {
                0 => body.insert(i, c),
                1 if i < body.len() => { body.remove(i); }
                2 if i < body.len() => body[i] = c,
                _ => {
                    let end = (i + (b as usize % 16)).min(body.len());
                    let chunk = body[i.min(end)..end].to_vec();
                    body.splice(i..i, chunk);
                }
            }
        }
        agree(&body)?;
    }

    #[test]
    fn arbitrary_bytes_agree(body in vec(any::<u8>(), 0..256)) {
        agree(&body)?;
    }

    #[test]
    fn arbitrary_jsonish_bytes_agree(body in vec(prop::sample::select(JSONISH), 0..64)) {
        agree(&body)?;
    }
}
