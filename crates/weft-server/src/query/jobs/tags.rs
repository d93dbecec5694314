//! Tag values over many queriers (job protocol v1, `spec/jobs.md`): the lookups weft answers
//! from columns (`/api/v2/search/tag/{tag}/values` and the like, Jaeger's services and
//! operations) split as span-local metrics do. The frontend lists the recent spans' values
//! with its block listing taken in the same view, sends runs of the listing to the queriers,
//! and adds their lists in job order, up to the cap. Queriers answer at
//! `POST /internal/v1/jobs/tag-values`. Lookups that need whole traces run on the frontend.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use weft_engine::tags::ColumnTagValues;
use weft_querier::scan::{ScanPart, ScanStats, Window};
use weft_traceql::Value;
use weft_traceql::ast::FieldExpr;

use super::{JOB_VERSION, JOBS_PER_PEER, Peers, WireValue, json_reply, plan};
use crate::app::AppState;
use crate::query::{bad, scan_failed, tag_field, text};

/// Where a querier answers tag-value jobs.
pub const TAG_VALUES_JOB_PATH: &str = "/internal/v1/jobs/tag-values";

/// A part of a tag-value lookup for one querier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TagValuesJob {
    pub version: u32,
    /// The filter, as TraceQL (`{ }` for none).
    pub query: String,
    /// The field whose values are listed, as TraceQL spells it (`resource.service.name`).
    pub field: String,
    /// Inclusive, Unix ns.
    pub window: Option<(u64, u64)>,
    /// Most distinct values.
    pub cap: usize,
    pub blocks: Vec<String>,
    pub listing: Vec<String>,
}

/// A querier's answer to a [`TagValuesJob`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TagValuesJobReply {
    pub version: u32,
    /// The values in the order the querier found them, at most `cap`.
    pub values: Vec<WireValue>,
    /// More than `cap` were found.
    pub truncated: bool,
    pub stats: ScanStats,
    pub missing_blocks: Vec<String>,
}

type Part = (Vec<Value>, bool, ScanStats, Vec<String>);

