//! The write path and the head of weft.
//!
//! ```text
//! receiver ─► Ingest::push ─► scan (validate, trace runs) ─► limits ─► WAL (group commit)
//!                                                                        │ durable records
//!                                                      builder thread ◄──┘
//!                                                      (head columns; cut by size/age)
//!                                                                        │ cuts
//!                                                      flusher thread ◄──┘
//!                                                      (one block per tenant; WAL truncation)
//! ```
//! `Ingest::find_trace` reads the head and the blocks and merges them; `Ingest::scan` feeds
//! whole traces that may match a query to a search, metrics or tag consumer ([`scan`]).

pub mod compact;
pub mod head;
pub mod limits;
pub mod metrics;
pub mod quarantine;
pub mod scan;

use bytes::Bytes;
use head::{BuilderSink, Cut, CutPolicy, Head};
use limits::{RateLimiter, TraceSizes};
use metrics::{IngestMetrics, RefuseReason};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weft_block::meta::WalPosition;
use weft_block::row::{SpanRow, dedup_spans};
use weft_block::v1::writer::WriteOptions;
use weft_block::{Block, BlockError};
use weft_otlp::scan::{RequestSummary, scan_request};
use weft_storage::Storage;
use weft_wal::{FsyncPolicy, KIND_OTLP, Wal, WalOptions, WalPos};

/// Settings of the write path.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// The WAL lives in `<data_dir>/wal`.
    pub data_dir: PathBuf,
    pub fsync: FsyncPolicy,
    pub wal_segment_bytes: u64,
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
    pub compaction: compact::CompactionConfig,
    /// Most bytes of one trace a query holds in memory ([`span_bytes`]); a larger trace is
    /// returned (and searched) truncated, and says so.
    pub max_trace_read_bytes: u64,
    /// Called first on the compactor's own thread (compaction runs there, on a runtime of its
    /// own, so its CPU-heavy merges block neither ingest nor queries). The server lowers the
    /// thread's scheduling priority with it.
    pub compactor_thread_start: Option<fn()>,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            data_dir: PathBuf::from("weft-data"),
            fsync: FsyncPolicy::Always,
            wal_segment_bytes: 64 << 20,
            cut: CutPolicy {
                max_age: Duration::from_secs(30),
                max_spans: 200_000,
                max_bytes: 16 << 20,
            },
            max_trace_bytes: 5 << 20,
            rate_bytes: 0,
            burst_bytes: 0,
            max_inflight_bytes: 64 << 20,
            max_flushing_bytes: 16 << 20,
            row_group_rows: 8192,
            compaction: compact::CompactionConfig::default(),
            max_trace_read_bytes: 32 << 20,
            compactor_thread_start: None,
        }
    }
}

/// Why a push was refused. Each maps to one HTTP status and gRPC code in the server.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{0}")]
    Invalid(String),
    #[error("{message}")]
    RateLimited { message: String, retry_after: Duration },
    /// Every span of the request belongs to a trace over the size limit.
    #[error("{message}")]
    TraceTooLarge { message: String, rejected: u32 },
    #[error("{0}")]
    Overloaded(String),
    #[error("{0}")]
    Internal(String),
}

/// A push that was at least partly accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    pub accepted_spans: u32,
    pub rejected_spans: u32,
    /// Why spans were rejected; empty when none were.
    pub message: String,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Block(#[from] BlockError),
}

