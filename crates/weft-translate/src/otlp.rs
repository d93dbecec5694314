//! Writes OTLP `ExportTraceServiceRequest` bytes directly, without building a message tree:
//! the translators borrow strings from the payload they parse, and each span is encoded once.

use std::borrow::Cow;
use weft_otlp::wire::{begin_nested, end_nested, put_bytes, put_fixed64, put_tag, put_varint_field};

/// An attribute value as the translators produce it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Double(f64),
    Bool(bool),
    /// An array (X-Ray's lists of annotation keys and log groups).
    Array(Vec<Value<'a>>),
}

/// The length of a value's `AnyValue` message body.
fn any_len(value: &Value<'_>) -> usize {
    use weft_otlp::wire::varint_len;
    match value {
        Value::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
        Value::Bool(_) => 2,
        Value::Int(i) => 1 + varint_len(*i as u64),
        Value::Double(_) => 9,
        Value::Array(a) => {
            let n = array_len(a);
            1 + varint_len(n as u64) + n
        }
    }
}

/// The length of an `ArrayValue` message body.
fn array_len(a: &[Value<'_>]) -> usize {
    use weft_otlp::wire::varint_len;
    a.iter()
        .map(|v| {
            let l = any_len(v);
            1 + varint_len(l as u64) + l
        })
        .sum()
}

/// Writes a value's `AnyValue` message body.
fn put_any(out: &mut Vec<u8>, value: &Value<'_>) {
    use weft_otlp::wire::put_varint;
    match value {
        Value::Str(s) => put_bytes(out, 1, s.as_bytes()),
        Value::Bool(b) => put_varint_field(out, 2, u64::from(*b)),
        Value::Int(i) => put_varint_field(out, 3, *i as u64),
        Value::Double(d) => put_fixed64(out, 4, d.to_bits()),
        Value::Array(a) => {
            put_tag(out, 5, 2);
            put_varint(out, array_len(a) as u64);
            for v in a {
                put_tag(out, 1, 2);
                put_varint(out, any_len(v) as u64);
                put_any(out, v);
            }
        }
    }
}

/// OTLP span kinds (`Span.SpanKind`).
pub mod kind {
    pub const UNSPECIFIED: u8 = 0;
    pub const INTERNAL: u8 = 1;
    pub const SERVER: u8 = 2;
    pub const CLIENT: u8 = 3;
    pub const PRODUCER: u8 = 4;
    pub const CONSUMER: u8 = 5;
}

/// OTLP status codes (`Status.StatusCode`).
pub mod status {
    pub const UNSET: u8 = 0;
    pub const OK: u8 = 1;
    pub const ERROR: u8 = 2;
}

/// Appends one `KeyValue` as field `field` of the message being written. Lengths are computed
/// first and written exactly: a padded length (as [`begin_nested`] writes) costs 4 bytes per
/// message, which for the ten small attributes of a typical span was a third of its size.
pub fn put_attr(out: &mut Vec<u8>, field: u32, key: &str, value: &Value<'_>) {
    use weft_otlp::wire::{put_varint, varint_len};
    // AnyValue's one field: its tag byte plus the value.
    let any_len = any_len(value);
    let kv_len = 1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any_len as u64) + any_len;
    out.reserve(kv_len + 6);
    put_tag(out, field, 2);
    put_varint(out, kv_len as u64);
    put_bytes(out, 1, key.as_bytes());
    put_tag(out, 2, 2);
    put_varint(out, any_len as u64);
    put_any(out, value);
}

/// Writes a request of resources, each holding scopes, each holding spans, in the order they
/// are opened. Usage: `resource`, its attributes, then per scope `scope` and `span`s.
pub struct RequestWriter {
    out: Vec<u8>,
    resource: Option<usize>,
    scope: Option<usize>,
}

impl RequestWriter {
    pub fn with_capacity(n: usize) -> Self {
        RequestWriter {
            out: Vec::with_capacity(n),
            resource: None,
            scope: None,
        }
    }

    fn close_scope(&mut self) {
        if let Some(at) = self.scope.take() {
            end_nested(&mut self.out, at);
        }
    }

    fn close_resource(&mut self) {
        self.close_scope();
        if let Some(at) = self.resource.take() {
            end_nested(&mut self.out, at);
        }
    }

