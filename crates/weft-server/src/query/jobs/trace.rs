//! Trace by ID over many queriers (`spec/jobs.md`, "Trace jobs").
//!
//! A frontend (`--query-peers`) finds the blocks whose index may hold the trace, splits them
//! into runs of about equal bytes (oldest first, one per querier) and sends each run as a
//! *trace job* to a querier, all at once. The recent spans come from its own head or the live
//! stores, as on one querier ([`weft_querier::Querier::find_trace_reading`]). Replies are
//! OTLP `TracesData` messages, the form blocks keep spans in, and are joined in run order, so
//! the answer (and where a trace over the response cap is cut) is one querier's. A job whose
//! querier fails or times out goes to the next one, then is read here; a querier that does not
//! know a block of its run (compacted away since) makes the frontend read that run itself.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use weft_block::Block;
use weft_querier::{FoundTrace, QueryError};

use super::{JOB_VERSION, Peers, unhex};
use crate::app::AppState;
use crate::query::{bad, text};

pub const TRACE_JOB_PATH: &str = "/internal/v1/jobs/trace";

/// Reply headers of a trace job (the body is the spans).
const VERSION_HEADER: &str = "x-weft-job-version";
const TRUNCATED_HEADER: &str = "x-weft-trace-truncated";
const DAMAGED_HEADER: &str = "x-weft-damaged-blocks";
const READ_HEADER: &str = "x-weft-blocks-read";
const MISSING_HEADER: &str = "x-weft-missing-blocks";

/// A trace job: read trace `trace_id` from `blocks`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceJob {
    pub version: u32,
    /// 32 hex digits.
    pub trace_id: String,
    /// Block IDs, in the order to read them (oldest first).
    pub blocks: Vec<String>,
    /// Stop once the spans read hold more than this ([`weft_db::span_bytes`]).
    pub max_bytes: u64,
}

super::versioned!(TraceJob);

/// Trace `id` of `tenant` for every query API: read here, or on a frontend with queriers,
/// its blocks shared out as trace jobs. As [`weft_querier::Querier::find_trace_capped`].
pub(crate) async fn find_trace(
    st: &AppState,
    tenant: &str,
    id: &[u8; 16],
    range: Option<(u64, u64)>,
    max_bytes: u64,
) -> Result<FoundTrace, QueryError> {
    let q = st.querier();
    let Some(peers) = &st.peers else {
        return q.find_trace_capped(tenant, id, range, max_bytes).await;
    };
    q.find_trace_reading(tenant, id, range, max_bytes, |blocks| {
        read_split(st, peers, tenant, id, blocks, max_bytes)
    })
    .await
}

/// What one run's job gave.
struct Part {
    found: weft_db::FoundTrace,
    /// Blocks of the run the querier did not know.
    missing: bool,
}

