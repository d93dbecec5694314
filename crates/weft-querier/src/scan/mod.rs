//! Scans a tenant's head and blocks and hands each trace that may match a query, whole, to a
//! [`TraceSink`].
//!
//! # Contract
//!
//! Every trace of the tenant that satisfies the sink's [`Prefilter`] and overlaps the window
//! is offered exactly once, with all its spans found in the head and the blocks at that moment,
//! de-duplicated and ordered by start time. A trace is *in the window* when one of its spans
//! overlaps `[start, end]`; a trace is only considered through a stored piece (its spans in
//! a head part, or in one row group of a block) that has a span in the window and a span
//! passing some leaf of the prefilter, so a trace none of whose pieces touches the window is
//! never offered, as in Tempo (which tests each block's part of a trace on its own). A trace
//! stored as one piece is offered whenever it overlaps the window and may match.
//!
//! # How
//!
//! 1. The head: the active columns in chunks of traces under the read lock (so the builder is
//!    never held up for long), and the cuts being flushed without a lock (they are frozen).
//! 2. The blocks (`scan/blocks.rs`): blocks outside the window are skipped by their meta, and row
//!    groups by their footer statistics (start times, durations) checked against the window
//!    and the prefilter ([`Prefilter::row_group_may_match`]); the rest are planned newest
//!    first, read on the query workers and taken in plan order, until the sink's start floor
//!    passes every unread one. Rows of a trace are contiguous in a block.
//! 3. A *piece* (a trace's spans in one place) is a candidate when some span passes some leaf
//!    of the prefilter. A candidate that exists nowhere else (no other head part holds it, no
//!    other block's index admits it, it does not cross a row-group boundary) is the whole
//!    trace and is offered at once; one that might be split is remembered and fetched whole
//!    with [`Querier::find_trace`] at the end. Splits only cost time, never correctness.
//! 4. Before a remembered trace is fetched, the leaves its pieces passed
//!    ([`Prefilter::leaves_passed`], or-ed over every piece the scan saw) must satisfy the
//!    prefilter. That is sound only when the scan saw every piece that could pass a leaf: the
//!    pieces outside the window are noted too, a trace that a row group or block skipped for
//!    the window may hold is fetched anyway, and a scan stopped early or by a damaged block
//!    fetches every remembered trace. Grafana's root-span queries
//!    (`{nestedSetParent<0} >> {…}`) make every split trace's root piece a candidate; most
//!    fail here without a read.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;

use weft_block::Block;
use weft_block::columns::SpanColumns;
use weft_block::hash::trace_id_hashes;
use weft_block::row::{SpanFields, SpanRow, dedup_spans};
use weft_db::recent::FrozenSpans;
use weft_db::span_bytes as row_bytes;
use weft_engine::graph::ServiceGraph;
use weft_engine::prefilter::Prefilter;
use weft_engine::search::{FloorOf, ScanProgress, TraceSink};

use crate::workers::{Flow, FoldSteps};
use crate::{Querier, QueryError};

mod blocks;
mod columns;
mod head;
use blocks::block_outside;

/// Traces copied out of the active head per read-lock hold.
const HEAD_CHUNK: usize = 256;

/// What a scan looked at, for the `metrics` block of search responses and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ScanStats {
    /// Bytes of block data read from storage plus bytes of head spans examined.
    pub inspected_bytes: u64,
    /// Trace pieces examined (a trace split over the head and two blocks counts three times).
    pub inspected_traces: u64,
    pub inspected_spans: u64,
    /// Blocks with at least one row group read (a block split between the parts of a query
    /// counts once, in one part: `counts_block`).
    pub inspected_blocks: u64,
    /// Blocks of the tenant.
    pub total_blocks: u64,
    /// Blocks skipped by their time range, or because no row group could match.
    pub skipped_blocks: u64,
    /// Row groups skipped by their statistics.
    pub skipped_row_groups: u64,
    /// Traces fetched whole because they were split across the head and blocks.
    pub split_traces: u64,
    /// Split traces not fetched: the leaves their pieces passed rule the query out.
    pub split_traces_ruled_out: u64,
    /// Split traces larger than `QuerierConfig::max_trace_read_bytes`, evaluated on their
    /// earliest spans only.
    pub truncated_traces: u64,
    /// Blocks left out because they are damaged ([`weft_db::quarantine`]): the result is partial.
    pub damaged_blocks: u64,
    /// Live stores that did not answer the recent part of the query (down, or their listing
    /// stayed stale): the spans of their partitions not yet in a block are missing, so the
    /// result is partial.
    pub unanswered_live_stores: u64,
}

impl ScanStats {
    /// What a progress report ([`ScanProgress`]) says of these figures, with `done` of
    /// `total` units completed.
    pub fn progress(&self, done: u64, total: u64) -> ScanProgress {
        ScanProgress {
            inspected_traces: self.inspected_traces,
            inspected_spans: self.inspected_spans,
            inspected_bytes: self.inspected_bytes,
            completed_jobs: done,
            total_jobs: total,
        }
    }

    /// Adds the figures of another part of the same scan; `total_blocks` is the listing's, the
    /// same for every part.
    pub fn add(&mut self, o: &ScanStats) {
        self.inspected_bytes += o.inspected_bytes;
        self.inspected_traces += o.inspected_traces;
        self.inspected_spans += o.inspected_spans;
        self.inspected_blocks += o.inspected_blocks;
        self.total_blocks = self.total_blocks.max(o.total_blocks);
        self.skipped_blocks += o.skipped_blocks;
        self.skipped_row_groups += o.skipped_row_groups;
        self.split_traces += o.split_traces;
        self.split_traces_ruled_out += o.split_traces_ruled_out;
        self.truncated_traces += o.truncated_traces;
        self.damaged_blocks += o.damaged_blocks;
        self.unanswered_live_stores += o.unanswered_live_stores;
    }
}

/// An inclusive time window in Unix nanoseconds.
pub type Window = (u64, u64);

/// The order in which a frontend splits a block of `row_groups` row groups between jobs:
/// newest trace starts first when the index bounds each row group's (`trace_starts`, in
/// time-sliced blocks), else row group 0 first. The job holding the first holds the block's
/// first share (`blocks_begun` in weft-server's plan) and counts the block ([`counts_block`]).
pub fn split_order(trace_starts: &[(u64, u64)], row_groups: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..row_groups).collect();
    if trace_starts.len() == row_groups {
        order.sort_by_key(|&rg| (std::cmp::Reverse(trace_starts[rg].1), rg));
    }
    order
}

