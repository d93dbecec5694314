//! weft's read path.
//!
//! A [`Querier`] answers from two sources: the blocks of a [`Db`], and recent spans (not yet
//! in a block) through [`RecentSpans`]. In the all-in-one binary the recent spans are the
//! ingester's head in the same process; a querier on its own in cluster mode tails them from
//! Kafka ([`live`]), and otherwise reads blocks only ([`weft_db::recent::NoRecentSpans`]). Query APIs (Tempo's today) are adapters over one
//! `Querier`; they render its results in their own shapes.
//!
//! - [`Querier::find_trace`]: one trace, from the head and the blocks, merged;
//! - [`Querier::scan`]: whole traces that may match a query, fed to a search, metrics or tag
//!   consumer ([`scan`]);
//! - [`Querier::scan_columns`] and [`Querier::scan_service_graph`]: span-at-a-time metrics,
//!   the tag APIs without a filter, and the service graph from columns.

pub mod fair;
pub mod live;
pub mod scan;
pub mod workers;

use std::sync::Arc;

use weft_block::row::{SpanRow, dedup_spans};
use weft_block::{Block, BlockError};
use weft_db::recent::RecentSpans;
use weft_db::{Db, LARGE_TRACE_READ_BYTES, span_bytes};

/// Settings of the read path.
#[derive(Debug, Clone)]
pub struct QuerierConfig {
    /// Most bytes of one trace a query holds in memory ([`span_bytes`]); a larger trace is
    /// returned (and searched) truncated, and says so.
    pub max_trace_read_bytes: u64,
    /// Pieces of query work (a row group's decode and filter) run at once, over all queries
    /// ([`workers`]).
    pub parallelism: usize,
}

