//! Tag lookups over many queriers (job protocol v2, `spec/jobs.md`): the lookups weft answers
//! from columns split as span-local metrics do. The frontend lists the recent spans' values
//! or keys with its block listing taken in the same view, sends runs of the listing to the
//! queriers, and adds their lists in job order, up to the cap.
//!
//! - tag values (`/api/v2/search/tag/{tag}/values` and the like, Jaeger's services and
//!   operations): `POST /internal/v1/jobs/tag-values`;
//! - tag names (`/api/search/tags`, `/api/v2/search/tags`): `POST /internal/v1/jobs/tag-names`.
//!
//! Lookups whose filter needs whole traces split as a search does ([`super::whole`]): the head
//! part, runs of the listing as `whole` jobs (each replying with its list and the traces it
//! leaves to the frontend), lists added in job order, split traces read whole once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use weft_engine::search::{TagNames, TagScope, TagValues, TraceSink};
use weft_engine::span_metrics::ColumnSink;
use weft_engine::tags::{ColumnTagNames, ColumnTagValues};
use weft_querier::scan::{ScanStats, Window, WireOutcome};
use weft_traceql::Value;
use weft_traceql::ast::FieldExpr;

use super::whole::{WholePart, WholeQuery};
use super::{JOB_VERSION, JOBS_PER_PEER, Peers, WireValue, json_reply};
use crate::app::AppState;
use crate::query::{Found, bad, scan_failed, tag_field};

/// Where a querier answers tag-value jobs.
pub const TAG_VALUES_JOB_PATH: &str = "/internal/v1/jobs/tag-values";
/// Where a querier answers tag-name jobs.
pub const TAG_NAMES_JOB_PATH: &str = "/internal/v1/jobs/tag-names";

/// A part of a tag lookup for one querier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TagsJob {
    pub version: u32,
    /// The filter, as TraceQL (`{ }` for none).
    pub query: String,
    /// Tag values: the field whose values are listed, as TraceQL spells it
    /// (`resource.service.name`). Absent for tag names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Inclusive, Unix ns.
    pub window: Option<(u64, u64)>,
    /// Most distinct values, or most keys per scope.
    pub cap: usize,
    pub blocks: Vec<String>,
    /// Whole traces: of a block in `blocks` named here, the only row groups this job reads, as
    /// in search jobs.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub row_groups: HashMap<String, Vec<u32>>,
    pub listing: Vec<String>,
    /// A head job, for a live store: its recent spans not covered by `listing`, instead of
    /// `blocks` (`super::live`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub head: bool,
    /// A lookup whose filter needs whole traces: the job scans whole traces and replies with
    /// what it leaves to the frontend (`outcome`), as a search job does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
    /// Whole traces: the traces the head part took that a listed block may hold again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Whole traces: the recent-trace filters, as in search jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "super::filters")]
    pub recent: Vec<String>,
    /// Whole traces: a trace job, these traces (hex) read whole, instead of `blocks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<String>,
}

/// A querier's answer to a [`TagsJob`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TagsJobReply {
    pub version: u32,
    /// Tag values: in the order the querier found them, at most `cap`.
    #[serde(default)]
    pub values: Vec<WireValue>,
    /// Tag names: the keys of each scope (`resource`, `span`, …), at most `cap` per scope.
    #[serde(default)]
    pub keys: BTreeMap<String, Vec<String>>,
    /// More values than `cap` were found.
    #[serde(default)]
    pub truncated: bool,
    pub stats: ScanStats,
    pub missing_blocks: Vec<String>,
    /// A head job's extras: the partitions the live store answered for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<super::live::HeadExtras>,
    /// Whole traces: the traces stored elsewhere too, as a search job's reply has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<WireOutcome>,
}

super::versioned!(TagsJob, TagsJobReply);

