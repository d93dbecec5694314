//! OTLP/JSON straight to protobuf bytes, with no JSON tree and no message tree.
//!
//! [`request_json_to_protobuf`] walks the document with serde_json's streaming deserializer
//! and writes wire bytes as it visits. Building a `serde_json::Value` tree and then a prost tree
//! took about 35x the body's size (a 63 MiB body with 1.4M attributes needed 2.2 GiB); this path
//! needs the output buffer plus a small constant (`tests/json_memory.rs` measures it).
//!
//! # Design constraints
//!
//! It must accept and reject exactly what [`super::request_from_json`] does, and report the same
//! error. That decoder reads a whole object before looking at any field, so:
//!
//! - **A key can be overridden later in its object.** The last occurrence of a key wins, a
//!   camelCase key beats its snake_case alias wherever the two appear, `null` counts as absent,
//!   and of an `AnyValue`'s members only the first present one in the order string, bool, int,
//!   double, array, kvlist, bytes counts. A field's bytes are written where its key appears and
//!   their range is remembered; ranges that lose are cut out when the object ends.
//! - **Errors wait for the end of their object.** A value that is invalid may still be
//!   overridden, so each field's error is kept with its range, and when the object ends the
//!   winning fields are checked in the order `request_from_json` reads them. The first error
//!   found wins, as there. In an array, the first invalid element wins and the rest is skipped.
//! - **Every value is read to its end**, with `deserialize_any` (never `IgnoredAny`, which skips
//!   the recursion limit, number range checks and UTF-8 checks), so a syntax error anywhere in the
//!   body still turns into the same "invalid JSON" error as parsing the whole tree first.
//!
//! # Layout of the output
//!
//! One buffer, reserved at the body's size (protobuf is smaller than its OTLP/JSON in all but
//! contrived inputs). A nested message is written after a one-byte length placeholder; when it
//! ends, its length is filled in, and the message moves right by the length's extra bytes if it
//! is 128 bytes or longer. Each byte moves at most once per enclosing message, and never more
//! than about 40 levels deep (attribute nesting is capped at [`MAX_DEPTH`]).

use super::{JsonError, KINDS, STATUS_CODES, err};
use crate::request::MAX_DEPTH;
use crate::wire::{put_bytes, put_fixed64, put_tag, put_varint_field, varint_len};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::ops::Range;

/// Converts an OTLP/JSON `ExportTraceServiceRequest` straight to its protobuf encoding.
///
/// Accepts exactly the bodies [`request_from_json`](super::request_from_json) accepts, and the
/// bytes decode to the message it returns; a body it rejects gives the same [`JsonError`] (same
/// path and problem). No JSON or message tree is built: peak memory is the output buffer
/// (reserved at `body.len()`) plus a small constant.
///
/// Duplicate keys: the last occurrence in an object wins, as in `request_from_json` (serde_json
/// map semantics), and an overridden occurrence is ignored even if it is invalid. A camelCase
/// key beats its snake_case alias wherever either appears, and a `null` value counts as absent.
///
/// Fields come out in input order. Fields holding their default value are omitted as prost omits
/// them (the members of `AnyValue.value` are always written), so the output is exactly as long
/// as prost's encoding of the decoded message.
pub fn request_json_to_protobuf(body: &[u8]) -> Result<Vec<u8>, JsonError> {
    let mut tx = Tx {
        out: Vec::with_capacity(body.len()),
        path: Vec::new(),
        seen: Vec::new(),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let root = Val {
        tx: &mut tx,
        spec: Spec::Root,
        element: true,
    };
    let got = root
        .deserialize(&mut de)
        .and_then(|got| de.end().map(|()| got))
        .map_err(|e| err("$", format!("invalid JSON: {e}")))?;
    match got {
        Got::Bad(e) => Err(*e),
        Got::Null | Got::Done => {
            let mut out = tx.out;
            out.shrink_to_fit();
            Ok(out)
        }
    }
}

/// The messages of a request, each with its field table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Msg {
    Request,
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

/// How one JSON value becomes wire bytes. `depth` is the attribute nesting depth as
/// `request_from_json` counts it; in the field tables it is relative to the enclosing message.
#[derive(Clone, Copy)]
enum Spec {
    /// The request itself: an object, written without a tag or length.
    Root,
    /// A string field, omitted when empty.
    Str(u32),
    /// A hex ID of `len` bytes; `required` rejects an empty or missing one.
    Hex {
        field: u32,
        len: usize,
        required: bool,
    },
    /// A `uint32` read as a 64-bit integer and truncated, as `request_from_json` does.
    Uint32(u32),
    Fixed32(u32),
    Fixed64(u32),
    Enum(u32, &'static [&'static str]),
    /// A message field; also an element of a repeated field.
    Message {
        field: u32,
        msg: Msg,
        depth: u32,
    },
    Repeated {
        field: u32,
        msg: Msg,
        depth: u32,
    },
    /// The members of `AnyValue.value`, always written when present.
    AnyString,
    AnyBool,
    AnyInt,
    AnyDouble,
    AnyBytes,
}

