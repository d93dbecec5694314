//! The contract between the write path and the read path for spans that are acknowledged but
//! not yet in a block.
//!
//! The write path keeps such spans in memory as [`SpanColumns`]: one *active* part that grows,
//! and *frozen* parts ([`FrozenSpans`]) cut from it that are being written as blocks. The read
//! path sees them only through [`RecentSpans`], never through the write path's own types, so
//! that the same querier can later read recent spans held by another process.

use std::sync::Arc;

use async_trait::async_trait;
use weft_block::Block;
use weft_block::columns::SpanColumns;
use weft_block::meta::{KafkaRange, WalPos};
use weft_block::row::SpanRow;

/// Spans of several tenants frozen together (a head cut), being written as one block per
/// tenant. Immutable: read it without any lock.
#[derive(Debug)]
pub struct FrozenSpans {
    pub tenants: Vec<(Arc<str>, SpanColumns)>,
    /// Every WAL record before this position is in this part or an earlier one. Once a block
    /// of the tenant with this `wal_end` (or a later one) is listed, the part's spans are in
    /// blocks.
    pub wal_end: WalPos,
    /// For a part read from Kafka (cluster mode): the partition and offsets it holds. Once a
    /// block of the tenant covers the partition up to `end`, the part's spans of that tenant
    /// are in blocks. `wal_end` is then meaningless.
    pub kafka: Option<KafkaRange>,
    /// Approximate memory held.
    pub bytes: usize,
}

impl FrozenSpans {
    /// Whether `blocks` (one tenant's listed blocks) already hold this part's spans of that
    /// tenant: a block records a later WAL position (blocks are written in cut order, and
    /// compaction keeps the highest `wal_end` of its inputs), or, for a part from Kafka,
    /// covers its partition up to the part's end.
    pub fn covered_by(&self, blocks: &[Arc<Block>]) -> bool {
        match self.kafka {
            Some(r) => blocks.iter().any(|b| {
                b.meta
                    .kafka
                    .iter()
                    .any(|k| k.partition == r.partition && k.end >= r.end)
            }),
            None => blocks
                .iter()
                .filter_map(|b| b.meta.wal_end)
                .max()
                .is_some_and(|w| w >= self.wal_end),
        }
    }

    /// The columns of `tenant` in this part, if it has spans of that tenant.
    pub fn of(&self, tenant: &str) -> Option<&SpanColumns> {
        self.tenants.iter().find(|(t, _)| &**t == tenant).map(|(_, c)| c)
    }
}

/// One tenant's recent spans at one moment.
#[derive(Clone, Copy)]
pub struct RecentView<'a> {
    /// Spans still being added to (not frozen).
    pub active: Option<&'a SpanColumns>,
    /// Frozen parts not yet known to be in blocks, oldest first. Parts of every tenant are
    /// listed; use [`FrozenSpans::of`].
    pub frozen: &'a [Arc<FrozenSpans>],
}

impl RecentView<'_> {
    /// Whether some part holds spans of trace `id`.
    pub fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.active.is_some_and(|c| c.traces.contains_key(id))
            || self
                .frozen
                .iter()
                .any(|p| p.of(tenant).is_some_and(|c| c.traces.contains_key(id)))
    }
}

/// Read access to recent spans: acknowledged, not yet in a block.
///
/// **Contract.** Every span whose push was acknowledged before [`RecentSpans::catch_up`]
/// returned is visible either here or in a block listed in the block set from then on. A span
/// can be visible in both at once (a frozen part whose block was just written); readers
/// de-duplicate, or skip frozen parts whose `wal_end` a listed block covers.
#[async_trait]
pub trait RecentSpans: Send + Sync {
    /// Waits until every span acknowledged before the call is visible (bounded: after a few
    /// seconds it returns anyway). Cancel safe.
    async fn catch_up(&self);

    /// Calls `f` with a consistent view of `tenant`'s recent spans. Writers wait while `f`
    /// runs, so `f` should copy what it needs and return.
    fn view(&self, tenant: &str, f: &mut dyn FnMut(RecentView<'_>));

    /// Frozen parts, oldest first: immutable, so they may be read at leisure.
    fn frozen(&self) -> Vec<Arc<FrozenSpans>>;

    /// Whether any recent part holds spans of trace `id` of `tenant`.
    fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool;

    /// Copies out the recent spans of trace `id` of `tenant` (not de-duplicated). Async:
    /// recent spans held by other processes (live stores) are fetched, and a holder that does
    /// not answer is counted ([`RecentTrace::unanswered`]), never taken for "no spans".
    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> RecentTrace;

    /// Whether trace `id` may have recent spans in another process, which reads it whole
    /// (a query frontend's, for a querier reading blocks for it). By default, none does.
    fn held_elsewhere(&self, _id: &[u8; 16]) -> bool {
        false
    }
}

/// The recent spans of one trace ([`RecentSpans::trace`]).
#[derive(Debug, Default)]
pub struct RecentTrace {
    pub rows: Vec<SpanRow>,
    /// Holders of recent spans (live stores) that did not answer: the trace may lack the
    /// spans of their partitions, so an answer built on it is partial.
    pub unanswered: u64,
}

impl From<Vec<SpanRow>> for RecentTrace {
    /// Spans read whole (every holder answered).
    fn from(rows: Vec<SpanRow>) -> RecentTrace {
        RecentTrace { rows, unanswered: 0 }
    }
}

/// No recent spans: a querier that reads blocks only.
#[derive(Debug, Default)]
pub struct NoRecentSpans;

#[async_trait]
impl RecentSpans for NoRecentSpans {
    async fn catch_up(&self) {}

    fn view(&self, _tenant: &str, f: &mut dyn FnMut(RecentView<'_>)) {
        f(RecentView {
            active: None,
            frozen: &[],
        })
    }

    fn frozen(&self) -> Vec<Arc<FrozenSpans>> {
        Vec::new()
    }

    fn holds(&self, _tenant: &str, _id: &[u8; 16]) -> bool {
        false
    }

    async fn trace(&self, _tenant: &str, _id: &[u8; 16]) -> RecentTrace {
        RecentTrace::default()
    }
}

/// Frozen parts taken at one moment (a live store's answer to one query, planned over the
/// frontend's listing): no active part; never caught up, since nothing is added.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub parts: Vec<Arc<FrozenSpans>>,
}

#[async_trait]
impl RecentSpans for Snapshot {
    async fn catch_up(&self) {}

    fn view(&self, _tenant: &str, f: &mut dyn FnMut(RecentView<'_>)) {
        f(RecentView {
            active: None,
            frozen: &self.parts,
        })
    }

    fn frozen(&self) -> Vec<Arc<FrozenSpans>> {
        self.parts.clone()
    }

    fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.parts
            .iter()
            .any(|p| p.of(tenant).is_some_and(|c| c.traces.contains_key(id)))
    }

    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> RecentTrace {
        let mut out = Vec::new();
        for c in self.parts.iter().filter_map(|p| p.of(tenant)) {
            if let Some(&last) = c.traces.get(id) {
                c.copy_rows(c.trace_rows(last), &mut out);
            }
        }
        out.into()
    }
}
