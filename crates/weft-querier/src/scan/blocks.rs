//! The blocks part of a search scan ([`super`], step 2), row group by row group on the query
//! workers ([`crate::workers`]).
//!
//! The scan first plans: every row group of every block in the window that the footer
//! statistics and the prefilter do not rule out, ordered by the latest trace start it holds
//! (the index's, in time-sliced blocks, else its latest span start), newest first. Up to
//! `--query-parallelism` of them are then fetched and read at once: a worker decodes the
//! columns the prefilter needs, tests each trace's piece, and assembles the spans of the
//! pieces that are whole traces ([`read_pieces`]). What depends on the rest of
//! the scan (traces already handled, the sink's result so far) is decided here, as each row
//! group's pieces are taken in plan order, so the answer is the same whatever the timing.
//!
//! **Newest first, and early.** A trace starts no later than any of its spans, so once the
//! sink keeps only traces starting at or after some time ([`TraceSink::start_floor`], a
//! search with a full `limit`), a row group whose latest trace starts before it holds nothing
//! the search wants, and neither does any row group after it in the plan: the scan stops. In
//! a time-sliced block (format 3) the newest traces are in one row group, so a search whose
//! matches are common reads a row group or two per block that holds new traces.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weft_block::hash::trace_id_hashes;
use weft_block::row::{SpanFields, SpanRow};
use weft_block::{Block, Needs, RowGroupData};
use weft_db::recent::RecentSpans;
use weft_engine::prefilter::Prefilter;
use weft_engine::search::{FloorOf, TracePart, TraceSink};

use super::{Scan, Window, counts_block, offerable, overlaps};
use crate::QueryError;

/// One row group to read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    block: usize,
    rg: usize,
    /// The latest bound ([`FloorOf::bound`]) of a piece in it: its latest span start
    /// (statistics), or, for a floor of the trace's start in a time-sliced block, the
    /// index's bound of its traces' starts; `u64::MAX` when neither is known.
    newest: u64,
}

/// What a passing piece (a trace's spans in one row group) asks of the scan.
enum Piece {
    /// The trace may continue elsewhere and the piece is outside the window: its leaves count
    /// if the trace is fetched whole.
    Note,
    /// The trace may continue elsewhere: fetch it whole at the end.
    Defer,
    /// The whole trace, in the window, passing the prefilter: offer it.
    Offer(Vec<SpanRow>),
    /// The whole trace, already offered to the row group's fork of the sink.
    Offered,
    /// Nothing, unless the trace was already handled (then its leaves count).
    Quiet,
}

struct PieceOut {
    id: [u8; 16],
    passed: u64,
    /// The piece's bound ([`FloorOf::bound`] of its spans' starts).
    start: u64,
    in_window: bool,
    piece: Piece,
}

/// A row group's pieces, and what reading it cost.
#[derive(Default)]
struct RowGroupOut {
    bytes: u64,
    traces: u64,
    spans: u64,
    pieces: Vec<PieceOut>,
    /// The sink's fork, offered the row group's whole traces ([`Piece::Offered`]).
    part: Option<Box<dyn TracePart>>,
}

/// What the workers reading a scan's row groups share, read only.
struct Shared {
    blocks: Vec<Arc<Block>>,
    prefilter: Prefilter,
    needs: Needs,
    window: Option<Window>,
    recent: Arc<dyn RecentSpans>,
    tenant: String,
    floor_of: FloorOf,
    /// Traces the head part of the scan handled (moved out of `Scan::handled`, which then
    /// holds only those the blocks part handles): a block written since may hold them.
    head_handled: HashSet<[u8; 16]>,
}

