//! Jaeger: `jaeger.thrift` batches in (the collector's `POST /api/traces`, binary protocol; the
//! agent's UDP ports, `emitBatch` in the compact or binary protocol, and `emitZipkinBatch`),
//! written as OTLP by the OpenTelemetry Collector's Jaeger translator (`jaeger.ThriftToTraces`),
//! except where `spec/formats/jaeger.md` says otherwise.

use std::borrow::Cow;

pub mod proto;
pub mod ui;
pub mod v3;

use crate::TranslateError;
use crate::otlp::{RequestWriter, Value, kind, status};
use crate::thrift::{Protocol, Reader, Type};

/// A Jaeger tag value.
#[derive(Debug, Clone, PartialEq)]
pub enum TagValue<'a> {
    Str(Cow<'a, str>),
    Double(f64),
    Bool(bool),
    Long(i64),
    Binary(&'a [u8]),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tag<'a> {
    pub key: &'a str,
    pub value: TagValue<'a>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Log<'a> {
    /// Nanoseconds since the epoch (thrift carries microseconds, protobuf nanoseconds).
    pub timestamp_ns: i64,
    pub fields: Vec<Tag<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanRef {
    pub follows_from: bool,
    pub trace_id_low: i64,
    pub trace_id_high: i64,
    pub span_id: i64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Span<'a> {
    pub trace_id_low: i64,
    pub trace_id_high: i64,
    pub span_id: i64,
    pub parent_span_id: i64,
    pub operation_name: &'a str,
    pub references: Vec<SpanRef>,
    pub flags: i32,
    /// Nanoseconds since the epoch (thrift carries microseconds, protobuf nanoseconds).
    pub start_ns: i64,
    /// Nanoseconds.
    pub duration_ns: i64,
    pub tags: Vec<Tag<'a>>,
    pub logs: Vec<Log<'a>>,
    /// The span's own process (protobuf only); `None` means the batch's.
    pub process: Option<Process<'a>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process<'a> {
    pub service_name: &'a str,
    pub tags: Vec<Tag<'a>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch<'a> {
    pub process: Process<'a>,
    pub spans: Vec<Span<'a>>,
}

fn wrong(what: &str, ty: Type) -> TranslateError {
    TranslateError::new(format!("Jaeger thrift: {what} has type {ty:?}"))
}

fn tag<'a>(r: &mut Reader<'a>) -> Result<Tag<'a>, TranslateError> {
    let at = r.position();
    if let Some(t) = tag_in_order(r) {
        return Ok(t);
    }
    r.rewind(at);
    tag_any_order(r)
}

/// A tag field by field, in any order and either protocol: what [`tag_in_order`] does not read.
fn tag_any_order<'a>(r: &mut Reader<'a>) -> Result<Tag<'a>, TranslateError> {
    let (mut key, mut vtype) = (None, 0i32);
    let (mut s, mut d, mut b, mut l, mut bin) = (None, 0.0, false, 0i64, &[][..]);
    r.struct_begin()?;
    while let Some((ty, id)) = r.field()? {
        match (id, ty) {
            (1, Type::Binary) => key = Some(r.string()?),
            (2, Type::I32) => vtype = r.i32()?,
            (3, Type::Binary) => s = Some(r.string()?),
            (4, Type::Double) => d = r.double()?,
            (5, Type::Bool) => b = r.bool()?,
            (6, Type::I64) => l = r.i64()?,
            (7, Type::Binary) => bin = r.binary()?,
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    let key = key.ok_or_else(|| TranslateError::new("Jaeger thrift: a tag has no key"))?;
    let value = match vtype {
        0 => TagValue::Str(Cow::Borrowed(s.unwrap_or(""))),
        1 => TagValue::Double(d),
        2 => TagValue::Bool(b),
        3 => TagValue::Long(l),
        4 => TagValue::Binary(bin),
        // As the Collector: the value says it is unknown.
        t => TagValue::Str(Cow::Owned(format!("<Unknown Jaeger TagType \"{t}\">"))),
    };
    Ok(Tag { key, value })
}

fn tags<'a>(r: &mut Reader<'a>, ty: Type, what: &str) -> Result<Vec<Tag<'a>>, TranslateError> {
    if ty != Type::List {
        return Err(wrong(what, ty));
    }
    let (et, n) = r.list_begin()?;
    if et != Type::Struct {
        return Err(wrong(what, et));
    }
    let mut out = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        out.push(tag(r)?);
    }
    r.list_end();
    Ok(out)
}

/// A tag as the Jaeger clients write it in the binary protocol: its key, its type, the one
/// value field of that type, the stop byte, in that order; `None` (the reader to be rewound)
/// for anything else, which [`tag`]'s general loop then reads or refuses. The general loop
/// jumps on each field's ID, and `perf annotate` put a sixth of its time on that jump; here
/// each step has one branch, taken the same way for every tag a client writes.
#[inline]
fn tag_in_order<'a>(r: &mut Reader<'a>) -> Option<Tag<'a>> {
    // The binary protocol's type bytes.
    const BOOL: u8 = 2;
    const DOUBLE: u8 = 4;
    const I32: u8 = 8;
    const I64: u8 = 10;
    const STRING: u8 = 11;
    if !r.binary_field_is(STRING, 1) {
        return None;
    }
    let key = r.string().ok()?;
    if !r.binary_field_is(I32, 2) {
        return None;
    }
    let value = match r.i32().ok()? {
        0 if r.binary_field_is(STRING, 3) => TagValue::Str(Cow::Borrowed(r.string().ok()?)),
        1 if r.binary_field_is(DOUBLE, 4) => TagValue::Double(r.double().ok()?),
        2 if r.binary_field_is(BOOL, 5) => TagValue::Bool(r.bool().ok()?),
        3 if r.binary_field_is(I64, 6) => TagValue::Long(r.i64().ok()?),
        4 if r.binary_field_is(STRING, 7) => TagValue::Binary(r.binary().ok()?),
        _ => return None,
    };
    if !r.binary_stop_is_next() {
        return None;
    }
    Some(Tag { key, value })
}

