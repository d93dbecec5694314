//! weft's own WSGI server instrumentation (`weft_sdk.wsgi.WeftMiddleware`).
//!
//! One native call per request does what `opentelemetry-instrumentation-wsgi` does in a dozen
//! Python frames: extract the incoming context from the environ (headers read straight from the
//! `HTTP_*` keys by the native propagator), start the SERVER span with the stable HTTP semantic
//! convention attributes, make it current while the application runs, and hand back one object
//! that is both the `start_response` the application calls (status code, error status, the
//! Flask route) and the response iterable whose `close()` ends the span. Bench `flask_request`:
//! the per-request work of the official instrumentation is most of its cost, not the SDK's.

use std::sync::Mutex;

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use weft_sdk::FullSpanContext;

use crate::globals;
use crate::propagate::Propagator;
use crate::span::{EXCEPTION_RECORDED, SERVER_MIDDLEWARE, Span};
use crate::tracer::Tracer;

/// Methods kept as they are in `http.request.method`; anything else is `_OTHER`
/// (`opentelemetry.util.http.sanitize_method`).
const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY",
];

/// Environ keys, interned once.
struct Keys {
    request_method: Py<PyString>,
    url_scheme: Py<PyString>,
    http_host: Py<PyString>,
    server_name: Py<PyString>,
    server_port: Py<PyString>,
    script_name: Py<PyString>,
    path_info: Py<PyString>,
    query_string: Py<PyString>,
    remote_addr: Py<PyString>,
    remote_port: Py<PyString>,
    user_agent: Py<PyString>,
    server_protocol: Py<PyString>,
}

impl Keys {
    fn new(py: Python<'_>) -> Self {
        let k = |s: &str| PyString::intern(py, s).unbind();
        Keys {
            request_method: k("REQUEST_METHOD"),
            url_scheme: k("wsgi.url_scheme"),
            http_host: k("HTTP_HOST"),
            server_name: k("SERVER_NAME"),
            server_port: k("SERVER_PORT"),
            script_name: k("SCRIPT_NAME"),
            path_info: k("PATH_INFO"),
            query_string: k("QUERY_STRING"),
            remote_addr: k("REMOTE_ADDR"),
            remote_port: k("REMOTE_PORT"),
            user_agent: k("HTTP_USER_AGENT"),
            server_protocol: k("SERVER_PROTOCOL"),
        }
    }
}

/// The propagator resolved for the global textmap last seen.
struct Resolved {
    textmap: PyObject,
    native: Option<Py<Propagator>>,
}

/// What a server instrumentation (WSGI or ASGI) resolves per request: the tracer and the
/// propagator.
pub(crate) struct ServerCore {
    /// The weft tracer, once `resolve_tracer` found one.
    tracer: Mutex<Option<Py<Tracer>>>,
    /// `() -> Tracer | None`: the weft tracer of the configured provider.
    resolve_tracer: PyObject,
    /// A fixed propagator (`propagator=` given), else `None`: the global textmap per request.
    fixed: Option<PyObject>,
    /// `() -> TextMapPropagator`: `opentelemetry.propagate.get_global_textmap`.
    get_textmap: PyObject,
    /// `(textmap) -> _native.Propagator | None`: the native equivalent of a textmap, if any.
    resolve_propagator: PyObject,
    /// `(textmap, carrier) -> Context`: the general extract, through the textmap's Python code.
    pub(crate) extract_context: PyObject,
    resolved: Mutex<Option<Resolved>>,
}

impl ServerCore {
    pub(crate) fn new(
        py: Python<'_>,
        resolve_tracer: PyObject,
        fixed: Option<PyObject>,
        get_textmap: PyObject,
        resolve_propagator: PyObject,
        extract_context: PyObject,
    ) -> Self {
        ServerCore {
            tracer: Mutex::new(None),
            resolve_tracer,
            fixed: fixed.filter(|f| !f.is_none(py)),
            get_textmap,
            resolve_propagator,
            extract_context,
            resolved: Mutex::new(None),
        }
    }

