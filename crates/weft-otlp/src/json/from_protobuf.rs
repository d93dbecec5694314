//! Protobuf `TracesData` straight to OTLP/JSON text, with no message tree and no JSON tree.
//!
//! [`write_resource_spans_json`] walks the wire format and writes text as it goes. Decoding into
//! prost messages and then rendering a `serde_json::Value` took about 35x the output (one span
//! with 1.36M attributes, 62 MiB of JSON, needed 2.2 GiB); this path needs the output buffer plus
//! a small constant (`tests/json_memory.rs` measures it).
//!
//! # Design constraints
//!
//! - **The tree renderer's text.** For any bytes prost decodes as `TracesData`, each element is
//!   byte for byte what `serde_json` writes for the matching element of
//!   [`resource_spans_to_json`](super::resource_spans_to_json) of the decoded message: the same
//!   omitted defaults, hex IDs, decimal-string 64-bit integers, numeric enums, base64 bytes,
//!   `"NaN"`/`"Infinity"` doubles, and keys in alphabetical order, the order `serde_json::Map`
//!   (a `BTreeMap`) keeps them in.
//! - **Accepts exactly what prost accepts.** Bytes that `TracesData::decode` rejects are an error
//!   here too, and nothing is written then. So fields may come in any order; unknown fields,
//!   groups included, are skipped; a singular scalar, string or bytes field that appears twice
//!   keeps its last value; every string, overridden ones included, must be UTF-8; varints are at
//!   most 10 bytes and do not overflow; and messages nest at most [`RECURSION_LIMIT`] deep, which
//!   also bounds the recursion here.
//! - **Repeated singular messages merge, without copying.** Prost merges a singular message field
//!   that appears more than once (`resource`, `scope`, `status`, a key/value pair's `value`, and
//!   an `AnyValue`'s last run of `arrayValue` or `kvlistValue`): the result is the message whose
//!   fields are those of all the occurrences in order. A [`Body`] is such a message as it lies in
//!   the input, walked occurrence by occurrence, so merging allocates nothing.
//! - **No tree, nothing per attribute.** The bytes are walked three times: once to check them as
//!   prost would, once rendering into a counter so that the output is reserved once at its exact
//!   size, and once rendering into the output. Each message is read in a few passes over its
//!   fields: one for its singular fields (the last occurrence wins) and one per repeated field,
//!   so that an object's keys come out in order without buffering any of them.

mod read;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use std::io;

use read::{Body, Field, Input, Occurrences, check, child, each};

/// Prost's recursion limit (`prost::RECURSION_LIMIT`, private there, unless prost is built with
/// `no-recursion-limit`): a message nested deeper than this below the `TracesData` is refused.
const RECURSION_LIMIT: u32 = 100;

/// Appends the OTLP/JSON of every `ResourceSpans` in the protobuf `TracesData` `pb` to `out`,
/// comma-separated, without the enclosing brackets. `ExportTraceServiceRequest` has the same
/// wire form (field 1, repeated `ResourceSpans`) and is accepted as well.
///
/// `first` says whether no element has been written yet: a comma precedes each element unless it
/// is set, and it is cleared once an element is written. The caller writes `[`, calls this once
/// per piece of a trace with the same flag, and writes `]`.
///
/// Each element is the text `serde_json` writes for the matching element of
/// [`resource_spans_to_json`](super::resource_spans_to_json) applied to the message prost decodes
/// from `pb` (see the module docs). Bytes that prost does not decode as `TracesData` give an
/// error; `out` and `first` are then left as they were. A singular message field that appears
/// more than once is merged as prost merges it, not refused.
///
/// Allocates nothing but the growth of `out`, which is reserved once at the exact size written.
pub fn write_resource_spans_json(pb: &[u8], first: &mut bool, out: &mut Vec<u8>) -> Result<(), ProtobufError> {
    let input = Input { pb };
    check(input, Msg::TracesData, pb, RECURSION_LIMIT)?;
    let mut count = Count(0);
    Render { input, out: &mut count }.traces_data(&mut { *first })?;
    out.reserve(count.0);
    let (len, was_first) = (out.len(), *first);
    let written = Render { input, out: &mut *out }.traces_data(first);
    match written {
        Ok(()) => debug_assert_eq!(out.len() - len, count.0, "the counting render measured the output"),
        Err(_) => {
            out.truncate(len);
            *first = was_first;
        }
    }
    written
}

