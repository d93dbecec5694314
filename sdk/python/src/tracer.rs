//! `Provider` (one `sdk/rust` pipeline: sampler, IDs, limits, queue, export thread) and
//! `Tracer` (one instrumentation scope of a provider).
//!
//! **Fork.** A forked child inherits the provider's memory but not its export thread (nor the
//! Jaeger remote sampler's poller), and a lock held by one of those threads at the time of the
//! fork stays held forever in the child. `Provider::after_fork_child` therefore never touches
//! the inherited pipeline: it leaks it (no destructor runs, so no lock is taken and no thread is
//! joined), reseeds the thread's ID generator (or parent and child would draw the same IDs) and
//! builds a fresh pipeline from the saved configuration, re-registering the scopes in the same
//! order so that every `Tracer` handed out before the fork keeps working.

use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{Link, SpanKind, TracerProvider as _};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use weft_sdk::export::{BatchConfig, Compression, InMemoryExporter, NoopExporter, OtlpConfig};
use weft_sdk::id::{SpanId, TraceId};
use weft_sdk::trace::{IdGeneration, SpanLimits};
use weft_sdk::{FullSpanContext, Resource, SpanContext, TraceState};

use crate::convert;
use crate::globals;
use crate::sampler::SamplerSpec;
use crate::span::{CURRENT, END_ON_EXIT, Pending, RECORD_EXCEPTION, SET_STATUS_ON_EXCEPTION, Span};

#[derive(Clone)]
enum ExporterSpec {
    None,
    Memory,
    /// Accepts and discards every batch (benchmarks: the queue and export thread run, no I/O).
    Noop,
    Otlp(OtlpConfig),
}

struct Config {
    resource: Resource,
    sampler: SamplerSpec,
    xray_ids: bool,
    limits: SpanLimits,
    batch: BatchConfig,
    exporter: ExporterSpec,
    /// (name, version, schema_url) of every scope, in index order.
    scopes: Vec<(String, Option<String>, Option<String>)>,
}

struct Inner {
    provider: weft_sdk::TracerProvider,
    tracers: Vec<weft_sdk::Tracer>,
    memory: Option<InMemoryExporter>,
}

fn scope(s: &(String, Option<String>, Option<String>)) -> InstrumentationScope {
    let mut b = InstrumentationScope::builder(s.0.clone());
    if let Some(v) = &s.1 {
        b = b.with_version(v.clone());
    }
    if let Some(u) = &s.2 {
        b = b.with_schema_url(u.clone());
    }
    b.build()
}

fn build(cfg: &Config) -> PyResult<Inner> {
    let mut b = weft_sdk::TracerProvider::builder()
        .with_resource(cfg.resource.clone())
        .with_boxed_sampler(cfg.sampler.build())
        .with_span_limits(cfg.limits)
        .with_batch_config(cfg.batch.clone());
    if cfg.xray_ids {
        b = b.with_id_generation(IdGeneration::Xray);
    }
    let mut memory = None;
    match &cfg.exporter {
        ExporterSpec::None => {}
        ExporterSpec::Noop => {
            b = b.with_exporter(NoopExporter);
        }
        ExporterSpec::Memory => {
            let m = InMemoryExporter::new();
            memory = Some(m.clone());
            b = b.with_exporter(m);
        }
        ExporterSpec::Otlp(c) => {
            b = b
                .with_otlp(c.clone())
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid OTLP exporter: {e}")))?;
        }
    }
    let provider = b.build();
    let tracers = cfg
        .scopes
        .iter()
        .map(|s| provider.tracer_with_scope(scope(s)))
        .collect();
    Ok(Inner {
        provider,
        tracers,
        memory,
    })
}

/// `(CA file, client certificate file, client key file, insecure)`.
type TlsSpec = (Option<String>, Option<String>, Option<String>, bool);
/// `("otlp", protocol, endpoint, headers, compression, timeout_ms, tls)`.
type OtlpSpec = (String, String, String, Vec<(String, String)>, String, u64, TlsSpec);