    /// The weft tracer, or `None` while the configured provider is not a weft provider.
    pub(crate) fn tracer(&self, py: Python<'_>) -> PyResult<Option<Py<Tracer>>> {
        if let Some(t) = self.tracer.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Ok(Some(t.clone_ref(py)));
        }
        let t = self.resolve_tracer.bind(py).call0()?;
        if t.is_none() {
            return Ok(None);
        }
        let t = t.downcast_into::<Tracer>()?.unbind();
        *self.tracer.lock().unwrap_or_else(|p| p.into_inner()) = Some(t.clone_ref(py));
        Ok(Some(t))
    }

    /// The propagator for this request, and its native equivalent when there is one.
    pub(crate) fn propagator<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Option<Py<Propagator>>)> {
        let textmap = match &self.fixed {
            Some(p) => p.bind(py).clone(),
            None => self.get_textmap.bind(py).call0()?,
        };
        let mut r = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        let native = match r.as_ref() {
            Some(r) if r.textmap.is(&textmap) => r.native.as_ref().map(|n| n.clone_ref(py)),
            _ => {
                let n = self.resolve_propagator.bind(py).call1((&textmap,))?;
                let n = if n.is_none() {
                    None
                } else {
                    Some(n.downcast_into::<Propagator>()?.unbind())
                };
                *r = Some(Resolved {
                    textmap: textmap.clone().unbind(),
                    native: n.as_ref().map(|n| n.clone_ref(py)),
                });
                n
            }
        };
        Ok((textmap, native))
    }
}

/// The middleware around one WSGI application.
#[pyclass(module = "weft_sdk._native", name = "WsgiMiddleware", subclass, frozen)]
pub struct WsgiMiddleware {
    app: PyObject,
    core: ServerCore,
    /// Read the route from Flask's request (`environ["werkzeug.request"].url_rule.rule`).
    flask: bool,
    keys: Keys,
}

/// `GET`, … or `_OTHER`; the span name (`HTTP` for `_OTHER`); and the original when it differs.
pub(crate) fn method(raw: &str) -> (&'static str, &'static str, Option<String>) {
    let trimmed = raw.trim();
    for m in METHODS {
        if trimmed.eq_ignore_ascii_case(m) {
            let original = (trimmed != m).then(|| trimmed.to_owned());
            return (m, m, original);
        }
    }
    ("_OTHER", "HTTP", Some(trimmed.to_owned()))
}

fn get_str<'py>(environ: &Bound<'py, PyDict>, key: &Py<PyString>) -> Option<Bound<'py, PyString>> {
    let v = environ.get_item(key.bind(environ.py())).ok()??;
    v.downcast_into::<PyString>().ok()
}

/// A port: a str of digits (PEP 3333) or an int (werkzeug's `REMOTE_PORT`).
fn get_port(environ: &Bound<'_, PyDict>, key: &Py<PyString>) -> Option<i64> {
    let v = environ.get_item(key.bind(environ.py())).ok()??;
    match v.downcast::<PyString>() {
        Ok(s) => s.to_str().ok()?.parse().ok(),
        Err(_) => v.extract().ok(),
    }
}

pub(crate) fn string_attr(attrs: &mut Vec<KeyValue>, key: &'static str, v: &str) {
    attrs.push(KeyValue::new(key, Value::String(v.to_owned().into())));
}

/// `host[:port]` (or `[v6]:port`) split into host and port.
pub(crate) fn split_host(h: &str) -> (&str, Option<i64>) {
    if let Some(rest) = h.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            let port = rest[end + 1..].strip_prefix(':').and_then(|p| p.parse().ok());
            return (&rest[..end], port);
        }
        return (h, None);
    }
    match h.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, port.parse().ok()),
        _ => (h, None),
    }
}

