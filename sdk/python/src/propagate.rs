//! The propagators of `spec/propagation.md` (from `sdk/rust`) over lists of header pairs.
//!
//! `weft_sdk.propagators` reads the headers through the OpenTelemetry getter and writes them
//! through the setter; everything between (parsing, validation, formatting) happens here, and an
//! extracted context comes back as a remote `weft_sdk._native.Span`, which keeps what the API
//! `SpanContext` cannot hold (Level 2 tracestate keys, B3/Jaeger debug, the X-Ray lineage).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use weft_sdk::baggage::Baggage;
use weft_sdk::id::{SpanId, TraceId};
use weft_sdk::propagation::{CompositePropagator, HeaderVec, PropagatedContext, Propagator as WeftPropagator};
use weft_sdk::{FullSpanContext, SpanContext, TraceState};

use crate::span::Span;

/// A propagator (a composite of one or more formats).
#[pyclass(module = "weft_sdk._native", name = "Propagator", frozen)]
pub struct Propagator {
    inner: CompositePropagator,
    /// Header names `extract_dict` reads (lowercase), and name prefixes (Jaeger `uberctx-`).
    extract_fields: Vec<Py<PyString>>,
    prefixes: Vec<String>,
    /// The WSGI environ keys of `extract_fields` (`HTTP_TRACEPARENT`, …) and their header names.
    environ_fields: Vec<(Py<PyString>, String)>,
}

/// Adds the value(s) of one carrier entry: a str, or a list/tuple of str (as the OTel
/// `DefaultGetter` returns them); anything else is ignored.
fn push_values(name: &str, v: &Bound<'_, PyAny>, out: &mut Vec<(String, String)>) {
    if let Ok(s) = v.downcast::<PyString>() {
        if let Ok(s) = s.to_str() {
            out.push((name.to_owned(), s.to_owned()));
        }
        return;
    }
    if (v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>())
        && let Ok(items) = v.try_iter()
    {
        for item in items.flatten() {
            if let Ok(s) = item.downcast::<PyString>()
                && let Ok(s) = s.to_str()
            {
                out.push((name.to_owned(), s.to_owned()));
            }
        }
    }
}

/// `(key, value, metadata)` baggage members.
type BaggageList = Vec<(String, String, String)>;

impl Propagator {
    fn dict_headers(&self, carrier: &Bound<'_, PyDict>) -> PyResult<Vec<(String, String)>> {
        let py = carrier.py();
        let mut headers = Vec::new();
        let mut missing = false;
        for f in &self.extract_fields {
            let f = f.bind(py);
            match carrier.get_item(f)? {
                Some(v) => push_values(f.to_str()?, &v, &mut headers),
                None => missing = true,
            }
        }
        if missing || !self.prefixes.is_empty() {
            for (k, v) in carrier.iter() {
                let Some(k) = k.downcast::<PyString>().ok().and_then(|k| k.to_str().ok()) else {
                    continue;
                };
                let wanted_case_insensitively = missing
                    && k.bytes().any(|b| b.is_ascii_uppercase())
                    && self
                        .extract_fields
                        .iter()
                        .any(|f| f.bind(py).to_str().is_ok_and(|f| f.eq_ignore_ascii_case(k)));
                let prefixed = self
                    .prefixes
                    .iter()
                    .any(|p| k.len() > p.len() && k.is_char_boundary(p.len()) && k[..p.len()].eq_ignore_ascii_case(p));
                if wanted_case_insensitively || prefixed {
                    push_values(&k.to_ascii_lowercase(), &v, &mut headers);
                }
            }
        }
        Ok(headers)
    }
}

impl Propagator {
    /// Extracts from a WSGI environ (headers as `HTTP_*` keys) in one pass, without Python
    /// calls: the remote parent, and whether the request carried baggage (which only the
    /// Python path puts into the context).
    pub(crate) fn extract_environ(&self, environ: &Bound<'_, PyDict>) -> PyResult<(Option<FullSpanContext>, bool)> {
        let py = environ.py();
        let mut headers = Vec::new();
        for (key, name) in &self.environ_fields {
            if let Some(v) = environ.get_item(key.bind(py))? {
                push_values(name, &v, &mut headers);
            }
        }
        if !self.prefixes.is_empty() {
            for (k, v) in environ.iter() {
                let Some(k) = k.downcast::<PyString>().ok().and_then(|k| k.to_str().ok()) else {
                    continue;
                };
                let Some(h) = k.strip_prefix("HTTP_") else { continue };
                let h = h.to_ascii_lowercase().replace('_', "-");
                if self
                    .prefixes
                    .iter()
                    .any(|p| h.len() > p.len() && h.starts_with(p.as_str()))
                {
                    push_values(&h, &v, &mut headers);
                }
            }
        }
        if headers.is_empty() {
            return Ok((None, false));
        }
        Ok(self.extract_headers(headers))
    }

