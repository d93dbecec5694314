//! `request_json_to_protobuf` against the tree decoder `request_from_json`, which is the reference:
//! both must accept the same bodies, produce the same message and report the same error. The
//! checks and the bodies built by hand that every topic uses are here.

mod accepted;
mod errors;
mod properties;
mod strategies;
mod styler;

use super::request_json_to_protobuf;
use crate::json::fixtures::{SID, TID, every_field_resource_spans, kv, some_any};
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
