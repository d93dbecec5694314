//! The span: recorded in place, moved to the export queue on end.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::Status;

use super::tracer::{push_event, push_link};
use super::{SpanData, SpanLimits, truncate_value};
use crate::context::{FullSpanContext, SpanContext};
use crate::export::{recycle_local, submit};
use crate::id::HexIds;
use crate::time::{now_unix_nanos, to_unix_nanos};
use crate::tracestate::TraceState;

/// The data of a recording span.
pub(crate) struct Recording {
    pub(crate) pipeline: u64,
    pub(crate) sampled: bool,
    pub(crate) limits: SpanLimits,
    pub(crate) data: Box<SpanData>,
}

/// What is computed only when asked for: the API span context and the hex IDs.
struct Derived {
    api: opentelemetry::trace::SpanContext,
    hex: HexIds,
}

/// A weft span, implementing `opentelemetry::trace::Span`.
///
/// A non-recording span (dropped by the sampler) holds only its context: creating and ending
/// it allocates nothing. A recording span writes into a record recycled from the export
/// pipeline and, when ended (explicitly or on drop), hands the record to the export queue
/// without blocking. The span itself stays small (about 100 bytes) because the `opentelemetry`
/// API moves it by value (bench `span_sampled_0_attrs`).
pub struct Span {
    context: SpanContext,
    trace_state: TraceState,
    derived: OnceLock<Box<Derived>>,
    recording: Option<Recording>,
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Span")
            .field("context", &self.context)
            .field("trace_state", &self.trace_state)
            .field("recording", &self.recording.is_some())
            .finish()
    }
}

impl Span {
    pub(crate) fn non_recording(context: SpanContext, trace_state: TraceState) -> Self {
        Span {
            context,
            trace_state,
            derived: OnceLock::new(),
            recording: None,
        }
    }

    pub(crate) fn recording(context: SpanContext, recording: Recording) -> Self {
        Span {
            context,
            trace_state: TraceState::EMPTY,
            derived: OnceLock::new(),
            recording: Some(recording),
        }
    }

    /// The span's context (IDs and flags), without tracestate.
    pub fn weft_context(&self) -> &SpanContext {
        &self.context
    }

    /// The span's tracestate.
    pub fn trace_state(&self) -> &TraceState {
        match &self.recording {
            Some(r) => &r.data.trace_state,
            None => &self.trace_state,
        }
    }

    /// The span's full context, as the propagators take it.
    ///
    /// To propagate on an outgoing request, inject the context of a new `SpanKind::Client` span
    /// started for that request (one per request, as a child of this span), not this span's own
    /// context: every request must carry its own parent-id (spec/propagation.md "Outgoing
    /// requests").
    pub fn full_context(&self) -> FullSpanContext {
        FullSpanContext::new(self.context, self.trace_state().clone())
    }

    fn derived(&self) -> &Derived {
        self.derived.get_or_init(|| {
            Box::new(Derived {
                api: self.context.to_otel(self.trace_state().to_otel()),
                hex: HexIds::new(self.context.trace_id, self.context.span_id),
            })
        })
    }

    /// The hex IDs, computed on the first call (together with the API span context) and cached.
    pub fn hex_ids(&self) -> &HexIds {
        &self.derived().hex
    }

    /// Read access to the data of a recording span.
    pub fn data(&self) -> Option<&SpanData> {
        self.recording.as_ref().map(|r| &*r.data)
    }

    fn finish(&mut self, end: u64) {
        if let Some(mut r) = self.recording.take() {
            r.data.end_time_unix_nano = end.max(r.data.start_time_unix_nano);
            if r.sampled {
                submit(r.pipeline, r.data);
            } else {
                recycle_local(r.pipeline, r.data);
            }
        }
    }
}

impl opentelemetry::trace::Span for Span {
    fn add_event_with_timestamp<T>(&mut self, name: T, timestamp: SystemTime, attributes: Vec<KeyValue>)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(r) = &mut self.recording {
            push_event(
                &mut r.data,
                &r.limits,
                name.into(),
                to_unix_nanos(timestamp),
                attributes,
                0,
            );
        }
    }

    fn add_event<T>(&mut self, name: T, attributes: Vec<KeyValue>)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(r) = &mut self.recording {
            let now = now_unix_nanos();
            push_event(&mut r.data, &r.limits, name.into(), now, attributes, 0);
        }
    }

    fn span_context(&self) -> &opentelemetry::trace::SpanContext {
        &self.derived().api
    }

    fn is_recording(&self) -> bool {
        self.recording.is_some()
    }

    #[inline]
    fn set_attribute(&mut self, mut attribute: KeyValue) {
        let Some(r) = &mut self.recording else { return };
        let attrs = &mut r.data.attributes;
        if attrs.len() >= r.limits.max_attributes_per_span as usize {
            r.data.dropped_attributes_count = r.data.dropped_attributes_count.saturating_add(1);
            return;
        }
        // The record was recycled with its vectors' capacity: no allocation per attribute once
        // the pool is warm (bench `span_sampled_10_attrs_1_event`).
        if let Some(max) = r.limits.max_attribute_value_length {
            truncate_value(&mut attribute.value, max);
        }
        attrs.push(attribute);
    }

    fn set_status(&mut self, status: Status) {
        let Some(r) = &mut self.recording else { return };
        match (&r.data.status, &status) {
            (Status::Ok, _) | (_, Status::Unset) => {}
            _ => r.data.status = status,
        }
    }

    fn update_name<T>(&mut self, new_name: T)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(r) = &mut self.recording {
            r.data.name = new_name.into();
        }
    }

    fn add_link(&mut self, span_context: opentelemetry::trace::SpanContext, attributes: Vec<KeyValue>) {
        if let Some(r) = &mut self.recording {
            push_link(&mut r.data, &r.limits, &span_context, attributes, 0);
        }
    }

    #[inline]
    fn end(&mut self) {
        if self.recording.is_some() {
            self.finish(now_unix_nanos());
        }
    }

    fn end_with_timestamp(&mut self, timestamp: SystemTime) {
        self.finish(to_unix_nanos(timestamp));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.recording.is_some() {
            self.finish(now_unix_nanos());
        }
    }
}