/// Reads a span into `s`, a default one already in its batch's vector: a span is about 200
/// bytes, and building it on the stack and moving it there was 5 % of the conversion.
fn span_into<'a>(r: &mut Reader<'a>, s: &mut Span<'a>) -> Result<(), TranslateError> {
    r.struct_begin()?;
    while let Some((ty, id)) = r.field()? {
        match (id, ty) {
            (1, Type::I64) => s.trace_id_low = r.i64()?,
            (2, Type::I64) => s.trace_id_high = r.i64()?,
            (3, Type::I64) => s.span_id = r.i64()?,
            (4, Type::I64) => s.parent_span_id = r.i64()?,
            (5, Type::Binary) => s.operation_name = r.string()?,
            (6, Type::List) => {
                let (et, n) = r.list_begin()?;
                if et != Type::Struct {
                    return Err(wrong("references", et));
                }
                for _ in 0..n {
                    let mut rf = SpanRef {
                        follows_from: false,
                        trace_id_low: 0,
                        trace_id_high: 0,
                        span_id: 0,
                    };
                    r.struct_begin()?;
                    while let Some((ty, id)) = r.field()? {
                        match (id, ty) {
                            (1, Type::I32) => rf.follows_from = r.i32()? == 1,
                            (2, Type::I64) => rf.trace_id_low = r.i64()?,
                            (3, Type::I64) => rf.trace_id_high = r.i64()?,
                            (4, Type::I64) => rf.span_id = r.i64()?,
                            _ => r.skip(ty)?,
                        }
                    }
                    r.struct_end();
                    s.references.push(rf);
                }
                r.list_end();
            }
            (7, Type::I32) => s.flags = r.i32()?,
            (8, Type::I64) => s.start_ns = r.i64()?.saturating_mul(1000),
            (9, Type::I64) => s.duration_ns = r.i64()?.saturating_mul(1000),
            (10, _) => s.tags = tags(r, ty, "span tags")?,
            (11, Type::List) => {
                let (et, n) = r.list_begin()?;
                if et != Type::Struct {
                    return Err(wrong("logs", et));
                }
                for _ in 0..n {
                    let mut log = Log::default();
                    r.struct_begin()?;
                    while let Some((ty, id)) = r.field()? {
                        match (id, ty) {
                            (1, Type::I64) => log.timestamp_ns = r.i64()?.saturating_mul(1000),
                            (2, _) => log.fields = tags(r, ty, "log fields")?,
                            _ => r.skip(ty)?,
                        }
                    }
                    r.struct_end();
                    s.logs.push(log);
                }
                r.list_end();
            }
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    Ok(())
}

/// Reads a `Batch` struct at the reader's position.
pub fn batch<'a>(r: &mut Reader<'a>) -> Result<Batch<'a>, TranslateError> {
    let mut b = Batch::default();
    let mut has_process = false;
    r.struct_begin()?;
    while let Some((ty, id)) = r.field()? {
        match (id, ty) {
            (1, Type::Struct) => {
                has_process = true;
                r.struct_begin()?;
                while let Some((ty, id)) = r.field()? {
                    match (id, ty) {
                        (1, Type::Binary) => b.process.service_name = r.string()?,
                        (2, _) => b.process.tags = tags(r, ty, "process tags")?,
                        _ => r.skip(ty)?,
                    }
                }
                r.struct_end();
            }
            (2, Type::List) => {
                let (et, n) = r.list_begin()?;
                if et != Type::Struct {
                    return Err(wrong("spans", et));
                }
                b.spans.reserve(n.min(4096));
                for i in 0..n {
                    b.spans.push(Span::default());
                    let s = b.spans.last_mut().expect("just pushed");
                    span_into(r, s).map_err(|e| TranslateError::new(format!("span {i}: {e}")))?;
                }
                r.list_end();
            }
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    if !has_process {
        return Err(TranslateError::new("Jaeger thrift: the batch has no process"));
    }
    for (i, s) in b.spans.iter().enumerate() {
        if s.trace_id_low == 0 && s.trace_id_high == 0 {
            return Err(TranslateError::new(format!("span {i}: the trace ID is zero")));
        }
        if s.span_id == 0 {
            return Err(TranslateError::new(format!("span {i}: the span ID is zero")));
        }
    }
    Ok(b)
}

/// `POST /api/traces`: one binary-protocol `Batch`.
pub fn decode_http(body: &[u8]) -> Result<Batch<'_>, TranslateError> {
    let mut r = Reader::new(body, Protocol::Binary);
    let b = batch(&mut r)?;
    if r.remaining() != 0 {
        return Err(TranslateError::new(format!(
            "Jaeger thrift: {} bytes after the batch",
            r.remaining()
        )));
    }
    Ok(b)
}

