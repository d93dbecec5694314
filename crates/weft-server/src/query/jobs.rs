//! One query over many queriers (issue 47, ADR 10): the process that receives a query acts
//! as its frontend when `--query-peers` names queriers (`--target query-frontend` always
//! does), and every querier answers parts of a query (*jobs*): searches here, at
//! `POST /internal/v1/jobs/search`; metrics ([`metrics`]), tag lookups ([`tags`]) and the
//! service graph ([`graph`]) in their modules. The job protocol (v2) is written down in
//! `spec/jobs.md`.
//!
//! ```text
//! frontend:  head part here ─► list the tenant's blocks ─► jobs: runs of that listing, newest
//!            first, by bytes (a search's: by what it may read, heavy blocks split by row
//!            group, [`plan_search`]) ─► each to a peer (one at a time per peer; a failed or timed-out
//!            job goes to the next peer, then runs here) ─► merged in job order ─► split
//!            traces read whole once, here (Querier::finish_scan)
//! querier:   job ─► the same search, its floor raised ─► Querier::scan_part over the job's
//!            blocks ─► its hits and what it leaves to the frontend
//! ```
//!
//! A job names the listing it was planned from. A querier that does not know every block of
//! it (after polling its block list once) says which; the frontend then reads the whole query
//! itself, as before (a compaction or a new block between the listing and the job: rare, and
//! never a wrong answer).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use weft_engine::newest::{Found, Newest};
use weft_engine::search::{Hit, HitSpan, HitSpanset, Search, ServiceCount, TraceSink};
use weft_querier::scan::{PartOutcome, ScanPart, ScanStats, Window, WireOutcome};
use weft_traceql::Value;
use weft_traceql::ast::{Kind, Status};

use crate::app::AppState;
use crate::query::foreign::ForeignSearch;
use crate::query::{bad, scan_failed, text};

pub mod graph;
pub mod live;
pub mod metrics;
pub mod tags;
pub mod trace;
pub mod whole;

/// The version of the job protocol this build speaks.
pub const JOB_VERSION: u32 = 5;
/// Where a querier answers search jobs.
pub const SEARCH_JOB_PATH: &str = "/internal/v1/jobs/search";
/// How long resolved peer addresses are used before the names are resolved again.
const RESOLVE_EVERY: Duration = Duration::from_secs(5);
/// How long a querier whose job timed out, or that refused the connection, gets no new jobs
/// before a probe of its `/ready` may bring it back (a probe that fails waits as long again).
const SUSPECT_FOR: Duration = Duration::from_secs(10);
/// How long that probe waits for an answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest job body a querier takes: a listing of about 1.5 million blocks.
pub const MAX_JOB_BYTES: usize = 64 << 20;
/// Jobs per peer a search is split into: the next job of a peer is ready when one ends.
const JOBS_PER_PEER: usize = 2;

/// A part of a search for one querier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchJob {
    pub version: u32,
    /// The search as Tempo's `/api/search` takes it: `q` or `tags`, `limit`, `spss`,
    /// `minDuration`, `maxDuration`, `start`, `end`.
    pub params: HashMap<String, String>,
    /// Traces starting before this (Unix ns) cannot enter the result any more.
    pub floor: Option<u64>,
    /// The blocks this job reads, by ID.
    pub blocks: Vec<String>,
    /// Of a block in `blocks` named here, the only row groups this job reads (a large block
    /// is split between jobs by row group); the others are read whole.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub row_groups: HashMap<String, Vec<u32>>,
    /// Every block of the listing the search was planned from.
    pub listing: Vec<String>,
    /// A trace job: these traces (hex IDs), read whole and searched, instead of `blocks`.
    #[serde(default)]
    pub traces: Vec<String>,
    /// The trace IDs the frontend's recent spans hold, as filters ([`recent_filter`]; one
    /// per live store).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "filters")]
    pub recent: Vec<String>,
    /// A head job, for a live store: its recent spans not covered by `listing`, instead of
    /// `blocks` ([`live`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub head: bool,
    /// A search of Jaeger's or Zipkin's query API instead of Tempo's `params`: its query as
    /// the frontend parsed it. The reply's `found` holds its newest matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign: Option<ForeignSearch>,
}

impl SearchJob {
    /// The share of the stored spans this job reads: its blocks, some of them by row group.
    pub(crate) fn part(&self) -> ScanPart {
        part_of(&self.blocks, &self.row_groups)
    }

    /// A job of the search `params` (Tempo's) or `foreign` asks for, reading nothing yet.
    pub(crate) fn of(params: HashMap<String, String>, foreign: Option<ForeignSearch>) -> SearchJob {
        SearchJob {
            version: JOB_VERSION,
            params,
            floor: None,
            blocks: Vec::new(),
            row_groups: HashMap::new(),
            listing: Vec::new(),
            traces: Vec::new(),
            recent: Vec::new(),
            head: false,
            foreign,
        }
    }
}

/// A querier's answer to a [`SearchJob`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchJobReply {
    pub version: u32,
    /// The job's best hits (at most the search's limit), in no particular order.
    pub hits: Vec<WireHit>,
    /// A foreign search's: its newest matches (at most its limit), each as the trace ID in
    /// hex and its order key, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found: Vec<(String, u64)>,
    pub outcome: WireOutcome,
    /// A head job's: what the frontend needs besides ([`live::HeadExtras`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<live::HeadExtras>,
}

/// The `recent` field of jobs: recent-trace filters, as one string (one filter) or a list.
pub(crate) mod filters {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
        match v {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        })
    }
}

/// A [`Hit`] on the wire: IDs in hex.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireHit {
    pub trace_id: String,
    pub root_service_name: String,
    pub root_trace_name: String,
    pub start_unix_nano: u64,
    pub duration_nano: u64,
    pub spansets: Vec<WireSpanset>,
    /// `[service, spans, errors]`.
    pub service_stats: Vec<(String, u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSpanset {
    pub spans: Vec<WireSpan>,
    pub matched: usize,
    pub attributes: Vec<(String, WireValue)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSpan {
    pub span_id: String,
    pub name: String,
    pub start_unix_nano: u64,
    pub duration_nano: u64,
    pub attributes: Vec<(String, WireValue)>,
}

/// A TraceQL value on the wire. Floats travel as their IEEE 754 bits, so NaN and infinities
/// round-trip exactly; status and kind as their TraceQL literals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireValue {
    Str(String),
    Int(i64),
    FloatBits(u64),
    Bool(bool),
    Duration(i64),
    Status(String),
    Kind(String),
    Nil,
    Array(Vec<WireValue>),
}

impl WireValue {
    pub(crate) fn of(v: &Value) -> WireValue {
        match v {
            Value::Str(s) => WireValue::Str(s.clone()),
            Value::Int(i) => WireValue::Int(*i),
            Value::Float(f) => WireValue::FloatBits(f.to_bits()),
            Value::Bool(b) => WireValue::Bool(*b),
            Value::Duration(d) => WireValue::Duration(*d),
            Value::Status(s) => WireValue::Status(s.name().to_owned()),
            Value::Kind(k) => WireValue::Kind(k.name().to_owned()),
            Value::Nil => WireValue::Nil,
            Value::Array(a) => WireValue::Array(a.iter().map(WireValue::of).collect()),
        }
    }

    pub(crate) fn value(self) -> Result<Value, String> {
        Ok(match self {
            WireValue::Str(s) => Value::Str(s),
            WireValue::Int(i) => Value::Int(i),
            WireValue::FloatBits(b) => Value::Float(f64::from_bits(b)),
            WireValue::Bool(b) => Value::Bool(b),
            WireValue::Duration(d) => Value::Duration(d),
            WireValue::Status(s) => Value::Status(
                [Status::Error, Status::Ok, Status::Unset]
                    .into_iter()
                    .find(|x| x.name() == s)
                    .ok_or_else(|| format!("unknown status {s:?}"))?,
            ),
            WireValue::Kind(s) => Value::Kind(
                [
                    Kind::Unspecified,
                    Kind::Internal,
                    Kind::Server,
                    Kind::Client,
                    Kind::Producer,
                    Kind::Consumer,
                ]
                .into_iter()
                .find(|x| x.name() == s)
                .ok_or_else(|| format!("unknown span kind {s:?}"))?,
            ),
            WireValue::Nil => Value::Nil,
            WireValue::Array(a) => Value::Array(a.into_iter().map(WireValue::value).collect::<Result<_, _>>()?),
        })
    }
}

pub(crate) fn unhex<const N: usize>(s: &str) -> Result<[u8; N], String> {
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).map_err(|_| format!("invalid ID {s:?}: expected {} hex digits", 2 * N))?;
    Ok(out)
}

fn attrs_out(a: &[(String, Value)]) -> Vec<(String, WireValue)> {
    a.iter().map(|(k, v)| (k.clone(), WireValue::of(v))).collect()
}

