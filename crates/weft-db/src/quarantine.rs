//! Damaged blocks.
//!
//! A block is **damaged** when a read of it fails in a way no retry can fix
//! ([`BlockError::is_damage`]): a checksum mismatch; a file that is missing or shorter than
//! `meta.json` says; a footer that does not frame; a lost `meta.json` (block files without it
//! or a writer's marker); in a block written before checksums, bytes that do not decode; an
//! unreadable `meta.json` or `index.bin`. Such a block is **quarantined**: it leaves the block
//! set at once, so queries answer from the other blocks (and say they are partial) and
//! compaction stops picking it, and the maintaining process moves its files to
//! `quarantine/<tenant>/<block_id>/` (copied, then the originals deleted, `meta.json` first),
//! where an operator can inspect them. Other processes take it out of service in memory and
//! learn of quarantined blocks by listing `quarantine/` when they poll.
//!
//! Damage is found by the read that meets it, by the check every block gets when it is opened
//! ([`Block::check`]), and by the scrubber ([`crate::scrub`]), which verifies every checksum at
//! a bounded rate. Storage that cannot be reached is not damage: those reads fail with an error
//! the APIs answer 503 to, and no block is quarantined for it.
//!
//! Every answer that may have left out a quarantined block's spans says it is partial: a scan
//! over a window its time range overlaps (or any window, when its `meta.json` was unreadable),
//! a trace by ID its index admits. That lasts while the block is listed under `quarantine/`,
//! across restarts; deleting (or repairing and moving back) its folder there ends it at the
//! next start.
//!
//! A block whose bytes verify but do not decode points at a bug rather than damage: it stays in
//! place, reads skip it (partial), it is counted and logged, and compaction leaves it alone
//! until the next start.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_block::index::TraceIndex;
use weft_block::meta::BlockMeta;
use weft_block::{Block, BlockError};
use weft_storage::{Storage, StorageError};

use crate::Db;

/// Where quarantined blocks go.
pub const QUARANTINE_PREFIX: &str = "quarantine";

/// A block out of service because it is damaged, as this process knows it.
#[derive(Debug, Clone)]
pub struct QuarantinedBlock {
    pub tenant: String,
    pub block: String,
    pub why: String,
    /// Its time range (Unix nanoseconds), when its `meta.json` was readable. Without it the
    /// block may have held spans of any time.
    pub range: Option<(u64, u64)>,
    /// The block as it was opened, when its `meta.json` and `index.bin` were readable: its
    /// index says which traces it may have held.
    pub opened: Option<Arc<Block>>,
    /// Its trace index read on its own, when the block could not be opened (a lost or damaged
    /// `meta.json`) but `index.bin` decodes.
    pub index: Option<Arc<TraceIndex>>,
}

impl QuarantinedBlock {
    /// Whether the block may have held spans in `window` (Unix nanoseconds, inclusive).
    fn overlaps(&self, window: Option<(u64, u64)>) -> bool {
        match (self.range, window) {
            (Some((lo, hi)), Some((s, e))) => lo <= e && hi >= s,
            _ => true,
        }
    }

    /// Whether the block may have held spans of trace `id` in `range` (Unix seconds).
    fn may_hold(&self, id: &[u8; 16], range: Option<(u64, u64)>) -> bool {
        let window = range.map(|(s, e)| {
            (
                s.saturating_mul(1_000_000_000),
                e.saturating_mul(1_000_000_000).saturating_add(999_999_999),
            )
        });
        let index = self.opened.as_ref().map(|b| &b.index).or(self.index.as_deref());
        self.overlaps(window) && index.is_none_or(|ix| ix.may_hold(id))
    }

    /// Describes the damaged block at `prefix` (`<root>/<tenant>/<id>`, in `blocks/` or
    /// `quarantine/`): its range and index from `opened` if it could be opened, else from what
    /// of its files is readable ([`read_range`], `index.bin` decoded alone).
    pub(crate) async fn describe(storage: &dyn Storage, prefix: &str, why: String, opened: Option<Arc<Block>>) -> Self {
        let mut parts = prefix.rsplit('/');
        let block = parts.next().unwrap_or_default().to_owned();
        let tenant = parts.next().unwrap_or_default().to_owned();
        let (range, index) = match &opened {
            Some(b) => (Some((b.meta.min_start_unix_nano, b.meta.max_end_unix_nano)), None),
            None => {
                let index = match storage.get(&format!("{prefix}/index.bin")).await {
                    Ok(bytes) => TraceIndex::decode(&bytes).ok().map(Arc::new),
                    Err(_) => None,
                };
                (read_range(storage, prefix).await, index)
            }
        };
        QuarantinedBlock {
            tenant,
            block,
            why,
            range,
            opened,
            index,
        }
    }
}

