//! Damaged blocks.
//!
//! A block whose bytes fail a check (a checksum mismatch; in a block written before checksums,
//! bytes that do not decode; an unreadable `meta.json` or `index.bin` at start) is
//! **quarantined**: it leaves the block set at once, so queries answer from the other blocks
//! (and say they are partial) and compaction stops picking it, and its files move to
//! `quarantine/<tenant>/<block_id>/` (copied, then the originals deleted, `meta.json` first), where
//! an operator can inspect them. weft never reads or deletes anything under `quarantine/`.
//!
//! A block whose bytes verify but do not decode points at a bug rather than damage: it stays in
//! place, reads skip it (partial), it is counted and logged, and compaction leaves it alone
//! until the next start.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_block::{Block, BlockError};
use weft_storage::{Storage, StorageError};

use crate::Db;

/// Where quarantined blocks go.
pub const QUARANTINE_PREFIX: &str = "quarantine";

/// Moves the files of the block at `prefix` (`blocks/<tenant>/<id>`) under `quarantine/`.
/// Missing files are skipped; the first other failure stops the move and leaves the originals.
pub async fn move_to_quarantine(storage: &dyn Storage, prefix: &str) -> Result<(), StorageError> {
    let rest = prefix.strip_prefix("blocks/").unwrap_or(prefix);
    let files = ["data.parquet", "index.bin", "meta.json"];
    for f in files {
        match storage.get(&format!("{prefix}/{f}")).await {
            Ok(bytes) => storage.put(&format!("{QUARANTINE_PREFIX}/{rest}/{f}"), bytes).await?,
            Err(StorageError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    // meta.json first: without it the folder is no longer a block, for readers and for startup.
    for f in ["meta.json", "data.parquet", "index.bin"] {
        match storage.delete(&format!("{prefix}/{f}")).await {
            Ok(()) | Err(StorageError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    /// say it is partial. Any other error (storage unreachable) is returned for the query to
    /// fail with.
    pub fn block_failed(&self, b: &Arc<Block>, e: BlockError) -> Result<(), BlockError> {
        let has_checksums = b.meta.checksums.is_some();
        if matches!(e, BlockError::Storage(_) | BlockError::UnsupportedVersion(_)) {
            return Err(e);
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

    /// How many quarantined blocks of `tenant` overlap `window` (all of them without a
    /// window): a scan over that window answers without their spans, so it is partial.
    pub fn quarantined_overlapping(&self, tenant: &str, window: Option<(u64, u64)>) -> u64 {
        self.quarantined_ranges
            .lock()
            .iter()
            .filter(|(t, lo, hi)| t == tenant && window.is_none_or(|(s, e)| *lo <= e && *hi >= s))
            .count() as u64
    }

    /// Whether compaction must leave block `id` alone (quarantined or unreadable).
    pub fn is_damaged(&self, id: &str) -> bool {
        self.damaged.lock().contains(id)
    }

    /// Takes `b` out of the block set now and, in the maintaining process, moves its files to
    /// quarantine in the background.
    pub(crate) fn quarantine(&self, b: Arc<Block>, why: String) {
        let tenant = b.meta.tenant.clone();
        self.damaged.lock().insert(b.meta.block_id.clone());
        self.replace(&tenant, std::slice::from_ref(&b.meta.block_id), None);
        self.metrics.blocks_quarantined.fetch_add(1, Ordering::Relaxed);
        self.quarantined_ranges
            .lock()
            .push((tenant.clone(), b.meta.min_start_unix_nano, b.meta.max_end_unix_nano));
        self.metrics
            .quarantined
            .lock()
            .push((tenant.clone(), b.meta.block_id.clone(), why.clone()));
        tracing::error!(tenant = %tenant, block = %b.meta.block_id, spans = b.meta.span_count, reason = %why, "damaged block quarantined; queries answer without it");
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
}
