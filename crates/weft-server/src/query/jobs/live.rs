//! Live stores (`--target live-store`, ADR 10): the recent spans of a query, read where they
//! are held.
//!
//! A live store tails the Kafka partitions it owns (`--live-store-partitions`) and answers the
//! *head part* of every kind of job: the same job, with `"head": true` and no blocks, over its
//! recent spans that the job's `listing` does not cover ([`weft_querier::live::LiveStore::snapshot`]).
//! A frontend or querier with `--live-stores` sends each query's head job to every live store
//! at once, merges the replies in live-store order as the first parts of the query, then
//! sends the blocks as usual. It reads split traces whole with the spans the live stores hold
//! of them (`POST /internal/v1/jobs/recent-traces`, [`RemoteRecent`]).
//!
//! ```text
//! frontend:   listing ─► head job to each live store ─► merged ─► block jobs ─► split traces
//!             (their recent spans fetched from the live stores whose filter names them)
//! live store: head job ─► catch up ─► snapshot against the listing ─► the part's answer,
//!             plus the traces it took and a filter of the traces it holds
//! ```
//!
//! A live store that does not answer leaves its partitions' recent spans out: the answer says
//! it is partial (`x-weft-partial-live-stores`). A listing older than what a live store still
//! holds gets 409; the frontend reads its block list again and asks again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use weft_block::Block;
use weft_block::index::Bloom;
use weft_block::row::SpanRow;
use weft_db::recent::{FrozenSpans, NoRecentSpans, RecentSpans, RecentTrace, RecentView, Snapshot};
use weft_querier::Querier;

use super::{JOB_VERSION, Peers, Versioned, unhex};
use crate::app::AppState;
use crate::query::{bad, text};

/// Where a live store returns the recent spans of traces.
pub const RECENT_TRACES_PATH: &str = "/internal/v1/jobs/recent-traces";

/// How many times a frontend reads its block list again when a live store finds its listing
/// stale, before it counts that live store as unanswered.
const STALE_RETRIES: usize = 3;

/// What a live store's reply to a head job adds to the job's reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadExtras {
    /// Search and metrics over whole traces: the traces the head part took (hex). A block cut
    /// from the recent spans since may hold them again; the block jobs leave them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken: Vec<String>,
    /// The trace IDs this live store holds for the tenant, as a recent-trace filter
    /// (`super::recent_filter`); absent when it holds none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<String>,
    /// The partitions whose recent spans the live store answered for, and how many the topic
    /// has: the frontend checks that every partition is held by exactly one live store.
    #[serde(default)]
    pub partitions: Vec<i32>,
    #[serde(default)]
    pub of: i32,
}

/// A reply to a head job: what the live store adds to it.
pub(crate) trait HeadReply {
    fn head_extras(&self) -> Option<&HeadExtras>;
}

macro_rules! head_reply {
    ($($t:ty),*) => {
        $(impl HeadReply for $t {
            fn head_extras(&self) -> Option<&HeadExtras> {
                self.head.as_ref()
            }
        })*
    };
}
head_reply!(
    super::SearchJobReply,
    super::metrics::MetricsJobReply,
    super::graph::GraphJobReply,
    super::tags::TagsJobReply,
    RecentSpansReply
);

/// The partitions the replies held, checked: a partition two live stores answered for would
/// be counted twice (an error naming it), and one no live store answered for is missing
/// (the number of such partitions).
fn check_partitions<R: HeadReply>(replies: &[(SocketAddr, R)]) -> Result<u64, String> {
    let mut owner: std::collections::HashMap<i32, SocketAddr> = std::collections::HashMap::new();
    let mut of = 0;
    for (a, r) in replies {
        let Some(x) = r.head_extras() else { continue };
        of = of.max(x.of);
        for &p in &x.partitions {
            if let Some(other) = owner.insert(p, *a) {
                return Err(format!(
                    "live stores {other} and {a} both hold partition {p}: each partition must be held by exactly one (--live-store-partitions)"
                ));
            }
        }
    }
    Ok((0..of).filter(|p| !owner.contains_key(p)).count() as u64)
}