/// What an agent datagram carries.
#[derive(Debug)]
pub enum AgentPayload<'a> {
    Jaeger(Batch<'a>),
    Zipkin(Vec<crate::zipkin::Span<'a>>),
}

/// An agent UDP datagram: a oneway `emitBatch(1: Batch)` or `emitZipkinBatch(1: list<Span>)`
/// call in the compact (port 6831) or binary (6832) protocol.
pub fn decode_agent(datagram: &[u8], proto: Protocol) -> Result<AgentPayload<'_>, TranslateError> {
    let mut r = Reader::new(datagram, proto);
    let (name, _, _) = r.message_begin()?;
    let zipkin = match name {
        "emitBatch" => false,
        "emitZipkinBatch" => true,
        other => {
            return Err(TranslateError::new(format!(
                "Jaeger agent: unknown method {other:?} (expected emitBatch or emitZipkinBatch)"
            )));
        }
    };
    let mut out = None;
    r.struct_begin()?;
    while let Some((ty, id)) = r.field()? {
        match (id, ty, zipkin) {
            (1, Type::Struct, false) => out = Some(AgentPayload::Jaeger(batch(&mut r)?)),
            (1, Type::List, true) => {
                let (et, n) = r.list_begin()?;
                if et != Type::Struct {
                    return Err(wrong("zipkin spans", et));
                }
                let mut spans = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    spans.push(crate::zipkin::thrift::span(&mut r)?);
                }
                r.list_end();
                out = Some(AgentPayload::Zipkin(crate::zipkin::v1::to_v2(spans)));
            }
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    out.ok_or_else(|| TranslateError::new(format!("Jaeger agent: {name} without its argument")))
}

fn value<'a>(v: &'a TagValue<'a>) -> Value<'a> {
    match v {
        TagValue::Str(s) => Value::Str(Cow::Borrowed(s.as_ref())),
        TagValue::Double(d) => Value::Double(*d),
        TagValue::Bool(b) => Value::Bool(*b),
        TagValue::Long(l) => Value::Int(*l),
        TagValue::Binary(_) => Value::Str(Cow::Borrowed("")),
    }
}

fn str_of<'a>(v: &'a TagValue<'a>) -> Option<&'a str> {
    match v {
        TagValue::Str(s) => Some(s.as_ref()),
        _ => None,
    }
}

fn trace_id(high: i64, low: i64) -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&high.to_be_bytes());
    t[8..].copy_from_slice(&low.to_be_bytes());
    t
}

