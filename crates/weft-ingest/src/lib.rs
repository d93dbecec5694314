//! The ingester: the single binary's write path, from admission through the WAL into the
//! head, and cuts of the head into blocks.
//!
//! ```text
//! receiver ─► TraceConsumer::push ─► validate (trace runs) ─► limits ─► WAL (group commit)
//!                                                                        │ durable records
//!                                                      builder thread ◄──┘
//!                                                      (head columns; cut by size/age)
//!                                                                        │ cuts
//!                                                      flusher thread ◄──┘
//!                                                      (Db::write_block per tenant; WAL truncation)
//! ```
//!
//! Receivers push through [`TraceConsumer`] (`weft-admission`, which also holds the checks and
//! limits every write path starts with); the head and its cuts are `weft-head`'s, shared with
//! the block builder and a querier's live store. The read path sees the head only through
//! [`weft_db::recent::RecentSpans`], which [`Ingest`] implements: this crate never depends on
//! the query crates.

use bytes::Bytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weft_admission::limits::{RateLimiter, TraceSizes};
use weft_admission::metrics::{IngestMetrics, RefuseReason};
use weft_admission::{PushError, PushOutcome, TraceConsumer, admit_request};
use weft_block::Origin;
use weft_db::Db;
use weft_db::recent::{FrozenSpans, RecentSpans, RecentView};
use weft_head::{BuilderSink, Cut, CutOptions, CutPolicy, Head, write_cut};
use weft_otlp::request::RequestSummary;
use weft_wal::{FsyncPolicy, KIND_OTLP, Wal, WalOptions};

/// Settings of the write path.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// The WAL lives in `<data_dir>/wal`.
    pub data_dir: PathBuf,
    pub fsync: FsyncPolicy,
    pub wal_segment_bytes: u64,
    /// How long a WAL group may wait for more requests so that they share one fsync
    /// ([`WalOptions::group_wait`]).
    pub wal_group_wait: Duration,
    /// Under `FsyncPolicy::Always`, write the WAL with direct I/O where the filesystem allows
    /// ([`WalOptions::direct_io`]).
    pub wal_direct_io: bool,
    pub cut: CutPolicy,
    /// Maximum bytes of one trace while it is live; 0 disables.
    pub max_trace_bytes: u64,
    /// Per-tenant ingestion rate in bytes/s; 0 disables.
    pub rate_bytes: u64,
    pub burst_bytes: u64,
    /// Requests holding more than this many bytes not yet durable cause refusals (503).
    pub max_inflight_bytes: u64,
    /// Cut blocks not yet written holding more than this many bytes cause refusals (503).
    pub max_flushing_bytes: u64,
    pub row_group_rows: usize,
    /// A tenant's part of a cut holding at least this many spans is written as a lasting
    /// block (see [`CutOptions`]): compaction's final tier starts there (ADR 7).
    pub final_block_spans: u64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            data_dir: PathBuf::from("weft-data"),
            fsync: FsyncPolicy::Always,
            wal_segment_bytes: 64 << 20,
            wal_group_wait: Duration::from_millis(2),
            wal_direct_io: true,
            cut: CutPolicy {
                max_age: Duration::from_secs(30),
                max_spans: 1_000_000,
                max_bytes: 64 << 20,
            },
            max_trace_bytes: 5 << 20,
            rate_bytes: 0,
            burst_bytes: 0,
            max_inflight_bytes: 64 << 20,
            max_flushing_bytes: 64 << 20,
            row_group_rows: 8192,
            final_block_spans: 250_000,
        }
    }
}

/// The write path: admission, WAL, head and block flusher. Reads of the head go through its
/// [`RecentSpans`] implementation.
pub struct Ingest {
    cfg: IngestConfig,
    wal: Wal,
    head: Arc<Head>,
    db: Arc<Db>,
    pub metrics: Arc<IngestMetrics>,
    rate: RateLimiter,
    roots: weft_admission::RootWatch,
    trace_sizes: TraceSizes,
    pub wal_stats: Arc<weft_wal::WalStats>,
    /// Signalled whenever a cut's blocks are written.
    flushed: Arc<tokio::sync::Notify>,
    /// Set by [`Ingest::shutdown`].
    stopping: AtomicBool,
}

