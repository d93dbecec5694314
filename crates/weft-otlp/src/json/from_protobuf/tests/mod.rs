//! `write_resource_spans_json` against the reference: prost's `TracesData::decode` followed by
//! `resource_spans_to_json`. Both must accept the same bytes and write the same text. The
//! comparisons and the protobuf built by hand that every topic uses are here.

mod caller;
mod encodings;
mod invalid;
mod properties;
mod rendering;
mod rewrite;

use super::{Msg, ProtobufError, ProtobufProblem, RECURSION_LIMIT, Ty, write_resource_spans_json};
use crate::json::fixtures::{SID, TID, every_field_resource_spans, kv, some_any};
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