/// The parent: `parentSpanId`, else a CHILD_OF (then FOLLOWS_FROM) reference in the same trace.
fn parent_id(s: &Span<'_>) -> i64 {
    if s.parent_span_id != 0 {
        return s.parent_span_id;
    }
    let same = |r: &&SpanRef| r.trace_id_high == s.trace_id_high && r.trace_id_low == s.trace_id_low;
    s.references
        .iter()
        .filter(same)
        .find(|r| !r.follows_from)
        .or_else(|| s.references.iter().filter(same).find(|r| r.follows_from))
        .map_or(0, |r| r.span_id)
}

/// Writes a Jaeger thrift batch as one OTLP request, as the Collector's `ThriftToTraces`: the
/// process is the resource (`write_resource`) and the spans share one scope, so
/// `otel.scope.*`/`otel.library.*` tags stay attributes (Jaeger shows them as they were sent).
pub fn to_otlp(b: &Batch<'_>) -> Vec<u8> {
    let mut w = RequestWriter::with_capacity(b.spans.len() * 256 + 64);
    write_resource(&mut w, &b.process);
    w.scope("", "");
    for s in &b.spans {
        write_span(&mut w, s, false);
    }
    w.finish()
}

/// Writes a Jaeger protobuf batch (`api_v2`, the collector's gRPC `PostSpans`) as one OTLP
/// request, as the Collector's `ProtoToTraces`: spans that carry their own process go to that
/// process's resource (equal processes share one), the others to the batch's; within a
/// resource, spans are grouped into scopes by their `otel.scope.name`/`otel.scope.version`
/// tags, which are taken out of the attributes.
pub fn to_otlp_grouped(b: &Batch<'_>) -> Vec<u8> {
    let mut w = RequestWriter::with_capacity(b.spans.len() * 256 + 64);
    let mut procs: Vec<&Process<'_>> = Vec::new();
    let mut of_span: Vec<usize> = Vec::with_capacity(b.spans.len());
    for s in &b.spans {
        let p = s.process.as_ref().unwrap_or(&b.process);
        let i = match procs.iter().position(|q| *q == p) {
            Some(i) => i,
            None => {
                procs.push(p);
                procs.len() - 1
            }
        };
        of_span.push(i);
    }
    if procs.is_empty() && !b.process.service_name.is_empty() {
        // A process without spans still names a resource (the Collector keeps it).
        write_resource(&mut w, &b.process);
    }
    for (pi, p) in procs.iter().enumerate() {
        write_resource(&mut w, p);
        let mut scopes: Vec<(&str, &str)> = Vec::new();
        for (s, _) in b.spans.iter().zip(&of_span).filter(|(_, i)| **i == pi) {
            let sc = scope_of(s);
            if !scopes.contains(&sc) {
                scopes.push(sc);
            }
        }
        for sc in &scopes {
            w.scope(sc.0, sc.1);
            for (s, _) in b.spans.iter().zip(&of_span).filter(|(_, i)| **i == pi) {
                if scope_of(s) == *sc {
                    write_span(&mut w, s, true);
                }
            }
        }
    }
    w.finish()
}

