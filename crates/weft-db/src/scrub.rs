//! Finding damage before a query meets it.
//!
//! The maintaining process runs a [`Scrubber`]: every round it first sweeps the block folders
//! ([`Db::sweep_folders`]: every listed block still has its files, at the sizes its
//! `meta.json` gives; no folder lost its `meta.json`), then verifies the checksum of every
//! column chunk of the blocks not verified within [`ScrubConfig::every`], reading at most
//! [`ScrubConfig::bytes_per_second`]. What it finds is quarantined as a query would
//! ([`crate::quarantine`]). A storage that cannot be reached ends the round; the next one
//! tries again, and no block is quarantined for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weft_block::BlockError;

use crate::Db;
use crate::blocks::{self, lost_meta, lost_meta_error};
use crate::quarantine::{QuarantinedBlock, move_to_quarantine};

/// How the scrubber paces itself.
#[derive(Debug, Clone)]
pub struct ScrubConfig {
    /// Most bytes of block data read per second; 0 turns checksum verification off (folders
    /// are still swept).
    pub bytes_per_second: u64,
    /// A block is verified again this long after its last verification.
    pub every: Duration,
    /// The pause between rounds.
    pub round: Duration,
}

impl Default for ScrubConfig {
    fn default() -> Self {
        ScrubConfig {
            bytes_per_second: 8 << 20,
            every: Duration::from_secs(24 * 3600),
            round: Duration::from_secs(60),
        }
    }
}

impl Db {
    /// Compares the listing of `blocks/` with the block set: a listed block whose
    /// `data.parquet` or `index.bin` is gone, whose data file is not the size its `meta.json`
    /// gives, or whose `meta.json` is gone without a retirement marker, is quarantined; so is
    /// a folder that lost its `meta.json` ([`blocks::lost_meta`]). A maintaining process also
    /// deletes what writes and retirements cut short left behind, once older than the grace.
    pub async fn sweep_folders(&self) -> Result<(), BlockError> {
        // The set before the listing: a block added later may be missing from the listing.
        let known: Vec<Arc<weft_block::Block>> = self.blocks.tenants().iter().flat_map(|t| self.blocks.of(t)).collect();
        let folders = blocks::list_folders(&*self.storage).await?;
        let mut replaced = std::collections::HashSet::new();
        for b in known {
            let tenant = &b.meta.tenant;
            replaced.extend(b.meta.compacted_from.iter().map(|id| (tenant.clone(), id.clone())));
            // Still in the set after the listing: not retired or quarantined before it (both
            // take a block out of the set before touching its files), so the listing saw its
            // files as they are.
            if !self.blocks.contains(tenant, &b.meta.block_id) {
                continue;
            }
            let why = match folders.get(b.prefix()) {
                None => Some("every file of the block is gone".to_owned()),
                Some(f) => f.missing_files(b.meta.size_bytes),
            };
            if let Some(why) = why {
                self.block_failed(&b, BlockError::Damaged(format!("{}: {why}", b.prefix())))?;
            }
        }
        if !self.opts.maintains {
            return Ok(());
        }
        for prefix in lost_meta(&folders, &replaced, self.opts.incomplete_grace) {
            let (tenant, id) = blocks::split_prefix(&prefix);
            if self.blocks.contains(tenant, id) || self.is_damaged(id) {
                continue; // in service (next round decides) or already quarantined
            }
            let e = lost_meta_error(&prefix);
            tracing::error!(block = %prefix, error = %e, "damaged block folder quarantined");
            self.metrics.blocks_quarantined.fetch_add(1, Ordering::Relaxed);
            self.register_quarantined(QuarantinedBlock::describe(&*self.storage, &prefix, e.to_string(), None).await);
            if let Err(m) = move_to_quarantine(&*self.storage, &prefix).await {
                tracing::error!(block = %prefix, error = %m, "moving a damaged block to quarantine failed");
            }
        }
        blocks::delete_left_over(&*self.storage, &folders, &replaced, self.opts.incomplete_grace).await;
        Ok(())
    }
}

/// Verifies blocks in the background ([module docs](self)).
pub struct Scrubber {
    db: Arc<Db>,
    cfg: ScrubConfig,
    /// When each block was last verified whole.
    verified: HashMap<String, Instant>,
}

impl Scrubber {
    pub fn new(db: Arc<Db>, cfg: ScrubConfig) -> Scrubber {
        Scrubber {
            db,
            cfg,
            verified: HashMap::new(),
        }
    }

    /// Runs rounds on a thread of its own ("weft-scrubber", with its own runtime, after
    /// `thread_start`, e.g. lowering its priority) for as long as the process runs.
    pub fn spawn(self, thread_start: Option<fn()>) -> std::io::Result<()> {
        crate::spawn_background("weft-scrubber", "block scrubbing", thread_start, self.run())
    }

    /// Runs rounds, [`ScrubConfig::round`] apart, forever.
    pub async fn run(mut self) {
        loop {
            tokio::time::sleep(self.cfg.round).await;
            self.round().await;
        }
    }

    /// One round: the sweep, then every block due for verification, oldest first. Returns
    /// the bytes verified.
    pub async fn round(&mut self) -> u64 {
        let db = self.db.clone();
        if let Err(e) = db.sweep_folders().await {
            tracing::warn!(error = %e, "sweeping block folders failed; the next round tries again");
            return 0;
        }
        if self.cfg.bytes_per_second == 0 {
            return 0;
        }
        let mut due = Vec::new();
        for tenant in db.tenants() {
            for b in db.blocks(&tenant) {
                if self
                    .verified
                    .get(&b.meta.block_id)
                    .is_none_or(|t| t.elapsed() >= self.cfg.every)
                {
                    due.push(b);
                }
            }
        }
        due.sort_by_key(|b| b.meta.created_unix);
        let storage = db.storage().clone();
        let mut total = 0;
        'blocks: for b in due {
            let started = Instant::now();
            let mut read = 0u64;
            for rg in 0..b.row_group_count() {
                if !db.blocks.contains(&b.meta.tenant, &b.meta.block_id) {
                    continue 'blocks; // retired or quarantined meanwhile
                }
                match b.verify_row_group(&*storage, rg).await {
                    Ok(n) => read += n,
                    Err(e) => {
                        let transient = e.is_transient();
                        if let Err(e) = db.block_failed(&b, e) {
                            tracing::warn!(block = %b.prefix(), error = %e, "scrubbing a block failed; the next round tries again");
                        }
                        if transient {
                            return total + read;
                        }
                        continue 'blocks;
                    }
                }
                // Paced: this block's reads so far take at least their share of a second.
                let due_at = Duration::from_secs_f64(read as f64 / self.cfg.bytes_per_second as f64);
                if let Some(wait) = due_at.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
            total += read;
            db.metrics.scrubbed_bytes.fetch_add(read, Ordering::Relaxed);
            db.metrics.scrubbed_blocks.fetch_add(1, Ordering::Relaxed);
            self.verified.insert(b.meta.block_id.clone(), Instant::now());
        }
        let live: std::collections::HashSet<String> = db
            .tenants()
            .iter()
            .flat_map(|t| db.blocks(t))
            .map(|b| b.meta.block_id.clone())
            .collect();
        self.verified.retain(|id, _| live.contains(id));
        total
    }
}