fn exporter_spec(spec: Option<&Bound<'_, PyAny>>) -> PyResult<ExporterSpec> {
    let Some(spec) = spec.filter(|s| !s.is_none()) else {
        return Ok(ExporterSpec::Otlp(OtlpConfig::from_env()));
    };
    let t = spec.downcast::<PyTuple>()?;
    let tag: String = t.get_item(0)?.extract()?;
    Ok(match tag.as_str() {
        "none" => ExporterSpec::None,
        "memory" => ExporterSpec::Memory,
        "noop" => ExporterSpec::Noop,
        "otlp_env" => ExporterSpec::Otlp(OtlpConfig::from_env()),
        "otlp" => {
            let (_, protocol, endpoint, headers, compression, timeout_ms, tls): OtlpSpec = t.extract()?;
            let mut c = match protocol.as_str() {
                "grpc" => OtlpConfig::grpc(endpoint),
                "http/protobuf" => OtlpConfig::http(endpoint),
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unsupported OTLP protocol {other:?}: use \"http/protobuf\" or \"grpc\""
                    )));
                }
            };
            c.headers = headers;
            c.compression = match compression.as_str() {
                "gzip" => Compression::Gzip,
                "none" => Compression::None,
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unsupported OTLP compression {other:?}: use \"gzip\" or \"none\""
                    )));
                }
            };
            c.timeout = Duration::from_millis(timeout_ms);
            c.tls = weft_sdk::tls::TlsConfig {
                ca_file: tls.0.map(Into::into),
                client_cert_file: tls.1.map(Into::into),
                client_key_file: tls.2.map(Into::into),
                insecure: tls.3,
            };
            ExporterSpec::Otlp(c)
        }
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown exporter spec {other:?}"
            )));
        }
    })
}

/// A tracer provider's native half: one `sdk/rust` pipeline.
#[pyclass(module = "weft_sdk._native", name = "Provider")]
pub struct Provider {
    inner: Option<Inner>,
    cfg: Config,
}

impl Provider {
    fn inner(&self) -> PyResult<&Inner> {
        self.inner
            .as_ref()
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("provider is being rebuilt"))
    }
}

