//! Direct OTLP protobuf encoding of finished spans (spec/otlp.md).
//!
//! There is no intermediate message tree: lengths are computed in one pass over the batch
//! (span lengths are cached in a scratch vector), then the bytes are written in a second pass
//! into the caller's reused buffer. The output is deterministic: ascending field numbers,
//! defaults omitted, minimal varints (bench `export/encode`).

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};

use crate::id::SpanId;
use crate::resource::Resource;
use crate::trace::{EventData, LinkData, SpanData};

const LEN: u8 = 2;
const VARINT: u8 = 0;
const I64: u8 = 1;
const I32: u8 = 5;

/// Bit 8 of `Span.flags`/`Link.flags`: the remote bit (9) is meaningful.
pub const FLAG_HAS_IS_REMOTE: u32 = 0x100;
/// Bit 9 of `Span.flags`/`Link.flags`: the parent (or linked) context is remote.
pub const FLAG_IS_REMOTE: u32 = 0x200;

#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 bits, at least one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn put_tag(buf: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(buf, ((field as u64) << 3) | wire as u64);
}

/// Size of a length-delimited field with a one-byte tag (fields 1–15).
#[inline]
fn len_field(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

#[inline]
fn put_len_field(buf: &mut Vec<u8>, field: u32, body_len: usize) {
    put_tag(buf, field, LEN);
    put_varint(buf, body_len as u64);
}

#[inline]
fn put_bytes_field(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_len_field(buf, field, bytes.len());
    buf.extend_from_slice(bytes);
}

#[inline]
fn str_field_len(s: &str) -> usize {
    if s.is_empty() { 0 } else { len_field(s.len()) }
}

#[inline]
fn put_str_field(buf: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        put_bytes_field(buf, field, s.as_bytes());
    }
}

#[inline]
fn u32_field_len(v: u32) -> usize {
    if v == 0 { 0 } else { 1 + varint_len(v as u64) }
}

#[inline]
fn put_u32_field(buf: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        put_tag(buf, field, VARINT);
        put_varint(buf, v as u64);
    }
}

#[inline]
fn fixed64_field_len(v: u64) -> usize {
    if v == 0 { 0 } else { 9 }
}

#[inline]
fn put_fixed64_field(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_tag(buf, field, I64);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

/// An attribute the encoder can write as an OTLP `KeyValue`.
pub trait OtlpAttribute {
    /// The key.
    fn key(&self) -> &str;
    /// The length of the encoded `AnyValue` message body.
    fn value_len(&self) -> usize;
    /// Writes the `AnyValue` message body.
    fn write_value(&self, buf: &mut Vec<u8>);
}

#[inline]
fn kv_len<A: OtlpAttribute>(a: &A) -> usize {
    // The value message is always written, even when empty.
    str_field_len(a.key()) + len_field(a.value_len())
}

#[inline]
fn put_kv<A: OtlpAttribute>(buf: &mut Vec<u8>, field: u32, a: &A) {
    put_len_field(buf, field, kv_len(a));
    put_str_field(buf, 1, a.key());
    put_len_field(buf, 2, a.value_len());
    a.write_value(buf);
}

fn attrs_len<A: OtlpAttribute>(attrs: &[A]) -> usize {
    attrs.iter().map(|a| len_field(kv_len(a))).sum()
}

fn put_attrs<A: OtlpAttribute>(buf: &mut Vec<u8>, field: u32, attrs: &[A]) {
    for a in attrs {
        put_kv(buf, field, a);
    }
}

// AnyValue bodies for the `opentelemetry` value model.
#[inline]
fn string_value_len(s: &str) -> usize {
    len_field(s.len())
}
#[inline]
fn array_len<T>(items: &[T], elem: impl Fn(&T) -> usize) -> usize {
    len_field(items.iter().map(|v| len_field(elem(v))).sum())
}

fn otel_value_len(v: &Value) -> usize {
    match v {
        Value::Bool(_) => 2,
        Value::I64(i) => 1 + varint_len(*i as u64),
        Value::F64(_) => 9,
        Value::String(s) => string_value_len(s.as_str()),
        Value::Array(a) => match a {
            Array::Bool(v) => array_len(v, |_| 2),
            Array::I64(v) => array_len(v, |i| 1 + varint_len(*i as u64)),
            Array::F64(v) => array_len(v, |_| 9),
            Array::String(v) => array_len(v, |s| string_value_len(s.as_str())),
            _ => len_field(0),
        },
        _ => 0,
    }
}

fn put_otel_array<T>(buf: &mut Vec<u8>, items: &[T], elem_len: impl Fn(&T) -> usize, put: impl Fn(&mut Vec<u8>, &T)) {
    let body: usize = items.iter().map(|v| len_field(elem_len(v))).sum();
    put_len_field(buf, 5, body);
    for v in items {
        put_len_field(buf, 1, elem_len(v));
        put(buf, v);
    }
}

fn put_otel_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Bool(b) => {
            put_tag(buf, 2, VARINT);
            buf.push(u8::from(*b));
        }
        Value::I64(i) => {
            put_tag(buf, 3, VARINT);
            put_varint(buf, *i as u64);
        }
        Value::F64(f) => {
            put_tag(buf, 4, I64);
            buf.extend_from_slice(&f.to_le_bytes());
        }
        Value::String(s) => put_bytes_field(buf, 1, s.as_str().as_bytes()),
        Value::Array(a) => match a {
            Array::Bool(v) => put_otel_array(buf, v, |_| 2, |b, x| put_otel_value(b, &Value::Bool(*x))),
            Array::I64(v) => put_otel_array(
                buf,
                v,
                |i| 1 + varint_len(*i as u64),
                |b, x| put_otel_value(b, &Value::I64(*x)),
            ),
            Array::F64(v) => put_otel_array(buf, v, |_| 9, |b, x| put_otel_value(b, &Value::F64(*x))),
            Array::String(v) => put_otel_array(
                buf,
                v,
                |s| string_value_len(s.as_str()),
                |b, s| put_bytes_field(b, 1, s.as_str().as_bytes()),
            ),
            _ => put_len_field(buf, 5, 0),
        },
        _ => {}
    }
}