/// Moves the files of the block at `prefix` (`blocks/<tenant>/<id>`) under `quarantine/`.
/// Missing files are skipped; the first other failure stops the move and leaves the originals.
pub async fn move_to_quarantine(storage: &dyn Storage, prefix: &str) -> Result<(), StorageError> {
    let rest = prefix.strip_prefix("blocks/").unwrap_or(prefix);
    let mut moved = false;
    for f in ["data.parquet", "index.bin", "meta.json"] {
        match storage.get(&format!("{prefix}/{f}")).await {
            Ok(bytes) => {
                storage.put(&format!("{QUARANTINE_PREFIX}/{rest}/{f}"), bytes).await?;
                moved = true;
            }
            Err(StorageError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    if !moved {
        // Nothing was left to copy (every file deleted): a note keeps it listed as quarantined.
        storage
            .put(
                &format!("{QUARANTINE_PREFIX}/{rest}/{NOTHING_LEFT}"),
                bytes::Bytes::new(),
            )
            .await?;
    }
    crate::blocks::delete_files(storage, prefix).await;
    Ok(())
}

/// The note a quarantined folder holds when none of the block's files were left to move.
const NOTHING_LEFT: &str = "no-files-left";

/// The time range of the block under `prefix`: from its `meta.json` if that is readable, else
/// from its data file's footer ([`weft_block::data_time_range`]).
pub(crate) async fn read_range(storage: &dyn Storage, prefix: &str) -> Option<(u64, u64)> {
    if let Ok(m) = storage.get(&format!("{prefix}/meta.json")).await
        && let Ok(m) = serde_json::from_slice::<BlockMeta>(&m)
    {
        return Some((m.min_start_unix_nano, m.max_end_unix_nano));
    }
    let data = format!("{prefix}/data.parquet");
    let len = storage
        .list(&data)
        .await
        .ok()?
        .into_iter()
        .find(|o| o.path == data)?
        .size;
    weft_block::data_time_range(storage, &data, len).await
}

/// Reads a block found under `quarantine/` (by an earlier start, or by another process): its
/// range and index when they are readable.
pub(crate) async fn read_quarantined(storage: &dyn Storage, tenant: &str, id: &str) -> QuarantinedBlock {
    let prefix = format!("{QUARANTINE_PREFIX}/{tenant}/{id}");
    let opened = Block::open(storage, &prefix).await.ok().map(Arc::new);
    QuarantinedBlock::describe(storage, &prefix, "quarantined before this start".into(), opened).await
}

/// Lists quarantined blocks as (tenant, block id).
pub async fn list_quarantined(storage: &dyn Storage) -> Vec<(String, String)> {
    let Ok(objects) = storage.list(&format!("{QUARANTINE_PREFIX}/")).await else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = objects
        .iter()
        .filter_map(|o| {
            let mut parts = o.path.strip_prefix("quarantine/")?.split('/');
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Db {
    /// Decides what a failed read of block `b` means for the query that made it. Damage (see
    /// the [module docs](self)) quarantines the block; bytes that verify but do not decode are
    /// counted and logged. In both cases the query goes on without the block (`Ok`), and should
    /// say it is partial. A transient error (storage unreachable: [`BlockError::is_transient`])
    /// is returned for the query to fail with "try again", and so is a version this build
    /// cannot read.
    pub fn block_failed(&self, b: &Arc<Block>, e: BlockError) -> Result<(), BlockError> {
        let has_checksums = b.meta.checksums.is_some();
        if e.is_transient() || matches!(e, BlockError::UnsupportedVersion(_) | BlockError::Deadline(_)) {
            return Err(e);
        }
        if matches!(e, BlockError::Storage(_)) && !self.blocks.contains(&b.meta.tenant, &b.meta.block_id) {
            // Retired (compaction, retention) while the query held the old list, and its
            // files are gone: not damage. Its spans are elsewhere or expired; the query says
            // it is partial.
            return Ok(());
        }
        if !self.damaged.lock().insert(b.meta.block_id.clone()) {
            return Ok(()); // already handled by another reader
        }
        if e.is_damage(has_checksums) {
            self.quarantine(b.clone(), e.to_string());
        } else {
            self.metrics.block_read_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(block = %b.prefix(), error = %e, "block verifies but does not decode; reads skip it until restart");
        }
        Ok(())
    }

    /// How many quarantined blocks of `tenant` may have held spans in `window` (Unix
    /// nanoseconds; all of them without a window): a scan over that window answers without
    /// their spans, so it is partial.
    pub fn quarantined_overlapping(&self, tenant: &str, window: Option<(u64, u64)>) -> u64 {
        self.quarantined
            .lock()
            .iter()
            .filter(|q| q.tenant == tenant && q.overlaps(window))
            .count() as u64
    }

    /// How many quarantined blocks of `tenant` may have held spans of trace `id` in `range`
    /// (Unix seconds, inclusive): a trace by ID answers without them, so it is partial.
    pub fn quarantined_holding(&self, tenant: &str, id: &[u8; 16], range: Option<(u64, u64)>) -> u64 {
        self.quarantined
            .lock()
            .iter()
            .filter(|q| q.tenant == tenant && q.may_hold(id, range))
            .count() as u64
    }

    /// The blocks quarantined as this process knows them.
    pub fn quarantined(&self) -> Vec<QuarantinedBlock> {
        self.quarantined.lock().clone()
    }

    /// Whether compaction must leave block `id` alone (quarantined or unreadable).
    pub fn is_damaged(&self, id: &str) -> bool {
        self.damaged.lock().contains(id)
    }

    /// Notes a quarantined block (once per tenant and block): queries count it, `/metrics`
    /// lists it.
    pub(crate) fn register_quarantined(&self, q: QuarantinedBlock) {
        self.damaged.lock().insert(q.block.clone());
        let mut all = self.quarantined.lock();
        if all.iter().any(|x| x.tenant == q.tenant && x.block == q.block) {
            return;
        }
        self.metrics
            .quarantined
            .lock()
            .push((q.tenant.clone(), q.block.clone(), q.why.clone()));
        all.push(q);
    }

    /// Takes `b` out of the block set now and, in the maintaining process, moves its files to
    /// quarantine in the background.
    pub(crate) fn quarantine(&self, b: Arc<Block>, why: String) {
        let tenant = b.meta.tenant.clone();
        self.replace(&tenant, std::slice::from_ref(&b.meta.block_id), None);
        self.metrics.blocks_quarantined.fetch_add(1, Ordering::Relaxed);
        tracing::error!(tenant = %tenant, block = %b.meta.block_id, spans = b.meta.span_count, reason = %why, "damaged block quarantined; queries answer without it");
        self.register_quarantined(QuarantinedBlock {
            tenant,
            block: b.meta.block_id.clone(),
            why,
            range: Some((b.meta.min_start_unix_nano, b.meta.max_end_unix_nano)),
            opened: Some(b.clone()),
            index: None,
        });
        if !self.opts.maintains {
            return;
        }
        let storage = self.storage.clone();
        tokio::spawn(async move {
            if let Err(e) = move_to_quarantine(&*storage, b.prefix()).await {
                tracing::error!(block = %b.prefix(), error = %e, "moving a damaged block to quarantine failed; it stays out of service until restart");
            }
        });
    }

    /// Learns of blocks quarantined by other processes (or earlier starts) from the listing of
    /// `quarantine/`. Returns how many were new.
    pub(crate) async fn learn_quarantined(&self) -> usize {
        let listed = list_quarantined(&*self.storage).await;
        let mut new = 0;
        for (t, id) in listed {
            let known = self.quarantined.lock().iter().any(|q| q.tenant == t && q.block == id);
            if known {
                continue;
            }
            let q = read_quarantined(&*self.storage, &t, &id).await;
            // Out of service here too, if this process still lists it.
            self.replace(&t, std::slice::from_ref(&id), None);
            self.register_quarantined(q);
            new += 1;
        }
        new
    }
}