#[pymethods]
impl Provider {
    /// `resource`: a list of `(key, value)`; `sampler`: a spec tuple from `weft_sdk.sampling`;
    /// `exporter`: `("otlp", protocol, endpoint, headers, compression, timeout_ms, (ca_file,
    /// client_cert_file, client_key_file, insecure))`,
    /// `("otlp_env",)`, `("memory",)`, `("none",)` or `None` (OTLP from the environment);
    /// `limits`/`batch`: dicts, or `None` for the `OTEL_SPAN_*`/`OTEL_BSP_*` variables.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (resource, sampler, exporter=None, id_generator="random", limits=None, batch=None, schema_url=None))]
    fn new(
        py: Python<'_>,
        resource: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)>,
        sampler: &Bound<'_, PyAny>,
        exporter: Option<&Bound<'_, PyAny>>,
        id_generator: &str,
        limits: Option<&Bound<'_, PyDict>>,
        batch: Option<&Bound<'_, PyDict>>,
        schema_url: Option<String>,
    ) -> PyResult<Self> {
        let mut attrs = Vec::new();
        for (k, v) in &resource {
            attrs.extend(convert::key_value(py, k, v));
        }
        let resource = Resource {
            attributes: attrs,
            schema_url,
            dropped_attributes_count: 0,
        };
        let xray_ids = match id_generator {
            "random" => false,
            "xray" => true,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown id_generator {other:?}: use \"random\" or \"xray\""
                )));
            }
        };
        let mut l = SpanLimits::from_env();
        if let Some(d) = limits {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                match k.as_str() {
                    "max_attributes" => l.max_attributes_per_span = v.extract()?,
                    "max_attribute_length" => l.max_attribute_value_length = v.extract()?,
                    "max_events" => l.max_events_per_span = v.extract()?,
                    "max_links" => l.max_links_per_span = v.extract()?,
                    "max_event_attributes" => l.max_attributes_per_event = v.extract()?,
                    "max_link_attributes" => l.max_attributes_per_link = v.extract()?,
                    other => {
                        return Err(pyo3::exceptions::PyValueError::new_err(format!(
                            "unknown span limit {other:?}"
                        )));
                    }
                }
            }
        }
        let mut bc = BatchConfig::from_env();
        if let Some(d) = batch {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                match k.as_str() {
                    "max_queue_size" => bc.max_queue_size = v.extract()?,
                    "max_export_batch_size" => bc.max_export_batch_size = v.extract()?,
                    "schedule_delay_millis" => bc.scheduled_delay = Duration::from_millis(v.extract()?),
                    "export_timeout_millis" => bc.export_timeout = Duration::from_millis(v.extract()?),
                    other => {
                        return Err(pyo3::exceptions::PyValueError::new_err(format!(
                            "unknown batch setting {other:?}"
                        )));
                    }
                }
            }
        }
        if bc.max_queue_size == 0 || bc.max_export_batch_size == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "max_queue_size and max_export_batch_size must be positive",
            ));
        }
        let cfg = Config {
            resource,
            sampler: SamplerSpec::from_py(sampler)?,
            xray_ids,
            limits: l,
            batch: bc,
            exporter: exporter_spec(exporter)?,
            scopes: Vec::new(),
        };
        let inner = build(&cfg)?;
        Ok(Provider {
            inner: Some(inner),
            cfg,
        })
    }

    /// Returns the tracer of a scope (one per distinct name, version and schema URL).
    #[pyo3(signature = (name, version=None, schema_url=None))]
    fn tracer(
        slf: &Bound<'_, Self>,
        name: String,
        version: Option<String>,
        schema_url: Option<String>,
    ) -> PyResult<Tracer> {
        let mut p = slf.try_borrow_mut()?;
        let key = (name, version, schema_url);
        let index = match p.cfg.scopes.iter().position(|s| *s == key) {
            Some(i) => i,
            None => {
                let inner = p
                    .inner
                    .as_mut()
                    .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("provider is being rebuilt"))?;
                let t = inner.provider.tracer_with_scope(scope(&key));
                inner.tracers.push(t);
                p.cfg.scopes.push(key);
                p.cfg.scopes.len() - 1
            }
        };
        Ok(Tracer {
            provider: slf.clone().unbind(),
            scope: index,
        })
    }

    /// Exports every span queued now; returns whether that finished within `timeout` seconds.
    /// The GIL is released while waiting.
    fn force_flush(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        crate::logbridge::drain(py);
        let p = self.inner()?.provider.clone();
        let t = duration(timeout)?;
        let ok = py.allow_threads(move || p.force_flush(t).is_ok());
        crate::logbridge::drain(py);
        Ok(ok)
    }

    /// Stops the pipeline after exporting what is queued (within `timeout` seconds); returns
    /// whether it finished in time. The GIL is released while waiting.
    fn shutdown(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        crate::logbridge::drain(py);
        let p = self.inner()?.provider.clone();
        let t = duration(timeout)?;
        let ok = py.allow_threads(move || p.shutdown(t).is_ok());
        crate::logbridge::drain(py);
        Ok(ok)
    }

    /// The pipeline's counters (exported, dropped by reason, batches).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::logbridge::drain(py);
        let s = self.inner()?.provider.stats();
        let d = PyDict::new(py);
        d.set_item("exported", s.exported)?;
        d.set_item("dropped", s.dropped())?;
        d.set_item("dropped_queue_full", s.dropped_queue_full)?;
        d.set_item("dropped_shutdown", s.dropped_shutdown)?;
        d.set_item("dropped_permanent", s.dropped_permanent)?;
        d.set_item("dropped_retries_exhausted", s.dropped_retries_exhausted)?;
        d.set_item("dropped_deadline", s.dropped_deadline)?;
        d.set_item("rejected", s.rejected)?;
        d.set_item("batches", s.batches)?;
        Ok(d)
    }

    /// The resource attributes, as exported.
    fn resource_attributes(&self, py: Python<'_>) -> PyResult<PyObject> {
        convert::attrs_to_py(py, &self.cfg.resource.attributes)
    }

    /// The sampler's description.
    fn sampler_description(&self) -> String {
        self.cfg.sampler.build_description()
    }

    /// Spans exported so far by a `("memory",)` exporter, as dicts (tests).
    fn memory_spans(&self, py: Python<'_>) -> PyResult<PyObject> {
        let inner = self.inner()?;
        let Some(m) = &inner.memory else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this provider has no memory exporter",
            ));
        };
        let list = PyList::empty(py);
        for s in m.spans() {
            list.append(span_to_dict(py, &s, &self.cfg.scopes)?)?;
        }
        Ok(list.into_any().unbind())
    }

    /// Forgets the spans a memory exporter holds.
    fn memory_reset(&self) -> PyResult<()> {
        if let Some(m) = &self.inner()?.memory {
            m.reset();
        }
        Ok(())
    }

    /// Called in a forked child (from `os.register_at_fork`): see the module docs.
    fn after_fork_child(&mut self) -> PyResult<()> {
        if let Some(old) = self.inner.take() {
            // Running its destructor would message and join an export thread that does not
            // exist in this process, and could wait on a lock held by it at fork time.
            std::mem::forget(old);
        }
        weft_sdk::id::reseed_thread();
        self.inner = Some(build(&self.cfg)?);
        Ok(())
    }
}

