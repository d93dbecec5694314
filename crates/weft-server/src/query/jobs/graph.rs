//! The service graph over many queriers (job protocol v5, `spec/jobs.md`): for every trace
//! (`q` absent or `{ }`), the frontend counts the recent spans with its block listing taken in
//! the same view, sends runs of its row groups to the queriers (weighed by their spans, as a
//! span-local metric's), adds their counts in job order
//! (`ServiceGraph::merge_state`: service and call totals, latency buckets, calls kept aside)
//! until the span budget is spent, then reads whole the traces whose calls cross a split.
//! A graph of the traces matching a filter (`q`) reads whole traces: it splits as a search
//! does ([`super::whole`]). Queriers answer at `POST /internal/v1/jobs/service-graph`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use weft_engine::graph::{GraphState, ServiceGraph};
use weft_querier::scan::{ScanStats, Window, WireOutcome};

use super::whole::{WholePart, WholeQuery};
use super::{JOB_VERSION, JOBS_PER_PEER, Peers, json_reply};
use crate::app::AppState;
use crate::query::{bad, scan_failed};

/// Where a querier answers service-graph jobs.
pub const GRAPH_JOB_PATH: &str = "/internal/v1/jobs/service-graph";

/// A part of a service graph for one querier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GraphJob {
    pub version: u32,
    /// Inclusive, Unix ns: spans starting in it count.
    pub window: (u64, u64),
    /// The span budget of the whole graph.
    pub max_spans: u64,
    pub blocks: Vec<String>,
    /// Of a block in `blocks` named here, the only row groups this job reads, as in search
    /// jobs.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub row_groups: HashMap<String, Vec<u32>>,
    pub listing: Vec<String>,
    /// The trace IDs the frontend's recent spans hold, as a filter (`super::recent_filter`):
    /// a call whose parent may be there is kept aside for the frontend.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "super::filters")]
    pub recent: Vec<String>,
    /// A head job, for a live store: its recent spans not covered by `listing`, instead of
    /// `blocks` (`super::live`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub head: bool,
    /// A graph of the traces matching this spanset query (TraceQL), read as whole traces;
    /// absent: every trace, from columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// With `q`: traces (hex) the head part took that a listed block may hold again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// With `q`: a trace job, these traces (hex) read whole, instead of `blocks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<String>,
}

/// A querier's answer to a [`GraphJob`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GraphJobReply {
    pub version: u32,
    pub state: GraphState,
    pub stats: ScanStats,
    pub missing_blocks: Vec<String>,
    /// A head job's extras: the live store's recent-trace filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<super::live::HeadExtras>,
    /// With `q`: what the part left to the frontend, as a search job's reply has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<WireOutcome>,
}

super::versioned!(GraphJob, GraphJobReply);

