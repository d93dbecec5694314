//! Dedicated attribute columns: the most frequent attribute keys of a block get their own
//! typed Parquet column, chosen from the data when the block is built.
//!
//! # Choice ([`choose`])
//!
//! For each scope (span attributes, resource attributes), a key is a candidate with the value
//! type most of its values have when
//! - it appears (once, with a scalar value of that type) in at least 1% of the block's spans;
//! - for strings, its distinct values are at most one in twenty of its occurrences (plus 100):
//!   a column of `http.request.method` is a small dictionary and a run of short indexes, while
//!   a column of `user.id` or `url.full` would be as large as the generic blob and is better
//!   served by the value blooms of the index.
//!
//! The [`MAX_PER_SCOPE`] most frequent candidates win (ties by key). The choice is written to
//! `meta.json` ([`crate::meta::BlockMeta::dedicated_columns`]).
//!
//! # Storage
//!
//! A span attribute whose key is dedicated, that occurs once in the span and whose value is
//! one scalar of the column's type is *moved*: the span's `attributes` blob keeps the other
//! key/values, the column holds the value, and readers append it back as an encoded
//! `KeyValue` ([`append_key_value`]). Values of another type, repeated keys and anything not
//! canonical stay in the blob, so reading is exact (only the attribute order changes:
//! dedicated ones come last, which OTLP does not give meaning to). Resource attributes are
//! copied, not moved: each distinct resource is stored once per row group already.

use crate::hash::{FastBuild, FastMap};
use crate::meta::{DedicatedColumn, DedicatedScope, ValueType};
use weft_otlp::request::fields::*;
use weft_otlp::wire::{Reader, Value as Wire, each_bytes_field, put_bytes, put_tag};

/// At most this many dedicated columns per scope.
pub const MAX_PER_SCOPE: usize = 10;

/// `AnyValue` fields.
const ANY_BOOL: u32 = 2;
const ANY_INT: u32 = 3;
const ANY_DOUBLE: u32 = 4;

/// A scalar attribute value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    Str(&'a [u8]),
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Scalar<'_> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Scalar::Str(_) => ValueType::String,
            Scalar::Int(_) => ValueType::Int,
            Scalar::Double(_) => ValueType::Double,
            Scalar::Bool(_) => ValueType::Bool,
        }
    }
}

/// A `KeyValue` of exactly a key and an `AnyValue` of exactly one scalar field: the only shape
/// that is moved to a column, so that re-encoding it reproduces what a decoder reads.
#[inline]
pub fn canonical_key_value(kv: &[u8]) -> Option<(&[u8], Scalar<'_>)> {
    canonical_fast(kv).or_else(|| canonical_general(kv))
}

/// [`canonical_key_value`] for the layout every SDK writes: the key, then the value, each with
/// a one-byte length, and the value's one scalar field. `None` when the bytes are laid out any
/// other way: then only the general walk can tell. Compaction reads every attribute of every span
/// this way (choosing dedicated columns, splitting blobs, value blooms); through the general
/// walk it was about a third of a merge of spans with realistic attributes
/// (docs/benchmarks/all-in-cost-and-compaction.md, "Compaction of realistic spans").
#[inline]
pub(crate) fn canonical_fast(kv: &[u8]) -> Option<(&[u8], Scalar<'_>)> {
    // 0x0a: field 1 (key), length-delimited; 0x12: field 2 (value), length-delimited.
    let (&[0x0a, klen], rest) = kv.split_first_chunk::<2>()? else {
        return None;
    };
    let key = rest.get(..usize::from(klen))?;
    let (&[0x12, vlen], v) = rest.get(key.len()..)?.split_first_chunk::<2>()? else {
        return None;
    };
    if klen >= 0x80 || vlen >= 0x80 || v.len() != usize::from(vlen) {
        return None;
    }
    let scalar = match *v {
        // field 1 (string_value), length-delimited, the string to the end.
        [0x0a, slen, ref s @ ..] if slen < 0x80 && s.len() == usize::from(slen) => Scalar::Str(s),
        // field 2 (bool_value), varint 0 or 1.
        [0x10, b] if b <= 1 => Scalar::Bool(b == 1),
        // field 3 (int_value), a varint to the end.
        [0x18, ref n @ ..] if !n.is_empty() && n.len() <= 10 => {
            let (last, init) = n.split_last()?;
            if *last >= 0x80 || init.iter().any(|&b| b < 0x80) {
                return None;
            }
            let i = n
                .iter()
                .enumerate()
                .fold(0u64, |acc, (k, &b)| acc | (u64::from(b & 0x7f) << (7 * k)));
            Scalar::Int(i as i64)
        }
        // field 4 (double_value), fixed64.
        [0x21, ref d @ ..] if d.len() == 8 => Scalar::Double(f64::from_bits(u64::from_le_bytes(d.try_into().ok()?))),
        _ => return None,
    };
    Some((key, scalar))
}