impl Scan<'_> {
    /// Reads the blocks (newest row groups first) into `sink`. `head_units`: 1 when this part
    /// read the head before, which its progress reports count as one unit done.
    pub(super) async fn blocks(
        &mut self,
        sink: &mut (dyn TraceSink + Send),
        head_units: u64,
    ) -> Result<(), QueryError> {
        let mut failed = vec![false; self.blocks.len()];
        let mut read_any = vec![false; self.blocks.len()];
        let prefilter = sink.prefilter().clone();
        let units = self.plan(&prefilter, &mut failed).await?;
        // Progress is told only by a part that reads blocks (a head-only part is one job of a
        // frontend, which tells its own).
        let tells = self.read.iter().any(|&r| r);
        let total = head_units + units.len() as u64;
        let tell = |scan: &Scan<'_>, sink: &mut (dyn TraceSink + Send), done: u64| {
            if tells {
                sink.progress(scan.stats.progress(done, total));
            }
        };
        tell(self, sink, head_units);
        let shared = Arc::new(Shared {
            blocks: self.blocks.clone(),
            needs: prefilter.needs(),
            prefilter,
            window: self.window,
            recent: self.q.recent.clone(),
            tenant: self.tenant.to_owned(),
            floor_of: self.floor_of,
            head_handled: std::mem::take(&mut self.handled),
        });
        // The sink's floor as the workers see it (0: none yet). It only rises, so a worker that
        // reads a stale one does work the scan then drops, never less.
        let floor = Arc::new(AtomicU64::new(sink.start_floor().unwrap_or(0)));
        let storage = self.q.db.storage().clone();
        let local = storage.reads_are_local();
        // A row group's read on one of the query's runners, with a fork of the sink to offer
        // its whole traces to when the sink forks (taken when the read is queued, so it starts
        // from the sink's floor then).
        let (seen, late) = (floor.clone(), floor.clone());
        let (fetch_shared, head) = (shared.clone(), shared.clone());
        let mut results = self.q.workers.pipeline(
            self.tenant,
            local,
            move |(u, part): (Unit, Option<Box<dyn TracePart>>)| {
                if u.newest < seen.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                let b = fetch_shared.blocks[u.block].clone();
                let data = tokio::runtime::Handle::current().block_on(b.fetch_row_group(&*storage, u.rg))?;
                Ok(Some((u, data, part)))
            },
            move |fetched| match fetched {
                None => Ok(None),
                // The floor may have risen while the row group was queued or fetched: one the
                // scan will stop before is not decoded (a first page's other reads in flight).
                Some((u, _, _)) if u.newest < late.load(Ordering::Relaxed) => Ok(None),
                Some((u, data, part)) => read_pieces(&shared, u, &data, &late, part),
            },
        );
        // Reads queued, in plan order. The first row group is read alone: on a search with a
        // limit it usually fills the first page, and the floor it sets then rules out the rest
        // (read beside it, they doubled a first page's CPU at parallelism 2 and made it
        // slower than at 1); on a scan that reads everything it costs one row group's time of
        // many. Then up to `depth`, one more as each is taken. From local storage, one per
        // runner: a read queued beyond them would be started by the runner that finishes the
        // one before it, with the floor from before that one was taken.
        let depth = if local {
            self.q.workers.parallelism()
        } else {
            self.q.workers.lookahead()
        };
        let mut started = 0;
        if let Some(&first) = units.first() {
            results.push((first, sink.fork()));
            started = 1;
        }
        let mut at = 0;
        // Every row group not queued is one the floor ruled out when it would have been: the
        // loop stops at it.
        while at < units.len() {
            let u = units[at];
            // Decided before the read is awaited: at parallelism 2 the next row group is
            // usually being read already when the one before it fills a first page, and
            // awaiting it made the first page wait for a read it then dropped (17 -> 55 ms).
            if sink.done() {
                self.saw_all = false;
                break;
            }
            if !sink.wants_start(u.newest) {
                // Planned newest first: no row group left holds a trace the sink wants.
                self.stats.skipped_row_groups += (units.len() - at) as u64;
                break;
            }
            let Some(result) = results.next().await else { break };
            at += 1;
            match result {
                _ if failed[u.block] => {}
                Ok(Some(out)) => {
                    read_any[u.block] = true;
                    self.take_row_group(out, &head.head_handled, sink);
                    floor.store(sink.start_floor().unwrap_or(0), Ordering::Relaxed);
                }
                Ok(None) => self.stats.skipped_row_groups += 1,
                Err(QueryError::Block(e)) => {
                    failed[u.block] = true;
                    self.q.db.block_failed(&self.blocks[u.block], e)?;
                    self.stats.damaged_blocks += 1;
                    self.saw_all = false;
                }
            }
            tell(self, sink, head_units + at as u64);
            // Queued once the floor took this row group in, so a read the floor now rules out
            // is not started.
            while started < units.len() && results.len() < depth && sink.wants_start(units[started].newest) {
                results.push((units[started], sink.fork()));
                started += 1;
            }
        }
        // Reads still running are dropped: they stop at their next look at the floor. The row
        // groups not read are ones the scan ruled out: done too.
        floor.store(u64::MAX, Ordering::Relaxed);
        tell(self, sink, total);
        for (i, b) in self.blocks.iter().enumerate() {
            if failed[i]
                || !self.read[i]
                || block_outside(b, self.window)
                || !counts_block(b, self.row_groups[i].as_ref())
            {
                continue;
            }
            if read_any[i] {
                self.stats.inspected_blocks += 1;
            } else {
                self.stats.skipped_blocks += 1;
            }
        }
        Ok(())
    }

    /// The row groups to read, newest first; the ones the window or the prefilter rule out
    /// are counted (and noted, for the window) instead. A block whose footer fails is marked
    /// in `failed`.
    async fn plan(&mut self, prefilter: &Prefilter, failed: &mut [bool]) -> Result<Vec<Unit>, QueryError> {
        let storage = &**self.q.db.storage();
        let mut units = Vec::new();
        for (i, failed) in failed.iter_mut().enumerate() {
            if !self.read[i] {
                continue;
            }
            let b = self.blocks[i].clone();
            if block_outside(&b, self.window) {
                self.stats.skipped_blocks += u64::from(counts_block(&b, self.row_groups[i].as_ref()));
                self.window_skipped.push((i, None));
                continue;
            }
            for rg in 0..b.row_group_count() {
                if self.row_groups[i].as_ref().is_some_and(|only| !only.contains(&rg)) {
                    continue; // another part's
                }
                let stats = match b.row_group_stats(storage, rg).await {
                    Ok(s) => s,
                    Err(e) => {
                        *failed = true;
                        self.q.db.block_failed(&b, e)?;
                        self.stats.damaged_blocks += 1;
                        self.saw_all = false;
                        break;
                    }
                };
                let skip_time = match (self.window, stats.start, stats.duration) {
                    (Some((ws, we)), Some((lo, hi)), Some((_, dmax))) => {
                        lo > we || hi.saturating_add(dmax.max(0) as u64) < ws
                    }
                    _ => false,
                };
                if skip_time || !prefilter.row_group_may_match(&stats, b.index.value_blooms.get(rg)) {
                    self.stats.skipped_row_groups += 1;
                    if skip_time {
                        self.window_skipped.push((i, Some(rg)));
                    }
                    continue;
                }
                // A trace starts no later than its spans; in a time-sliced block the index
                // bounds its traces' starts more tightly than the span statistics. A floor
                // of a span's start is bounded by the latest span start alone.
                let newest = stats.start.map_or(u64::MAX, |(_, hi)| hi);
                let newest = match self.floor_of {
                    FloorOf::TraceStart => b.index.trace_starts.get(rg).map_or(newest, |&(_, hi)| hi.min(newest)),
                    FloorOf::SpanStart => newest,
                };
                units.push(Unit { block: i, rg, newest });
            }
        }
        plan_order(&mut units);
        Ok(units)
    }

    /// Takes a row group's pieces in order (module docs of [`super`], steps 3 and 4).
    /// `head_handled`: the traces the head part handled.
    fn take_row_group(
        &mut self,
        out: RowGroupOut,
        head_handled: &HashSet<[u8; 16]>,
        sink: &mut (dyn TraceSink + Send),
    ) {
        self.stats.inspected_bytes += out.bytes;
        self.stats.inspected_traces += out.traces;
        self.stats.inspected_spans += out.spans;
        for p in out.pieces {
            if self.handled.contains(&p.id) || head_handled.contains(&p.id) {
                // A whole trace is in one piece: the worker left out those the head had.
                debug_assert!(!matches!(p.piece, Piece::Offered), "a trace offered twice");
                self.note(p.id, p.passed);
                continue;
            }
            if p.in_window && !sink.wants_start(p.start) {
                continue;
            }
            match p.piece {
                Piece::Note => self.note(p.id, p.passed),
                Piece::Defer => self.defer(p.id, p.passed, p.start),
                Piece::Offer(rows) => {
                    self.handled.insert(p.id);
                    self.finish_trace(rows, sink);
                }
                Piece::Offered => {
                    self.handled.insert(p.id);
                }
                Piece::Quiet => {}
            }
        }
        if let Some(part) = out.part {
            sink.merge(part);
        }
    }
}

