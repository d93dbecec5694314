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

/// Calls `f` with each encoded `KeyValue` of `buf`, stored bytes of kind `source`, in order.
/// Malformed bytes end the walk early.
fn for_each_kv<'a>(source: Source, buf: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let f = &mut f;
    match source {
        Source::SpanAttributes => each(buf, SPAN_ATTRIBUTES, f),
        Source::Resource => each(buf, RS_RESOURCE, |res| each(res, RESOURCE_ATTRIBUTES, &mut *f)),
        Source::Scope => each(buf, SS_SCOPE, |s| each(s, SCOPE_ATTRIBUTES, &mut *f)),
        Source::Events => each(buf, SPAN_EVENTS, |e| each(e, EVENT_ATTRIBUTES, &mut *f)),
        Source::Links => each(buf, SPAN_LINKS, |l| each(l, LINK_ATTRIBUTES, &mut *f)),
    }
}

/// The key of an encoded `KeyValue` as a decoder reads it: of several key fields the last,
/// `None` without one.
#[inline]
fn kv_key(kv: &[u8]) -> Option<&[u8]> {
    // The layout every SDK writes: the key, then the value to the end, each with a one-byte
    // length (then there is no other key field).
    if let Some((&[0x0a, klen], rest)) = kv.split_first_chunk::<2>()
        && klen < 0x80
        && let Some(key) = rest.get(..usize::from(klen))
        && let Some((&[0x12, vlen], v)) = rest[key.len()..].split_first_chunk::<2>()
        && vlen < 0x80
        && v.len() == usize::from(vlen)
    {
        return Some(key);
    }
    let mut key = None;
    let mut r = Reader::new(kv);
    while let Ok(Some(field)) = r.next() {
        if let (KV_KEY, Value::Bytes(b)) = (field.number, field.value) {
            key = Some(b);
        }
    }
    key
}

/// Calls `f` with every string attribute value (array elements included) in `buf`, stored
/// bytes of kind `source`. Malformed bytes end the walk early; this never panics.
pub fn for_each_string<'a>(source: Source, buf: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    for_each_kv(source, buf, |kv| kv_strings(kv, &mut f));
}

/// Calls `f` with every attribute key in `buf`, stored bytes of kind `source`, in order and
/// without reading any value: exactly the keys a decoder gives those attributes (a `KeyValue`
/// without a key is left out; of several keys the last counts). Malformed bytes end the walk
/// early; this never panics. The tag-name reader of `weft-engine` uses it too, so the index's
/// key lists and a read of the blobs name the same keys.
pub fn for_each_key<'a>(source: Source, buf: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    for_each_kv(source, buf, |kv| {
        if let Some(k) = kv_key(kv) {
            f(k)
        }
    });
}

/// [`for_each_key`] and [`for_each_string`] in one walk: `key` with each attribute key,
/// `string` with each string value, in order.
pub fn for_each_key_and_string<'a>(
    source: Source,
    buf: &'a [u8],
    mut key: impl FnMut(&'a [u8]),
    mut string: impl FnMut(&'a [u8]),
) {
    for_each_kv(source, buf, |kv| match crate::dedicated::canonical_fast(kv) {
        Some((k, scalar)) => {
            key(k);
            if let Scalar::Str(s) = scalar {
                string(s);
            }
        }
        None => {
            if let Some(k) = kv_key(kv) {
                key(k);
            }
            each(kv, KV_VALUE, |v| any_strings(v, 0, &mut string));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::common::{AnyValue, ArrayValue, KeyValue, any_value::Value as V};

    const SOURCES: [Source; 5] = [
        Source::SpanAttributes,
        Source::Resource,
        Source::Scope,
        Source::Events,
        Source::Links,
    ];

    /// What the two walks give apart: the reference for the combined one.
    fn apart(source: Source, buf: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut keys, mut strings) = (Vec::new(), Vec::new());
        for_each_key(source, buf, |k| keys.push(k.to_vec()));
        for_each_string(source, buf, |s| strings.push(s.to_vec()));
        (keys, strings)
    }

    fn together(source: Source, buf: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut keys, mut strings) = (Vec::new(), Vec::new());
        for_each_key_and_string(source, buf, |k| keys.push(k.to_vec()), |s| strings.push(s.to_vec()));
        (keys, strings)
    }

    /// The general walk's key of a `KeyValue`: the reference for [`kv_key`]'s fast path.
    fn general_key(kv: &[u8]) -> Option<Vec<u8>> {
        let mut key = None;
        let mut r = Reader::new(kv);
        while let Ok(Some(f)) = r.next() {
            if let (KV_KEY, Value::Bytes(b)) = (f.number, f.value) {
                key = Some(b.to_vec());
            }
        }
        key
    }

    fn value() -> impl proptest::strategy::Strategy<Value = Option<V>> {
        use proptest::prelude::*;
        let scalar = prop_oneof![
            Just(V::StringValue(String::new())),
            proptest::collection::vec(any::<u8>(), 0..140)
                .prop_map(|b| V::StringValue(String::from_utf8_lossy(&b).into_owned())),
            any::<bool>().prop_map(V::BoolValue),
            any::<i64>().prop_map(V::IntValue),
            any::<f64>().prop_map(V::DoubleValue),
        ];
        prop_oneof![
            scalar.clone().prop_map(Some),
            proptest::collection::vec(scalar, 0..4).prop_map(|vs| {
                Some(V::ArrayValue(ArrayValue {
                    values: vs.into_iter().map(|v| AnyValue { value: Some(v) }).collect(),
                }))
            }),
            Just(None),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// On attribute blobs as written (with a byte string appended, which may break them),
        /// and on arbitrary bytes, the combined walk gives what the two walks give apart, and
        /// the key reader's fast path what the general walk gives.
        #[test]
        fn the_combined_walk_agrees_with_the_two_apart(
            kvs in proptest::collection::vec((proptest::collection::vec(proptest::num::u8::ANY, 0..140), value()), 0..6),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..12),
            noise in proptest::collection::vec(proptest::num::u8::ANY, 0..120),
        ) {
            let mut blob = Vec::new();
            for (key, value) in &kvs {
                let kv = KeyValue {
                    key: String::from_utf8_lossy(key).into_owned(),
                    value: value.clone().map(|v| AnyValue { value: Some(v) }),
                };
                let bytes = kv.encode_to_vec();
                proptest::prop_assert_eq!(kv_key(&bytes).map(<[u8]>::to_vec), general_key(&bytes));
                // Field 9 (Span.attributes), length-delimited.
                prost::encoding::bytes::encode(9, &bytes, &mut blob);
            }
            blob.extend_from_slice(&tail);
            for buf in [&blob, &noise] {
                proptest::prop_assert_eq!(kv_key(buf).map(<[u8]>::to_vec), general_key(buf));
                for source in SOURCES {
                    proptest::prop_assert_eq!(together(source, buf), apart(source, buf));
                }
            }
            let (keys, _) = together(Source::SpanAttributes, &blob);
            if tail.is_empty() {
                // An empty key is not encoded: a decoder sees no key there, and neither do these.
                proptest::prop_assert_eq!(keys.len(), kvs.iter().filter(|(k, _)| !k.is_empty()).count());
            }
        }
    }
}