/// Bytes that prost would not decode as `TracesData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid protobuf TracesData at byte {at}: {problem}")]
pub struct ProtobufError {
    /// Offset in the input of the field (or varint) at fault.
    pub at: usize,
    pub problem: ProtobufProblem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufProblem {
    #[error("truncated varint, or one longer than 10 bytes or above 64 bits")]
    Varint,
    #[error("field number 0, or a key above 32 bits")]
    Key,
    #[error("invalid wire type {0}")]
    WireType(u8),
    #[error("field {field} has wire type {found}, expected {expected}")]
    Mismatch { field: u32, expected: u8, found: u8 },
    #[error("field runs past the end of its message")]
    Overrun,
    #[error("end of group without a matching start")]
    EndGroup,
    #[error("string field {0} is not valid UTF-8")]
    Utf8(u32),
    #[error("messages nested deeper than {RECURSION_LIMIT} levels")]
    TooDeep,
}

// ---- the schema ----

/// The messages of a `TracesData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Msg {
    TracesData,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    Status,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
}

/// How a field is encoded, as far as checking it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `uint32`, `int32`, `int64`, `bool` and enums.
    Varint,
    Fixed32,
    /// `fixed64` and `double`.
    Fixed64,
    Str,
    Bytes,
    Message(Msg),
}

impl Msg {
    /// The type of field `number`, or `None` for a field the vendored protos (`proto/`) do not
    /// have. Reserved numbers (`ResourceSpans` 1000, `Status` 1) are unknown fields.
    pub(crate) fn field(self, number: u32) -> Option<Ty> {
        use Msg as M;
        use Ty::*;
        Some(match (self, number) {
            (M::TracesData, 1) => Message(M::ResourceSpans),
            (M::ResourceSpans, 1) => Message(M::Resource),
            (M::ResourceSpans, 2) => Message(M::ScopeSpans),
            (M::ResourceSpans, 3) => Str,
            (M::Resource, 1) => Message(M::KeyValue),
            (M::Resource, 2) => Varint,
            (M::ScopeSpans, 1) => Message(M::Scope),
            (M::ScopeSpans, 2) => Message(M::Span),
            (M::ScopeSpans, 3) => Str,
            (M::Scope, 1 | 2) => Str,
            (M::Scope, 3) => Message(M::KeyValue),
            (M::Scope, 4) => Varint,
            (M::Span, 1 | 2 | 4) => Bytes,
            (M::Span, 3 | 5) => Str,
            (M::Span, 6 | 10 | 12 | 14) => Varint,
            (M::Span, 7 | 8) => Fixed64,
            (M::Span, 9) => Message(M::KeyValue),
            (M::Span, 11) => Message(M::Event),
            (M::Span, 13) => Message(M::Link),
            (M::Span, 15) => Message(M::Status),
            (M::Span, 16) => Fixed32,
            (M::Event, 1) => Fixed64,
            (M::Event, 2) => Str,
            (M::Event, 3) => Message(M::KeyValue),
            (M::Event, 4) => Varint,
            (M::Link, 1 | 2) => Bytes,
            (M::Link, 3) => Str,
            (M::Link, 4) => Message(M::KeyValue),
            (M::Link, 5) => Varint,
            (M::Link, 6) => Fixed32,
            (M::Status, 2) => Str,
            (M::Status, 3) => Varint,
            (M::KeyValue, 1) => Str,
            (M::KeyValue, 2) => Message(M::AnyValue),
            (M::AnyValue, 1) => Str,
            (M::AnyValue, 2 | 3) => Varint,
            (M::AnyValue, 4) => Fixed64,
            (M::AnyValue, 5) => Message(M::ArrayValue),
            (M::AnyValue, 6) => Message(M::KeyValueList),
            (M::AnyValue, 7) => Bytes,
            (M::ArrayValue, 1) => Message(M::AnyValue),
            (M::KeyValueList, 1) => Message(M::KeyValue),
            _ => return None,
        })
    }
}

