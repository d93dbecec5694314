//! The block set: every complete block of a storage, per tenant, as this process sees it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use weft_block::meta::{BlockMeta, WalPos};
use weft_block::{Block, BlockError};
use weft_storage::Storage;

use futures::StreamExt;

use crate::DbOptions;
use crate::quarantine::{self, QuarantinedBlock};

/// Blocks checked at once when the block set is loaded.
const OPEN_CHECKS: usize = 16;

/// Listings a load makes at most while blocks vanish under it ([`BlockSet::load`]).
const LOAD_ROUNDS: usize = 8;

/// Blocks in storage, per tenant.
#[derive(Debug, Default)]
pub struct BlockSet {
    tenants: RwLock<HashMap<String, Vec<Arc<Block>>>>,
}

/// What [`BlockSet::poll`] did.
#[derive(Debug, Default)]
pub struct Polled {
    pub added: usize,
    pub dropped: usize,
    /// Blocks listed for the first time that failed their check as damage: not added.
    pub damaged: Vec<(Arc<Block>, BlockError)>,
}

/// What a block folder holds, from a listing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Folder {
    meta: bool,
    /// The size of `data.parquet`, if listed.
    data: Option<u64>,
    index: bool,
    writing: bool,
    retired: bool,
}

impl Folder {
    /// A block: `meta.json` is there.
    pub(crate) fn complete(&self) -> bool {
        self.meta
    }

    /// Files weft left without `meta.json` on purpose: a write cut short (the writer's marker
    /// is there) or a retired block whose data is being deleted (the retirement marker).
    fn left_by_weft(&self) -> bool {
        self.writing || self.retired
    }

    /// What is wrong with the folder of a listed block whose data file should be `size`
    /// bytes, if anything (a folder being retired is not wrong).
    pub(crate) fn missing_files(&self, size: u64) -> Option<String> {
        if self.retired {
            return None;
        }
        if !self.meta {
            return Some("meta.json is gone".into());
        }
        match self.data {
            None => Some("data.parquet is gone".into()),
            Some(n) if n != size => Some(format!("data.parquet is {n} bytes; meta.json says {size}")),
            Some(_) if !self.index => Some("index.bin is gone".into()),
            Some(_) => None,
        }
    }

    /// Block files without `meta.json` and without a marker: the meta was lost (deleted or
    /// never copied), so the spans in these files are nowhere else. Damage.
    fn lost_meta(&self) -> bool {
        !self.meta && !self.left_by_weft() && (self.data.is_some() || self.index)
    }
}

/// Every block folder under `blocks/`, with what it holds.
pub(crate) async fn list_folders(storage: &dyn Storage) -> Result<BTreeMap<String, Folder>, BlockError> {
    let objects = storage.list("blocks/").await?;
    let mut folders: BTreeMap<String, Folder> = Default::default();
    for o in &objects {
        if let Some((dir, file)) = o.path.rsplit_once('/') {
            let f = folders.entry(dir.to_owned()).or_default();
            match file {
                "meta.json" => f.meta = true,
                "data.parquet" => f.data = Some(o.size),
                "index.bin" => f.index = true,
                weft_block::WRITING_MARKER => f.writing = true,
                weft_block::RETIRED_MARKER => f.retired = true,
                _ => {}
            }
        }
    }
    Ok(folders)
}