impl Default for QuerierConfig {
    fn default() -> Self {
        QuerierConfig {
            max_trace_read_bytes: 32 << 20,
            parallelism: workers::cores(),
        }
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Block(#[from] BlockError),
}

impl QueryError {
    /// Whether the same query may succeed later: storage could not be reached
    /// ([`BlockError::is_transient`]). APIs answer 503 with `Retry-After`.
    pub fn is_transient(&self) -> bool {
        match self {
            QueryError::Block(e) => e.is_transient(),
        }
    }
}

/// A trace as read by [`Querier::find_trace_capped`].
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
    /// Live stores that did not answer for the trace's recent spans: spans may be missing
    /// (a trace not found may still exist), and the answer should say it is partial.
    pub unanswered_live_stores: u64,
    /// Held while a large trace is in memory ([`weft_db::LARGE_TRACE_READ_BYTES`]); keep it
    /// until the trace is no longer needed (e.g. its response is written).
    pub large_read: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl FoundTrace {
    /// What the read left out, as a scan says it: damaged blocks and live stores that did
    /// not answer (the other figures are 0).
    pub fn stats(&self) -> scan::ScanStats {
        scan::ScanStats {
            damaged_blocks: self.damaged_blocks,
            unanswered_live_stores: self.unanswered_live_stores,
            ..Default::default()
        }
    }
}

/// Recent spans, plus traces held elsewhere that count as held here ([`Querier::also_held`]).
struct AlsoHeld {
    inner: Arc<dyn RecentSpans>,
    elsewhere: Vec<weft_block::index::Bloom>,
}

#[async_trait::async_trait]
impl RecentSpans for AlsoHeld {
    async fn catch_up(&self) {
        self.inner.catch_up().await
    }

    fn view(&self, tenant: &str, f: &mut dyn FnMut(weft_db::recent::RecentView<'_>)) {
        self.inner.view(tenant, f)
    }

    fn frozen(&self) -> Vec<Arc<weft_db::recent::FrozenSpans>> {
        self.inner.frozen()
    }

    fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.held_elsewhere(id) || self.inner.holds(tenant, id)
    }

    fn held_elsewhere(&self, id: &[u8; 16]) -> bool {
        self.elsewhere.iter().any(|f| f.may_contain(id))
    }

    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> weft_db::recent::RecentTrace {
        self.inner.trace(tenant, id).await
    }
}

/// The read path over one block database and one source of recent spans. A clone shares
/// the blocks, the recent spans and the workers.
#[derive(Clone)]
pub struct Querier {
    db: Arc<Db>,
    recent: Arc<dyn RecentSpans>,
    cfg: QuerierConfig,
    workers: workers::Workers,
    /// The blocks this querier reads, by ID, when pinned to a listing ([`Querier::pinned`]).
    listing: Option<Arc<std::collections::HashSet<String>>>,
}

impl Querier {
    pub fn new(db: Arc<Db>, recent: Arc<dyn RecentSpans>, cfg: QuerierConfig) -> Querier {
        Querier {
            db,
            recent,
            workers: workers::Workers::new(cfg.parallelism),
            cfg,
            listing: None,
        }
    }

    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    pub fn config(&self) -> &QuerierConfig {
        &self.cfg
    }

    /// The blocks of `tenant` now (of the listing, when pinned to one).
    pub fn blocks(&self, tenant: &str) -> Vec<Arc<Block>> {
        let mut blocks = self.db.blocks(tenant);
        if let Some(l) = &self.listing {
            blocks.retain(|b| l.contains(&b.meta.block_id));
        }
        blocks
    }

    /// This querier, with `recent` as its recent spans. Shares the blocks and the workers.
    pub fn with_recent(&self, recent: Arc<dyn RecentSpans>) -> Querier {
        Querier { recent, ..self.clone() }
    }

    /// This querier, seeing only the blocks of `listing` (IDs; another process's listing,
    /// which a live store answers the recent part of a query against): a recent part such a
    /// block covers is left to it, and any other block is not read or consulted.
    pub fn pinned(&self, listing: impl IntoIterator<Item = String>) -> Querier {
        Querier {
            listing: Some(Arc::new(listing.into_iter().collect())),
            ..self.clone()
        }
    }

    /// Whether this querier's recent spans (not yet in a block) hold some of trace `id`.
    pub fn recent_holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.recent.holds(tenant, id)
    }

    /// A filter of the trace IDs this querier's recent spans of `tenant` hold (`None`: it
    /// holds none), for another querier reading blocks for it ([`Querier::also_held`]).
    pub fn recent_trace_filter(&self, tenant: &str) -> Option<weft_block::index::Bloom> {
        let ids = self.recent_trace_ids(tenant);
        (!ids.is_empty()).then(|| weft_block::index::Bloom::of_keys(&ids))
    }

    /// The trace IDs this querier's recent spans of `tenant` hold, each once.
    pub fn recent_trace_ids(&self, tenant: &str) -> Vec<[u8; 16]> {
        let mut ids: Vec<[u8; 16]> = Vec::new();
        self.recent.view(tenant, &mut |v| {
            for c in v.active.into_iter().chain(v.frozen.iter().filter_map(|p| p.of(tenant))) {
                ids.extend(c.traces.keys());
            }
        });
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The recent spans of trace `id` of `tenant` (not de-duplicated).
    pub async fn recent_trace(&self, tenant: &str, id: &[u8; 16]) -> weft_db::recent::RecentTrace {
        self.recent.trace(tenant, id).await
    }

    /// This querier, reading as if the traces `elsewhere` may hold (another querier's
    /// recent spans, [`Querier::recent_trace_filter`]) were held in its recent spans too: a
    /// piece of such a trace in a block is split, so it is read whole where those recent
    /// spans are, never taken for the whole trace here. Shares the blocks and the workers.
    pub fn also_held(&self, elsewhere: Vec<weft_block::index::Bloom>) -> Querier {
        self.with_recent(Arc::new(AlsoHeld {
            inner: self.recent.clone(),
            elsewhere,
        }))
    }

    /// Returns the spans of a trace from the recent spans and the blocks, de-duplicated and
    /// ordered by start time. `range` (Unix seconds, inclusive) restricts which blocks are
    /// read.
    pub async fn find_trace(
        &self,
        tenant: &str,
        id: &[u8; 16],
        range: Option<(u64, u64)>,
    ) -> Result<Vec<SpanRow>, QueryError> {
        Ok(self.find_trace_capped(tenant, id, range, u64::MAX).await?.rows)
    }

    /// Like [`Querier::find_trace`], but stops reading once the spans found hold more than
    /// `max_bytes` (as [`span_bytes`] counts them), so a huge trace costs bounded memory. The
    /// blocks are read oldest first, then the recent spans; `truncated` says spans were left
    /// out.
    pub async fn find_trace_capped(
        &self,
        tenant: &str,
        id: &[u8; 16],
        range: Option<(u64, u64)>,
        max_bytes: u64,
    ) -> Result<FoundTrace, QueryError> {
        let parallel = self.workers.parallelism();
        self.find_trace_reading(tenant, id, range, max_bytes, |blocks| async move {
            Ok(self.db.read_trace(id, &blocks, max_bytes, parallel).await?)
        })
        .await
    }

    /// [`Querier::find_trace_capped`], with the blocks that may hold the trace (oldest first,
    /// [`Db::trace_candidates`]) read by `read`: here ([`Db::read_trace`]), or shared out over
    /// other queriers by a frontend. `read` keeps the blocks' order in the rows it returns,
    /// and reads until they hold more than `max_bytes`.
    pub async fn find_trace_reading<F, Fut>(
        &self,
        tenant: &str,
        id: &[u8; 16],
        range: Option<(u64, u64)>,
        max_bytes: u64,
        read: F,
    ) -> Result<FoundTrace, QueryError>
    where
        F: FnOnce(Vec<Arc<Block>>) -> Fut,
        Fut: std::future::Future<Output = Result<weft_db::FoundTrace, QueryError>>,
    {
        self.recent.catch_up().await;
        // The recent spans are copied before the blocks are read. A cut whose block is written
        // and whose head part is dropped while the blocks are read is then found in the copy
        // (and maybe in a block too: duplicates are dropped below). Read the other way round,
        // its spans were in neither for that moment, and a trace read right after a restart
        // under load missed hundreds of acknowledged spans. The copy is bounded by the head's
        // own size limit, and queries by `--max-concurrent-queries`.
        let recent_bytes = self.recent_trace_bytes(tenant, id);
        let weft_db::recent::RecentTrace { rows: head, unanswered } = self.recent.trace(tenant, id).await;
        let mut found = read(self.db.trace_candidates(tenant, id, range)).await?;
        found.damaged_blocks += self.db.quarantined_holding(tenant, id, range);
        let (mut rows, mut bytes, mut truncated) = (found.rows, found.bytes, found.truncated);
        let mut large_read = found.large_read;
        if bytes <= max_bytes {
            // A large copy holds a permit, as a large read from blocks does, so few are in
            // memory at once.
            if large_read.is_none() && bytes + recent_bytes > LARGE_TRACE_READ_BYTES {
                large_read = Some(self.db.large_read_permit().await);
            }
            bytes += head.iter().map(span_bytes).sum::<u64>();
            if rows.is_empty() {
                rows = head;
            } else {
                rows.extend(head);
            }
        } else if !head.is_empty() {
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
        Ok(FoundTrace {
            rows,
            truncated,
            blocks_read: found.blocks_read,
            damaged_blocks: found.damaged_blocks,
            unanswered_live_stores: unanswered,
            large_read,
        })
    }

    /// What copying out the recent spans of trace `id` would hold ([`span_bytes`]).
    fn recent_trace_bytes(&self, tenant: &str, id: &[u8; 16]) -> u64 {
        let mut n = 0;
        self.recent.view(tenant, &mut |v| {
            for c in v.active.into_iter().chain(v.frozen.iter().filter_map(|p| p.of(tenant))) {
                if let Some(&last) = c.traces.get(id) {
                    n += c.trace_rows(last).map(|r| c.row_bytes(r)).sum::<u64>();
                }
            }
        });
        n
    }
}