impl OtlpAttribute for KeyValue {
    #[inline]
    fn key(&self) -> &str {
        self.key.as_str()
    }
    #[inline]
    fn value_len(&self) -> usize {
        otel_value_len(&self.value)
    }
    #[inline]
    fn write_value(&self, buf: &mut Vec<u8>) {
        put_otel_value(buf, &self.value)
    }
}

/// The full OTLP `AnyValue` model, for attributes the `opentelemetry` API cannot express.
#[derive(Clone, Debug, PartialEq)]
pub enum AnyValue {
    /// `string_value`.
    String(String),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `array_value` (elements may differ in type).
    Array(Vec<AnyValue>),
    /// `kvlist_value`.
    KvList(Vec<AnyKeyValue>),
    /// `bytes_value`.
    Bytes(Vec<u8>),
}

/// A key and an [`AnyValue`].
#[derive(Clone, Debug, PartialEq)]
pub struct AnyKeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: AnyValue,
}

impl AnyValue {
    fn body_len(&self) -> usize {
        match self {
            AnyValue::String(s) => len_field(s.len()),
            AnyValue::Bool(_) => 2,
            AnyValue::Int(i) => 1 + varint_len(*i as u64),
            AnyValue::Double(_) => 9,
            AnyValue::Array(v) => len_field(v.iter().map(|x| len_field(x.body_len())).sum()),
            AnyValue::KvList(v) => len_field(attrs_len(v)),
            AnyValue::Bytes(b) => len_field(b.len()),
        }
    }

    fn write(&self, buf: &mut Vec<u8>) {
        match self {
            AnyValue::String(s) => put_bytes_field(buf, 1, s.as_bytes()),
            AnyValue::Bool(b) => {
                put_tag(buf, 2, VARINT);
                buf.push(u8::from(*b));
            }
            AnyValue::Int(i) => {
                put_tag(buf, 3, VARINT);
                put_varint(buf, *i as u64);
            }
            AnyValue::Double(f) => {
                put_tag(buf, 4, I64);
                buf.extend_from_slice(&f.to_le_bytes());
            }
            AnyValue::Array(v) => {
                put_len_field(buf, 5, v.iter().map(|x| len_field(x.body_len())).sum());
                for x in v {
                    put_len_field(buf, 1, x.body_len());
                    x.write(buf);
                }
            }
            AnyValue::KvList(v) => {
                put_len_field(buf, 6, attrs_len(v));
                put_attrs(buf, 1, v);
            }
            AnyValue::Bytes(b) => put_bytes_field(buf, 7, b),
        }
    }
}

impl OtlpAttribute for AnyKeyValue {
    fn key(&self) -> &str {
        &self.key
    }
    fn value_len(&self) -> usize {
        self.value.body_len()
    }
    fn write_value(&self, buf: &mut Vec<u8>) {
        self.value.write(buf)
    }
}