/// (tenant, block id) of a folder `blocks/<tenant>/<id>`.
pub(crate) fn split_prefix(prefix: &str) -> (&str, &str) {
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

    /// Whether block `id` of `tenant` is in the set.
    pub fn contains(&self, tenant: &str, id: &str) -> bool {
        self.tenants
            .read()
            .get(tenant)
            .is_some_and(|v| v.iter().any(|b| b.meta.block_id == id))
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
    /// loaded block replaces (`compacted_from`), and checks each one cheaply
    /// ([`Block::check`]: its data file's size against `meta.json`, its footer). A block that
    /// fails to open or check as damage ([`BlockError::is_damage`]) is not loaded, and neither
    /// is a folder whose `meta.json` was lost (block files without it or a writer's marker).
    /// A maintaining process ([`DbOptions`]) moves those to quarantine, and also finishes
    /// what a crash interrupted: replaced blocks are deleted, and so are folders a write or a
    /// retirement left without `meta.json`, once older than the grace. The damaged blocks are
    /// returned either way.
    ///
    /// Another process may compact while this one loads: a listed block whose `meta.json` is
    /// gone when it is opened was retired, and its replacement (written before the retirement)
    /// is in the next listing, so the load lists again until no block vanishes under it.
    pub async fn load(
        storage: &dyn Storage,
        opts: &DbOptions,
    ) -> Result<(BlockSet, Vec<QuarantinedBlock>), BlockError> {
        let set = BlockSet::default();
        let mut folders = list_folders(storage).await?;
        let mut loaded = Vec::new();
        let mut damaged: Vec<(String, BlockError, Option<Block>)> = Vec::new();
        let mut tried: HashSet<String> = HashSet::new();
        for round in 1.. {
            // Listed blocks with a file not found when opened.
            let mut vanished: Vec<(String, BlockError)> = Vec::new();
            for (prefix, f) in &folders {
                if !f.complete() || f.retired || !tried.insert(prefix.clone()) {
                    continue;
                }
                match Block::open(storage, prefix).await {
                    Ok(b) => loaded.push((b, f.data)),
                    Err(e @ BlockError::Storage(weft_storage::StorageError::NotFound(_))) => {
                        vanished.push((prefix.clone(), e));
                    }
                    Err(e) if e.is_damage(false) => damaged.push((prefix.clone(), e, None)),
                    // Unreachable storage: starting without the block would leave its spans out
                    // unannounced, so opening fails as a failed listing does.
                    Err(e) if e.is_transient() => return Err(e),
                    Err(e) => tracing::error!(block = %prefix, error = %e, "skipping unreadable block"),
                }
            }
            if vanished.is_empty() {
                break;
            }
            if round == LOAD_ROUNDS {
                return Err(BlockError::Storage(weft_storage::StorageError::Backend {
                    op: "load",
                    path: "blocks/".into(),
                    source: format!(
                        "blocks kept vanishing while they were opened ({LOAD_ROUNDS} listings): another process retires them faster than this one starts"
                    )
                    .into(),
                }));
            }
            folders = list_folders(storage).await?;
            // Still listed whole: a file of the block is lost (damage). Gone or retired: a
            // compaction in another process retired it between the listing and the open, and
            // the block that replaces it, written first, is in this listing; without it, its
            // spans would be missing from this start (and a block builder would build their
            // records again). Open what is new.
            let mut retired = false;
            for (prefix, e) in vanished {
                match folders.get(&prefix) {
                    Some(f) if f.complete() && !f.retired => damaged.push((prefix, e, None)),
                    _ => retired = true,
                }
            }
            if !retired {
                break;
            }
        }
        let replaced = replaced_ids(loaded.iter().map(|(b, _)| &b.meta));
        let is_replaced = |prefix: &str| {
            let (t, id) = split_prefix(prefix);
            replaced.contains(&(t.to_owned(), id.to_owned()))
        };
        // The checks read two ranges of each data file: run several at once, as a store far
        // away answers each in tens of milliseconds.
        let mut live = Vec::new();
        for (b, data_size) in loaded {
            if is_replaced(b.prefix()) {
                if opts.maintains {
                    tracing::info!(block = %b.prefix(), "deleting a block replaced by compaction before a restart");
                    match retire_replaced(storage, &b.meta.tenant, &b.meta.compacted_from).await {
                        Ok(()) => retire_now(storage, b.prefix()).await,
                        Err(e) => {
                            tracing::warn!(block = %b.prefix(), error = %e, "retiring what a replaced block replaced failed; the sweep retries")
                        }
                    }
                }
            } else {
                live.push((b, data_size));
            }
        }
        let checked: Vec<(Block, Result<(), BlockError>)> = futures::stream::iter(live)
            .map(|(b, data_size)| async move {
                let r = b.check(storage, data_size).await;
                (b, r)
            })
            .buffer_unordered(OPEN_CHECKS)
            .collect()
            .await;
        for (b, r) in checked {
            match r {
                Err(e) if e.is_damage(b.meta.checksums.is_some()) => {
                    let prefix = b.prefix().to_owned();
                    damaged.push((prefix, e, Some(b)));
                }
                Err(e) => {
                    // Unreachable storage or a footer that verifies and does not decode: the
                    // block is loaded, and the first query that reads it decides.
                    tracing::warn!(block = %b.prefix(), error = %e, "checking a block at open failed; loading it anyway");
                    set.add(Arc::new(b));
                }
                Ok(()) => set.add(Arc::new(b)),
            }
        }
        for prefix in lost_meta(&folders, &replaced, opts.incomplete_grace) {
            let e = lost_meta_error(&prefix);
            damaged.push((prefix, e, None));
        }
        let mut quarantined = Vec::new();
        for (prefix, e, opened) in damaged {
            if is_replaced(&prefix) {
                // Replaced anyway: its spans are in the block that replaced it.
                if opts.maintains {
                    retire_now(storage, &prefix).await;
                }
                continue;
            }
            // Described before the move, from the files where they are.
            let q = QuarantinedBlock::describe(storage, &prefix, e.to_string(), opened.map(Arc::new)).await;
            if opts.maintains {
                tracing::error!(block = %prefix, error = %e, "damaged block quarantined at start");
                if let Err(m) = quarantine::move_to_quarantine(storage, &prefix).await {
                    tracing::error!(block = %prefix, error = %m, "moving a damaged block to quarantine failed; it is skipped");
                }
            } else {
                tracing::error!(block = %prefix, error = %e, "damaged block skipped (the maintaining process quarantines it)");
            }
            quarantined.push(q);
        }
        if opts.maintains {
            delete_left_over(storage, &folders, &replaced, opts.incomplete_grace).await;
        }
        Ok((set, quarantined))
    }

    /// Brings the set in line with storage: opens complete blocks not in the set (except
    /// `skip` and blocks replaced by another listed block), and drops blocks whose `meta.json`
    /// is gone or that a listed block replaces. Returns (added, dropped).
    ///
    /// A block opened here gets the same check as at load ([`Block::check`]); those that fail
    /// it as damage are returned, not added, for the caller to quarantine.
    pub async fn poll(&self, storage: &dyn Storage, skip: &HashSet<String>) -> Result<Polled, BlockError> {
        let folders = list_folders(storage).await?;
        let listed: HashSet<(String, String)> = folders
            .iter()
            .filter(|(_, f)| f.complete() && !f.retired)
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
        let mut damaged = Vec::new();
        for (t, id) in &listed {
            if known.contains(&(t.clone(), id.clone())) || skip.contains(id) {
                continue;
            }
            let prefix = weft_block::block_prefix(t, id);
            match Block::open(storage, &prefix).await {
                Ok(b) => match b.check(storage, folders.get(&prefix).and_then(|f| f.data)).await {
                    Err(e) if e.is_damage(b.meta.checksums.is_some()) => damaged.push((Arc::new(b), e)),
                    Err(e) if e.is_transient() => {
                        tracing::warn!(tenant = %t, block = %id, error = %e, "checking a new block failed; will retry")
                    }
                    _ => opened.push(Arc::new(b)),
                },
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
        Ok(Polled {
            added,
            dropped,
            damaged,
        })
    }
}

/// (tenant, id) of every block that one of `metas` replaces.
fn replaced_ids<'a>(metas: impl Iterator<Item = &'a BlockMeta>) -> HashSet<(String, String)> {
    metas
        .flat_map(|m| m.compacted_from.iter().map(|id| (m.tenant.clone(), id.clone())))
        .collect()
}

/// Whether the block ID of folder `prefix` is older than `grace` (always, for a zero grace):
/// only then may maintenance act on a folder without `meta.json`, which another process may
/// still be writing.
fn old_enough(prefix: &str, grace: Duration) -> bool {
    let (_, id) = split_prefix(prefix);
    grace.is_zero() || id_age(id).is_some_and(|age| age >= grace)
}

/// The folders of `folders` whose `meta.json` was lost ([`Folder`]), older than `grace` and
/// not replaced by a block in `replaced`.
pub(crate) fn lost_meta(
    folders: &BTreeMap<String, Folder>,
    replaced: &HashSet<(String, String)>,
    grace: Duration,
) -> Vec<String> {
    folders
        .iter()
        .filter(|(p, f)| {
            let (t, id) = split_prefix(p);
            f.lost_meta() && !replaced.contains(&(t.to_owned(), id.to_owned())) && old_enough(p, grace)
        })
        .map(|(p, _)| p.clone())
        .collect()
}

/// The message a folder whose `meta.json` was lost is quarantined with.
pub(crate) fn lost_meta_error(prefix: &str) -> BlockError {
    BlockError::Damaged(format!(
        "{prefix}/meta.json is missing: the folder holds block files but no meta.json and no write or retirement marker"
    ))
}

/// Deletes what weft left without `meta.json` on purpose, once older than `grace`: folders of
/// writes cut short, of retirements cut short (with or without `meta.json`), and of blocks
/// in `replaced`. Removes write markers left beside a `meta.json`.
pub(crate) async fn delete_left_over(
    storage: &dyn Storage,
    folders: &BTreeMap<String, Folder>,
    replaced: &HashSet<(String, String)>,
    grace: Duration,
) {
    for (prefix, f) in folders {
        let (t, id) = split_prefix(prefix);
        let is_replaced = replaced.contains(&(t.to_owned(), id.to_owned()));
        if f.complete() && !f.retired {
            if is_replaced {
                // A retirement cut short: finished now, before the block that names it can be
                // retired in turn ([`retire_replaced`]).
                if let Err(e) = retire_replaced(storage, t, &[id.to_owned()]).await {
                    tracing::warn!(block = %prefix, error = %e, "retiring a replaced block failed; the next sweep retries");
                }
                continue;
            }
            if f.writing {
                let _ = storage
                    .delete(&format!("{prefix}/{}", weft_block::WRITING_MARKER))
                    .await;
            }
            continue;
        }
        if !(f.left_by_weft() || is_replaced) || !old_enough(prefix, grace) {
            continue;
        }
        tracing::info!(block = %prefix, "deleting an incomplete or retired block folder");
        delete_files(storage, prefix).await;
    }
}

/// Deletes every file of a block folder, ignoring missing ones: `meta.json` first (the block is
/// gone for readers), the markers last (so a deletion cut short leaves a folder that still
/// says weft left it).
pub(crate) async fn delete_files(storage: &dyn Storage, prefix: &str) {
    for f in [
        "meta.json",
        "data.parquet",
        "index.bin",
        weft_block::WRITING_MARKER,
        weft_block::RETIRED_MARKER,
    ] {
        if let Err(e) = storage.delete(&format!("{prefix}/{f}")).await
            && !matches!(e, weft_storage::StorageError::NotFound(_))
        {
            tracing::warn!(block = %prefix, error = %e, "deleting block file failed");
        }
    }
}

/// Retires the blocks of `tenant` named in `ids` (a block's `compacted_from`) that are still
/// in storage, each after the blocks it replaced in turn: the retirement marker and
/// `meta.json` now, the other files by [`delete_left_over`] once the folder is past the grace.
///
/// A retirement cut short (the store unreachable, a crash) leaves a replaced block with its
/// `meta.json`, harmless while the block that names it exists. Once that block is retired in
/// turn (compacted again, or by retention), nothing names the leftover any more and it would
/// be loaded as live: its spans twice. So a block is retired only after this succeeds for what
/// it replaced, and maintenance calls it for every replaced block it lists.
pub(crate) async fn retire_replaced(storage: &dyn Storage, tenant: &str, ids: &[String]) -> Result<(), BlockError> {
    for id in ids {
        let prefix = weft_block::block_prefix(tenant, id);
        let meta = match storage.get(&format!("{prefix}/meta.json")).await {
            Ok(m) => m,
            Err(weft_storage::StorageError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        // What it replaced goes first. An unreadable meta names nothing: the block is retired
        // alone.
        if let Ok(Ok(m)) = BlockMeta::from_json(&meta) {
            Box::pin(retire_replaced(storage, tenant, &m.compacted_from)).await?;
        }
        tracing::info!(block = %prefix, "retiring a replaced block whose retirement was cut short");
        mark_retired(storage, &prefix).await?;
    }
    Ok(())
}

/// Takes the block at `prefix` out of every listing: the retirement marker, then `meta.json`
/// deleted. Its other files stay for queries already reading them.
pub(crate) async fn mark_retired(storage: &dyn Storage, prefix: &str) -> Result<(), BlockError> {
    storage
        .put(&format!("{prefix}/{}", weft_block::RETIRED_MARKER), bytes::Bytes::new())
        .await?;
    match storage.delete(&format!("{prefix}/meta.json")).await {
        Ok(()) | Err(weft_storage::StorageError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Retires the block at `prefix` at once: the retirement marker, then every file
/// ([`delete_files`]).
pub(crate) async fn retire_now(storage: &dyn Storage, prefix: &str) {
    let _ = storage
        .put(&format!("{prefix}/{}", weft_block::RETIRED_MARKER), bytes::Bytes::new())
        .await;
    delete_files(storage, prefix).await;
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