fn canonical_general(kv: &[u8]) -> Option<(&[u8], Scalar<'_>)> {
    let mut r = Reader::new(kv);
    let (mut key, mut value) = (None, None);
    while let Ok(Some(f)) = r.next() {
        match (f.number, f.value) {
            (KV_KEY, Wire::Bytes(k)) if key.is_none() => key = Some(k),
            (KV_VALUE, Wire::Bytes(v)) if value.is_none() => value = Some(v),
            _ => return None,
        }
    }
    if r.next().is_err() {
        return None;
    }
    let mut r = Reader::new(value?);
    let f = r.next().ok()??;
    let scalar = match (f.number, f.value) {
        (ANY_STRING, Wire::Bytes(s)) => Scalar::Str(s),
        (ANY_BOOL, Wire::Varint(b)) if b <= 1 => Scalar::Bool(b == 1),
        (ANY_INT, Wire::Varint(i)) => Scalar::Int(i as i64),
        (ANY_DOUBLE, Wire::Fixed64(d)) => Scalar::Double(f64::from_bits(d)),
        _ => return None,
    };
    if !matches!(r.next(), Ok(None)) {
        return None;
    }
    Some((key?, scalar))
}

/// Calls `f` with each encoded `KeyValue` of a span's attributes blob.
fn each_key_value<'a>(blob: &'a [u8], f: impl FnMut(&'a [u8])) {
    each_bytes_field(blob, SPAN_ATTRIBUTES, f);
}

/// Calls `f` with each encoded `KeyValue` of a resource header's resource.
fn each_resource_key_value<'a>(header: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    each_bytes_field(header, RS_RESOURCE, |res| {
        each_bytes_field(res, RESOURCE_ATTRIBUTES, &mut f)
    });
}

/// Occurrence counts of the keys of one scope.
#[derive(Default)]
struct Stats {
    /// Each key's index in `keys`.
    index: FastMap<Vec<u8>, u32>,
    keys: Vec<KeyStats>,
    /// The blob (or header) [`count`] is at, to find keys repeated within one.
    blob: u64,
    /// The index of each key/value's key in the current blob.
    ids: Vec<u32>,
    /// The key index found at each position of the previous blob: blobs of one kind of span
    /// list the same keys in the same order, so one comparison usually finds the key without
    /// hashing it.
    at: Vec<u32>,
}

/// Occurrence counts of one key in one scope.
#[derive(Default)]
struct KeyStats {
    key: Vec<u8>,
    /// Spans where the key occurs once with a canonical scalar, by value type.
    by_type: [u64; 4],
    /// The distinct string values' 64-bit hashes, until there are more than the limit. Two
    /// values sharing a hash count as one; at the 50,000 values of a million-span block where
    /// counting stops, the chance that any two do is about one in ten billion.
    distinct: hashbrown::HashSet<u64, FastBuild>,
    too_many: bool,
    /// The last blob the key was seen in, and whether it occurred more than once there.
    last_blob: u64,
    repeated: bool,
}