fn attrs_in(a: Vec<(String, WireValue)>) -> Result<Vec<(String, Value)>, String> {
    a.into_iter().map(|(k, v)| Ok((k, v.value()?))).collect()
}

impl WireHit {
    pub fn of(h: &Hit) -> WireHit {
        WireHit {
            trace_id: weft_core::hex(&h.trace_id),
            root_service_name: h.root_service_name.clone(),
            root_trace_name: h.root_trace_name.clone(),
            start_unix_nano: h.start_unix_nano,
            duration_nano: h.duration_nano,
            spansets: h
                .spansets
                .iter()
                .map(|s| WireSpanset {
                    spans: s
                        .spans
                        .iter()
                        .map(|sp| WireSpan {
                            span_id: weft_core::hex(&sp.span_id),
                            name: sp.name.clone(),
                            start_unix_nano: sp.start_unix_nano,
                            duration_nano: sp.duration_nano,
                            attributes: attrs_out(&sp.attributes),
                        })
                        .collect(),
                    matched: s.matched,
                    attributes: attrs_out(&s.attributes),
                })
                .collect(),
            service_stats: h
                .service_stats
                .iter()
                .map(|c| (c.service.clone(), c.spans, c.errors))
                .collect(),
        }
    }

    pub fn hit(self) -> Result<Hit, String> {
        Ok(Hit {
            trace_id: unhex(&self.trace_id)?,
            root_service_name: self.root_service_name,
            root_trace_name: self.root_trace_name,
            start_unix_nano: self.start_unix_nano,
            duration_nano: self.duration_nano,
            spansets: self
                .spansets
                .into_iter()
                .map(|s| {
                    Ok(HitSpanset {
                        spans: s
                            .spans
                            .into_iter()
                            .map(|sp| {
                                Ok(HitSpan {
                                    span_id: unhex(&sp.span_id)?,
                                    name: sp.name,
                                    start_unix_nano: sp.start_unix_nano,
                                    duration_nano: sp.duration_nano,
                                    attributes: attrs_in(sp.attributes)?,
                                })
                            })
                            .collect::<Result<_, String>>()?,
                        matched: s.matched,
                        attributes: attrs_in(s.attributes)?,
                    })
                })
                .collect::<Result<_, String>>()?,
            service_stats: self
                .service_stats
                .into_iter()
                .map(|(service, spans, errors)| ServiceCount { service, spans, errors })
                .collect(),
        })
    }
}

/// The queriers a frontend sends jobs to: `--query-peers`, each `host:port`; a name that
/// resolves to several addresses is several queriers. Names are resolved again every few
/// seconds, so queriers behind a DNS name may come and go.
///
/// A querier that let a job time out, or refused its connection, is *suspect*: new queries
/// leave it out ([`Peers::peers`]) and a job being retried skips it, until a probe of its
/// `/ready` answers. A hung querier (stopped, or stuck in a long pause) then costs the queries
/// that had a job on it one `--query-job-timeout`, not every query after it. The same type
/// holds the live stores ([`Peers::all`]), which are never left out: each owns partitions no
/// other process answers for.
pub struct Peers {
    names: Vec<String>,
    client: reqwest::Client,
    timeout: Duration,
    resolved: parking_lot::Mutex<Option<(Instant, Vec<SocketAddr>)>>,
    suspects: Arc<parking_lot::Mutex<HashMap<SocketAddr, Suspect>>>,
}

/// A peer left out of new jobs ([`Peers`]).
#[derive(Debug, Clone, Copy)]
struct Suspect {
    /// When a probe may bring it back.
    until: Instant,
    /// A probe is running.
    probing: bool,
}

impl Peers {
    pub fn new(names: Vec<String>, timeout: Duration) -> Option<Arc<Peers>> {
        if names.is_empty() {
            return None;
        }
        Some(Peers::of(names, timeout))
    }

    /// Peers of `names`, even none (a querier that asks live stores but splits no query over
    /// other queriers).
    pub fn of(names: Vec<String>, timeout: Duration) -> Arc<Peers> {
        Arc::new(Peers {
            names,
            client: reqwest::Client::new(),
            timeout,
            resolved: parking_lot::Mutex::new(None),
            suspects: Arc::default(),
        })
    }

    /// The peers' addresses now (those of the last resolution that found any, if none does).
    async fn addrs(&self) -> Vec<SocketAddr> {
        if let Some((at, a)) = &*self.resolved.lock()
            && at.elapsed() < RESOLVE_EVERY
        {
            return a.clone();
        }
        let mut found = Vec::new();
        for name in &self.names {
            match tokio::net::lookup_host(name.as_str()).await {
                Ok(a) => found.extend(a),
                Err(e) => tracing::warn!(peer = %name, error = %e, "resolving a query peer failed"),
            }
        }
        found.sort();
        found.dedup();
        let mut held = self.resolved.lock();
        if found.is_empty()
            && let Some((_, old)) = &*held
        {
            return old.clone();
        }
        *held = Some((Instant::now(), found.clone()));
        found
    }

    /// Posts `body` as JSON to `path` on `peer` for `tenant`, within the job timeout, and
    /// decodes a 200's JSON reply.
    pub(crate) async fn post<R: serde::de::DeserializeOwned>(
        &self,
        peer: SocketAddr,
        path: &str,
        tenant: &str,
        body: &impl Serialize,
    ) -> Result<R, String> {
        let bytes = self.post_raw(peer, path, tenant, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| format!("decoding the reply: {e}"))
    }

    /// [`Peers::post`], returning a 200's body as it is. An error names the status first
    /// (`409 Conflict: …`).
    pub(crate) async fn post_raw(
        &self,
        peer: SocketAddr,
        path: &str,
        tenant: &str,
        body: &impl Serialize,
    ) -> Result<Bytes, String> {
        Ok(self.post_for_reply(peer, path, tenant, body).await?.1)
    }

    /// [`Peers::post_raw`], returning a 200's headers too.
    pub(crate) async fn post_for_reply(
        &self,
        peer: SocketAddr,
        path: &str,
        tenant: &str,
        body: &impl Serialize,
    ) -> Result<(reqwest::header::HeaderMap, Bytes), String> {
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let unreachable = |e: &reqwest::Error| {
            if e.is_timeout() || e.is_connect() {
                self.suspect(peer);
            }
        };
        let reply = self
            .client
            .post(format!("http://{peer}{path}"))
            .header(crate::tenant::ORG_HEADER, tenant)
            .header("content-type", "application/json")
            .timeout(self.timeout)
            .body(body)
            .send()
            .await
            .inspect_err(unreachable)
            .map_err(|e| format!("sending the job: {e}"))?;
        let status = reply.status();
        let headers = reply.headers().clone();
        let bytes = reply
            .bytes()
            .await
            .inspect_err(unreachable)
            .map_err(|e| format!("reading the reply: {e}"))?;
        if self.suspects.lock().remove(&peer).is_some() {
            tracing::info!(%peer, "a query peer answers again");
        }
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
        }
        Ok((headers, bytes))
    }

    /// The queriers' addresses now, without the suspect ones (every one, when all are). A
    /// suspect whose time is up is probed in the background.
    pub(crate) async fn peers(&self) -> Vec<SocketAddr> {
        let all = self.addrs().await;
        let now = Instant::now();
        let mut suspects = self.suspects.lock();
        suspects.retain(|a, _| all.contains(a));
        let mut out = Vec::with_capacity(all.len());
        for &a in &all {
            match suspects.get_mut(&a) {
                None => out.push(a),
                Some(s) if s.until <= now && !s.probing => {
                    s.probing = true;
                    self.probe(a);
                }
                Some(_) => {}
            }
        }
        if out.is_empty() { all } else { out }
    }

    /// Every address now, suspect or not (live stores).
    pub(crate) async fn all(&self) -> Vec<SocketAddr> {
        self.addrs().await
    }

    /// Whether `peer` is left out of new jobs.
    pub(crate) fn is_suspect(&self, peer: SocketAddr) -> bool {
        self.suspects.lock().contains_key(&peer)
    }

    fn suspect(&self, peer: SocketAddr) {
        let until = Instant::now() + SUSPECT_FOR;
        let mut suspects = self.suspects.lock();
        if suspects.insert(peer, Suspect { until, probing: false }).is_none() {
            tracing::warn!(%peer, "a query peer did not answer in time; new jobs leave it out until it answers a probe");
        }
    }

    /// Asks `peer`'s `/ready`: an answer ends its suspicion, anything else waits
    /// [`SUSPECT_FOR`] again.
    fn probe(&self, peer: SocketAddr) {
        let (client, suspects) = (self.client.clone(), self.suspects.clone());
        tokio::spawn(async move {
            let ok = client
                .get(format!("http://{peer}/ready"))
                .timeout(PROBE_TIMEOUT)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            let mut suspects = suspects.lock();
            if ok {
                suspects.remove(&peer);
                tracing::info!(%peer, "a query peer answers its probe; it gets jobs again");
            } else if let Some(s) = suspects.get_mut(&peer) {
                *s = Suspect {
                    until: Instant::now() + SUSPECT_FOR,
                    probing: false,
                };
            }
        });
    }
}

