//! The bridge to `opentelemetry::propagation`: every weft propagator is also a
//! `TextMapPropagator`.
//!
//! The API's `SpanContext` cannot hold everything weft propagates (its `TraceState` validator
//! applies the Level 1 key rules, and it has no place for B3/Jaeger debug or the X-Ray lineage).
//! Extract therefore stores a [`SpanExtras`] value in the `Context` beside the remote span
//! context, and inject reads it back when it belongs to the same trace. The weft tracer does the
//! same for its children, so nothing is lost when only weft components touch the context.

use opentelemetry::Context;
use opentelemetry::baggage::BaggageExt;
use opentelemetry::propagation::text_map_propagator::FieldIter;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;

use super::{
    B3Propagator, BaggagePropagator, CompositePropagator, Getter, JaegerPropagator, PropagatedContext, Propagator,
    Setter, TraceContextPropagator, XrayPropagator,
};
use crate::baggage::Baggage;
use crate::context::{FullSpanContext, SpanContext};
use crate::id::{SpanId, TraceId};
use crate::tracestate::TraceState;

/// What a weft propagator or tracer keeps in a `Context` beside the API span context.
///
/// It applies to the context's span only while `trace_id` matches; `trace_state` applies only
/// while `span_id` matches too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanExtras {
    /// The trace these extras belong to.
    pub trace_id: TraceId,
    /// The span whose tracestate this is.
    pub span_id: SpanId,
    /// The full (Level 2) tracestate.
    pub trace_state: TraceState,
    /// B3 debug.
    pub b3_debug: bool,
    /// Jaeger debug.
    pub jaeger_debug: bool,
    /// X-Ray lineage.
    pub xray_lineage: Option<String>,
}

impl SpanExtras {
    /// Captures the extras of a full span context.
    pub fn from_full(f: &FullSpanContext) -> Self {
        SpanExtras {
            trace_id: f.context.trace_id,
            span_id: f.context.span_id,
            trace_state: f.trace_state.clone(),
            b3_debug: f.b3_debug,
            jaeger_debug: f.jaeger_debug,
            xray_lineage: f.xray_lineage.clone(),
        }
    }

    /// Returns whether there is anything the API span context cannot carry.
    pub fn is_needed(&self, api_state: &opentelemetry::trace::TraceState) -> bool {
        self.b3_debug
            || self.jaeger_debug
            || self.xray_lineage.is_some()
            || TraceState::from_otel(api_state) != self.trace_state
    }
}

/// Reads an `Extractor` through weft's carrier API.
pub struct ExtractorGetter<'e>(pub &'e dyn Extractor);

impl Getter for ExtractorGetter<'_> {
    fn values<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str) -> bool) {
        if let Some(all) = self.0.get_all(name) {
            for v in all {
                if !f(v) {
                    return;
                }
            }
        }
    }
    fn names<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        for k in self.0.keys() {
            f(k);
        }
    }
}

/// Writes to an `Injector` through weft's carrier API.
pub struct InjectorSetter<'i>(pub &'i mut dyn Injector);

impl Setter for InjectorSetter<'_> {
    fn set(&mut self, name: &str, value: String) {
        self.0.set(name, value);
    }
}

/// Returns the full span context of `cx`'s span (API span context plus matching extras), if valid.
pub fn full_span_context(cx: &Context) -> Option<FullSpanContext> {
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let context = SpanContext::from_otel(sc);
    let extras = cx.get::<SpanExtras>().filter(|e| e.trace_id == context.trace_id);
    let trace_state = match extras {
        Some(e) if e.span_id == context.span_id => e.trace_state.clone(),
        _ => TraceState::from_otel(sc.trace_state()),
    };
    Some(FullSpanContext {
        context,
        trace_state,
        b3_debug: extras.is_some_and(|e| e.b3_debug),
        jaeger_debug: extras.is_some_and(|e| e.jaeger_debug),
        xray_lineage: extras.and_then(|e| e.xray_lineage.clone()),
    })
}

