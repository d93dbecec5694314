//! Queries over whole traces that add up what each part counted (TraceQL metrics over whole
//! traces, a service graph filtered by `q`), split over queriers as a search is: the head
//! part on the frontend or the live stores, runs of the block listing as jobs (their counts
//! merged in job order), then the traces stored in several places read whole once, as trace
//! jobs when there are enough of them. Each kind says how its jobs and counts look
//! ([`WholeQuery`]); [`run`] is the frontend's side and [`serve`] the querier's.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use axum::http::StatusCode;
use axum::response::Response;
use futures::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use weft_engine::search::TraceSink;
use weft_querier::Querier;
use weft_querier::scan::{PartOutcome, ScanPart, ScanStats, Window, WireOutcome};

use super::live::{HeadExtras, HeadReply};
use super::{JOBS_PER_PEER, Peers, Planned, TRACE_JOB_MIN, Versioned, job_querier, unhex, unknown_blocks};
use crate::app::AppState;
use crate::query::{bad, scan_failed, text};

/// What a job of a whole-trace query reads (`spec/jobs.md`).
#[derive(Debug, Clone, Default)]
pub(crate) struct WholePart {
    pub blocks: Vec<String>,
    /// Of a block in `blocks` named here, the only row groups the job reads (as in search jobs).
    pub row_groups: HashMap<String, Vec<u32>>,
    pub listing: Vec<String>,
    /// The frontend's recent-trace filters.
    pub recent: Vec<String>,
    /// Traces (hex) the head part took that a listed block may hold again: skipped.
    pub exclude: Vec<String>,
    /// A trace job: these traces (hex), read whole, instead of `blocks`.
    pub traces: Vec<String>,
    /// A head job, for a live store.
    pub head: bool,
}

impl WholePart {
    /// The part a job's fields name.
    pub fn of(
        blocks: &[String],
        row_groups: &HashMap<String, Vec<u32>>,
        listing: &[String],
        recent: &[String],
        exclude: &[String],
        traces: &[String],
        head: bool,
    ) -> WholePart {
        WholePart {
            blocks: blocks.to_vec(),
            row_groups: row_groups.clone(),
            listing: listing.to_vec(),
            recent: recent.to_vec(),
            exclude: exclude.to_vec(),
            traces: traces.to_vec(),
            head,
        }
    }
}

/// A query over whole traces whose parts' counts add up.
pub(crate) trait WholeQuery: Sync {
    type Sink: TraceSink + Send;
    type State: Send;
    type Job: Serialize + Sync;
    type Reply: DeserializeOwned + Versioned + HeadReply;
    /// Where queriers answer its jobs.
    const PATH: &'static str;
    /// An empty sink of the query, or the reply refusing it.
    fn sink(&self) -> Result<Self::Sink, Box<Response>>;
    /// A job of the query that reads `part`.
    fn job(&self, part: WholePart) -> Self::Job;
    /// A reply's counts and what its part left to the frontend.
    fn decode(&self, r: Self::Reply) -> Result<(Self::State, WireOutcome), String>;
    /// What `sink` counted, as a reply carries it.
    fn state(&self, sink: Self::Sink) -> Self::State;
    /// Adds a part's counts; an error is this build's bug, not the user's.
    fn merge(&self, into: &mut Self::Sink, s: Self::State) -> Result<(), String>;
    /// True once `sink` takes no more counts (a graph's span budget, spent): the jobs left
    /// are not merged.
    fn full(&self, _sink: &mut Self::Sink) -> bool {
        false
    }
}

fn merge_failed(e: String) -> Response {
    text(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("merging a querier's counts: {e}"),
    )
}