impl HeadExtras {
    /// The trace IDs of `taken`.
    pub fn taken_ids(&self) -> Result<Vec<[u8; 16]>, String> {
        self.taken.iter().map(|s| unhex::<16>(s)).collect()
    }
}

/// The head part of one query, as the live stores answered it.
pub(crate) struct Heads<R> {
    /// The tenant's blocks the head jobs were planned against, newest first.
    pub blocks: Vec<Arc<Block>>,
    pub listing: Vec<String>,
    /// The replies, in live-store order, with the address of each.
    pub replies: Vec<(SocketAddr, R)>,
    /// Live stores that did not answer.
    pub unanswered: u64,
}

/// Sends the head job `make` builds from the listing to every live store at once. A live
/// store that finds the listing stale (409) makes this process read its block list again and
/// ask every live store again (up to [`STALE_RETRIES`] times); one that fails or answers in
/// another protocol version is counted unanswered.
pub(crate) async fn heads<R, J>(
    st: &AppState,
    live: &Peers,
    tenant: &str,
    path: &str,
    make: impl Fn(Vec<String>) -> J,
) -> Result<Heads<R>, Response>
where
    R: serde::de::DeserializeOwned + Versioned + HeadReply,
    J: Serialize,
{
    let q = st.querier();
    let addrs = live.all().await;
    let mut attempt = 0;
    loop {
        let mut blocks = q.blocks(tenant);
        blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
        let listing: Vec<String> = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
        let job = make(listing.clone());
        let asked = addrs.iter().map(|&a| {
            let job = &job;
            async move { (a, live.post::<R>(a, path, tenant, job).await) }
        });
        let answers = futures::future::join_all(asked).await;
        let stale = answers
            .iter()
            .any(|(_, r)| r.as_ref().is_err_and(|e| e.starts_with("409")));
        if stale && attempt < STALE_RETRIES {
            attempt += 1;
            st.jobs.live_stale.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = q.db().poll().await {
                tracing::warn!(error = %e, "re-reading the block list for a live store failed");
            }
            continue;
        }
        let mut replies = Vec::with_capacity(answers.len());
        // No live store resolving: every recent span is missing.
        let mut unanswered = u64::from(addrs.is_empty());
        for (a, r) in answers {
            match r {
                Ok(r) if r.version() == JOB_VERSION => replies.push((a, r)),
                Ok(r) => {
                    tracing::warn!(live_store = %a, version = r.version(), "a live store speaks another job protocol version; its recent spans are left out");
                    unanswered += 1;
                }
                Err(e) => {
                    tracing::warn!(live_store = %a, path, error = %e, "a live store did not answer; its recent spans are left out and the answer is partial");
                    unanswered += 1;
                }
            }
        }
        match check_partitions(&replies) {
            Err(e) => {
                tracing::error!(error = %e, "live stores overlap; refusing the query");
                return Err(text(StatusCode::INTERNAL_SERVER_ERROR, e));
            }
            // Partitions nobody holds: their recent spans are missing, as a live store's.
            Ok(missing) if unanswered == 0 && missing > 0 => {
                tracing::warn!(
                    missing,
                    "partitions held by no live store (--live-store-partitions); answers are partial"
                );
                unanswered = 1;
            }
            Ok(_) => {}
        }
        st.jobs.live_unanswered.fetch_add(unanswered, Ordering::Relaxed);
        return Ok(Heads {
            blocks,
            listing,
            replies,
            unanswered,
        });
    }
}

/// Each live store's recent-trace filter, by address.
pub(crate) type HeldBy = Vec<(SocketAddr, Bloom)>;

/// The live stores' filters from their head replies, for [`RemoteRecent::for_query`] and the
/// block jobs' `recent`. A filter that does not decode is a bug on the other end: an error.
pub(crate) fn filters_of<'a>(
    extras: impl Iterator<Item = (SocketAddr, Option<&'a HeadExtras>)>,
) -> Result<(HeldBy, Vec<String>), String> {
    let mut held = Vec::new();
    let mut wire = Vec::new();
    for (a, x) in extras {
        if let Some(r) = x.and_then(|x| x.recent.as_ref()) {
            held.push((a, super::decode_filter(r)?));
            wire.push(r.clone());
        }
    }
    Ok((held, wire))
}