/// Whether a part reading `only` of `b`'s row groups (`None`: all) counts the block in
/// `ScanStats::inspected_blocks` or `skipped_blocks`: a block split between the parts of one
/// query counts once, in the part holding the first row group of its [`split_order`], as inspected when that
/// part read any of it. Counted in every part, a block split between the jobs of 4 queriers
/// was reported as 30 of 23 blocks inspected.
fn counts_block(b: &Block, only: Option<&HashSet<usize>>) -> bool {
    only.is_none_or(|o| {
        let first = split_order(&b.index.trace_starts, b.row_group_count()).first().copied();
        first.is_some_and(|rg| o.contains(&rg))
    })
}

fn overlaps<F: SpanFields>(rows: impl IntoIterator<Item = F>, w: Option<Window>) -> bool {
    let Some((start, end)) = w else { return true };
    rows.into_iter()
        .any(|r| r.start_unix_nano() <= end && r.end_unix_nano() >= start)
}

/// A whole trace's spans as a sink is offered them (de-duplicated), when they may match the
/// prefilter, overlap the window, and start when the sink still `wants`.
fn offerable(
    mut rows: Vec<SpanRow>,
    prefilter: &Prefilter,
    window: Option<Window>,
    floor_of: FloorOf,
    wants: impl Fn(u64) -> bool,
) -> Option<Vec<SpanRow>> {
    if rows.is_empty() || !prefilter.trace_may_match(&rows) || !overlaps(&rows, window) {
        return None;
    }
    if !wants(floor_of.bound(rows.iter().map(|r| r.start_unix_nano))) {
        return None;
    }
    dedup_spans(&mut rows);
    Some(rows)
}

/// Whether any of `blocks` may hold trace `id`.
fn in_blocks(blocks: &[Arc<Block>], id: &[u8; 16]) -> bool {
    let h = trace_id_hashes(id);
    blocks.iter().any(|b| b.index.may_hold_hashed(id, h))
}

/// The traces of a head part `cols`, each with its last row, in the order a scan reads them,
/// and for each chunk of [`HEAD_CHUNK`] of them a bound on their pieces' bounds
/// ([`FloorOf::bound`] of their spans' starts) that also bounds every later chunk's. A search
/// keeps the traces that start last, so once its result is full, no chunk after one whose
/// bound it no longer wants is read: the head's first page stops early, as a block's does at
/// a row group's statistics (1M spans in the head, parallelism 2: 39–59 → 12–17 ms).
///
/// The head keeps its rows in arrival order, which clock skew, batching and late spans
/// separate from start order, so each trace gets a bound of its own:
/// - its earliest start ([`FloorOf::TraceStart`]) is at most the start of any of its spans,
///   so the start of its last row bounds it (SDKs export a span when it ends, so that is most
///   often the root, and the bound is the trace's start);
/// - its latest start ([`FloorOf::SpanStart`]) needs all its rows: one pass over the head's
///   rows, each reaching its trace's rows before it through `prev`.
///
/// The traces are then cut into tiers by bound, latest first: 256, 256, 512, 1,024 traces and
/// so on, doubling. A first page is usually filled by the first tier. Within a tier they are
/// read in arrival order, newest first: traces in bound order lie all over the head's rows,
/// and a scan that reads everything (a needle, a structural query) lost 6–30 % to the cache
/// misses when the whole head was read in that order; in tiers it reads as fast as in
/// arrival order. Each chunk's bound is its tier's first.
fn newest_first(cols: &SpanColumns, floor_of: FloorOf) -> (Vec<(u32, [u8; 16])>, Vec<u64>) {
    let start = &cols.start;
    let latest: Vec<u64> = match floor_of {
        FloorOf::TraceStart => Vec::new(),
        FloorOf::SpanStart => {
            let mut upto: Vec<u64> = Vec::with_capacity(start.len());
            for (r, &s) in start.iter().enumerate() {
                let before = cols.prev.get(r).and_then(|&p| upto.get(p as usize));
                upto.push(before.map_or(s, |&b| b.max(s)));
            }
            upto
        }
    };
    let bound = |last: u32| match floor_of {
        FloorOf::TraceStart => start.get(last as usize),
        FloorOf::SpanStart => latest.get(last as usize),
    };
    // One key per trace: its bound, then its last row.
    let mut order: Vec<u128> = cols
        .traces
        .values()
        .map(|&last| u128::from(bound(last).copied().unwrap_or(u64::MAX)) << 32 | u128::from(last))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    let mut bounds = Vec::with_capacity(order.len().div_ceil(HEAD_CHUNK));
    let (mut at, mut size) = (0, HEAD_CHUNK);
    while at < order.len() {
        let end = (at + size).min(order.len());
        let tier_bound = (order[at] >> 32) as u64;
        order[at..end].sort_unstable_by_key(|&k| std::cmp::Reverse(k as u32));
        bounds.extend(std::iter::repeat_n(tier_bound, (end - at).div_ceil(HEAD_CHUNK)));
        at = end;
        if at > HEAD_CHUNK {
            size *= 2;
        }
    }
    let ids = order
        .into_iter()
        .map(|k| {
            let last = k as u32;
            (last, cols.trace_id[last as usize])
        })
        .collect();
    (ids, bounds)
}

struct Scan<'a> {
    q: &'a Querier,
    tenant: &'a str,
    window: Option<Window>,
    blocks: Vec<Arc<Block>>,
    /// Which of `blocks` this part reads (every block is still asked whether it may hold a
    /// trace).
    read: Vec<bool>,
    /// Of each of `blocks` this part reads, the row groups it reads when not all
    /// ([`ScanPart::row_groups`]).
    row_groups: Vec<Option<HashSet<usize>>>,
    /// Traces already offered or deferred.
    handled: HashSet<[u8; 16]>,
    deferred: Vec<[u8; 16]>,
    /// The leaves passed by the pieces of traces that were deferred or may be (or-ed).
    passed: HashMap<[u8; 16], u64>,
    /// The bound of the pieces of each deferred trace ([`FloorOf::bound`]; for most sinks
    /// their earliest start: the trace starts no later, so once the sink no longer wants that
    /// start it does not want the trace).
    starts: HashMap<[u8; 16], u64>,
    /// What the sink's floor bounds.
    floor_of: FloorOf,
    /// Row groups (`Some`) or whole blocks (`None`) of `blocks` skipped for the window: a
    /// deferred trace they may hold is fetched whatever `passed` says.
    window_skipped: Vec<(usize, Option<usize>)>,
    /// False once a piece may have gone unseen for another reason (the sink was done, a block
    /// was damaged): then every deferred trace is fetched.
    saw_all: bool,
    stats: ScanStats,
}