/// A lookup from columns that a frontend splits into [`TagsJob`]s.
trait Lookup: ColumnSink + Send + Sized + 'static {
    /// Where queriers answer its jobs.
    const PATH: &'static str;
    /// Adds what a querier listed for the next part, in job order.
    fn absorb(&mut self, part: TagsJobReply) -> Result<(), String>;
    /// What this sink (a job's) listed.
    fn listed(self, reply: &mut TagsJobReply);
    /// Full: later parts cannot change the answer.
    fn full(&self) -> bool;
    /// Whether it can ever be [`Lookup::full`].
    const CAN_FILL: bool;
}

/// A reply's values, decoded.
fn values_in(part: TagsJobReply) -> Result<(Vec<Value>, bool), String> {
    let values = part
        .values
        .into_iter()
        .map(WireValue::value)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((values, part.truncated))
}

/// A reply's keys per scope, decoded.
fn keys_in(part: TagsJobReply) -> Result<BTreeMap<TagScope, BTreeSet<String>>, String> {
    let mut keys = BTreeMap::new();
    for (scope, names) in part.keys {
        let s = TagScope::parse(&scope).ok_or_else(|| format!("unknown tag scope {scope:?}"))?;
        keys.insert(s, names.into_iter().collect::<BTreeSet<String>>());
    }
    Ok(keys)
}

/// Keys per scope for a reply.
fn keys_out(keys: BTreeMap<TagScope, BTreeSet<String>>) -> BTreeMap<String, Vec<String>> {
    keys.into_iter()
        .map(|(scope, keys)| (scope.name().to_owned(), keys.into_iter().collect()))
        .collect()
}

impl Lookup for ColumnTagValues {
    const PATH: &'static str = TAG_VALUES_JOB_PATH;

    fn absorb(&mut self, part: TagsJobReply) -> Result<(), String> {
        let (values, truncated) = values_in(part)?;
        self.merge_values(values, truncated);
        Ok(())
    }

    fn listed(self, reply: &mut TagsJobReply) {
        reply.truncated = self.truncated();
        reply.values = self.finish().iter().map(WireValue::of).collect();
    }

    fn full(&self) -> bool {
        self.truncated()
    }

    const CAN_FILL: bool = true;
}

impl Lookup for ColumnTagNames {
    const PATH: &'static str = TAG_NAMES_JOB_PATH;

    fn absorb(&mut self, part: TagsJobReply) -> Result<(), String> {
        self.merge_keys(keys_in(part)?);
        Ok(())
    }

    fn listed(self, reply: &mut TagsJobReply) {
        reply.keys = keys_out(self.keys);
    }

    fn full(&self) -> bool {
        false
    }

    const CAN_FILL: bool = false;
}

/// A lookup whose filter needs whole traces, split as a search is: the head part, jobs over
/// runs of the listing (`whole`), lists added in job order, split traces read whole here.
trait WholeLookup: TraceSink + Send + Sized + 'static {
    const PATH: &'static str;
    /// An empty lookup of the same query, for a part read here.
    fn empty_like(&self) -> Self;
    /// Adds what a part listed, in job order.
    fn absorb(&mut self, part: TagsJobReply) -> Result<(), String>;
    /// What this lookup (a part's) listed.
    fn listed(self, reply: &mut TagsJobReply);
}

impl WholeLookup for TagValues {
    const PATH: &'static str = TAG_VALUES_JOB_PATH;

    fn empty_like(&self) -> Self {
        TagValues::empty_like(self)
    }

    fn absorb(&mut self, part: TagsJobReply) -> Result<(), String> {
        let (values, truncated) = values_in(part)?;
        self.merge_values(values, truncated);
        Ok(())
    }

    fn listed(self, reply: &mut TagsJobReply) {
        reply.truncated = self.truncated();
        reply.values = self.finish().iter().map(WireValue::of).collect();
    }
}

impl WholeLookup for TagNames {
    const PATH: &'static str = TAG_NAMES_JOB_PATH;

    fn empty_like(&self) -> Self {
        TagNames::empty_like(self)
    }