impl Spec {
    fn nested_in(self, depth: u32) -> Spec {
        match self {
            Spec::Message { field, msg, depth: d } => Spec::Message {
                field,
                msg,
                depth: depth + d,
            },
            Spec::Repeated { field, msg, depth: d } => Spec::Repeated {
                field,
                msg,
                depth: depth + d,
            },
            other => other,
        }
    }
}

struct Field {
    camel: &'static str,
    snake: &'static str,
    spec: Spec,
}

const fn f(camel: &'static str, snake: &'static str, spec: Spec) -> Field {
    Field { camel, snake, spec }
}

const fn one(field: u32, msg: Msg) -> Spec {
    Spec::Message { field, msg, depth: 0 }
}

const fn many(field: u32, msg: Msg, depth: u32) -> Spec {
    Spec::Repeated { field, msg, depth }
}

const fn hex(field: u32, len: usize, required: bool) -> Spec {
    Spec::Hex { field, len, required }
}

// Field tables, in the order `request_from_json` reads the fields: the first error in this order
// is the one reported. Field numbers are those of the vendored protos.
const REQUEST: &[Field] = &[f("resourceSpans", "resource_spans", many(1, Msg::ResourceSpans, 0))];
const RESOURCE_SPANS: &[Field] = &[
    f("schemaUrl", "schema_url", Spec::Str(3)),
    f("resource", "resource", one(1, Msg::Resource)),
    f("scopeSpans", "scope_spans", many(2, Msg::ScopeSpans, 0)),
];
const RESOURCE: &[Field] = &[
    f("attributes", "attributes", many(1, Msg::KeyValue, 0)),
    f("droppedAttributesCount", "dropped_attributes_count", Spec::Uint32(2)),
];
const SCOPE_SPANS: &[Field] = &[
    f("schemaUrl", "schema_url", Spec::Str(3)),
    f("scope", "scope", one(1, Msg::Scope)),
    f("spans", "spans", many(2, Msg::Span, 0)),
];
const SCOPE: &[Field] = &[
    f("name", "name", Spec::Str(1)),
    f("version", "version", Spec::Str(2)),
    f("attributes", "attributes", many(3, Msg::KeyValue, 0)),
    f("droppedAttributesCount", "dropped_attributes_count", Spec::Uint32(4)),
];
const SPAN: &[Field] = &[
    f("traceId", "trace_id", hex(1, 16, true)),
    f("spanId", "span_id", hex(2, 8, true)),
    f("traceState", "trace_state", Spec::Str(3)),
    f("parentSpanId", "parent_span_id", hex(4, 8, false)),
    f("flags", "flags", Spec::Fixed32(16)),
    f("name", "name", Spec::Str(5)),
    f("kind", "kind", Spec::Enum(6, KINDS)),
    f("startTimeUnixNano", "start_time_unix_nano", Spec::Fixed64(7)),
    f("endTimeUnixNano", "end_time_unix_nano", Spec::Fixed64(8)),
    f("attributes", "attributes", many(9, Msg::KeyValue, 0)),
    f("droppedAttributesCount", "dropped_attributes_count", Spec::Uint32(10)),
    f("droppedEventsCount", "dropped_events_count", Spec::Uint32(12)),
    f("droppedLinksCount", "dropped_links_count", Spec::Uint32(14)),
    f("events", "events", many(11, Msg::Event, 0)),
    f("links", "links", many(13, Msg::Link, 0)),
    f("status", "status", one(15, Msg::Status)),
];
const EVENT: &[Field] = &[
    f("timeUnixNano", "time_unix_nano", Spec::Fixed64(1)),
    f("name", "name", Spec::Str(2)),
    f("attributes", "attributes", many(3, Msg::KeyValue, 0)),
    f("droppedAttributesCount", "dropped_attributes_count", Spec::Uint32(4)),
];
const LINK: &[Field] = &[
    f("traceId", "trace_id", hex(1, 16, true)),
    f("spanId", "span_id", hex(2, 8, true)),
    f("traceState", "trace_state", Spec::Str(3)),
    f("attributes", "attributes", many(4, Msg::KeyValue, 0)),
    f("droppedAttributesCount", "dropped_attributes_count", Spec::Uint32(5)),
    f("flags", "flags", Spec::Fixed32(6)),
];
const STATUS: &[Field] = &[
    f("message", "message", Spec::Str(2)),
    f("code", "code", Spec::Enum(3, STATUS_CODES)),
];
const KEY_VALUE: &[Field] = &[
    f(
        "value",
        "value",
        Spec::Message {
            field: 2,
            msg: Msg::AnyValue,
            depth: 1,
        },
    ),
    f("key", "key", Spec::Str(1)),
];
/// In priority order: the first present member is the value.
const ANY_VALUE: &[Field] = &[
    f("stringValue", "string_value", Spec::AnyString),
    f("boolValue", "bool_value", Spec::AnyBool),
    f("intValue", "int_value", Spec::AnyInt),
    f("doubleValue", "double_value", Spec::AnyDouble),
    f("arrayValue", "array_value", one(5, Msg::ArrayValue)),
    f("kvlistValue", "kvlist_value", one(6, Msg::KeyValueList)),
    f("bytesValue", "bytes_value", Spec::AnyBytes),
];
const ARRAY_VALUE: &[Field] = &[f("values", "values", many(1, Msg::AnyValue, 1))];
const KEY_VALUE_LIST: &[Field] = &[f("values", "values", many(1, Msg::KeyValue, 1))];

