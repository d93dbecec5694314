//! Jaeger: `jaeger.thrift` batches in (the collector's `POST /api/traces`, binary protocol; the
//! agent's UDP ports, `emitBatch` in the compact or binary protocol, and `emitZipkinBatch`),
//! written as OTLP by the OpenTelemetry Collector's Jaeger translator (`jaeger.ThriftToTraces`),
//! except where `spec/formats/jaeger.md` says otherwise.

use std::borrow::Cow;

pub mod ui;

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
    /// Microseconds.
    pub timestamp: i64,
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
    /// Microseconds.
    pub start_time: i64,
    /// Microseconds.
    pub duration: i64,
    pub tags: Vec<Tag<'a>>,
    pub logs: Vec<Log<'a>>,
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

fn span<'a>(r: &mut Reader<'a>) -> Result<Span<'a>, TranslateError> {
    let mut s = Span::default();
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
            (8, Type::I64) => s.start_time = r.i64()?,
            (9, Type::I64) => s.duration = r.i64()?,
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
                            (1, Type::I64) => log.timestamp = r.i64()?,
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
    Ok(s)
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
                    let s = span(r).map_err(|e| TranslateError::new(format!("span {i}: {e}")))?;
                    b.spans.push(s);
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

/// Writes a Jaeger batch as one OTLP request: the process is the resource (`hostname` as
/// `host.name`, `jaeger.version` as `opencensus.exporterversion`), the spans in one scope.
pub fn to_otlp(b: &Batch<'_>) -> Vec<u8> {
    let mut w = RequestWriter::with_capacity(b.spans.len() * 256 + 64);
    let svc = Value::Str(Cow::Borrowed(b.process.service_name));
    let has = |k: &str| b.process.tags.iter().any(|t| t.key == k);
    let jaeger_version = b
        .process
        .tags
        .iter()
        .find(|t| t.key == "jaeger.version")
        .and_then(|t| str_of(&t.value));
    let exporter = jaeger_version.map(|v| Value::Str(Cow::Owned(format!("Jaeger-{v}"))));
    let mut res: Vec<(&str, Value<'_>)> = Vec::with_capacity(b.process.tags.len() + 1);
    if !b.process.service_name.is_empty() {
        res.push(("service.name", svc.clone()));
    }
    for t in &b.process.tags {
        let key = match t.key {
            "hostname" if !has("host.name") => "host.name",
            "jaeger.version" if !has("opencensus.exporterversion") && exporter.is_some() => continue,
            k => k,
        };
        res.push((key, value(&t.value)));
    }
    if let Some(e) = &exporter
        && !has("opencensus.exporterversion")
    {
        res.push(("opencensus.exporterversion", e.clone()));
    }
    w.resource(res.iter().map(|(k, v)| (*k, v)));

    // One scope, as the Collector's ThriftToTraces: `otel.scope.*`/`otel.library.*` tags stay
    // attributes (Jaeger shows them as they were sent).
    w.scope("", "");
    for s in &b.spans {
        write_span(&mut w, s);
    }
    w.finish()
}

fn write_span(w: &mut RequestWriter, s: &Span<'_>) {
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
    let start = (s.start_time as u64).wrapping_mul(1000);
    sw.times(start, (s.start_time.wrapping_add(s.duration) as u64).wrapping_mul(1000));

    // Status, as the Collector: `error=true` first, then `otel.status_code`, then an HTTP
    // status code (5xx on servers, 4xx and 5xx on clients).
    let (mut code, mut message, mut exists) = (status::UNSET, "", false);
    let desc = find("otel.status_description").and_then(str_of);
    let error_true = matches!(find("error"), Some(TagValue::Bool(true)));
    if error_true {
        code = status::ERROR;
        exists = true;
        message = desc.unwrap_or("");
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
            let failed = match k {
                kind::CLIENT => (400..600).contains(&h),
                _ => (500..600).contains(&h),
            };
            if failed {
                code = status::ERROR;
                exists = true;
            }
        }
    }
    for t in &s.tags {
        let drop = match t.key {
            "span.kind" => true,
            "error" => error_true,
            "otel.status_code" => true,
            "otel.status_description" => error_true || otel_code.is_some(),
            "w3c.tracestate" => true,
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
        sw.event(
            (log.timestamp as u64).wrapping_mul(1000),
            name,
            vals.iter().map(|(k, v)| (*k, v)),
            0,
        );
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