/// Lists the values of `field` over the queriers of `--query-peers`. `Ok(None)`: the lookup
/// needs whole traces, or a querier's block list did not agree with this one's (or no querier
/// is known); the caller looks it up here alone.
pub(crate) async fn tag_values(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    query: &weft_traceql::Query,
    field: &FieldExpr,
    window: Option<Window>,
    cap: usize,
) -> Result<Option<(Vec<Value>, bool, ScanStats)>, Response> {
    let Some(mut sink) = ColumnTagValues::new(query, field, window, cap) else {
        return Ok(None);
    };
    let addrs = peers.peers().await;
    if addrs.is_empty() {
        return Ok(None);
    }
    let q = st.querier();
    let (mut stats, mut blocks) = q
        .scan_columns_head(tenant, window, &mut sink)
        .await
        .map_err(scan_failed)?;
    blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
    let listing: Vec<String> = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
    let (query_text, field_text) = (query.to_string(), field.to_string());
    let run = |(k, job): (usize, Vec<usize>)| {
        let (addrs, listing, blocks, query_text, field_text) = (&addrs, &listing, &blocks, &query_text, &field_text);
        async move {
            let job = TagValuesJob {
                version: JOB_VERSION,
                query: query_text.clone(),
                field: field_text.clone(),
                window,
                cap,
                blocks: job.iter().map(|&i| blocks[i].meta.block_id.clone()).collect(),
                listing: listing.clone(),
            };
            if let Some(part) = dispatch(st, peers, addrs, k, tenant, &job).await {
                return Ok(part);
            }
            st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
            let mut local = ColumnTagValues::new(query, field, window, cap)
                .ok_or_else(|| text(StatusCode::INTERNAL_SERVER_ERROR, "the lookup needs whole traces"))?;
            let part = ScanPart {
                head: false,
                blocks: Some(job.blocks.iter().cloned().collect()),
            };
            let stats = q
                .scan_columns_part(tenant, window, &part, &mut local)
                .await
                .map_err(scan_failed)?;
            let truncated = local.truncated();
            Ok::<Part, Response>((local.finish(), truncated, stats, Vec::new()))
        }
    };
    let mut done = futures::stream::iter(plan(&blocks, addrs.len() * JOBS_PER_PEER).into_iter().enumerate())
        .map(run)
        .buffered(addrs.len());
    while let Some(d) = done.next().await {
        let (values, truncated, part_stats, missing) = d?;
        if !missing.is_empty() {
            tracing::info!(
                tenant,
                ?missing,
                "a querier's block list differs from the frontend's; listing values here alone"
            );
            st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        sink.merge_values(values, truncated);
        stats.add(&part_stats);
        if sink.truncated() {
            // Full: later parts cannot change the list.
            break;
        }
    }
    let truncated = sink.truncated();
    Ok(Some((sink.finish(), truncated, stats)))
}

/// Sends `job` to the peer its number `k` picks, then to each other in turn; `None` when none
/// answered.
async fn dispatch(
    st: &AppState,
    peers: &Peers,
    addrs: &[SocketAddr],
    k: usize,
    tenant: &str,
    job: &TagValuesJob,
) -> Option<Part> {
    for attempt in 0..addrs.len() {
        let peer = addrs[(k + attempt) % addrs.len()];
        let reply: Result<TagValuesJobReply, String> = peers.post(peer, TAG_VALUES_JOB_PATH, tenant, job).await;
        let decoded = reply.and_then(|r| {
            if r.version != JOB_VERSION {
                return Err(format!(
                    "job protocol version {} (this build speaks {JOB_VERSION})",
                    r.version
                ));
            }
            let values = r
                .values
                .into_iter()
                .map(WireValue::value)
                .collect::<Result<Vec<_>, _>>()?;
            Ok((values, r.truncated, r.stats, r.missing_blocks))
        });
        match decoded {
            Ok(d) => {
                st.jobs.sent.fetch_add(1, Ordering::Relaxed);
                return Some(d);
            }
            Err(e) => tracing::warn!(%peer, error = %e, "a tag-values job failed; trying another querier"),
        }
        st.jobs.failed.fetch_add(1, Ordering::Relaxed);
    }
    None
}

/// `POST /internal/v1/jobs/tag-values`: one job of a tag-value lookup another querier is the
/// frontend of.
pub async fn tag_values_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let _slot = match super::job_slot(&st).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let job: TagValuesJob = match serde_json::from_slice(&body) {
        Ok(j) => j,
        Err(e) => return bad(format!("invalid tag-values job: {e}")),
    };
    if job.version != JOB_VERSION {
        return bad(format!(
            "unsupported job protocol version {} (this querier speaks {JOB_VERSION})",
            job.version
        ));
    }
    let query = match weft_traceql::parse(&job.query) {
        Ok(q) => q,
        Err(e) => return bad(format!("invalid tag-values job: {e}")),
    };
    let field = match tag_field(&job.field, true) {
        Ok(f) => f,
        Err(e) => return bad(format!("invalid tag-values job: {e}")),
    };
    let Some(mut sink) = ColumnTagValues::new(&query, &field, job.window, job.cap) else {
        return bad("invalid tag-values job: the lookup needs whole traces");
    };
    let q = st.querier();
    let missing = super::unknown_blocks(q, &tenant, &job.listing).await;
    let part = ScanPart {
        head: false,
        blocks: Some(job.blocks.iter().cloned().collect()),
    };
    let stats = match q.scan_columns_part(&tenant, job.window, &part, &mut sink).await {
        Ok(s) => s,
        Err(e) => return scan_failed(e),
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    let truncated = sink.truncated();
    json_reply(&TagValuesJobReply {
        version: JOB_VERSION,
        values: sink.finish().iter().map(WireValue::of).collect(),
        truncated,
        stats,
        missing_blocks: missing,
    })
}