impl Msg {
    fn fields(self) -> &'static [Field] {
        match self {
            Msg::Request => REQUEST,
            Msg::ResourceSpans => RESOURCE_SPANS,
            Msg::Resource => RESOURCE,
            Msg::ScopeSpans => SCOPE_SPANS,
            Msg::Scope => SCOPE,
            Msg::Span => SPAN,
            Msg::Event => EVENT,
            Msg::Link => LINK,
            Msg::Status => STATUS,
            Msg::KeyValue => KEY_VALUE,
            Msg::AnyValue => ANY_VALUE,
            Msg::ArrayValue => ARRAY_VALUE,
            Msg::KeyValueList => KEY_VALUE_LIST,
        }
    }
}

/// The transcoder's state, shared by every level of the walk.
struct Tx {
    out: Vec<u8>,
    /// Where the walk is, for error paths.
    path: Vec<Seg>,
    /// The occurrences seen so far in each open object: two slots (camelCase, snake_case) per
    /// field, as a stack so objects allocate nothing once the walk is warm.
    seen: Vec<Option<Occurrence>>,
}

#[derive(Clone, Copy)]
enum Seg {
    Field(&'static str),
    Index(usize),
}

impl Tx {
    fn error(&self, problem: impl Into<String>) -> Box<JsonError> {
        use std::fmt::Write;
        let mut path = String::from("$");
        for seg in &self.path {
            match seg {
                Seg::Field(name) => {
                    path.push('.');
                    path.push_str(name);
                }
                Seg::Index(i) => {
                    let _ = write!(path, "[{i}]");
                }
            }
        }
        Box::new(JsonError {
            path,
            problem: problem.into(),
        })
    }
}

/// What one JSON value produced.
enum Got {
    /// `null`, which counts as absent.
    Null,
    /// Its bytes are written.
    Done,
    /// It is invalid; any bytes it wrote are removed.
    Bad(Box<JsonError>),
}

/// One key's value in an object: the range of bytes it wrote and what it produced.
struct Occurrence {
    range: Range<usize>,
    got: Got,
}

/// Reads one value as `spec` says, writing its bytes at the end of `tx.out`.
struct Val<'t> {
    tx: &'t mut Tx,
    spec: Spec,
    /// An array element or the root, where `null` is an error rather than absent.
    element: bool,
}