impl WsgiMiddleware {
    /// The parent span and, when the propagator is not native or the request carries baggage,
    /// the extracted context to run the application in.
    fn extract<'py>(
        &self,
        py: Python<'py>,
        environ: &Bound<'py, PyDict>,
    ) -> PyResult<(Option<FullSpanContext>, Option<Bound<'py, PyAny>>)> {
        let (textmap, native) = self.core.propagator(py)?;
        if let Some(n) = native {
            let (span, baggage) = n.get().extract_environ(environ)?;
            if !baggage {
                return Ok((span, None));
            }
        }
        let cx = self.core.extract_context.bind(py).call1((&textmap, environ))?;
        let parent = crate::tracer::parent_of(py, globals::get(py)?, Some(&cx))?;
        Ok((parent, Some(cx)))
    }

    fn attributes(&self, environ: &Bound<'_, PyDict>, attrs: &mut Vec<KeyValue>) {
        let k = &self.keys;
        if let Some(s) = get_str(environ, &k.url_scheme)
            && let Ok(s) = s.to_str()
        {
            string_attr(attrs, "url.scheme", s);
        }
        let mut port = None;
        if let Some(h) = get_str(environ, &k.http_host)
            && let Ok(h) = h.to_str()
            && !h.is_empty()
        {
            let (host, p) = split_host(h);
            string_attr(attrs, "server.address", host);
            port = p;
        } else if let Some(h) = get_str(environ, &k.server_name)
            && let Ok(h) = h.to_str()
        {
            string_attr(attrs, "server.address", h);
        }
        if port.is_none() {
            port = get_port(environ, &k.server_port);
        }
        if let Some(p) = port {
            attrs.push(KeyValue::new("server.port", p));
        }
        let script = get_str(environ, &k.script_name);
        let path = get_str(environ, &k.path_info);
        match (
            script.as_ref().and_then(|s| s.to_str().ok()).filter(|s| !s.is_empty()),
            path.as_ref().and_then(|s| s.to_str().ok()),
        ) {
            (Some(s), Some(p)) => attrs.push(KeyValue::new("url.path", format!("{s}{p}"))),
            (Some(s), None) => string_attr(attrs, "url.path", s),
            (None, Some(p)) if !p.is_empty() => string_attr(attrs, "url.path", p),
            _ => {}
        }
        if let Some(q) = get_str(environ, &k.query_string)
            && let Ok(q) = q.to_str()
            && !q.is_empty()
        {
            string_attr(attrs, "url.query", q);
        }
        if let Some(a) = get_str(environ, &k.remote_addr)
            && let Ok(a) = a.to_str()
            && !a.is_empty()
        {
            string_attr(attrs, "client.address", a);
        }
        if let Some(p) = get_port(environ, &k.remote_port) {
            attrs.push(KeyValue::new("client.port", p));
        }
        if let Some(ua) = get_str(environ, &k.user_agent)
            && let Ok(ua) = ua.to_str()
            && !ua.trim().is_empty()
        {
            string_attr(attrs, "user_agent.original", ua.trim());
        }
        if let Some(p) = get_str(environ, &k.server_protocol)
            && let Ok(p) = p.to_str()
        {
            let v = if p.len() >= 5 && p[..5].eq_ignore_ascii_case("HTTP/") {
                &p[5..]
            } else {
                p
            };
            if !v.is_empty() {
                string_attr(attrs, "network.protocol.version", v);
            }
        }
    }
}

#[pymethods]
impl WsgiMiddleware {
    /// See `weft_sdk.wsgi.WeftMiddleware`, which builds this.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (app, resolve_tracer, fixed, get_textmap, resolve_propagator, extract_context, flask=false))]
    fn new(
        py: Python<'_>,
        app: PyObject,
        resolve_tracer: PyObject,
        fixed: Option<PyObject>,
        get_textmap: PyObject,
        resolve_propagator: PyObject,
        extract_context: PyObject,
        flask: bool,
    ) -> Self {
        WsgiMiddleware {
            app,
            core: ServerCore::new(
                py,
                resolve_tracer,
                fixed,
                get_textmap,
                resolve_propagator,
                extract_context,
            ),
            flask,
            keys: Keys::new(py),
        }
    }

    /// The wrapped application.
    #[getter]
    fn wsgi_app(&self, py: Python<'_>) -> PyObject {
        self.app.clone_ref(py)
    }