/// The recent spans live stores hold, as a querier with `--live-stores` reads them: it scans
/// none itself (head jobs do that), and reads the spans of a trace from the live stores.
pub struct RemoteRecent {
    live: Arc<Peers>,
    /// For one query: the live stores' filters from their head replies. A trace none of them
    /// names is not asked for. `None`: ask every live store (trace by ID).
    held: Option<Vec<(SocketAddr, Bloom)>>,
    /// Reads a live store did not answer.
    failed: AtomicU64,
}

impl RemoteRecent {
    pub fn new(live: Arc<Peers>) -> RemoteRecent {
        RemoteRecent {
            live,
            held: None,
            failed: AtomicU64::new(0),
        }
    }

    /// For one query whose head replies carried `held`: a trace counts as held here when a
    /// filter names it, and its spans are asked of those live stores only.
    pub fn for_query(live: Arc<Peers>, held: Vec<(SocketAddr, Bloom)>) -> RemoteRecent {
        RemoteRecent {
            held: Some(held),
            ..RemoteRecent::new(live)
        }
    }

    /// Trace reads a live store did not answer so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    async fn fetch(&self, peer: SocketAddr, tenant: &str, id: &[u8; 16]) -> Result<Vec<SpanRow>, String> {
        let job = RecentTracesJob {
            version: JOB_VERSION,
            traces: vec![weft_core::hex(id)],
            listing: None,
            q: None,
        };
        let body = self.live.post_raw(peer, RECENT_TRACES_PATH, tenant, &job).await?;
        Ok(decode_rows(tenant, body)
            .into_iter()
            .filter(|r| r.trace_id == *id)
            .collect())
    }
}

/// The spans of an OTLP `TracesData` message, as stored.
pub(crate) fn decode_rows(tenant: &str, payload: Bytes) -> Vec<SpanRow> {
    let head = weft_head::Head::new(Arc::new(weft_admission::metrics::IngestMetrics::default()));
    let tenant: Arc<str> = Arc::from(tenant);
    head.apply(&weft_wal::Record {
        pos: weft_wal::WalPos { segment: 0, offset: 0 },
        kind: weft_wal::KIND_OTLP,
        tenant: tenant.clone(),
        payload,
    });
    let mut out = Vec::new();
    head.view(&tenant, &mut |v: RecentView<'_>| {
        if let Some(c) = v.active {
            c.copy_rows(0..c.len() as u32, &mut out);
        }
    });
    out
}

#[async_trait::async_trait]
impl RecentSpans for RemoteRecent {
    async fn catch_up(&self) {}

    fn view(&self, tenant: &str, f: &mut dyn FnMut(RecentView<'_>)) {
        NoRecentSpans.view(tenant, f)
    }

    fn frozen(&self) -> Vec<Arc<FrozenSpans>> {
        Vec::new()
    }

    fn holds(&self, _tenant: &str, id: &[u8; 16]) -> bool {
        self.held
            .as_ref()
            .is_some_and(|h| h.iter().any(|(_, f)| f.may_contain(id)))
    }

    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> RecentTrace {
        let peers: Vec<SocketAddr> = match &self.held {
            Some(h) => h.iter().filter(|(_, f)| f.may_contain(id)).map(|&(a, _)| a).collect(),
            None => self.live.all().await,
        };
        let reads = peers
            .iter()
            .map(|&p| async move { (p, self.fetch(p, tenant, id).await) });
        let mut out = RecentTrace {
            // No live store to ask (a DNS name that resolves to none): none answered.
            unanswered: u64::from(self.held.is_none() && peers.is_empty()),
            ..Default::default()
        };
        for (p, r) in futures::future::join_all(reads).await {
            match r {
                Ok(r) => out.rows.extend(r),
                Err(e) => {
                    out.unanswered += 1;
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(live_store = %p, trace_id = %weft_core::hex(id), error = %e, "reading a trace's recent spans from a live store failed; the trace may be missing spans");
                }
            }
        }
        out
    }
}

/// A request for the recent spans of traces.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecentTracesJob {
    pub version: u32,
    /// Trace IDs, hex.
    pub traces: Vec<String>,
    /// Instead of `traces`: the recent spans of the tenant that this listing (block IDs) does
    /// not cover, for a query the frontend runs alone ([`materialized`]). The reply is then a
    /// [`RecentSpansReply`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing: Option<Vec<String>>,
    /// With `listing`: only the traces a recent piece of which may match this TraceQL query
    /// (passes a prefilter leaf), each with all its recent spans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
}