fn duration(secs: f64) -> PyResult<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "timeout must be a non-negative number of seconds, not {secs}"
        )));
    }
    Ok(Duration::from_secs_f64(secs.min(1e9)))
}

fn span_to_dict<'py>(
    py: Python<'py>,
    s: &weft_sdk::trace::SpanData,
    scopes: &[(String, Option<String>, Option<String>)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", s.name.as_ref())?;
    d.set_item("trace_id", u128::from_be_bytes(s.trace_id.to_bytes()))?;
    d.set_item("span_id", u64::from_be_bytes(s.span_id.to_bytes()))?;
    d.set_item("parent_span_id", u64::from_be_bytes(s.parent_span_id.to_bytes()))?;
    d.set_item("trace_flags", s.trace_flags)?;
    d.set_item("parent_is_remote", s.parent_is_remote)?;
    d.set_item("trace_state", s.trace_state.as_str())?;
    d.set_item("kind", convert::kind_to_int(&s.kind))?;
    d.set_item("start_time", s.start_time_unix_nano)?;
    d.set_item("end_time", s.end_time_unix_nano)?;
    d.set_item("attributes", convert::attrs_to_py(py, &s.attributes)?)?;
    d.set_item("dropped_attributes_count", s.dropped_attributes_count)?;
    let events = PyList::empty(py);
    for e in &s.events {
        let ed = PyDict::new(py);
        ed.set_item("name", e.name.as_ref())?;
        ed.set_item("time", e.time_unix_nano)?;
        ed.set_item("attributes", convert::attrs_to_py(py, &e.attributes)?)?;
        ed.set_item("dropped_attributes_count", e.dropped_attributes_count)?;
        events.append(ed)?;
    }
    d.set_item("events", events)?;
    d.set_item("dropped_events_count", s.dropped_events_count)?;
    let links = PyList::empty(py);
    for l in &s.links {
        let ld = PyDict::new(py);
        ld.set_item("trace_id", u128::from_be_bytes(l.context.trace_id.to_bytes()))?;
        ld.set_item("span_id", u64::from_be_bytes(l.context.span_id.to_bytes()))?;
        ld.set_item("trace_flags", l.context.trace_flags)?;
        ld.set_item("is_remote", l.context.is_remote)?;
        ld.set_item("trace_state", l.trace_state.as_str())?;
        ld.set_item("attributes", convert::attrs_to_py(py, &l.attributes)?)?;
        ld.set_item("dropped_attributes_count", l.dropped_attributes_count)?;
        links.append(ld)?;
    }
    d.set_item("links", links)?;
    d.set_item("dropped_links_count", s.dropped_links_count)?;
    let (code, desc) = match &s.status {
        opentelemetry::trace::Status::Unset => (0, String::new()),
        opentelemetry::trace::Status::Ok => (1, String::new()),
        opentelemetry::trace::Status::Error { description } => (2, description.to_string()),
    };
    d.set_item("status_code", code)?;
    d.set_item("status_description", desc)?;
    let scope = scopes.get(s.scope as usize).map(|s| s.0.as_str()).unwrap_or("");
    d.set_item("scope", scope)?;
    Ok(d)
}

/// Reads an `opentelemetry.trace.SpanContext` (or anything with its attributes); `None` when
/// it is invalid.
pub(crate) fn span_context_to_full(sc: &Bound<'_, PyAny>) -> PyResult<Option<FullSpanContext>> {
    let py = sc.py();
    if let Ok(s) = sc.downcast::<Span>() {
        let s = s.try_borrow()?;
        return Ok(s.full.context.is_valid().then(|| s.full.clone()));
    }
    let trace_id: u128 = sc.getattr(pyo3::intern!(py, "trace_id"))?.extract()?;
    let span_id: u64 = sc.getattr(pyo3::intern!(py, "span_id"))?.extract()?;
    if trace_id == 0 || span_id == 0 {
        return Ok(None);
    }
    let flags: u8 = sc
        .getattr(pyo3::intern!(py, "trace_flags"))?
        .extract::<u64>()
        .map(|f| f as u8)
        .unwrap_or(0);
    let is_remote: bool = sc.getattr(pyo3::intern!(py, "is_remote"))?.is_truthy()?;
    let ts = sc.getattr(pyo3::intern!(py, "trace_state"))?;
    let trace_state = if ts.is_none() || ts.len().unwrap_or(0) == 0 {
        TraceState::EMPTY
    } else {
        let header: String = ts.call_method0(pyo3::intern!(py, "to_header"))?.extract()?;
        TraceState::parse_str(&header).unwrap_or(TraceState::EMPTY)
    };
    Ok(Some(FullSpanContext::new(
        SpanContext::new(TraceId::from(trace_id), SpanId::from(span_id), flags, is_remote),
        trace_state,
    )))
}