/// What jobs this process sent and answered, for `/metrics`.
#[derive(Debug, Default)]
pub struct JobStats {
    /// Jobs this querier answered for a frontend.
    pub served: AtomicU64,
    /// Jobs a querier answered for this frontend.
    pub sent: AtomicU64,
    /// Of those, trace jobs (split traces read whole).
    pub sent_traces: AtomicU64,
    /// Attempts that failed or timed out (the job went to the next querier).
    pub failed: AtomicU64,
    /// Jobs this frontend read itself because every querier failed them.
    pub ran_here: AtomicU64,
    /// Jobs not sent: their blocks end before the oldest trace the result keeps.
    pub skipped: AtomicU64,
    /// Queries answered here alone because a querier's block list differed from this one's.
    pub replanned: AtomicU64,
    /// Head jobs asked again because a live store found the listing stale.
    pub live_stale: AtomicU64,
    /// Head jobs a live store did not answer (the answer was partial).
    pub live_unanswered: AtomicU64,
}

impl JobStats {
    pub fn render(&self, out: &mut weft_core::prom::Exposition) {
        let name = "weft_query_jobs_total";
        out.family(
            name,
            weft_core::prom::Kind::Counter,
            "Query jobs (parts of one query on one querier, --query-peers) by what became of them.",
        );
        for (outcome, n) in [
            ("served", &self.served),
            ("sent", &self.sent),
            ("sent_traces", &self.sent_traces),
            ("failed", &self.failed),
            ("ran_here", &self.ran_here),
            ("skipped", &self.skipped),
            ("replanned", &self.replanned),
            ("live_stale", &self.live_stale),
            ("live_unanswered", &self.live_unanswered),
        ] {
            out.sample(name, &[("outcome", outcome)], n.load(Ordering::Relaxed) as f64);
        }
    }
}

/// What one job gave the frontend.
struct Done<H> {
    hits: Vec<H>,
    outcome: PartOutcome,
}

/// Runs a search over the queriers of `--query-peers` into `sink` (not yet offered
/// anything); `request` is a job of the same search ([`SearchJob::of`]), reading nothing.
/// `Ok(None)`: the queriers' block lists did not agree with this one's, so nothing was
/// decided; the caller searches here alone, into a new sink.
pub(crate) async fn search<S: SearchSink>(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    request: &SearchJob,
    window: Option<Window>,
    sink: &mut S,
) -> Result<Option<ScanStats>, Response> {
    let addrs = peers.peers().await;
    if addrs.is_empty() && st.live.is_none() {
        return Ok(None);
    }
    let width = addrs.len().max(1);
    // An empty search of the same request, for the jobs this frontend reads itself.
    let template = sink.template();
    // The head part: here, or asked of the live stores.
    let mut head = match &st.live {
        None => live::WholeHead::here(st.querier(), tenant, window, sink).await?,
        Some(live) => {
            let make = |listing: Vec<String>| SearchJob {
                listing,
                head: true,
                ..request.clone()
            };
            live::whole_head(st, live, tenant, SEARCH_JOB_PATH, make, |mut r: SearchJobReply| {
                sink.merge_hits(S::reply_hits(&mut r)?);
                Ok((r.outcome, r.head))
            })
            .await?
        }
    };
    let parts = std::mem::take(&mut head.parts);
    let (q, blocks, listing, recent, taken) = (&head.querier, &head.blocks, &head.listing, &head.recent, &head.taken);
    let jobs = plan_search(blocks, width * JOBS_PER_PEER, sink.prefilter(), sink.floor_of());
    let floor = AtomicU64::new(sink.start_floor().unwrap_or(0));
    let job_of = |floor: u64, blocks: Vec<String>, traces: Vec<String>| SearchJob {
        floor: (floor > 0).then_some(floor),
        blocks,
        listing: listing.clone(),
        traces,
        recent: recent.clone(),
        ..request.clone()
    };
    let turns = Turns::new(width);
    let run = |(k, job): (usize, Planned)| {
        let (addrs, floor, blocks, job_of, template, turns) = (&addrs, &floor, &blocks, &job_of, &template, &turns);
        async move {
            let _turn = turns.take(k).await;
            let f = floor.load(Ordering::Acquire);
            if f > 0 && job.newest < f {
                // No trace with a piece in these row groups starts late enough.
                st.jobs.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(Done {
                    hits: Vec::new(),
                    outcome: PartOutcome::before_floor(job.blocks_begun),
                });
            }
            let job = job.job(blocks, job_of(f, Vec::new(), Vec::new()));
            if let Some(d) = dispatch::<S>(st, peers, addrs, k, tenant, &job).await
                && (d.outcome.missing_blocks.is_empty() || st.live.is_none())
            {
                return Ok(d);
            }
            // Every peer failed (or, with live stores, did not know the listing): this
            // querier reads the job itself.
            let mut local = S::local(template, f);
            let outcome = q
                .scan_part(tenant, window, &job.part(), &mut local)
                .await
                .map_err(scan_failed)?;
            Ok::<_, Response>(Done {
                hits: S::local_hits(local),
                outcome,
            })
        }
    };
    // Progress: the head part is one job done, then each block job as it is merged.
    let total = 1 + jobs.len() as u64;
    let mut seen = ScanStats::default();
    for p in &parts {
        seen.add(&p.stats);
    }
    sink.progress(seen.progress(1, total));
    let mut merged = Merged {
        q,
        taken,
        floor: &floor,
        parts,
        recheck: Vec::new(),
        seen,
        done: 1,
        total,
    };
    let count = jobs.len();
    let mut jobs = assigned(jobs, width, true);
    // The newest job first, alone: a search that fills its limit there gives the others the
    // floor it reached, and the jobs whose blocks all end before it are not sent at all
    // (searching them side by side from the start cost up to 9x the CPU of one querier).
    if let Some(first) = jobs.next() {
        let d = run(first).await?;
        if !merged.absorb(st, tenant, d, sink) {
            return Ok(None);
        }
    }
    let mut done = futures::stream::iter(jobs).map(run).buffered(count.max(1));
    while let Some(d) = done.next().await {
        if !merged.absorb(st, tenant, d?, sink) {
            return Ok(None);
        }
    }
    drop(done);

    // The traces stored in several places, read whole: shared out as trace jobs when there are
    // enough of them to be worth a round trip (a structural query over root spans can leave
    // thousands), else here.
    let Merged { parts, recheck, .. } = merged;
    let (split, mut stats) = q.split_traces(tenant, window, parts, sink);
    // Those with spans in the recent spans here are read here: a querier without them (one
    // that reads blocks only, beside an all-in-one frontend) would read them in part.
    let (mut here, split): (Vec<[u8; 16]>, Vec<[u8; 16]>) =
        split.into_iter().partition(|id| q.recent_holds(tenant, id));
    for id in recheck {
        if !here.contains(&id) {
            here.push(id);
        }
    }
    stats.add(&q.read_whole(tenant, window, &here, sink).await.map_err(scan_failed)?);
    stats.add(&head.partial());
    if split.len() < TRACE_JOB_MIN || addrs.is_empty() {
        stats.add(&q.read_whole(tenant, window, &split, sink).await.map_err(scan_failed)?);
    } else {
        let f = sink.start_floor().unwrap_or(0);
        let read = |(k, ids): (usize, Vec<[u8; 16]>)| {
            let (addrs, job_of, template) = (&addrs, &job_of, &template);
            async move {
                let job = job_of(f, Vec::new(), ids.iter().map(|id| weft_core::hex(id)).collect());
                if let Some(d) = dispatch::<S>(st, peers, addrs, k, tenant, &job).await
                    && d.outcome.missing_blocks.is_empty()
                {
                    st.jobs.sent_traces.fetch_add(1, Ordering::Relaxed);
                    return Ok(d);
                }
                st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
                let mut local = S::local(template, f);
                let stats = q
                    .read_whole(tenant, window, &ids, &mut local)
                    .await
                    .map_err(scan_failed)?;
                let mut outcome = PartOutcome::before_floor(0);
                outcome.stats = stats;
                Ok::<_, Response>(Done {
                    hits: S::local_hits(local),
                    outcome,
                })
            }
        };
        let per = split.len().div_ceil(addrs.len());
        let mut done = futures::stream::iter(split.chunks(per).map(<[_]>::to_vec).enumerate())
            .map(read)
            .buffered(addrs.len());
        while let Some(d) = done.next().await {
            let d = d?;
            sink.merge_hits(d.hits);
            stats.add(&d.outcome.stats);
        }
    }
    // A foreign search's result holds traces other queriers found: read whole here.
    let found = sink.to_read();
    stats.add(&q.read_whole(tenant, window, &found, sink).await.map_err(scan_failed)?);
    sink.progress(stats.progress(total, total));
    Ok(Some(stats))
}

