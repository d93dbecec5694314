//! Counters the write path keeps, rendered as Prometheus text by the server.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_core::prom::{Exposition, Kind};

/// Why spans were refused. Each reason appears in `/metrics` and in the client's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RefuseReason {
    Invalid,
    RequestTooLarge,
    RateLimited,
    TraceTooLarge,
    Overloaded,
    Unauthorized,
    /// The WAL cannot be written (disk full): read-only until space returns.
    WalUnavailable,
    Internal,
}

impl RefuseReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            RefuseReason::Invalid => "invalid",
            RefuseReason::RequestTooLarge => "request_too_large",
            RefuseReason::RateLimited => "rate_limited",
            RefuseReason::TraceTooLarge => "trace_too_large",
            RefuseReason::Overloaded => "overloaded",
            RefuseReason::Unauthorized => "unauthorized",
            RefuseReason::WalUnavailable => "wal_unavailable",
            RefuseReason::Internal => "internal",
        }
    }
}

#[derive(Debug, Default)]
pub struct TenantCounters {
    pub spans_received: AtomicU64,
    pub bytes_received: AtomicU64,
}

/// Every counter of the write path.
#[derive(Debug, Default)]
pub struct IngestMetrics {
    tenants: Mutex<BTreeMap<String, Arc<TenantCounters>>>,
    refused: Mutex<BTreeMap<(String, RefuseReason), u64>>,
    pub blocks_written: AtomicU64,
    pub block_bytes_written: AtomicU64,
    pub block_spans_written: AtomicU64,
    pub block_write_errors: AtomicU64,
    pub block_write_nanos: AtomicU64,
    pub head_spans: AtomicU64,
    pub head_bytes: AtomicU64,
    pub flushing_bytes: AtomicU64,
    pub inflight_bytes: AtomicU64,
}

impl IngestMetrics {
    pub fn tenant(&self, t: &str) -> Arc<TenantCounters> {
        let mut m = self.tenants.lock();
        if let Some(c) = m.get(t) {
            return c.clone();
        }
        let c = Arc::new(TenantCounters::default());
        m.insert(t.to_string(), c.clone());
        c
    }

    pub fn refused(&self, tenant: &str, reason: RefuseReason, spans: u64) {
        *self.refused.lock().entry((tenant.to_string(), reason)).or_insert(0) += spans;
    }

    /// Appends these metrics to a Prometheus text page.
    pub fn render(&self, out: &mut Exposition) {
        let tenants = self.tenants.lock().clone();
        out.family(
            "weft_spans_received_total",
            Kind::Counter,
            "Spans accepted and made durable, by tenant.",
        );
        for (t, c) in &tenants {
            let v = c.spans_received.load(Ordering::Relaxed) as f64;
            out.sample("weft_spans_received_total", &[("tenant", t)], v);
        }
        out.family(
            "weft_bytes_received_total",
            Kind::Counter,
            "Encoded bytes accepted, by tenant.",
        );
        for (t, c) in &tenants {
            let v = c.bytes_received.load(Ordering::Relaxed) as f64;
            out.sample("weft_bytes_received_total", &[("tenant", t)], v);
        }
        out.family(
            "weft_spans_refused_total",
            Kind::Counter,
            "Spans refused, by tenant and reason (requests whose spans could not be counted count as 1).",
        );
        for ((t, r), n) in self.refused.lock().iter() {
            out.sample(
                "weft_spans_refused_total",
                &[("tenant", t), ("reason", r.as_str())],
                *n as f64,
            );
        }
        let n = |v: &AtomicU64| v.load(Ordering::Relaxed) as f64;
        let families: [(&str, Kind, &str, f64); 9] = [
            (
                "weft_blocks_written_total",
                Kind::Counter,
                "Blocks cut from the head and written.",
                n(&self.blocks_written),
            ),
            (
                "weft_block_bytes_written_total",
                Kind::Counter,
                "Bytes of data.parquet written.",
                n(&self.block_bytes_written),
            ),
            (
                "weft_block_spans_written_total",
                Kind::Counter,
                "Spans written into blocks.",
                n(&self.block_spans_written),
            ),
            (
                "weft_block_write_errors_total",
                Kind::Counter,
                "Block writes that failed (retried).",
                n(&self.block_write_errors),
            ),
            (
                "weft_block_write_seconds_total",
                Kind::Counter,
                "Time spent encoding and writing blocks.",
                n(&self.block_write_nanos) / 1e9,
            ),
            (
                "weft_head_spans",
                Kind::Gauge,
                "Spans in the head, not yet in a block.",
                n(&self.head_spans),
            ),
            (
                "weft_head_bytes",
                Kind::Gauge,
                "Approximate memory held by the head.",
                n(&self.head_bytes),
            ),
            (
                "weft_flushing_bytes",
                Kind::Gauge,
                "Approximate memory of cut blocks being written.",
                n(&self.flushing_bytes),
            ),
            (
                "weft_ingest_inflight_bytes",
                Kind::Gauge,
                "Request bytes accepted but not yet durable.",
                n(&self.inflight_bytes),
            ),
        ];
        for (name, kind, help, v) in families {
            out.single(name, kind, help, v);
        }
    }
}