/// The parent of a new span (or the span to inject): the span in `context`, or in the current
/// context; `None` when there is none or it is invalid.
#[inline]
pub(crate) fn parent_of(
    py: Python<'_>,
    g: &globals::Globals,
    context: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<FullSpanContext>> {
    let cx = match context.filter(|c| !c.is_none()) {
        Some(c) => c.clone(),
        None => globals::current_context(py, g)?,
    };
    let Ok(d) = cx.downcast::<PyDict>() else {
        return Ok(None);
    };
    let Some(v) = d.get_item(g.span_key.bind(py))? else {
        return Ok(None);
    };
    // The common case: a weft span (or remote context) is current; no Python call at all.
    if let Ok(s) = v.downcast::<Span>() {
        return Ok(match s.try_borrow() {
            Ok(s) if s.full.context.is_valid() => Some(s.full.clone()),
            _ => None,
        });
    }
    if v.is_none() {
        return Ok(None);
    }
    let sc = v.call_method0(pyo3::intern!(py, "get_span_context"))?;
    span_context_to_full(&sc)
}

fn links(py: Python<'_>, links: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Link>> {
    let Some(links) = links.filter(|l| !l.is_none()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for l in links.try_iter()? {
        let l = l?;
        let cx = l.getattr(pyo3::intern!(py, "context"))?;
        let Some(full) = span_context_to_full(&cx)? else {
            continue;
        };
        let attrs = match l.getattr(pyo3::intern!(py, "attributes")) {
            Ok(a) => convert::attributes(py, Some(&a))?,
            Err(_) => Vec::new(),
        };
        out.push(Link::new(full.context.to_otel(full.trace_state.to_otel()), attrs, 0));
    }
    Ok(out)
}

/// A tracer: one instrumentation scope of a provider.
#[pyclass(module = "weft_sdk._native", name = "Tracer", frozen)]
pub struct Tracer {
    provider: Py<Provider>,
    scope: usize,
}

impl Tracer {
    /// Starts a span: parent from `context` (or the current context), sampling, IDs, record.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_native(
        &self,
        py: Python<'_>,
        name: String,
        context: Option<&Bound<'_, PyAny>>,
        kind: SpanKind,
        attributes: Option<&Bound<'_, PyAny>>,
        links_arg: Option<&Bound<'_, PyAny>>,
        start_time: Option<u64>,
    ) -> PyResult<(FullSpanContext, weft_sdk::Span)> {
        let g = globals::get(py)?;
        let parent = parent_of(py, g, context)?;
        let attrs = convert::attributes(py, attributes)?;
        let links = links(py, links_arg)?;
        self.start_with_parent(py, name, parent, kind, attrs, links, start_time)
    }

    /// Starts a span under `parent` (already resolved): sampling, IDs, record.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_with_parent(
        &self,
        py: Python<'_>,
        name: impl Into<std::borrow::Cow<'static, str>>,
        parent: Option<FullSpanContext>,
        kind: SpanKind,
        attrs: Vec<opentelemetry::KeyValue>,
        links: Vec<Link>,
        start_time: Option<u64>,
    ) -> PyResult<(FullSpanContext, weft_sdk::Span)> {
        crate::logbridge::drain(py);
        let provider = self.provider.bind(py).try_borrow()?;
        let tracer = &provider.inner()?.tracers[self.scope];
        let span = tracer.start_with_options(name, kind, parent.as_ref(), attrs, links, start_time);
        let mut full = FullSpanContext::new(*span.weft_context(), span.trace_state().clone());
        if let Some(p) = parent
            && p.context.trace_id == full.context.trace_id
        {
            // B3/Jaeger debug and the X-Ray lineage travel with the trace (spec/propagation.md).
            full.b3_debug = p.b3_debug;
            full.jaeger_debug = p.jaeger_debug;
            full.xray_lineage = p.xray_lineage;
        }
        Ok((full, span))
    }
}

