//! The string attribute values and the attribute keys held in a stored span's protobuf
//! fields, for the per-row-group value blooms and key lists of the index ([`crate::index`]).

use crate::dedicated::Scalar;
use weft_otlp::request::fields::*;
use weft_otlp::wire::{Reader, Value};

/// Where a stored byte string comes from, which says how its attributes are nested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A span's `attributes` fields (repeated `KeyValue`, tag 9).
    SpanAttributes,
    /// A resource header (`ResourceSpans` fields: `resource` → `attributes`).
    Resource,
    /// A scope header (`ScopeSpans` fields: `scope` → `attributes`).
    Scope,
    /// A span's `events` fields (each `Event` → `attributes`, tag 3).
    Events,
    /// A span's `links` fields (each `Link` → `attributes`, tag 4).
    Links,
}

/// `AnyValue.array_value` and `ArrayValue.values`.
const ANY_ARRAY: u32 = 5;
const LIST_VALUES: u32 = 1;
const SCOPE_ATTRIBUTES: u32 = 3;
const EVENT_ATTRIBUTES: u32 = 3;
const LINK_ATTRIBUTES: u32 = 4;

fn each<'a>(buf: &'a [u8], number: u32, f: impl FnMut(&'a [u8])) {
    weft_otlp::wire::each_bytes_field(buf, number, f);
}

fn any_strings<'a>(v: &'a [u8], depth: u32, f: &mut impl FnMut(&'a [u8])) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut r = Reader::new(v);
    while let Ok(Some(field)) = r.next() {
        match (field.number, field.value) {
            (ANY_STRING, Value::Bytes(s)) => f(s),
            (ANY_ARRAY, Value::Bytes(a)) => each(a, LIST_VALUES, |x| any_strings(x, depth + 1, f)),
            _ => {}
        }
    }
}

fn kv_strings<'a>(kv: &'a [u8], f: &mut impl FnMut(&'a [u8])) {
    // Most key/values are one scalar in the usual layout: read without the general walk.
    match crate::dedicated::canonical_fast(kv) {
        Some((_, Scalar::Str(s))) => f(s),
        Some(_) => {}
        None => each(kv, KV_VALUE, |v| any_strings(v, 0, f)),
    }
}

const MAX_DEPTH: u32 = weft_otlp::request::MAX_DEPTH;

/// Calls `f` with every string attribute value (array elements included) in `buf`, stored
/// bytes of kind `source`. Malformed bytes end the walk early; this never panics.
pub fn for_each_string<'a>(source: Source, buf: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let f = &mut f;
    match source {
        Source::SpanAttributes => each(buf, SPAN_ATTRIBUTES, |kv| kv_strings(kv, f)),
        Source::Resource => each(buf, RS_RESOURCE, |res| {
            each(res, RESOURCE_ATTRIBUTES, |kv| kv_strings(kv, f))
        }),
        Source::Scope => each(buf, SS_SCOPE, |s| each(s, SCOPE_ATTRIBUTES, |kv| kv_strings(kv, f))),
        Source::Events => each(buf, SPAN_EVENTS, |e| each(e, EVENT_ATTRIBUTES, |kv| kv_strings(kv, f))),
        Source::Links => each(buf, SPAN_LINKS, |l| each(l, LINK_ATTRIBUTES, |kv| kv_strings(kv, f))),
    }
}

/// Calls `f` with every attribute key in `buf`, stored bytes of kind `source`, in order and
/// without reading any value: exactly the keys a decoder gives those attributes (a `KeyValue`
/// without a key is left out; of several keys the last counts). Malformed bytes end the walk
/// early; this never panics. The tag-name reader of `weft-query` uses it too, so the index's
/// key lists and a read of the blobs name the same keys.
pub fn for_each_key<'a>(source: Source, buf: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let (outer, inner) = match source {
        Source::SpanAttributes => (SPAN_ATTRIBUTES, None),
        Source::Resource => (RS_RESOURCE, Some(RESOURCE_ATTRIBUTES)),
        Source::Scope => (SS_SCOPE, Some(SCOPE_ATTRIBUTES)),
        Source::Events => (SPAN_EVENTS, Some(EVENT_ATTRIBUTES)),
        Source::Links => (SPAN_LINKS, Some(LINK_ATTRIBUTES)),
    };
    let mut key_of = |kv: &'a [u8]| {
        let mut key = None;
        let mut r = Reader::new(kv);
        while let Ok(Some(field)) = r.next() {
            if let (KV_KEY, Value::Bytes(b)) = (field.number, field.value) {
                key = Some(b);
            }
        }
        if let Some(k) = key {
            f(k);
        }
    };
    let mut r = Reader::new(buf);
    while let Ok(Some(field)) = r.next() {
        match (field.number, field.value, inner) {
            (n, Value::Bytes(part), None) if n == outer => key_of(part),
            (n, Value::Bytes(part), Some(inner)) if n == outer => {
                let mut r = Reader::new(part);
                while let Ok(Some(field)) = r.next() {
                    if let (n, Value::Bytes(kv)) = (field.number, field.value)
                        && n == inner
                    {
                        key_of(kv);
                    }
                }
            }
            _ => {}
        }
    }
}
