//! The span handle: `weft_sdk._native.Span`, registered as an `opentelemetry.trace.Span`.
//!
//! One Python object per span, whatever the sampler decided: the IDs, flags and tracestate live
//! in Rust, the record (attributes, events, links, status) in `sdk/rust`'s recycled span record,
//! and the API `SpanContext` object is made only when someone asks for it (and then cached).
//! The same type stands for remote contexts produced by the weft propagators (no record).

use opentelemetry::trace::{Span as _, SpanKind, Status};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use weft_sdk::FullSpanContext;

use crate::convert;
use crate::globals;
use crate::tracer::Tracer;

/// `record_exception` on exit.
pub(crate) const RECORD_EXCEPTION: u8 = 1;
/// `set_status_on_exception` on exit.
pub(crate) const SET_STATUS_ON_EXCEPTION: u8 = 2;
/// End the span on exit.
pub(crate) const END_ON_EXIT: u8 = 4;
/// Make the span current on enter (`start_as_current_span`).
pub(crate) const CURRENT: u8 = 8;
/// The server span of `weft_sdk.wsgi` (an exception from Flask's signal is recorded on it).
pub(crate) const SERVER_MIDDLEWARE: u8 = 16;
/// The server span's exception is recorded (recorded once, status and `error.type` kept).
pub(crate) const EXCEPTION_RECORDED: u8 = 32;

/// What `start_as_current_span` was called with: the span starts on `__enter__`, so that the
/// same call also works as a decorator (a new span per call of the decorated function).
pub(crate) struct Pending {
    pub(crate) tracer: Py<Tracer>,
    pub(crate) name: String,
    pub(crate) context: Option<PyObject>,
    pub(crate) kind: SpanKind,
    pub(crate) attributes: Option<PyObject>,
    pub(crate) links: Option<PyObject>,
    pub(crate) start_time: Option<u64>,
    /// The `kind` argument as given, for the decorator.
    pub(crate) kind_arg: Option<PyObject>,
}

/// A weft span (or a remote span context from a weft propagator).
// `freelist`: span handles are created and dropped at a high rate; reusing their memory saves an
// allocation per span (bench `span_unsampled`). `weakref`: as any Python object of the official SDK.
#[pyclass(module = "weft_sdk._native", name = "Span", freelist = 128, weakref)]
pub struct Span {
    /// IDs, flags, tracestate and the propagation extras (B3/Jaeger debug, X-Ray lineage).
    pub(crate) full: FullSpanContext,
    /// The recording (or non-recording) span; `None` for a remote context or a pending span.
    pub(crate) inner: Option<weft_sdk::Span>,
    /// The cached `opentelemetry.trace.SpanContext`.
    api: Option<PyObject>,
    /// The `context.attach` token while the span is current through `__enter__`.
    token: Option<PyObject>,
    pub(crate) pending: Option<Box<Pending>>,
    pub(crate) flags: u8,
    /// The span kind (0 INTERNAL … 4 CONSUMER), kept for instrumentations that read `span.kind`.
    kind: u8,
}

impl Span {
    pub(crate) fn started(full: FullSpanContext, inner: weft_sdk::Span, flags: u8, kind: SpanKind) -> Self {
        Span {
            full,
            inner: Some(inner),
            api: None,
            token: None,
            pending: None,
            flags,
            kind: convert::kind_to_int(&kind),
        }
    }

    pub(crate) fn remote(full: FullSpanContext) -> Self {
        Span {
            full,
            inner: None,
            api: None,
            token: None,
            pending: None,
            flags: 0,
            kind: 0,
        }
    }

    pub(crate) fn pending(p: Pending, flags: u8) -> Self {
        let kind = convert::kind_to_int(&p.kind);
        Span {
            kind,
            full: FullSpanContext::default(),
            inner: None,
            api: None,
            token: None,
            pending: Some(Box::new(p)),
            flags,
        }
    }