/// The head part of a query over whole traces, read here, then the listing the jobs share
/// (newest first, and its IDs). A block cut from the head since holds traces the head part
/// took ([`PartOutcome::handled`]): the jobs' results leave those out.
pub(crate) async fn head_part(
    q: &weft_querier::Querier,
    tenant: &str,
    window: Option<Window>,
    sink: &mut (dyn weft_engine::search::TraceSink + Send),
) -> Result<(PartOutcome, Vec<Arc<weft_block::Block>>, Vec<String>), Response> {
    let head = q
        .scan_part(tenant, window, &ScanPart::head_only(), sink)
        .await
        .map_err(scan_failed)?;
    let mut blocks = q.blocks(tenant);
    blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
    let listing = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
    Ok((head, blocks, listing))
}

/// Split traces below this many are read by the frontend itself.
pub(crate) const TRACE_JOB_MIN: usize = 64;

/// Sends a search `job` as [`dispatch_to`] does.
async fn dispatch<S: SearchSink>(
    st: &AppState,
    peers: &Peers,
    addrs: &[SocketAddr],
    k: usize,
    tenant: &str,
    job: &SearchJob,
) -> Option<Done<S::Hit>> {
    dispatch_to(
        st,
        peers,
        addrs,
        k,
        tenant,
        SEARCH_JOB_PATH,
        job,
        |mut r: SearchJobReply| {
            let hits = S::reply_hits(&mut r)?;
            let outcome = PartOutcome::from_wire(r.outcome)?;
            Ok(Done { hits, outcome })
        },
    )
    .await
}

/// A job or a reply of the job protocol: each says the version it is written in.
pub(crate) trait Versioned {
    fn version(&self) -> u32;
}

macro_rules! versioned {
    ($($t:ty),*) => {
        $(impl $crate::query::jobs::Versioned for $t {
            fn version(&self) -> u32 {
                self.version
            }
        })*
    };
}
pub(crate) use versioned;

versioned!(SearchJob, SearchJobReply);

/// Sends `job` to `path` on the peer its number `k` picks, then on each other peer in turn,
/// until one answers in this build's protocol version with a reply `decode` takes. `None`
/// when none did (each failure is logged and counted).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn dispatch_to<R: serde::de::DeserializeOwned + Versioned, T>(
    st: &AppState,
    peers: &Peers,
    addrs: &[SocketAddr],
    k: usize,
    tenant: &str,
    path: &str,
    job: &impl Serialize,
    decode: impl Fn(R) -> Result<T, String>,
) -> Option<T> {
    for attempt in 0..addrs.len() {
        let peer = addrs[(k + attempt) % addrs.len()];
        if attempt + 1 < addrs.len() && peers.is_suspect(peer) {
            continue; // another job found it hung since this query began
        }
        let reply: Result<R, String> = peers.post(peer, path, tenant, job).await;
        let decoded = reply.and_then(|r| {
            if r.version() != JOB_VERSION {
                return Err(format!(
                    "job protocol version {} (this build speaks {JOB_VERSION})",
                    r.version()
                ));
            }
            decode(r)
        });
        match decoded {
            Ok(d) => {
                st.jobs.sent.fetch_add(1, Ordering::Relaxed);
                return Some(d);
            }
            Err(e) => tracing::warn!(%peer, path, error = %e, "a query job failed; trying another querier"),
        }
        st.jobs.failed.fetch_add(1, Ordering::Relaxed);
    }
    None
}

/// What a querier needs to serve a job request: its tenant, a job slot ([`job_slot`]) and the
/// job, decoded and in this build's version; or the reply refusing it (`what` names the job
/// in the message).
pub(crate) async fn accept<J: serde::de::DeserializeOwned + Versioned>(
    st: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    what: &str,
) -> Result<(Arc<str>, weft_querier::fair::Slot, J), Response> {
    let tenant = st
        .tenants
        .resolve(headers)
        .map_err(|e| text(StatusCode::UNAUTHORIZED, e.0))?;
    let slot = job_slot(st, tenant.clone()).await?;
    let job: J = serde_json::from_slice(body).map_err(|e| bad(format!("invalid {what} job: {e}")))?;
    if job.version() != JOB_VERSION {
        return Err(bad(format!(
            "unsupported job protocol version {} (this querier speaks {JOB_VERSION})",
            job.version()
        )));
    }
    Ok((tenant, slot, job))
}

/// The refusal of a job naming a block outside the listing it was planned from (a frontend's jobs
/// are runs of its listing; a querier checks the listing, not the blocks, against its own).
pub(crate) fn unlisted(what: &str, blocks: &[String], listing: &[String]) -> Option<Response> {
    if blocks.is_empty() {
        return None;
    }
    let listed: HashSet<&str> = listing.iter().map(String::as_str).collect();
    let b = blocks.iter().find(|b| !listed.contains(b.as_str()))?;
    Some(bad(format!(
        "invalid {what} job: block {:?} is not in the job's listing",
        b.chars().take(64).collect::<String>()
    )))
}

/// The share of the stored spans a job reads: `blocks`, those named in `row_groups` by the
/// row groups listed.
pub(crate) fn part_of(blocks: &[String], row_groups: &HashMap<String, Vec<u32>>) -> ScanPart {
    let mut part = ScanPart::of_blocks(blocks.iter().cloned());
    part.row_groups = row_groups
        .iter()
        .map(|(id, rgs)| (id.clone(), rgs.iter().map(|&rg| rg as usize).collect()))
        .collect();
    part
}

/// The refusal of a job whose `row_groups` name a block it does not read.
pub(crate) fn row_groups_unread(
    what: &str,
    blocks: &[String],
    row_groups: &HashMap<String, Vec<u32>>,
) -> Option<Response> {
    let id = row_groups.keys().find(|id| !blocks.contains(id))?;
    Some(bad(format!(
        "invalid {what} job: row groups of block {:?}, which the job does not read",
        id.chars().take(64).collect::<String>()
    )))
}

/// What the frontend has merged so far: the parts' outcomes, and the traces to read whole
/// here at the end.
struct Merged<'a> {
    /// The querier the frontend reads with (its recent spans, or the live stores').
    q: &'a weft_querier::Querier,
    /// The traces the head part took (a block cut from the head since holds them again).
    taken: &'a HashSet<[u8; 16]>,
    /// The merged result's floor, for the jobs not yet sent.
    floor: &'a AtomicU64,
    parts: Vec<PartOutcome>,
    /// Hits of traces the recent spans here also hold, though the head part did not take
    /// them (no piece there passed the prefilter): a querier without those recent spans took
    /// its block piece for the whole trace. Read whole here at the end, as one scan would
    /// have deferred them.
    recheck: Vec<[u8; 16]>,
    /// What the head part and the jobs merged so far inspected, and the jobs done of `total`
    /// (the head part counts as one), for the sink's progress reports.
    seen: ScanStats,
    done: u64,
    total: u64,
}

impl Merged<'_> {
    /// Merges a job's result into `sink`, leaving out the traces the head part took. False
    /// when the job's querier did not know the listing (the search is then answered here).
    fn absorb<S: SearchSink>(&mut self, st: &AppState, tenant: &str, d: Done<S::Hit>, sink: &mut S) -> bool {
        let Done { hits, mut outcome } = d;
        if !outcome.missing_blocks.is_empty() {
            tracing::info!(tenant, missing = ?outcome.missing_blocks, "a querier's block list differs from the frontend's; searching here alone");
            st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        outcome.forget(self.taken);
        let q = self.q;
        let (partial, hits): (Vec<S::Hit>, Vec<S::Hit>) = hits
            .into_iter()
            .filter(|h| !self.taken.contains(&S::hit_id(h)))
            .partition(|h| q.recent_holds(tenant, &S::hit_id(h)));
        self.recheck.extend(partial.iter().map(S::hit_id));
        sink.merge_hits(hits);
        if let Some(f) = sink.start_floor() {
            self.floor.store(f, Ordering::Release);
        }
        self.seen.add(&outcome.stats);
        self.done += 1;
        sink.progress(self.seen.progress(self.done, self.total));
        self.parts.push(outcome);
        true
    }
}

/// A job as planned ([`plan_search`], [`plan_by_reads`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    /// Blocks of the listing (indices into it), each read whole (`None`) or by the row
    /// groups named.
    units: Vec<(usize, Option<Vec<u32>>)>,
    /// No trace with a piece in these row groups starts after this (Unix ns; for a floor of
    /// a span's start, no span starts after it): once the merged result's floor passes it,
    /// the job is not sent.
    newest: u64,
    /// The blocks this job reads whole or whose first share it holds: how many a job not
    /// sent counts as skipped, so that a block split between jobs counts once.
    blocks_begun: u64,
    /// What it was planned to cost ([`plan_shapes`]).
    cost: u64,
}

impl Planned {
    /// `base` (a job of the same search, reading nothing) reading this job's share of
    /// `blocks`, the listing it was planned from.
    fn job(&self, blocks: &[Arc<weft_block::Block>], base: SearchJob) -> SearchJob {
        let (blocks, row_groups) = self.share(blocks);
        SearchJob {
            blocks,
            row_groups,
            ..base
        }
    }