impl<'de> DeserializeSeed<'de> for Val<'_> {
    type Value = Got;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Got, D::Error> {
        d.deserialize_any(self)
    }
}

/// A JSON number as `serde_json::Number` holds it, with its conversions.
#[derive(Clone, Copy)]
enum Num {
    U(u64),
    I(i64),
    F(f64),
}

impl Num {
    fn as_u64(self) -> Option<u64> {
        match self {
            Num::U(u) => Some(u),
            Num::I(_) | Num::F(_) => None,
        }
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            Num::U(u) => i64::try_from(u).ok(),
            Num::I(i) => Some(i),
            Num::F(_) => None,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::U(u) => u as f64,
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }
}

impl Val<'_> {
    fn null(&self) -> Got {
        if self.element { self.mismatch() } else { Got::Null }
    }

    fn bad(&self, problem: impl Into<String>) -> Got {
        Got::Bad(self.tx.error(problem))
    }

    /// The error for a value of the wrong JSON type, worded as `request_from_json` words it.
    fn mismatch(&self) -> Got {
        let problem = match self.spec {
            Spec::Message {
                msg: Msg::AnyValue,
                depth,
                ..
            } if depth > MAX_DEPTH => "attribute nesting too deep",
            Spec::Root | Spec::Message { .. } => "expected an object",
            Spec::Repeated { .. } => "expected an array",
            Spec::Str(_) | Spec::Hex { .. } | Spec::AnyString | Spec::AnyBytes => "expected a string",
            Spec::Uint32(_) | Spec::Fixed32(_) | Spec::Fixed64(_) | Spec::AnyInt => "expected an integer",
            Spec::Enum(..) => "expected an enum integer",
            Spec::AnyDouble => "expected a number",
            Spec::AnyBool => "expected a boolean",
        };
        self.bad(problem)
    }

    fn number(self, n: Num) -> Got {
        let out = &mut self.tx.out;
        match self.spec {
            Spec::Uint32(field) | Spec::Fixed32(field) | Spec::Fixed64(field) => match n.as_u64() {
                Some(v) => {
                    put_unsigned(out, self.spec, field, v);
                    Got::Done
                }
                None => self.bad("expected a non-negative integer"),
            },
            Spec::Enum(field, _) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
                Some(v) => {
                    put_enum(out, field, v);
                    Got::Done
                }
                None => self.bad("expected an enum integer"),
            },
            Spec::AnyInt => match n.as_i64() {
                Some(v) => {
                    put_varint_field(out, 3, v as u64);
                    Got::Done
                }
                None => self.bad("expected an integer"),
            },
            Spec::AnyDouble => {
                put_fixed64(out, 4, n.as_f64().to_bits());
                Got::Done
            }
            _ => self.mismatch(),
        }
    }

    fn string(self, s: &str) -> Got {
        let out = &mut self.tx.out;
        match self.spec {
            Spec::Str(field) => {
                if !s.is_empty() {
                    put_bytes(out, field, s.as_bytes());
                }
                Got::Done
            }
            Spec::Hex { field, len, required } => self.hex_id(s, field, len, required),
            Spec::Uint32(field) | Spec::Fixed32(field) | Spec::Fixed64(field) => match s.parse::<u64>() {
                Ok(v) => {
                    put_unsigned(out, self.spec, field, v);
                    Got::Done
                }
                Err(_) => self.bad(format!("expected an integer, got {s:?}")),
            },
            Spec::Enum(field, names) => match names.iter().position(|n| *n == s) {
                Some(i) => {
                    put_enum(out, field, i as i32);
                    Got::Done
                }
                None => self.bad(format!("unknown enum value {s:?}")),
            },
            Spec::AnyString => {
                put_bytes(out, 1, s.as_bytes());
                Got::Done
            }
            Spec::AnyInt => match s.parse::<i64>() {
                Ok(v) => {
                    put_varint_field(out, 3, v as u64);
                    Got::Done
                }
                Err(_) => self.bad(format!("expected an integer, got {s:?}")),
            },
            Spec::AnyDouble => {
                let v = match s {
                    "NaN" => Ok(f64::NAN),
                    "Infinity" => Ok(f64::INFINITY),
                    "-Infinity" => Ok(f64::NEG_INFINITY),
                    _ => s.parse::<f64>(),
                };
                match v {
                    Ok(v) => {
                        put_fixed64(out, 4, v.to_bits());
                        Got::Done
                    }
                    Err(_) => self.bad(format!("expected a number, got {s:?}")),
                }
            }
            Spec::AnyBytes => {
                let start = out.len();
                put_tag(out, 7, 2);
                let at = out.len();
                out.push(0);
                match B64.decode_vec(s.as_bytes(), out) {
                    Ok(()) => {
                        finish_len(out, at);
                        Got::Done
                    }
                    Err(e) => {
                        out.truncate(start);
                        self.bad(format!("invalid base64: {e}"))
                    }
                }
            }
            Spec::Root | Spec::Message { .. } | Spec::Repeated { .. } | Spec::AnyBool => self.mismatch(),
        }
    }

    /// Same rules and messages as `hex_id` in `request_from_json`, without allocating.
    fn hex_id(self, s: &str, field: u32, len: usize, required: bool) -> Got {
        if s.is_empty() && !required {
            return Got::Done;
        }
        let mut buf = [0u8; 16];
        let buf = &mut buf[..len];
        if s.len() == len * 2 && hex::decode_to_slice(s, buf).is_ok() {
            put_bytes(&mut self.tx.out, field, buf);
            Got::Done
        } else if s.len() == len * 2 || s.len() % 2 == 1 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            self.bad(format!("expected {} hex characters, got {s:?}", len * 2))
        } else {
            self.bad(format!("expected {} hex characters, got {}", len * 2, s.len()))
        }
    }
}

