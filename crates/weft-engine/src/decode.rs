//! Stored span → [`weft_traceql::Span`].
//!
//! Stored spans keep resource and scope headers, attributes, events and links as protobuf bytes
//! (ADR 0001, marshal once). Only queries that need those values decode them, here.
//!
//! Attribute values map to TraceQL values: `string_value` → `Str`, `bool_value` → `Bool`,
//! `int_value` → `Int`, `double_value` → `Float`, `array_value` → `Array` (elements mapped the
//! same way), and `kvlist_value`, `bytes_value` or an empty `AnyValue` → `Nil`, which TraceQL
//! cannot compare with anything but `nil` (Tempo does not search them either). Invalid UTF-8,
//! which receivers refuse, is replaced with U+FFFD rather than failing a query.
//!
//! Decoding never panics on any input: a malformed field ends the list it is in, and what was
//! decoded before it is kept. Stored bytes were validated on ingest, so this only matters for
//! corrupt blocks, which must not crash the server.

use weft_block::row::SpanRow;
use weft_otlp::request::fields::*;
use weft_otlp::wire::{Reader, Value as Wire};
use weft_traceql::ast::{Kind, Status};
use weft_traceql::{Event, Link, Span, Value};

/// `InstrumentationScope` fields.
const SCOPE_NAME: u32 = 1;
const SCOPE_VERSION: u32 = 2;
const SCOPE_ATTRIBUTES: u32 = 3;
/// `Span.Event` fields.
const EVENT_TIME: u32 = 1;
const EVENT_NAME: u32 = 2;
const EVENT_ATTRIBUTES: u32 = 3;
/// `Span.Link` fields.
const LINK_TRACE_ID: u32 = 1;
const LINK_SPAN_ID: u32 = 2;
const LINK_ATTRIBUTES: u32 = 4;
/// `AnyValue` fields beyond `string_value`, and the list messages' `values` field.
const ANY_BOOL: u32 = 2;
const ANY_INT: u32 = 3;
const ANY_DOUBLE: u32 = 4;
const ANY_ARRAY: u32 = 5;
const LIST_VALUES: u32 = 1;

/// Deepest array nesting decoded; deeper values become `Nil` (receivers refuse deeper than
/// `weft_otlp::request::MAX_DEPTH` anyway).
const MAX_DEPTH: u32 = weft_otlp::request::MAX_DEPTH;

/// Decodes one stored span.
pub fn decode(row: &SpanRow) -> Span {
    decode_parts(row, Parts::ALL)
}

/// Which nested parts of a span a query reads. Decoding attributes is most of a query's CPU,
/// so parts no field of the query refers to are left empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parts {
    pub span_attrs: bool,
    pub resource: bool,
    pub scope: bool,
    pub events: bool,
    pub links: bool,
    /// The span and resource attributes decoded, when `span_attrs` or `resource` is set:
    /// those whose keys are in the list, or all of them (`None`).
    pub keys: Option<Keys>,
}

/// Up to [`Keys::MAX`] attribute keys: the span and resource attributes a query names. The
/// others are skipped without decoding their values. A first page of
/// `{ span.http.status_code = 500 }` decoded every attribute of the 990 traces of a row group
/// into owned strings: about 40 % of its CPU in allocating, freeing, UTF-8 checks and the
/// decoders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keys {
    prints: [KeyPrint; Keys::MAX],
    len: usize,
}

/// A key as [`Keys`] tells it apart: its length and its first and last 8 bytes. Two keys with
/// the same print are both decoded, which costs work, never a wrong answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct KeyPrint {
    len: usize,
    head: u64,
    tail: u64,
}

impl KeyPrint {
    fn of(key: &[u8]) -> KeyPrint {
        let n = key.len().min(8);
        let (mut head, mut tail) = ([0u8; 8], [0u8; 8]);
        head[..n].copy_from_slice(&key[..n]);
        tail[8 - n..].copy_from_slice(&key[key.len() - n..]);
        KeyPrint {
            len: key.len(),
            head: u64::from_le_bytes(head),
            tail: u64::from_le_bytes(tail),
        }
    }
}

impl Keys {
    /// Keys a list holds; a query naming more decodes every attribute.
    pub const MAX: usize = 8;

    /// Adds `key`; `false` when the list is full (it then holds what it held).
    pub fn add(&mut self, key: &str) -> bool {
        let print = KeyPrint::of(key.as_bytes());
        if self.prints[..self.len].contains(&print) {
            return true;
        }
        if self.len == Self::MAX {
            return false;
        }
        self.prints[self.len] = print;
        self.len += 1;
        true
    }