fn type_index(t: ValueType) -> usize {
    match t {
        ValueType::String => 0,
        ValueType::Int => 1,
        ValueType::Double => 2,
        ValueType::Bool => 3,
    }
}

const TYPES: [ValueType; 4] = [ValueType::String, ValueType::Int, ValueType::Double, ValueType::Bool];

/// Counts the keys of the encoded key/values of one span (or resource) seen `weight` times.
/// A key that occurs more than once in it is not counted there.
fn count(stats: &mut Stats, kvs: &[Kv<'_>], weight: u64, distinct_limit: usize, seed: u64) {
    stats.blob += 1;
    let Stats {
        index,
        keys,
        blob,
        ids,
        at,
    } = stats;
    ids.clear();
    for (j, &(key, _, _)) in kvs.iter().enumerate() {
        if j == at.len() {
            at.push(u32::MAX);
        }
        let guess = at[j];
        let id = if guess != u32::MAX && keys[guess as usize].key == key {
            guess
        } else {
            // Look up before inserting: a key is copied once per block, not once per span.
            let id = match index.get(key) {
                Some(&id) => id,
                None => {
                    let id = keys.len() as u32;
                    index.insert(key.to_vec(), id);
                    keys.push(KeyStats {
                        key: key.to_vec(),
                        ..KeyStats::default()
                    });
                    id
                }
            };
            at[j] = id;
            id
        };
        let s = &mut keys[id as usize];
        s.repeated = s.last_blob == *blob;
        s.last_blob = *blob;
        ids.push(id);
    }
    for (&(_, value, _), &id) in kvs.iter().zip(ids.iter()) {
        let s = &mut keys[id as usize];
        let Some(value) = value else { continue };
        if s.repeated {
            continue;
        }
        s.by_type[type_index(value.value_type())] += weight;
        if let Scalar::Str(v) = value
            && !s.too_many
        {
            s.distinct.insert(xxhash_rust::xxh3::xxh3_64_with_seed(v, seed));
            s.too_many = s.distinct.len() > distinct_limit;
        }
    }
}

fn pick(stats: Stats, spans: u64, scope: DedicatedScope) -> Vec<DedicatedColumn> {
    let min = spans.div_ceil(100).max(1);
    let mut candidates: Vec<(u64, String, ValueType)> = Vec::new();
    for s in stats.keys {
        let Ok(name) = String::from_utf8(s.key) else { continue };
        let (t, &n) = s
            .by_type
            .iter()
            .enumerate()
            .max_by_key(|&(i, n)| (*n, std::cmp::Reverse(i)))
            .expect("four types");
        let t = TYPES[t];
        if n < min {
            continue;
        }
        if t == ValueType::String && (s.too_many || s.distinct.len() as u64 > n / 20 + 100) {
            continue;
        }
        candidates.push((n, name, t));
    }
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let prefix = match scope {
        DedicatedScope::Span => "span",
        DedicatedScope::Resource => "resource",
    };
    candidates
        .into_iter()
        .take(MAX_PER_SCOPE)
        .enumerate()
        .map(|(i, (_, name, value_type))| DedicatedColumn {
            scope,
            name,
            value_type,
            column: format!("{prefix}_dedicated_{i}"),
            complete: false,
        })
        .collect()
}

/// One key/value of a blob or header: its key, its canonical scalar if it has one, and its
/// encoded bytes.
type Kv<'a> = (&'a [u8], Option<Scalar<'a>>, &'a [u8]);

/// The key/values of a blob or header, in order, into `out` (cleared first).
fn key_values<'a>(buf: &'a [u8], resource: bool, out: &mut Vec<Kv<'a>>) {
    out.clear();
    let mut f = |kv| match canonical_key_value(kv) {
        Some((k, v)) => out.push((k, Some(v), kv)),
        // Every key/value gets an entry (in blob order, as `Splitter::split` relies on).
        None => out.push((raw_key(kv).unwrap_or_default(), None, kv)),
    };
    if resource {
        each_resource_key_value(buf, &mut f);
    } else {
        each_key_value(buf, &mut f);
    }
}

