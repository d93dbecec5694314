//! The native half of weft's ASGI server instrumentation (`weft_sdk.asgi`).
//!
//! The middleware itself is a Python coroutine (ASGI is async), so per request it makes four
//! native calls: [`AsgiServer::start`] (context from the scope's headers, the SERVER span with
//! the stable HTTP semantic-convention attributes, made current), then on the request
//! [`AsgiRequest::status`] (from `http.response.start`), [`AsgiRequest::exception`] if the
//! application raised, and [`AsgiRequest::finish`] (route from the scope, end, detach).

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use weft_sdk::FullSpanContext;

use crate::globals;
use crate::span::{SERVER_MIDDLEWARE, Span};
use crate::wsgi::{ServerCore, method, split_host, string_attr};

/// The server instrumentation of one ASGI application.
#[pyclass(module = "weft_sdk._native", name = "AsgiServer", frozen)]
pub struct AsgiServer {
    core: ServerCore,
}

fn text(v: &Bound<'_, PyAny>) -> Option<String> {
    if let Ok(b) = v.downcast::<PyBytes>() {
        // Header bytes are latin-1 (ASGI); the values weft reads are ASCII.
        return Some(b.as_bytes().iter().map(|&c| c as char).collect());
    }
    v.downcast::<PyString>().ok()?.to_str().ok().map(str::to_owned)
}

fn host_port(v: &Bound<'_, PyAny>) -> Option<(String, Option<i64>)> {
    let t = v
        .downcast::<PyTuple>()
        .ok()
        .map(|t| t.as_sequence().clone())
        .or_else(|| {
            v.downcast::<pyo3::types::PyList>()
                .ok()
                .map(|l| l.as_sequence().clone())
        })?;
    let host: String = t.get_item(0).ok()?.extract().ok()?;
    let port = t.get_item(1).ok().and_then(|p| p.extract::<i64>().ok());
    Some((host, port))
}

#[pymethods]
impl AsgiServer {
    /// See `weft_sdk.asgi.WeftASGIMiddleware`, which builds this.
    #[new]
    fn new(
        py: Python<'_>,
        resolve_tracer: PyObject,
        fixed: Option<PyObject>,
        get_textmap: PyObject,
        resolve_propagator: PyObject,
        extract_context: PyObject,
    ) -> Self {
        AsgiServer {
            core: ServerCore::new(
                py,
                resolve_tracer,
                fixed,
                get_textmap,
                resolve_propagator,
                extract_context,
            ),
        }
    }