    /// Whether an attribute with this key is decoded.
    #[inline]
    pub fn holds(&self, key: &[u8]) -> bool {
        let print = KeyPrint::of(key);
        self.prints[..self.len].contains(&print)
    }
}

impl Parts {
    pub const ALL: Parts = Parts {
        span_attrs: true,
        resource: true,
        scope: true,
        events: true,
        links: true,
        keys: None,
    };

    /// The parts `query` refers to anywhere (filters, aggregates, `by`, `select`, metrics),
    /// and the span and resource attribute keys it names.
    pub fn of(query: &weft_traceql::Query) -> Parts {
        let mut p = Parts {
            keys: Some(Keys::default()),
            ..Parts::default()
        };
        for stage in &query.pipeline.stages {
            p.stage(stage);
        }
        p
    }

    /// These parts, and the resource attribute `key` too (a search's hits show each span's
    /// `service.name`).
    pub fn with_resource_key(mut self, key: &str) -> Parts {
        self.resource = true;
        self.key(key);
        self
    }

    /// Decodes the span and resource attributes named `key` too.
    fn key(&mut self, key: &str) {
        if let Some(keys) = &mut self.keys
            && !keys.add(key)
        {
            self.keys = None;
        }
    }

    fn stage(&mut self, stage: &weft_traceql::ast::Stage) {
        use weft_traceql::ast::Stage;
        match stage {
            Stage::Spanset(e) => self.spanset(e),
            Stage::ScalarFilter(f) => f.aggregate.args.iter().for_each(|e| self.expr(e)),
            // Refused by the support check.
            Stage::ScalarExprFilter(_) => {}
            Stage::By(args) | Stage::Select(args) => args.iter().for_each(|e| self.expr(e)),
            Stage::Metrics(m) => {
                m.args.iter().for_each(|e| self.expr(e));
                m.by.iter().flatten().for_each(|e| self.expr(e));
            }
            // compare() counts every span and resource attribute.
            Stage::Compare(_) => {
                self.span_attrs = true;
                self.resource = true;
                self.keys = None;
            }
            Stage::SecondStage(s) => s.args.iter().for_each(|e| self.expr(e)),
            Stage::Coalesce => {}
        }
    }

    fn spanset(&mut self, e: &weft_traceql::ast::SpansetExpr) {
        use weft_traceql::ast::SpansetExpr;
        match e {
            SpansetExpr::Filter(f) => f.expr.iter().for_each(|e| self.expr(e)),
            SpansetExpr::Op { lhs, rhs, .. } => {
                self.spanset(lhs);
                self.spanset(rhs);
            }
            SpansetExpr::Pipeline(p) => p.stages.iter().for_each(|s| self.stage(s)),
        }
    }

    fn expr(&mut self, e: &weft_traceql::ast::FieldExpr) {
        use weft_traceql::ast::{AttributeScope as S, FieldExpr, Intrinsic as I};
        match e {
            FieldExpr::Attribute(a) => match a.scope {
                _ if a.parent => {
                    self.span_attrs = true;
                    self.resource = true;
                    self.key(&a.name);
                }
                S::Unscoped => {
                    self.span_attrs = true;
                    self.resource = true;
                    self.key(&a.name);
                }
                S::Span => {
                    self.span_attrs = true;
                    self.key(&a.name);
                }
                S::Resource => {
                    self.resource = true;
                    self.key(&a.name);
                }
                S::Instrumentation => self.scope = true,
                S::Event => self.events = true,
                S::Link => self.links = true,
            },
            FieldExpr::Intrinsic(i) => match i {
                I::RootServiceName => {
                    self.resource = true;
                    self.key("service.name");
                }
                I::EventName | I::EventTimeSinceStart => self.events = true,
                I::LinkTraceId | I::LinkSpanId => self.links = true,
                I::InstrumentationName | I::InstrumentationVersion => self.scope = true,
                _ => {}
            },
            FieldExpr::Unary { expr, .. } => self.expr(expr),
            FieldExpr::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            FieldExpr::Static(_) => {}
        }
    }
}

/// Decodes the parts of one stored span that `parts` names; the others are left empty.
pub fn decode_parts(row: &SpanRow, parts: Parts) -> Span {
    let (scope_name, scope_version, scope_attrs) = if parts.scope {
        scope(&row.scope)
    } else {
        Default::default()
    };
    Span {
        trace_id: row.trace_id,
        span_id: row.span_id,
        parent_span_id: (row.parent_span_id != [0; 8]).then_some(row.parent_span_id),
        name: row.name.clone(),
        kind: kind(row.kind),
        status: status(row.status_code),
        status_message: row.status_message.clone(),
        start_unix_nano: row.start_unix_nano,
        duration_nano: row.duration_nano as u64,
        span_attrs: if parts.span_attrs {
            key_values_of(&row.attributes, SPAN_ATTRIBUTES, parts.keys.as_ref())
        } else {
            Vec::new()
        },
        resource_attrs: if parts.resource {
            resource_attributes_of(&row.resource, parts.keys.as_ref())
        } else {
            Vec::new()
        },
        scope_name,
        scope_version,
        scope_attrs,
        events: if parts.events {
            each(&row.events, SPAN_EVENTS).map(event).collect()
        } else {
            Vec::new()
        },
        links: if parts.links {
            each(&row.links, SPAN_LINKS).map(link).collect()
        } else {
            Vec::new()
        },
    }
}