/// Appends each attribute of a span's attributes blob whose key is `keys[k]` to `out[k]`, as
/// the same encoded `Span.attributes` field, in blob order.
pub fn pick_attributes(blob: &[u8], keys: &[&[u8]], out: &mut [Vec<u8>]) {
    each_key_value(blob, |kv| {
        if let Some(key) = raw_key(kv)
            && let Some(k) = keys.iter().position(|&want| want == key)
        {
            put_bytes(&mut out[k], SPAN_ATTRIBUTES, kv);
        }
    });
}

/// The key of any `KeyValue`, canonical or not.
fn raw_key(kv: &[u8]) -> Option<&[u8]> {
    let mut r = Reader::new(kv);
    while let Ok(Some(f)) = r.next() {
        if let (KV_KEY, Wire::Bytes(k)) = (f.number, f.value) {
            return Some(k);
        }
    }
    None
}

/// Chooses the dedicated columns for a block from its distinct span attribute blobs and
/// resource headers, each with the number of spans that carry it.
pub fn choose<'a>(
    spans: u64,
    attribute_blobs: impl IntoIterator<Item = (&'a [u8], u64)>,
    resource_headers: impl IntoIterator<Item = (&'a [u8], u64)>,
) -> Vec<DedicatedColumn> {
    let limit = (spans / 20 + 100) as usize;
    let seed = crate::hash::process_seed();
    let mut kvs = Vec::new();
    let mut span_stats = Stats::default();
    for (blob, n) in attribute_blobs {
        key_values(blob, false, &mut kvs);
        count(&mut span_stats, &kvs, n, limit, seed);
    }
    let mut res_stats = Stats::default();
    for (header, n) in resource_headers {
        key_values(header, true, &mut kvs);
        count(&mut res_stats, &kvs, n, limit, seed);
    }
    let mut out = pick(span_stats, spans, DedicatedScope::Span);
    out.extend(pick(res_stats, spans, DedicatedScope::Resource));
    out
}

/// Splits span attribute blobs between the generic blob and the span-scope dedicated columns.
/// Its buffers are reused from blob to blob, and a key is matched to its column by its length
/// first, so a blob costs one pass over its key/values. A merge of spans whose attribute blobs
/// are all distinct splits every one of them.
pub struct Splitter<'k, 'a> {
    keys: &'k [(&'k [u8], ValueType)],
    /// The columns whose key has each length; keys of [`Self::LONG`] bytes or more share the
    /// last entry.
    by_len: Vec<Vec<u32>>,
    kvs: Vec<Kv<'a>>,
    /// The column of each key/value of the blob being split ([`Self::NONE`] when not dedicated).
    cols: Vec<u32>,
    /// Occurrences of each column's key in the blob being split.
    count: Vec<u32>,
}

impl<'k, 'a> Splitter<'k, 'a> {
    const LONG: usize = 64;
    const NONE: u32 = u32::MAX;