fn flags(record_exception: bool, set_status_on_exception: bool, end_on_exit: bool) -> u8 {
    let mut f = 0;
    if record_exception {
        f |= RECORD_EXCEPTION;
    }
    if set_status_on_exception {
        f |= SET_STATUS_ON_EXCEPTION;
    }
    if end_on_exit {
        f |= END_ON_EXIT;
    }
    f
}

#[pymethods]
impl Tracer {
    /// `opentelemetry.trace.Tracer.start_span`.
    #[pyo3(signature = (name, context=None, kind=None, attributes=None, links=None, start_time=None, record_exception=true, set_status_on_exception=true))]
    #[allow(clippy::too_many_arguments)]
    fn start_span(
        &self,
        py: Python<'_>,
        name: &str,
        context: Option<&Bound<'_, PyAny>>,
        kind: Option<&Bound<'_, PyAny>>,
        attributes: Option<&Bound<'_, PyAny>>,
        links: Option<&Bound<'_, PyAny>>,
        start_time: Option<&Bound<'_, PyAny>>,
        record_exception: bool,
        set_status_on_exception: bool,
    ) -> PyResult<Span> {
        let kind = convert::span_kind(kind)?;
        let start = convert::timestamp(start_time)?;
        let (full, inner) = self.start_native(py, name.to_owned(), context, kind.clone(), attributes, links, start)?;
        Ok(Span::started(
            full,
            inner,
            flags(record_exception, set_status_on_exception, true),
            kind,
        ))
    }

    /// `opentelemetry.trace.Tracer.start_as_current_span`: the span starts on `__enter__` (or
    /// per call, when used as a decorator) and is current inside the `with` block.
    #[pyo3(signature = (name, context=None, kind=None, attributes=None, links=None, start_time=None, record_exception=true, set_status_on_exception=true, end_on_exit=true))]
    #[allow(clippy::too_many_arguments)]
    fn start_as_current_span(
        slf: &Bound<'_, Self>,
        name: String,
        context: Option<Bound<'_, PyAny>>,
        kind: Option<&Bound<'_, PyAny>>,
        attributes: Option<Bound<'_, PyAny>>,
        links: Option<Bound<'_, PyAny>>,
        start_time: Option<&Bound<'_, PyAny>>,
        record_exception: bool,
        set_status_on_exception: bool,
        end_on_exit: bool,
    ) -> PyResult<Span> {
        let pending = Pending {
            tracer: slf.clone().unbind(),
            name,
            context: context.filter(|c| !c.is_none()).map(Bound::unbind),
            kind: convert::span_kind(kind)?,
            attributes: attributes.filter(|a| !a.is_none()).map(Bound::unbind),
            links: links.filter(|l| !l.is_none()).map(Bound::unbind),
            start_time: convert::timestamp(start_time)?,
            kind_arg: kind.filter(|k| !k.is_none()).map(|k| k.clone().unbind()),
        };
        Ok(Span::pending(
            pending,
            flags(record_exception, set_status_on_exception, end_on_exit) | CURRENT,
        ))
    }
}

/// A new random trace ID (the thread-local PRNG of `sdk/rust`).
#[pyfunction]
pub(crate) fn new_trace_id() -> u128 {
    u128::from_be_bytes(weft_sdk::id::trace_id_from_draws(weft_sdk::id::next_u64).to_bytes())
}

/// A new random span ID.
#[pyfunction]
pub(crate) fn new_span_id() -> u64 {
    u64::from_be_bytes(weft_sdk::id::span_id_from_draws(weft_sdk::id::next_u64).to_bytes())
}

/// Reseeds the calling thread's ID generator (after `os.fork()`).
#[pyfunction]
pub(crate) fn reseed_after_fork() {
    weft_sdk::id::reseed_thread();
}

/// Takes `sdk/rust`'s pipeline-registry lock before `os.fork()` (`os.register_at_fork`).
#[pyfunction]
pub(crate) fn prepare_fork() {
    weft_sdk::export::prepare_fork();
}

/// Releases it after `os.fork()`, in the parent and in the child.
#[pyfunction]
pub(crate) fn after_fork() {
    weft_sdk::export::after_fork();
}
