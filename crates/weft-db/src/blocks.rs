//! The block set: every complete block of a storage, per tenant, as this process sees it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use weft_block::meta::{BlockMeta, WalPos};
use weft_block::{Block, BlockError};
use weft_storage::Storage;

use crate::DbOptions;
use crate::quarantine;

/// Blocks in storage, per tenant.
#[derive(Debug, Default)]
pub struct BlockSet {
    tenants: RwLock<HashMap<String, Vec<Arc<Block>>>>,
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

/// Every block folder under `blocks/`, and whether it holds `meta.json` (is complete).
async fn list_folders(storage: &dyn Storage) -> Result<BTreeMap<String, bool>, BlockError> {
    let objects = storage.list("blocks/").await?;
    let mut folders: BTreeMap<String, bool> = Default::default();
    for o in &objects {
        if let Some((dir, file)) = o.path.rsplit_once('/') {
            *folders.entry(dir.to_owned()).or_default() |= file == "meta.json";
        }
    }
    Ok(folders)
}

/// (tenant, block id) of a folder `blocks/<tenant>/<id>`.
fn split_prefix(prefix: &str) -> (&str, &str) {
    let mut parts = prefix.trim_start_matches("blocks/").splitn(2, '/');
    (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
}

/// How long ago the block ID (a UUIDv7) was made; `None` if it is not a UUIDv7.
fn id_age(id: &str) -> Option<Duration> {
    let hex: String = id.chars().filter(|c| *c != '-').take(12).collect();
    if hex.len() != 12 || id.len() != 36 || id.as_bytes().get(14) != Some(&b'7') {
        return None;
    }
    let ms = u64::from_str_radix(&hex, 16).ok()?;
    let now = weft_core::now_ns() / 1_000_000;
    Some(Duration::from_millis(now.saturating_sub(ms)))
}

impl BlockSet {
    /// Adds a block, unless a block with its ID is already listed (a poll may open a block
    /// this process just wrote before the writer adds it).
    pub fn add(&self, b: Arc<Block>) {
        let mut t = self.tenants.write();
        let v = t.entry(b.meta.tenant.clone()).or_default();
        if !v.iter().any(|x| x.meta.block_id == b.meta.block_id) {
            v.push(b);
        }
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
        if let Some(b) = add
            && !v.iter().any(|x| x.meta.block_id == b.meta.block_id)
        {
            v.push(b);
        }
    }

    /// Per tenant, the highest `wal_end` of its blocks.
    pub fn wal_coverage(&self) -> HashMap<String, WalPos> {
        let mut covered: HashMap<String, WalPos> = HashMap::new();
        for bs in self.tenants.read().values() {
            for b in bs {
                if let Some(p) = b.meta.wal_end {
                    let e = covered.entry(b.meta.tenant.clone()).or_insert(p);
                    *e = (*e).max(p);
                }
            }
        }
        covered
    }

    /// Per tenant, the highest Kafka `end` offset of its blocks for `partition`
    /// ([`weft_block::meta::BlockMeta::kafka`]).
    pub fn kafka_coverage(&self, partition: i32) -> HashMap<String, i64> {
        let mut covered: HashMap<String, i64> = HashMap::new();
        for bs in self.tenants.read().values() {
            for b in bs {
                for r in b.meta.kafka.iter().filter(|r| r.partition == partition) {
                    let e = covered.entry(b.meta.tenant.clone()).or_insert(r.end);
                    *e = (*e).max(r.end);
                }
            }
        }
        covered
    }

    /// Loads every complete block (one with `meta.json`) from storage, leaving out blocks a
    /// loaded block replaces (`compacted_from`). A maintaining process ([`DbOptions`]) also
    /// finishes what a crash interrupted: replaced blocks are deleted, and so are folders
    /// without `meta.json` (a block write or delete cut short) older than the grace; and a
    /// block whose `meta.json` or `index.bin` is damaged is moved to quarantine. Damaged blocks
    /// are returned as (tenant, block id, why) either way.
    pub async fn load(storage: &dyn Storage, opts: &DbOptions) -> Result<(BlockSet, Vec<Quarantined>), BlockError> {
        let set = BlockSet::default();
        let folders = list_folders(storage).await?;
        let mut loaded = Vec::new();
        let mut quarantined = Vec::new();
        for (prefix, complete) in &folders {
            if !complete {
                continue;
            }
            match Block::open(storage, prefix).await {
                Ok(b) => loaded.push(b),
                Err(e) if e.is_damage(false) => {
                    let range = match storage.get(&format!("{prefix}/meta.json")).await {
                        Ok(m) => serde_json::from_slice::<BlockMeta>(&m)
                            .ok()
                            .map(|m| (m.min_start_unix_nano, m.max_end_unix_nano)),
                        Err(_) => None,
                    };
                    if opts.maintains {
                        tracing::error!(block = %prefix, error = %e, "damaged block quarantined at start");
                        if let Err(m) = quarantine::move_to_quarantine(storage, prefix).await {
                            tracing::error!(block = %prefix, error = %m, "moving a damaged block to quarantine failed; it is skipped");
                        }
                    } else {
                        tracing::error!(block = %prefix, error = %e, "damaged block skipped (the maintaining process quarantines it)");
                    }
                    let (t, id) = split_prefix(prefix);
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
        let replaced = replaced_ids(loaded.iter().map(|b| &b.meta));
        for b in loaded {
            if replaced.contains(&(b.meta.tenant.clone(), b.meta.block_id.clone())) {
                if opts.maintains {
                    tracing::info!(block = %b.prefix(), "deleting a block replaced by compaction before a restart");
                    let _ = storage.delete(&format!("{}/meta.json", b.prefix())).await;
                    delete_files(storage, b.prefix()).await;
                }
            } else {
                set.add(Arc::new(b));
            }
        }
        if opts.maintains {
            delete_incomplete(storage, &folders, opts.incomplete_grace).await;
        }
        Ok((set, quarantined))
    }

    /// Brings the set in line with storage: opens complete blocks not in the set (except
    /// `skip` and blocks replaced by another listed block), and drops blocks whose `meta.json`
    /// is gone or that a listed block replaces. Returns (added, dropped).
    pub async fn poll(&self, storage: &dyn Storage, skip: &HashSet<String>) -> Result<(usize, usize), BlockError> {
        let folders = list_folders(storage).await?;
        let listed: HashSet<(String, String)> = folders
            .iter()
            .filter(|(_, complete)| **complete)
            .map(|(p, _)| {
                let (t, id) = split_prefix(p);
                (t.to_owned(), id.to_owned())
            })
            .collect();
        let known: HashSet<(String, String)> = self
            .tenants
            .read()
            .values()
            .flatten()
            .map(|b| (b.meta.tenant.clone(), b.meta.block_id.clone()))
            .collect();
        let mut opened = Vec::new();
        for (t, id) in &listed {
            if known.contains(&(t.clone(), id.clone())) || skip.contains(id) {
                continue;
            }
            match Block::open(storage, &weft_block::block_prefix(t, id)).await {
                Ok(b) => opened.push(Arc::new(b)),
                // Retired between the listing and the open: it is simply gone.
                Err(BlockError::Storage(weft_storage::StorageError::NotFound(_))) => {}
                Err(e) => {
                    tracing::warn!(tenant = %t, block = %id, error = %e, "skipping a block that does not open; will retry")
                }
            }
        }
        let mut tenants = self.tenants.write();
        let replaced = replaced_ids(
            tenants
                .values()
                .flatten()
                .map(|b| &b.meta)
                .chain(opened.iter().map(|b| &b.meta)),
        );
        let gone = |b: &Block| {
            let key = (b.meta.tenant.clone(), b.meta.block_id.clone());
            !listed.contains(&key) || replaced.contains(&key)
        };
        let mut dropped = 0;
        for v in tenants.values_mut() {
            let before = v.len();
            v.retain(|b| !gone(b));
            dropped += before - v.len();
        }
        let mut added = 0;
        for b in opened {
            let v = tenants.entry(b.meta.tenant.clone()).or_default();
            // Added meanwhile by this process's own writer: already listed.
            if !gone(&b) && !v.iter().any(|x| x.meta.block_id == b.meta.block_id) {
                v.push(b);
                added += 1;
            }
        }
        Ok((added, dropped))
    }
}

/// (tenant, id) of every block that one of `metas` replaces.
fn replaced_ids<'a>(metas: impl Iterator<Item = &'a BlockMeta>) -> HashSet<(String, String)> {
    metas
        .flat_map(|m| m.compacted_from.iter().map(|id| (m.tenant.clone(), id.clone())))
        .collect()
}

/// Deletes the files of incomplete block folders whose ID is older than `grace`.
pub(crate) async fn delete_incomplete(storage: &dyn Storage, folders: &BTreeMap<String, bool>, grace: Duration) {
    for (prefix, complete) in folders {
        if *complete {
            continue;
        }
        let (_, id) = split_prefix(prefix);
        if !grace.is_zero() && id_age(id).is_none_or(|age| age < grace) {
            continue;
        }
        tracing::info!(block = %prefix, "deleting an incomplete block folder");
        delete_files(storage, prefix).await;
    }
}

/// Deletes incomplete block folders older than `grace` (a writer crashed mid-block). For the
/// maintaining process, between compactions.
pub(crate) async fn collect_garbage(storage: &dyn Storage, grace: Duration) -> Result<(), BlockError> {
    let folders = list_folders(storage).await?;
    delete_incomplete(storage, &folders, grace).await;
    Ok(())
}

/// Deletes a block folder's data files (not `meta.json`), ignoring missing ones.
pub(crate) async fn delete_files(storage: &dyn Storage, prefix: &str) {
    for f in ["data.parquet", "index.bin"] {
        if let Err(e) = storage.delete(&format!("{prefix}/{f}")).await
            && !matches!(e, weft_storage::StorageError::NotFound(_))
        {
            tracing::warn!(block = %prefix, error = %e, "deleting block file failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_carry_their_age() {
        let id = "019abc00-0000-7000-8000-000000000000";
        assert!(id_age(id).unwrap() > Duration::from_secs(3600));
        assert!(id_age("not-a-uuid").is_none());
        let fresh = format!("{:012x}", weft_core::now_ns() / 1_000_000);
        let fresh = format!("{}-{}-7000-8000-000000000000", &fresh[..8], &fresh[8..]);
        assert!(id_age(&fresh).unwrap() < Duration::from_secs(60));
    }
}
