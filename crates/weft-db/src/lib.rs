//! weft's block database: what is in storage and how it is kept.
//!
//! ```text
//!   write path (weft-ingest) ──write_block──►┌────────────┐◄──poll── storage listing
//!                                             │     Db     │
//!   read path (weft-querier) ──blocks, find──►│  BlockSet  │◄──replace── Compactor (compaction,
//!                                             └────────────┘              retention)
//! ```
//!
//! [`Db`] owns the [`BlockSet`] (every complete block, per tenant), writes new blocks, finds a
//! trace's spans in blocks, and takes damaged blocks out of service ([`quarantine`]).
//! [`compact::Compactor`] merges and expires blocks. [`recent::RecentSpans`] is the contract
//! through which the read path sees spans that are not in a block yet; the write path
//! implements it. Both paths depend on this crate and never on each other.
//!
//! Several processes may share one storage (`--target ingester`, `querier`, `compactor` on one
//! data directory). Exactly one of them *maintains* it ([`DbOptions::maintains`]): only that one
//! deletes blocks or moves them to quarantine. The others re-list storage with [`Db::poll`].

pub mod blocks;
pub mod compact;
pub mod lease;
pub mod metrics;
pub mod policy;
pub mod quarantine;
pub mod recent;
pub mod scrub;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::Mutex;
use weft_block::columns::SpanColumns;
use weft_block::meta::WalPos;
use weft_block::row::SpanRow;
use weft_block::{Block, BlockError, WriteOptions};
use weft_storage::Storage;

pub use blocks::BlockSet;
use metrics::DbMetrics;

/// How this process treats the storage it shares.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// This process maintains the storage: it deletes blocks replaced by compaction and
    /// incomplete block folders, and moves damaged blocks to `quarantine/`. One process per
    /// storage does (the all-in-one binary, or the compactor); the others only read, add new
    /// blocks, and take damaged blocks out of service in memory.
    pub maintains: bool,
    /// A block folder without `meta.json` whose block ID (a UUIDv7, so it carries its creation
    /// time) is younger than this may still be being written by another process, and is left
    /// alone. Zero when no other process writes blocks.
    pub incomplete_grace: Duration,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            maintains: true,
            incomplete_grace: Duration::ZERO,
        }
    }
}

/// The blocks of one storage, shared by every role of a process.
pub struct Db {
    storage: Arc<dyn Storage>,
    opts: DbOptions,
    blocks: BlockSet,
    pub metrics: Arc<DbMetrics>,
    /// Blocks quarantined or found unreadable ([`quarantine`]).
    damaged: Mutex<HashSet<String>>,
    /// The quarantined blocks this process knows of (found by it, or listed under
    /// `quarantine/`): answers that may miss their spans are partial.
    quarantined: Mutex<Vec<quarantine::QuarantinedBlock>>,
    /// Permits for reading large traces ([`LARGE_TRACE_READ_BYTES`]).
    large_trace_reads: Arc<tokio::sync::Semaphore>,
}

/// A trace's spans as found in the blocks by [`Db::find_trace`].
#[derive(Debug, Default)]
pub struct FoundTrace {
    /// Oldest block first; not de-duplicated.
    pub rows: Vec<SpanRow>,
    /// [`span_bytes`] of `rows`.
    pub bytes: u64,
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

impl Db {
    /// One of the [`LARGE_TRACE_READS`] permits for holding a large trace in memory (block
    /// reads take theirs in [`Db::find_trace`]; readers of recent spans call this).
    pub async fn large_read_permit(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.large_trace_reads
            .clone()
            .acquire_owned()
            .await
            .expect("never closed")
    }

