//! Compaction and retention.
//!
//! **Compaction** merges blocks of one size tier into one, chosen by a size-tiered policy that
//! bounds how often a span is rewritten ([`crate::policy`]): it reads every span of the inputs,
//! writes them as a new block (dropping client-retry duplicates, rebuilding the trace index and
//! bloom filter, and adding per-row-group value blooms for attribute search), and only then
//! retires the inputs.
//!
//! **Retention** deletes blocks whose newest span is older than the tenant's retention.
//!
//! # Crash safety
//!
//! A block exists once its `meta.json` does. The new block's meta lists the blocks it replaces
//! (`compacted_from`) and is written last, so:
//! - a crash before it is written leaves the inputs authoritative and a folder without
//!   `meta.json`, which maintenance deletes ([`BlockSet::load`](crate::BlockSet::load));
//! - a crash after it is written, before every input is deleted, leaves inputs that startup
//!   recognises as replaced (they are named in a live block's `compacted_from`) and deletes;
//!   so does a store that fails then, and the maintainer's folder sweep deletes those without
//!   waiting for a restart;
//! - a block is retired (compacted again, or by retention) only after the leftovers it
//!   replaced are: once it is gone, nothing would name them as replaced.
//!
//! Either way no span is lost and none is read twice. Retiring a block deletes its `meta.json`
//! first (it is gone for readers and for the next start), then its data after a grace period,
//! so queries that already hold the old block list finish reading.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_block::columns::SpanColumns;
use weft_block::{Block, BlockError, Origin, WriteOptions};
use weft_core::now_ns;
use weft_storage::Storage;

use crate::Db;
use crate::policy::{Candidate, TierPolicy};

/// CPU time of the calling thread, in nanoseconds (0 where the clock is missing). The
/// compactor runs on a thread of its own with a current-thread runtime, so a merge's CPU is
/// this thread's CPU while it runs.
fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// When and how blocks are compacted and expired.
#[derive(Debug, Clone)]
pub struct CompactionConfig {
    /// How often the compactor runs; `None` disables the background compactor (tests call
    /// [`Compactor::compact_once`] and [`Compactor::apply_retention`] themselves).
    pub interval: Option<Duration>,
    /// Most small blocks merged at once, and how many small blocks of one level open the
    /// valve ([`crate::policy`]).
    pub max_inputs: usize,
    /// Blocks of the middle tier merged at once, and the size ratio between tiers.
    pub fanout: u64,
    /// Largest block (spans) compaction writes; blocks of a quarter of it and more are final.
    /// Bounds the compactor's memory: the output is built in memory, like a head cut.
    pub max_block_spans: u64,
    /// Blocks whose newest span is older than this are deleted; `None` keeps blocks forever.
    pub retention: Option<Duration>,
    /// Per-tenant retention, overriding `retention`.
    pub tenant_retention: Vec<(String, Duration)>,
    /// How long a retired block's data stays readable for queries already running.
    pub delete_grace: Duration,
    /// Rows per row group of compacted blocks.
    pub row_group_rows: usize,
    /// Leases, when several compactors may share the storage: a tenant is compacted only by
    /// the compactor holding its lease ([`crate::lease`]). `None` for the only compactor.
    pub leases: Option<crate::lease::Leases>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            interval: Some(Duration::from_secs(30)),
            max_inputs: 64,
            fanout: 4,
            max_block_spans: 1_000_000,
            retention: Some(Duration::from_secs(14 * 24 * 3600)),
            tenant_retention: Vec::new(),
            delete_grace: Duration::from_secs(60),
            row_group_rows: 8192,
            leases: None,
        }
    }
}

/// What one compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    pub inputs: Vec<String>,
    pub output: String,
    pub spans_in: u64,
    pub spans_out: u64,
}

/// Deletes a block: the retirement marker and `meta.json` now, the rest after `grace` (in
/// the background), the marker last, so that what a crash leaves is never taken for a block
/// that lost its `meta.json` ([`crate::quarantine`]). The blocks it replaced that a retirement
/// cut short left in storage go first; if they cannot, neither does this one
/// ([`crate::blocks::retire_replaced`]).
pub(crate) async fn retire(storage: &Arc<dyn Storage>, block: &Block, grace: Duration) -> Result<(), BlockError> {
    crate::blocks::retire_replaced(&**storage, &block.meta.tenant, &block.meta.compacted_from).await?;
    let prefix = block.prefix();
    crate::blocks::mark_retired(&**storage, prefix).await?;
    let storage = storage.clone();
    let prefix = prefix.to_owned();
    let purge = async move {
        tokio::time::sleep(grace).await;
        crate::blocks::delete_files(&*storage, &prefix).await;
    };
    if grace.is_zero() {
        purge.await;
    } else {
        tokio::spawn(purge);
    }
    Ok(())
}

/// Block maintenance: compaction and retention over a [`Db`]. Runs in the process that
/// maintains the storage ([`crate::DbOptions::maintains`]).
pub struct Compactor {
    db: Arc<Db>,
    cfg: CompactionConfig,
    /// Set by [`Compactor::stop`]: no new merge starts, and work cut short by the process
    /// exiting is not reported as a failure.
    stopping: AtomicBool,
}