fn kind_number(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn status_parts(status: &Status) -> (&str, u64) {
    match status {
        Status::Unset => ("", 0),
        Status::Ok => ("", 1),
        Status::Error { description } => (description.as_ref(), 2),
    }
}

fn status_len(status: &Status) -> usize {
    let (msg, code) = status_parts(status);
    str_field_len(msg) + if code == 0 { 0 } else { 2 }
}

fn event_len<A: OtlpAttribute>(e: &EventData<A>) -> usize {
    fixed64_field_len(e.time_unix_nano)
        + str_field_len(&e.name)
        + attrs_len(&e.attributes)
        + u32_field_len(e.dropped_attributes_count)
}

fn link_flags(l: &LinkData<impl OtlpAttribute>) -> u32 {
    l.context.trace_flags as u32 | FLAG_HAS_IS_REMOTE | if l.context.is_remote { FLAG_IS_REMOTE } else { 0 }
}

fn link_len<A: OtlpAttribute>(l: &LinkData<A>) -> usize {
    18 + 10
        + str_field_len(l.trace_state.as_str())
        + attrs_len(&l.attributes)
        + u32_field_len(l.dropped_attributes_count)
        + 5
}

/// The `Span.flags` value for a span record.
pub fn span_flags<A>(s: &SpanData<A>) -> u32 {
    s.trace_flags as u32 | FLAG_HAS_IS_REMOTE | if s.parent_is_remote { FLAG_IS_REMOTE } else { 0 }
}

fn span_len<A: OtlpAttribute>(s: &SpanData<A>) -> usize {
    let status = status_len(&s.status);
    18 + 10
        + str_field_len(s.trace_state.as_str())
        + if s.parent_span_id != SpanId::INVALID { 10 } else { 0 }
        + str_field_len(&s.name)
        + 2
        + fixed64_field_len(s.start_time_unix_nano)
        + fixed64_field_len(s.end_time_unix_nano)
        + attrs_len(&s.attributes)
        + u32_field_len(s.dropped_attributes_count)
        + s.events.iter().map(|e| len_field(event_len(e))).sum::<usize>()
        + u32_field_len(s.dropped_events_count)
        + s.links.iter().map(|l| len_field(link_len(l))).sum::<usize>()
        + u32_field_len(s.dropped_links_count)
        + if status > 0 || !matches!(s.status, Status::Unset) {
            len_field(status)
        } else {
            0
        }
        + 6
}

fn put_span<A: OtlpAttribute>(buf: &mut Vec<u8>, s: &SpanData<A>) {
    put_bytes_field(buf, 1, &s.trace_id.to_bytes());
    put_bytes_field(buf, 2, &s.span_id.to_bytes());
    put_str_field(buf, 3, s.trace_state.as_str());
    if s.parent_span_id != SpanId::INVALID {
        put_bytes_field(buf, 4, &s.parent_span_id.to_bytes());
    }
    put_str_field(buf, 5, &s.name);
    put_tag(buf, 6, VARINT);
    put_varint(buf, kind_number(&s.kind));
    put_fixed64_field(buf, 7, s.start_time_unix_nano);
    put_fixed64_field(buf, 8, s.end_time_unix_nano);
    put_attrs(buf, 9, &s.attributes);
    put_u32_field(buf, 10, s.dropped_attributes_count);
    for e in &s.events {
        put_len_field(buf, 11, event_len(e));
        put_fixed64_field(buf, 1, e.time_unix_nano);
        put_str_field(buf, 2, &e.name);
        put_attrs(buf, 3, &e.attributes);
        put_u32_field(buf, 4, e.dropped_attributes_count);
    }
    put_u32_field(buf, 12, s.dropped_events_count);
    for l in &s.links {
        put_len_field(buf, 13, link_len(l));
        put_bytes_field(buf, 1, &l.context.trace_id.to_bytes());
        put_bytes_field(buf, 2, &l.context.span_id.to_bytes());
        put_str_field(buf, 3, l.trace_state.as_str());
        put_attrs(buf, 4, &l.attributes);
        put_u32_field(buf, 5, l.dropped_attributes_count);
        put_tag(buf, 6, I32);
        buf.extend_from_slice(&link_flags(l).to_le_bytes());
    }
    put_u32_field(buf, 14, s.dropped_links_count);
    if !matches!(s.status, Status::Unset) {
        let (msg, code) = status_parts(&s.status);
        put_len_field(buf, 15, status_len(&s.status));
        put_str_field(buf, 2, msg);
        if code != 0 {
            put_tag(buf, 3, VARINT);
            put_varint(buf, code);
        }
    }
    put_tag(buf, 16, I32);
    buf.extend_from_slice(&span_flags(s).to_le_bytes());
}

fn scope_len(scope: &InstrumentationScope) -> usize {
    str_field_len(scope.name())
        + str_field_len(scope.version().unwrap_or(""))
        + scope.attributes().map(|a| len_field(kv_len(a))).sum::<usize>()
}

fn put_scope(buf: &mut Vec<u8>, scope: &InstrumentationScope) {
    put_str_field(buf, 1, scope.name());
    put_str_field(buf, 2, scope.version().unwrap_or(""));
    for a in scope.attributes() {
        put_kv(buf, 3, a);
    }
}

fn resource_len(r: &Resource) -> usize {
    attrs_len(&r.attributes) + u32_field_len(r.dropped_attributes_count)
}

/// Encodes `ExportTraceServiceRequest` messages, reusing its scratch space across batches.
#[derive(Debug, Default)]
pub struct Encoder {
    span_lens: Vec<usize>,
    scope_order: Vec<u32>,
}

impl Encoder {
    /// Returns an encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the request for `spans` to `buf`: one `ResourceSpans`, one `ScopeSpans` per
    /// distinct `span.scope` (an index into `scopes`) in order of first appearance, spans in
    /// batch order. A span whose scope index is out of range is encoded under an empty scope.
    pub fn encode<A: OtlpAttribute, S: AsRef<SpanData<A>>>(
        &mut self,
        buf: &mut Vec<u8>,
        resource: &Resource,
        scopes: &[InstrumentationScope],
        spans: &[S],
    ) {
        static EMPTY_SCOPE: std::sync::OnceLock<InstrumentationScope> = std::sync::OnceLock::new();
        let scope_of = |i: u32| -> &InstrumentationScope {
            scopes
                .get(i as usize)
                .unwrap_or_else(|| EMPTY_SCOPE.get_or_init(|| InstrumentationScope::builder("").build()))
        };
        self.span_lens.clear();
        self.scope_order.clear();
        for s in spans {
            let s = s.as_ref();
            self.span_lens.push(span_len(s));
            if !self.scope_order.contains(&s.scope) {
                self.scope_order.push(s.scope);
            }
        }
        let scope_spans_len = |scope_idx: u32, span_lens: &[usize]| -> usize {
            let scope = scope_of(scope_idx);
            len_field(scope_len(scope))
                + spans
                    .iter()
                    .zip(span_lens)
                    .filter(|(s, _)| s.as_ref().scope == scope_idx)
                    .map(|(_, l)| len_field(*l))
                    .sum::<usize>()
                + str_field_len(scope.schema_url().unwrap_or(""))
        };
        let rs_len = len_field(resource_len(resource))
            + self
                .scope_order
                .iter()
                .map(|i| len_field(scope_spans_len(*i, &self.span_lens)))
                .sum::<usize>()
            + str_field_len(resource.schema_url.as_deref().unwrap_or(""));
        buf.reserve(len_field(rs_len));

        put_len_field(buf, 1, rs_len);
        put_len_field(buf, 1, resource_len(resource));
        put_attrs(buf, 1, &resource.attributes);
        put_u32_field(buf, 2, resource.dropped_attributes_count);
        for &scope_idx in &self.scope_order {
            let scope = scope_of(scope_idx);
            put_len_field(buf, 2, scope_spans_len(scope_idx, &self.span_lens));
            put_len_field(buf, 1, scope_len(scope));
            put_scope(buf, scope);
            for (s, l) in spans.iter().zip(&self.span_lens) {
                let s = s.as_ref();
                if s.scope == scope_idx {
                    put_len_field(buf, 2, *l);
                    put_span(buf, s);
                }
            }
            put_str_field(buf, 3, scope.schema_url().unwrap_or(""));
        }
        put_str_field(buf, 3, resource.schema_url.as_deref().unwrap_or(""));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        for (v, n) in [(0u64, 1), (127, 1), (128, 2), (16383, 2), (16384, 3), (u64::MAX, 10)] {
            assert_eq!(varint_len(v), n);
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), n);
        }
    }

    #[test]
    fn lengths_match_bytes_written() {
        let mut s: SpanData = SpanData::new(1u128.into(), 2u64.into(), "op");
        s.attributes = vec![
            KeyValue::new("s", "x".repeat(200)),
            KeyValue::new("i", -1),
            KeyValue::new("a", Value::Array(vec![1i64, 2].into())),
        ];
        s.status = Status::error("bad");
        s.start_time_unix_nano = 5;
        let mut buf = Vec::new();
        put_span(&mut buf, &s);
        assert_eq!(buf.len(), span_len(&s));
    }
}
