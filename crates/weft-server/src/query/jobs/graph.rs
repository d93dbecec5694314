//! The service graph over many queriers (job protocol v1, `spec/jobs.md`): for every trace
//! (`q` absent or `{ }`), the frontend counts the recent spans with its block listing taken in
//! the same view, sends runs of the listing to the queriers, adds their counts in job order
//! (`ServiceGraph::merge_state`: service and call totals, latency buckets, calls kept aside)
//! until the span budget is spent, then reads whole the traces whose calls cross a split.
//! Queriers answer at `POST /internal/v1/jobs/service-graph`. A graph of the traces matching
//! a filter reads whole traces and runs on the frontend.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use weft_engine::graph::{GraphState, ServiceGraph};
use weft_querier::scan::{ScanStats, Window};

use super::{JOB_VERSION, JOBS_PER_PEER, Peers, json_reply, plan};
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
    pub listing: Vec<String>,
    /// The trace IDs the frontend's recent spans hold, as a filter (`super::recent_filter`):
    /// a call whose parent may be there is kept aside for the frontend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<String>,
}

/// A querier's answer to a [`GraphJob`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GraphJobReply {
    pub version: u32,
    pub state: GraphState,
    pub stats: ScanStats,
    pub missing_blocks: Vec<String>,
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
    if addrs.is_empty() {
        return Ok(None);
    }
    let q = st.querier();
    let mut merged = g.fork();
    let (mut stats, blocks) = q.scan_service_graph_head(tenant, Some(window), &mut merged).await;
    let listing: Vec<String> = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
    let recent = super::recent_filter(q, tenant);
    let empty: &ServiceGraph = g;
    let run = |(k, job): (usize, Vec<usize>)| {
        let (addrs, listing, blocks, recent) = (&addrs, &listing, &blocks, &recent);
        async move {
            let job = GraphJob {
                version: JOB_VERSION,
                window,
                max_spans,
                blocks: job.iter().map(|&i| blocks[i].meta.block_id.clone()).collect(),
                listing: listing.clone(),
                recent: recent.clone(),
            };
            let decode = |r: GraphJobReply| Ok((r.state, r.stats, r.missing_blocks));
            if let Some(part) = super::dispatch_to(st, peers, addrs, k, tenant, GRAPH_JOB_PATH, &job, decode).await {
                return Ok(part);
            }
            st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
            let mut local = empty.fork();
            let ids = job.blocks.iter().cloned().collect();
            let stats = q
                .scan_service_graph_part(tenant, Some(window), &ids, &mut local)
                .await
                .map_err(scan_failed)?;
            Ok::<_, Response>((local.into_state(), stats, Vec::new()))
        }
    };
    let jobs = plan(&blocks, addrs.len() * JOBS_PER_PEER);
    let mut done = futures::stream::iter(jobs.into_iter().enumerate())
        .map(run)
        .buffered(addrs.len());
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
    g.merge(merged);
    stats.inspected_traces = g.inspected_traces;
    Ok(Some(stats))
}

/// `POST /internal/v1/jobs/service-graph`: one job of a service graph another querier is the
/// frontend of.
pub async fn graph_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<GraphJob>(&st, &headers, &body, "service-graph").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if job.window.0 > job.window.1 || job.max_spans == 0 {
        return bad("invalid service-graph job: an empty window or no span budget");
    }
    let everything = weft_traceql::parse("{ }").expect("valid");
    let mut g = match ServiceGraph::new(&everything, Some(job.window), job.max_spans) {
        Ok(g) => g,
        Err(e) => return crate::query::eval_error(e),
    };
    let held = match super::job_querier(st.querier(), job.recent.as_deref()) {
        Ok(h) => h,
        Err(e) => return bad(format!("invalid service-graph job: {e}")),
    };
    let q = held.as_ref().unwrap_or(st.querier());
    let missing = super::unknown_blocks(q, &tenant, &job.listing).await;
    let ids = job.blocks.iter().cloned().collect();
    let stats = match q.scan_service_graph_part(&tenant, Some(job.window), &ids, &mut g).await {
        Ok(s) => s,
        Err(e) => return scan_failed(e),
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    json_reply(&GraphJobReply {
        version: JOB_VERSION,
        state: g.into_state(),
        stats,
        missing_blocks: missing,
    })
}
