//! The tracer: span creation (sampling, IDs, limits).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{SpanBuilder, SpanKind, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use super::provider::ProviderInner;
use super::span::{Recording, Span};
use super::{EventData, LinkData, SpanData, limit_attributes};
use crate::context::{FullSpanContext, SpanContext};
use crate::export::take_span_data;
use crate::id::{SpanId, new_span_flags};
use crate::propagation::SpanExtras;
use crate::sampling::{ParentRef, SamplingParams};
use crate::time::{now_unix_nanos, to_unix_nanos};
use crate::tracestate::TraceState;

/// A tracer for one instrumentation scope. Cheap to clone.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<ProviderInner>,
    scope: u32,
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracer").field("scope", &self.scope).finish()
    }
}

/// The parent of a new span as seen in a `Context`.
pub(crate) struct Parent {
    pub(crate) context: SpanContext,
    pub(crate) trace_state: TraceState,
}

/// Reads the parent span context (and the weft extras that belong to it) from `cx`.
#[inline]
pub(crate) fn parent_of(cx: &Context) -> Option<Parent> {
    if !cx.has_active_span() {
        return None;
    }
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let context = SpanContext::from_otel(sc);
    let trace_state = match cx.get::<SpanExtras>() {
        Some(e) if e.trace_id == context.trace_id && e.span_id == context.span_id => e.trace_state.clone(),
        _ => TraceState::from_otel(sc.trace_state()),
    };
    Some(Parent { context, trace_state })
}

impl Tracer {
    pub(crate) fn new(inner: Arc<ProviderInner>, scope: u32) -> Self {
        Tracer { inner, scope }
    }

    /// Starts a span under `parent` (or a new trace) without going through a `Context`.
    /// `attributes` are subject to the span limits.
    pub fn start_with_parent(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&FullSpanContext>,
        attributes: Vec<KeyValue>,
    ) -> Span {
        let parent = parent.filter(|p| p.context.is_valid()).map(|p| Parent {
            context: p.context,
            trace_state: p.trace_state.clone(),
        });
        self.build(name.into(), kind, parent, attributes, Vec::new(), Vec::new(), None)
    }

    /// Starts a span with every option the language APIs have: parent (or a new trace), kind,
    /// attributes, links and an explicit start time in Unix nanoseconds. Attributes and links are
    /// subject to the span limits.
    pub fn start_with_options(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&FullSpanContext>,
        attributes: Vec<KeyValue>,
        links: Vec<opentelemetry::trace::Link>,
        start_time_unix_nano: Option<u64>,
    ) -> Span {
        let parent = parent.filter(|p| p.context.is_valid()).map(|p| Parent {
            context: p.context,
            trace_state: p.trace_state.clone(),
        });
        self.build(
            name.into(),
            kind,
            parent,
            attributes,
            Vec::new(),
            links,
            start_time_unix_nano,
        )
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn build(
        &self,
        name: Cow<'static, str>,
        kind: SpanKind,
        parent: Option<Parent>,
        mut attributes: Vec<KeyValue>,
        events: Vec<opentelemetry::trace::Event>,
        links: Vec<opentelemetry::trace::Link>,
        start_time: Option<u64>,
    ) -> Span {
        let inner = &*self.inner;
        let trace_id = match &parent {
            Some(p) => p.context.trace_id,
            None => inner.ids.trace_id(),
        };
        let result = inner.sampler.should_sample(&SamplingParams {
            parent: parent.as_ref().map(|p| ParentRef {
                context: p.context,
                trace_state: &p.trace_state,
            }),
            trace_id,
            name: &name,
            kind: &kind,
            attributes: &attributes,
            links: &links,
        });
        let span_id = inner.ids.span_id();
        let flags = new_span_flags(
            parent.as_ref().map(|p| p.context.trace_flags),
            result.decision.is_sampled(),
            inner.ids.sets_random_flag(),
        );
        let (parent_span_id, parent_is_remote, parent_state) = match parent {
            Some(p) => (p.context.span_id, p.context.is_remote, p.trace_state),
            None => (SpanId::INVALID, false, TraceState::EMPTY),
        };
        let trace_state = result.trace_state.unwrap_or(parent_state);
        let context = SpanContext::new(trace_id, span_id, flags, false);
        if !result.decision.is_recording() {
            return Span::non_recording(context, trace_state);
        }

        let limits = inner.limits;
        let pipeline = inner.pipeline.id;
        let mut data = take_span_data(pipeline);
        if !attributes.is_empty() {
            data.dropped_attributes_count = limit_attributes(
                &mut attributes,
                limits.max_attributes_per_span,
                limits.max_attribute_value_length,
            );
            // Keep the caller's allocation rather than copying into the recycled one.
            data.attributes = attributes;
        }
        data.trace_id = trace_id;
        data.span_id = span_id;
        data.parent_span_id = parent_span_id;
        data.trace_flags = flags;
        data.parent_is_remote = parent_is_remote;
        data.trace_state = trace_state;
        data.name = name;
        data.kind = kind;
        data.start_time_unix_nano = start_time.unwrap_or_else(now_unix_nanos);
        data.end_time_unix_nano = 0;
        data.scope = self.scope;
        if !events.is_empty() {
            for e in events {
                push_event(
                    &mut data,
                    &limits,
                    e.name,
                    to_unix_nanos(e.timestamp),
                    e.attributes,
                    e.dropped_attributes_count,
                );
            }
        }
        if !links.is_empty() {
            for l in links {
                push_link(
                    &mut data,
                    &limits,
                    &l.span_context,
                    l.attributes,
                    l.dropped_attributes_count,
                );
            }
        }
        Span::recording(
            context,
            Recording {
                pipeline,
                sampled: result.decision.is_sampled(),
                limits,
                data,
            },
        )
    }
}

pub(crate) fn push_event(
    data: &mut SpanData,
    limits: &super::SpanLimits,
    name: Cow<'static, str>,
    time: u64,
    mut attributes: Vec<KeyValue>,
    already_dropped: u32,
) {
    if data.events.len() >= limits.max_events_per_span as usize {
        data.dropped_events_count = data.dropped_events_count.saturating_add(1);
        return;
    }
    let dropped = limit_attributes(
        &mut attributes,
        limits.max_attributes_per_event,
        limits.max_attribute_value_length,
    );
    data.events.push(EventData {
        name,
        time_unix_nano: time,
        attributes,
        dropped_attributes_count: dropped.saturating_add(already_dropped),
    });
}

pub(crate) fn push_link(
    data: &mut SpanData,
    limits: &super::SpanLimits,
    sc: &opentelemetry::trace::SpanContext,
    mut attributes: Vec<KeyValue>,
    already_dropped: u32,
) {
    if !sc.is_valid() {
        return;
    }
    if data.links.len() >= limits.max_links_per_span as usize {
        data.dropped_links_count = data.dropped_links_count.saturating_add(1);
        return;
    }
    let dropped = limit_attributes(
        &mut attributes,
        limits.max_attributes_per_link,
        limits.max_attribute_value_length,
    );
    data.links.push(LinkData {
        context: SpanContext::from_otel(sc),
        trace_state: TraceState::from_otel(sc.trace_state()),
        attributes,
        dropped_attributes_count: dropped.saturating_add(already_dropped),
    });
}

impl opentelemetry::trace::Tracer for Tracer {
    type Span = Span;