    /// This job's share of `blocks` (the listing it was planned from): the IDs of its blocks,
    /// and the row groups of those it reads in part, as jobs name them.
    pub(crate) fn share(&self, blocks: &[Arc<weft_block::Block>]) -> (Vec<String>, HashMap<String, Vec<u32>>) {
        let id = |i: usize| blocks[i].meta.block_id.clone();
        let rgs = self
            .units
            .iter()
            .filter_map(|(i, rgs)| rgs.clone().map(|rgs| (id(*i), rgs)));
        (self.units.iter().map(|&(i, _)| id(i)).collect(), rgs.collect())
    }
}

/// What reading a block's footer statistics, index and blooms costs a job, against reading one
/// of its row groups: they are read whatever the query. Measured per job, one job at a time
/// (docs/benchmarks/query-frontend.md, 2026-12-06, "per job"): a search spends about 0.4 ms on
/// each block its blooms rule out and 2.5 ms on a row group of a needle's column, a span-local
/// column scan (metrics, tag lookups) 0.17 ms and 3.8 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockShare {
    /// Searches and queries over whole traces: an eighth of a row group.
    Traces,
    /// Span-local column scans: a twenty-fourth.
    Columns,
}

impl BlockShare {
    fn divisor(self) -> u64 {
        match self {
            BlockShare::Traces => 8,
            BlockShare::Columns => 24,
        }
    }
}

/// Splits a search over `blocks` (newest first) into about `n` jobs of about equal cost, in
/// order: the first jobs hold the newest row groups, so a full result can skip the last ones.
///
/// A job's cost is the spans of the row groups it reads that the query's `prefilter` does
/// not rule out by the index's value blooms (which compaction writes): a search for a rare
/// value costs what the blocks cut from the head since the last compaction cost, as they have
/// no blooms, and little else. A block that would overfill the job being filled by half a
/// row group or more is split there into runs of its row groups, newest first (by the index's
/// trace starts, when it has them), so that such a search divides over the queriers too, and
/// jobs differ by less than a row group. Without the split, the newest blocks (unbloomed)
/// were one job, and one querier did nearly all of a needle search at any number of queriers
/// (docs/benchmarks/query-frontend.md, 2026-12-06).
pub(crate) fn plan_search(
    blocks: &[Arc<weft_block::Block>],
    n: usize,
    prefilter: &weft_engine::prefilter::Prefilter,
    floor_of: weft_engine::search::FloorOf,
) -> Vec<Planned> {
    let trace_floor = floor_of == weft_engine::search::FloorOf::TraceStart;
    let reads = |b: &weft_block::Block, rg| bloom_may_match(b, rg, |s, v| prefilter.row_group_may_match(s, v));
    plan_by_reads(blocks, n, reads, trace_floor, BlockShare::Traces)
}

/// Whether a query whose filter `may_match` tells row groups apart by their statistics and
/// value bloom may match row group `rg` of `b` by its bloom: always, in a block without blooms
/// (one cut from the head; compaction writes them).
pub(crate) fn bloom_may_match(
    b: &weft_block::Block,
    rg: usize,
    may_match: impl Fn(&weft_block::RowGroupStats, Option<&weft_block::index::Bloom>) -> bool,
) -> bool {
    let blooms = &b.index.value_blooms;
    blooms.is_empty() || may_match(&weft_block::RowGroupStats::default(), blooms.get(rg))
}

/// [`plan_search`] for any query that `reads` tells which row groups of a block it reads
/// (span-local metrics, whole-trace queries and tag lookups, without a floor: `trace_floor`
/// false); the others weigh what `share` says a block's footer and index cost.
pub(crate) fn plan_by_reads(
    blocks: &[Arc<weft_block::Block>],
    n: usize,
    reads: impl Fn(&weft_block::Block, usize) -> bool,
    trace_floor: bool,
    share: BlockShare,
) -> Vec<Planned> {
    let shapes: Vec<Shape> = blocks
        .iter()
        .map(|b| Shape {
            spans: b.meta.span_count,
            may_match: (0..b.row_group_count()).map(|rg| reads(b, rg)).collect(),
            rows: b.index.row_groups.iter().map(|r| r.rows).collect(),
            trace_starts: &b.index.trace_starts,
            max_end: b.meta.max_end_unix_nano,
        })
        .collect();
    plan_shapes(&shapes, n, trace_floor, share)
}

/// What [`plan_by_reads`] needs of a block.
struct Shape<'a> {
    /// Its spans (the meta's count).
    spans: u64,
    /// Per row group: whether the query reads it (its value bloom admits the filter; for tag
    /// names, the index does not list its keys). The others weigh nothing.
    may_match: Vec<bool>,
    /// Per row group, its spans (the index's count): what a row group read costs. The last
    /// row group of a time slice can hold a twentieth of a full one, and a block cut from the
    /// head holds a fifth more bytes per span than a compacted one, so neither the block's
    /// average nor its bytes weighed row groups as reading them costs (busiest of 4 queriers
    /// 1.11–1.27 of the ideal by bytes, 1.06–1.20 by spans, one job at a time).
    rows: Vec<u32>,
    /// The index's bounds of each row group's trace starts (time-sliced blocks), or empty.
    trace_starts: &'a [(u64, u64)],
    max_end: u64,
}

/// [`plan_search`] over the blocks' shapes. `trace_floor`: the search's floor is of a trace's
/// start (Tempo's and Jaeger's order), which the index's trace starts bound.
fn plan_shapes(blocks: &[Shape<'_>], n: usize, trace_floor: bool, share: BlockShare) -> Vec<Planned> {
    // Per block: the cost of reading its footer and index, and of each row group.
    let costs: Vec<(u64, Vec<u64>)> = blocks
        .iter()
        .map(|b| {
            let groups = b.may_match.len().max(1) as u64;
            let each = (b.spans / groups).max(share.divisor());
            let counted = b.rows.len() == b.may_match.len();
            let spans = |rg: usize| if counted { u64::from(b.rows[rg]) } else { each };
            let per_rg = (0..b.may_match.len())
                .map(|rg| if b.may_match[rg] { spans(rg).max(1) } else { 0 })
                .collect();
            (each / share.divisor(), per_rg)
        })
        .collect();
    let total: u64 = costs.iter().map(|(base, rgs)| base + rgs.iter().sum::<u64>()).sum();
    let n = n.max(1);
    let mut per = total.div_ceil(n as u64).max(1);
    // Runs of whole row groups fall a little short of `per`, which leaves a last job of the
    // shortfall: it would be a querier's third where the others have two. A share raised by
    // that job's cost over the others gives `n` jobs.
    for _ in 0..3 {
        let jobs = pack(blocks, &costs, per, trace_floor);
        match jobs.last() {
            Some(last) if jobs.len() > n => per += last.cost.div_ceil(n as u64),
            _ => return jobs,
        }
    }
    pack(blocks, &costs, per, trace_floor)
}

/// The querier (an index into `peers` of them) each job of `costs` (as planned) goes to: each
/// to the querier with the least planned so far, the costliest first (longest processing time
/// first), or in plan order when `in_order` (a search that stops early by it: the first jobs,
/// newest, then go to different queriers and run first, each querier's later jobs after them).
/// Jobs of equal cost go round the queriers in order, as job k to querier k mod n did; a job
/// planned heavier than the others is paired with a lighter one, where k mod n paired jobs by
/// their place in the plan.
pub(crate) fn assign(costs: &[u64], peers: usize, in_order: bool) -> Vec<usize> {
    let peers = peers.max(1);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    if !in_order {
        order.sort_by_key(|&j| std::cmp::Reverse(costs[j]));
    }
    let mut load = vec![(0u64, 0usize); peers];
    let mut to = vec![0; costs.len()];
    for j in order {
        let p = (0..peers).min_by_key(|&p| (load[p], p)).expect("a peer");
        load[p] = (load[p].0 + costs[j], load[p].1 + 1);
        to[j] = p;
    }
    to
}

/// `jobs` with the querier [`assign`] gives each, in plan order.
pub(crate) fn assigned(jobs: Vec<Planned>, peers: usize, in_order: bool) -> impl Iterator<Item = (usize, Planned)> {
    let to = assign(&jobs.iter().map(|j| j.cost).collect::<Vec<_>>(), peers, in_order);
    to.into_iter().zip(jobs)
}

/// The queriers' turns for the jobs of one query: a job waits for the querier [`assign`] gave
/// it before it is sent, so that each querier runs one of the query's jobs at a time while the
/// others run theirs. Every job is started at once and waits here, in plan order (the
/// semaphores are first come, first served), and a search's job reads the floor only when its
/// turn comes.
pub(crate) struct Turns(Vec<tokio::sync::Semaphore>);

impl Turns {
    pub(crate) fn new(peers: usize) -> Turns {
        Turns((0..peers.max(1)).map(|_| tokio::sync::Semaphore::new(1)).collect())
    }

    /// Waits for querier `peer`'s turn, which ends when the permit is dropped.
    pub(crate) async fn take(&self, peer: usize) -> tokio::sync::SemaphorePermit<'_> {
        let s = &self.0[peer % self.0.len()];
        s.acquire().await.expect("the semaphores are never closed")
    }
}