    /// A splitter for `keys` (distinct key names).
    pub fn new(keys: &'k [(&'k [u8], ValueType)]) -> Self {
        let mut by_len = vec![Vec::new(); Self::LONG + 1];
        for (c, (k, _)) in keys.iter().enumerate() {
            by_len[k.len().min(Self::LONG)].push(c as u32);
        }
        Splitter {
            keys,
            by_len,
            kvs: Vec::new(),
            cols: Vec::new(),
            count: vec![0; keys.len()],
        }
    }

    /// Splits `blob`: appends what stays generic to `rest` and sets `vals[c]` (all overwritten)
    /// to the value of `keys[c]` that is moved out. Sets `left[c]` when an occurrence of key `c`
    /// stays in `rest` (another type, repeated, or not canonical), so the column alone does
    /// not hold every value of that key.
    pub fn split(&mut self, blob: &'a [u8], rest: &mut Vec<u8>, left: &mut [bool], vals: &mut [Option<Scalar<'a>>]) {
        vals.fill(None);
        key_values(blob, false, &mut self.kvs);
        self.cols.clear();
        for &(key, _, _) in &self.kvs {
            let c = self.by_len[key.len().min(Self::LONG)]
                .iter()
                .copied()
                .find(|&c| self.keys[c as usize].0 == key)
                .unwrap_or(Self::NONE);
            if c != Self::NONE {
                self.count[c as usize] += 1;
            }
            self.cols.push(c);
        }
        for (&(_, value, kv), &c) in self.kvs.iter().zip(&self.cols) {
            if c == Self::NONE {
                put_bytes(rest, SPAN_ATTRIBUTES, kv);
                continue;
            }
            let c = c as usize;
            if let Some(v) = value
                && v.value_type() == self.keys[c].1
                && self.count[c] == 1
            {
                vals[c] = Some(v);
                continue;
            }
            left[c] = true;
            put_bytes(rest, SPAN_ATTRIBUTES, kv);
        }
        for &c in &self.cols {
            if c != Self::NONE {
                self.count[c as usize] = 0;
            }
        }
    }
}

/// The value of each of `keys` (the resource-scope dedicated columns) in a resource header.
pub fn resource_values<'a>(header: &'a [u8], keys: &[(&[u8], ValueType)]) -> Vec<Option<Scalar<'a>>> {
    let mut kvs = Vec::new();
    key_values(header, true, &mut kvs);
    keys.iter()
        .map(|&(k, t)| {
            let mut it = kvs.iter().filter(|(key, _, _)| *key == k);
            match (it.next(), it.next()) {
                (Some((_, Some(v), _)), None) if v.value_type() == t => Some(*v),
                _ => None,
            }
        })
        .collect()
}

/// How many bytes [`append_key_value`] appends for `key = value`.
pub fn key_value_len(key: &[u8], value: Scalar<'_>) -> usize {
    field_len(field_len(key.len()) + field_len(any_value_len(value)))
}

/// A length-delimited field of `len` bytes, with its tag (field numbers below 16) and length.
fn field_len(len: usize) -> usize {
    1 + weft_otlp::wire::varint_len(len as u64) + len
}

/// The encoded `AnyValue` holding `value`.
fn any_value_len(value: Scalar<'_>) -> usize {
    match value {
        Scalar::Str(s) => field_len(s.len()),
        Scalar::Bool(_) => 2,
        Scalar::Int(i) => 1 + weft_otlp::wire::varint_len(i as u64),
        Scalar::Double(_) => 9,
    }
}

/// Appends `key = value` to a span's attributes blob as an encoded `KeyValue` field, in the
/// canonical encoding (minimal lengths, fields in number order).
pub fn append_key_value(out: &mut Vec<u8>, key: &[u8], value: Scalar<'_>) {
    use weft_otlp::wire::put_varint;
    let any = any_value_len(value);
    put_tag(out, SPAN_ATTRIBUTES, 2);
    put_varint(out, (field_len(key.len()) + field_len(any)) as u64);
    put_bytes(out, KV_KEY, key);
    put_tag(out, KV_VALUE, 2);
    put_varint(out, any as u64);
    match value {
        Scalar::Str(s) => put_bytes(out, ANY_STRING, s),
        Scalar::Bool(b) => {
            put_tag(out, ANY_BOOL, 0);
            out.push(u8::from(b));
        }
        Scalar::Int(i) => {
            put_tag(out, ANY_INT, 0);
            put_varint(out, i as u64);
        }
        Scalar::Double(d) => {
            put_tag(out, ANY_DOUBLE, 1);
            out.extend_from_slice(&d.to_bits().to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests;