/// A live store's recent spans for a query the frontend runs alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecentSpansReply {
    pub version: u32,
    /// An OTLP `TracesData` message of the spans, base64.
    pub otlp: String,
    /// The filter of every trace ID the live store holds for the tenant (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<String>,
    /// The partitions answered for ([`HeadExtras::partitions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadExtras>,
}

super::versioned!(RecentTracesJob, RecentSpansReply);

/// `POST /internal/v1/jobs/recent-traces`: the spans this live store holds of the traces
/// asked for, as an OTLP `TracesData` message (protobuf).
pub async fn recent_traces_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<RecentTracesJob>(&st, &headers, &body, "recent-traces").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(live) = &st.modules.live_store else {
        return bad("this process holds no live store: it tails no Kafka partitions");
    };
    let ids = match job.traces.iter().map(|s| unhex::<16>(s)).collect::<Result<Vec<_>, _>>() {
        Ok(ids) => ids,
        Err(e) => return bad(format!("invalid recent-traces job: {e}")),
    };
    let mut rows = Vec::new();
    if let Some(listing) = &job.listing {
        let prefilter = match job.q.as_deref().map(weft_traceql::parse).transpose() {
            Ok(q) => q.map(|q| weft_engine::prefilter::Prefilter::new(&q)),
            Err(e) => return bad(format!("invalid recent-traces job: {e}")),
        };
        let (q, extras) = match head_querier(&st, &tenant, listing).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        for id in q.recent_trace_ids(&tenant) {
            let spans = q.recent_trace(&tenant, &id).await.rows;
            if prefilter
                .as_ref()
                .is_none_or(|pf| pf.is_trivial() || pf.leaves_passed(spans.iter()) != 0)
            {
                rows.extend(spans);
            }
        }
        use base64::Engine;
        st.jobs.served.fetch_add(1, Ordering::Relaxed);
        return super::json_reply(&RecentSpansReply {
            version: JOB_VERSION,
            otlp: base64::engine::general_purpose::STANDARD.encode(weft_block::row::encode_traces_data(&rows)),
            recent: extras.recent.clone(),
            head: Some(extras),
        });
    } else {
        live.catch_up().await;
        for id in &ids {
            rows.extend(live.trace_retained(&tenant, id));
        }
    }
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(axum::body::Body::from(weft_block::row::encode_traces_data(&rows)))
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "building the reply failed"))
}

/// The querier a head job runs with on a live store: its recent spans are this store's
/// snapshot against the job's `listing`, and it sees only the listing's blocks, so a recent
/// part a listed block covers is left to the block jobs and every other one is read here.
/// With the filter of the trace IDs the snapshot holds. A 409 when the listing names blocks
/// this store does not list or is older than what it still holds (the frontend reads its
/// block list again); a 400 when this process is not a live store.
pub(crate) async fn head_querier(
    st: &AppState,
    tenant: &str,
    listing: &[String],
) -> Result<(Querier, HeadExtras), Response> {
    let Some(live) = &st.modules.live_store else {
        return Err(bad(
            "invalid head job: this process holds no live store (--target live-store, or a querier with --kafka-brokers)",
        ));
    };
    let q = st.querier();
    let unknown = super::unknown_blocks(q, tenant, listing).await;
    if !unknown.is_empty() {
        return Err(text(
            StatusCode::CONFLICT,
            format!(
                "the block listing names blocks this live store does not list ({}): read the block list again",
                unknown.join(", ")
            ),
        ));
    }
    live.catch_up().await;
    let listed: std::collections::HashSet<&String> = listing.iter().collect();
    let blocks: Vec<Arc<Block>> = q
        .blocks(tenant)
        .into_iter()
        .filter(|b| listed.contains(&b.meta.block_id))
        .collect();
    let parts = live
        .snapshot(tenant, &blocks)
        .map_err(|e| text(StatusCode::CONFLICT, e.to_string()))?;
    let hq = q
        .pinned(listing.iter().cloned())
        .with_recent(Arc::new(Snapshot { parts }));
    let extras = HeadExtras {
        taken: Vec::new(),
        recent: super::recent_filter(&hq, tenant),
        partitions: live.partitions(),
        of: live.partition_count(),
    };
    Ok((hq, extras))
}