/// [`plan_shapes`] with a share of `per` per job; `costs` per block: its footer's and index's,
/// and each row group's.
fn pack(blocks: &[Shape<'_>], costs: &[(u64, Vec<u64>)], per: u64, trace_floor: bool) -> Vec<Planned> {
    let mut jobs = Packer {
        jobs: Vec::new(),
        open: false,
        per,
    };
    for (i, (b, (base, rg_costs))) in blocks.iter().zip(costs).enumerate() {
        let cost = base + rg_costs.iter().sum::<u64>();
        // A block that fits, or overfills the job by less than half a row group, goes whole.
        // With a quarter of a job over allowed, compacted blocks (about 60 row groups) went
        // whole three to a job: the service graph's 8 jobs over 23 blocks cost 0.05-0.13
        // CPU-s, and the busiest of 4 queriers held 1.13-1.19 of the ideal.
        let slack = rg_costs.iter().max().map_or(0, |m| m / 2);
        if cost <= jobs.room() + slack || rg_costs.len() < 2 {
            jobs.add((i, None), cost, b.max_end, true);
            continue;
        }
        // Else runs of its row groups fill this job and the next ones, newest first: in a
        // time-sliced block the index bounds each row group's trace starts, which also bound
        // a floor of the trace's start. A row group goes to the job being filled when at
        // least half of it fits.
        let timed = b.trace_starts.len() == rg_costs.len();
        // The querier counts the block (inspected or skipped) in the job holding the first.
        let order = weft_querier::scan::split_order(b.trace_starts, rg_costs.len());
        let bound = |rgs: &[u32]| {
            if trace_floor && timed {
                let latest = rgs.iter().map(|&rg| b.trace_starts[rg as usize].1).max();
                latest.unwrap_or(b.max_end).min(b.max_end)
            } else {
                b.max_end
            }
        };
        let (mut run, mut run_cost, mut begins) = (Vec::new(), *base, true);
        for rg in order {
            if run_cost + rg_costs[rg] / 2 > jobs.room() {
                // The job being filled takes the run so far, and no more.
                if !run.is_empty() {
                    let newest = bound(&run);
                    jobs.push((i, Some(std::mem::take(&mut run))), run_cost, newest, begins);
                    (run_cost, begins) = (0, false);
                }
                jobs.close();
            }
            run.push(rg as u32);
            run_cost += rg_costs[rg];
        }
        let newest = bound(&run);
        jobs.push((i, Some(run)), run_cost, newest, begins);
    }
    jobs.finish()
}

/// Jobs being filled to about `per` each ([`plan_shapes`]).
struct Packer {
    jobs: Vec<Planned>,
    /// The last job takes more.
    open: bool,
    per: u64,
}

impl Packer {
    /// What the job being filled can take before it is full (a new job's all of `per`).
    fn room(&self) -> u64 {
        match self.jobs.last() {
            Some(j) if self.open => self.per.saturating_sub(j.cost),
            _ => self.per,
        }
    }

    /// Adds a whole block to the job being filled, or to a new one if that is full or would
    /// be fuller after than it is short before.
    fn add(&mut self, unit: (usize, Option<Vec<u32>>), cost: u64, newest: u64, begins: bool) {
        let room = self.room();
        if self.open && room < self.per && cost.saturating_sub(room) > room {
            self.open = false;
        }
        self.push(unit, cost, newest, begins);
    }

    /// Adds a block, whole or by the row groups named, to the job being filled (a new one if
    /// none is).
    fn push(&mut self, unit: (usize, Option<Vec<u32>>), cost: u64, newest: u64, begins: bool) {
        if !self.open {
            self.jobs.push(Planned {
                units: Vec::new(),
                newest: 0,
                blocks_begun: 0,
                cost: 0,
            });
            self.open = true;
        }
        let job = self.jobs.last_mut().expect("pushed");
        job.newest = job.newest.max(newest);
        job.blocks_begun += u64::from(begins);
        job.units.push(unit);
        job.cost += cost;
        if job.cost >= self.per {
            self.open = false;
        }
    }

    /// The job being filled takes no more.
    fn close(&mut self) {
        self.open = false;
    }

    /// The jobs, a last one of under a quarter of `per` joined to the one before (a round
    /// trip for a scrap costs more than it saves).
    fn finish(mut self) -> Vec<Planned> {
        if self.jobs.len() >= 2 && self.jobs.last().is_some_and(|j| j.cost < self.per / 4) {
            let last = self.jobs.pop().expect("two");
            let job = self.jobs.last_mut().expect("one");
            job.newest = job.newest.max(last.newest);
            job.blocks_begun += last.blocks_begun;
            job.cost += last.cost;
            for (b, rgs) in last.units {
                match (job.units.last_mut(), rgs) {
                    // Two runs of one block are one entry (a job names a block once).
                    (Some((have_b, Some(have))), Some(more)) if *have_b == b => have.extend(more),
                    (_, rgs) => job.units.push((b, rgs)),
                }
            }
        }
        self.jobs
    }
}

/// Splits `blocks` (newest first) into at most `n` runs of about equal bytes, in order: the
/// first jobs hold the newest blocks, so a full result can skip the last ones.
pub(crate) fn plan(blocks: &[Arc<weft_block::Block>], n: usize) -> Vec<Vec<usize>> {
    let total: u64 = blocks.iter().map(|b| b.meta.size_bytes.max(1)).sum();
    let per = total.div_ceil(n.max(1) as u64).max(1);
    let mut jobs: Vec<Vec<usize>> = Vec::new();
    let mut acc = per;
    for (i, b) in blocks.iter().enumerate() {
        if acc >= per {
            jobs.push(Vec::new());
            acc = 0;
        }
        jobs.last_mut().expect("pushed").push(i);
        acc += b.meta.size_bytes.max(1);
    }
    jobs
}

/// A search sink a frontend merges job results into: Tempo's search ([`Search`], hits with
/// their spansets) or a foreign API's ([`Newest`], the IDs of the newest matches, read whole
/// here at the end).
pub(crate) trait SearchSink: TraceSink + Send {
    /// A hit as a job returns it.
    type Hit: Send;
    /// The sink of a job this frontend reads itself.
    type Local: JobSink + Sync;
    fn hit_id(h: &Self::Hit) -> [u8; 16];
    /// Adds hits another querier found, as a fork's are merged.
    fn merge_hits(&mut self, hits: Vec<Self::Hit>);
    /// An empty search of the same request, before anything was offered.
    fn template(&self) -> Self::Local;
    /// An empty search like `template`, keeping traces from `floor` on (0: all).
    fn local(template: &Self::Local, floor: u64) -> Self::Local;
    fn local_hits(local: Self::Local) -> Vec<Self::Hit>;
    /// The hits of a job's reply.
    fn reply_hits(r: &mut SearchJobReply) -> Result<Vec<Self::Hit>, String>;
    /// Traces in the result that other queriers found, to read whole here at the end.
    fn to_read(&mut self) -> Vec<[u8; 16]> {
        Vec::new()
    }
}

/// The sink a querier fills for a search job, and how its result goes into the reply.
pub(crate) trait JobSink: TraceSink + Send {
    fn reply(self, r: &mut SearchJobReply);
}

impl SearchSink for Search {
    type Hit = Hit;
    type Local = Search;

    fn hit_id(h: &Hit) -> [u8; 16] {
        h.trace_id
    }

    fn merge_hits(&mut self, hits: Vec<Hit>) {
        Search::merge_hits(self, hits)
    }

    fn template(&self) -> Search {
        self.fork()
    }

    fn local(template: &Search, floor: u64) -> Search {
        let mut s = template.fork();
        if floor > 0 {
            s.raise_floor(floor);
        }
        s
    }

    fn local_hits(local: Search) -> Vec<Hit> {
        local.finish()
    }

    fn reply_hits(r: &mut SearchJobReply) -> Result<Vec<Hit>, String> {
        std::mem::take(&mut r.hits).into_iter().map(WireHit::hit).collect()
    }
}

impl JobSink for Search {
    fn reply(self, r: &mut SearchJobReply) {
        r.hits = self.finish().iter().map(WireHit::of).collect();
    }
}

impl SearchSink for Newest {
    type Hit = Found;
    type Local = Newest;

    fn hit_id(h: &Found) -> [u8; 16] {
        h.trace_id
    }

    fn merge_hits(&mut self, hits: Vec<Found>) {
        self.merge_found(hits)
    }

    fn template(&self) -> Newest {
        self.fresh(0)
    }

    fn local(template: &Newest, floor: u64) -> Newest {
        template.fresh(floor)
    }

    fn local_hits(local: Newest) -> Vec<Found> {
        local.found()
    }

    fn reply_hits(r: &mut SearchJobReply) -> Result<Vec<Found>, String> {
        std::mem::take(&mut r.found)
            .into_iter()
            .map(|(id, key)| {
                Ok(Found {
                    trace_id: unhex(&id)?,
                    key,
                })
            })
            .collect()
    }

    fn to_read(&mut self) -> Vec<[u8; 16]> {
        Newest::to_read(self)
    }
}

impl JobSink for Newest {
    fn reply(self, r: &mut SearchJobReply) {
        r.found = self
            .found()
            .into_iter()
            .map(|f| (weft_core::hex(&f.trace_id), f.key))
            .collect();
    }
}

/// The blocks of `listing` this querier does not know, after reading its block list once
/// more if there are any (blocks written since it last polled).
pub(crate) async fn unknown_blocks(q: &weft_querier::Querier, tenant: &str, listing: &[String]) -> Vec<String> {
    let known = || -> HashSet<String> { q.blocks(tenant).iter().map(|b| b.meta.block_id.clone()).collect() };
    let mut have = known();
    if listing.iter().any(|id| !have.contains(id)) {
        if let Err(e) = q.db().poll().await {
            tracing::warn!(error = %e, "polling the block list for a job failed");
        }
        have = known();
    }
    listing.iter().filter(|id| !have.contains(*id)).cloned().collect()
}

/// The trace IDs the recent spans here hold for `tenant`, as a job carries them (`recent`:
/// a bloom filter, `Bloom::to_bytes` in base64). A querier that reads blocks only treats a
/// block's piece of such a trace as split, so the frontend reads it whole with its recent
/// spans. `None` when there are none.
pub(crate) fn recent_filter(q: &weft_querier::Querier, tenant: &str) -> Option<String> {
    use base64::Engine;
    q.recent_trace_filter(tenant)
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b.to_bytes()))
}