    /// The WSGI entry point.
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        environ: &Bound<'py, PyDict>,
        start_response: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let Some(tracer) = this.core.tracer(py)? else {
            return this.app.bind(py).call1((environ, start_response));
        };
        let g = globals::get(py)?;
        let (parent, cx) = this.extract(py, environ)?;
        let raw = get_str(environ, &this.keys.request_method);
        let raw = raw.as_ref().and_then(|m| m.to_str().ok()).unwrap_or("");
        let (m, name, original) = method(raw);
        let mut attrs = Vec::with_capacity(14);
        attrs.push(KeyValue::new("http.request.method", m));
        if let Some(o) = original {
            attrs.push(KeyValue::new("http.request.method_original", o));
        }
        this.attributes(environ, &mut attrs);
        let (full, inner) =
            tracer
                .get()
                .start_with_parent(py, name, parent, SpanKind::Server, attrs, Vec::new(), None)?;
        let span = Bound::new(py, Span::started(full, inner, SERVER_MIDDLEWARE, SpanKind::Server))?;
        let token = match &cx {
            None => globals::attach_span(py, g, span.as_any())?,
            Some(cx) => {
                let cx = g.set_span_in_context.bind(py).call1((&span, cx))?;
                g.attach.bind(py).call1((cx,))?
            }
        };
        let response = Bound::new(
            py,
            WsgiResponse {
                span: Some(span.clone().unbind()),
                start_response: start_response.unbind(),
                environ: this.flask.then(|| environ.clone().unbind()),
                method: m,
                iterable: None,
                iter: None,
            },
        )?;
        let result = this.app.bind(py).call1((environ, &response));
        match &cx {
            None => globals::detach(py, g, &token),
            Some(_) => {
                let _ = g.detach.bind(py).call1((&token,));
            }
        }
        match result {
            Ok(it) => {
                response.borrow_mut().iterable = Some(it.unbind());
                Ok(response.into_any())
            }
            Err(e) => {
                let mut s = span.borrow_mut();
                s.server_exception(py, e.value(py).as_any())?;
                s.end_now();
                Err(e)
            }
        }
    }
}

/// One request: the `start_response` the application calls and the iterable it returns.
#[pyclass(module = "weft_sdk._native", name = "WsgiResponse")]
pub struct WsgiResponse {
    span: Option<Py<Span>>,
    start_response: PyObject,
    /// The environ, to read Flask's matched rule from.
    environ: Option<Py<PyDict>>,
    method: &'static str,
    iterable: Option<PyObject>,
    /// `iter(iterable)`, once iteration starts.
    iter: Option<Py<pyo3::types::PyIterator>>,
}

impl WsgiResponse {
    fn finish(&mut self, py: Python<'_>) {
        if let Some(span) = self.span.take() {
            span.bind(py).borrow_mut().end_now();
        }
    }

    /// Flask's matched rule: the request object werkzeug keeps in the environ, read when the
    /// application calls `start_response` (before Flask clears it), so no per-request hook runs.
    fn route(&self, py: Python<'_>, environ: &Bound<'_, PyDict>) -> Option<String> {
        let req = environ.get_item(pyo3::intern!(py, "werkzeug.request")).ok()??;
        if req.is_none() {
            return None;
        }
        let rule = req.getattr(pyo3::intern!(py, "url_rule")).ok()?;
        if rule.is_none() {
            return None;
        }
        rule.getattr(pyo3::intern!(py, "rule")).ok()?.extract().ok()
    }
}

#[pymethods]
impl WsgiResponse {
    /// `start_response(status, headers, exc_info=None)`: records the status code (and the
    /// route), then calls the server's.
    #[pyo3(signature = (status, headers, exc_info=None))]
    fn __call__(
        &mut self,
        py: Python<'_>,
        status: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        exc_info: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        if let Some(span) = &self.span {
            let route = self.environ.as_ref().and_then(|e| self.route(py, e.bind(py)));
            let mut s = span.bind(py).borrow_mut();
            let code = status.downcast::<PyString>().ok().and_then(|s| {
                s.to_str()
                    .ok()
                    .and_then(|s| s.get(..3))
                    .and_then(|c| c.parse::<i64>().ok())
            });
            s.server_status(code, status, route.as_deref(), self.method);
        }
        let args = match exc_info {
            Some(e) if !e.is_none() => PyTuple::new(py, [status, headers, e])?,
            _ => PyTuple::new(py, [status, headers])?,
        };
        Ok(self.start_response.bind(py).call1(args)?.unbind())
    }

