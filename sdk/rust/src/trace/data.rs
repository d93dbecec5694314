//! Finished-span records and span limits.

use std::borrow::Cow;

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};

use crate::context::SpanContext;
use crate::id::{SpanId, TraceId};
use crate::tracestate::TraceState;

/// A finished span, as queued for export. Timestamps are Unix nanoseconds.
///
/// `A` is the attribute type: the `opentelemetry` [`KeyValue`] for spans made through the API,
/// or [`crate::otlp::AnyKeyValue`] when the full OTLP value model (maps, bytes, mixed arrays) is
/// needed.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanData<A = KeyValue> {
    /// Trace ID.
    pub trace_id: TraceId,
    /// Span ID.
    pub span_id: SpanId,
    /// Parent span ID; [`SpanId::INVALID`] for a root span.
    pub parent_span_id: SpanId,
    /// W3C trace flags of the span's context.
    pub trace_flags: u8,
    /// Whether the parent context was remote.
    pub parent_is_remote: bool,
    /// The span's tracestate.
    pub trace_state: TraceState,
    /// Span name.
    pub name: Cow<'static, str>,
    /// Span kind.
    pub kind: SpanKind,
    /// Start time.
    pub start_time_unix_nano: u64,
    /// End time.
    pub end_time_unix_nano: u64,
    /// Attributes, in the order they were set.
    pub attributes: Vec<A>,
    /// Attributes discarded by the count limit.
    pub dropped_attributes_count: u32,
    /// Events.
    pub events: Vec<EventData<A>>,
    /// Events discarded by the count limit.
    pub dropped_events_count: u32,
    /// Links.
    pub links: Vec<LinkData<A>>,
    /// Links discarded by the count limit.
    pub dropped_links_count: u32,
    /// Status.
    pub status: Status,
    /// Index of the instrumentation scope in the provider's scope table.
    pub scope: u32,
}

impl<A> SpanData<A> {
    /// Returns an empty record for the given IDs (no attributes, kind INTERNAL, status unset).
    pub fn new(trace_id: TraceId, span_id: SpanId, name: impl Into<Cow<'static, str>>) -> Self {
        SpanData {
            trace_id,
            span_id,
            parent_span_id: SpanId::INVALID,
            trace_flags: 0,
            parent_is_remote: false,
            trace_state: TraceState::EMPTY,
            name: name.into(),
            kind: SpanKind::Internal,
            start_time_unix_nano: 0,
            end_time_unix_nano: 0,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Vec::new(),
            dropped_events_count: 0,
            links: Vec::new(),
            dropped_links_count: 0,
            status: Status::Unset,
            scope: 0,
        }
    }

    /// The span's own context.
    pub fn span_context(&self) -> SpanContext {
        SpanContext::new(self.trace_id, self.span_id, self.trace_flags, false)
    }

    /// Clears the record for reuse, keeping the capacity of its vectors unless it is larger than
    /// `max_capacity`.
    pub fn reset(&mut self, max_capacity: usize) {
        fn clear<T>(v: &mut Vec<T>, max: usize) {
            if v.capacity() > max {
                *v = Vec::new();
            } else {
                v.clear();
            }
        }
        clear(&mut self.attributes, max_capacity);
        clear(&mut self.events, max_capacity);
        clear(&mut self.links, max_capacity);
        self.trace_state = TraceState::EMPTY;
        self.name = Cow::Borrowed("");
        self.status = Status::Unset;
        self.dropped_attributes_count = 0;
        self.dropped_events_count = 0;
        self.dropped_links_count = 0;
        self.parent_span_id = SpanId::INVALID;
        self.parent_is_remote = false;
    }
}

impl<A> AsRef<SpanData<A>> for SpanData<A> {
    fn as_ref(&self) -> &SpanData<A> {
        self
    }
}

/// A span event.
#[derive(Clone, Debug, PartialEq)]
pub struct EventData<A = KeyValue> {
    /// Event name.
    pub name: Cow<'static, str>,
    /// Event time.
    pub time_unix_nano: u64,
    /// Attributes.
    pub attributes: Vec<A>,
    /// Attributes discarded by the per-event limit.
    pub dropped_attributes_count: u32,
}