/// The share of a tenant's stored spans that one part of a split scan reads: one job of a
/// query split across queriers (issue 47), or the whole scan ([`ScanPart::all`]).
///
/// The parts of one query must together read the head once and each block of one listing
/// once. Each part offers the traces it holds whole, and leaves the traces stored in several
/// places to [`Querier::finish_scan`], which reads each of them whole once for the query: so
/// the merged parts give what one scan gives (`tests/split_scan.rs`). The head part skips
/// cuts that blocks of its own listing cover; the parts' listings must agree (no block
/// written or compacted between them), which a caller checks with
/// [`PartOutcome::missing_blocks`] and the listing it planned from.
#[derive(Debug, Clone, Default)]
pub struct ScanPart {
    /// Read the head: recent spans not yet in a block.
    pub head: bool,
    /// Read these blocks of the listing, by ID; `None`: all of them.
    pub blocks: Option<HashSet<String>>,
    /// Of a block named here, read only these row groups (the others are another part's);
    /// a block not named here is read whole. Parts may split a block this way as they split
    /// the listing: a trace whose rows cross a row-group boundary is deferred by every part
    /// that meets a piece of it, as in one scan.
    pub row_groups: HashMap<String, HashSet<usize>>,
    /// Traces another part took already (the frontend's head part, when a block cut from its
    /// head since may hold them again): pieces of them are skipped, as one scan skips the
    /// traces its head part handled, though the leaves they pass still count.
    pub exclude: HashSet<[u8; 16]>,
}

impl ScanPart {
    /// The head and every block: one part that is the whole scan.
    pub fn all() -> ScanPart {
        ScanPart {
            head: true,
            blocks: None,
            ..ScanPart::default()
        }
    }

    /// The head alone.
    pub fn head_only() -> ScanPart {
        ScanPart {
            head: true,
            blocks: Some(HashSet::new()),
            ..ScanPart::default()
        }
    }

    /// These blocks of the listing, without the head.
    pub fn of_blocks(ids: impl IntoIterator<Item = String>) -> ScanPart {
        ScanPart {
            head: false,
            blocks: Some(ids.into_iter().collect()),
            ..ScanPart::default()
        }
    }

    fn reads(&self, b: &Block) -> bool {
        self.blocks.as_ref().is_none_or(|ids| ids.contains(&b.meta.block_id))
    }

    /// The row groups of `b` this part reads, when not all of them.
    fn row_groups_of(&self, b: &Block) -> Option<HashSet<usize>> {
        self.row_groups.get(&b.meta.block_id).cloned()
    }
}

/// What one part of a split scan leaves to [`Querier::finish_scan`].
#[derive(Debug, Default)]
pub struct PartOutcome {
    /// What the part read. Damaged blocks are those it met; the quarantined ones are counted
    /// once, by `finish_scan`.
    pub stats: ScanStats,
    /// Blocks of the tenant quarantined when the part started ([`weft_db::quarantine`]).
    quarantined: u64,
    /// Blocks the part was asked to read that are no longer listed (compacted away since the
    /// query was planned): it read none of them.
    pub missing_blocks: Vec<String>,
    /// Traces stored in several places, in the order found.
    deferred: Vec<[u8; 16]>,
    /// The leaves passed by the pieces of traces seen, or-ed.
    passed: HashMap<[u8; 16], u64>,
    /// The bound of the pieces of each deferred trace seen ([`FloorOf::bound`]: their
    /// earliest start, or their latest for a sink whose floor is of a span's start).
    starts: HashMap<[u8; 16], u64>,
    /// Blocks (and row groups) skipped for the window, by block ID.
    window_skipped: Vec<(String, Option<usize>)>,
    saw_all: bool,
    /// Every trace the part offered or deferred (kept where the part ran; not sent).
    handled: HashSet<[u8; 16]>,
}

/// A [`PartOutcome`] as a querier sends it back to the frontend that asked for the part (job
/// protocol v1, `spec/jobs.md`): trace IDs as 32 lowercase hex digits.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct WireOutcome {
    pub stats: ScanStats,
    pub quarantined: u64,
    pub missing_blocks: Vec<String>,
    pub deferred: Vec<String>,
    /// `[trace ID, leaves passed]`, in no particular order.
    pub passed: Vec<(String, u64)>,
    /// `[trace ID, earliest start of its pieces seen]` of the deferred traces (Unix ns).
    pub starts: Vec<(String, u64)>,
    pub window_skipped: Vec<(String, Option<usize>)>,
    pub saw_all: bool,
}

impl PartOutcome {
    /// The outcome of a part not read because every span of its blocks starts before the
    /// sink's start floor: as row groups a scan stops before, it holds no piece of a trace
    /// the sink wants (any trace with a piece there starts before the floor too), so the
    /// leaves of the pieces seen elsewhere still decide.
    /// `blocks`: how many blocks it would have read (counted as skipped).
    pub fn before_floor(blocks: u64) -> PartOutcome {
        PartOutcome {
            stats: ScanStats {
                skipped_blocks: blocks,
                ..ScanStats::default()
            },
            saw_all: true,
            ..PartOutcome::default()
        }
    }

    /// The traces the part offered or deferred. A part that reads the head first tells the
    /// parts that read blocks which traces it already took (a block cut from the head since
    /// holds them again), as one scan skips them ([`PartOutcome::forget`]).
    pub fn handled(&self) -> &HashSet<[u8; 16]> {
        &self.handled
    }

    /// Leaves out traces another part took already: they are neither finished again nor
    /// counted as deferred here. The leaves their pieces here passed still count, as one
    /// scan notes the leaves of a piece of a trace its head part took.
    pub fn forget(&mut self, ids: &HashSet<[u8; 16]>) {
        self.deferred.retain(|id| !ids.contains(id));
        self.starts.retain(|id, _| !ids.contains(id));
    }

