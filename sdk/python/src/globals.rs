//! References into `opentelemetry-api` (and a few helpers of `weft_sdk`), looked up once.
//!
//! `weft_sdk/__init__.py` calls [`init`] on import with the objects below; the span path then
//! reads them from a `GILOnceCell` instead of importing modules or looking up attributes.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyString};

pub(crate) struct Globals {
    /// The context key under which `opentelemetry.trace` stores the current span.
    pub(crate) span_key: Py<PyString>,
    /// The `ContextVar` behind `ContextVarsRuntimeContext`, when that is the runtime context
    /// (the default): reading it directly skips two Python calls per span start.
    pub(crate) current_var: Option<Py<PyAny>>,
    /// `opentelemetry.context.get_current`.
    pub(crate) get_current: Py<PyAny>,
    /// `opentelemetry.context.attach` / `detach`.
    pub(crate) attach: Py<PyAny>,
    pub(crate) detach: Py<PyAny>,
    /// `opentelemetry.trace.set_span_in_context`.
    pub(crate) set_span_in_context: Py<PyAny>,
    /// `weft_sdk._api.make_span_context(trace_id, span_id, is_remote, flags, tracestate)`.
    pub(crate) make_span_context: Py<PyAny>,
    /// `weft_sdk._api.exception_attributes(exc, attributes, escaped) -> dict`.
    pub(crate) exception_attributes: Py<PyAny>,
    /// `weft_sdk._api.decorate(tracer, kwargs, func)`: `start_as_current_span` as a decorator.
    pub(crate) decorate: Py<PyAny>,
    /// `weft_sdk._api.warn(message)`: a rate-limited warning through `logging`.
    pub(crate) warn: Py<PyAny>,
    /// `weft_sdk._api.log_native(message)`: a warning of `sdk/rust`, already rate-limited.
    pub(crate) log: Py<PyAny>,
    /// `opentelemetry.trace.SpanKind`.
    pub(crate) span_kind: Py<PyAny>,
    /// `opentelemetry.context.Context`.
    pub(crate) context_cls: Py<PyAny>,
}

static GLOBALS: GILOnceCell<Globals> = GILOnceCell::new();

/// Returns the globals; fails if `weft_sdk` was not imported (it calls `init`).
#[inline]
pub(crate) fn get(py: Python<'_>) -> PyResult<&'static Globals> {
    GLOBALS
        .get(py)
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("weft_sdk._native used before weft_sdk was imported"))
}

/// Logs `msg` through `weft_sdk._api.warn` (rate-limited there), ignoring failures.
pub(crate) fn warn(py: Python<'_>, msg: String) {
    if let Ok(g) = get(py) {
        let _ = g.warn.call1(py, (msg,));
    }
}

/// Stores the API objects the span path needs. Called once by `weft_sdk/__init__.py`.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub(crate) fn init(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    let kw = kwargs.ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("init needs keyword arguments"))?;
    let get = |name: &str| -> PyResult<Py<PyAny>> {
        kw.get_item(name)?
            .map(|v| v.unbind())
            .ok_or_else(|| pyo3::exceptions::PyTypeError::new_err(format!("init: missing {name}")))
    };
    let current_var = match kw.get_item("current_var")? {
        Some(v) if !v.is_none() => Some(v.unbind()),
        _ => None,
    };
    let g = Globals {
        span_key: get("span_key")?.bind(py).downcast::<PyString>()?.clone().unbind(),
        current_var,
        get_current: get("get_current")?,
        attach: get("attach")?,
        detach: get("detach")?,
        set_span_in_context: get("set_span_in_context")?,
        make_span_context: get("make_span_context")?,
        exception_attributes: get("exception_attributes")?,
        decorate: get("decorate")?,
        warn: get("warn")?,
        log: get("log")?,
        span_kind: get("span_kind")?,
        context_cls: get("context_cls")?,
    };
    // A second import (e.g. importlib.reload) keeps the first set: same objects.
    let _ = GLOBALS.set(py, g);
    crate::logbridge::install();
    Ok(())
}

/// Returns the current OpenTelemetry `Context` (a `dict` subclass).
#[inline]
pub(crate) fn current_context<'py>(py: Python<'py>, g: &Globals) -> PyResult<Bound<'py, PyAny>> {
    match &g.current_var {
        Some(var) => var.bind(py).call_method0(pyo3::intern!(py, "get")),
        None => g.get_current.bind(py).call0(),
    }
}

/// Makes `span` current: what `context.attach(trace.set_span_in_context(span))` does, done here
/// when the runtime context is the default `ContextVar` (bench `span_sampled_current`: the four
/// Python frames of the API path cost about as much as the whole span). Returns the token.
pub(crate) fn attach_span<'py>(py: Python<'py>, g: &Globals, span: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match &g.current_var {
        Some(var) => {
            let var = var.bind(py);
            let current = var.call_method0(pyo3::intern!(py, "get"))?;
            let values = current.downcast::<PyDict>()?.copy()?;
            values.set_item(g.span_key.bind(py), span)?;
            let cx = g.context_cls.bind(py).call1((values,))?;
            var.call_method1(pyo3::intern!(py, "set"), (cx,))
        }
        None => {
            let cx = g.set_span_in_context.bind(py).call1((span,))?;
            g.attach.bind(py).call1((cx,))
        }
    }
}

/// Undoes [`attach_span`]. As `context.detach`, a failure (a token from another context) is
/// logged, never raised.
pub(crate) fn detach(py: Python<'_>, g: &Globals, token: &Bound<'_, PyAny>) {
    match &g.current_var {
        Some(var) => {
            if let Err(e) = var.bind(py).call_method1(pyo3::intern!(py, "reset"), (token,)) {
                warn(py, format!("failed to detach context: {e}"));
            }
        }
        None => {
            let _ = g.detach.bind(py).call1((token,));
        }
    }
}
