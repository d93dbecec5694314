//! Counters of the block database: blocks, trace lookups, damage, compaction and retention.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_core::prom::{Exposition, Kind};

#[derive(Debug, Default)]
pub struct DbMetrics {
    pub blocks: AtomicU64,
    pub polls: AtomicU64,
    pub compactions: AtomicU64,
    pub compaction_input_blocks: AtomicU64,
    pub compaction_spans: AtomicU64,
    pub compaction_duplicates: AtomicU64,
    pub compaction_errors: AtomicU64,
    /// Compaction rounds that left a tenant alone because another compactor held its lease.
    pub compaction_lease_skips: AtomicU64,
    pub compaction_nanos: AtomicU64,
    /// CPU time of the compactor's thread while it merged.
    pub compaction_cpu_nanos: AtomicU64,
    /// Spans written into blocks by head cuts (the first write of every span).
    pub cut_spans: AtomicU64,
    pub retention_deleted_blocks: AtomicU64,
    pub trace_lookups: AtomicU64,
    pub trace_lookup_blocks_read: AtomicU64,
    /// Blocks taken out of service because their bytes are damaged: (tenant, block id, why).
    pub quarantined: Mutex<Vec<(String, String, String)>>,
    pub blocks_quarantined: AtomicU64,
    /// Reads that skipped a block whose bytes verify but do not decode (left in place).
    pub block_read_errors: AtomicU64,
    /// Bytes of block data the scrubber verified, and blocks it verified whole.
    pub scrubbed_bytes: AtomicU64,
    pub scrubbed_blocks: AtomicU64,
}

impl DbMetrics {
    /// Appends these metrics to a Prometheus text page.
    pub fn render(&self, out: &mut Exposition) {
        out.family(
            "weft_block_quarantined",
            Kind::Gauge,
            "A block moved to quarantine/ because its bytes are damaged (1 per block, by tenant and block; queries answer without it, marked partial).",
        );
        for (t, b, _) in self.quarantined.lock().iter() {
            out.sample("weft_block_quarantined", &[("tenant", t), ("block", b)], 1.0);
        }
        let n = |v: &AtomicU64| v.load(Ordering::Relaxed) as f64;
        let cut = n(&self.cut_spans);
        let families: [(&str, Kind, &str, f64); 19] = [
            (
                "weft_scrub_bytes_total",
                Kind::Counter,
                "Bytes of block data the background scrubber read and verified against their checksums.",
                n(&self.scrubbed_bytes),
            ),
            (
                "weft_scrub_blocks_total",
                Kind::Counter,
                "Blocks the background scrubber verified whole.",
                n(&self.scrubbed_blocks),
            ),
            (
                "weft_blocks_quarantined_total",
                Kind::Counter,
                "Blocks quarantined since start because a checksum or decode check found damage.",
                n(&self.blocks_quarantined),
            ),
            (
                "weft_block_read_errors_total",
                Kind::Counter,
                "Block reads skipped because verified bytes did not decode (a bug; the block stays in place).",
                n(&self.block_read_errors),
            ),
            (
                "weft_trace_lookups_total",
                Kind::Counter,
                "Traces looked up by ID (trace by ID, and traces search had to assemble).",
                n(&self.trace_lookups),
            ),
            (
                "weft_trace_lookup_blocks_read_total",
                Kind::Counter,
                "Blocks read by trace lookups: those whose trace-ID index admitted the trace.",
                n(&self.trace_lookup_blocks_read),
            ),
            (
                "weft_compactions_total",
                Kind::Counter,
                "Compactions finished (each merges several blocks into one).",
                n(&self.compactions),
            ),
            (
                "weft_compaction_input_blocks_total",
                Kind::Counter,
                "Blocks merged away by compaction.",
                n(&self.compaction_input_blocks),
            ),
            (
                "weft_compaction_spans_written_total",
                Kind::Counter,
                "Spans written by compaction.",
                n(&self.compaction_spans),
            ),
            (
                "weft_compaction_duplicate_spans_removed_total",
                Kind::Counter,
                "Duplicate spans (client retries) dropped by compaction.",
                n(&self.compaction_duplicates),
            ),
            (
                "weft_compaction_errors_total",
                Kind::Counter,
                "Compactions that failed (their inputs stay in place).",
                n(&self.compaction_errors),
            ),
            (
                "weft_compaction_lease_skips_total",
                Kind::Counter,
                "Compaction rounds that left a tenant alone because another compactor held its lease.",
                n(&self.compaction_lease_skips),
            ),
            (
                "weft_compaction_seconds_total",
                Kind::Counter,
                "Time spent compacting.",
                n(&self.compaction_nanos) / 1e9,
            ),
            (
                "weft_compaction_cpu_seconds_total",
                Kind::Counter,
                "CPU time of the compactor's thread spent merging: decoding the inputs and encoding the new block; storage reads and writes are not in it (divide by weft_compaction_spans_written_total for CPU per span).",
                n(&self.compaction_cpu_nanos) / 1e9,
            ),
            (
                "weft_block_cut_spans_total",
                Kind::Counter,
                "Spans written into blocks by head cuts: each span's first write to a block.",
                cut,
            ),
            (
                "weft_compaction_write_amplification",
                Kind::Gauge,
                "Spans written into blocks (head cuts and compaction) per span cut, since start, by this process (1: no rewrite; a compactor-only process cuts nothing and shows 1: divide the compactor's weft_compaction_spans_written_total by the ingesters' weft_block_cut_spans_total).",
                if cut > 0.0 {
                    (cut + n(&self.compaction_spans)) / cut
                } else {
                    1.0
                },
            ),
            (
                "weft_retention_deleted_blocks_total",
                Kind::Counter,
                "Blocks deleted because they were past their tenant's retention.",
                n(&self.retention_deleted_blocks),
            ),
            ("weft_blocks", Kind::Gauge, "Blocks in storage.", n(&self.blocks)),
            (
                "weft_blocklist_polls_total",
                Kind::Counter,
                "Times the block list was re-read from storage (roles sharing a storage).",
                n(&self.polls),
            ),
        ];
        for (name, kind, help, v) in families {
            out.single(name, kind, help, v);
        }
    }
}