    /// The outcome for the wire.
    pub fn to_wire(&self) -> WireOutcome {
        let hex = |id: &[u8; 16]| weft_core::hex(id);
        WireOutcome {
            stats: self.stats,
            quarantined: self.quarantined,
            missing_blocks: self.missing_blocks.clone(),
            deferred: self.deferred.iter().map(hex).collect(),
            passed: self.passed.iter().map(|(id, &p)| (hex(id), p)).collect(),
            starts: self.starts.iter().map(|(id, &t)| (hex(id), t)).collect(),
            window_skipped: self.window_skipped.clone(),
            saw_all: self.saw_all,
        }
    }

    /// An outcome from the wire; fails on a trace ID that is not 32 hex digits.
    pub fn from_wire(w: WireOutcome) -> Result<PartOutcome, String> {
        let id = |s: &str| -> Result<[u8; 16], String> {
            let mut out = [0u8; 16];
            hex::decode_to_slice(s, &mut out).map_err(|_| format!("invalid trace ID {s:?}: expected 32 hex digits"))?;
            Ok(out)
        };
        Ok(PartOutcome {
            stats: w.stats,
            quarantined: w.quarantined,
            missing_blocks: w.missing_blocks,
            deferred: w.deferred.iter().map(|s| id(s)).collect::<Result<_, _>>()?,
            passed: w
                .passed
                .iter()
                .map(|(s, p)| Ok((id(s)?, *p)))
                .collect::<Result<_, String>>()?,
            starts: w
                .starts
                .iter()
                .map(|(s, t)| Ok((id(s)?, *t)))
                .collect::<Result<_, String>>()?,
            window_skipped: w.window_skipped,
            saw_all: w.saw_all,
            handled: HashSet::new(),
        })
    }
}

impl Querier {
    /// Offers every trace of `tenant` that may match `sink`'s query and overlaps `window` to
    /// the sink, once, whole (see the [module docs](crate::scan)).
    pub async fn scan(
        &self,
        tenant: &str,
        window: Option<Window>,
        sink: &mut (dyn TraceSink + Send),
    ) -> Result<ScanStats, QueryError> {
        let part = self.scan_part(tenant, window, &ScanPart::all(), sink).await?;
        self.finish_scan(tenant, window, vec![part], sink).await
    }

    /// Scans one part of `tenant`'s stored spans (steps 1 to 3 of the [module
    /// docs](crate::scan)): offers `sink` the traces the part holds whole, and returns the
    /// traces it found stored elsewhere too, for [`Querier::finish_scan`].
    pub async fn scan_part(
        &self,
        tenant: &str,
        window: Option<Window>,
        part: &ScanPart,
        sink: &mut (dyn TraceSink + Send),
    ) -> Result<PartOutcome, QueryError> {
        self.recent.catch_up().await;
        let quarantined = self.db.quarantined_overlapping(tenant, window);
        let mut scan = Scan::new(self, tenant, window);
        scan.floor_of = sink.floor_of();
        if part.head {
            scan.head(sink).await?;
        }
        // What the head part took, for the outcome: the blocks step moves `handled` aside.
        let head_handled = scan.handled.clone();
        scan.handled.extend(part.exclude.iter().copied());
        // Blocks written while the head was scanned hold traces seen there; `handled` skips
        // them, and anything else they hold was in the head and is offered or deferred.
        scan.blocks = self.blocks(tenant);
        scan.stats.total_blocks = scan.blocks.len() as u64;
        scan.blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
        scan.read = scan.blocks.iter().map(|b| part.reads(b)).collect();
        scan.row_groups = scan.blocks.iter().map(|b| part.row_groups_of(b)).collect();
        let missing_blocks = part
            .blocks
            .iter()
            .flatten()
            .filter(|id| !scan.blocks.iter().any(|b| &b.meta.block_id == *id))
            .cloned()
            .collect();
        scan.blocks(sink, u64::from(part.head)).await?;
        scan.handled.extend(head_handled);
        let window_skipped = scan
            .window_skipped
            .iter()
            .map(|&(b, rg)| (scan.blocks[b].meta.block_id.clone(), rg))
            .collect();
        Ok(PartOutcome {
            stats: scan.stats,
            quarantined,
            missing_blocks,
            deferred: scan.deferred,
            passed: scan.passed,
            starts: scan.starts,
            window_skipped,
            saw_all: scan.saw_all,
            handled: scan.handled,
        })
    }

    /// Ends a scan split into `parts` (step 4 of the [module docs](crate::scan)): each trace
    /// some part deferred is read whole once, unless the leaves its pieces passed rule it
    /// out, and offered to `sink` (into which the parts' sinks were merged). Returns the
    /// parts' statistics added up.
    pub async fn finish_scan(
        &self,
        tenant: &str,
        window: Option<Window>,
        parts: Vec<PartOutcome>,
        sink: &mut (dyn TraceSink + Send),
    ) -> Result<ScanStats, QueryError> {
        let (ids, mut stats) = self.split_traces(tenant, window, parts, sink);
        stats.add(&self.read_whole(tenant, window, &ids, sink).await?);
        Ok(stats)
    }

    /// The first half of [`Querier::finish_scan`]: the traces some part deferred that must be
    /// read whole, in the order they were deferred, and the parts' statistics added up. The
    /// reads ([`Querier::read_whole`]) may be shared out, each into a fork of the sink merged
    /// back after (the frontend's trace jobs).
    pub fn split_traces(
        &self,
        tenant: &str,
        window: Option<Window>,
        parts: Vec<PartOutcome>,
        sink: &(dyn TraceSink + Send),
    ) -> (Vec<[u8; 16]>, ScanStats) {
        let mut scan = Scan::new(self, tenant, window);
        scan.floor_of = sink.floor_of();
        let quarantined = parts.iter().map(|p| p.quarantined).max().unwrap_or(0);
        scan.stats.damaged_blocks = quarantined;
        for p in parts {
            scan.stats.add(&p.stats);
            scan.saw_all &= p.saw_all && p.missing_blocks.is_empty();
            for id in p.deferred {
                if scan.handled.insert(id) {
                    scan.deferred.push(id);
                }
            }
            for (id, passed) in p.passed {
                scan.note(id, passed);
            }
            for (id, start) in p.starts {
                scan.started(id, start);
            }
            for (block, rg) in p.window_skipped {
                match scan.blocks.iter().position(|b| b.meta.block_id == block) {
                    Some(b) => scan.window_skipped.push((b, rg)),
                    // Compacted away since: what it held is elsewhere now, unseen.
                    None => scan.saw_all = false,
                }
            }
        }
        let deferred = std::mem::take(&mut scan.deferred);
        let mut fetch = Vec::with_capacity(deferred.len());
        for id in deferred {
            // Starts before what the sink keeps now (its pieces bound the trace's key).
            if scan.starts.get(&id).is_some_and(|&t| !sink.wants_start(t)) {
                scan.stats.split_traces_ruled_out += 1;
                continue;
            }
            if scan.ruled_out(&id, sink) {
                scan.stats.split_traces_ruled_out += 1;
            } else {
                fetch.push(id);
            }
        }
        scan.stats.split_traces += fetch.len() as u64;
        (fetch, scan.stats)
    }