impl Ingest {
    /// Replays the WAL into the head (skipping records already in `db`'s blocks), and starts
    /// the builder and flusher threads; the flusher writes blocks into `db`. Must be called
    /// inside a tokio runtime.
    pub async fn open(cfg: IngestConfig, db: Arc<Db>) -> Result<Arc<Ingest>, String> {
        let metrics = Arc::new(IngestMetrics::default());
        // Per tenant, the WAL position below which everything is already in blocks.
        let covered = db.wal_coverage();
        let max_segment = covered.values().map(|p| p.segment).max().unwrap_or(0);
        let head = Arc::new(Head::new(metrics.clone()));
        let (tx, rx) = mpsc::sync_channel(weft_head::BUILDER_CHANNEL_GROUPS);
        let wal_opts = WalOptions {
            fsync: cfg.fsync,
            segment_bytes: cfg.wal_segment_bytes,
            min_segment: max_segment + 1,
            group_wait: cfg.wal_group_wait,
            direct_io: cfg.wal_direct_io,
        };
        let mut skipped = 0u64;
        let (wal, report) = Wal::open(
            &cfg.data_dir.join("wal"),
            wal_opts,
            |rec| {
                if covered.get(&*rec.tenant).is_some_and(|c| rec.pos < *c) {
                    skipped += 1;
                } else {
                    head.apply(&rec);
                }
            },
            Box::new(BuilderSink(tx, head.clone())),
        )
        .map_err(|e| format!("opening the wal: {e}"))?;
        if report.records > 0 {
            tracing::info!(
                records = report.records,
                already_in_blocks = skipped,
                "wal replayed into the head"
            );
        }
        let wal_stats = wal.stats.clone();
        let (cut_tx, cut_rx) = mpsc::channel::<Arc<Cut>>();
        let flushed = Arc::new(tokio::sync::Notify::new());
        {
            let head = head.clone();
            let policy = cfg.cut.clone();
            std::thread::Builder::new()
                .name("head-builder".into())
                .spawn(move || weft_head::run_builder(head, rx, policy, cut_tx))
                .map_err(|e| e.to_string())?;
        }
        {
            let head = head.clone();
            let db = db.clone();
            let metrics = metrics.clone();
            let wal = wal.clone();
            let opts = CutOptions {
                row_group_rows: cfg.row_group_rows,
                final_block_spans: cfg.final_block_spans,
            };
            let rt = tokio::runtime::Handle::current();
            let flushed = flushed.clone();
            std::thread::Builder::new()
                .name("block-flusher".into())
                .spawn(move || {
                    for cut in cut_rx {
                        flush_cut(&rt, &cut, &db, &metrics, &opts);
                        head.finish(&cut);
                        flushed.notify_waiters();
                        wal.truncate_before(cut.wal_end);
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        let rate = RateLimiter::new(cfg.rate_bytes, cfg.burst_bytes);
        let trace_sizes = TraceSizes::new(cfg.cut.max_age.max(Duration::from_secs(10)));
        Ok(Arc::new(Ingest {
            cfg,
            wal,
            head,
            db,
            metrics,
            rate,
            roots: Default::default(),
            trace_sizes,
            wal_stats,
            flushed,
            stopping: AtomicBool::new(false),
        }))
    }

    /// Refuses at once if `tenant` is over its ingestion rate, before a receiver reads or
    /// decodes a request ([`RateLimiter::check`]); takes nothing.
    pub fn check_rate(&self, tenant: &Arc<str>) -> Result<(), PushError> {
        self.rate.check_or_refuse(tenant).inspect_err(|_| {
            self.metrics.refused(tenant, RefuseReason::RateLimited, 1);
        })
    }

    /// Validates, admits and durably stores one OTLP `ExportTraceServiceRequest` (the
    /// [`TraceConsumer`] contract). Waiting for room ends at `deadline` (at most 5 s).
    ///
    /// On `Ok` the accepted spans are fsync'd (under the `always` policy) and readable.
    pub async fn push(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError> {
        self.push_request(tenant, body, deadline, false).await
    }

    /// [`Ingest::push`], or for a request weft `converted` from a foreign format
    /// ([`TraceConsumer::push_converted`]) when that is set.
    pub(crate) async fn push_request(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        deadline: Option<tokio::time::Instant>,
        converted: bool,
    ) -> Result<PushOutcome, PushError> {
        let refuse = |reason: RefuseReason, spans: u32| self.metrics.refused(tenant, reason, u64::from(spans.max(1)));
        // This request is on its way to the WAL: a group being written now may wait for it
        // (up to the group wait), so that requests close together share one fsync.
        let coming = self.wal.announce();
        let mut summary = RequestSummary::default();
        if !admit_request(
            &body,
            tenant,
            &self.rate,
            &self.metrics,
            &self.roots,
            &mut summary,
            converted,
        )? {
            return Ok(PushOutcome::empty());
        }
        let inflight = self.metrics.inflight_bytes.load(Ordering::Relaxed);
        if inflight + body.len() as u64 > self.cfg.max_inflight_bytes || !self.wait_for_flusher(deadline).await {
            refuse(RefuseReason::Overloaded, summary.spans);
            let flushing = self.metrics.flushing_bytes.load(Ordering::Relaxed);
            return Err(PushError::Overloaded(format!(
                "ingest is behind ({inflight} bytes in flight, {flushing} bytes of blocks waiting to be written); retry later"
            )));
        }
        let (body, accepted, rejected, message) = self.admit_traces(tenant, body, &summary)?;
        if accepted == 0 {
            return Ok(PushOutcome {
                accepted_spans: 0,
                rejected_spans: rejected,
                message,
            });
        }
        self.metrics
            .inflight_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let len = body.len() as u64;
        let res = self.wal.append_announced(coming, tenant.clone(), KIND_OTLP, body).await;
        self.metrics.inflight_bytes.fetch_sub(len, Ordering::Relaxed);
        match res {
            Ok(_) => {
                let c = self.metrics.tenant(tenant);
                c.spans_received.fetch_add(u64::from(accepted), Ordering::Relaxed);
                c.bytes_received.fetch_add(len, Ordering::Relaxed);
                if rejected > 0 {
                    refuse(RefuseReason::TraceTooLarge, rejected);
                }
                Ok(PushOutcome {
                    accepted_spans: accepted,
                    rejected_spans: rejected,
                    message,
                })
            }
            Err(e @ weft_wal::WalError::Unavailable(_)) => {
                refuse(RefuseReason::WalUnavailable, summary.spans);
                Err(PushError::Overloaded(format!(
                    "weft is read-only: {e}; nothing was stored, retry later"
                )))
            }
            Err(e) => {
                refuse(RefuseReason::Internal, summary.spans);
                Err(PushError::Internal(format!(
                    "writing the wal failed: {e}; nothing was stored, retry later"
                )))
            }
        }
    }

    /// While cut blocks wait to be written beyond `max_flushing_bytes`, holds the request (its
    /// bytes are already in memory, and in-flight bytes are capped) for up to 5 s. Waiting turns
    /// a burst into latency instead of refusals that clients must resend. Returns false if the
    /// flusher is still behind at the deadline (the caller's, or 5 s).
    async fn wait_for_flusher(&self, deadline: Option<tokio::time::Instant>) -> bool {
        let cap = tokio::time::Instant::now() + Duration::from_secs(5);
        let deadline = deadline.map_or(cap, |d| d.min(cap));
        loop {
            let notified = self.flushed.notified();
            if self.metrics.flushing_bytes.load(Ordering::Relaxed) <= self.cfg.max_flushing_bytes {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// Applies the maximum trace size; returns the (possibly filtered) body and counts.
    ///
    /// Each distinct trace of the request is checked once, with all its spans' bytes, so the
    /// spans of one trace in one request are admitted or refused together. An SDK's batch holds
    /// spans in the order they ended, so a trace's spans come in several runs between other
    /// traces' (one telemetrygen request of 512 spans: 336 runs of 56 traces); the shared maps,
    /// much larger than the caches, are probed once per trace instead of once per run.
    fn admit_traces(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        summary: &RequestSummary,
    ) -> Result<(Bytes, u32, u32, String), PushError> {
        if self.cfg.max_trace_bytes == 0 {
            return Ok((body, summary.spans, 0, String::new()));
        }
        let (traces, trace_of_run) = distinct_traces(summary);
        let mut admitted = Vec::with_capacity(traces.len());
        self.trace_sizes
            .admit(tenant, &traces, self.cfg.max_trace_bytes, &mut admitted);
        if admitted.iter().all(|&a| a) {
            return Ok((body, summary.spans, 0, String::new()));
        }
        let mut keep = Vec::with_capacity(summary.spans as usize);
        let mut rejected = 0u32;
        let mut first_bad = None;
        for (run, &t) in summary.runs.iter().zip(&trace_of_run) {
            let ok = admitted[t as usize];
            for _ in 0..run.spans {
                keep.push(ok);
            }
            if !ok {
                rejected += run.spans;
                first_bad.get_or_insert(run.trace_id);
            }
        }
        let message = format!(
            "trace too large: {rejected} spans refused because their traces (first: {}) exceed the maximum trace size of {} bytes",
            weft_core::hex(&first_bad.unwrap_or_default()),
            self.cfg.max_trace_bytes
        );
        if rejected == summary.spans {
            // Valid data the server will not keep: OTLP's partial success (the client did
            // nothing wrong and must not retry), with nothing written.
            self.metrics
                .refused(tenant, RefuseReason::TraceTooLarge, u64::from(rejected));
            return Ok((Bytes::new(), 0, rejected, message));
        }
        let filtered =
            weft_otlp::request::filter_request(&body, |i| keep[i]).map_err(|e| PushError::Internal(e.to_string()))?;
        Ok((Bytes::from(filtered), summary.spans - rejected, rejected, message))
    }

    /// Waits until every acknowledged record is in the head (bounded).
    async fn wait_for_head(&self) {
        let target = self.wal_stats.committed_groups.load(Ordering::Acquire);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.head.applied_groups.load(Ordering::Acquire) < target && Instant::now() < deadline {
            // The builder lets groups queue for a while (`head::APPLY_WINDOW`); a reader must
            // not wait for that.
            self.head.hurry();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Spans in the active head (not yet cut).
    pub fn head_span_count(&self) -> usize {
        self.head.active_spans()
    }

    /// Syncs the WAL and stops accepting writes. The head is not cut: the WAL replays it.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.wal.shutdown().await;
    }

    /// Whether [`Ingest::shutdown`] was called.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Cuts the head now and waits until its blocks are written (for tests and tools).
    pub async fn flush(&self) {
        self.wait_for_head().await;
        if let Some(cut) = self.head.cut() {
            let opts = CutOptions {
                row_group_rows: self.cfg.row_group_rows,
                final_block_spans: self.cfg.final_block_spans,
            };
            for (tenant, cols) in &cut.tenants {
                let origin = Origin {
                    wal_end: Some(cut.wal_end),
                    ..Origin::default()
                };
                if let Err(e) = self
                    .db
                    .write_block(cols, tenant, origin, &opts.for_spans(cols.len()))
                    .await
                {
                    // The cut stays in the head and its WAL segments stay on disk.
                    tracing::error!(tenant = %tenant, error = %e, "block write failed; the head and the wal keep its spans");
                    return;
                }
            }
            self.head.finish(&cut);
            self.flushed.notify_waiters();
            self.wal.truncate_before(cut.wal_end);
        }
    }
}

/// The head, read by queries: the active columns and the cuts being written.
#[async_trait::async_trait]
impl RecentSpans for Ingest {
    async fn catch_up(&self) {
        self.wait_for_head().await;
    }

    fn view(&self, tenant: &str, f: &mut dyn FnMut(RecentView<'_>)) {
        self.head.view(tenant, f)
    }

    fn frozen(&self) -> Vec<Arc<FrozenSpans>> {
        self.head.frozen()
    }

    fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.head.holds(tenant, id)
    }

    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> weft_db::recent::RecentTrace {
        self.head.find_trace(tenant, id).into()
    }
}

/// The distinct traces of a request with the bytes of all their spans, in order of first
/// appearance, and for each of `summary.runs` the index of its trace.
fn distinct_traces(summary: &RequestSummary) -> (Vec<([u8; 16], u64)>, Vec<u32>) {
    let runs = &summary.runs;
    let mut traces: Vec<([u8; 16], u64)> = Vec::with_capacity(runs.len().min(1024));
    let mut trace_of_run = Vec::with_capacity(runs.len());
    let mut index: weft_block::hash::FastMap<[u8; 16], u32> =
        weft_block::hash::FastMap::with_capacity_and_hasher(runs.len().min(1024), Default::default());
    for r in runs {
        let t = *index.entry(r.trace_id).or_insert_with(|| {
            traces.push((r.trace_id, 0));
            (traces.len() - 1) as u32
        });
        traces[t as usize].1 += u64::from(r.bytes);
        trace_of_run.push(t);
    }
    (traces, trace_of_run)
}

/// Writes one block per tenant of a cut, retrying failed writes until they succeed.
fn flush_cut(rt: &tokio::runtime::Handle, cut: &Cut, db: &Db, metrics: &IngestMetrics, opts: &CutOptions) {
    let origin = |_: &str| Origin {
        wal_end: Some(cut.wal_end),
        ..Origin::default()
    };
    rt.block_on(write_cut(cut, db, metrics, opts, origin));
}

#[async_trait::async_trait]
impl TraceConsumer for Ingest {
    fn check_rate(&self, tenant: &Arc<str>) -> Result<(), PushError> {
        Ingest::check_rate(self, tenant)
    }

    async fn push(
        &self,
        tenant: &Arc<str>,
        otlp: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError> {
        Ingest::push(self, tenant, otlp, deadline).await
    }

    async fn push_converted(
        &self,
        tenant: &Arc<str>,
        otlp: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError> {
        self.push_request(tenant, otlp, deadline, true).await
    }

    fn refused(&self, tenant: &str, reason: RefuseReason, spans: u64) {
        self.metrics.refused(tenant, reason, spans);
    }

    fn watch_roots(&self, sink: Arc<dyn weft_admission::RootSink>) -> Result<(), &'static str> {
        self.roots.set(sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_otlp::request::TraceRun;

    #[test]
    fn distinct_traces_sum_every_run_of_a_trace() {
        let run = |t: u8, spans: u32, bytes: u32| TraceRun {
            trace_id: [t; 16],
            spans,
            bytes,
        };
        let summary = RequestSummary {
            spans: 9,
            runs: vec![
                run(7, 2, 100),
                run(3, 1, 10),
                run(7, 3, 50),
                run(5, 1, 1),
                run(3, 2, 20),
            ],
            roots: Vec::new(),
        };
        let (traces, of_run) = distinct_traces(&summary);
        assert_eq!(traces, vec![([7; 16], 150), ([3; 16], 30), ([5; 16], 1)]);
        assert_eq!(of_run, vec![0, 1, 0, 2, 1]);
    }
}
