//! The native core of the weft Python SDK (`weft_sdk._native`).
//!
//! Everything on the span path lives here, on top of `sdk/rust` (crate `weft-sdk`): span
//! start (context lookup, sampling, IDs), the span record and its attributes, end (one push onto
//! the export queue) and the export thread, which encodes, gzips and sends without ever taking
//! the GIL. Python code in `python/weft_sdk/` only adapts these types to `opentelemetry-api`.
//!
//! - [`span`]: the span handle (`weft_sdk._native.Span`), the only Python object a span creates.
//! - [`tracer`]: `Provider` (pipeline, sampler, scopes; rebuilt in a forked child) and `Tracer`.
//! - [`propagate`]: the propagators of `spec/propagation.md` over header lists.
//! - [`wsgi`]: weft's WSGI server instrumentation (`weft_sdk.wsgi`).
//! - [`asgi`]: the native half of its ASGI instrumentation (`weft_sdk.asgi`).
//! - [`logbridge`]: `sdk/rust`'s warnings through Python `logging`.
//! - [`testing`]: thin entry points into the core for the shared vectors in `spec/vectors/`.

mod asgi;
mod convert;
mod globals;
mod logbridge;
mod propagate;
mod sampler;
mod span;
mod testing;
mod tracer;
mod wsgi;

use pyo3::prelude::*;

/// The `weft_sdk._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<span::Span>()?;
    m.add_class::<tracer::Provider>()?;
    m.add_class::<tracer::Tracer>()?;
    m.add_class::<propagate::Propagator>()?;
    m.add_class::<sampler::Sampler>()?;
    m.add_class::<wsgi::WsgiMiddleware>()?;
    m.add_class::<asgi::AsgiServer>()?;
    m.add_class::<asgi::AsgiRequest>()?;
    m.add_class::<wsgi::WsgiResponse>()?;
    m.add_function(wrap_pyfunction!(wsgi::record_server_exception, m)?)?;
    m.add_function(wrap_pyfunction!(logbridge::flush_warnings, m)?)?;
    m.add_function(wrap_pyfunction!(tracer::prepare_fork, m)?)?;
    m.add_function(wrap_pyfunction!(tracer::after_fork, m)?)?;
    m.add_function(wrap_pyfunction!(globals::init, m)?)?;
    m.add_function(wrap_pyfunction!(tracer::new_trace_id, m)?)?;
    m.add_function(wrap_pyfunction!(tracer::new_span_id, m)?)?;
    m.add_function(wrap_pyfunction!(tracer::reseed_after_fork, m)?)?;
    testing::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