/// Calls `f` with the key and the encoded `AnyValue` of each attribute of a span's attribute
/// blob, without decoding them: the attributes [`decode_parts`] gives, in order (the last
/// key and the last value of a `KeyValue` count; one without a key is left out; one without a
/// value has empty value bytes, which decode as nil).
pub(crate) fn each_span_attribute<'a>(blob: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) {
    for kv in each(blob, SPAN_ATTRIBUTES) {
        let (mut key, mut value) = (None, &[][..]);
        let mut r = Reader::new(kv);
        while let Ok(Some(field)) = r.next() {
            match (field.number, field.value) {
                (KV_KEY, Wire::Bytes(b)) => key = Some(b),
                (KV_VALUE, Wire::Bytes(b)) => value = b,
                _ => {}
            }
        }
        if let Some(key) = key {
            f(key, value);
        }
    }
}

/// Whether an encoded `AnyValue` decodes ([`any_value`]) to a string, boolean, integer or
/// float, rather than nil or an array, without decoding it.
pub(crate) fn is_scalar(b: &[u8]) -> bool {
    let mut scalar = false;
    let mut r = Reader::new(b);
    while let Ok(Some(f)) = r.next() {
        scalar = matches!(
            (f.number, f.value),
            (ANY_STRING, Wire::Bytes(_))
                | (ANY_BOOL, Wire::Varint(_))
                | (ANY_INT, Wire::Varint(_))
                | (ANY_DOUBLE, Wire::Fixed64(_))
        );
    }
    scalar
}

/// Decodes an encoded `AnyValue` as [`decode_parts`] does.
pub(crate) fn value(b: &[u8]) -> Value {
    any_value(b, 0)
}

/// Where attribute keys are read from by [`each_attribute_key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysOf {
    /// A span's attribute blob ([`SpanRow::attributes`]).
    Span,
    /// A resource header ([`SpanRow::resource`]).
    Resource,
    /// A scope header ([`SpanRow::scope`]).
    Scope,
    /// An event blob: the keys of every event's attributes.
    Events,
    /// A link blob: the keys of every link's attributes.
    Links,
}

/// Calls `f` with each attribute key in `bytes` (a stored part `of` a span), as raw bytes and
/// without decoding any value: exactly the keys [`decode_parts`] gives that part's attributes
/// (a `KeyValue` without a key is left out; of several keys the last counts), in order. The
/// walk is [`weft_block::values::for_each_key`], which also writes the index's key lists.
pub fn each_attribute_key(of: KeysOf, bytes: &[u8], f: impl FnMut(&[u8])) {
    use weft_block::values::{Source, for_each_key};
    let source = match of {
        KeysOf::Span => Source::SpanAttributes,
        KeysOf::Resource => Source::Resource,
        KeysOf::Scope => Source::Scope,
        KeysOf::Events => Source::Events,
        KeysOf::Links => Source::Links,
    };
    for_each_key(source, bytes, f);
}

/// OTLP `SpanKind` numbers; unknown numbers read as `unspecified`.
pub(crate) fn kind(k: u8) -> Kind {
    match k {
        1 => Kind::Internal,
        2 => Kind::Server,
        3 => Kind::Client,
        4 => Kind::Producer,
        5 => Kind::Consumer,
        _ => Kind::Unspecified,
    }
}

/// OTLP `StatusCode` numbers; unknown numbers read as `unset`.
pub(crate) fn status(code: u8) -> Status {
    match code {
        1 => Status::Ok,
        2 => Status::Error,
        _ => Status::Unset,
    }
}

