//! The active head's part of a trace scan (step 1 of the [module docs](super)) on the query's
//! runners: chunks of its traces, newest first, each tested and copied out under a view of the
//! recent spans and offered to a fork of the sink on a runner, as a block's row groups are
//! ([`super::blocks`]). The query's task takes the chunks' results in order, so the answer is
//! the one a sequential pass gives, whatever the thread timing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weft_block::Block;
use weft_block::row::{SpanFields, SpanRow};
use weft_db::recent::{FrozenSpans, RecentSpans};
use weft_engine::prefilter::Prefilter;
use weft_engine::search::{FloorOf, TracePart, TraceSink};

use super::{HEAD_CHUNK, Scan, Window, in_blocks, offerable, overlaps};
use crate::QueryError;
use crate::workers::Pipeline;

/// What the runners reading the active head share, read only.
struct HeadShared {
    recent: Arc<dyn RecentSpans>,
    tenant: String,
    /// The frozen parts listed when the head part began: a trace with a piece there is split, even
    /// if that part has been written to a block and left the view since.
    cuts: Vec<Arc<FrozenSpans>>,
    /// The blocks listed when the scan began: a trace one of them may hold is split.
    blocks: Vec<Arc<Block>>,
    prefilter: Prefilter,
    window: Option<Window>,
    floor_of: FloorOf,
    /// The sink's floor as the runners see it (0: none yet). It only rises, so a runner that
    /// reads a stale one does work the scan then drops, never less.
    floor: Arc<AtomicU64>,
}

/// What a chunk's trace asks of the scan.
enum Kind {
    /// Outside the window: its leaves count if the trace is fetched whole.
    Note,
    /// Stored elsewhere too: fetch it whole at the end.
    Defer,
    /// The whole trace: offer it.
    Offer(Vec<SpanRow>),
    /// The whole trace, already offered to the chunk's fork of the sink.
    Offered,
}

struct HeadPiece {
    id: [u8; 16],
    passed: u64,
    start: u64,
    kind: Kind,
}

/// A chunk's pieces, what reading it cost, and the sink's fork it offered to.
#[derive(Default)]
struct ChunkOut {
    pieces: Vec<HeadPiece>,
    traces: u64,
    spans: u64,
    bytes: u64,
    part: Option<Box<dyn TracePart>>,
}

type Chunk = Vec<(u32, [u8; 16])>;
/// A chunk and the sink's fork it offers to.
type ChunkJob = (Chunk, Option<Box<dyn TracePart>>);

impl Scan<'_> {
    /// Offers or defers the traces of the active head, `ids` (newest first), on the query's
    /// runners; `bounds`: each chunk's bound ([`super::newest_first`]), so that no chunk
    /// is read once the sink wants nothing that early. `cuts`: the frozen parts listed when the
    /// head part began.
    pub(super) async fn active_head(
        &mut self,
        ids: Vec<(u32, [u8; 16])>,
        bounds: Vec<u64>,
        cuts: &[Arc<FrozenSpans>],
        sink: &mut (dyn TraceSink + Send),
    ) -> Result<(), QueryError> {
        if ids.is_empty() {
            return Ok(());
        }
        let floor = Arc::new(AtomicU64::new(sink.start_floor().unwrap_or(0)));
        let shared = Arc::new(HeadShared {
            recent: self.q.recent.clone(),
            tenant: self.tenant.to_owned(),
            cuts: cuts.to_vec(),
            blocks: self.blocks.clone(),
            prefilter: sink.prefilter().clone(),
            window: self.window,
            floor_of: self.floor_of,
            floor: floor.clone(),
        });
        let mut chunks: VecDeque<(Chunk, u64)> = ids.chunks(HEAD_CHUNK).map(<[_]>::to_vec).zip(bounds).collect();
        let mut results = self.q.workers.pipeline(
            self.tenant,
            true,
            |job: ChunkJob| Ok(job),
            move |(chunk, part)| Ok(read_chunk(&shared, &chunk, part)),
        );
        // The first chunk alone (on a first page it usually holds the page, and the floor it
        // sets rules out most of the rest, as a block's first row group does), then one per
        // runner, one more as each is taken.
        let depth = self.q.workers.parallelism();
        let mut stopped = queue(&mut results, &mut chunks, sink, 1);
        while let Some(out) = results.next().await {
            self.take_chunk(out?, sink);
            floor.store(sink.start_floor().unwrap_or(0), Ordering::Relaxed);
            stopped |= queue(&mut results, &mut chunks, sink, depth);
        }
        if stopped {
            self.skipped_head_chunks();
        }
        Ok(())
    }

    /// Takes a chunk's pieces in order, as [`Scan::take`] took them one by one.
    fn take_chunk(&mut self, out: ChunkOut, sink: &mut (dyn TraceSink + Send)) {
        self.stats.inspected_traces += out.traces;
        self.stats.inspected_spans += out.spans;
        self.stats.inspected_bytes += out.bytes;
        for p in out.pieces {
            if !matches!(p.kind, Kind::Note) && !sink.wants_start(p.start) {
                continue;
            }
            match p.kind {
                Kind::Note => self.note(p.id, p.passed),
                Kind::Defer => self.defer(p.id, p.passed, p.start),
                Kind::Offer(rows) => {
                    self.handled.insert(p.id);
                    self.finish_trace(rows, sink);
                }
                Kind::Offered => {
                    self.handled.insert(p.id);
                }
            }
        }
        if let Some(part) = out.part {
            sink.merge(part);
        }
    }
}

