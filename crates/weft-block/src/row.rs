//! One span as stored, and re-assembly of OTLP messages from stored spans.

use bytes::Bytes;
use weft_otlp::request::fields::*;
use weft_otlp::wire::{begin_nested, end_nested, put_bytes, put_fixed64, put_varint_field};

/// A stored span: the columns of a block row. Nested lists are their protobuf field bytes, so
/// re-encoding is a copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanRow {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// All zeros for a root span.
    pub parent_span_id: [u8; 8],
    pub name: String,
    pub kind: u8,
    pub start_unix_nano: u64,
    pub duration_nano: i64,
    pub status_code: u8,
    pub status_message: String,
    /// `ResourceSpans` fields other than `scope_spans`, encoded.
    pub resource: Bytes,
    /// `ScopeSpans` fields other than `spans`, encoded.
    pub scope: Bytes,
    /// The span's `attributes` fields (tag 9), encoded.
    pub attributes: Bytes,
    /// The span's `events` fields (tag 11), encoded.
    pub events: Bytes,
    /// The span's `links` fields (tag 13), encoded.
    pub links: Bytes,
    /// Every other span field (trace_state, flags, dropped counts, unknown fields), encoded.
    pub extra: Bytes,
}

/// The fields of a stored span that query prefilters test, borrowed from wherever the span is:
/// a [`SpanRow`], or one row of a row group's [`FilterColumns`](crate::FilterColumns).
pub trait SpanFields {
    fn name(&self) -> &[u8];
    fn start_unix_nano(&self) -> u64;
    fn duration_nano(&self) -> i64;
    fn status_code(&self) -> u8;
    fn kind(&self) -> u8;
    fn resource(&self) -> &[u8];
    fn scope(&self) -> &[u8];
    fn attributes(&self) -> &[u8];
    fn events(&self) -> &[u8];
    fn links(&self) -> &[u8];
    /// Whether the span has a parent span ID (a root span has none).
    fn has_parent(&self) -> bool;
    fn end_unix_nano(&self) -> u64 {
        self.start_unix_nano().wrapping_add(self.duration_nano() as u64)
    }
}

impl<T: SpanFields + ?Sized> SpanFields for &T {
    fn name(&self) -> &[u8] {
        (**self).name()
    }
    fn start_unix_nano(&self) -> u64 {
        (**self).start_unix_nano()
    }
    fn duration_nano(&self) -> i64 {
        (**self).duration_nano()
    }
    fn status_code(&self) -> u8 {
        (**self).status_code()
    }
    fn kind(&self) -> u8 {
        (**self).kind()
    }
    fn resource(&self) -> &[u8] {
        (**self).resource()
    }
    fn scope(&self) -> &[u8] {
        (**self).scope()
    }
    fn attributes(&self) -> &[u8] {
        (**self).attributes()
    }
    fn events(&self) -> &[u8] {
        (**self).events()
    }
    fn links(&self) -> &[u8] {
        (**self).links()
    }
    fn has_parent(&self) -> bool {
        (**self).has_parent()
    }
}

impl SpanFields for SpanRow {
    fn name(&self) -> &[u8] {
        self.name.as_bytes()
    }
    fn start_unix_nano(&self) -> u64 {
        self.start_unix_nano
    }
    fn duration_nano(&self) -> i64 {
        self.duration_nano
    }
    fn status_code(&self) -> u8 {
        self.status_code
    }
    fn kind(&self) -> u8 {
        self.kind
    }
    fn resource(&self) -> &[u8] {
        &self.resource
    }
    fn scope(&self) -> &[u8] {
        &self.scope
    }
    fn attributes(&self) -> &[u8] {
        &self.attributes
    }
    fn events(&self) -> &[u8] {
        &self.events
    }
    fn links(&self) -> &[u8] {
        &self.links
    }
    fn has_parent(&self) -> bool {
        self.parent_span_id != [0; 8]
    }
}

impl SpanRow {
    pub fn end_unix_nano(&self) -> u64 {
        self.start_unix_nano.wrapping_add(self.duration_nano as u64)
    }

    /// Appends this span as an encoded `Span` message body.
    pub fn encode_span(&self, out: &mut Vec<u8>) {
        put_bytes(out, SPAN_TRACE_ID, &self.trace_id);
        put_bytes(out, SPAN_SPAN_ID, &self.span_id);
        if self.parent_span_id != [0; 8] {
            put_bytes(out, SPAN_PARENT_SPAN_ID, &self.parent_span_id);
        }
        if !self.name.is_empty() {
            put_bytes(out, SPAN_NAME, self.name.as_bytes());
        }
        if self.kind != 0 {
            put_varint_field(out, SPAN_KIND, u64::from(self.kind));
        }
        put_fixed64(out, SPAN_START, self.start_unix_nano);
        put_fixed64(out, SPAN_END, self.end_unix_nano());
        out.extend_from_slice(&self.attributes);
        out.extend_from_slice(&self.events);
        out.extend_from_slice(&self.links);
        out.extend_from_slice(&self.extra);
        if self.status_code != 0 || !self.status_message.is_empty() {
            let at = begin_nested(out, SPAN_STATUS);
            if !self.status_message.is_empty() {
                put_bytes(out, STATUS_MESSAGE, self.status_message.as_bytes());
            }
            if self.status_code != 0 {
                put_varint_field(out, STATUS_CODE, u64::from(self.status_code));
            }
            end_nested(out, at);
        }
    }
}

/// Removes duplicate spans (same span ID, e.g. from a client retry), keeping the first, and
/// orders the rest by start time.
pub fn dedup_spans(rows: &mut Vec<SpanRow>) {
    rows.sort_by_key(|a| (a.start_unix_nano, a.span_id));
    let mut seen = std::collections::HashSet::with_capacity(rows.len());
    rows.retain(|r| seen.insert(r.span_id));
}

/// Encodes spans as a `TracesData` message (field 1: repeated `ResourceSpans`), grouping spans
/// that share a resource and scope. This is also the wire form of Tempo's `Trace` message and of
/// an OTLP export request.
pub fn encode_traces_data(rows: &[SpanRow]) -> Vec<u8> {
    // Group by resource, then scope, keeping first-seen order.
    type Scopes<'a> = Vec<(&'a Bytes, Vec<&'a SpanRow>)>;
    let mut groups: Vec<(&Bytes, Scopes)> = Vec::new();
    for r in rows {
        let gi = match groups.iter().position(|(res, _)| *res == &r.resource) {
            Some(i) => i,
            None => {
                groups.push((&r.resource, Vec::new()));
                groups.len() - 1
            }
        };
        let scopes = &mut groups[gi].1;
        match scopes.iter_mut().find(|(s, _)| *s == &r.scope) {
            Some((_, v)) => v.push(r),
            None => scopes.push((&r.scope, vec![r])),
        }
    }
    let mut out = Vec::with_capacity(rows.len() * 256);
    for (res, scopes) in groups {
        let rs_at = begin_nested(&mut out, REQ_RESOURCE_SPANS);
        out.extend_from_slice(res);
        for (scope, spans) in scopes {
            let ss_at = begin_nested(&mut out, RS_SCOPE_SPANS);
            out.extend_from_slice(scope);
            for s in spans {
                let sp_at = begin_nested(&mut out, SS_SPANS);
                s.encode_span(&mut out);
                end_nested(&mut out, sp_at);
            }
            end_nested(&mut out, ss_at);
        }
        end_nested(&mut out, rs_at);
    }
    out
}