/// The scope a protobuf span names with its tags: `otel.scope.name`, and its version only
/// beside a name (the Collector's `getScope`).
fn scope_of<'a>(s: &'a Span<'a>) -> (&'a str, &'a str) {
    let tag = |k: &str| {
        s.tags
            .iter()
            .find(|t| t.key == k)
            .map(|t| str_of(&t.value).unwrap_or(""))
    };
    match tag("otel.scope.name") {
        Some(name) => (name, tag("otel.scope.version").unwrap_or("")),
        None => ("", ""),
    }
}

/// Opens the OTLP resource of a Jaeger process: `service.name`, the tags, `hostname` as
/// `host.name` and `jaeger.version` as `opencensus.exporterversion` (`Jaeger-<version>`), each
/// unless the target key is already there.
fn write_resource(w: &mut RequestWriter, p: &Process<'_>) {
    let svc = Value::Str(Cow::Borrowed(p.service_name));
    let has = |k: &str| p.tags.iter().any(|t| t.key == k);
    let jaeger_version = p
        .tags
        .iter()
        .find(|t| t.key == "jaeger.version")
        .and_then(|t| str_of(&t.value));
    let exporter = jaeger_version.map(|v| Value::Str(Cow::Owned(format!("Jaeger-{v}"))));
    let mut res: Vec<(&str, Value<'_>)> = Vec::with_capacity(p.tags.len() + 1);
    if !p.service_name.is_empty() {
        res.push(("service.name", svc));
    }
    for t in &p.tags {
        let key = match t.key {
            "hostname" if !has("host.name") => "host.name",
            "jaeger.version" if !has("opencensus.exporterversion") && exporter.is_some() => continue,
            k => k,
        };
        res.push((key, value(&t.value)));
    }
    if let Some(e) = exporter
        && !has("opencensus.exporterversion")
    {
        res.push(("opencensus.exporterversion", e));
    }
    w.resource(res.iter().map(|(k, v)| (*k, v)));
}

/// Writes one span; `scoped` drops the scope tags [`scope_of`] read (the first of each key).
fn write_span(w: &mut RequestWriter, s: &Span<'_>, scoped: bool) {
    let find = |k: &str| s.tags.iter().find(|t| t.key == k).map(|t| &t.value);
    let mut sw = w.span();
    let parent = parent_id(s);
    let parent_bytes = parent.to_be_bytes();
    sw.ids(
        &trace_id(s.trace_id_high, s.trace_id_low),
        &s.span_id.to_be_bytes(),
        (parent != 0).then_some(&parent_bytes),
    );
    if let Some(ts) = find("w3c.tracestate").and_then(str_of) {
        sw.trace_state(ts);
    }
    sw.name(s.operation_name);
    let k = match find("span.kind").and_then(str_of) {
        Some("client") => kind::CLIENT,
        Some("server") => kind::SERVER,
        Some("producer") => kind::PRODUCER,
        Some("consumer") => kind::CONSUMER,
        Some("internal") => kind::INTERNAL,
        _ => kind::UNSPECIFIED,
    };
    sw.kind(k);
    sw.times(s.start_ns as u64, s.start_ns.wrapping_add(s.duration_ns) as u64);

    // Status, as the Collector: `error=true` first, then `otel.status_code`, then an HTTP
    // status code (`http.status_message` is the message of either the first or the last).
    let (mut code, mut message, mut exists) = (status::UNSET, "", false);
    let desc = find("otel.status_description").and_then(str_of);
    let http_message = find("http.status_message").and_then(str_of);
    let error_true = matches!(find("error"), Some(TagValue::Bool(true)));
    if error_true {
        code = status::ERROR;
        exists = true;
        message = desc.or(http_message).unwrap_or("");
    }
    let otel_code = find("otel.status_code").and_then(str_of);
    if let Some(c) = otel_code
        && !exists
    {
        exists = true;
        match c.to_ascii_uppercase().as_str() {
            "OK" => code = status::OK,
            "ERROR" => code = status::ERROR,
            _ => {}
        }
        message = desc.unwrap_or("");
    }
    if !exists && otel_code.is_none() {
        let http = match find("http.status_code") {
            Some(TagValue::Long(l)) => Some(*l),
            Some(TagValue::Str(s)) => s.parse().ok(),
            _ => None,
        };
        if let Some(h) = http {
            if http_status_fails(h, k) {
                code = status::ERROR;
                exists = true;
            }
            message = http_message.unwrap_or("");
        }
    }
    for t in &s.tags {
        let drop = match t.key {
            "span.kind" => true,
            "error" => error_true,
            "otel.status_code" => true,
            "otel.status_description" => error_true || otel_code.is_some(),
            "w3c.tracestate" => true,
            "otel.scope.name" | "otel.scope.version" if scoped => is_scope_tag(s, t),
            _ => false,
        };
        if !drop {
            write_tag(&mut sw, t);
        }
    }
    for log in &s.logs {
        // The event's name: the OpenTracing `event` field (the Collector's rule), else the
        // `message` field the OpenTelemetry Jaeger exporters write the event name into.
        let name_key = ["event", "message"].into_iter().find(|k| {
            log.fields
                .iter()
                .any(|f| f.key == *k && matches!(f.value, TagValue::Str(_)))
        });
        let name = name_key
            .and_then(|k| log.fields.iter().find(|f| f.key == k))
            .and_then(|f| str_of(&f.value))
            .unwrap_or("");
        let vals: Vec<(&str, Value<'_>)> = log
            .fields
            .iter()
            .filter(|f| Some(f.key) != name_key)
            .map(|f| (f.key, value(&f.value)))
            .collect();
        sw.event(log.timestamp_ns as u64, name, vals.iter().map(|(k, v)| (*k, v)), 0);
    }
    for r in &s.references {
        if r.span_id == parent && !r.follows_from {
            continue;
        }
        let t = Value::Str(Cow::Borrowed(if r.follows_from { "follows_from" } else { "child_of" }));
        sw.link(
            &trace_id(r.trace_id_high, r.trace_id_low),
            &r.span_id.to_be_bytes(),
            "",
            [("opentracing.ref_type", &t)],
            0,
        );
    }
    if exists {
        sw.status(code, message);
    }
}

/// Whether `t` is the tag [`scope_of`] took for the scope (the first with its key; a version
/// only beside a name).
fn is_scope_tag(s: &Span<'_>, t: &Tag<'_>) -> bool {
    let first = s
        .tags
        .iter()
        .find(|x| x.key == t.key)
        .is_some_and(|x| std::ptr::eq(x, t));
    first && (t.key == "otel.scope.name" || s.tags.iter().any(|x| x.key == "otel.scope.name"))
}

/// The Collector's reading of an HTTP status code: 4xx fails a client span and not a server
/// span; otherwise anything outside 100..=398 fails (its `StatusCodeFromHTTP`).
fn http_status_fails(code: i64, k: u8) -> bool {
    match (code, k) {
        (400..=499, kind::CLIENT) => true,
        (400..=499, kind::SERVER) => false,
        (c, _) => !(100..399).contains(&c),
    }
}

/// Binary tags are bytes in OTLP; the writer's values have no bytes, so they are written here.
fn write_tag(sw: &mut crate::otlp::SpanWriter<'_>, t: &Tag<'_>) {
    match &t.value {
        TagValue::Binary(b) => {
            sw.bytes_attr(t.key, b);
        }
        v => {
            sw.attr(t.key, &value(v));
        }
    }
}

#[cfg(test)]
mod tests;