impl Compactor {
    pub fn new(db: Arc<Db>, cfg: CompactionConfig) -> Arc<Compactor> {
        Arc::new(Compactor {
            db,
            cfg,
            stopping: AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &CompactionConfig {
        &self.cfg
    }

    /// Stops starting merges. One in progress may be cut short, which leaves its inputs in
    /// place (the next start merges them again).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Runs [`Compactor::maintain`] every `interval` on a thread of its own with its own
    /// runtime, so its CPU-heavy merges block neither ingest nor queries. `thread_start` runs
    /// first on that thread (the server lowers its scheduling priority with it). The thread
    /// holds a weak reference and ends when the compactor is dropped.
    pub fn spawn(self: &Arc<Self>, interval: Duration, thread_start: Option<fn()>) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        crate::spawn_background("weft-compactor", "compaction and retention", thread_start, async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(c) = weak.upgrade() else { break };
                if c.stopping() {
                    break;
                }
                c.maintain().await;
            }
        })
    }

    /// The block-picking policy these settings describe.
    pub fn policy(&self) -> TierPolicy {
        TierPolicy {
            max_block_spans: self.cfg.max_block_spans,
            fanout: self.cfg.fanout,
            max_inputs: self.cfg.max_inputs,
        }
    }

    /// Merges the blocks [`TierPolicy::pick`] chooses among the tenant's healthy blocks.
    /// Returns `None` when none qualify.
    pub async fn compact_once(&self, tenant: &str) -> Result<Option<Compacted>, BlockError> {
        self.compact_once_leased(tenant, None).await
    }