/// A trace as read by [`Ingest::find_trace_capped`].
#[derive(Debug, Default)]
pub struct FoundTrace {
    /// De-duplicated, ordered by start time.
    pub rows: Vec<SpanRow>,
    /// Spans were left out because the trace is larger than the cap.
    pub truncated: bool,
    /// Blocks whose index admitted the trace and were read.
    pub blocks_read: u64,
    /// Blocks that may hold the trace but were skipped because they are damaged: spans may be
    /// missing, and the answer should say it is partial.
    pub damaged_blocks: u64,
    /// Held while a large trace is in memory ([`LARGE_TRACE_READ_BYTES`]); keep it until the
    /// trace is no longer needed (e.g. its response is written).
    pub large_read: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// A trace read that holds more than this many bytes ([`span_bytes`]) takes one of
/// [`LARGE_TRACE_READS`] permits before reading on, so only a few large traces (each up to the
/// read cap, plus its decoded form) are in memory at once, however many are requested.
pub const LARGE_TRACE_READ_BYTES: u64 = 4 << 20;
pub const LARGE_TRACE_READS: usize = 2;

/// The size of a stored span as counted against response and memory caps: its variable-length
/// fields plus a fixed 64 bytes.
pub fn span_bytes(r: &SpanRow) -> u64 {
    (64 + r.name.len()
        + r.status_message.len()
        + r.resource.len()
        + r.scope.len()
        + r.attributes.len()
        + r.events.len()
        + r.links.len()
        + r.extra.len()) as u64
}

/// Blocks in storage, per tenant.
#[derive(Debug, Default)]
pub struct BlockSet {
    tenants: RwLock<HashMap<String, Vec<Arc<Block>>>>,
}

impl BlockSet {
    pub fn add(&self, b: Arc<Block>) {
        self.tenants.write().entry(b.meta.tenant.clone()).or_default().push(b);
    }

    pub fn of(&self, tenant: &str) -> Vec<Arc<Block>> {
        self.tenants.read().get(tenant).cloned().unwrap_or_default()
    }