/// Writes an unsigned field truncated to its wire width, omitting zero.
fn put_unsigned(out: &mut Vec<u8>, spec: Spec, field: u32, v: u64) {
    match spec {
        Spec::Fixed64(_) if v != 0 => put_fixed64(out, field, v),
        Spec::Fixed32(_) if v as u32 != 0 => {
            put_tag(out, field, 5);
            out.extend_from_slice(&(v as u32).to_le_bytes());
        }
        Spec::Uint32(_) if v as u32 != 0 => put_varint_field(out, field, u64::from(v as u32)),
        _ => {}
    }
}

/// Writes an enum field as prost does (sign-extended to 64 bits), omitting zero.
fn put_enum(out: &mut Vec<u8>, field: u32, v: i32) {
    if v != 0 {
        put_varint_field(out, field, i64::from(v) as u64);
    }
}

/// Fills in the one-byte length placeholder at `at` for the bytes after it, moving them right if
/// the length needs more than one byte.
fn finish_len(out: &mut Vec<u8>, at: usize) {
    let end = out.len();
    let len = end - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let n = varint_len(len as u64);
    out.resize(end + n - 1, 0);
    out.copy_within(at + 1..end, at + n);
    let mut v = len as u64;
    for b in &mut out[at..at + n] {
        *b = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
    }
    out[at + n - 1] &= 0x7f;
}