    /// Starts a pending span (from `start_as_current_span`) if it has not started.
    fn ensure_started(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(p) = self.pending.take() {
            let p = *p;
            let tracer = p.tracer.bind(py).get();
            let (full, inner) = tracer.start_native(
                py,
                p.name,
                p.context.as_ref().map(|c| c.bind(py)),
                p.kind,
                p.attributes.as_ref().map(|a| a.bind(py)),
                p.links.as_ref().map(|l| l.bind(py)),
                p.start_time,
            )?;
            self.full = full;
            self.inner = Some(inner);
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn is_recording_now(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_recording())
    }

    pub(crate) fn set_attribute_now(&mut self, kv: opentelemetry::KeyValue) {
        if let Some(s) = self.recording() {
            s.set_attribute(kv);
        }
    }

    pub(crate) fn set_status_now(&mut self, status: Status) {
        if let Some(s) = self.recording() {
            s.set_status(status);
        }
    }

    pub(crate) fn update_name_now(&mut self, name: String) {
        if let Some(s) = self.recording() {
            s.update_name(name);
        }
    }

    pub(crate) fn end_now(&mut self) {
        self.do_end(None);
    }

    pub(crate) fn record_exception_now(&mut self, py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<()> {
        self.record_exception_inner(py, exception, None, None, true)
    }

    pub(crate) fn error_status_now(&mut self, exception: &Bound<'_, PyAny>) {
        self.error_status(exception);
    }

    #[inline]
    fn recording(&mut self) -> Option<&mut weft_sdk::Span> {
        self.inner.as_mut().filter(|s| s.is_recording())
    }

    fn do_end(&mut self, end_time: Option<u64>) {
        if let Some(s) = self.recording() {
            match end_time {
                Some(t) => s.end_with_timestamp(convert::system_time(t)),
                None => s.end(),
            }
        }
    }

    fn record_exception_inner(
        &mut self,
        py: Python<'_>,
        exception: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
        escaped: bool,
    ) -> PyResult<()> {
        if self.recording().is_none() {
            return Ok(());
        }
        let g = globals::get(py)?;
        let attrs = g
            .exception_attributes
            .bind(py)
            .call1((exception, attributes, escaped))?;
        let attrs = convert::attributes(py, Some(&attrs))?;
        if let Some(s) = self.recording() {
            match timestamp {
                Some(t) => s.add_event_with_timestamp("exception", convert::system_time(t), attrs),
                None => s.add_event("exception", attrs),
            }
        }
        Ok(())
    }

    fn error_status(&mut self, exception: &Bound<'_, PyAny>) {
        let name = exception.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        let description = format!("{name}: {}", exception.str().map(|s| s.to_string()).unwrap_or_default());
        if let Some(s) = self.recording() {
            s.set_status(Status::error(description));
        }
    }
}

#[pymethods]
impl Span {
    /// Ends the span (at `end_time`, int ns since the epoch, or now). A second call does nothing.
    #[pyo3(signature = (end_time=None))]
    fn end(&mut self, py: Python<'_>, end_time: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.ensure_started(py)?;
        let t = convert::timestamp(end_time)?;
        self.do_end(t);
        Ok(())
    }

    /// Returns the span's `opentelemetry.trace.SpanContext` (made on the first call).
    fn get_span_context(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        self.ensure_started(py)?;
        if let Some(a) = &self.api {
            return Ok(a.clone_ref(py));
        }
        let g = globals::get(py)?;
        let c = &self.full.context;
        let trace_id = u128::from_be_bytes(c.trace_id.to_bytes());
        let span_id = u64::from_be_bytes(c.span_id.to_bytes());
        let sc = g.make_span_context.call1(
            py,
            (
                trace_id,
                span_id,
                c.is_remote,
                c.trace_flags,
                self.full.trace_state.as_str(),
            ),
        )?;
        self.api = Some(sc.clone_ref(py));
        Ok(sc)
    }

    /// Whether the span records (sampled or RECORD_ONLY, and not ended).
    fn is_recording(&mut self, py: Python<'_>) -> PyResult<bool> {
        self.ensure_started(py)?;
        Ok(self.recording().is_some())
    }

    /// Sets one attribute; invalid keys and values are dropped with a warning.
    fn set_attribute(&mut self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.ensure_started(py)?;
        if self.recording().is_none() {
            return Ok(());
        }
        if let Some(kv) = convert::key_value(py, key, value)
            && let Some(s) = self.recording()
        {
            s.set_attribute(kv);
        }
        Ok(())
    }

    /// Sets several attributes from a mapping.
    fn set_attributes(&mut self, py: Python<'_>, attributes: &Bound<'_, PyAny>) -> PyResult<()> {
        self.ensure_started(py)?;
        if self.recording().is_none() {
            return Ok(());
        }
        let attrs = convert::attributes(py, Some(attributes))?;
        if let Some(s) = self.recording() {
            for kv in attrs {
                s.set_attribute(kv);
            }
        }
        Ok(())
    }

    /// Adds an event (`timestamp` in int ns since the epoch, default now).
    #[pyo3(signature = (name, attributes=None, timestamp=None))]
    fn add_event(
        &mut self,
        py: Python<'_>,
        name: &str,
        attributes: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.ensure_started(py)?;
        if self.recording().is_none() {
            return Ok(());
        }
        let t = convert::timestamp(timestamp)?;
        let attrs = convert::attributes(py, attributes)?;
        if let Some(s) = self.recording() {
            match t {
                Some(t) => s.add_event_with_timestamp(name.to_owned(), convert::system_time(t), attrs),
                None => s.add_event(name.to_owned(), attrs),
            }
        }
        Ok(())
    }

    /// Adds a link to `context` (an `opentelemetry.trace.SpanContext`); invalid contexts are
    /// ignored.
    #[pyo3(signature = (context, attributes=None))]
    fn add_link(
        &mut self,
        py: Python<'_>,
        context: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.ensure_started(py)?;
        if self.recording().is_none() {
            return Ok(());
        }
        let Some(full) = crate::tracer::span_context_to_full(context)? else {
            return Ok(());
        };
        let attrs = convert::attributes(py, attributes)?;
        if let Some(s) = self.recording() {
            s.add_link(full.context.to_otel(full.trace_state.to_otel()), attrs);
        }
        Ok(())
    }

    /// Renames the span.
    fn update_name(&mut self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.ensure_started(py)?;
        if let Some(s) = self.recording() {
            s.update_name(name.to_owned());
        }
        Ok(())
    }

    /// Sets the status from a `Status` or a `StatusCode` (+ description). As in the API:
    /// the description is kept only for ERROR, OK is final, UNSET changes nothing.
    #[pyo3(signature = (status, description=None))]
    fn set_status(&mut self, py: Python<'_>, status: &Bound<'_, PyAny>, description: Option<String>) -> PyResult<()> {
        self.ensure_started(py)?;
        if self.recording().is_none() {
            return Ok(());
        }
        let (code_obj, desc) = match status.getattr(pyo3::intern!(py, "status_code")) {
            Ok(code) => {
                let d: Option<String> = status.getattr(pyo3::intern!(py, "description"))?.extract()?;
                // The API: a description given beside a Status object wins over none.
                (code, d.or(description))
            }
            Err(_) => (status.clone(), description),
        };
        let code: i64 = match code_obj.getattr(pyo3::intern!(py, "value")) {
            Ok(v) => v.extract()?,
            Err(_) => code_obj.extract().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "set_status takes an opentelemetry.trace.Status or StatusCode, not {status}"
                ))
            })?,
        };
        let st = match code {
            0 => Status::Unset,
            1 => Status::Ok,
            2 => Status::error(desc.unwrap_or_default()),
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "invalid status code {code}"
                )));
            }
        };
        if let Some(s) = self.recording() {
            s.set_status(st);
        }
        Ok(())
    }

    /// Records an `exception` event with the semantic-convention attributes.
    #[pyo3(signature = (exception, attributes=None, timestamp=None, escaped=false))]
    fn record_exception(
        &mut self,
        py: Python<'_>,
        exception: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
        escaped: bool,
    ) -> PyResult<()> {
        self.ensure_started(py)?;
        let t = convert::timestamp(timestamp)?;
        self.record_exception_inner(py, exception, attributes, t, escaped)
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let py = slf.py();
        let current = {
            let mut s = slf.try_borrow_mut()?;
            s.ensure_started(py)?;
            s.flags & CURRENT != 0
        };
        if current {
            let g = globals::get(py)?;
            let token = globals::attach_span(py, g, slf.as_any())?;
            slf.try_borrow_mut()?.token = Some(token.unbind());
        }
        Ok(slf.clone())
    }

    #[pyo3(signature = (_exc_type=None, exc=None, _tb=None))]
    fn __exit__(
        slf: &Bound<'_, Self>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let py = slf.py();
        let token = slf.try_borrow_mut()?.token.take();
        if let Some(t) = token {
            globals::detach(py, globals::get(py)?, t.bind(py));
        }
        let mut s = slf.try_borrow_mut()?;
        // As `opentelemetry.trace.use_span`: only `Exception`s are errors, not `GeneratorExit`,
        // `KeyboardInterrupt` or other `BaseException`s.
        if let Some(e) = exc.filter(|e| e.is_instance_of::<pyo3::exceptions::PyException>())
            && s.recording().is_some()
        {
            if s.flags & RECORD_EXCEPTION != 0 {
                s.record_exception_inner(py, e, None, None, true)?;
            }
            if s.flags & SET_STATUS_ON_EXCEPTION != 0 {
                s.error_status(e);
            }
        }
        if s.flags & END_ON_EXIT != 0 {
            s.do_end(None);
        }
        Ok(false)
    }

    /// `@tracer.start_as_current_span(...)` as a decorator: a new span per call.
    fn __call__(&self, py: Python<'_>, func: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let Some(p) = &self.pending else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "only the result of start_as_current_span(...) can decorate a function",
            ));
        };
        // The keyword arguments are rebuilt here rather than kept from the call: a dict per
        // `start_as_current_span` would cost every `with` block (bench `span_sampled_current`).
        let kw = PyDict::new(py);
        kw.set_item("name", &p.name)?;
        kw.set_item("context", p.context.as_ref())?;
        kw.set_item("kind", p.kind_arg.as_ref())?;
        kw.set_item("attributes", p.attributes.as_ref())?;
        kw.set_item("links", p.links.as_ref())?;
        kw.set_item("start_time", p.start_time)?;
        kw.set_item("record_exception", self.flags & RECORD_EXCEPTION != 0)?;
        kw.set_item("set_status_on_exception", self.flags & SET_STATUS_ON_EXCEPTION != 0)?;
        kw.set_item("end_on_exit", self.flags & END_ON_EXIT != 0)?;
        let g = globals::get(py)?;
        g.decorate.call1(py, (p.tracer.clone_ref(py), kw, func))
    }

    /// The trace ID as an int.
    #[getter]
    fn trace_id(&mut self, py: Python<'_>) -> PyResult<u128> {
        self.ensure_started(py)?;
        Ok(u128::from_be_bytes(self.full.context.trace_id.to_bytes()))
    }

    /// The span ID as an int.
    #[getter]
    fn span_id(&mut self, py: Python<'_>) -> PyResult<u64> {
        self.ensure_started(py)?;
        Ok(u64::from_be_bytes(self.full.context.span_id.to_bytes()))
    }

    /// The span kind, an `opentelemetry.trace.SpanKind` (the official SDK's spans have it, and
    /// some instrumentations read it).
    #[getter]
    fn kind(&self, py: Python<'_>) -> PyResult<PyObject> {
        globals::get(py)?.span_kind.call1(py, (self.kind,))
    }

    /// The span's own context (`opentelemetry.trace.SpanContext`), as on the official SDK's spans.
    #[getter]
    fn context(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        self.get_span_context(py)
    }

    /// Start time in ns since the epoch (a recording span only; `None` otherwise).
    #[getter]
    fn start_time(&self) -> Option<u64> {
        self.inner
            .as_ref()
            .and_then(|s| s.data())
            .map(|d| d.start_time_unix_nano)
    }

    /// The span's attributes so far (a recording span only; for tests and debugging).
    #[getter]
    fn attributes(&self, py: Python<'_>) -> PyResult<PyObject> {
        match self.inner.as_ref().and_then(|s| s.data()) {
            Some(d) => convert::attrs_to_py(py, &d.attributes),
            None => Ok(PyDict::new(py).into_any().unbind()),
        }
    }

    /// The span's name (a recording span only; `None` otherwise).
    #[getter]
    fn name(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.inner
            .as_ref()
            .and_then(|s| s.data())
            .map(|d| PyString::new(py, &d.name).unbind())
    }

    fn __repr__(&self) -> String {
        let c = &self.full.context;
        format!(
            "weft_sdk.Span(trace_id=0x{:032x}, span_id=0x{:016x}, flags=0x{:02x}, recording={}, remote={})",
            u128::from_be_bytes(c.trace_id.to_bytes()),
            u64::from_be_bytes(c.span_id.to_bytes()),
            c.trace_flags,
            self.inner.as_ref().is_some_and(|s| s.is_recording()),
            c.is_remote
        )
    }
}