/// The head part of a query over whole traces (a search, metrics over whole traces), read
/// here or answered by the live stores, and the listing the block jobs share.
pub(crate) struct WholeHead {
    /// The tenant's blocks the query is planned over, newest first, and their IDs.
    pub blocks: Vec<Arc<Block>>,
    pub listing: Vec<String>,
    /// The head part, or each answering live store's, in live-store order.
    pub parts: Vec<weft_querier::scan::PartOutcome>,
    /// The traces the head parts took.
    pub taken: std::collections::HashSet<[u8; 16]>,
    /// The recent-trace filters for the block jobs (this process's, or the live stores').
    pub recent: Vec<String>,
    /// The querier the frontend reads split traces with: with live stores, their recent
    /// spans come from the live stores whose filter names them.
    pub querier: Querier,
    pub remote: Option<Arc<RemoteRecent>>,
    pub unanswered: u64,
}

impl WholeHead {
    /// The head part read here, as [`whole_head`] gives the live stores'.
    pub async fn here(
        q: &Querier,
        tenant: &str,
        window: Option<weft_querier::scan::Window>,
        sink: &mut (dyn weft_engine::search::TraceSink + Send),
    ) -> Result<WholeHead, Response> {
        let (head, blocks, listing) = super::head_part(q, tenant, window, sink).await?;
        Ok(WholeHead {
            blocks,
            listing,
            taken: head.handled().clone(),
            parts: vec![head],
            recent: super::recent_filter(q, tenant).into_iter().collect(),
            querier: q.clone(),
            remote: None,
            unanswered: 0,
        })
    }

    /// What the head parts add to the query's statistics besides their outcomes: the live
    /// stores and the trace reads that did not answer.
    pub fn partial(&self) -> weft_querier::scan::ScanStats {
        weft_querier::scan::ScanStats {
            unanswered_live_stores: self.unanswered + self.remote.as_ref().map_or(0, |r| r.failed()),
            ..Default::default()
        }
    }
}

/// Asks every live store for the head part of a query over whole traces ([`heads`]);
/// `absorb` merges a reply's answer (hits, counts) into the query and returns its outcome and
/// extras. A reply `absorb` refuses counts as unanswered.
pub(crate) async fn whole_head<R, J>(
    st: &AppState,
    live: &Arc<Peers>,
    tenant: &str,
    path: &str,
    make: impl Fn(Vec<String>) -> J,
    mut absorb: impl FnMut(R) -> Result<(weft_querier::scan::WireOutcome, Option<HeadExtras>), String>,
) -> Result<WholeHead, Response>
where
    R: serde::de::DeserializeOwned + Versioned + HeadReply,
    J: Serialize,
{
    let h: Heads<R> = heads(st, live, tenant, path, make).await?;
    let mut unanswered = h.unanswered;
    let (mut parts, mut taken, mut extras) = (Vec::new(), std::collections::HashSet::new(), Vec::new());
    for (a, r) in h.replies {
        let got = absorb(r).and_then(|(o, x)| {
            let x = x.unwrap_or_default();
            let ids = x.taken_ids()?;
            Ok((weft_querier::scan::PartOutcome::from_wire(o)?, ids, x))
        });
        match got {
            Ok((o, ids, x)) => {
                parts.push(o);
                taken.extend(ids);
                extras.push((a, x));
            }
            Err(e) => {
                tracing::warn!(live_store = %a, error = %e, "a live store's head reply does not decode; its recent spans are left out");
                unanswered += 1;
            }
        }
    }
    let (held, recent) = match filters_of(extras.iter().map(|(a, x)| (*a, Some(x)))) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "a live store's recent-trace filter does not decode; split traces are read without the live stores' spans");
            (Vec::new(), Vec::new())
        }
    };
    let remote = Arc::new(RemoteRecent::for_query(live.clone(), held));
    Ok(WholeHead {
        blocks: h.blocks,
        listing: h.listing,
        parts,
        taken,
        recent,
        querier: st.querier().with_recent(remote.clone()),
        remote: Some(remote),
        unanswered,
    })
}