    /// Starts the SERVER span of an `http` scope and makes it current; `None` while no weft
    /// provider is configured (the request then runs untraced).
    fn start(&self, scope: &Bound<'_, PyDict>) -> PyResult<Option<AsgiRequest>> {
        let py = scope.py();
        let Some(tracer) = self.core.tracer(py)? else {
            return Ok(None);
        };
        let g = globals::get(py)?;
        let mut headers = Vec::new();
        let (mut host, mut user_agent) = (None, None);
        if let Some(hs) = scope.get_item("headers")? {
            for h in hs.try_iter()? {
                let h = h?;
                let (Ok(k), Ok(v)) = (h.get_item(0), h.get_item(1)) else {
                    continue;
                };
                let (Some(k), Some(v)) = (text(&k), text(&v)) else {
                    continue;
                };
                let k = k.to_ascii_lowercase();
                match k.as_str() {
                    "host" => host = Some(v),
                    "user-agent" => user_agent = Some(v),
                    _ => headers.push((k, v)),
                }
            }
        }
        let (textmap, native) = self.core.propagator(py)?;
        let mut parent: Option<FullSpanContext> = None;
        let mut cx = None;
        let mut general = true;
        if let Some(n) = native {
            let (span, baggage) = n.get().extract_headers(headers);
            if !baggage {
                parent = span;
                general = false;
            }
        }
        if general {
            let c = self.core.extract_context.bind(py).call1((&textmap, scope))?;
            parent = crate::tracer::parent_of(py, g, Some(&c))?;
            cx = Some(c);
        }
        let raw: String = match scope.get_item("method")? {
            Some(m) => m.extract().unwrap_or_default(),
            None => String::new(),
        };
        let (m, name, original) = method(&raw);
        let mut attrs = Vec::with_capacity(14);
        attrs.push(KeyValue::new("http.request.method", m));
        if let Some(o) = original {
            attrs.push(KeyValue::new("http.request.method_original", o));
        }
        let scheme: String = match scope.get_item("scheme")? {
            Some(s) => s.extract().unwrap_or_else(|_| "http".into()),
            None => "http".into(),
        };
        string_attr(&mut attrs, "url.scheme", &scheme);
        let server = match scope.get_item("server")? {
            Some(s) if !s.is_none() => host_port(&s),
            _ => None,
        };
        match host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => {
                let (a, p) = split_host(h);
                string_attr(&mut attrs, "server.address", a);
                if let Some(p) = p.or_else(|| server.as_ref().and_then(|s| s.1)) {
                    attrs.push(KeyValue::new("server.port", p));
                }
            }
            None => {
                if let Some((a, p)) = &server {
                    string_attr(&mut attrs, "server.address", a);
                    if let Some(p) = p {
                        attrs.push(KeyValue::new("server.port", *p));
                    }
                }
            }
        }
        if let Some(p) = scope.get_item("path")?
            && let Ok(p) = p.extract::<String>()
            && !p.is_empty()
        {
            string_attr(&mut attrs, "url.path", &p);
        }
        if let Some(q) = scope.get_item("query_string")?
            && let Some(q) = text(&q)
            && !q.is_empty()
        {
            string_attr(&mut attrs, "url.query", &q);
        }
        if let Some(c) = scope.get_item("client")?
            && !c.is_none()
            && let Some((a, p)) = host_port(&c)
        {
            string_attr(&mut attrs, "client.address", &a);
            if let Some(p) = p {
                attrs.push(KeyValue::new("client.port", p));
            }
        }
        if let Some(ua) = user_agent.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
            string_attr(&mut attrs, "user_agent.original", ua);
        }
        if let Some(v) = scope.get_item("http_version")?
            && let Ok(v) = v.extract::<String>()
        {
            string_attr(&mut attrs, "network.protocol.version", &v);
        }
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
        Ok(Some(AsgiRequest {
            span: Some(span.unbind()),
            token: Some(token.unbind()),
            api_attach: cx.is_some(),
            method: m,
        }))
    }
}

/// One ASGI request's span.
#[pyclass(module = "weft_sdk._native", name = "AsgiRequest")]
pub struct AsgiRequest {
    span: Option<Py<Span>>,
    token: Option<PyObject>,
    /// Attached through `opentelemetry.context.attach` (the general extract path).
    api_attach: bool,
    method: &'static str,
}

#[pymethods]
impl AsgiRequest {
    /// The status of `http.response.start`: `http.response.status_code`, error on 5xx.
    fn status(&self, py: Python<'_>, status: &Bound<'_, PyAny>) {
        if let Some(s) = &self.span {
            let code = status.extract::<i64>().ok();
            s.bind(py).borrow_mut().server_status(code, status, None, self.method);
        }
    }

    /// An exception out of the application: `exception` event, `error.type`, error status.
    fn exception(&self, py: Python<'_>, exception: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(s) = &self.span {
            s.bind(py).borrow_mut().server_exception(py, exception)?;
        }
        Ok(())
    }

    /// Names the span after the matched route (`scope["route"].path`, set by Starlette and
    /// FastAPI), ends it and restores the context. A second call does nothing.
    fn finish(&mut self, py: Python<'_>, scope: &Bound<'_, PyDict>) -> PyResult<()> {
        if let Some(span) = self.span.take() {
            let route = scope
                .get_item("route")?
                .filter(|r| !r.is_none())
                .and_then(|r| r.getattr(pyo3::intern!(py, "path")).ok())
                .and_then(|p| p.extract::<String>().ok());
            let mut s = span.bind(py).borrow_mut();
            if let Some(r) = route
                && s.is_recording_now()
            {
                s.set_attribute_now(KeyValue::new("http.route", r.clone()));
                if self.method != "_OTHER" {
                    s.update_name_now(format!("{} {r}", self.method));
                }
            }
            s.end_now();
        }
        if let Some(t) = self.token.take() {
            let g = globals::get(py)?;
            if self.api_attach {
                let _ = g.detach.bind(py).call1((t,));
            } else {
                globals::detach(py, g, t.bind(py));
            }
        }
        Ok(())
    }
}