    /// Reads traces `ids` of `tenant` whole (head and blocks, up to the read cap) and offers
    /// each to `sink` if it may match and overlaps `window`, in the order given. Returns what
    /// the reads cost.
    pub async fn read_whole(
        &self,
        tenant: &str,
        window: Option<Window>,
        ids: &[[u8; 16]],
        sink: &mut (dyn TraceSink + Send),
    ) -> Result<ScanStats, QueryError> {
        let mut scan = Scan::new(self, tenant, window);
        scan.floor_of = sink.floor_of();
        // Fetched side by side, offered in order.
        let cap = self.cfg.max_trace_read_bytes;
        let mut found_all = futures::stream::iter(ids.iter().copied())
            .map(|id: [u8; 16]| async move { self.find_trace_capped(tenant, &id, None, cap).await })
            .buffered(self.workers.parallelism());
        let mut ids = ids.iter();
        while let Some(found) = found_all.next().await {
            let (found, id) = (found?, ids.next().copied().unwrap_or_default());
            if found.truncated {
                scan.stats.truncated_traces += 1;
                tracing::warn!(tenant, trace_id = %weft_core::hex(&id), cap, "search evaluated a trace larger than the read cap on its first spans only");
            }
            scan.stats.inspected_bytes += found.rows.iter().map(row_bytes).sum::<u64>();
            scan.stats.damaged_blocks += found.damaged_blocks;
            scan.finish_trace(found.rows, sink);
        }
        Ok(scan.stats)
    }
}

impl<'a> Scan<'a> {
    /// A scan of the tenant's blocks as listed now, nothing seen yet.
    fn new(q: &'a Querier, tenant: &'a str, window: Option<Window>) -> Scan<'a> {
        Scan {
            q,
            tenant,
            window,
            blocks: q.blocks(tenant),
            read: Vec::new(),
            row_groups: Vec::new(),
            handled: HashSet::new(),
            deferred: Vec::new(),
            passed: HashMap::new(),
            starts: HashMap::new(),
            floor_of: FloorOf::TraceStart,
            window_skipped: Vec::new(),
            saw_all: true,
            stats: ScanStats::default(),
        }
    }

    /// Notes that chunks of a head part were left out by their bounds ([`newest_first`]).
    /// Their traces start too early for the sink. In Zipkin's order ([`FloorOf::SpanStart`])
    /// a trace whose spans there all start too early may still be wanted for a later piece
    /// elsewhere, and the leaves its pieces here passed were not noted: every deferred trace
    /// is then fetched rather than ruled out by what was noted.
    fn skipped_head_chunks(&mut self) {
        if self.floor_of == FloorOf::SpanStart {
            self.saw_all = false;
        }
    }

    /// Notes the bound of a piece of deferred trace `id` ([`FloorOf::bound`]).
    fn started(&mut self, id: [u8; 16], bound: u64) {
        let s = self.starts.entry(id).or_insert(bound);
        *s = self.floor_of.join(*s, bound);
    }

    /// Defers trace `id`, a piece of which passed `passed` leaves with bound `start`: it is
    /// stored elsewhere too, and read whole at the end.
    fn defer(&mut self, id: [u8; 16], passed: u64, start: u64) {
        self.note(id, passed);
        self.started(id, start);
        self.handled.insert(id);
        self.deferred.push(id);
    }

    /// Notes the leaves a piece of trace `id` passed.
    fn note(&mut self, id: [u8; 16], passed: u64) {
        *self.passed.entry(id).or_default() |= passed;
    }

    /// Whether deferred trace `id` cannot match: the leaves its seen pieces passed do not
    /// satisfy the prefilter, and no piece can have gone unseen (module docs, step 4).
    fn ruled_out(&self, id: &[u8; 16], sink: &(dyn TraceSink + Send)) -> bool {
        let pf = sink.prefilter();
        if !self.saw_all || pf.is_trivial() || pf.holds(self.passed.get(id).copied().unwrap_or(0)) {
            return false;
        }
        !self.window_skipped.iter().any(|&(b, rg)| {
            let candidates = self.blocks[b].index.candidates(id);
            rg.map_or(!candidates.is_empty(), |rg| candidates.contains(&rg))
        })
    }

    /// Offers a whole trace if it may match and overlaps the window.
    fn finish_trace(&mut self, rows: Vec<SpanRow>, sink: &mut (dyn TraceSink + Send)) {
        if let Some(rows) = offerable(rows, sink.prefilter(), self.window, self.floor_of, |s| {
            sink.wants_start(s)
        }) {
            sink.offer(&rows);
        }
    }

    /// Whether any block other than `except` may hold `id`.
    fn in_other_block(&self, id: &[u8; 16], except: Option<usize>) -> bool {
        let h = trace_id_hashes(id);
        self.blocks
            .iter()
            .enumerate()
            .any(|(i, b)| Some(i) != except && b.index.may_hold_hashed(id, h))
    }

    /// Takes a candidate piece: offers it as the whole trace, or defers it when `split` (other
    /// parts of the head may hold the trace, or it crosses a row group) or another block may
    /// hold the trace.
    fn take(&mut self, (rows, passed): (Vec<SpanRow>, u64), split: bool, sink: &mut (dyn TraceSink + Send)) {
        let id = rows[0].trace_id;
        if split || self.in_other_block(&id, None) {
            self.defer(id, passed, self.floor_of.bound(rows.iter().map(|r| r.start_unix_nano)));
            return;
        }
        self.handled.insert(id);
        self.finish_trace(rows, sink);
    }

    /// Offers or defers the head's traces: the active part's on the query's runners
    /// ([`head`]), chunk by chunk; the cuts' on the query's task, yielding after every
    /// [`HEAD_CHUNK`] traces. Either way a query whose client went away (or that ran past
    /// `--query-timeout`) stops within a chunk (a Zipkin search over a full head had been a
    /// second of CPU that nothing could stop).
    async fn head(&mut self, sink: &mut (dyn TraceSink + Send)) -> Result<(), QueryError> {
        let recent = self.q.recent.clone();
        let (tenant, floor_of) = (self.tenant, self.floor_of);
        // Looked up again in each view below: the active part may have been cut since.
        let (mut ids, mut bounds) = (Vec::new(), Vec::new());
        recent.view(tenant, &mut |v| {
            if let Some(cols) = v.active {
                (ids, bounds) = newest_first(cols, floor_of);
            }
        });
        let cuts = recent.frozen();
        // Active head: chunks of traces on the query's runners, a view each (so the builder
        // is never held up for long).
        self.active_head(ids, bounds, &cuts, sink).await?;
        // Cuts: frozen, read without holding the view, newest first.
        for (k, cut) in cuts.iter().enumerate().rev() {
            let Some(cols) = cut.of(tenant) else {
                continue;
            };
            let others_hold = |id: &[u8; 16]| {
                // The active part, and cuts made since the scan began (of spans that were
                // active then), as they are now.
                let mut active = false;
                recent.view(tenant, &mut |v| {
                    active = v.active.is_some_and(|c| c.traces.contains_key(id))
                        || v.frozen.iter().any(|c| {
                            !cuts.iter().any(|old| Arc::ptr_eq(old, c))
                                && c.of(tenant).is_some_and(|cc| cc.traces.contains_key(id))
                        });
                });
                active
                    || cuts
                        .iter()
                        .enumerate()
                        .any(|(j, c)| j != k && c.of(tenant).is_some_and(|cc| cc.traces.contains_key(id)))
            };
            let (ids, bounds) = newest_first(cols, self.floor_of);
            for (n, (last, id)) in ids.into_iter().enumerate() {
                if n % HEAD_CHUNK == 0 && !sink.wants_start(bounds[n / HEAD_CHUNK]) {
                    self.skipped_head_chunks();
                    break; // nothing from here on starts late enough
                }
                if let Some(piece) = self.head_piece(cols, last, sink) {
                    let split = others_hold(&id);
                    self.take(piece, split, sink);
                }
                if n % HEAD_CHUNK == HEAD_CHUNK - 1 {
                    tokio::task::yield_now().await;
                }
            }
        }
        Ok(())
    }

    /// Tests the spans of one trace in a head part (its last row `last`) in place, and copies
    /// them out, oldest first, only if they are a candidate the sink still wants: most head
    /// pieces fail the prefilter or start before what a full search result keeps, and copying
    /// every span out first cost about 0.4 µs each (docs/benchmarks/search.md, "Head search:
    /// spans tested in place"). With the leaves they pass.
    fn head_piece(
        &mut self,
        cols: &SpanColumns,
        last: u32,
        sink: &(dyn TraceSink + Send),
    ) -> Option<(Vec<SpanRow>, u64)> {
        let id = cols.trace_id[last as usize];
        let rows = || cols.trace_rows(last).map(|r| cols.at(r));
        self.stats.inspected_traces += 1;
        for r in cols.trace_rows(last) {
            self.stats.inspected_spans += 1;
            self.stats.inspected_bytes += cols.row_bytes(r);
        }
        let passed = sink.prefilter().leaves_passed(rows());
        if passed == 0 {
            return None;
        }
        if self.handled.contains(&id) || !overlaps(rows(), self.window) {
            self.note(id, passed);
            return None;
        }
        // The whole trace starts no later than this piece: if the sink no longer wants the
        // piece's start (its bound, [`FloorOf`]), it does not want the trace.
        let start = self.floor_of.bound(rows().map(|r| r.start_unix_nano()));
        if !sink.wants_start(start) {
            return None;
        }
        let mut out = Vec::new();
        cols.copy_rows(cols.trace_rows(last), &mut out);
        out.reverse();
        Some((out, passed))
    }
}

