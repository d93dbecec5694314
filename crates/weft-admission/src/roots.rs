//! Root spans as requests are admitted, for what steers sampling from the traffic it sees
//! (adaptive sampling counts them per service and operation).

use std::sync::{Arc, OnceLock};

use weft_otlp::request::RootRef;

/// Told of every admitted request's root spans.
///
/// Contract: [`roots`](RootSink::roots) runs on the receiving task, once per admitted request
/// that has root spans, before the request is stored, so it must be cheap (no I/O, no await,
/// a short critical section) and must not fail: a request is never refused because of it.
/// `request` is the request's OTLP bytes (valid: validated, or weft's own conversion) and
/// each [`RootRef`] ranges into it.
pub trait RootSink: Send + Sync {
    fn roots(&self, tenant: &Arc<str>, request: &[u8], roots: &[RootRef]);
}

/// Where a consumer keeps the sink it was given, once ([`crate::TraceConsumer::watch_roots`]).
#[derive(Default)]
pub struct RootWatch(OnceLock<Arc<dyn RootSink>>);

impl RootWatch {
    /// Sets the sink; a second call is refused (one sink a consumer).
    pub fn set(&self, sink: Arc<dyn RootSink>) -> Result<(), &'static str> {
        self.0.set(sink).map_err(|_| "root spans are already watched")
    }

    /// Tells the sink, if there is one, of `request`'s roots.
    #[inline]
    pub fn tell(&self, tenant: &Arc<str>, request: &[u8], roots: &[RootRef]) {
        if roots.is_empty() {
            return;
        }
        if let Some(sink) = self.0.get() {
            sink.roots(tenant, request, roots);
        }
    }
}