    /// Lists the blocks in `storage` and opens every complete one. A maintaining process also
    /// finishes what a crash interrupted (see [`BlockSet::load`]) and quarantines blocks whose
    /// `meta.json` or `index.bin` is damaged; a reading process skips those.
    pub async fn open(storage: Arc<dyn Storage>, opts: DbOptions) -> Result<Arc<Db>, BlockError> {
        let metrics = Arc::new(DbMetrics::default());
        let (blocks, quarantined) = BlockSet::load(&*storage, &opts).await?;
        metrics
            .blocks_quarantined
            .store(quarantined.len() as u64, Ordering::Relaxed);
        metrics.blocks.store(blocks.count() as u64, Ordering::Relaxed);
        let db = Arc::new(Db {
            storage,
            opts,
            blocks,
            metrics,
            damaged: Mutex::new(HashSet::new()),
            quarantined: Mutex::new(Vec::new()),
            large_trace_reads: Arc::new(tokio::sync::Semaphore::new(LARGE_TRACE_READS)),
        });
        for q in quarantined {
            db.register_quarantined(q);
        }
        db.learn_quarantined().await;
        Ok(db)
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    pub fn options(&self) -> &DbOptions {
        &self.opts
    }

    /// The blocks of `tenant` now.
    pub fn blocks(&self, tenant: &str) -> Vec<Arc<Block>> {
        self.blocks.of(tenant)
    }

    /// Tenants with at least one block.
    pub fn tenants(&self) -> Vec<String> {
        self.blocks.tenants()
    }

    /// Blocks of every tenant.
    pub fn block_count(&self) -> usize {
        self.blocks.count()
    }

    /// Per tenant, the WAL position below which every record is in a block
    /// ([`weft_block::meta::BlockMeta::wal_end`]): replay skips those records.
    pub fn wal_coverage(&self) -> HashMap<String, WalPos> {
        self.blocks.wal_coverage()
    }

    /// Per tenant, the Kafka offset of `partition` its blocks cover up to
    /// ([`weft_block::meta::BlockMeta::kafka`]): a block builder skips those records.
    pub fn kafka_coverage(&self, partition: i32) -> HashMap<String, i64> {
        self.blocks.kafka_coverage(partition)
    }

    /// Encodes `cols` as a block of `tenant` (in the format this build writes), writes it
    /// `meta.json` last, and adds it to the block set. On error nothing is added; files already
    /// written stay as an incomplete folder that maintenance deletes.
    pub async fn write_block(
        &self,
        cols: &SpanColumns,
        tenant: &str,
        origin: weft_block::Origin,
        opts: &WriteOptions,
    ) -> Result<Arc<Block>, BlockError> {
        let meta = weft_block::write_block(&*self.storage, cols, tenant, origin, opts).await?;
        let b = Arc::new(Block::open(&*self.storage, &weft_block::block_prefix(tenant, &meta.block_id)).await?);
        if origin_is_compaction(&b) {
            self.replace(tenant, &b.meta.compacted_from, Some(b.clone()));
        } else {
            self.metrics.cut_spans.fetch_add(b.meta.span_count, Ordering::Relaxed);
            self.add(b.clone());
        }
        Ok(b)
    }

    fn add(&self, b: Arc<Block>) {
        self.blocks.add(b);
        self.metrics.blocks.store(self.blocks.count() as u64, Ordering::Relaxed);
    }

    /// Atomically removes the blocks `remove` of `tenant` and adds `add`.
    pub(crate) fn replace(&self, tenant: &str, remove: &[String], add: Option<Arc<Block>>) {
        self.blocks.replace(tenant, remove, add);
        self.metrics.blocks.store(self.blocks.count() as u64, Ordering::Relaxed);
    }

    /// Re-lists storage: opens blocks written by other processes, and drops blocks that were
    /// retired (their `meta.json` is gone) or replaced by a compacted block. Queries that
    /// already hold the old list finish on it. Returns (blocks added, blocks dropped).
    ///
    /// Cancel safe: the set changes only at the end, at once.
    pub async fn poll(&self) -> Result<(usize, usize), BlockError> {
        self.learn_quarantined().await;
        let skip = self.damaged.lock().clone();
        let blocks::Polled {
            added,
            dropped,
            damaged,
        } = self.blocks.poll(&*self.storage, &skip).await?;
        for (b, e) in damaged {
            if self.damaged.lock().insert(b.meta.block_id.clone()) {
                self.quarantine(b, e.to_string());
            }
        }
        self.metrics.blocks.store(self.blocks.count() as u64, Ordering::Relaxed);
        self.metrics.polls.fetch_add(1, Ordering::Relaxed);
        if added + dropped > 0 {
            tracing::debug!(added, dropped, blocks = self.blocks.count(), "block list polled");
        }
        Ok((added, dropped))
    }

    /// Finds the spans of trace `id` of `tenant` in the blocks, oldest block first, reading
    /// only row groups the blocks' indexes admit. `range` (Unix seconds, inclusive) restricts
    /// which blocks are read. Stops once the spans found hold more than `max_bytes` (as
    /// [`span_bytes`] counts them), so a huge trace costs bounded memory; `truncated` then says
    /// spans were left out. A damaged block is taken out of service ([`quarantine`]) and
    /// counted, and the read goes on without it; an unreachable storage is an error. Up to
    /// `parallel` blocks are read at once.
    pub async fn find_trace(
        &self,
        tenant: &str,
        id: &[u8; 16],
        range: Option<(u64, u64)>,
        max_bytes: u64,
        parallel: usize,
    ) -> Result<FoundTrace, BlockError> {
        let blocks = self.trace_candidates(tenant, id, range);
        let mut found = self.read_trace(id, &blocks, max_bytes, parallel).await?;
        found.damaged_blocks += self.quarantined_holding(tenant, id, range);
        Ok(found)
    }

    /// The blocks of `tenant` whose index may hold trace `id`, oldest first (by their earliest
    /// span start, then latest end), within `range` (Unix seconds, inclusive) when given.
    pub fn trace_candidates(&self, tenant: &str, id: &[u8; 16], range: Option<(u64, u64)>) -> Vec<Arc<Block>> {
        let mut blocks = self.blocks.of(tenant);
        blocks.retain(|b| {
            let outside = range.is_some_and(|(start, end)| {
                let (lo, hi) = (
                    b.meta.min_start_unix_nano / 1_000_000_000,
                    b.meta.max_end_unix_nano / 1_000_000_000,
                );
                hi < start || lo > end
            });
            !outside && b.index.may_hold(id)
        });
        // Oldest blocks first: spans arrive roughly in time order, so when the cap stops the
        // read, what was read is the start of the trace (with its root).
        blocks.sort_by_key(|b| (b.meta.min_start_unix_nano, b.meta.max_end_unix_nano));
        blocks
    }

    /// A large-read permit ([`LARGE_TRACE_READ_BYTES`]) when reading trace `id` from `blocks`
    /// may take one: each row group their indexes admit counted at its block's average row
    /// group size, compressed (decoded spans take more; the point is to catch large traces
    /// before they are read, so that few are in memory at once).
    pub async fn large_read_for(
        &self,
        id: &[u8; 16],
        blocks: &[Arc<Block>],
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let estimate: u64 = blocks
            .iter()
            .map(|b| b.index.candidates(id).len() as u64 * (b.meta.size_bytes / u64::from(b.meta.row_groups.max(1))))
            .sum();
        if estimate > LARGE_TRACE_READ_BYTES {
            Some(self.large_read_permit().await)
        } else {
            None
        }
    }

    /// Reads trace `id` from `blocks` (as [`Db::trace_candidates`] orders them), up to
    /// `parallel` blocks at once, their spans kept in the blocks' order, until the spans hold
    /// more than `max_bytes`. A damaged block is taken out of service and counted; nothing of
    /// it is kept. Quarantined blocks that may hold the trace are not counted here.
    pub async fn read_trace(
        &self,
        id: &[u8; 16],
        blocks: &[Arc<Block>],
        max_bytes: u64,
        parallel: usize,
    ) -> Result<FoundTrace, BlockError> {
        use futures::StreamExt;
        let mut found = FoundTrace {
            large_read: self.large_read_for(id, blocks).await,
            ..FoundTrace::default()
        };
        let storage = &*self.storage;
        let mut reads = futures::stream::iter(blocks.iter().cloned())
            .map(|b| async move {
                let mut rows = Vec::new();
                for rg in b.index.candidates(id) {
                    match b.find_trace_in(storage, id, rg).await {
                        Ok(r) => rows.extend(r),
                        // Nothing of a damaged block is served, not even its row groups that
                        // did verify: the block is out of service as a whole.
                        Err(e) => return (b, Err(e)),
                    }
                }
                (b, Ok(rows))
            })
            .buffered(parallel.max(1));
        while let Some((b, read)) = reads.next().await {
            if found.bytes > max_bytes {
                found.truncated = true;
                break;
            }
            found.blocks_read += 1;
            match read {
                Ok(rows) => {
                    found.bytes += rows.iter().map(span_bytes).sum::<u64>();
                    found.rows.extend(rows);
                }
                Err(e) => {
                    self.block_failed(&b, e)?;
                    found.damaged_blocks += 1;
                }
            }
        }
        self.metrics.trace_lookups.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .trace_lookup_blocks_read
            .fetch_add(found.blocks_read, Ordering::Relaxed);
        Ok(found)
    }
}

/// Runs `work` on a thread of its own (`name`) with a current-thread runtime, after
/// `thread_start` (the server lowers the thread's priority with it): background maintenance
/// that must block neither ingest nor queries. If the runtime cannot start, `what` is off and
/// an error is logged.
pub(crate) fn spawn_background(
    name: &str,
    what: &'static str,
    thread_start: Option<fn()>,
    work: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Some(f) = thread_start {
            f();
        }
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(work),
            Err(e) => tracing::error!(error = %e, "cannot start a background runtime; {what} is off"),
        }
    })?;
    Ok(())
}

fn origin_is_compaction(b: &Block) -> bool {
    !b.meta.compacted_from.is_empty()
}