/// The length-delimited payloads of every field `number` in `buf`, stopping at the first
/// malformed field.
fn each(buf: &[u8], number: u32) -> impl Iterator<Item = &[u8]> {
    let mut r = Reader::new(buf);
    std::iter::from_fn(move || r.next().ok().flatten()).filter_map(move |f| match f.value {
        Wire::Bytes(b) if f.number == number => Some(b),
        _ => None,
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `KeyValue` messages in the fields `number` of `buf` whose keys `keys` holds (all when
/// `None`).
fn key_values_of(buf: &[u8], number: u32, keys: Option<&Keys>) -> Vec<(String, Value)> {
    each(buf, number).filter_map(|kv| key_value_of(kv, keys)).collect()
}

fn key_value(kv: &[u8]) -> Option<(String, Value)> {
    key_value_of(kv, None)
}

/// A `KeyValue` (the last key and the last value count), unless `keys` does not hold its key:
/// then its value is not decoded.
fn key_value_of(kv: &[u8], keys: Option<&Keys>) -> Option<(String, Value)> {
    let (mut key, mut value) = (None, None);
    let mut r = Reader::new(kv);
    while let Ok(Some(f)) = r.next() {
        match (f.number, f.value) {
            (KV_KEY, Wire::Bytes(b)) => key = Some(b),
            (KV_VALUE, Wire::Bytes(b)) => value = Some(b),
            _ => {}
        }
    }
    let key = key?;
    if keys.is_some_and(|k| !k.holds(key)) {
        return None;
    }
    Some((text(key), value.map_or(Value::Nil, |b| any_value(b, 0))))
}

fn any_value(b: &[u8], depth: u32) -> Value {
    if depth > MAX_DEPTH {
        return Value::Nil;
    }
    let mut value = Value::Nil;
    let mut r = Reader::new(b);
    while let Ok(Some(f)) = r.next() {
        value = match (f.number, f.value) {
            (ANY_STRING, Wire::Bytes(s)) => Value::Str(text(s)),
            (ANY_BOOL, Wire::Varint(v)) => Value::Bool(v != 0),
            (ANY_INT, Wire::Varint(v)) => Value::Int(v as i64),
            (ANY_DOUBLE, Wire::Fixed64(v)) => Value::Float(f64::from_bits(v)),
            (ANY_ARRAY, Wire::Bytes(a)) => {
                Value::Array(each(a, LIST_VALUES).map(|v| any_value(v, depth + 1)).collect())
            }
            // kvlist_value, bytes_value and unknown fields: not comparable in TraceQL.
            _ => Value::Nil,
        };
    }
    value
}

pub(crate) fn resource_attributes(header: &[u8]) -> Vec<(String, Value)> {
    resource_attributes_of(header, None)
}

/// [`resource_attributes`], only those whose key `keys` holds (all when `None`).
fn resource_attributes_of(header: &[u8], keys: Option<&Keys>) -> Vec<(String, Value)> {
    each(header, RS_RESOURCE)
        .flat_map(|res| key_values_of(res, RESOURCE_ATTRIBUTES, keys))
        .collect()
}

fn scope(header: &[u8]) -> (String, String, Vec<(String, Value)>) {
    let (mut name, mut version, mut attrs) = (String::new(), String::new(), Vec::new());
    for s in each(header, SS_SCOPE) {
        let mut r = Reader::new(s);
        while let Ok(Some(f)) = r.next() {
            match (f.number, f.value) {
                (SCOPE_NAME, Wire::Bytes(b)) => name = text(b),
                (SCOPE_VERSION, Wire::Bytes(b)) => version = text(b),
                (SCOPE_ATTRIBUTES, Wire::Bytes(b)) => attrs.extend(key_value(b)),
                _ => {}
            }
        }
    }
    (name, version, attrs)
}

fn event(b: &[u8]) -> Event {
    let mut e = Event {
        name: String::new(),
        time_unix_nano: 0,
        attrs: Vec::new(),
    };
    let mut r = Reader::new(b);
    while let Ok(Some(f)) = r.next() {
        match (f.number, f.value) {
            (EVENT_TIME, Wire::Fixed64(t)) => e.time_unix_nano = t,
            (EVENT_NAME, Wire::Bytes(n)) => e.name = text(n),
            (EVENT_ATTRIBUTES, Wire::Bytes(kv)) => e.attrs.extend(key_value(kv)),
            _ => {}
        }
    }
    e
}

fn link(b: &[u8]) -> Link {
    let mut l = Link {
        trace_id: [0; 16],
        span_id: [0; 8],
        attrs: Vec::new(),
    };
    let mut r = Reader::new(b);
    while let Ok(Some(f)) = r.next() {
        match (f.number, f.value) {
            (LINK_TRACE_ID, Wire::Bytes(id)) => l.trace_id = id.try_into().unwrap_or([0; 16]),
            (LINK_SPAN_ID, Wire::Bytes(id)) => l.span_id = id.try_into().unwrap_or([0; 8]),
            (LINK_ATTRIBUTES, Wire::Bytes(kv)) => l.attrs.extend(key_value(kv)),
            _ => {}
        }
    }
    l
}

#[cfg(test)]
mod tests;