/// Reads `blocks` (oldest first) for trace `id`: runs of them on the queriers, at once.
async fn read_split(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    id: &[u8; 16],
    blocks: Vec<Arc<Block>>,
    max_bytes: u64,
) -> Result<weft_db::FoundTrace, QueryError> {
    let q = st.querier();
    let parallel = q.config().parallelism;
    let addrs = peers.peers().await;
    // One block costs a querier a job's round trip more than reading it here.
    if blocks.len() < 2 || addrs.is_empty() {
        return Ok(q.db().read_trace(id, &blocks, max_bytes, parallel).await?);
    }
    let large_read = q.db().large_read_for(id, &blocks).await;
    let runs: Vec<Vec<Arc<Block>>> = super::plan(&blocks, addrs.len())
        .into_iter()
        .map(|run| run.into_iter().map(|i| blocks[i].clone()).collect())
        .collect();
    let hex_id = weft_core::hex(id);
    let jobs = runs.iter().enumerate().map(|(k, run)| {
        let (addrs, hex_id) = (&addrs, &hex_id);
        async move {
            let job = TraceJob {
                version: JOB_VERSION,
                trace_id: hex_id.clone(),
                blocks: run.iter().map(|b| b.meta.block_id.clone()).collect(),
                max_bytes,
            };
            match send(st, peers, addrs, k, tenant, &job).await {
                Some(Part { found, missing: false }) => Ok(found),
                sent => {
                    if sent.is_some() {
                        tracing::info!(
                            tenant,
                            "a querier's block list differs from the frontend's; reading the trace's blocks here"
                        );
                        st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
                    } else {
                        st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, QueryError>(q.db().read_trace(id, run, max_bytes, parallel).await?)
                }
            }
        }
    });
    let mut found = weft_db::FoundTrace {
        large_read,
        ..Default::default()
    };
    // Joined in run order, as one querier reads the blocks: oldest first, cut at the cap.
    for part in futures::future::join_all(jobs).await {
        let part = part?;
        if found.bytes > max_bytes {
            found.truncated = true;
            break;
        }
        found.rows.extend(part.rows);
        found.bytes += part.bytes;
        found.truncated |= part.truncated;
        found.blocks_read += part.blocks_read;
        found.damaged_blocks += part.damaged_blocks;
    }
    Ok(found)
}

/// Sends trace `job` to the querier its number `k` picks, then to each other one in turn,
/// until one answers in this build's protocol version. `None` when none did.
async fn send(
    st: &AppState,
    peers: &Peers,
    addrs: &[SocketAddr],
    k: usize,
    tenant: &str,
    job: &TraceJob,
) -> Option<Part> {
    for attempt in 0..addrs.len() {
        let peer = addrs[(k + attempt) % addrs.len()];
        if attempt + 1 < addrs.len() && peers.is_suspect(peer) {
            continue; // another job found it hung since this query began
        }
        let reply = peers
            .post_for_reply(peer, TRACE_JOB_PATH, tenant, job)
            .await
            .and_then(|(h, body)| decode_reply(tenant, &h, body));
        match reply {
            Ok(part) => {
                st.jobs.sent.fetch_add(1, Ordering::Relaxed);
                st.jobs.sent_traces.fetch_add(1, Ordering::Relaxed);
                return Some(part);
            }
            Err(e) => tracing::warn!(%peer, error = %e, "a trace job failed; trying another querier"),
        }
        st.jobs.failed.fetch_add(1, Ordering::Relaxed);
    }
    None
}

/// A trace job's reply: its spans, and what its headers say.
fn decode_reply(tenant: &str, h: &reqwest::header::HeaderMap, body: Bytes) -> Result<Part, String> {
    let header = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let number = |name: &str| -> Result<u64, String> {
        header(name)
            .unwrap_or("0")
            .parse()
            .map_err(|_| format!("{name}: not a number"))
    };
    match header(VERSION_HEADER).map(str::parse::<u32>) {
        Some(Ok(JOB_VERSION)) => {}
        v => return Err(format!("job protocol version {v:?} (this build speaks {JOB_VERSION})")),
    }
    // A reply that is not a `TracesData` message decodes to no spans, which the version
    // check above makes a querier's honest answer, not a peer of another kind.
    let rows = super::live::decode_rows(tenant, body);
    Ok(Part {
        found: weft_db::FoundTrace {
            bytes: rows.iter().map(weft_db::span_bytes).sum(),
            rows,
            truncated: header(TRUNCATED_HEADER) == Some("true"),
            blocks_read: number(READ_HEADER)?,
            damaged_blocks: number(DAMAGED_HEADER)?,
            large_read: None,
        },
        missing: header(MISSING_HEADER).is_some_and(|m| !m.is_empty()),
    })
}

/// `POST /internal/v1/jobs/trace`: the spans of one trace in some blocks, for the frontend of
/// a trace by ID.
pub async fn trace_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<TraceJob>(&st, &headers, &body, "trace").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let id = match unhex::<16>(&job.trace_id) {
        Ok(id) => id,
        Err(e) => return bad(format!("invalid trace job: {e}")),
    };
    // Block IDs are UUIDs; those not known here come back in a header, so each must be one.
    if let Some(id) = job
        .blocks
        .iter()
        .find(|id| id.is_empty() || id.len() > 64 || !id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'))
    {
        return bad(format!("invalid trace job: {id:?} is not a block ID"));
    }
    let q = st.querier();
    let missing = super::unknown_blocks(q, &tenant, &job.blocks).await;
    let order: HashMap<&str, usize> = job.blocks.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let mut known: Vec<Arc<Block>> = q
        .blocks(&tenant)
        .into_iter()
        .filter(|b| order.contains_key(b.meta.block_id.as_str()))
        .collect();
    known.sort_by_key(|b| order[b.meta.block_id.as_str()]);
    let found = match q
        .db()
        .read_trace(&id, &known, job.max_bytes, q.config().parallelism)
        .await
    {
        Ok(f) => f,
        Err(e) => return crate::query::scan_failed(e.into()),
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    Response::builder()
        .header("content-type", "application/x-protobuf")
        .header(VERSION_HEADER, JOB_VERSION)
        .header(TRUNCATED_HEADER, if found.truncated { "true" } else { "false" })
        .header(DAMAGED_HEADER, found.damaged_blocks)
        .header(READ_HEADER, found.blocks_read)
        .header(MISSING_HEADER, named(&missing))
        .body(axum::body::Body::from(weft_block::row::encode_traces_data(&found.rows)))
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "building the reply failed"))
}

/// Most missing blocks a trace job's reply names ([`MISSING_HEADER`]); the frontend only
/// needs to know that some are, and a header has to stay small.
const MISSING_NAMED: usize = 100;

/// The header value naming `missing`: the first [`MISSING_NAMED`], then `...` if there are more.
fn named(missing: &[String]) -> String {
    let mut out = missing[..missing.len().min(MISSING_NAMED)].join(",");
    if missing.len() > MISSING_NAMED {
        out.push_str(",...");
    }
    out
}