    fn absorb(&mut self, part: TagsJobReply) -> Result<(), String> {
        self.merge_keys(keys_in(part)?);
        Ok(())
    }

    fn listed(self, reply: &mut TagsJobReply) {
        reply.keys = keys_out(self.keys);
    }
}

/// Lists the values of `field` over the queriers of `--query-peers`: from columns when the
/// filter is span-local, else over whole traces as a search is split. `Ok(None)`: a querier's
/// block list did not agree with this one's (or no querier is known); the caller looks it up
/// here alone.
pub(crate) async fn tag_values(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    query: &weft_traceql::Query,
    field: &FieldExpr,
    window: Option<Window>,
    cap: usize,
) -> Result<Option<Found<Vec<Value>>>, Response> {
    let job = template(query, Some(field.to_string()), window, cap);
    if let Some(sink) = ColumnTagValues::new(query, field, window, cap) {
        return Ok(lookup(st, peers, tenant, window, sink, job)
            .await?
            .map(|(sink, stats)| Found {
                truncated: sink.truncated(),
                jobs: sink.jobs,
                list: sink.finish(),
                stats,
            }));
    }
    let mut sink = TagValues::new(query, field.clone(), cap).map_err(crate::query::eval_error)?;
    let Some(stats) = whole_lookup(st, peers, tenant, window, &mut sink, job).await? else {
        return Ok(None);
    };
    Ok(Some(Found {
        truncated: sink.truncated(),
        jobs: sink.jobs,
        list: sink.finish(),
        stats,
    }))
}

/// The attribute keys per scope over the queriers of `--query-peers`, as [`tag_values`].
pub(crate) async fn tag_names(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    query: &weft_traceql::Query,
    window: Option<Window>,
    cap: usize,
) -> Result<Option<Found<BTreeMap<TagScope, BTreeSet<String>>>>, Response> {
    let job = template(query, None, window, cap);
    if let Some(sink) = ColumnTagNames::new(query, window, cap) {
        return Ok(lookup(st, peers, tenant, window, sink, job)
            .await?
            .map(|(sink, stats)| Found::keys(sink.keys, stats, sink.jobs)));
    }
    let mut sink = TagNames::new(query, cap).map_err(crate::query::eval_error)?;
    let found = whole_lookup(st, peers, tenant, window, &mut sink, job).await?;
    Ok(found.map(|stats| Found::keys(sink.keys, stats, sink.jobs)))
}

/// Runs a whole-trace lookup over the queriers as a search is split ([`super::whole`]).
async fn whole_lookup<S: WholeLookup + Sync>(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    window: Option<Window>,
    sink: &mut S,
    template: TagsJob,
) -> Result<Option<ScanStats>, Response> {
    let query = WholeTags {
        template: TagsJob {
            whole: true,
            ..template
        },
        empty: sink.empty_like(),
    };
    super::whole::run(st, peers, tenant, window, &query, sink).await
}

/// A whole-trace lookup, as [`super::whole`] splits it: a reply is the state it merges.
struct WholeTags<S> {
    template: TagsJob,
    empty: S,
}

impl<S: WholeLookup + Sync> WholeQuery for WholeTags<S> {
    type Sink = S;
    type State = TagsJobReply;
    type Job = TagsJob;
    type Reply = TagsJobReply;
    const PATH: &'static str = S::PATH;

    fn sink(&self) -> Result<S, Box<Response>> {
        Ok(self.empty.empty_like())
    }

    fn job(&self, p: WholePart) -> TagsJob {
        TagsJob {
            blocks: p.blocks,
            row_groups: p.row_groups,
            listing: p.listing,
            recent: p.recent,
            exclude: p.exclude,
            traces: p.traces,
            head: p.head,
            ..self.template.clone()
        }
    }

    fn decode(&self, mut r: TagsJobReply) -> Result<(TagsJobReply, WireOutcome), String> {
        let mut outcome = r.outcome.take().ok_or("no outcome for whole traces")?;
        outcome.missing_blocks.append(&mut r.missing_blocks);
        Ok((r, outcome))
    }