/// A querier for a query this process runs alone (one not split into jobs: a tag lookup or a
/// service graph filtered by whole traces, Jaeger's and Zipkin's trace searches): the live
/// stores' recent spans of `tenant` that its listing does not cover, copied here, with the
/// blocks of that listing. With `query` (TraceQL), only the traces a recent piece of which
/// may match are copied; a trace the live stores hold and did not send is then read whole
/// through them if a block piece makes it a candidate ([`RemoteRecent`] with their filters).
/// With the live stores that did not answer.
pub(crate) async fn materialized(
    st: &AppState,
    live: &Arc<Peers>,
    tenant: &str,
    query: Option<&str>,
) -> Result<(Querier, u64), Response> {
    let make = |listing: Vec<String>| RecentTracesJob {
        version: JOB_VERSION,
        traces: Vec::new(),
        listing: Some(listing),
        q: query.map(str::to_owned),
    };
    let h: Heads<RecentSpansReply> = heads(st, live, tenant, RECENT_TRACES_PATH, make).await?;
    let mut unanswered = h.unanswered;
    let mut rows = Vec::new();
    let mut held = Vec::new();
    for (a, r) in h.replies {
        let got = (|| {
            use base64::Engine;
            let otlp = base64::engine::general_purpose::STANDARD
                .decode(&r.otlp)
                .map_err(|e| format!("otlp: not base64: {e}"))?;
            let filter = r.recent.as_deref().map(super::decode_filter).transpose()?;
            Ok::<_, String>((decode_rows(tenant, Bytes::from(otlp)), filter))
        })();
        match got {
            Ok((r, filter)) => {
                rows.extend(r);
                held.extend(filter.map(|f| (a, f)));
            }
            Err(e) => {
                tracing::warn!(live_store = %a, error = %e, "a live store's recent spans do not decode; they are left out and the answer is partial");
                unanswered += 1;
            }
        }
    }
    let mut cols = weft_block::columns::SpanColumns::default();
    for r in &rows {
        cols.push_row(r);
    }
    cols.end_run();
    cols.freeze();
    let bytes = cols.memory_bytes();
    let part = Arc::new(FrozenSpans {
        tenants: vec![(Arc::from(tenant), cols)],
        // Trimmed against the listing by the live stores already: no block covers it.
        wal_end: weft_core::WalPos {
            segment: u64::MAX,
            offset: u64::MAX,
        },
        kafka: None,
        bytes,
    });
    let recent = Candidates {
        copied: Snapshot {
            parts: if rows.is_empty() { Vec::new() } else { vec![part] },
        },
        others: RemoteRecent::for_query(live.clone(), held),
    };
    Ok((st.querier().pinned(h.listing).with_recent(Arc::new(recent)), unanswered))
}

/// The recent spans a query the frontend runs alone reads: the traces the live stores copied
/// here, and any other trace they hold, read through them when a block piece of it is met.
struct Candidates {
    copied: Snapshot,
    others: RemoteRecent,
}

#[async_trait::async_trait]
impl RecentSpans for Candidates {
    async fn catch_up(&self) {}

    fn view(&self, tenant: &str, f: &mut dyn FnMut(RecentView<'_>)) {
        self.copied.view(tenant, f)
    }

    fn frozen(&self) -> Vec<Arc<FrozenSpans>> {
        self.copied.frozen()
    }

    fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.copied.holds(tenant, id) || self.others.holds(tenant, id)
    }

    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> RecentTrace {
        if self.copied.holds(tenant, id) {
            // A copied trace came with all its recent spans.
            return self.copied.trace(tenant, id).await;
        }
        self.others.trace(tenant, id).await
    }
}