    /// Iterates the application's response. Returns itself rather than the application's
    /// iterator: a server (werkzeug's among them) that sees `iter(response) is response` does
    /// not wrap it once more (bench `flask_request`: the extra wrapper cost more than the span).
    fn __iter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        {
            let mut r = slf.borrow_mut();
            if r.iter.is_none() {
                let it = match &r.iterable {
                    Some(it) => it.bind(py).try_iter()?,
                    None => return Err(pyo3::exceptions::PyRuntimeError::new_err("the response is not ready")),
                };
                r.iter = Some(it.unbind());
            }
        }
        Ok(slf)
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let Some(it) = &self.iter else {
            return Err(pyo3::exceptions::PyTypeError::new_err("iter() the response first"));
        };
        match it.bind(py).clone().next() {
            Some(r) => r.map(|v| Some(v.unbind())),
            None => Ok(None),
        }
    }

    /// Closes the application's response, then ends the span.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        let r = match &self.iterable {
            Some(it) => match it.bind(py).getattr(pyo3::intern!(py, "close")) {
                Ok(c) => c.call0().map(|_| ()),
                Err(_) => Ok(()),
            },
            None => Ok(()),
        };
        if let (Err(e), Some(span)) = (&r, &self.span) {
            let _ = span.bind(py).borrow_mut().server_exception(py, e.value(py).as_any());
        }
        self.finish(py);
        r
    }
}

/// Records `exception` on the current span when it is a middleware's server span (Flask's
/// `got_request_exception`: the exception never reaches the middleware).
#[pyfunction]
pub(crate) fn record_server_exception(py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<()> {
    let g = globals::get(py)?;
    let cx = globals::current_context(py, g)?;
    let Ok(d) = cx.downcast::<PyDict>() else {
        return Ok(());
    };
    if let Some(v) = d.get_item(g.span_key.bind(py))?
        && let Ok(s) = v.downcast::<Span>()
    {
        let mut s = s.borrow_mut();
        if s.flags & SERVER_MIDDLEWARE != 0 && s.flags & EXCEPTION_RECORDED == 0 {
            s.server_exception(py, exception)?;
        }
    }
    Ok(())
}

impl Span {
    /// The exception of a server request: `exception` event, `error.type`, error status.
    pub(crate) fn server_exception(&mut self, py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.flags & EXCEPTION_RECORDED != 0 || !self.is_recording_now() {
            return Ok(());
        }
        self.flags |= EXCEPTION_RECORDED;
        self.record_exception_now(py, exception)?;
        let ty = exception.get_type();
        let qualname = ty.qualname().map(|n| n.to_string()).unwrap_or_default();
        let module = ty.module().map(|n| n.to_string()).unwrap_or_default();
        let error_type = if module.is_empty() || module == "builtins" {
            qualname
        } else {
            format!("{module}.{qualname}")
        };
        self.set_attribute_now(KeyValue::new("error.type", error_type));
        self.error_status_now(exception);
        Ok(())
    }

    /// The response status: `http.response.status_code`, and error status (with `error.type`)
    /// for 5xx unless an exception already set them; `http.route` and the span name.
    pub(crate) fn server_status(
        &mut self,
        code: Option<i64>,
        status: &Bound<'_, PyAny>,
        route: Option<&str>,
        method: &'static str,
    ) {
        if !self.is_recording_now() {
            return;
        }
        if let Some(r) = route {
            self.set_attribute_now(KeyValue::new("http.route", r.to_owned()));
            if method != "_OTHER" {
                self.update_name_now(format!("{method} {r}"));
            }
        }
        match code {
            Some(c) => {
                self.set_attribute_now(KeyValue::new("http.response.status_code", c));
                if c >= 500 && self.flags & EXCEPTION_RECORDED == 0 {
                    self.set_attribute_now(KeyValue::new("error.type", c.to_string()));
                    self.set_status_now(Status::error(""));
                }
            }
            None => {
                let s = status.str().map(|s| s.to_string()).unwrap_or_default();
                self.set_attribute_now(KeyValue::new("error.type", s.clone()));
                self.set_status_now(Status::error(format!("Non-integer HTTP status: {s}")));
            }
        }
    }
}