/// True when no span of row group `rg` of `b` starts inside `window` (by its statistics).
async fn row_group_outside(
    b: &Block,
    storage: &dyn weft_storage::Storage,
    rg: usize,
    window: Option<Window>,
) -> Result<bool, QueryError> {
    let Some((ws, we)) = window else {
        return Ok(false);
    };
    let s = b.row_group_stats(storage, rg).await?;
    Ok(s.start.is_some_and(|(lo, hi)| lo > we || hi < ws))
}

/// Most split traces one service-graph scan reads whole to find the parents of calls that
/// cross a split; calls of the others are reported as unresolved.
const GRAPH_MAX_RESOLVED_TRACES: usize = 1000;

impl Querier {
    /// Counts every trace of `tenant` in `window` into `g` (which must count every trace,
    /// [`ServiceGraph::counts_every_trace`]) from columns: the head's, then each block row
    /// group's graph columns (IDs, kind, status, times, service name), newest blocks first,
    /// until the graph's span budget is spent (the graph is then marked truncated if a row
    /// group of the window was left). Traces split between the head, row groups and
    /// blocks whose calls cross the split are then read whole (at most
    /// `GRAPH_MAX_RESOLVED_TRACES`).
    ///
    /// Each stored copy of a span counts once, as in [`Querier::scan_columns`]; client
    /// retries stored in two places before compaction merges them count twice.
    pub async fn scan_service_graph(
        &self,
        tenant: &str,
        window: Option<Window>,
        g: &mut ServiceGraph,
    ) -> Result<ScanStats, QueryError> {
        let (mut stats, blocks, cuts) = self.graph_head(tenant, window, g).await;
        let part = GraphPart {
            only: vec![None; blocks.len()],
            blocks,
            others: Vec::new(),
        };
        self.graph_blocks(tenant, window, part, cuts, g, &mut stats).await?;
        self.resolve_service_graph(tenant, g, &mut stats).await?;
        Ok(stats)
    }

    /// The head part of a service graph split across queriers: counts the recent spans into
    /// `g` and returns the tenant's blocks (newest first) listed in the same view, for the
    /// jobs ([`Querier::scan_service_graph_part`]). The frontend then resolves the calls kept
    /// aside ([`Querier::resolve_service_graph`]).
    pub async fn scan_service_graph_head(
        &self,
        tenant: &str,
        window: Option<Window>,
        g: &mut ServiceGraph,
    ) -> (ScanStats, Vec<Arc<Block>>) {
        let (stats, mut blocks, _) = self.graph_head(tenant, window, g).await;
        blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
        (stats, blocks)
    }