    /// Tenants with at least one block.
    pub fn tenants(&self) -> Vec<String> {
        self.tenants
            .read()
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn count(&self) -> usize {
        self.tenants.read().values().map(Vec::len).sum()
    }

    /// Atomically removes the blocks `remove` of `tenant` and adds `add`: readers see either
    /// the old blocks or the new one, never both or neither.
    pub fn replace(&self, tenant: &str, remove: &[String], add: Option<Arc<Block>>) {
        let mut t = self.tenants.write();
        let v = t.entry(tenant.to_owned()).or_default();
        v.retain(|b| !remove.contains(&b.meta.block_id));
        v.extend(add);
    }

    /// Loads every complete block (one with `meta.json`) from storage, and finishes what a
    /// crash interrupted: blocks replaced by a compacted block are deleted, and so are folders
    /// without `meta.json` (a block write or delete cut short). A block whose `meta.json` or
    /// `index.bin` is damaged is moved to quarantine; it is returned as (tenant, block id, why).
    /// Call only before any block is being written.
    pub async fn load(storage: &dyn Storage) -> Result<(BlockSet, Vec<Quarantined>), BlockError> {
        let set = BlockSet::default();
        let objects = storage.list("blocks/").await?;
        let mut folders: std::collections::BTreeMap<String, bool> = Default::default();
        for o in &objects {
            if let Some((dir, file)) = o.path.rsplit_once('/') {
                *folders.entry(dir.to_owned()).or_default() |= file == "meta.json";
            }
        }
        let mut loaded = Vec::new();
        let mut quarantined = Vec::new();
        for (prefix, complete) in &folders {
            if !complete {
                continue;
            }
            match Block::open(storage, prefix).await {
                Ok(b) => loaded.push(b),
                Err(e) if e.is_damage(false) => {
                    tracing::error!(block = %prefix, error = %e, "damaged block quarantined at start");
                    let range = match storage.get(&format!("{prefix}/meta.json")).await {
                        Ok(m) => serde_json::from_slice::<weft_block::meta::BlockMeta>(&m)
                            .ok()
                            .map(|m| (m.min_start_unix_nano, m.max_end_unix_nano)),
                        Err(_) => None,
                    };
                    if let Err(m) = quarantine::move_to_quarantine(storage, prefix).await {
                        tracing::error!(block = %prefix, error = %m, "moving a damaged block to quarantine failed; it is skipped");
                    }
                    let mut parts = prefix.trim_start_matches("blocks/").splitn(2, '/');
                    let (t, id) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    quarantined.push(Quarantined {
                        tenant: t.to_owned(),
                        block: id.to_owned(),
                        why: e.to_string(),
                        range,
                    });
                }
                Err(e) => tracing::error!(block = %prefix, error = %e, "skipping unreadable block"),
            }
        }
        let replaced: std::collections::HashSet<(String, String)> = loaded
            .iter()
            .flat_map(|b| {
                b.meta
                    .compacted_from
                    .iter()
                    .map(|id| (b.meta.tenant.clone(), id.clone()))
            })
            .collect();
        for b in loaded {
            if replaced.contains(&(b.meta.tenant.clone(), b.meta.block_id.clone())) {
                tracing::info!(block = %b.prefix(), "deleting a block replaced by compaction before a restart");
                let _ = storage.delete(&format!("{}/meta.json", b.prefix())).await;
                delete_files(storage, b.prefix()).await;
            } else {
                set.add(Arc::new(b));
            }
        }
        for (prefix, complete) in &folders {
            if !complete {
                tracing::info!(block = %prefix, "deleting an incomplete block folder");
                delete_files(storage, prefix).await;
            }
        }
        Ok((set, quarantined))
    }
}

/// A block quarantined when the block set was loaded.
#[derive(Debug, Clone)]
pub struct Quarantined {
    pub tenant: String,
    pub block: String,
    pub why: String,
    /// Its time range, when its `meta.json` was readable.
    pub range: Option<(u64, u64)>,
}

/// Deletes a block folder's data files (not `meta.json`), ignoring missing ones.
async fn delete_files(storage: &dyn Storage, prefix: &str) {
    for f in ["data.parquet", "index.bin"] {
        if let Err(e) = storage.delete(&format!("{prefix}/{f}")).await
            && !matches!(e, weft_storage::StorageError::NotFound(_))
        {
            tracing::warn!(block = %prefix, error = %e, "deleting block file failed");
        }
    }
}

/// The write path and head, with trace lookup.
pub struct Ingest {
    cfg: IngestConfig,
    wal: Wal,
    head: Arc<Head>,
    pub blocks: Arc<BlockSet>,
    storage: Arc<dyn Storage>,
    pub metrics: Arc<IngestMetrics>,
    rate: RateLimiter,
    trace_sizes: TraceSizes,
    pub wal_stats: Arc<weft_wal::WalStats>,
    /// Signalled whenever a cut's blocks are written.
    flushed: Arc<tokio::sync::Notify>,
    /// Set by [`Ingest::shutdown`]: background work stops, and work cut short by the process
    /// exiting is not reported as a failure.
    stopping: AtomicBool,
    /// Permits for reading large traces ([`LARGE_TRACE_READ_BYTES`]).
    large_trace_reads: Arc<tokio::sync::Semaphore>,
    /// Blocks quarantined or found unreadable since start ([`quarantine`]).
    damaged: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// (tenant, min start, max end) of the blocks quarantined since start, whose meta was
    /// readable: scans over those times are partial.
    quarantined_ranges: parking_lot::Mutex<Vec<(String, u64, u64)>>,
}

impl Ingest {
    /// Loads blocks, replays the WAL into the head (skipping records already in blocks), and
    /// starts the builder and flusher threads. Must be called inside a tokio runtime.
    pub async fn open(cfg: IngestConfig, storage: Arc<dyn Storage>) -> Result<Arc<Ingest>, String> {
        let metrics = Arc::new(IngestMetrics::default());
        let (blocks, quarantined) = BlockSet::load(&*storage)
            .await
            .map_err(|e| format!("loading blocks: {e}"))?;
        let blocks = Arc::new(blocks);
        {
            let listed = quarantine::list_quarantined(&*storage).await;
            let mut q = metrics.quarantined.lock();
            for (t, id) in listed {
                let why = quarantined
                    .iter()
                    .find(|q| q.tenant == t && q.block == id)
                    .map(|q| q.why.clone())
                    .unwrap_or_else(|| "quarantined before this start".into());
                q.push((t, id, why));
            }
            metrics
                .blocks_quarantined
                .store(quarantined.len() as u64, Ordering::Relaxed);
        }
        let quarantined_ranges: Vec<(String, u64, u64)> = quarantined
            .iter()
            .filter_map(|q| q.range.map(|(lo, hi)| (q.tenant.clone(), lo, hi)))
            .collect();
        metrics.blocks.store(blocks.count() as u64, Ordering::Relaxed);
        // Per tenant, the WAL position below which everything is already in blocks.
        let mut covered: HashMap<String, WalPosition> = HashMap::new();
        let mut max_segment = 0;
        for bs in blocks.tenants.read().values() {
            for b in bs {
                if let Some(p) = b.meta.wal_end {
                    let e = covered.entry(b.meta.tenant.clone()).or_insert(p);
                    *e = (*e).max(p);
                    max_segment = max_segment.max(p.segment);
                }
            }
        }
        let head = Arc::new(Head::new(metrics.clone()));
        let (tx, rx) = mpsc::sync_channel(64);
        let wal_opts = WalOptions {
            fsync: cfg.fsync,
            segment_bytes: cfg.wal_segment_bytes,
            min_segment: max_segment + 1,
        };
        let mut skipped = 0u64;
        let (wal, report) = Wal::open(
            &cfg.data_dir.join("wal"),
            wal_opts,
            |rec| {
                let pos = WalPosition {
                    segment: rec.pos.segment,
                    offset: rec.pos.offset,
                };
                if covered.get(&*rec.tenant).is_some_and(|c| pos < *c) {
                    skipped += 1;
                } else {
                    head.apply(&rec);
                }
            },
            Box::new(BuilderSink(tx)),
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
                .spawn(move || head::run_builder(head, rx, policy, cut_tx))
                .map_err(|e| e.to_string())?;
        }
        {
            let head = head.clone();
            let storage = storage.clone();
            let blocks = blocks.clone();
            let metrics = metrics.clone();
            let wal = wal.clone();
            let opts = WriteOptions {
                row_group_rows: cfg.row_group_rows,
                ..Default::default()
            };
            let rt = tokio::runtime::Handle::current();
            let flushed = flushed.clone();
            std::thread::Builder::new()
                .name("block-flusher".into())
                .spawn(move || {
                    for cut in cut_rx {
                        flush_cut(&rt, &cut, &*storage, &blocks, &metrics, &opts);
                        head.finish(&cut);
                        flushed.notify_waiters();
                        wal.truncate_before(WalPos {
                            segment: cut.wal_end.segment,
                            offset: cut.wal_end.offset,
                        });
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        let rate = RateLimiter::new(cfg.rate_bytes, cfg.burst_bytes);
        let trace_sizes = TraceSizes::new(cfg.cut.max_age.max(Duration::from_secs(10)));
        let interval = cfg.compaction.interval;
        let ingest = Arc::new(Ingest {
            cfg,
            wal,
            head,
            blocks,
            storage,
            metrics,
            rate,
            trace_sizes,
            wal_stats,
            flushed,
            stopping: AtomicBool::new(false),
            large_trace_reads: Arc::new(tokio::sync::Semaphore::new(LARGE_TRACE_READS)),
            damaged: Default::default(),
            quarantined_ranges: parking_lot::Mutex::new(quarantined_ranges),
        });
        if let Some(every) = interval {
            // Holds a weak reference so the compactor stops when the server drops the ingest.
            let weak = Arc::downgrade(&ingest);
            let start = ingest.cfg.compactor_thread_start;
            std::thread::Builder::new()
                .name("weft-compactor".into())
                .spawn(move || {
                    if let Some(f) = start {
                        f();
                    }
                    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        Ok(rt) => rt,
                        Err(e) => {
                            tracing::error!(error = %e, "cannot start the compactor's runtime; compaction and retention are off");
                            return;
                        }
                    };
                    rt.block_on(async move {
                        loop {
                            tokio::time::sleep(every).await;
                            let Some(ingest) = weak.upgrade() else { break };
                            ingest.maintain().await;
                        }
                    });
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(ingest)
    }

    /// Refuses at once if `tenant` is over its ingestion rate, before a receiver reads or
    /// decodes a request ([`RateLimiter::check`]); takes nothing.
    pub fn check_rate(&self, tenant: &Arc<str>) -> Result<(), PushError> {
        self.rate.check(tenant).map_err(|wait| {
            self.metrics.refused(tenant, RefuseReason::RateLimited, 1);
            PushError::RateLimited {
                message: format!(
                    "tenant {tenant} exceeded its ingestion rate limit of {} bytes/s",
                    self.cfg.rate_bytes
                ),
                retry_after: wait,
            }
        })
    }

    /// Validates, admits and durably stores one OTLP `ExportTraceServiceRequest`.
    ///
    /// On `Ok` the accepted spans are fsync'd (under the `always` policy) and readable.
    pub async fn push(&self, tenant: &Arc<str>, body: Bytes) -> Result<PushOutcome, PushError> {
        let refuse = |reason: RefuseReason, spans: u32| self.metrics.refused(tenant, reason, u64::from(spans.max(1)));
        let mut summary = RequestSummary::default();
        if let Err(e) = scan_request(&body, &mut summary) {
            refuse(RefuseReason::Invalid, 0);
            return Err(PushError::Invalid(e.to_string()));
        }
        if summary.spans == 0 {
            return Ok(PushOutcome {
                accepted_spans: 0,
                rejected_spans: 0,
                message: String::new(),
            });
        }
        if let Err(wait) = self.rate.try_take(tenant, body.len()) {
            refuse(RefuseReason::RateLimited, summary.spans);
            let message = if wait == Duration::MAX {
                format!(
                    "request of {} bytes exceeds tenant {tenant}'s ingestion burst of {} bytes",
                    body.len(),
                    self.cfg.burst_bytes.max(self.cfg.rate_bytes * 2)
                )
            } else {
                format!(
                    "tenant {tenant} exceeded its ingestion rate limit of {} bytes/s",
                    self.cfg.rate_bytes
                )
            };
            let retry_after = if wait == Duration::MAX {
                Duration::from_secs(60)
            } else {
                wait
            };
            return Err(PushError::RateLimited { message, retry_after });
        }
        let inflight = self.metrics.inflight_bytes.load(Ordering::Relaxed);
        if inflight + body.len() as u64 > self.cfg.max_inflight_bytes || !self.wait_for_flusher().await {
            refuse(RefuseReason::Overloaded, summary.spans);
            let flushing = self.metrics.flushing_bytes.load(Ordering::Relaxed);
            return Err(PushError::Overloaded(format!(
                "ingest is behind ({inflight} bytes in flight, {flushing} bytes of blocks waiting to be written); retry later"
            )));
        }
        let (body, accepted, rejected, message) = self.admit_traces(tenant, body, &summary)?;
        self.metrics
            .inflight_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let len = body.len() as u64;
        let res = self.wal.append(tenant.clone(), KIND_OTLP, body).await;
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
    /// flusher is still behind at the deadline.
    async fn wait_for_flusher(&self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
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
    fn admit_traces(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        summary: &RequestSummary,
    ) -> Result<(Bytes, u32, u32, String), PushError> {
        if self.cfg.max_trace_bytes == 0 {
            return Ok((body, summary.spans, 0, String::new()));
        }
        let runs: Vec<([u8; 16], u64)> = summary.runs.iter().map(|r| (r.trace_id, u64::from(r.bytes))).collect();
        let mut admitted = Vec::with_capacity(runs.len());
        self.trace_sizes
            .admit(tenant, &runs, self.cfg.max_trace_bytes, &mut admitted);
        if admitted.iter().all(|&a| a) {
            return Ok((body, summary.spans, 0, String::new()));
        }
        let mut keep = Vec::with_capacity(summary.spans as usize);
        let mut rejected = 0u32;
        let mut first_bad = None;
        for (run, ok) in summary.runs.iter().zip(&admitted) {
            for _ in 0..run.spans {
                keep.push(*ok);
            }
            if !ok {
                rejected += run.spans;
                first_bad.get_or_insert(run.trace_id);
            }
        }
        let message = format!(
            "trace too large: {rejected} spans refused because their traces (first: {}) exceed the maximum trace size of {} bytes",
            hex(&first_bad.unwrap_or_default()),
            self.cfg.max_trace_bytes
        );
        if rejected == summary.spans {
            self.metrics
                .refused(tenant, RefuseReason::TraceTooLarge, u64::from(rejected));
            return Err(PushError::TraceTooLarge { message, rejected });
        }
        let filtered =
            weft_otlp::scan::filter_request(&body, |i| keep[i]).map_err(|e| PushError::Internal(e.to_string()))?;
        Ok((Bytes::from(filtered), summary.spans - rejected, rejected, message))
    }

    /// Waits until every acknowledged record is in the head (bounded).
    pub(crate) async fn catch_up(&self) {
        let target = self.wal_stats.committed_groups.load(Ordering::Acquire);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.head.applied_groups.load(Ordering::Acquire) < target && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Returns the spans of a trace from the head and the blocks, de-duplicated and ordered by
    /// start time. `range` (Unix seconds, inclusive) restricts which blocks are read.
    pub async fn find_trace(
        &self,
        tenant: &str,
        id: &[u8; 16],
        range: Option<(u64, u64)>,
    ) -> Result<Vec<SpanRow>, QueryError> {
        Ok(self.find_trace_capped(tenant, id, range, u64::MAX).await?.rows)
    }

    /// Like [`Ingest::find_trace`], but stops reading once the spans found hold more than
    /// `max_bytes` (as [`span_bytes`] counts them), so a huge trace costs bounded memory. The
    /// blocks are read oldest first, then the head; `truncated` says spans were left out.
    pub async fn find_trace_capped(
        &self,
        tenant: &str,
        id: &[u8; 16],
        range: Option<(u64, u64)>,
        max_bytes: u64,
    ) -> Result<FoundTrace, QueryError> {
        self.catch_up().await;
        let mut rows = Vec::new();
        let mut bytes = 0u64;
        let mut truncated = false;
        let mut blocks_read = 0;
        let mut damaged_blocks = 0;
        let mut large_read = None;
        // Oldest blocks first, the head last: spans arrive roughly in time order, so when the
        // cap stops the read, what was read is the start of the trace (with its root).
        let mut blocks = self.blocks.of(tenant);
        blocks.sort_by_key(|b| (b.meta.min_start_unix_nano, b.meta.max_end_unix_nano));
        'blocks: for b in blocks {
            if let Some((start, end)) = range {
                let (lo, hi) = (
                    b.meta.min_start_unix_nano / 1_000_000_000,
                    b.meta.max_end_unix_nano / 1_000_000_000,
                );
                if hi < start || lo > end {
                    continue;
                }
            }
            let rgs = b.index.candidates(id);
            if rgs.is_empty() {
                continue;
            }
            blocks_read += 1;
            let mut from_block = Vec::new();
            for rg in rgs {
                if bytes > max_bytes {
                    truncated = true;
                    rows.append(&mut from_block);
                    break 'blocks;
                }
                // What this row group may add: the block's average row group, compressed
                // (decoded spans take more; the point is to catch large traces early).
                let rg_bytes = b.meta.size_bytes / u64::from(b.meta.row_groups.max(1));
                if large_read.is_none() && bytes + rg_bytes > LARGE_TRACE_READ_BYTES {
                    large_read = Some(
                        self.large_trace_reads
                            .clone()
                            .acquire_owned()
                            .await
                            .expect("never closed"),
                    );
                }
                match b.find_trace_in(&*self.storage, id, rg).await {
                    Ok(found) => {
                        bytes += found.iter().map(span_bytes).sum::<u64>();
                        from_block.extend(found);
                    }
                    Err(e) => {
                        // Nothing of a damaged block is served, not even its row groups that
                        // did verify: the block is out of service as a whole.
                        self.block_failed(&b, e)?;
                        damaged_blocks += 1;
                        bytes -= from_block.iter().map(span_bytes).sum::<u64>();
                        from_block.clear();
                        break;
                    }
                }
            }
            rows.append(&mut from_block);
        }
        if bytes <= max_bytes {
            // The head's copy is bounded by the head's own size limit.
            let head = self.head.find_trace(tenant, id);
            bytes += head.iter().map(span_bytes).sum::<u64>();
            rows.extend(head);
        } else if self.head.holds(tenant, id) {
            truncated = true;
        }
        dedup_spans(&mut rows);
        if bytes > max_bytes {
            // Keep the earliest spans (the root is usually among them) up to the cap.
            let mut kept = 0;
            let keep = rows
                .iter()
                .take_while(|r| {
                    kept += span_bytes(r);
                    kept <= max_bytes
                })
                .count();
            truncated |= keep < rows.len();
            rows.truncate(keep);
        }
        self.metrics.trace_lookups.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .trace_lookup_blocks_read
            .fetch_add(blocks_read, Ordering::Relaxed);
        Ok(FoundTrace {
            rows,
            truncated,
            blocks_read,
            damaged_blocks,
            large_read,
        })
    }

    /// Spans in the active head (not yet cut).
    pub fn head_span_count(&self) -> usize {
        self.head.state.read().active.values().map(|c| c.len()).sum()
    }

    /// Syncs the WAL and stops accepting writes. The head is not cut: the WAL replays it.
    /// Compaction starts no new merge; one in progress may be cut short, which leaves its
    /// inputs in place (the next start merges them again).
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
        self.catch_up().await;
        if let Some(cut) = self.head.cut() {
            let opts = WriteOptions {
                row_group_rows: self.cfg.row_group_rows,
                ..Default::default()
            };
            for (tenant, cols) in &cut.tenants {
                if let Ok(meta) = weft_block::write_block(&*self.storage, cols, tenant, Some(cut.wal_end), &opts).await
                    && let Ok(b) = Block::open(&*self.storage, &weft_block::block_prefix(tenant, &meta.block_id)).await
                {
                    self.blocks.add(Arc::new(b));
                }
            }
            self.head.finish(&cut);
            self.flushed.notify_waiters();
            self.wal.truncate_before(WalPos {
                segment: cut.wal_end.segment,
                offset: cut.wal_end.offset,
            });
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes one block per tenant of a cut, retrying failed writes until they succeed.
fn flush_cut(
    rt: &tokio::runtime::Handle,
    cut: &Cut,
    storage: &dyn Storage,
    blocks: &BlockSet,
    metrics: &IngestMetrics,
    opts: &WriteOptions,
) {
    for (tenant, cols) in &cut.tenants {
        let mut delay = Duration::from_millis(200);
        loop {
            let started = Instant::now();
            let res = rt.block_on(async {
                let meta = weft_block::write_block(storage, cols, tenant, Some(cut.wal_end), opts).await?;
                Block::open(storage, &weft_block::block_prefix(tenant, &meta.block_id)).await
            });
            match res {
                Ok(b) => {
                    metrics.blocks_written.fetch_add(1, Ordering::Relaxed);
                    metrics
                        .block_bytes_written
                        .fetch_add(b.meta.size_bytes, Ordering::Relaxed);
                    metrics
                        .block_spans_written
                        .fetch_add(b.meta.span_count, Ordering::Relaxed);
                    metrics
                        .block_write_nanos
                        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    tracing::info!(tenant = %tenant, block = %b.meta.block_id, spans = b.meta.span_count, traces = b.meta.trace_count, bytes = b.meta.size_bytes, elapsed_ms = started.elapsed().as_millis() as u64, "block written");
                    blocks.add(Arc::new(b));
                    metrics.blocks.store(blocks.count() as u64, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    metrics.block_write_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(tenant = %tenant, error = %e, retry_in_ms = delay.as_millis() as u64, "block write failed; retrying");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}
