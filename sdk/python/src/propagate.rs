//! The propagators of `spec/propagation.md` (from `sdk/rust`) over lists of header pairs.
//!
//! `weft_sdk.propagators` reads the headers through the OpenTelemetry getter and writes them
//! through the setter; everything between (parsing, validation, formatting) happens here, and an
//! extracted context comes back as a remote `weft_sdk._native.Span`, which keeps what the API
//! `SpanContext` cannot hold (Level 2 tracestate keys, B3/Jaeger debug, the X-Ray lineage).

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use weft_sdk::baggage::Baggage;
use weft_sdk::id::{SpanId, TraceId};
use weft_sdk::propagation::{CompositePropagator, HeaderVec, PropagatedContext, Propagator as WeftPropagator};
use weft_sdk::{FullSpanContext, SpanContext, TraceState};

use crate::span::Span;

/// A propagator (a composite of one or more formats).
#[pyclass(module = "weft_sdk._native", name = "Propagator", frozen)]
pub struct Propagator {
    inner: CompositePropagator,
}

/// `(key, value, metadata)` baggage members.
type BaggageList = Vec<(String, String, String)>;

#[pymethods]
impl Propagator {
    /// `names`: `tracecontext`, `baggage`, `b3` (single-header inject), `b3multi`, `xray`,
    /// `jaeger`, `none`, in order; a later valid context wins on extract.
    #[new]
    fn new(names: Vec<String>) -> PyResult<Self> {
        let (inner, unknown) = CompositePropagator::from_names(names.iter().map(String::as_str));
        if let Some(u) = unknown.first() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown propagator {:?}: use tracecontext, baggage, b3, b3multi, xray, jaeger or none",
                u.0
            )));
        }
        Ok(Propagator { inner })
    }

    /// The header names inject sets.
    fn fields(&self) -> Vec<String> {
        self.inner.fields().to_vec()
    }

    /// Reads `headers` (name, value pairs; names in any case; a repeated name is several
    /// values). Returns the remote span (or `None`) and the baggage members. Never raises on
    /// header content: invalid headers are ignored as the spec says.
    fn extract(&self, headers: Vec<(String, String)>) -> (Option<Span>, BaggageList) {
        let h = HeaderVec(headers);
        let mut cx = PropagatedContext::default();
        self.inner.extract(&h, &mut cx);
        let span = cx.span.map(Span::remote);
        let baggage = cx
            .baggage
            .entries()
            .iter()
            .map(|e| (e.key.clone(), e.value.clone(), e.metadata.clone()))
            .collect();
        (span, baggage)
    }

    /// Returns the headers for `span` (a weft span, a `(trace_id, span_id, flags, is_remote,
    /// tracestate)` tuple, or `None`) and `baggage`.
    #[pyo3(signature = (span, baggage))]
    fn inject(&self, span: Option<&Bound<'_, PyAny>>, baggage: BaggageList) -> PyResult<Vec<(String, String)>> {
        let span = match span.filter(|s| !s.is_none()) {
            None => None,
            Some(s) => match s.downcast::<Span>() {
                Ok(s) => {
                    let s = s.try_borrow()?;
                    s.full.context.is_valid().then(|| s.full.clone())
                }
                Err(_) => {
                    let t = s.downcast::<PyTuple>().map_err(|_| {
                        pyo3::exceptions::PyTypeError::new_err("inject takes a weft span, a context tuple or None")
                    })?;
                    let (trace_id, span_id, flags, is_remote, ts): (u128, u64, u8, bool, String) = t.extract()?;
                    let c = SpanContext::new(TraceId::from(trace_id), SpanId::from(span_id), flags, is_remote);
                    c.is_valid()
                        .then(|| FullSpanContext::new(c, TraceState::parse_str(&ts).unwrap_or(TraceState::EMPTY)))
                }
            },
        };
        let mut b = Baggage::new();
        for (k, v, m) in baggage {
            b.insert(k, v, m);
        }
        let cx = PropagatedContext { span, baggage: b };
        let mut out = HeaderVec::new();
        self.inner.inject(&cx, &mut out);
        Ok(out.0)
    }
}

/// A remote span context built from parts (tests, and contexts from other propagators).
#[pyfunction]
#[pyo3(signature = (trace_id, span_id, trace_flags, tracestate="", b3_debug=false, jaeger_debug=false, xray_lineage=None))]
pub(crate) fn remote_span(
    trace_id: u128,
    span_id: u64,
    trace_flags: u8,
    tracestate: &str,
    b3_debug: bool,
    jaeger_debug: bool,
    xray_lineage: Option<String>,
) -> PyResult<Span> {
    let ts = TraceState::parse_str(tracestate)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid tracestate {tracestate:?}: {e:?}")))?;
    Ok(Span::remote(FullSpanContext {
        context: SpanContext::new(TraceId::from(trace_id), SpanId::from(span_id), trace_flags, true),
        trace_state: ts,
        b3_debug,
        jaeger_debug,
        xray_lineage,
    }))
}

/// `(b3_debug, jaeger_debug, xray_lineage, tracestate)` of a weft span.
#[pyfunction]
pub(crate) fn span_extras(span: &Bound<'_, Span>) -> PyResult<(bool, bool, Option<String>, String)> {
    let s = span.try_borrow()?;
    Ok((
        s.full.b3_debug,
        s.full.jaeger_debug,
        s.full.xray_lineage.clone(),
        s.full.trace_state.as_str().to_owned(),
    ))
}