impl<'de> Visitor<'de> for Val<'_> {
    type Value = Got;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an OTLP/JSON value")
    }

    fn visit_unit<E>(self) -> Result<Got, E> {
        Ok(self.null())
    }

    fn visit_bool<E>(self, b: bool) -> Result<Got, E> {
        Ok(match self.spec {
            Spec::AnyBool => {
                put_varint_field(&mut self.tx.out, 2, u64::from(b));
                Got::Done
            }
            _ => self.mismatch(),
        })
    }

    fn visit_u64<E>(self, v: u64) -> Result<Got, E> {
        Ok(self.number(Num::U(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Got, E> {
        // `serde_json::Number::from(i64)` keeps non-negative values as unsigned.
        Ok(self.number(if v >= 0 { Num::U(v as u64) } else { Num::I(v) }))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Got, E> {
        // `serde_json::Value` turns a non-finite float into `null` (the parser never yields one).
        if v.is_finite() {
            Ok(self.number(Num::F(v)))
        } else {
            Ok(self.null())
        }
    }

    fn visit_str<E>(self, s: &str) -> Result<Got, E> {
        Ok(self.string(s))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Got, A::Error> {
        match self.spec {
            Spec::Root => object(self.tx, Msg::Request, 0, &mut map),
            Spec::Message { field, msg, depth } if msg != Msg::AnyValue || depth <= MAX_DEPTH => {
                let start = self.tx.out.len();
                put_tag(&mut self.tx.out, field, 2);
                let at = self.tx.out.len();
                self.tx.out.push(0);
                let got = object(self.tx, msg, depth, &mut map)?;
                if let Got::Bad(_) = got {
                    self.tx.out.truncate(start);
                    return Ok(got);
                }
                finish_len(&mut self.tx.out, at);
                Ok(Got::Done)
            }
            _ => {
                skip_map(&mut map)?;
                Ok(self.mismatch())
            }
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Got, A::Error> {
        let Spec::Repeated { field, msg, depth } = self.spec else {
            skip_seq(&mut seq)?;
            return Ok(self.mismatch());
        };
        let tx = self.tx;
        let start = tx.out.len();
        let element = Spec::Message { field, msg, depth };
        for i in 0.. {
            tx.path.push(Seg::Index(i));
            let got = seq.next_element_seed(Val {
                tx: &mut *tx,
                spec: element,
                element: true,
            })?;
            tx.path.pop();
            match got {
                None => break,
                Some(Got::Bad(e)) => {
                    tx.out.truncate(start);
                    skip_seq(&mut seq)?;
                    return Ok(Got::Bad(e));
                }
                Some(Got::Null | Got::Done) => {}
            }
        }
        Ok(Got::Done)
    }
}

/// Reads the rest of an object as `msg`, writing its fields (without tag or length) at the end of
/// `tx.out`. Returns `Got::Done`, or the first error in field-table order among the fields that
/// win (see the module docs).
fn object<'de, A: MapAccess<'de>>(tx: &mut Tx, msg: Msg, depth: u32, map: &mut A) -> Result<Got, A::Error> {
    let fields = msg.fields();
    let start = tx.out.len();
    let base = tx.seen.len();
    tx.seen.resize_with(base + 2 * fields.len(), || None);
    let mut dead = Dead::default();
    while let Some(key) = map.next_key_seed(Key(fields))? {
        let Some((i, form)) = key else {
            map.next_value_seed(Skip)?;
            continue;
        };
        let field = &fields[i];
        tx.path.push(Seg::Field(field.camel));
        let at = tx.out.len();
        let got = map.next_value_seed(Val {
            tx: &mut *tx,
            spec: field.spec.nested_in(depth),
            element: false,
        })?;
        tx.path.pop();
        let occurrence = Occurrence {
            range: at..tx.out.len(),
            got,
        };
        if let Some(earlier) = tx.seen[base + 2 * i + form].replace(occurrence) {
            dead.add(earlier.range);
        }
    }
    let got = resolve(tx, msg, fields, base, &mut dead);
    tx.seen.truncate(base);
    if let Got::Done = got {
        dead.cut(&mut tx.out, start);
    }
    Ok(got)
}

/// Picks each field's winning occurrence, marks the others dead and returns the first error.
fn resolve(tx: &mut Tx, msg: Msg, fields: &[Field], base: usize, dead: &mut Dead) -> Got {
    let mut chosen = false;
    for (i, field) in fields.iter().enumerate() {
        let camel = tx.seen[base + 2 * i].take();
        let snake = tx.seen[base + 2 * i + 1].take();
        let winner = match (camel, snake) {
            (Some(c), Some(s)) => {
                dead.add(s.range);
                Some(c)
            }
            (c, s) => c.or(s),
        };
        match winner {
            Some(w) if !matches!(w.got, Got::Null) => {
                if msg == Msg::AnyValue {
                    if chosen {
                        dead.add(w.range);
                        continue;
                    }
                    chosen = true;
                }
                if let Got::Bad(e) = w.got {
                    return Got::Bad(e);
                }
            }
            _ => {
                if let Spec::Hex {
                    len, required: true, ..
                } = field.spec
                {
                    tx.path.push(Seg::Field(field.camel));
                    let e = tx.error(format!("expected {} hex characters, got 0", len * 2));
                    tx.path.pop();
                    return Got::Bad(e);
                }
            }
        }
    }
    Got::Done
}

/// Byte ranges of an object's output that lost to a later key. Adjacent ranges merge, so there
/// are never more than one more than the object's live fields (at most 33), however many
/// duplicate keys the object has.
#[derive(Default)]
struct Dead(Vec<Range<usize>>);

impl Dead {
    fn add(&mut self, mut r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        if let Some(i) = self.0.iter().position(|d| d.end == r.start) {
            r.start = self.0.swap_remove(i).start;
        }
        if let Some(i) = self.0.iter().position(|d| d.start == r.end) {
            r.end = self.0.swap_remove(i).end;
        }
        self.0.push(r);
    }

    /// Removes the dead ranges from `out`, all of which lie after `start`.
    fn cut(mut self, out: &mut Vec<u8>, start: usize) {
        if self.0.is_empty() {
            return;
        }
        self.0.sort_unstable_by_key(|r| r.start);
        debug_assert!(self.0[0].start >= start);
        let mut write = self.0[0].start;
        for (k, d) in self.0.iter().enumerate() {
            let live_end = self.0.get(k + 1).map_or(out.len(), |next| next.start);
            out.copy_within(d.end..live_end, write);
            write += live_end - d.end;
        }
        out.truncate(write);
    }
}

/// Reads an object key: `Some((field index, 0 for camelCase or 1 for snake_case))`, or `None`
/// for a key the message does not have.
struct Key(&'static [Field]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<(usize, usize)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Option<(usize, usize)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        if let Some(i) = self.0.iter().position(|f| f.camel == s) {
            return Ok(Some((i, 0)));
        }
        Ok(self.0.iter().position(|f| f.snake == s).map(|i| (i, 1)))
    }
}

/// Reads and discards one value, with the same checks as parsing it into a `serde_json::Value`.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        skip_map(&mut map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        skip_seq(&mut seq)
    }
}

fn skip_map<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    while map.next_key_seed(Skip)?.is_some() {
        map.next_value_seed(Skip)?;
    }
    Ok(())
}

fn skip_seq<'de, A: SeqAccess<'de>>(seq: &mut A) -> Result<(), A::Error> {
    while seq.next_element_seed(Skip)?.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests;