/// Newest first; ties (and row groups without statistics) in block order, then row group
/// order: the same plan for the same blocks.
fn plan_order(units: &mut [Unit]) {
    units.sort_by_key(|u| (std::cmp::Reverse(u.newest), u.block, u.rg));
}

/// True when no span of block `b` starts or ends inside `window`.
pub(super) fn block_outside(b: &Block, window: Option<Window>) -> bool {
    window.is_some_and(|(start, end)| b.meta.min_start_unix_nano > end || b.meta.max_end_unix_nano < start)
}

/// A worker's part: decodes the columns the prefilter needs, tests each trace's piece, and
/// assembles the spans of the pieces that are whole traces the scan will offer; with the
/// sink's fork `part`, offers them to it here. Pieces in the window starting before `floor`
/// (when not 0) are left out: the sink no longer wants them. `None` when the floor passes the
/// row group's newest trace before its spans are assembled: the scan stops before it.
fn read_pieces(
    sh: &Shared,
    u: Unit,
    data: &RowGroupData,
    live_floor: &AtomicU64,
    mut part: Option<Box<dyn TracePart>>,
) -> Result<Option<RowGroupOut>, QueryError> {
    let floor = live_floor.load(Ordering::Relaxed);
    let cols = data.filter_columns(sh.needs)?;
    let b = &sh.blocks[u.block];
    let ranges = &b.index.row_groups;
    let groups = b.row_group_count();
    let mut out = RowGroupOut {
        bytes: data.bytes(),
        ..RowGroupOut::default()
    };
    let mut wanted: Vec<std::ops::Range<usize>> = Vec::new();
    let n = cols.len();
    let mut i = 0;
    while i < n {
        // A scan that stopped (or whose floor passed this row group) takes nothing from it.
        if out.traces % 1024 == 1023 && u.newest < live_floor.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let id = cols.trace_ids[i];
        let mut j = i + 1;
        while j < n && cols.trace_ids[j] == id {
            j += 1;
        }
        let (lo, hi) = (i, j);
        i = j;
        out.traces += 1;
        out.spans += (hi - lo) as u64;
        let views = || (lo..hi).map(|k| cols.row(k));
        let passed = sh.prefilter.leaves_passed(views());
        if passed == 0 {
            continue;
        }
        let in_window = overlaps(views(), sh.window);
        let start = sh.floor_of.bound(views().map(|r| r.start_unix_nano()));
        if in_window && floor > 0 && start < floor {
            continue;
        }
        // A trace at either edge of the row group may continue in the neighbour. Each trace is
        // asked of every other block's blooms (9 % of `service_error_rate`'s CPU over 22
        // blocks), so its hashes are computed once for all of them (6 % after).
        let crosses = (u.rg > 0 && ranges[u.rg - 1].max == id) || (u.rg + 1 < groups && ranges[u.rg + 1].min == id);
        let split = crosses || sh.recent.holds(&sh.tenant, &id) || {
            let h = trace_id_hashes(&id);
            sh.blocks
                .iter()
                .enumerate()
                .any(|(k, other)| k != u.block && other.index.may_hold_hashed(&id, h))
        };
        let piece = match (split, in_window) {
            (true, true) => Piece::Defer,
            (true, false) => Piece::Note,
            (false, true) if sh.prefilter.holds(passed) => {
                wanted.push(lo..hi);
                Piece::Offer(Vec::new())
            }
            (false, _) => Piece::Quiet,
        };
        out.pieces.push(PieceOut {
            id,
            passed,
            start,
            in_window,
            piece,
        });
    }
    if u.newest < live_floor.load(Ordering::Relaxed) {
        return Ok(None);
    }
    if !wanted.is_empty() {
        let mut rows = data.rows_in(&wanted)?.into_iter();
        let mut lens = wanted.iter().map(|r| r.len());
        for p in &mut out.pieces {
            if let Piece::Offer(v) = &mut p.piece {
                v.extend(rows.by_ref().take(lens.next().unwrap_or(0)));
                let Some(part) = part.as_deref_mut() else { continue };
                if sh.head_handled.contains(&p.id) {
                    // The scan notes its leaves and offers nothing.
                    p.piece = Piece::Note;
                } else if let Piece::Offer(rows) = std::mem::replace(&mut p.piece, Piece::Offered)
                    && let Some(rows) = offerable(rows, &sh.prefilter, sh.window, sh.floor_of, |s| part.wants_start(s))
                {
                    part.offer(&rows);
                }
            }
        }
    }
    out.part = part;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_newest_first_and_the_same_for_the_same_blocks() {
        let mut units = [(0, 0, 5), (1, 0, 9), (0, 1, 9), (2, 3, u64::MAX), (1, 1, 1)]
            .map(|(block, rg, newest)| Unit { block, rg, newest })
            .to_vec();
        plan_order(&mut units);
        let order: Vec<(usize, usize)> = units.iter().map(|u| (u.block, u.rg)).collect();
        assert_eq!(order, [(2, 3), (0, 1), (1, 0), (0, 0), (1, 1)]);
    }
}