    /// A job's part of a service graph: counts the blocks `part` names (newest first; of a
    /// block it names row groups of, those row groups) into `g`. The recent spans are counted
    /// by [`Querier::scan_service_graph_head`], whatever `part.head` says. A call whose parent
    /// may be in another row group or block of the tenant, or in the recent spans here, is
    /// kept aside in `g` for the frontend to resolve, so the jobs' parts of a block add up to
    /// what one scan of it counts.
    pub async fn scan_service_graph_part(
        &self,
        tenant: &str,
        window: Option<Window>,
        part: &ScanPart,
        g: &mut ServiceGraph,
    ) -> Result<ScanStats, QueryError> {
        debug_assert!(g.counts_every_trace());
        let mut stats = ScanStats::default();
        let (mut blocks, others): (Vec<_>, Vec<_>) = self.db.blocks(tenant).into_iter().partition(|b| part.reads(b));
        blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
        let only: Vec<_> = blocks.iter().map(|b| part.row_groups_of(b)).collect();
        let cuts = self.recent.frozen();
        let part = GraphPart { blocks, only, others };
        self.graph_blocks(tenant, window, part, cuts, g, &mut stats).await?;
        stats.inspected_traces = g.inspected_traces;
        Ok(stats)
    }

    /// Reads whole the traces with calls `g` kept aside (at most `GRAPH_MAX_RESOLVED_TRACES`)
    /// and counts those calls; the rest are reported as unresolved.
    pub async fn resolve_service_graph(
        &self,
        tenant: &str,
        g: &mut ServiceGraph,
        stats: &mut ScanStats,
    ) -> Result<(), QueryError> {
        for id in g.pending_traces().into_iter().take(GRAPH_MAX_RESOLVED_TRACES) {
            let found = self
                .find_trace_capped(tenant, &id, None, self.cfg.max_trace_read_bytes)
                .await?;
            stats.damaged_blocks += found.damaged_blocks;
            stats.split_traces += 1;
            stats.inspected_bytes += found.rows.iter().map(row_bytes).sum::<u64>();
            g.resolve(&id, &found.rows);
        }
        g.give_up();
        stats.inspected_traces = g.inspected_traces;
        Ok(())
    }

    /// Counts the recent spans into `g`; returns what it read, the blocks listed in the same
    /// view (so each stored copy of a span counts once) and the recent parts it counted.
    async fn graph_head(
        &self,
        tenant: &str,
        window: Option<Window>,
        g: &mut ServiceGraph,
    ) -> (ScanStats, Vec<Arc<Block>>, Vec<Arc<FrozenSpans>>) {
        debug_assert!(g.counts_every_trace());
        self.recent.catch_up().await;
        let mut stats = ScanStats {
            damaged_blocks: self.db.quarantined_overlapping(tenant, window),
            ..ScanStats::default()
        };
        let in_blocks = |blocks: &[Arc<Block>], id: &[u8; 16], except: Option<usize>| {
            let h = trace_id_hashes(id);
            blocks
                .iter()
                .enumerate()
                .any(|(i, b)| Some(i) != except && b.index.may_hold_hashed(id, h))
        };
        let mut blocks: Vec<Arc<Block>> = Vec::new();
        let mut cuts: Vec<Arc<FrozenSpans>> = Vec::new();
        self.recent.view(tenant, &mut |v| {
            blocks = self.blocks(tenant);
            cuts = v.frozen.iter().filter(|c| !c.covered_by(&blocks)).cloned().collect();
            let parts: Vec<&SpanColumns> = v
                .active
                .into_iter()
                .chain(cuts.iter().filter_map(|c| c.of(tenant)))
                .collect();
            for (k, cols) in parts.iter().enumerate() {
                let order = cols.sorted_order();
                stats.inspected_spans += order.len() as u64;
                stats.inspected_bytes += order.len() as u64 * HEAD_GRAPH_ROW_BYTES;
                g.add_head_rows(cols, &order, |id| {
                    parts
                        .iter()
                        .enumerate()
                        .any(|(j, p)| j != k && p.traces.contains_key(id))
                        || in_blocks(&blocks, id, None)
                });
            }
        });
        stats.total_blocks = blocks.len() as u64;
        blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
        (stats, blocks, cuts)
    }
}

/// The blocks a service-graph scan counts ([`Querier::graph_blocks`]).
struct GraphPart {
    /// Newest first.
    blocks: Vec<Arc<Block>>,
    /// Per block of `blocks`: the only row groups counted, when not all.
    only: Vec<Option<HashSet<usize>>>,
    /// The tenant's other blocks: they only tell whether a trace is split.
    others: Vec<Arc<Block>>,
}

/// What the workers counting a service graph's row groups share, read only.
struct GraphShared {
    blocks: Vec<Arc<Block>>,
    /// The tenant's other blocks (a job's part reads some of them): a trace in one of
    /// them is split too.
    others: Vec<Arc<Block>>,
    /// The head's cuts the graph counted.
    cuts: Vec<Arc<FrozenSpans>>,
    recent: Arc<dyn weft_db::recent::RecentSpans>,
    tenant: String,
}

impl GraphShared {
    /// Whether trace `id` may have spans outside row group `rg` of block `bi`: at the row
    /// group's edge (`at_edge`) of a block of several, in another block, or in the head.
    fn elsewhere(&self, id: &[u8; 16], bi: usize, at_edge: bool) -> bool {
        if at_edge && self.blocks[bi].row_group_count() > 1 {
            return true;
        }
        let h = trace_id_hashes(id);
        if self
            .blocks
            .iter()
            .enumerate()
            .any(|(i, b)| i != bi && b.index.may_hold_hashed(id, h))
            || self.others.iter().any(|b| b.index.may_hold_hashed(id, h))
        {
            return true;
        }
        let mut active = false;
        self.recent.view(&self.tenant, &mut |v| {
            active = v.active.is_some_and(|c| c.traces.contains_key(id));
        });
        active
            || self.recent.held_elsewhere(id)
            || self
                .cuts
                .iter()
                .any(|c| c.of(&self.tenant).is_some_and(|cols| cols.traces.contains_key(id)))
    }
}

