//! The string attribute values held in a stored span's protobuf fields, for the per-row-group
//! value blooms of the index ([`crate::index`]).

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