// ---- writing JSON ----

/// Where the text goes: the output, or a counter that measures it first.
trait Sink: io::Write {
    fn put(&mut self, b: &[u8]);
    /// Lowercase hex, as `hex::encode`.
    fn hex(&mut self, b: &[u8]);
    /// Standard base64 with padding, as `STANDARD.encode`.
    fn base64(&mut self, b: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }

    fn hex(&mut self, b: &[u8]) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        self.reserve(2 * b.len());
        for &x in b {
            self.push(DIGITS[usize::from(x >> 4)]);
            self.push(DIGITS[usize::from(x & 15)]);
        }
    }

    fn base64(&mut self, b: &[u8]) {
        let at = self.len();
        self.resize(at + base64_len(b.len()), 0);
        // The slice is exactly as long as the encoding, so this cannot fail.
        let n = B64.encode_slice(b, &mut self[at..]).unwrap_or(0);
        self.truncate(at + n);
    }
}

fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Counts the bytes a render writes.
struct Count(usize);

impl io::Write for Count {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for Count {
    fn put(&mut self, b: &[u8]) {
        self.0 += b.len();
    }

    fn hex(&mut self, b: &[u8]) {
        self.0 += 2 * b.len();
    }

    fn base64(&mut self, b: &[u8]) {
        self.0 += base64_len(b.len());
    }
}

/// Renders checked input. Its errors cannot happen after [`check`] succeeded; they are returned
/// rather than panicking all the same.
struct Render<'a, 'o, S> {
    input: Input<'a>,
    out: &'o mut S,
}

type Element<R> = for<'r, 'b> fn(&'r mut R, &'b Body<'b>, u32) -> Result<(), ProtobufError>;

impl<S: Sink> Render<'_, '_, S> {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.out.put(b);
    }

    /// Writes a string or number as `serde_json` does.
    #[inline]
    fn json<T: serde::Serialize + ?Sized>(&mut self, v: &T) {
        // A string or a number serializes into memory without error.
        let _ = serde_json::to_writer(&mut *self.out, v);
    }

    /// Writes `"name":`, preceded by a comma unless it is the object's first key.
    #[inline]
    fn key(&mut self, first: &mut bool, name: &str) {
        if !*first {
            self.put(b",");
        }
        *first = false;
        self.put(b"\"");
        self.put(name.as_bytes());
        self.put(b"\":");
    }

    /// Writes a 64-bit integer as a decimal string.
    fn quoted<T: serde::Serialize>(&mut self, v: T) {
        self.put(b"\"");
        self.json(&v);
        self.put(b"\"");
    }

    fn hex(&mut self, b: &[u8]) {
        self.put(b"\"");
        self.out.hex(b);
        self.put(b"\"");
    }

    /// Writes the elements of repeated message field `number` of `body` as an array.
    fn array(&mut self, body: &Body<'_>, ctx: u32, number: u32, element: Element<Self>) -> Result<(), ProtobufError> {
        let input = self.input;
        let mut first = true;
        self.put(b"[");
        each(input, body, ctx, &mut |f| {
            if f.number == number {
                if !first {
                    self.put(b",");
                }
                first = false;
                element(self, &Body::One(f.bytes()?), child(ctx, f.at)?)?;
            }
            Ok(())
        })?;
        self.put(b"]");
        Ok(())
    }

    fn traces_data(&mut self, first: &mut bool) -> Result<(), ProtobufError> {
        let input = self.input;
        let ctx = RECURSION_LIMIT;
        each(input, &Body::One(input.pb), ctx, &mut |f| {
            if f.number == 1 {
                if !*first {
                    self.put(b",");
                }
                *first = false;
                self.resource_spans(&Body::One(f.bytes()?), child(ctx, f.at)?)?;
            }
            Ok(())
        })
    }

    fn resource_spans(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let mut resource = Occurrences::default();
        let mut schema_url = "";
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => resource.add(&f)?,
                3 => schema_url = f.str()?,
                _ => {}
            }
            Ok(())
        })?;
        let first = &mut true;
        self.put(b"{");
        if let Some(r) = resource.body(body, 1) {
            self.key(first, "resource");
            self.resource(&r, child(ctx, resource.at)?)?;
        }
        if !schema_url.is_empty() {
            self.key(first, "schemaUrl");
            self.json(schema_url);
        }
        self.key(first, "scopeSpans");
        self.array(body, ctx, 2, Self::scope_spans)?;
        self.put(b"}");
        Ok(())
    }

    fn resource(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let mut dropped = 0;
        each(self.input, body, ctx, &mut |f| {
            if f.number == 2 {
                dropped = f.varint()? as u32;
            }
            Ok(())
        })?;
        self.put(b"{\"attributes\":");
        self.array(body, ctx, 1, Self::key_value)?;
        if dropped > 0 {
            self.put(b",\"droppedAttributesCount\":");
            self.json(&dropped);
        }
        self.put(b"}");
        Ok(())
    }

    fn scope_spans(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let mut scope = Occurrences::default();
        let mut schema_url = "";
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => scope.add(&f)?,
                3 => schema_url = f.str()?,
                _ => {}
            }
            Ok(())
        })?;
        let first = &mut true;
        self.put(b"{");
        if !schema_url.is_empty() {
            self.key(first, "schemaUrl");
            self.json(schema_url);
        }
        if let Some(s) = scope.body(body, 1) {
            self.key(first, "scope");
            self.scope(&s, child(ctx, scope.at)?)?;
        }
        self.key(first, "spans");
        self.array(body, ctx, 2, Self::span)?;
        self.put(b"}");
        Ok(())
    }

    /// `"attributes"` (the repeated `KeyValue` field `field`, when present) and
    /// `"droppedAttributesCount"` (when not 0), as scopes, events and links write them.
    fn attributes_and_dropped(
        &mut self,
        first: &mut bool,
        body: &Body<'_>,
        ctx: u32,
        field: u32,
        present: bool,
        dropped: u32,
    ) -> Result<(), ProtobufError> {
        if present {
            self.key(first, "attributes");
            self.array(body, ctx, field, Self::key_value)?;
        }
        if dropped > 0 {
            self.key(first, "droppedAttributesCount");
            self.json(&dropped);
        }
        Ok(())
    }

    fn scope(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let (mut name, mut version, mut attributes, mut dropped) = ("", "", false, 0);
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => name = f.str()?,
                2 => version = f.str()?,
                3 => attributes = true,
                4 => dropped = f.varint()? as u32,
                _ => {}
            }
            Ok(())
        })?;
        let first = &mut true;
        self.put(b"{");
        self.attributes_and_dropped(first, body, ctx, 3, attributes, dropped)?;
        self.key(first, "name");
        self.json(name);
        if !version.is_empty() {
            self.key(first, "version");
            self.json(version);
        }
        self.put(b"}");
        Ok(())
    }

    fn span(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let mut s = SpanFields::default();
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => s.trace_id = f.bytes()?,
                2 => s.span_id = f.bytes()?,
                3 => s.trace_state = f.str()?,
                4 => s.parent_span_id = f.bytes()?,
                5 => s.name = f.str()?,
                6 => s.kind = f.varint()? as i32,
                7 => s.start = f.fixed64()?,
                8 => s.end = f.fixed64()?,
                9 => s.attributes = true,
                10 => s.dropped_attributes = f.varint()? as u32,
                11 => s.events = true,
                12 => s.dropped_events = f.varint()? as u32,
                13 => s.links = true,
                14 => s.dropped_links = f.varint()? as u32,
                15 => s.status.add(&f)?,
                16 => s.flags = f.fixed32()?,
                _ => {}
            }
            Ok(())
        })?;
        // Keys in alphabetical order.
        let first = &mut true;
        self.put(b"{");
        if s.attributes {
            self.key(first, "attributes");
            self.array(body, ctx, 9, Self::key_value)?;
        }
        for (name, n) in [
            ("droppedAttributesCount", s.dropped_attributes),
            ("droppedEventsCount", s.dropped_events),
            ("droppedLinksCount", s.dropped_links),
        ] {
            if n > 0 {
                self.key(first, name);
                self.json(&n);
            }
        }
        self.key(first, "endTimeUnixNano");
        self.quoted(s.end);
        if s.events {
            self.key(first, "events");
            self.array(body, ctx, 11, Self::event)?;
        }
        if s.flags != 0 {
            self.key(first, "flags");
            self.json(&s.flags);
        }
        self.key(first, "kind");
        self.json(&s.kind);
        if s.links {
            self.key(first, "links");
            self.array(body, ctx, 13, Self::link)?;
        }
        self.key(first, "name");
        self.json(s.name);
        if !s.parent_span_id.is_empty() {
            self.key(first, "parentSpanId");
            self.hex(s.parent_span_id);
        }
        self.key(first, "spanId");
        self.hex(s.span_id);
        self.key(first, "startTimeUnixNano");
        self.quoted(s.start);
        self.key(first, "status");
        match s.status.body(body, 15) {
            Some(st) => self.status(&st, child(ctx, s.status.at)?)?,
            None => self.put(b"{}"),
        }
        self.key(first, "traceId");
        self.hex(s.trace_id);
        if !s.trace_state.is_empty() {
            self.key(first, "traceState");
            self.json(s.trace_state);
        }
        self.put(b"}");
        Ok(())
    }

    fn event(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let (mut time, mut name, mut attributes, mut dropped) = (0, "", false, 0);
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => time = f.fixed64()?,
                2 => name = f.str()?,
                3 => attributes = true,
                4 => dropped = f.varint()? as u32,
                _ => {}
            }
            Ok(())
        })?;
        let first = &mut true;
        self.put(b"{");
        self.attributes_and_dropped(first, body, ctx, 3, attributes, dropped)?;
        self.key(first, "name");
        self.json(name);
        self.key(first, "timeUnixNano");
        self.quoted(time);
        self.put(b"}");
        Ok(())
    }

    fn link(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let (mut trace_id, mut span_id, mut trace_state): (&[u8], &[u8], &str) = (b"", b"", "");
        let (mut attributes, mut dropped, mut flags) = (false, 0, 0);
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => trace_id = f.bytes()?,
                2 => span_id = f.bytes()?,
                3 => trace_state = f.str()?,
                4 => attributes = true,
                5 => dropped = f.varint()? as u32,
                6 => flags = f.fixed32()?,
                _ => {}
            }
            Ok(())
        })?;
        let first = &mut true;
        self.put(b"{");
        self.attributes_and_dropped(first, body, ctx, 4, attributes, dropped)?;
        if flags != 0 {
            self.key(first, "flags");
            self.json(&flags);
        }
        self.key(first, "spanId");
        self.hex(span_id);
        self.key(first, "traceId");
        self.hex(trace_id);
        if !trace_state.is_empty() {
            self.key(first, "traceState");
            self.json(trace_state);
        }
        self.put(b"}");
        Ok(())
    }

    fn status(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let (mut message, mut code) = ("", 0);
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                2 => message = f.str()?,
                3 => code = f.varint()? as i32,
                _ => {}
            }
            Ok(())
        })?;
        let first = &mut true;
        self.put(b"{");
        if code != 0 {
            self.key(first, "code");
            self.json(&code);
        }
        if !message.is_empty() {
            self.key(first, "message");
            self.json(message);
        }
        self.put(b"}");
        Ok(())
    }

    fn key_value(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        let mut key = "";
        let mut value = Occurrences::default();
        each(self.input, body, ctx, &mut |f| {
            match f.number {
                1 => key = f.str()?,
                2 => value.add(&f)?,
                _ => {}
            }
            Ok(())
        })?;
        self.put(b"{\"key\":");
        self.json(key);
        self.put(b",\"value\":");
        match value.body(body, 2) {
            Some(v) => self.any_value(&v, child(ctx, value.at)?)?,
            None => self.put(b"{}"),
        }
        self.put(b"}");
        Ok(())
    }

    fn any_value(&mut self, body: &Body<'_>, ctx: u32) -> Result<(), ProtobufError> {
        // The last member of the oneof wins; consecutive occurrences of a message member merge,
        // so for those the run's start (a field index) and length are kept.
        let mut i = 0;
        let mut last: Option<(Field<'_>, usize, usize)> = None;
        each(self.input, body, ctx, &mut |f| {
            if (1..=7).contains(&f.number) {
                match &mut last {
                    Some((l, _, run)) if l.number == f.number => {
                        *l = f;
                        *run += 1;
                    }
                    _ => last = Some((f, i, 1)),
                }
            }
            i += 1;
            Ok(())
        })?;
        let Some((f, start, run)) = last else {
            self.put(b"{}");
            return Ok(());
        };
        match f.number {
            1 => {
                self.put(b"{\"stringValue\":");
                self.json(f.str()?);
            }
            2 => self.put(if f.varint()? != 0 {
                b"{\"boolValue\":true"
            } else {
                b"{\"boolValue\":false"
            }),
            3 => {
                self.put(b"{\"intValue\":");
                self.quoted(f.varint()? as i64);
            }
            4 => {
                self.put(b"{\"doubleValue\":");
                let d = f64::from_bits(f.fixed64()?);
                if d.is_finite() {
                    self.json(&d);
                } else if d.is_nan() {
                    self.put(b"\"NaN\"");
                } else if d > 0.0 {
                    self.put(b"\"Infinity\"");
                } else {
                    self.put(b"\"-Infinity\"");
                }
            }
            5 | 6 => {
                let inner = if run == 1 {
                    Body::One(f.bytes()?)
                } else {
                    Body::Merged {
                        outer: body,
                        field: f.number,
                        skip: start,
                    }
                };
                let ctx = child(ctx, f.at)?;
                if f.number == 5 {
                    self.put(b"{\"arrayValue\":{\"values\":");
                    self.array(&inner, ctx, 1, Self::any_value)?;
                } else {
                    self.put(b"{\"kvlistValue\":{\"values\":");
                    self.array(&inner, ctx, 1, Self::key_value)?;
                }
                self.put(b"}");
            }
            _ => {
                self.put(b"{\"bytesValue\":\"");
                self.out.base64(f.bytes()?);
                self.put(b"\"");
            }
        }
        self.put(b"}");
        Ok(())
    }
}

/// A span's singular fields, the last occurrence of each.
#[derive(Default)]
struct SpanFields<'a> {
    trace_id: &'a [u8],
    span_id: &'a [u8],
    trace_state: &'a str,
    parent_span_id: &'a [u8],
    name: &'a str,
    kind: i32,
    start: u64,
    end: u64,
    attributes: bool,
    dropped_attributes: u32,
    events: bool,
    dropped_events: u32,
    links: bool,
    dropped_links: u32,
    status: Occurrences<'a>,
    flags: u32,
}

#[cfg(test)]
mod tests;