/// The querier a job reads with: this one, or, when the job carries its frontend's recent
/// trace IDs, this one treating those traces as split ([`weft_querier::Querier::also_held`]).
pub(crate) fn job_querier(
    q: &weft_querier::Querier,
    recent: &[String],
) -> Result<Option<weft_querier::Querier>, String> {
    if recent.is_empty() {
        return Ok(None);
    }
    let filters = recent.iter().map(|r| decode_filter(r)).collect::<Result<Vec<_>, _>>()?;
    Ok(Some(q.also_held(filters)))
}

/// A recent-trace filter from its wire form ([`recent_filter`]).
pub(crate) fn decode_filter(r: &str) -> Result<weft_block::index::Bloom, String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(r)
        .map_err(|e| format!("recent: not base64: {e}"))?;
    weft_block::index::Bloom::from_bytes(&bytes).ok_or_else(|| "recent: not a trace filter".to_string())
}

/// A job's reply as JSON.
pub(crate) fn json_reply(reply: &impl Serialize) -> Response {
    match serde_json::to_vec(reply) {
        Ok(b) => Response::builder()
            .header("content-type", "application/json")
            .body(axum::body::Body::from(b))
            .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "building the reply failed")),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the reply: {e}")),
    }
}

/// A job slot (`AppState::job_slots`), or the 429 a frontend answers by sending the job to
/// another querier.
pub(crate) async fn job_slot(st: &AppState, tenant: Arc<str>) -> Result<weft_querier::fair::Slot, Response> {
    match tokio::time::timeout(crate::query::QUERY_QUEUE_WAIT, st.job_slots.acquire(tenant)).await {
        Ok(slot) => Ok(slot),
        _ => Err(text(
            StatusCode::TOO_MANY_REQUESTS,
            "too many jobs: this querier's job slots (twice --max-concurrent-queries) stayed taken; send the job elsewhere",
        )),
    }
}

/// `POST /internal/v1/jobs/search`: one job of a search another querier is the frontend of.
pub async fn search_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match accept::<SearchJob>(&st, &headers, &body, "search").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if let Some(r) = unlisted("search", &job.blocks, &job.listing) {
        return r;
    }
    if let Some(r) = row_groups_unread("search", &job.blocks, &job.row_groups) {
        return r;
    }
    if let Some(f) = &job.foreign {
        let (lo, hi) = f.window();
        if lo > hi || f.limit == 0 {
            return bad(format!(
                "invalid search job: an empty time range ({lo} to {hi} ns) or a limit of 0 (limit {})",
                f.limit
            ));
        }
        let sink = match f.newest() {
            Ok(s) => s.fresh(job.floor.unwrap_or(0)),
            Err(e) => return bad(format!("invalid search job: {e}")),
        };
        let window = Some(f.window());
        return serve_search(&st, &tenant, &job, window, sink).await;
    }
    let (mut sink, window) = match crate::tempo::search::search_request(&job.params) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Some(f) = job.floor {
        sink.raise_floor(f);
    }
    serve_search(&st, &tenant, &job, window, sink).await
}