    fn state(&self, sink: S) -> TagsJobReply {
        let mut reply = TagsJobReply {
            version: JOB_VERSION,
            ..TagsJobReply::default()
        };
        sink.listed(&mut reply);
        reply
    }

    fn merge(&self, into: &mut S, s: TagsJobReply) -> Result<(), String> {
        into.absorb(s)
    }
}

fn template(query: &weft_traceql::Query, field: Option<String>, window: Option<Window>, cap: usize) -> TagsJob {
    TagsJob {
        version: JOB_VERSION,
        query: query.to_string(),
        field,
        window,
        cap,
        blocks: Vec::new(),
        row_groups: HashMap::new(),
        listing: Vec::new(),
        head: false,
        whole: false,
        exclude: Vec::new(),
        recent: Vec::new(),
        traces: Vec::new(),
    }
}

/// Runs a lookup over the queriers: the recent spans here into `sink`, then runs of the
/// block listing as jobs like `template`, added in job order until `sink` is full.
async fn lookup<S: Lookup>(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    window: Option<Window>,
    mut sink: S,
    template: TagsJob,
) -> Result<Option<(S, ScanStats)>, Response> {
    let addrs = peers.peers().await;
    if addrs.is_empty() && st.live.is_none() {
        return Ok(None);
    }
    let width = addrs.len().max(1);
    let q = st.querier();
    let (mut stats, blocks, listing) = match &st.live {
        // The recent spans here, with the listing taken in the same view.
        None => {
            let (stats, mut blocks) = q
                .scan_columns_head(tenant, window, &mut sink)
                .await
                .map_err(scan_failed)?;
            blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
            let listing: Vec<String> = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
            (stats, blocks, listing)
        }
        // The live stores' lists against the listing, in live-store order.
        Some(live) => {
            let h: super::live::Heads<TagsJobReply> =
                super::live::heads(st, live, tenant, S::PATH, |listing| TagsJob {
                    listing,
                    head: true,
                    ..template.clone()
                })
                .await?;
            let mut stats = ScanStats {
                unanswered_live_stores: h.unanswered,
                ..ScanStats::default()
            };
            for (a, reply) in h.replies {
                let part_stats = reply.stats;
                match sink.absorb(reply) {
                    Ok(()) => stats.add(&part_stats),
                    Err(e) => {
                        tracing::warn!(live_store = %a, error = %e, "a live store's tag list does not decode; its recent spans are left out");
                        stats.unanswered_live_stores += 1;
                    }
                }
            }
            (stats, h.blocks, h.listing)
        }
    };
    let fresh = sink.fork();
    // Weighed by the row groups the lookup reads, a heavy block split by row group, as a
    // search's jobs are: names of a row group the index lists keys for cost next to nothing,
    // so a names lookup reads mostly the blocks cut from the head since the last compaction
    // (which have no key lists), and by bytes those were one job on one querier.
    let keys = sink.takes_row_group_keys();
    let reads = |b: &weft_block::Block, rg| {
        !(keys && b.index.keys.is_some()) && super::bloom_may_match(b, rg, |s, v| sink.row_group_may_match(s, v))
    };
    let jobs = super::plan_by_reads(&blocks, width * JOBS_PER_PEER, reads, false, super::BlockShare::Columns);
    // Progress, as a metrics query tells it: the recent spans are one unit, each job one, and
    // the jobs a full list leaves unsent count as done.
    let total = 1 + jobs.len() as u64;
    let mut merged = 1;
    if sink.full() {
        // The recent spans filled the list: no block can change it.
        sink.progress(stats.progress(total, total));
        return Ok(Some((sink, stats)));
    }
    sink.progress(stats.progress(merged, total));
    let turns = super::Turns::new(width);
    let run = |(k, job): (usize, super::Planned)| {
        let (addrs, listing, blocks, template, fresh, turns) = (&addrs, &listing, &blocks, &template, &fresh, &turns);
        async move {
            let _turn = turns.take(k).await;
            let (ids, row_groups) = job.share(blocks);
            let job = TagsJob {
                blocks: ids,
                row_groups,
                listing: listing.clone(),
                ..template.clone()
            };
            if let Some(part) =
                super::dispatch_to(st, peers, addrs, k, tenant, S::PATH, &job, Ok::<TagsJobReply, String>).await
                && (part.missing_blocks.is_empty() || st.live.is_none())
            {
                return Ok(part);
            }
            st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
            let mut local = fresh.fork();
            let part = super::part_of(&job.blocks, &job.row_groups);
            let stats = q
                .scan_columns_part(tenant, window, &part, &mut local)
                .await
                .map_err(scan_failed)?;
            let mut reply = TagsJobReply {
                version: JOB_VERSION,
                stats,
                ..TagsJobReply::default()
            };
            local.listed(&mut reply);
            Ok::<TagsJobReply, Response>(reply)
        }
    };
    let count = jobs.len().max(1);
    let mut jobs = super::assigned(jobs, width, S::CAN_FILL);
    // A lookup that can fill (values, with a cap) sends the newest job first, alone, as a search
    // does: a list it fills leaves the others unsent. Side by side from the start, each querier
    // paid its job's fixed cost for nothing (CPU per querier 1.4x, 2.4x, 2.9x the ideal at 1, 2
    // and 4 queriers for a user-ID lookup capped in its first block). A lookup that cannot
    // fill (names) sends them all at once.
    let first = if S::CAN_FILL { jobs.next() } else { None };
    let mut done = futures::stream::iter(first)
        .map(&run)
        .buffered(1)
        .chain(futures::stream::iter(jobs).map(&run).buffered(count));
    while let Some(part) = done.next().await {
        let part = part?;
        if !part.missing_blocks.is_empty() {
            tracing::info!(
                tenant,
                missing = ?part.missing_blocks,
                "a querier's block list differs from the frontend's; looking tags up here alone"
            );
            st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        stats.add(&part.stats);
        if let Err(e) = sink.absorb(part) {
            tracing::warn!(tenant, error = %e, "a querier's tag list does not decode; looking tags up here alone");
            return Ok(None);
        }
        merged += 1;
        if sink.full() {
            // Later parts cannot change the list.
            merged = total;
        }
        sink.progress(stats.progress(merged, total));
        if merged == total {
            break;
        }
    }
    Ok(Some((sink, stats)))
}

/// `POST /internal/v1/jobs/tag-values`: one job of a tag-value lookup another querier is the
/// frontend of.
pub async fn tag_values_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<TagsJob>(&st, &headers, &body, "tag-values").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if let Some(r) = super::unlisted("tag-values", &job.blocks, &job.listing) {
        return r;
    }
    let field = |job: &TagsJob| tag_field(job.field.as_deref().ok_or("no field")?, true);
    if job.whole {
        return serve_whole(&st, &tenant, job, "tag-values", |job, query| {
            TagValues::new(query, field(job)?, job.cap).map_err(|e| e.to_string())
        })
        .await;
    }
    serve(&st, &tenant, job, "tag-values", |job, query| {
        ColumnTagValues::new(query, &field(job)?, job.window, job.cap)
            .ok_or_else(|| "the lookup needs whole traces".into())
    })
    .await
}