/// Runs `query` over the queriers of `--query-peers` (and the live stores) into `sink`.
/// `Ok(None)`: no querier is known, or one's block list did not agree with this one's; the
/// caller then counts the query here alone, into a new sink.
pub(crate) async fn run<Q: WholeQuery>(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    window: Option<Window>,
    query: &Q,
    sink: &mut Q::Sink,
) -> Result<Option<ScanStats>, Response> {
    let addrs = peers.peers().await;
    if addrs.is_empty() && st.live.is_none() {
        return Ok(None);
    }
    let width = addrs.len().max(1);
    // The head part: here, or asked of the live stores.
    let mut head = match &st.live {
        None => super::live::WholeHead::here(st.querier(), tenant, window, sink).await?,
        Some(live) => {
            let make = |listing: Vec<String>| {
                query.job(WholePart {
                    listing,
                    head: true,
                    ..WholePart::default()
                })
            };
            let mut failed = None;
            let h = super::live::whole_head(st, live, tenant, Q::PATH, make, |r: Q::Reply| {
                let extras = r.head_extras().cloned();
                let (state, outcome) = query.decode(r)?;
                if let Err(e) = query.merge(sink, state) {
                    failed = Some(e);
                }
                Ok((outcome, extras))
            })
            .await?;
            if let Some(e) = failed {
                return Err(merge_failed(e));
            }
            h
        }
    };
    let parts = std::mem::take(&mut head.parts);
    let (q, blocks, taken) = (&head.querier, &head.blocks, &head.taken);
    // Of the traces the head part took, those a listed block may hold again (cut from the head
    // since): a job must not count them a second time.
    let exclude: Vec<[u8; 16]> = taken
        .iter()
        .filter(|id| blocks.iter().any(|b| b.index.may_hold(id)))
        .copied()
        .collect();
    let template = WholePart {
        listing: head.listing.clone(),
        recent: head.recent.clone(),
        exclude: exclude.iter().map(|id| weft_core::hex(id)).collect(),
        ..WholePart::default()
    };
    let turns = super::Turns::new(width);
    let run = |(k, job): (usize, Planned)| {
        let (addrs, template, exclude, turns) = (&addrs, &template, &exclude, &turns);
        async move {
            let _turn = turns.take(k).await;
            let (ids, row_groups) = job.share(blocks);
            let part = WholePart {
                blocks: ids,
                row_groups,
                ..template.clone()
            };
            let body = query.job(part.clone());
            if let Some(reply) = super::dispatch_to(st, peers, addrs, k, tenant, Q::PATH, &body, |r| {
                let (state, outcome) = query.decode(r)?;
                Ok((state, PartOutcome::from_wire(outcome)?))
            })
            .await
                && (reply.1.missing_blocks.is_empty() || st.live.is_none())
            {
                return Ok(reply);
            }
            st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
            let mut local = query.sink().map_err(|r| *r)?;
            let mut scan = super::part_of(&part.blocks, &part.row_groups);
            scan.exclude = exclude.iter().copied().collect();
            let outcome = q
                .scan_part(tenant, window, &scan, &mut local)
                .await
                .map_err(scan_failed)?;
            Ok::<_, Response>((query.state(local), outcome))
        }
    };
    // Weighed by the row groups the query's filter may read, a heavy block split by row group,
    // as a search's jobs are (without a floor: every matching trace counts).
    let prefilter = sink.prefilter();
    let jobs = super::plan_by_reads(
        blocks,
        width * JOBS_PER_PEER,
        |b, rg| super::bloom_may_match(b, rg, |s, v| prefilter.row_group_may_match(s, v)),
        false,
        super::BlockShare::Traces,
    );
    // Progress, told the sink after each job merged: the head part is one unit, each job one.
    let total = 1 + jobs.len() as u64;
    let mut told = ScanStats::default();
    for p in &parts {
        told.add(&p.stats);
    }
    sink.progress(told.progress(1, total));
    let mut parts = parts;
    let count = jobs.len().max(1);
    let mut done = futures::stream::iter(super::assigned(jobs, width, false))
        .map(run)
        .buffered(count);
    let mut full = false;
    let mut merged = 1;
    while let Some(d) = done.next().await {
        let (state, mut outcome) = d?;
        if !outcome.missing_blocks.is_empty() {
            tracing::info!(tenant, missing = ?outcome.missing_blocks, "a querier's block list differs from the frontend's; counting here alone");
            st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if query.full(sink) {
            // Blocks of the window are left unread, as one querier's scan leaves them.
            full = true;
            break;
        }
        query.merge(sink, state).map_err(merge_failed)?;
        merged += 1;
        told.add(&outcome.stats);
        sink.progress(told.progress(merged, total));
        outcome.forget(taken);
        parts.push(outcome);
    }
    drop(done);

    // The traces stored in several places, read whole once: shared out as trace jobs when
    // there are enough of them (a structural query can leave most traces split), except
    // those the recent spans here hold, which a querier without them would read in part.
    let (split, mut stats) = q.split_traces(tenant, window, parts, sink);
    stats.add(&head.partial());
    if full {
        return Ok(Some(stats));
    }
    let (here, split): (Vec<[u8; 16]>, Vec<[u8; 16]>) = split.into_iter().partition(|id| q.recent_holds(tenant, id));
    stats.add(&q.read_whole(tenant, window, &here, sink).await.map_err(scan_failed)?);
    if split.len() < TRACE_JOB_MIN || addrs.is_empty() {
        stats.add(&q.read_whole(tenant, window, &split, sink).await.map_err(scan_failed)?);
        return Ok(Some(stats));
    }
    stats.add(&trace_jobs(st, peers, &addrs, tenant, window, query, q, &split, sink).await?);
    Ok(Some(stats))
}

/// Reads the traces `split` (stored in several places) whole over the queriers `addrs`, as
/// trace jobs in one run each, into `sink`; a run whose queriers all failed is read here by `q`.
#[allow(clippy::too_many_arguments)]
async fn trace_jobs<Q: WholeQuery>(
    st: &AppState,
    peers: &Peers,
    addrs: &[SocketAddr],
    tenant: &str,
    window: Option<Window>,
    query: &Q,
    q: &Querier,
    split: &[[u8; 16]],
    sink: &mut Q::Sink,
) -> Result<ScanStats, Response> {
    let mut stats = ScanStats::default();
    let read = |(k, ids): (usize, Vec<[u8; 16]>)| async move {
        let body = query.job(WholePart {
            traces: ids.iter().map(|id| weft_core::hex(id)).collect(),
            ..WholePart::default()
        });
        if let Some(reply) = super::dispatch_to(st, peers, addrs, k, tenant, Q::PATH, &body, |r| query.decode(r)).await
        {
            st.jobs.sent_traces.fetch_add(1, Ordering::Relaxed);
            return Ok((reply.0, reply.1.stats));
        }
        st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
        let mut local = query.sink().map_err(|r| *r)?;
        let stats = q
            .read_whole(tenant, window, &ids, &mut local)
            .await
            .map_err(scan_failed)?;
        Ok::<_, Response>((query.state(local), stats))
    };
    let per = split.len().div_ceil(addrs.len());
    let mut done = futures::stream::iter(split.chunks(per).map(<[_]>::to_vec).enumerate())
        .map(read)
        .buffered(addrs.len());
    while let Some(d) = done.next().await {
        let (state, part_stats) = d?;
        query.merge(sink, state).map_err(merge_failed)?;
        stats.add(&part_stats);
    }
    Ok(stats)
}

/// What a querier's part of a whole-trace query read ([`serve`]).
pub(crate) struct Served {
    pub outcome: WireOutcome,
    pub missing_blocks: Vec<String>,
    pub head: Option<HeadExtras>,
}

/// Reads `part` of a whole-trace query into `sink`, on a querier (`what` names the job kind
/// in a 400's message): the head part (a live store), a trace job, or runs of blocks.
pub(crate) async fn serve(
    st: &AppState,
    tenant: &str,
    window: Option<Window>,
    part: &WholePart,
    what: &str,
    sink: &mut (dyn TraceSink + Send),
) -> Result<Served, Response> {
    let invalid = |e: String| bad(format!("invalid {what} job: {e}"));
    let ids = |hex: &[String]| -> Result<Vec<[u8; 16]>, String> { hex.iter().map(|s| unhex::<16>(s)).collect() };
    if part.head {
        // A live store: its recent spans, against the frontend's listing.
        let (q, mut extras) = super::live::head_querier(st, tenant, &part.listing).await?;
        let outcome = q
            .scan_part(tenant, window, &ScanPart::head_only(), sink)
            .await
            .map_err(scan_failed)?;
        extras.taken = outcome.handled().iter().map(|id| weft_core::hex(id)).collect();
        return Ok(Served {
            outcome: outcome.to_wire(),
            missing_blocks: Vec::new(),
            head: Some(extras),
        });
    }
    if !part.row_groups.is_empty() && (part.head || !part.traces.is_empty()) {
        return Err(invalid(
            "`row_groups` is for a job that reads blocks, not a head or trace job".into(),
        ));
    }
    if let Some(r) = super::row_groups_unread(what, &part.blocks, &part.row_groups) {
        return Err(r);
    }
    let held = job_querier(st.querier(), &part.recent).map_err(invalid)?;
    let q = held.as_ref().unwrap_or(st.querier());
    if !part.traces.is_empty() {
        let stats = q
            .read_whole(tenant, window, &ids(&part.traces).map_err(invalid)?, sink)
            .await
            .map_err(scan_failed)?;
        return Ok(Served {
            outcome: WireOutcome {
                stats,
                saw_all: true,
                ..WireOutcome::default()
            },
            missing_blocks: Vec::new(),
            head: None,
        });
    }
    let mut scan = super::part_of(&part.blocks, &part.row_groups);
    scan.exclude = ids(&part.exclude).map_err(invalid)?.into_iter().collect::<HashSet<_>>();
    let missing_blocks = unknown_blocks(q, tenant, &part.listing).await;
    let outcome = q.scan_part(tenant, window, &scan, sink).await.map_err(scan_failed)?;
    Ok(Served {
        outcome: outcome.to_wire(),
        missing_blocks,
        head: None,
    })
}