/// Answers search `job` with `sink`, an empty search of it.
async fn serve_search(
    st: &AppState,
    tenant: &str,
    job: &SearchJob,
    window: Option<Window>,
    mut sink: impl JobSink,
) -> Response {
    let mut reply = SearchJobReply {
        version: JOB_VERSION,
        hits: Vec::new(),
        found: Vec::new(),
        outcome: WireOutcome::default(),
        head: None,
    };
    if job.head {
        // A live store: its recent spans, against the frontend's listing.
        let (q, mut extras) = match live::head_querier(st, tenant, &job.listing).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let outcome = match q.scan_part(tenant, window, &ScanPart::head_only(), &mut sink).await {
            Ok(o) => o,
            Err(e) => return scan_failed(e),
        };
        st.jobs.served.fetch_add(1, Ordering::Relaxed);
        extras.taken = outcome.handled().iter().map(|id| weft_core::hex(id)).collect();
        reply.outcome = outcome.to_wire();
        reply.head = Some(extras);
        sink.reply(&mut reply);
        return json_reply(&reply);
    }
    let held = match job_querier(st.querier(), &job.recent) {
        Ok(h) => h,
        Err(e) => return bad(format!("invalid search job: {e}")),
    };
    let q = held.as_ref().unwrap_or(st.querier());
    let unknown = unknown_blocks(q, tenant, &job.listing).await;
    let mut outcome = if job.traces.is_empty() {
        match q.scan_part(tenant, window, &job.part(), &mut sink).await {
            Ok(o) => o.to_wire(),
            Err(e) => return scan_failed(e),
        }
    } else {
        let ids = match job.traces.iter().map(|s| unhex::<16>(s)).collect::<Result<Vec<_>, _>>() {
            Ok(ids) => ids,
            Err(e) => return bad(format!("invalid search job: {e}")),
        };
        match q.read_whole(tenant, window, &ids, &mut sink).await {
            Ok(stats) => WireOutcome {
                stats,
                saw_all: true,
                ..WireOutcome::default()
            },
            Err(e) => return scan_failed(e),
        }
    };
    let mut listed: HashSet<String> = outcome.missing_blocks.iter().cloned().collect();
    for id in unknown {
        if listed.insert(id.clone()) {
            outcome.missing_blocks.push(id);
        }
    }
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    reply.outcome = outcome;
    sink.reply(&mut reply);
    json_reply(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of `may.len()` row groups of `rg_spans` spans each; `may` says which the prefilter
    /// may match; `starts` bounds their trace starts (empty: not time-sliced).
    fn shape(starts: &[(u64, u64)], rg_spans: u64, may: Vec<bool>, max_end: u64) -> Shape<'_> {
        Shape {
            spans: rg_spans * may.len() as u64,
            rows: Vec::new(),
            may_match: may,
            trace_starts: starts,
            max_end,
        }
    }

    /// Every row group of every block, once over all jobs (a whole block counts all of its).
    fn covered(jobs: &[Planned], groups: &[usize]) -> Vec<Vec<u32>> {
        let mut seen: Vec<Vec<u32>> = vec![Vec::new(); groups.len()];
        for j in jobs {
            for (b, rgs) in &j.units {
                match rgs {
                    None => seen[*b].extend(0..groups[*b] as u32),
                    Some(r) => seen[*b].extend(r),
                }
            }
        }
        for s in &mut seen {
            s.sort_unstable();
        }
        seen
    }

    #[test]
    fn a_needle_search_splits_the_unbloomed_newest_blocks_between_jobs() {
        // Two blocks cut from the head (no blooms: every row group may match), newest first,
        // then ten compacted blocks whose blooms rule out all but one row group.
        let starts: Vec<Vec<(u64, u64)>> = (0..12u64)
            .map(|b| (0..16).map(|rg| (b * 100 + rg, 1000 - b * 50 - rg)).collect())
            .collect();
        let mut blocks = vec![
            shape(&starts[0], 1000, vec![true; 16], 2000),
            shape(&starts[1], 1000, vec![true; 16], 1900),
        ];
        for (b, s) in starts.iter().enumerate().skip(2) {
            blocks.push(shape(
                s,
                1000,
                (0..16).map(|rg| rg == 3 && b == 7).collect(),
                1800 - b as u64,
            ));
        }
        let jobs = plan_shapes(&blocks, 8, true, BlockShare::Traces);
        let all: Vec<Vec<u32>> = (0..12).map(|_| (0..16).collect()).collect();
        assert_eq!(covered(&jobs, &[16; 12]), all, "every row group read once: {jobs:?}");
        // The 33 row groups that cost divide: no job holds more than a fifth of them.
        let cost = |j: &Planned| -> usize {
            j.units
                .iter()
                .map(|(b, rgs)| match rgs {
                    None => (0..16).filter(|&rg| blocks[*b].may_match[rg]).count(),
                    Some(r) => r.iter().filter(|&&rg| blocks[*b].may_match[rg as usize]).count(),
                })
                .sum()
        };
        assert_eq!(jobs.len(), 8, "as many jobs as asked: {jobs:?}");
        // Planned costs are even: none more than a fifth over the mean.
        let mean = jobs.iter().map(|j| j.cost).sum::<u64>() / jobs.len() as u64;
        assert!(
            jobs.iter().all(|j| j.cost * 5 <= mean * 6),
            "{:?}",
            jobs.iter().map(|j| j.cost).collect::<Vec<_>>()
        );
        assert!(
            jobs.iter().all(|j| cost(j) <= 33 / 5),
            "{:?}",
            jobs.iter().map(cost).collect::<Vec<_>>()
        );
        // Newest first: the first job holds the newest block's newest row groups, and its
        // bound is their latest trace start, not the block's end.
        assert_eq!(jobs[0].units[0].0, 0);
        assert_eq!(jobs[0].units[0].1.as_ref().unwrap()[0], 0);
        assert_eq!(jobs[0].newest, 1000);
        assert!(jobs[1].newest < jobs[0].newest);
        // A block split between jobs is begun once.
        assert_eq!(jobs.iter().map(|j| j.blocks_begun).sum::<u64>(), 12);
    }

    #[test]
    fn jobs_go_to_the_least_loaded_querier_costliest_first() {
        // Equal costs go round the queriers in order, as k mod n did.
        assert_eq!(assign(&[5; 8], 4, false), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(assign(&[5; 8], 4, true), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        // Two heavy jobs are not paired on one querier because of their places in the plan:
        // k mod n put jobs 0 and 2 (12 each) on querier 0 and 1 and 3 (6 each) on querier 1.
        let to = assign(&[12, 6, 12, 6], 2, false);
        assert_ne!(to[0], to[2], "{to:?}");
        let mut load = [0u64; 2];
        for (j, &p) in to.iter().enumerate() {
            load[p] += [12, 6, 12, 6][j];
        }
        assert_eq!(load, [18, 18]);
        assert_eq!(assign(&[], 3, false), Vec::<usize>::new());
        // In plan order, the first jobs go to different queriers whatever they cost (a
        // search's newest run first), the later ones to the least loaded: job 3 joins the
        // light job 1, not the heavy job 0 it would by k mod n.
        assert_eq!(assign(&[4, 1, 4, 1, 1], 3, true), vec![0, 1, 2, 1, 1]);
        assert_eq!(
            assign(&[1, 2], 0, false),
            vec![0, 0],
            "no peers: all to the first (the caller reads them)"
        );
    }

    #[test]
    fn a_row_group_weighs_its_share_of_the_blocks_spans() {
        // Four row groups, the last a twentieth of the others (the end of a time slice): by
        // the block's average, each weighed 762 spans and the small one as much as a full one.
        let none: Vec<(u64, u64)> = Vec::new();
        let mut block = shape(&none, 0, vec![true; 4], 2000);
        block.spans = 3050;
        block.rows = vec![1000, 1000, 1000, 50];
        let jobs = plan_shapes(&[block], 3, false, BlockShare::Columns);
        let costs: Vec<u64> = jobs.iter().map(|j| j.cost).collect();
        // The first job also reads the block's footer and index: 762 / 24.
        assert_eq!(costs, vec![31 + 1000, 1000, 1000 + 50], "{jobs:?}");
        let rgs: Vec<Option<Vec<u32>>> = jobs.iter().map(|j| j.units[0].1.clone()).collect();
        assert_eq!(rgs, vec![Some(vec![0]), Some(vec![1]), Some(vec![2, 3])]);
    }

    #[test]
    fn jobs_are_filled_to_their_share_within_half_a_row_group() {
        // Ten blocks of four row groups into four jobs: two and a half blocks a job. A block
        // that fits goes whole; the one at a job's edge is split there, so no job is a block
        // heavier than another (a quarter of a job over was allowed before: 1.13-1.19 of the
        // ideal for the busiest of 4 queriers on the service graph).
        let starts: Vec<(u64, u64)> = Vec::new();
        let blocks: Vec<Shape<'_>> = (0..10)
            .map(|b| shape(&starts, 100 + b, vec![true; 4], 1000 - b))
            .collect();
        for share in [BlockShare::Traces, BlockShare::Columns] {
            let jobs = plan_shapes(&blocks, 4, true, share);
            assert_eq!(jobs.len(), 4, "{jobs:?}");
            let costs: Vec<u64> = jobs.iter().map(|j| j.cost).collect();
            let (lo, hi) = (costs.iter().min().unwrap(), costs.iter().max().unwrap());
            assert!(hi - lo <= 110, "within a row group of each other: {costs:?}");
            assert!(
                jobs.iter().any(|j| j.units.iter().any(|(_, rgs)| rgs.is_none())),
                "{jobs:?}"
            );
            let order: Vec<usize> = jobs.iter().flat_map(|j| j.units.iter().map(|u| u.0)).collect();
            assert!(order.windows(2).all(|w| w[0] <= w[1]), "newest first: {order:?}");
            assert_eq!(covered(&jobs, &[4; 10]), vec![(0..4).collect::<Vec<u32>>(); 10]);
            assert_eq!(jobs[0].newest, 1000, "a whole block is bound by its end");
            assert_eq!(jobs.iter().map(|j| j.blocks_begun).sum::<u64>(), 10);
        }
    }

    #[test]
    fn a_split_block_without_trace_starts_or_with_a_span_floor_is_bound_by_its_end() {
        let starts: Vec<(u64, u64)> = (0..8).map(|rg| (rg, 10 + rg)).collect();
        let none: Vec<(u64, u64)> = Vec::new();
        for (s, trace_floor) in [(&starts, false), (&none, true)] {
            let blocks = vec![shape(s, 1000, vec![true; 8], 5000), shape(s, 10, vec![true; 8], 4000)];
            let jobs = plan_shapes(&blocks, 4, trace_floor, BlockShare::Traces);
            assert!(jobs.len() >= 3, "{jobs:?}");
            assert!(
                jobs.iter()
                    .filter(|j| j.units.iter().any(|u| u.0 == 0))
                    .all(|j| j.newest == 5000),
                "{jobs:?}"
            );
            assert_eq!(covered(&jobs, &[8, 8]), vec![(0..8).collect::<Vec<u32>>(); 2]);
        }
    }

    #[test]
    fn any_shapes_are_covered_once_in_newest_first_order() {
        // A small deterministic generator: blocks of 1 to 12 row groups, some bloomed.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..200 {
            let count = 1 + next(12) as usize;
            let groups: Vec<usize> = (0..count).map(|_| 1 + next(12) as usize).collect();
            let starts: Vec<Vec<(u64, u64)>> = groups
                .iter()
                .map(|&g| (0..g as u64).map(|rg| (rg, next(1000))).collect())
                .collect();
            let blocks: Vec<Shape<'_>> = groups
                .iter()
                .enumerate()
                .map(|(b, &g)| {
                    let may = (0..g).map(|_| next(3) > 0).collect();
                    shape(&starts[b], 1 + next(5000), may, 10_000 - b as u64)
                })
                .collect();
            let n = 1 + next(10) as usize;
            let jobs = plan_shapes(&blocks, n, next(2) == 0, BlockShare::Traces);
            let all: Vec<Vec<u32>> = groups.iter().map(|&g| (0..g as u32).collect()).collect();
            assert_eq!(covered(&jobs, &groups), all, "{jobs:?}");
            // Blocks appear in listing order, each named once per job.
            let order: Vec<usize> = jobs.iter().flat_map(|j| j.units.iter().map(|u| u.0)).collect();
            assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
            for j in &jobs {
                let mut names: Vec<usize> = j.units.iter().map(|u| u.0).collect();
                names.dedup();
                assert_eq!(names.len(), j.units.len(), "{j:?}");
            }
            assert_eq!(jobs.iter().map(|j| j.blocks_begun).sum::<u64>(), count as u64);
            assert!(jobs.len() <= 2 * n + count, "{} jobs for n = {n}", jobs.len());
        }
    }
}
