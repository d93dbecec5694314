//! Bodies both decoders refuse, with the same error: IDs, numbers and enums, shapes, attribute
//! values, invalid JSON, which error comes first, and the attribute nesting limit.

use super::*;

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