    /// [`Compactor::compact_once`] under a lease: the merged block is committed only before
    /// the lease ends.
    pub async fn compact_once_leased(
        &self,
        tenant: &str,
        lease: Option<crate::lease::Lease>,
    ) -> Result<Option<Compacted>, BlockError> {
        let db = &self.db;
        let blocks: Vec<Arc<Block>> = db
            .blocks(tenant)
            .into_iter()
            .filter(|b| !db.is_damaged(&b.meta.block_id))
            .collect();
        let candidates: Vec<Candidate> = blocks
            .iter()
            .map(|b| Candidate {
                spans: b.meta.span_count,
                max_end: b.meta.max_end_unix_nano,
                level: b.meta.compaction_level,
            })
            .collect();
        let inputs: Vec<Arc<Block>> = self
            .policy()
            .pick(&candidates)
            .into_iter()
            .map(|i| blocks[i].clone())
            .collect();
        if inputs.is_empty() {
            return Ok(None);
        }
        let cfg = &self.cfg;
        let spans: u64 = inputs.iter().map(|b| b.meta.span_count).sum();
        let cpu_started = thread_cpu_nanos();
        let started = Instant::now();
        let ids: Vec<String> = inputs.iter().map(|b| b.meta.block_id.clone()).collect();
        tracing::info!(tenant, blocks = inputs.len(), spans, inputs = ?ids, "compaction started");
        let storage = &**db.storage();
        let mut cols = SpanColumns::default();
        // Room for every input row at once: growing the columns row group by row group copied
        // them at each doubling (an eighth of a merge's CPU). The policy bounds the sum: inputs
        // are under a quarter of --compaction-max-block-spans each, at most max_inputs of them.
        cols.reserve_rows(spans as usize);
        for b in &inputs {
            for rg in 0..b.row_group_count() {
                // Decoded here, on the compactor's own thread: its CPU is counted as
                // compaction's, and no row group is handed to another thread and back. A
                // decoder that panics on bytes it was not built for fails this input, as a
                // decode error does, instead of ending the compactor's thread.
                let read = match b.fetch_row_group(storage, rg).await {
                    Ok(data) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| data.append_to(&mut cols)))
                        .unwrap_or_else(|_| Err(BlockError::Corrupt(format!("row group {rg} does not decode")))),
                    Err(e) => Err(e),
                };
                match read {
                    Ok(()) => {}
                    Err(e) if e.is_transient() => return Err(e),
                    Err(e) => {
                        // A damaged input is quarantined (or, if it verifies but does not
                        // decode, left out); the merge starts over without it.
                        tracing::warn!(tenant, block = %b.meta.block_id, error = %e, "compaction input unreadable; merging without it");
                        db.block_failed(b, e)?;
                        drop(cols);
                        return Box::pin(self.compact_once_leased(tenant, lease)).await;
                    }
                }
            }
        }
        cols.end_run();
        cols.freeze();
        let origin = Origin {
            wal_end: inputs.iter().filter_map(|b| b.meta.wal_end).max(),
            compaction_level: inputs.iter().map(|b| b.meta.compaction_level).max().unwrap_or(0) + 1,
            compacted_from: ids.clone(),
            kafka: weft_block::meta::merge_kafka_ranges(inputs.iter().flat_map(|b| &b.meta.kafka)),
            block_id: None,
        };
        let opts = WriteOptions {
            commit_before: lease.map(|l| l.commit_before()),
            ..WriteOptions::lasting(cfg.row_group_rows)
        };
        // Writing replaces the inputs in the block set at once (the new meta names them).
        let block = match db.write_block(&cols, tenant, origin, &opts).await {
            Ok(b) => b,
            Err(e) if self.stopping() => {
                tracing::info!(tenant, "compaction cut short by shutdown; its inputs stay in place");
                return Err(e);
            }
            Err(e) => {
                db.metrics.compaction_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(tenant, error = %e, "compaction failed; its inputs stay in place");
                return Err(e);
            }
        };
        drop(cols);
        let result = Compacted {
            inputs: ids.clone(),
            output: block.meta.block_id.clone(),
            spans_in: spans,
            spans_out: block.meta.span_count,
        };
        for b in &inputs {
            if let Err(e) = retire(db.storage(), b, cfg.delete_grace).await {
                tracing::warn!(block = %b.prefix(), error = %e, "retiring a compacted block failed; startup will finish it");
            }
        }
        let m = &db.metrics;
        m.compactions.fetch_add(1, Ordering::Relaxed);
        m.compaction_input_blocks
            .fetch_add(inputs.len() as u64, Ordering::Relaxed);
        m.compaction_spans.fetch_add(result.spans_out, Ordering::Relaxed);
        m.compaction_duplicates
            .fetch_add(result.spans_in.saturating_sub(result.spans_out), Ordering::Relaxed);
        m.compaction_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        m.compaction_cpu_nanos
            .fetch_add(thread_cpu_nanos().saturating_sub(cpu_started), Ordering::Relaxed);
        tracing::info!(
            tenant,
            output = %result.output,
            inputs = result.inputs.len(),
            spans_in = result.spans_in,
            spans_out = result.spans_out,
            duplicates_removed = result.spans_in.saturating_sub(result.spans_out),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compaction finished"
        );
        Ok(Some(result))
    }

    /// The retention of `tenant`, if any.
    pub fn retention_of(&self, tenant: &str) -> Option<Duration> {
        let c = &self.cfg;
        c.tenant_retention
            .iter()
            .find(|(t, _)| t == tenant)
            .map(|(_, d)| *d)
            .or(c.retention)
    }

    /// Deletes every block past its tenant's retention. Returns how many were deleted.
    pub async fn apply_retention(&self) -> usize {
        let now = now_ns();
        let mut deleted = 0;
        let db = &self.db;
        for tenant in db.tenants() {
            let Some(keep) = self.retention_of(&tenant) else {
                continue;
            };
            let cutoff = now.saturating_sub(keep.as_nanos() as u64);
            let expired: Vec<Arc<Block>> = db
                .blocks(&tenant)
                .into_iter()
                .filter(|b| b.meta.max_end_unix_nano < cutoff)
                .collect();
            if expired.is_empty() {
                continue;
            }
            let ids: Vec<String> = expired.iter().map(|b| b.meta.block_id.clone()).collect();
            db.replace(&tenant, &ids, None);
            for b in &expired {
                match retire(db.storage(), b, self.cfg.delete_grace).await {
                    Ok(()) => {
                        deleted += 1;
                        tracing::info!(tenant = %tenant, block = %b.meta.block_id, spans = b.meta.span_count, max_end_unix_nano = b.meta.max_end_unix_nano, "block deleted by retention");
                    }
                    Err(e) => tracing::warn!(block = %b.prefix(), error = %e, "retention delete failed"),
                }
            }
        }
        db.metrics
            .retention_deleted_blocks
            .fetch_add(deleted as u64, Ordering::Relaxed);
        deleted
    }

    /// One round of the background compactor: the block list re-read if other processes
    /// write blocks, retention, then compaction of every tenant until nothing qualifies, then
    /// incomplete block folders deleted.
    pub async fn maintain(&self) {
        let db = &self.db;
        let shared = !db.options().incomplete_grace.is_zero();
        if shared && let Err(e) = db.poll().await {
            tracing::warn!(error = %e, "polling the block list failed; compacting what is known");
        }
        self.apply_retention().await;
        for tenant in db.tenants() {
            let lease = match &self.cfg.leases {
                None => None,
                Some(leases) => match leases.acquire(&**db.storage(), &tenant).await {
                    Ok(Some(l)) => Some(l),
                    Ok(None) => {
                        db.metrics.compaction_lease_skips.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(tenant = %tenant, "another compactor holds this tenant's lease");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(tenant = %tenant, error = %e, "taking the compaction lease failed; skipping the tenant");
                        continue;
                    }
                },
            };
            loop {
                if self.stopping() {
                    return;
                }
                if let (Some(l), Some(leases)) = (lease, &self.cfg.leases)
                    && !l.may_start(leases.period)
                {
                    break;
                }
                match self.compact_once_leased(&tenant, lease).await {
                    Ok(Some(_)) => continue,
                    Ok(None) => break,
                    Err(_) if self.stopping() => return,
                    Err(e) => {
                        tracing::error!(tenant = %tenant, error = %e, "compaction failed");
                        break;
                    }
                }
            }
        }
        if shared && let Err(e) = db.sweep_folders().await {
            tracing::warn!(error = %e, "listing blocks to delete incomplete folders failed");
        }
    }
}