/// A link to another span.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkData<A = KeyValue> {
    /// The linked context (its `is_remote` is exported in the link flags).
    pub context: SpanContext,
    /// The linked context's tracestate.
    pub trace_state: TraceState,
    /// Attributes.
    pub attributes: Vec<A>,
    /// Attributes discarded by the per-link limit.
    pub dropped_attributes_count: u32,
}

/// Span limits. Whatever a limit discards is counted in the span's `dropped_*` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanLimits {
    /// Most attributes per span (128).
    pub max_attributes_per_span: u32,
    /// Longest string attribute value in bytes (cut at a UTF-8 boundary); `None` is unlimited.
    pub max_attribute_value_length: Option<u32>,
    /// Most events per span (128).
    pub max_events_per_span: u32,
    /// Most links per span (128).
    pub max_links_per_span: u32,
    /// Most attributes per event (128).
    pub max_attributes_per_event: u32,
    /// Most attributes per link (128).
    pub max_attributes_per_link: u32,
}

impl Default for SpanLimits {
    fn default() -> Self {
        SpanLimits {
            max_attributes_per_span: 128,
            max_attribute_value_length: None,
            max_events_per_span: 128,
            max_links_per_span: 128,
            max_attributes_per_event: 128,
            max_attributes_per_link: 128,
        }
    }
}

impl SpanLimits {
    /// Reads `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`, `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`
    /// (falling back to the `OTEL_ATTRIBUTE_*` general limits), `OTEL_SPAN_EVENT_COUNT_LIMIT`,
    /// `OTEL_SPAN_LINK_COUNT_LIMIT`, `OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT` and
    /// `OTEL_LINK_ATTRIBUTE_COUNT_LIMIT`; unset or unparsable values keep the defaults.
    pub fn from_env() -> Self {
        fn var(names: &[&str]) -> Option<u32> {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok().and_then(|v| v.trim().parse().ok()))
        }
        let d = SpanLimits::default();
        SpanLimits {
            max_attributes_per_span: var(&["OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"])
                .unwrap_or(d.max_attributes_per_span),
            max_attribute_value_length: var(&[
                "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
            ]),
            max_events_per_span: var(&["OTEL_SPAN_EVENT_COUNT_LIMIT"]).unwrap_or(d.max_events_per_span),
            max_links_per_span: var(&["OTEL_SPAN_LINK_COUNT_LIMIT"]).unwrap_or(d.max_links_per_span),
            max_attributes_per_event: var(&["OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT"]).unwrap_or(d.max_attributes_per_event),
            max_attributes_per_link: var(&["OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"]).unwrap_or(d.max_attributes_per_link),
        }
    }
}

fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts string values (and string array elements) longer than `max` bytes. Allocates only for
/// a value that is actually cut.
pub fn truncate_value(v: &mut Value, max: u32) {
    let max = max as usize;
    match v {
        Value::String(s) if s.as_str().len() > max => {
            *s = truncate_str(s.as_str(), max).to_owned().into();
        }
        Value::Array(opentelemetry::Array::String(items)) => {
            for s in items.iter_mut() {
                if s.as_str().len() > max {
                    *s = truncate_str(s.as_str(), max).to_owned().into();
                }
            }
        }
        _ => {}
    }
}

/// Applies a count limit and the value length limit to a list of attributes in place; returns
/// how many were dropped.
pub fn limit_attributes(attrs: &mut Vec<KeyValue>, max_count: u32, max_len: Option<u32>) -> u32 {
    let mut dropped = 0;
    if attrs.len() > max_count as usize {
        dropped = (attrs.len() - max_count as usize) as u32;
        attrs.truncate(max_count as usize);
    }
    if let Some(max) = max_len {
        for kv in attrs.iter_mut() {
            truncate_value(&mut kv.value, max);
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_and_cut_at_char_boundaries() {
        let mut attrs = vec![
            KeyValue::new("a", "héllo"),
            KeyValue::new(
                "b",
                Value::Array(vec![opentelemetry::StringValue::from("abcdef")].into()),
            ),
            KeyValue::new("c", 1),
        ];
        assert_eq!(limit_attributes(&mut attrs, 2, Some(2)), 1);
        assert_eq!(attrs[0].value.as_str(), "h");
        assert_eq!(
            attrs[1].value,
            Value::Array(vec![opentelemetry::StringValue::from("ab")].into())
        );
    }
}