    // `start` and `start_with_context` are overridden so that only the parent (a few words)
    // crosses the thread-local `Context` closure and no `SpanBuilder` is built: the span is
    // constructed once, in the caller's frame (bench `span_unsampled`).
    #[inline]
    fn start<T>(&self, name: T) -> Span
    where
        T: Into<Cow<'static, str>>,
    {
        let parent = Context::map_current(parent_of);
        self.build(
            name.into(),
            SpanKind::Internal,
            parent,
            Vec::new(),
            Vec::new(),
            Vec::new(),
            None,
        )
    }

    #[inline]
    fn start_with_context<T>(&self, name: T, parent_cx: &Context) -> Span
    where
        T: Into<Cow<'static, str>>,
    {
        self.build(
            name.into(),
            SpanKind::Internal,
            parent_of(parent_cx),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            None,
        )
    }

    #[inline]
    fn build_with_context(&self, builder: SpanBuilder, parent_cx: &Context) -> Span {
        let SpanBuilder {
            span_kind,
            name,
            start_time,
            attributes,
            events,
            links,
        } = builder;
        self.build(
            name,
            span_kind.unwrap_or(SpanKind::Internal),
            parent_of(parent_cx),
            attributes.unwrap_or_default(),
            events.unwrap_or_default(),
            links.unwrap_or_default(),
            start_time.map(to_unix_nanos),
        )
    }
}

/// Puts weft spans into a `Context` without losing what the API span context cannot hold.
pub trait ContextExt {
    /// Returns a context with `span` active, plus the span's full tracestate as a
    /// [`SpanExtras`] value (carrying over B3/Jaeger debug and X-Ray lineage of the same trace).
    fn with_weft_span(&self, span: Span) -> Context;
}

impl ContextExt for Context {
    fn with_weft_span(&self, span: Span) -> Context {
        let sc = *span.weft_context();
        let ts = span.trace_state().clone();
        let old = self.get::<SpanExtras>().filter(|e| e.trace_id == sc.trace_id).cloned();
        let extras = SpanExtras {
            trace_id: sc.trace_id,
            span_id: sc.span_id,
            trace_state: ts,
            b3_debug: old.as_ref().is_some_and(|e| e.b3_debug),
            jaeger_debug: old.as_ref().is_some_and(|e| e.jaeger_debug),
            xray_lineage: old.and_then(|e| e.xray_lineage),
        };
        self.with_span(span).with_value(extras)
    }
}