/// Counts the graph of every trace in `window` into `g` over the queriers of `--query-peers`.
/// `Ok(None)`: no querier is known, or a querier's block list did not agree with this one's;
/// nothing was counted into `g` then, and the caller counts it here alone.
pub(crate) async fn service_graph(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    window: Window,
    max_spans: u64,
    g: &mut ServiceGraph,
) -> Result<Option<ScanStats>, Response> {
    debug_assert!(g.counts_every_trace());
    let addrs = peers.peers().await;
    if addrs.is_empty() && st.live.is_none() {
        return Ok(None);
    }
    let width = addrs.len().max(1);
    let mut merged = g.fork();
    let job_of = |blocks: Vec<String>, listing: Vec<String>, recent: Vec<String>, head: bool| GraphJob {
        version: JOB_VERSION,
        window,
        max_spans,
        blocks,
        row_groups: HashMap::new(),
        listing,
        recent,
        head,
        q: None,
        exclude: Vec::new(),
        traces: Vec::new(),
    };
    // The head part: here, or asked of the live stores (whose filters then tell the block
    // jobs which calls to keep aside, and whose spans resolve them).
    let (mut stats, blocks, listing, recent, remote) = match &st.live {
        None => {
            let q = st.querier();
            let (stats, blocks) = q.scan_service_graph_head(tenant, Some(window), &mut merged).await;
            let listing: Vec<String> = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
            let recent = super::recent_filter(q, tenant).into_iter().collect();
            (stats, blocks, listing, recent, None)
        }
        Some(live) => {
            let h: super::live::Heads<GraphJobReply> = super::live::heads(st, live, tenant, GRAPH_JOB_PATH, |l| {
                job_of(Vec::new(), l, Vec::new(), true)
            })
            .await?;
            let mut stats = ScanStats {
                unanswered_live_stores: h.unanswered,
                ..ScanStats::default()
            };
            let mut extras = Vec::new();
            for (a, reply) in h.replies {
                match merged.merge_state(reply.state) {
                    Ok(()) => {
                        stats.add(&reply.stats);
                        extras.push((a, reply.head));
                    }
                    Err(e) => {
                        tracing::warn!(live_store = %a, error = %e, "a live store's graph does not decode; its recent spans are left out");
                        stats.unanswered_live_stores += 1;
                    }
                }
            }
            let (held, recent) = super::live::filters_of(extras.iter().map(|(a, x)| (*a, x.as_ref())))
                .map_err(|e| crate::query::text(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e))?;
            let remote = Arc::new(super::live::RemoteRecent::for_query(live.clone(), held));
            (stats, h.blocks, h.listing, recent, Some(remote))
        }
    };
    let local;
    let q = match &remote {
        Some(r) => {
            local = st.querier().with_recent(r.clone());
            &local
        }
        None => st.querier(),
    };
    let empty: &ServiceGraph = g;
    let turns = super::Turns::new(width);
    let run = |(k, job): (usize, super::Planned)| {
        let (addrs, listing, blocks, recent, job_of, turns) = (&addrs, &listing, &blocks, &recent, &job_of, &turns);
        async move {
            let _turn = turns.take(k).await;
            let (ids, row_groups) = job.share(blocks);
            let job = GraphJob {
                row_groups,
                ..job_of(ids, listing.clone(), recent.clone(), false)
            };
            let decode = |r: GraphJobReply| Ok((r.state, r.stats, r.missing_blocks));
            if let Some(part) = super::dispatch_to(st, peers, addrs, k, tenant, GRAPH_JOB_PATH, &job, decode).await
                && (part.2.is_empty() || st.live.is_none())
            {
                return Ok(part);
            }
            st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
            let mut local = empty.fork();
            let part = super::part_of(&job.blocks, &job.row_groups);
            let stats = q
                .scan_service_graph_part(tenant, Some(window), &part, &mut local)
                .await
                .map_err(scan_failed)?;
            Ok::<_, Response>((local.into_state(), stats, Vec::new()))
        }
    };
    // Every row group is weighed by its spans, and the block at a job's edge is split there by
    // row group, as a span-local metric's are: by whole blocks, the busiest of 4 queriers held
    // 1.12 of the ideal at best.
    let jobs = super::plan_by_reads(
        &blocks,
        width * JOBS_PER_PEER,
        |_, _| true,
        false,
        super::BlockShare::Columns,
    );
    let count = jobs.len().max(1);
    let mut done = futures::stream::iter(super::assigned(jobs, width, false))
        .map(run)
        .buffered(count);
    while let Some(part) = done.next().await {
        let (state, part_stats, missing) = part?;
        if !missing.is_empty() {
            tracing::info!(
                tenant,
                ?missing,
                "a querier's block list differs from the frontend's; counting the graph here alone"
            );
            st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if merged.budget_spent() {
            // Blocks of the window are left unread, as one querier's scan leaves them.
            merged.mark_truncated();
            break;
        }
        if let Err(e) = merged.merge_state(state) {
            tracing::warn!(tenant, error = %e, "a querier's graph does not decode; counting the graph here alone");
            return Ok(None);
        }
        stats.add(&part_stats);
    }
    drop(done);
    q.resolve_service_graph(tenant, &mut merged, &mut stats)
        .await
        .map_err(scan_failed)?;
    if let Some(r) = &remote {
        stats.unanswered_live_stores += r.failed();
    }
    g.merge(merged);
    stats.inspected_traces = g.inspected_traces;
    Ok(Some(stats))
}

/// Counts the graph of the traces matching `q` in `window` into `g` over the queriers of
/// `--query-peers`, as a search is split. `Ok(None)` as [`service_graph`]: nothing was
/// counted into `g`.
pub(crate) async fn filtered_graph(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    q: &str,
    window: Window,
    max_spans: u64,
    g: &mut ServiceGraph,
) -> Result<Option<ScanStats>, Response> {
    let query = WholeGraph {
        q: q.to_owned(),
        window,
        max_spans,
    };
    let mut part = g.fork();
    let stats = super::whole::run(st, peers, tenant, Some(window), &query, &mut part).await?;
    if stats.is_some() {
        g.merge(part);
    }
    Ok(stats)
}

/// A graph of the traces matching a filter, as [`super::whole`] splits it.
struct WholeGraph {
    q: String,
    window: Window,
    max_spans: u64,
}

impl WholeQuery for WholeGraph {
    type Sink = ServiceGraph;
    type State = GraphState;
    type Job = GraphJob;
    type Reply = GraphJobReply;
    const PATH: &'static str = GRAPH_JOB_PATH;

    fn sink(&self) -> Result<ServiceGraph, Box<Response>> {
        let query =
            weft_traceql::parse(&self.q).map_err(|e| Box::new(bad(format!("invalid service-graph job: {e}"))))?;
        ServiceGraph::new(&query, Some(self.window), self.max_spans).map_err(|e| Box::new(crate::query::eval_error(e)))
    }

    fn job(&self, p: WholePart) -> GraphJob {
        GraphJob {
            version: JOB_VERSION,
            window: self.window,
            max_spans: self.max_spans,
            blocks: p.blocks,
            row_groups: p.row_groups,
            listing: p.listing,
            recent: p.recent,
            head: p.head,
            q: Some(self.q.clone()),
            exclude: p.exclude,
            traces: p.traces,
        }
    }

    fn decode(&self, r: GraphJobReply) -> Result<(GraphState, WireOutcome), String> {
        let mut outcome = r.outcome.ok_or("no outcome for a filtered graph")?;
        outcome.missing_blocks.extend(r.missing_blocks);
        Ok((r.state, outcome))
    }

    fn state(&self, sink: ServiceGraph) -> GraphState {
        sink.into_state()
    }

    fn merge(&self, into: &mut ServiceGraph, s: GraphState) -> Result<(), String> {
        into.merge_state(s)
    }

    fn full(&self, sink: &mut ServiceGraph) -> bool {
        if sink.budget_spent() {
            sink.mark_truncated();
            return true;
        }
        false
    }
}

/// `POST /internal/v1/jobs/service-graph`: one job of a service graph another querier is the
/// frontend of.
pub async fn graph_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<GraphJob>(&st, &headers, &body, "service-graph").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if let Some(r) = super::unlisted("service-graph", &job.blocks, &job.listing) {
        return r;
    }
    if job.window.0 > job.window.1 || job.max_spans == 0 {
        return bad("invalid service-graph job: an empty window or no span budget");
    }
    if let Some(q) = &job.q {
        let query = WholeGraph {
            q: q.clone(),
            window: job.window,
            max_spans: job.max_spans,
        };
        let mut g = match query.sink() {
            Ok(g) => g,
            Err(r) => return *r,
        };
        let part = WholePart::of(
            &job.blocks,
            &job.row_groups,
            &job.listing,
            &job.recent,
            &job.exclude,
            &job.traces,
            job.head,
        );
        let served = match super::whole::serve(&st, &tenant, Some(job.window), &part, "service-graph", &mut g).await {
            Ok(s) => s,
            Err(r) => return r,
        };
        st.jobs.served.fetch_add(1, Ordering::Relaxed);
        return json_reply(&GraphJobReply {
            version: JOB_VERSION,
            state: g.into_state(),
            stats: served.outcome.stats,
            missing_blocks: served.missing_blocks,
            head: served.head,
            outcome: Some(served.outcome),
        });
    }
    if !(job.exclude.is_empty() && job.traces.is_empty()) {
        return bad("invalid service-graph job: `exclude` and `traces` are for a graph filtered by `q`");
    }
    if let Some(r) = super::row_groups_unread("service-graph", &job.blocks, &job.row_groups) {
        return r;
    }
    let everything = weft_traceql::parse("{ }").expect("valid");
    let mut g = match ServiceGraph::new(&everything, Some(job.window), job.max_spans) {
        Ok(g) => g,
        Err(e) => return crate::query::eval_error(e),
    };
    if job.head {
        // A live store: its recent spans, against the frontend's listing.
        let (q, extras) = match super::live::head_querier(&st, &tenant, &job.listing).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let (stats, _) = q.scan_service_graph_head(&tenant, Some(job.window), &mut g).await;
        st.jobs.served.fetch_add(1, Ordering::Relaxed);
        return json_reply(&GraphJobReply {
            version: JOB_VERSION,
            state: g.into_state(),
            stats,
            missing_blocks: Vec::new(),
            head: Some(extras),
            outcome: None,
        });
    }
    let held = match super::job_querier(st.querier(), &job.recent) {
        Ok(h) => h,
        Err(e) => return bad(format!("invalid service-graph job: {e}")),
    };
    let q = held.as_ref().unwrap_or(st.querier());
    let missing = super::unknown_blocks(q, &tenant, &job.listing).await;
    let part = super::part_of(&job.blocks, &job.row_groups);
    let stats = match q
        .scan_service_graph_part(&tenant, Some(job.window), &part, &mut g)
        .await
    {
        Ok(s) => s,
        Err(e) => return scan_failed(e),
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    json_reply(&GraphJobReply {
        version: JOB_VERSION,
        state: g.into_state(),
        stats,
        missing_blocks: missing,
        head: None,
        outcome: None,
    })
}
