//! Counters the ingest path keeps, rendered as Prometheus text by the server.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Every counter of the ingest path.
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
    pub blocks: AtomicU64,
    pub inflight_bytes: AtomicU64,
    pub compactions: AtomicU64,
    pub compaction_input_blocks: AtomicU64,
    pub compaction_spans: AtomicU64,
    pub compaction_duplicates: AtomicU64,
    pub compaction_errors: AtomicU64,
    pub compaction_nanos: AtomicU64,
    pub retention_deleted_blocks: AtomicU64,
    pub trace_lookups: AtomicU64,
    pub trace_lookup_blocks_read: AtomicU64,
    /// Blocks taken out of service because their bytes are damaged: (tenant, block id, why).
    pub quarantined: Mutex<Vec<(String, String, String)>>,
    pub blocks_quarantined: AtomicU64,
    /// Reads that skipped a block whose bytes verify but do not decode (left in place).
    pub block_read_errors: AtomicU64,
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

    /// Appends the Prometheus text exposition of these metrics.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP weft_spans_received_total Spans accepted and made durable, by tenant."
        );
        let _ = writeln!(out, "# TYPE weft_spans_received_total counter");
        let tenants = self.tenants.lock().clone();
        for (t, c) in &tenants {
            let _ = writeln!(
                out,
                "weft_spans_received_total{{tenant=\"{t}\"}} {}",
                c.spans_received.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP weft_bytes_received_total Encoded bytes accepted, by tenant."
        );
        let _ = writeln!(out, "# TYPE weft_bytes_received_total counter");
        for (t, c) in &tenants {
            let _ = writeln!(
                out,
                "weft_bytes_received_total{{tenant=\"{t}\"}} {}",
                c.bytes_received.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP weft_spans_refused_total Spans refused, by tenant and reason (requests whose spans could not be counted count as 1)."
        );
        let _ = writeln!(out, "# TYPE weft_spans_refused_total counter");
        for ((t, r), n) in self.refused.lock().iter() {
            let _ = writeln!(
                out,
                "weft_spans_refused_total{{tenant=\"{t}\",reason=\"{}\"}} {n}",
                r.as_str()
            );
        }
        let _ = writeln!(
            out,
            "# HELP weft_block_quarantined A block moved to quarantine/ because its bytes are damaged (1 per block, by tenant and block; queries answer without it, marked partial)."
        );
        let _ = writeln!(out, "# TYPE weft_block_quarantined gauge");
        for (t, b, _) in self.quarantined.lock().iter() {
            let _ = writeln!(out, "weft_block_quarantined{{tenant=\"{t}\",block=\"{b}\"}} 1");
        }
        let gauges: [(&str, &str, &str, &AtomicU64); 21] = [
            (
                "weft_blocks_quarantined_total",
                "counter",
                "Blocks quarantined since start because a checksum or decode check found damage.",
                &self.blocks_quarantined,
            ),
            (
                "weft_block_read_errors_total",
                "counter",
                "Block reads skipped because verified bytes did not decode (a bug; the block stays in place).",
                &self.block_read_errors,
            ),
            (
                "weft_trace_lookups_total",
                "counter",
                "Traces looked up by ID (trace by ID, and traces search had to assemble).",
                &self.trace_lookups,
            ),
            (
                "weft_trace_lookup_blocks_read_total",
                "counter",
                "Blocks read by trace lookups: those whose trace-ID index admitted the trace.",
                &self.trace_lookup_blocks_read,
            ),
            (
                "weft_compactions_total",
                "counter",
                "Compactions finished (each merges several blocks into one).",
                &self.compactions,
            ),
            (
                "weft_compaction_input_blocks_total",
                "counter",
                "Blocks merged away by compaction.",
                &self.compaction_input_blocks,
            ),
            (
                "weft_compaction_spans_written_total",
                "counter",
                "Spans written by compaction.",
                &self.compaction_spans,
            ),
            (
                "weft_compaction_duplicate_spans_removed_total",
                "counter",
                "Duplicate spans (client retries) dropped by compaction.",
                &self.compaction_duplicates,
            ),
            (
                "weft_compaction_errors_total",
                "counter",
                "Compactions that failed (their inputs stay in place).",
                &self.compaction_errors,
            ),
            (
                "weft_compaction_seconds_total",
                "counter",
                "Time spent compacting.",
                &self.compaction_nanos,
            ),
            (
                "weft_retention_deleted_blocks_total",
                "counter",
                "Blocks deleted because they were past their tenant's retention.",
                &self.retention_deleted_blocks,
            ),
            (
                "weft_blocks_written_total",
                "counter",
                "Blocks cut from the head and written.",
                &self.blocks_written,
            ),
            (
                "weft_block_bytes_written_total",
                "counter",
                "Bytes of data.parquet written.",
                &self.block_bytes_written,
            ),
            (
                "weft_block_spans_written_total",
                "counter",
                "Spans written into blocks.",
                &self.block_spans_written,
            ),
            (
                "weft_block_write_errors_total",
                "counter",
                "Block writes that failed (retried).",
                &self.block_write_errors,
            ),
            (
                "weft_block_write_seconds_total",
                "counter",
                "Time spent encoding and writing blocks.",
                &self.block_write_nanos,
            ),
            (
                "weft_head_spans",
                "gauge",
                "Spans in the head, not yet in a block.",
                &self.head_spans,
            ),
            (
                "weft_head_bytes",
                "gauge",
                "Approximate memory held by the head.",
                &self.head_bytes,
            ),
            (
                "weft_flushing_bytes",
                "gauge",
                "Approximate memory of cut blocks being written.",
                &self.flushing_bytes,
            ),
            ("weft_blocks", "gauge", "Blocks in storage.", &self.blocks),
            (
                "weft_ingest_inflight_bytes",
                "gauge",
                "Request bytes accepted but not yet durable.",
                &self.inflight_bytes,
            ),
        ];
        for (name, kind, help, v) in gauges {
            let mut value = v.load(Ordering::Relaxed) as f64;
            if name == "weft_block_write_seconds_total" || name == "weft_compaction_seconds_total" {
                value /= 1e9; // kept in nanoseconds
            }
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        }
    }
}