impl Querier {
    /// The blocks part of [`Querier::scan_service_graph`]: every row group in the window of
    /// the part's blocks (of a block whose `only` is set, those row groups),
    /// newest blocks first, counted into a fork of `g` on the query workers (up to
    /// `--query-parallelism` at once) and merged back in that order, until the span budget
    /// is spent, so the graph is the same whatever the timing.
    async fn graph_blocks(
        &self,
        tenant: &str,
        window: Option<Window>,
        GraphPart { blocks, only, others }: GraphPart,
        cuts: Vec<Arc<FrozenSpans>>,
        g: &mut ServiceGraph,
        stats: &mut ScanStats,
    ) -> Result<(), QueryError> {
        let storage = self.db.storage().clone();
        // The row groups in the window, in order; a block whose footer fails is damaged.
        let mut units: Vec<(usize, usize)> = Vec::new();
        let mut failed = vec![false; blocks.len()];
        let read_any = vec![false; blocks.len()];
        for (bi, b) in blocks.iter().enumerate() {
            if block_outside(b, window) {
                stats.skipped_blocks += u64::from(counts_block(b, only[bi].as_ref()));
                continue;
            }
            for rg in 0..b.row_group_count() {
                if only[bi].as_ref().is_some_and(|o| !o.contains(&rg)) {
                    continue; // another job's
                }
                match row_group_outside(b, &*storage, rg, window).await {
                    Ok(true) => stats.skipped_row_groups += 1,
                    Ok(false) => units.push((bi, rg)),
                    Err(QueryError::Block(e)) => {
                        failed[bi] = true;
                        self.db.block_failed(b, e)?;
                        stats.damaged_blocks += 1;
                        break;
                    }
                }
            }
        }
        let shared = Arc::new(GraphShared {
            blocks,
            others,
            cuts,
            recent: self.recent.clone(),
            tenant: tenant.to_owned(),
        });
        // A row group's count on one of the query's runners, into a fork of the graph, merged
        // back in plan order by the runners (`Workers::fold`).
        let placeholder = g.fork();
        let state = ScanFold::new(
            std::mem::replace(g, placeholder),
            std::mem::take(stats),
            failed,
            read_any,
        );
        let (fetch_shared, work_shared, take_shared) = (shared.clone(), shared.clone(), shared.clone());
        let db = self.db.clone();
        let folded = self
            .workers
            .fold(
                tenant,
                storage.reads_are_local(),
                units,
                state,
                FoldSteps {
                    start: |st: &mut ScanFold<ServiceGraph>, &(bi, rg): &(usize, usize)| ((bi, rg), st.sink.fork()),
                    fetch: move |((bi, rg), part): ((usize, usize), ServiceGraph)| {
                        let b = &fetch_shared.blocks[bi];
                        let data = tokio::runtime::Handle::current().block_on(b.fetch_graph_columns(&*storage, rg))?;
                        Ok((bi, data, part))
                    },
                    work: move |(bi, data, mut part): (usize, weft_block::RowGroupData, ServiceGraph)| {
                        let sh = &work_shared;
                        let bytes = data.bytes();
                        let cols = data.graph_columns()?;
                        let spans = cols.span_id.len() as u64;
                        part.add_block_rows(&cols, |id, at_edge| sh.elsewhere(id, bi, at_edge));
                        Ok((bytes, spans, part))
                    },
                    take: move |st: &mut ScanFold<ServiceGraph>, &(bi, _): &(usize, usize), result| {
                        if st.failed[bi] {
                            return Flow::Go;
                        }
                        if st.sink.budget_spent() {
                            // Row groups of the window are left unread.
                            st.sink.mark_truncated();
                            return Flow::Stop;
                        }
                        st.take_read(&db, &take_shared.blocks[bi], bi, result, ServiceGraph::merge)
                    },
                },
            )
            .await;
        let (full, after, failed, read_any) = folded?.finish()?;
        *g = full;
        *stats = after;
        for (bi, b) in shared.blocks.iter().enumerate() {
            if failed[bi] || block_outside(b, window) || !counts_block(b, only[bi].as_ref()) {
                continue;
            }
            if read_any[bi] {
                stats.inspected_blocks += 1;
            } else {
                stats.skipped_blocks += 1;
            }
        }
        Ok(())
    }
}

/// A scan's state while the runners fold its row groups' results ([`Workers::fold`]): the
/// sink, what was read, and the error that stopped the scan, if one did.
///
/// [`Workers::fold`]: crate::workers::Workers::fold
struct ScanFold<S> {
    sink: S,
    stats: ScanStats,
    failed: Vec<bool>,
    read_any: Vec<bool>,
    /// Storage unreachable, or a version this build cannot read: the query fails with it.
    stop: Option<weft_block::BlockError>,
    /// Results taken so far (for progress reports).
    taken: u64,
}

impl<S> ScanFold<S> {
    fn new(sink: S, stats: ScanStats, failed: Vec<bool>, read_any: Vec<bool>) -> ScanFold<S> {
        ScanFold {
            sink,
            stats,
            failed,
            read_any,
            stop: None,
            taken: 0,
        }
    }

    /// Takes a row group of block `bi` read into a fork (its bytes, spans and the fork, merged
    /// with `merge`), or its failure: the block is skipped from then on, and quarantined or
    /// counted by [`Db::block_failed`]; an error that must fail the query stops the scan.
    ///
    /// [`Db::block_failed`]: weft_db::Db::block_failed
    fn take_read(
        &mut self,
        db: &weft_db::Db,
        block: &Arc<Block>,
        bi: usize,
        result: Result<(u64, u64, S), QueryError>,
        merge: impl FnOnce(&mut S, S),
    ) -> Flow {
        match result {
            Ok((bytes, spans, part)) => {
                self.read_any[bi] = true;
                self.stats.inspected_bytes += bytes;
                self.stats.inspected_spans += spans;
                merge(&mut self.sink, part);
            }
            Err(QueryError::Block(e)) => {
                self.failed[bi] = true;
                if let Err(e) = db.block_failed(block, e) {
                    self.stop = Some(e);
                    return Flow::Stop;
                }
                self.stats.damaged_blocks += 1;
            }
        }
        Flow::Go
    }

    /// The sink, the stats, and which blocks failed and which were read; the error that
    /// stopped the scan, if one did.
    fn finish(self) -> Result<(S, ScanStats, Vec<bool>, Vec<bool>), QueryError> {
        match self.stop {
            Some(e) => Err(e.into()),
            None => Ok((self.sink, self.stats, self.failed, self.read_any)),
        }
    }
}

/// Bytes of head columns the service graph reads per span (IDs, kind, status, times and a
/// resource id), for `ScanStats::inspected_bytes`.
const HEAD_GRAPH_ROW_BYTES: u64 = 16 + 8 + 8 + 1 + 1 + 8 + 8 + 4;