/// Queues chunks until `n` are in flight. None once the sink wants nothing as early as the
/// next chunk's bound: the bounds do not rise, so no later chunk holds anything either. True
/// when it left the rest out so.
fn queue(
    results: &mut Pipeline<ChunkJob, ChunkOut>,
    chunks: &mut VecDeque<(Chunk, u64)>,
    sink: &(dyn TraceSink + Send),
    n: usize,
) -> bool {
    while results.len() < n {
        let Some((c, bound)) = chunks.pop_front() else { break };
        if !sink.wants_start(bound) {
            chunks.clear();
            return true;
        }
        results.push((c, sink.fork()));
    }
    false
}

/// A runner's part: tests the chunk's traces in place under a view of the recent spans and
/// copies out the candidates (as [`Scan::head_piece`] does), then, outside the view, decides
/// which are whole and offers those to the sink's fork `part`.
fn read_chunk(sh: &HeadShared, chunk: &[(u32, [u8; 16])], mut part: Option<Box<dyn TracePart>>) -> ChunkOut {
    let floor = sh.floor.load(Ordering::Relaxed);
    let mut out = ChunkOut::default();
    let mut candidates: Vec<(HeadPiece, bool)> = Vec::new();
    sh.recent.view(&sh.tenant, &mut |v| {
        for (_, id) in chunk {
            // The active part may have been cut since the ids were taken: the trace is then
            // found in the newer cut.
            let mut holders = v
                .active
                .into_iter()
                .chain(v.frozen.iter().filter_map(|c| c.of(&sh.tenant)))
                .filter_map(|c| c.traces.get(id).map(|&last| (c, last)));
            let Some((cols, last)) = holders.next() else {
                continue;
            };
            let split = holders.next().is_some()
                || sh
                    .cuts
                    .iter()
                    .any(|c| c.of(&sh.tenant).is_some_and(|cc| cc.traces.contains_key(id)));
            let rows = || cols.trace_rows(last).map(|r| cols.at(r));
            out.traces += 1;
            for r in cols.trace_rows(last) {
                out.spans += 1;
                out.bytes += cols.row_bytes(r);
            }
            // The whole trace starts no later than this piece: once the sink has a floor, a
            // piece before it is left out before its spans are tested.
            let bound = || sh.floor_of.bound(rows().map(|r| r.start_unix_nano()));
            if floor > 0 && bound() < floor && overlaps(rows(), sh.window) {
                continue;
            }
            let passed = sh.prefilter.leaves_passed(rows());
            if passed == 0 {
                continue;
            }
            if !overlaps(rows(), sh.window) {
                let piece = HeadPiece {
                    id: *id,
                    passed,
                    start: 0,
                    kind: Kind::Note,
                };
                candidates.push((piece, false));
                continue;
            }
            let start = bound();
            if floor > 0 && start < floor {
                continue;
            }
            let mut copied = Vec::new();
            cols.copy_rows(cols.trace_rows(last), &mut copied);
            copied.reverse();
            let piece = HeadPiece {
                id: *id,
                passed,
                start,
                kind: Kind::Offer(copied),
            };
            candidates.push((piece, split));
        }
    });
    for (mut p, split) in candidates {
        if let Kind::Offer(rows) = &mut p.kind {
            if split || in_blocks(&sh.blocks, &p.id) {
                p.kind = Kind::Defer;
            } else if let Some(f) = part.as_deref_mut() {
                let rows = std::mem::take(rows);
                p.kind = Kind::Offered;
                if let Some(rows) = offerable(rows, &sh.prefilter, sh.window, sh.floor_of, |s| f.wants_start(s)) {
                    f.offer(&rows);
                }
            }
        }
        out.pieces.push(p);
    }
    out.part = part;
    out
}