/// Returns `cx`'s baggage, in weft order when the weft copy still matches the API baggage.
pub fn baggage_of(cx: &Context) -> Baggage {
    let api = cx.baggage();
    match cx.get::<Baggage>() {
        Some(b) if b.same_entries_as(api) => b.clone(),
        _ => Baggage::from_otel(api),
    }
}

/// Reads everything the propagators need from an API `Context`.
pub fn from_context(cx: &Context) -> PropagatedContext {
    PropagatedContext {
        span: full_span_context(cx),
        baggage: baggage_of(cx),
    }
}

/// Returns `cx` with `span` as its remote span context (and extras when needed).
pub fn with_remote_span(cx: &Context, span: &FullSpanContext) -> Context {
    let api_state = span.trace_state.to_otel();
    let extras = SpanExtras::from_full(span);
    let needed = extras.is_needed(&api_state);
    let cx = cx.with_remote_span_context(span.context.to_otel(api_state));
    if needed { cx.with_value(extras) } else { cx }
}

/// Writes what extract produced back into an API `Context`, changing only what changed.
pub fn into_context(cx: &Context, before: &PropagatedContext, after: PropagatedContext) -> Context {
    let mut out = cx.clone();
    if after.span != before.span
        && let Some(span) = &after.span
    {
        out = with_remote_span(&out, span);
    }
    if after.baggage != before.baggage {
        out = out.with_baggage(after.baggage.to_otel()).with_value(after.baggage);
    }
    out
}

/// Runs a weft propagator's extract against an API context and extractor.
pub fn extract_with(p: &dyn Propagator, cx: &Context, extractor: &dyn Extractor) -> Context {
    let before = from_context(cx);
    let mut after = before.clone();
    p.extract(&ExtractorGetter(extractor), &mut after);
    into_context(cx, &before, after)
}

/// Runs a weft propagator's inject from an API context into an injector.
pub fn inject_with(p: &dyn Propagator, cx: &Context, injector: &mut dyn Injector) {
    p.inject(&from_context(cx), &mut InjectorSetter(injector));
}

macro_rules! text_map_propagator {
    ($($t:ty),*) => {$(
        impl TextMapPropagator for $t {
            fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
                inject_with(self, cx, injector)
            }
            fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
                extract_with(self, cx, extractor)
            }
            fn fields(&self) -> FieldIter<'_> {
                FieldIter::new(Propagator::fields(self))
            }
        }
    )*};
}

text_map_propagator!(
    TraceContextPropagator,
    BaggagePropagator,
    B3Propagator,
    XrayPropagator,
    JaegerPropagator,
    CompositePropagator
);

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn otel_extract_keeps_level2_tracestate_and_reinjects_it() {
        let p = TraceContextPropagator::new();
        let mut headers = HashMap::new();
        headers.insert(
            "traceparent".to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
        );
        headers.insert("tracestate".to_string(), "foo@@bar=1,a=2".to_string());
        let cx = TextMapPropagator::extract(&p, &headers);
        assert!(cx.span().span_context().is_remote());
        assert_eq!(cx.span().span_context().trace_state().header(), "a=2");
        let mut out: HashMap<String, String> = HashMap::new();
        p.inject_context(&cx, &mut out);
        assert_eq!(out["tracestate"], "foo@@bar=1,a=2");
        assert_eq!(out["traceparent"], headers["traceparent"]);
    }

    #[test]
    fn otel_baggage_round_trip() {
        let p = BaggagePropagator::new();
        let mut headers = HashMap::new();
        headers.insert("baggage".to_string(), "b=2,a=1".to_string());
        let cx = TextMapPropagator::extract(&p, &headers);
        assert_eq!(cx.baggage().get("a").map(|v| v.as_str().to_string()), Some("1".into()));
        let mut out: HashMap<String, String> = HashMap::new();
        p.inject_context(&cx, &mut out);
        assert_eq!(out["baggage"], "b=2,a=1");
    }

    #[test]
    fn composite_fields_through_the_api() {
        let p = CompositePropagator::default();
        let f: Vec<&str> = TextMapPropagator::fields(&p).collect();
        assert_eq!(f, ["traceparent", "tracestate", "baggage"]);
    }
}