    /// Opens a `ResourceSpans` with these resource attributes.
    pub fn resource<'a>(&mut self, attrs: impl IntoIterator<Item = (&'a str, &'a Value<'a>)>) {
        self.close_resource();
        self.resource = Some(begin_nested(&mut self.out, 1));
        let res = begin_nested(&mut self.out, 1);
        for (k, v) in attrs {
            put_attr(&mut self.out, 1, k, v);
        }
        end_nested(&mut self.out, res);
    }

    /// Opens a `ScopeSpans` in the current resource.
    pub fn scope(&mut self, name: &str, version: &str) {
        self.close_scope();
        debug_assert!(self.resource.is_some(), "scope outside a resource");
        self.scope = Some(begin_nested(&mut self.out, 2));
        let sc = begin_nested(&mut self.out, 1);
        if !name.is_empty() {
            put_bytes(&mut self.out, 1, name.as_bytes());
        }
        if !version.is_empty() {
            put_bytes(&mut self.out, 2, version.as_bytes());
        }
        end_nested(&mut self.out, sc);
    }

    /// Starts a span in the current scope; write its fields with the returned writer.
    pub fn span(&mut self) -> SpanWriter<'_> {
        debug_assert!(self.scope.is_some(), "span outside a scope");
        let at = begin_nested(&mut self.out, 2);
        SpanWriter { out: &mut self.out, at }
    }

    /// The encoded request.
    pub fn finish(mut self) -> Vec<u8> {
        self.close_resource();
        self.out
    }
}

/// Writes one span's fields; the span is closed when the writer is dropped. Fields must be
/// written in any order protobuf allows (all of them are optional).
pub struct SpanWriter<'w> {
    out: &'w mut Vec<u8>,
    at: usize,
}

impl SpanWriter<'_> {
    pub fn ids(&mut self, trace_id: &[u8; 16], span_id: &[u8; 8], parent: Option<&[u8; 8]>) -> &mut Self {
        put_bytes(self.out, 1, trace_id);
        put_bytes(self.out, 2, span_id);
        if let Some(p) = parent {
            put_bytes(self.out, 4, p);
        }
        self
    }

    pub fn trace_state(&mut self, ts: &str) -> &mut Self {
        if !ts.is_empty() {
            put_bytes(self.out, 3, ts.as_bytes());
        }
        self
    }

    pub fn name(&mut self, name: &str) -> &mut Self {
        put_bytes(self.out, 5, name.as_bytes());
        self
    }

    pub fn kind(&mut self, kind: u8) -> &mut Self {
        if kind != 0 {
            put_varint_field(self.out, 6, u64::from(kind));
        }
        self
    }

    pub fn times(&mut self, start_ns: u64, end_ns: u64) -> &mut Self {
        put_fixed64(self.out, 7, start_ns);
        put_fixed64(self.out, 8, end_ns);
        self
    }

    pub fn attr(&mut self, key: &str, value: &Value<'_>) -> &mut Self {
        put_attr(self.out, 9, key, value);
        self
    }

    /// An attribute whose value is bytes (`AnyValue.bytes_value`).
    pub fn bytes_attr(&mut self, key: &str, value: &[u8]) -> &mut Self {
        let kv = begin_nested(self.out, 9);
        put_bytes(self.out, 1, key.as_bytes());
        let any = begin_nested(self.out, 2);
        put_bytes(self.out, 7, value);
        end_nested(self.out, any);
        end_nested(self.out, kv);
        self
    }

    pub fn str_attr(&mut self, key: &str, value: &str) -> &mut Self {
        self.attr(key, &Value::Str(Cow::Borrowed(value)))
    }

    /// Adds an event with attributes (`dropped`: its dropped attribute count).
    pub fn event<'a>(
        &mut self,
        time_ns: u64,
        name: &str,
        attrs: impl IntoIterator<Item = (&'a str, &'a Value<'a>)>,
        dropped: u32,
    ) -> &mut Self {
        let mut attrs = attrs.into_iter().peekable();
        if attrs.peek().is_none() && dropped == 0 {
            // Most events are a time and a name: written with their exact length.
            use weft_otlp::wire::{put_varint, varint_len};
            let len = 9 + 1 + varint_len(name.len() as u64) + name.len();
            put_tag(self.out, 11, 2);
            put_varint(self.out, len as u64);
            put_fixed64(self.out, 1, time_ns);
            put_bytes(self.out, 2, name.as_bytes());
            return self;
        }
        let ev = begin_nested(self.out, 11);
        put_fixed64(self.out, 1, time_ns);
        put_bytes(self.out, 2, name.as_bytes());
        for (k, v) in attrs {
            put_attr(self.out, 3, k, v);
        }
        if dropped > 0 {
            put_varint_field(self.out, 4, u64::from(dropped));
        }
        end_nested(self.out, ev);
        self
    }

    /// Adds a link.
    pub fn link<'a>(
        &mut self,
        trace_id: &[u8; 16],
        span_id: &[u8; 8],
        trace_state: &str,
        attrs: impl IntoIterator<Item = (&'a str, &'a Value<'a>)>,
        dropped: u32,
    ) -> &mut Self {
        let l = begin_nested(self.out, 13);
        put_bytes(self.out, 1, trace_id);
        put_bytes(self.out, 2, span_id);
        if !trace_state.is_empty() {
            put_bytes(self.out, 3, trace_state.as_bytes());
        }
        for (k, v) in attrs {
            put_attr(self.out, 4, k, v);
        }
        if dropped > 0 {
            put_varint_field(self.out, 5, u64::from(dropped));
        }
        end_nested(self.out, l);
        self
    }

    pub fn status(&mut self, code: u8, message: &str) -> &mut Self {
        if code == 0 && message.is_empty() {
            return self;
        }
        let st = begin_nested(self.out, 15);
        if !message.is_empty() {
            put_bytes(self.out, 2, message.as_bytes());
        }
        if code != 0 {
            put_varint_field(self.out, 3, u64::from(code));
        }
        end_nested(self.out, st);
        self
    }

    /// `Span.flags` (fixed32): the W3C trace flags in the low byte.
    pub fn flags(&mut self, flags: u32) -> &mut Self {
        put_tag(self.out, 16, 5);
        self.out.extend_from_slice(&flags.to_le_bytes());
        self
    }
}