    /// Extracts from header pairs (names lowercase): the remote parent, and whether there was
    /// baggage.
    pub(crate) fn extract_headers(&self, headers: Vec<(String, String)>) -> (Option<FullSpanContext>, bool) {
        let h = HeaderVec(headers);
        let mut cx = PropagatedContext::default();
        self.inner.extract(&h, &mut cx);
        (cx.span, !cx.baggage.entries().is_empty())
    }
}

#[pymethods]
impl Propagator {
    /// `extract_environ` for tests: the remote span (or `None`) and whether baggage was found.
    fn extract_wsgi_environ(&self, environ: &Bound<'_, PyDict>) -> PyResult<(Option<Span>, bool)> {
        let (span, bag) = self.extract_environ(environ)?;
        Ok((span.map(Span::remote), bag))
    }

    /// `names`: `tracecontext`, `baggage`, `b3` (single-header inject), `b3multi`, `xray`,
    /// `jaeger`, `none`, in order; a later valid context wins on extract.
    /// `extract_fields`/`prefixes`: the header names and name prefixes the formats read, for
    /// `extract_dict`.
    #[new]
    #[pyo3(signature = (names, extract_fields=Vec::new(), prefixes=Vec::new()))]
    fn new(py: Python<'_>, names: Vec<String>, extract_fields: Vec<String>, prefixes: Vec<String>) -> PyResult<Self> {
        let (inner, unknown) = CompositePropagator::from_names(names.iter().map(String::as_str));
        if let Some(u) = unknown.first() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown propagator {:?}: use tracecontext, baggage, b3, b3multi, xray, jaeger or none",
                u.0
            )));
        }
        Ok(Propagator {
            inner,
            extract_fields: extract_fields
                .iter()
                .map(|f| PyString::intern(py, &f.to_ascii_lowercase()).unbind())
                .collect(),
            prefixes: prefixes.iter().map(|p| p.to_ascii_lowercase()).collect(),
            environ_fields: extract_fields
                .iter()
                .map(|f| {
                    let key = format!("HTTP_{}", f.to_ascii_uppercase().replace('-', "_"));
                    (PyString::intern(py, &key).unbind(), f.to_ascii_lowercase())
                })
                .collect(),
        })
    }

    /// `extract` for a `dict` carrier read as the OTel `DefaultGetter` reads it (exact names),
    /// plus a case-insensitive match for a name not found exactly (HTTP names are
    /// case-insensitive), without a Python call per header (bench `traceparent_extract`).
    fn extract_dict(&self, carrier: &Bound<'_, PyDict>) -> PyResult<(Option<Span>, BaggageList)> {
        let headers = self.dict_headers(carrier)?;
        if headers.is_empty() {
            return Ok((None, Vec::new()));
        }
        Ok(self.extract(headers))
    }

    /// `extract_dict` all the way to the new OTel `Context` (`context`, or the current one, with
    /// the remote span set), for formats that carry no baggage: no Python frame per step (bench
    /// `traceparent_extract`). `None` when baggage was found: the caller takes the general path.
    #[pyo3(signature = (carrier, context=None))]
    fn extract_dict_context<'py>(
        &self,
        carrier: &Bound<'py, PyDict>,
        context: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = carrier.py();
        let g = crate::globals::get(py)?;
        let cx = match context.filter(|c| !c.is_none()) {
            Some(c) => c.clone(),
            None => crate::globals::current_context(py, g)?,
        };
        let headers = self.dict_headers(carrier)?;
        if headers.is_empty() {
            return Ok(Some(cx));
        }
        let (span, bag) = self.extract(headers);
        if !bag.is_empty() {
            return Ok(None);
        }
        let Some(span) = span else {
            return Ok(Some(cx));
        };
        let values = cx.downcast::<PyDict>()?.copy()?;
        values.set_item(g.span_key.bind(py), Bound::new(py, span)?)?;
        Ok(Some(g.context_cls.bind(py).call1((values,))?))
    }

    /// `inject` of the span in `context` (or the current context) into a `dict` carrier, for
    /// formats that carry no baggage: the span is read from the context here, without Python
    /// frames or an API `SpanContext` (bench `traceparent_inject`).
    #[pyo3(signature = (carrier, context=None))]
    fn inject_span_dict(&self, carrier: &Bound<'_, PyDict>, context: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let py = carrier.py();
        let Some(span) = crate::tracer::parent_of(py, crate::globals::get(py)?, context)? else {
            return Ok(());
        };
        let cx = PropagatedContext {
            span: Some(span),
            baggage: Baggage::new(),
        };
        let mut out = HeaderVec::new();
        self.inner.inject(&cx, &mut out);
        for (k, v) in out.0 {
            carrier.set_item(k, v)?;
        }
        Ok(())
    }

    /// `inject` into a `dict` carrier (what the OTel `DefaultSetter` does), without building a
    /// list of pairs first (bench `traceparent_inject`).
    #[pyo3(signature = (carrier, span, baggage))]
    fn inject_dict(
        &self,
        carrier: &Bound<'_, PyDict>,
        span: Option<&Bound<'_, PyAny>>,
        baggage: BaggageList,
    ) -> PyResult<()> {
        for (k, v) in self.inject(span, baggage)? {
            carrier.set_item(k, v)?;
        }
        Ok(())
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