/// `POST /internal/v1/jobs/tag-names`: one job of a tag-name lookup another querier is the
/// frontend of.
pub async fn tag_names_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<TagsJob>(&st, &headers, &body, "tag-names").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if let Some(r) = super::unlisted("tag-names", &job.blocks, &job.listing) {
        return r;
    }
    if job.whole {
        return serve_whole(&st, &tenant, job, "tag-names", |job, query| {
            TagNames::new(query, job.cap).map_err(|e| e.to_string())
        })
        .await;
    }
    serve(&st, &tenant, job, "tag-names", |job, query| {
        ColumnTagNames::new(query, job.window, job.cap).ok_or_else(|| "the lookup needs whole traces".into())
    })
    .await
}

/// Answers a whole-trace tag job (`whole`) with the lookup `make` builds for it: its head part
/// on a live store, a trace job, or the job's blocks, with the outcome a search job replies
/// with.
async fn serve_whole<S: WholeLookup>(
    st: &AppState,
    tenant: &str,
    job: TagsJob,
    what: &str,
    make: impl FnOnce(&TagsJob, &weft_traceql::Query) -> Result<S, String>,
) -> Response {
    let made = window_ok(&job)
        .and_then(|()| weft_traceql::parse(&job.query).map_err(|e| e.to_string()))
        .and_then(|query| make(&job, &query));
    let mut sink = match made {
        Ok(s) => s,
        Err(e) => return bad(format!("invalid {what} job: {e}")),
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
    let served = match super::whole::serve(st, tenant, job.window, &part, what, &mut sink).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    let mut reply = TagsJobReply {
        version: JOB_VERSION,
        stats: served.outcome.stats,
        missing_blocks: served.missing_blocks,
        head: served.head,
        outcome: Some(served.outcome),
        ..TagsJobReply::default()
    };
    sink.listed(&mut reply);
    json_reply(&reply)
}

/// A tag job's window, if it has one, must not end before it starts.
fn window_ok(job: &TagsJob) -> Result<(), String> {
    match job.window {
        Some((lo, hi)) if lo > hi => Err(format!("the window ends ({hi}) before it starts ({lo})")),
        _ => Ok(()),
    }
}

/// Answers a tag job from columns with the sink `make` builds for it.
async fn serve<S: Lookup>(
    st: &AppState,
    tenant: &str,
    job: TagsJob,
    what: &str,
    make: impl FnOnce(&TagsJob, &weft_traceql::Query) -> Result<S, String>,
) -> Response {
    let made = window_ok(&job)
        .and_then(|()| {
            if !(job.exclude.is_empty() && job.recent.is_empty() && job.traces.is_empty()) {
                Err("`exclude`, `recent` and `traces` are for a lookup over whole traces (`whole`)".into())
            } else if job.head && !job.row_groups.is_empty() {
                Err("`row_groups` is for a job that reads blocks, not a head job".into())
            } else {
                Ok(())
            }
        })
        .and_then(|()| weft_traceql::parse(&job.query).map_err(|e| e.to_string()))
        .and_then(|query| make(&job, &query));
    let mut sink = match made {
        Ok(s) => s,
        Err(e) => return bad(format!("invalid {what} job: {e}")),
    };
    if job.head {
        // A live store: its recent spans, against the frontend's listing.
        let (q, extras) = match super::live::head_querier(st, tenant, &job.listing).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let stats = match q.scan_columns_head(tenant, job.window, &mut sink).await {
            Ok((s, _)) => s,
            Err(e) => return scan_failed(e),
        };
        st.jobs.served.fetch_add(1, Ordering::Relaxed);
        let mut reply = TagsJobReply {
            version: JOB_VERSION,
            stats,
            head: Some(extras),
            ..TagsJobReply::default()
        };
        sink.listed(&mut reply);
        return json_reply(&reply);
    }
    if let Some(r) = super::row_groups_unread(what, &job.blocks, &job.row_groups) {
        return r;
    }
    let q = st.querier();
    let missing = super::unknown_blocks(q, tenant, &job.listing).await;
    let part = super::part_of(&job.blocks, &job.row_groups);
    let stats = match q.scan_columns_part(tenant, job.window, &part, &mut sink).await {
        Ok(s) => s,
        Err(e) => return scan_failed(e),
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    let mut reply = TagsJobReply {
        version: JOB_VERSION,
        stats,
        missing_blocks: missing,
        ..TagsJobReply::default()
    };
    sink.listed(&mut reply);
    json_reply(&reply)
}