impl Drop for SpanWriter<'_> {
    fn drop(&mut self) {
        end_nested(self.out, self.at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;

    #[test]
    fn writes_what_prost_reads() {
        let mut w = RequestWriter::with_capacity(64);
        let svc = Value::Str("checkout".into());
        w.resource([("service.name", &svc)]);
        w.scope("lib", "1.0");
        w.span()
            .ids(&[1; 16], &[2; 8], Some(&[3; 8]))
            .name("GET /x")
            .kind(kind::SERVER)
            .times(10, 30)
            .attr("n", &Value::Int(-5))
            .attr("d", &Value::Double(1.5))
            .attr("b", &Value::Bool(true))
            .event(20, "ev", [("k", &Value::Str("v".into()))], 1)
            .link(&[4; 16], &[5; 8], "a=b", [], 0)
            .status(status::ERROR, "boom")
            .trace_state("x=y");
        w.scope("", "");
        w.span().ids(&[1; 16], &[6; 8], None).name("second").times(1, 2);
        let req = ExportTraceServiceRequest::decode(&w.finish()[..]).unwrap();
        let rs = &req.resource_spans[0];
        assert_eq!(rs.scope_spans.len(), 2);
        let s = &rs.scope_spans[0].spans[0];
        assert_eq!(s.name, "GET /x");
        assert_eq!(s.kind, 2);
        assert_eq!(s.parent_span_id, vec![3; 8]);
        assert_eq!(s.end_time_unix_nano, 30);
        assert_eq!(s.attributes.len(), 3);
        assert_eq!(s.events[0].dropped_attributes_count, 1);
        assert_eq!(s.links[0].trace_state, "a=b");
        assert_eq!(s.status.as_ref().unwrap().message, "boom");
        assert_eq!(s.trace_state, "x=y");
        assert_eq!(rs.scope_spans[1].spans[0].name, "second");
        assert_eq!(rs.scope_spans[0].scope.as_ref().unwrap().version, "1.0");
    }
}
