//! TraceQL metrics over many queriers (job protocol v2, `spec/jobs.md`). Span-local ones: the
//! frontend counts the recent spans itself, then sends runs of its block listing to the
//! queriers (all at once, one per querier at a time: a metrics query reads every block in its
//! range) and adds their counts in job order (`MetricsRun::merge_state`). Metrics over whole
//! traces (structural queries) split as a search does ([`super::whole`]). Queriers answer at
//! `POST /internal/v1/jobs/metrics`.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use weft_engine::search::{Metrics, Watch};
use weft_engine::span_metrics::SpanMetrics;
use weft_querier::scan::{ScanStats, Window, WireOutcome};
use weft_traceql::metrics::sketch::{Quantiles, Sketch};
use weft_traceql::metrics::{AccState, CompareState, ExactSum, GroupState, StepData};
use weft_traceql::{Exemplar, parse};

use super::whole::{WholePart, WholeQuery};
use super::{JOB_VERSION, JOBS_PER_PEER, Peers, WireValue, unhex};
use crate::app::AppState;
use crate::query::{bad, scan_failed, text};
use crate::tempo::metrics::MetricsRequest;

/// Where a querier answers metrics jobs.
pub const METRICS_JOB_PATH: &str = "/internal/v1/jobs/metrics";

/// A part of a span-local metrics query for one querier. The range is resolved by the
/// frontend, so every part counts the same steps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetricsJob {
    pub version: u32,
    pub q: String,
    /// Unix ns, inclusive.
    pub start: u64,
    /// Unix ns, exclusive.
    pub end: u64,
    pub step: u64,
    pub exemplars: usize,
    /// The frontend's `--max-metrics-series` and `--max-metrics-points`.
    pub max_series: usize,
    pub max_points: u64,
    pub blocks: Vec<String>,
    /// Span-local: of a block in `blocks` named here, the only row groups this job reads, as
    /// in search jobs.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub row_groups: HashMap<String, Vec<u32>>,
    pub listing: Vec<String>,
    /// A query over whole traces (not span-local): the job scans whole traces and replies
    /// with what it leaves to the frontend too (`outcome`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
    /// Whole traces: the traces the frontend's head part took (hex) that a block of the
    /// listing may hold again; the job skips their pieces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Whole traces: the frontend's recent-trace filter, as in search jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "super::filters")]
    pub recent: Vec<String>,
    /// Whole traces: a trace job, these traces (hex IDs) read whole and counted, instead of
    /// `blocks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<String>,
    /// A head job, for a live store: its recent spans not covered by `listing`, instead of
    /// `blocks` (`super::live`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub head: bool,
}

super::versioned!(MetricsJob, MetricsJobReply);

impl MetricsJob {
    /// A job of query `r` with the frontend's limits, reading nothing yet (`whole`: over whole
    /// traces).
    fn of(r: &MetricsRequest, max_series: usize, max_points: u64, whole: bool) -> MetricsJob {
        MetricsJob {
            version: JOB_VERSION,
            q: r.q.clone(),
            start: r.start,
            end: r.end,
            step: r.step,
            exemplars: r.exemplars,
            max_series,
            max_points,
            blocks: Vec::new(),
            row_groups: HashMap::new(),
            listing: Vec::new(),
            whole,
            exclude: Vec::new(),
            recent: Vec::new(),
            traces: Vec::new(),
            head: false,
        }
    }
}

/// A querier's answer to a [`MetricsJob`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetricsJobReply {
    pub version: u32,
    /// What each metrics query of it (one, or each operand of arithmetic) counted.
    pub state: Vec<WireAcc>,
    pub stats: ScanStats,
    /// Blocks of the listing the querier does not know.
    pub missing_blocks: Vec<String>,
    /// Whole traces: the traces stored elsewhere too, as a search job's reply has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<WireOutcome>,
    /// A head job's extras (whole traces: the traces taken, and the live store's filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<super::live::HeadExtras>,
}

/// An [`AccState`] on the wire: floats as their IEEE 754 bits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireAcc {
    pub groups: Vec<WireGroup>,
    pub over_limit: bool,
    pub compare: [Vec<(String, WireCompare)>; 2],
    pub exemplars: Vec<(usize, WireExemplar)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireGroup {
    pub by: Vec<WireValue>,
    pub bucket: Option<u64>,
    pub data: WireData,
    pub used: bool,
}

/// Per-step state; floats as bits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireData {
    Count(Vec<u64>),
    Min(Vec<Option<u64>>),
    Max(Vec<Option<u64>>),
    /// Exact sums ([`WireSum`]).
    Sum(Vec<Option<WireSum>>),
    /// `[sum, count]`.
    Avg(Vec<(WireSum, u64)>),
    /// Quantiles: per step, every value counted (bits), or past 1,024 of them a sketch.
    Values(Vec<WireQuantiles>),
}

/// One step of `quantile_over_time` on the wire (`weft_traceql::metrics::sketch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WireQuantiles {
    /// The values, as IEEE 754 bits.
    Exact(Vec<u64>),
    /// Bucket counts: `[bucket, count]` of negative and positive values, and zeros.
    Sketch { sketch: WireSketch },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSketch {
    pub neg: Vec<(i32, u64)>,
    pub zero: u64,
    pub pos: Vec<(i32, u64)>,
}

impl WireQuantiles {
    fn of(q: &Quantiles) -> WireQuantiles {
        match q {
            Quantiles::Exact(v) => WireQuantiles::Exact(v.iter().map(|f| f.to_bits()).collect()),
            Quantiles::Sketch(s) => WireQuantiles::Sketch {
                sketch: WireSketch {
                    neg: s.neg.iter().map(|(&i, &n)| (i, n)).collect(),
                    zero: s.zero,
                    pos: s.pos.iter().map(|(&i, &n)| (i, n)).collect(),
                },
            },
        }
    }

    /// The step's state; a sketch counting more than 2^48 values is refused
    /// ([`Sketch::from_counts`]).
    fn quantiles(self) -> Result<Quantiles, String> {
        Ok(match self {
            WireQuantiles::Exact(v) => Quantiles::Exact(v.into_iter().map(f64::from_bits).collect()),
            WireQuantiles::Sketch { sketch } => {
                Quantiles::Sketch(Sketch::from_counts(sketch.neg, sketch.zero, sketch.pos)?)
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireCompare {
    pub total: Vec<u64>,
    pub values: Vec<(WireValue, Vec<u64>)>,
    pub too_many: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireExemplar {
    pub trace_id: String,
    pub span_id: Option<String>,
    pub value: Option<u64>,
    pub timestamp_ns: u64,
}

/// An [`ExactSum`]: `[int high 64 bits (signed), int low 64 bits, fixed high, fixed low, bits
/// of wide]`.
pub type WireSum = (i64, u64, i64, u64, u64);

fn wire_sum(s: &ExactSum) -> WireSum {
    let split = |x: i128| ((x >> 64) as i64, x as u64);
    let ((ih, il), (fh, fl)) = (split(s.int), split(s.fixed));
    (ih, il, fh, fl, s.wide.to_bits())
}

fn exact_sum((ih, il, fh, fl, wide): WireSum) -> ExactSum {
    let join = |hi: i64, lo: u64| (i128::from(hi) << 64) | i128::from(lo);
    ExactSum {
        int: join(ih, il),
        fixed: join(fh, fl),
        wide: f64::from_bits(wide),
    }
}

fn bits(v: &[Option<f64>]) -> Vec<Option<u64>> {
    v.iter().map(|x| x.map(f64::to_bits)).collect()
}

fn floats(v: Vec<Option<u64>>) -> Vec<Option<f64>> {
    v.into_iter().map(|x| x.map(f64::from_bits)).collect()
}

impl WireAcc {
    pub fn of(a: &AccState) -> WireAcc {
        let values = |v: &[weft_traceql::Value]| v.iter().map(WireValue::of).collect();
        WireAcc {
            groups: a
                .groups
                .iter()
                .map(|g| WireGroup {
                    by: values(&g.by),
                    bucket: g.bucket.map(f64::to_bits),
                    data: match &g.data {
                        StepData::Count(c) => WireData::Count(c.clone()),
                        StepData::Min(v) => WireData::Min(bits(v)),
                        StepData::Max(v) => WireData::Max(bits(v)),
                        StepData::Sum(v) => WireData::Sum(v.iter().map(|s| s.as_ref().map(wire_sum)).collect()),
                        StepData::Avg(v) => WireData::Avg(v.iter().map(|(s, n)| (wire_sum(s), *n)).collect()),
                        StepData::Values(v) => WireData::Values(v.iter().map(WireQuantiles::of).collect()),
                    },
                    used: g.used,
                })
                .collect(),
            over_limit: a.over_limit,
            compare: a.compare.clone().map(|attrs| {
                attrs
                    .into_iter()
                    .map(|(label, c)| {
                        (
                            label,
                            WireCompare {
                                total: c.total,
                                values: c.values.iter().map(|(v, n)| (WireValue::of(v), n.clone())).collect(),
                                too_many: c.too_many,
                            },
                        )
                    })
                    .collect()
            }),
            exemplars: a
                .exemplars
                .iter()
                .map(|(g, e)| {
                    (
                        *g,
                        WireExemplar {
                            trace_id: weft_core::hex(&e.trace_id),
                            span_id: e.span_id.map(|s| weft_core::hex(&s)),
                            value: e.value.map(f64::to_bits),
                            timestamp_ns: e.timestamp_ns,
                        },
                    )
                })
                .collect(),
        }
    }

    pub fn state(self) -> Result<AccState, String> {
        let values = |v: Vec<WireValue>| v.into_iter().map(WireValue::value).collect::<Result<Vec<_>, _>>();
        let mut compare: [Vec<(String, CompareState)>; 2] = Default::default();
        for (into, attrs) in compare.iter_mut().zip(self.compare) {
            for (label, c) in attrs {
                into.push((
                    label,
                    CompareState {
                        total: c.total,
                        values: c
                            .values
                            .into_iter()
                            .map(|(v, n)| Ok((v.value()?, n)))
                            .collect::<Result<_, String>>()?,
                        too_many: c.too_many,
                    },
                ));
            }
        }
        Ok(AccState {
            groups: self
                .groups
                .into_iter()
                .map(|g| {
                    Ok(GroupState {
                        by: values(g.by)?,
                        bucket: g.bucket.map(f64::from_bits),
                        data: match g.data {
                            WireData::Count(c) => StepData::Count(c),
                            WireData::Min(v) => StepData::Min(floats(v)),
                            WireData::Max(v) => StepData::Max(floats(v)),
                            WireData::Sum(v) => StepData::Sum(v.into_iter().map(|s| s.map(exact_sum)).collect()),
                            WireData::Avg(v) => StepData::Avg(v.into_iter().map(|(s, n)| (exact_sum(s), n)).collect()),
                            WireData::Values(v) => {
                                StepData::Values(v.into_iter().map(WireQuantiles::quantiles).collect::<Result<_, _>>()?)
                            }
                        },
                        used: g.used,
                    })
                })
                .collect::<Result<_, String>>()?,
            over_limit: self.over_limit,
            compare,
            exemplars: self
                .exemplars
                .into_iter()
                .map(|(g, e)| {
                    Ok((
                        g,
                        Exemplar {
                            trace_id: unhex(&e.trace_id)?,
                            span_id: e.span_id.as_deref().map(unhex).transpose()?,
                            value: e.value.map(f64::from_bits),
                            timestamp_ns: e.timestamp_ns,
                        },
                    ))
                })
                .collect::<Result<_, String>>()?,
        })
    }
}

/// Runs span-local metrics query `r` over the queriers of `--query-peers`. `Ok(None)`: the
/// queriers' block lists did not agree with this one's (or none is known); the caller counts
/// here alone.
pub(crate) async fn span_metrics(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    r: &MetricsRequest,
    window: Option<Window>,
    watch: Option<Watch>,
) -> Result<Option<(SpanMetrics, ScanStats)>, Response> {
    let addrs = peers.peers().await;
    if addrs.is_empty() && st.live.is_none() {
        return Ok(None);
    }
    let width = addrs.len().max(1);
    let (max_series, max_points) = (st.cfg.query.max_metrics_series, st.cfg.query.max_metrics_points);
    let fresh = || -> Result<SpanMetrics, Box<Response>> {
        match r.span_metrics(max_series, max_points) {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(Box::new(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the query is not span-local",
            ))),
            Err(e) => Err(Box::new(crate::query::eval_error(e))),
        }
    };
    let template = |blocks: Vec<String>, listing: Vec<String>, head: bool| MetricsJob {
        blocks,
        listing,
        head,
        ..MetricsJob::of(r, max_series, max_points, false)
    };
    let mut m = fresh().map_err(|r| *r)?;
    if let Some(w) = watch {
        m.watch(w);
    }
    let q = st.querier();
    let (mut stats, blocks, listing) = match &st.live {
        // The recent spans here, with the listing taken in the same view: the cuts it covers
        // are left to the jobs, the others counted here.
        None => {
            let (stats, mut blocks) = q.scan_columns_head(tenant, window, &mut m).await.map_err(scan_failed)?;
            blocks.sort_by_key(|b| std::cmp::Reverse(b.meta.max_end_unix_nano));
            let listing: Vec<String> = blocks.iter().map(|b| b.meta.block_id.clone()).collect();
            (stats, blocks, listing)
        }
        // The live stores count theirs against the listing, in live-store order.
        Some(live) => {
            let h: super::live::Heads<MetricsJobReply> =
                super::live::heads(st, live, tenant, METRICS_JOB_PATH, |l| template(Vec::new(), l, true)).await?;
            let mut stats = ScanStats {
                unanswered_live_stores: h.unanswered,
                ..ScanStats::default()
            };
            for (a, reply) in h.replies {
                let state = reply
                    .state
                    .into_iter()
                    .map(WireAcc::state)
                    .collect::<Result<Vec<_>, _>>();
                match state.and_then(|s| m.merge_state(s)) {
                    Ok(()) => stats.add(&reply.stats),
                    Err(e) => {
                        tracing::warn!(live_store = %a, error = %e, "a live store's metrics do not merge; its recent spans are left out");
                        stats.unanswered_live_stores += 1;
                    }
                }
            }
            (stats, h.blocks, h.listing)
        }
    };
    // Weighed by the row groups the query may read, as a search's are.
    let jobs = super::plan_by_reads(
        &blocks,
        width * JOBS_PER_PEER,
        |b, rg| super::bloom_may_match(b, rg, |s, v| m.row_group_may_match(s, v)),
        false,
        super::BlockShare::Columns,
    );
    // Progress, told after each job merged: the recent spans are one unit, each job one.
    let total = 1 + jobs.len() as u64;
    let mut merged = 1;
    m.tell(stats.progress(merged, total));
    let turns = super::Turns::new(width);
    let run = |(k, job): (usize, super::Planned)| {
        let (addrs, listing, blocks, fresh, template, turns) = (&addrs, &listing, &blocks, &fresh, &template, &turns);
        async move {
            let _turn = turns.take(k).await;
            let (ids, row_groups) = job.share(blocks);
            let job = MetricsJob {
                row_groups,
                ..template(ids, listing.clone(), false)
            };
            let decode = |r: MetricsJobReply| {
                let state = r.state.into_iter().map(WireAcc::state).collect::<Result<Vec<_>, _>>()?;
                Ok((state, r.stats, r.missing_blocks))
            };
            if let Some(reply) = super::dispatch_to(st, peers, addrs, k, tenant, METRICS_JOB_PATH, &job, decode).await
                && (reply.2.is_empty() || st.live.is_none())
            {
                return Ok(reply);
            }
            // Every peer failed (or, with live stores, did not know the listing).
            st.jobs.ran_here.fetch_add(1, Ordering::Relaxed);
            let mut local = fresh().map_err(|r| *r)?;
            let part = super::part_of(&job.blocks, &job.row_groups);
            let stats = q
                .scan_columns_part(tenant, window, &part, &mut local)
                .await
                .map_err(scan_failed)?;
            Ok::<_, Response>((local.into_state(), stats, Vec::new()))
        }
    };
    let count = jobs.len().max(1);
    let mut done = futures::stream::iter(super::assigned(jobs, width, false))
        .map(run)
        .buffered(count);
    while let Some(d) = done.next().await {
        let (state, part_stats, missing) = d?;
        if !missing.is_empty() {
            tracing::info!(
                tenant,
                ?missing,
                "a querier's block list differs from the frontend's; counting here alone"
            );
            st.jobs.replanned.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if let Err(e) = m.merge_state(state) {
            // Both ends run this build's query: a mismatch is a bug, not the user's.
            return Err(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("merging a querier's metrics: {e}"),
            ));
        }
        stats.add(&part_stats);
        merged += 1;
        m.tell(stats.progress(merged, total));
    }
    Ok(Some((m, stats)))
}

/// Runs metrics query `r` over whole traces (structural queries and the like) over the
/// queriers of `--query-peers`, as a search is split ([`super::whole`]). `Ok(None)` as
/// [`span_metrics`].
pub(crate) async fn trace_metrics(
    st: &AppState,
    peers: &Peers,
    tenant: &str,
    r: &MetricsRequest,
    window: Option<Window>,
    watch: Option<Watch>,
) -> Result<Option<(Metrics, ScanStats)>, Response> {
    let query = WholeMetrics {
        r,
        max_series: st.cfg.query.max_metrics_series,
        max_points: st.cfg.query.max_metrics_points,
    };
    let mut m = query.sink().map_err(|r| *r)?;
    if let Some(w) = watch {
        m.watch(w);
    }
    Ok(super::whole::run(st, peers, tenant, window, &query, &mut m)
        .await?
        .map(|stats| (m, stats)))
}

/// Metrics over whole traces, as [`super::whole`] splits them.
struct WholeMetrics<'a> {
    r: &'a MetricsRequest,
    max_series: usize,
    max_points: u64,
}

impl WholeQuery for WholeMetrics<'_> {
    type Sink = Metrics;
    type State = Vec<AccState>;
    type Job = MetricsJob;
    type Reply = MetricsJobReply;
    const PATH: &'static str = METRICS_JOB_PATH;

    fn sink(&self) -> Result<Metrics, Box<Response>> {
        self.r
            .trace_metrics(self.max_series, self.max_points)
            .map_err(|e| Box::new(crate::query::eval_error(e)))
    }

    fn job(&self, p: WholePart) -> MetricsJob {
        MetricsJob {
            blocks: p.blocks,
            row_groups: p.row_groups,
            listing: p.listing,
            recent: p.recent,
            exclude: p.exclude,
            traces: p.traces,
            head: p.head,
            ..MetricsJob::of(self.r, self.max_series, self.max_points, true)
        }
    }

    fn decode(&self, r: MetricsJobReply) -> Result<(Vec<AccState>, WireOutcome), String> {
        let state = r.state.into_iter().map(WireAcc::state).collect::<Result<Vec<_>, _>>()?;
        let mut outcome = r.outcome.ok_or("no outcome for whole traces")?;
        outcome.missing_blocks.extend(r.missing_blocks);
        Ok((state, outcome))
    }

    fn state(&self, sink: Metrics) -> Vec<AccState> {
        sink.into_state()
    }

    fn merge(&self, into: &mut Metrics, s: Vec<AccState>) -> Result<(), String> {
        into.merge_state(s).map_err(|e| e.to_string())
    }
}

/// `POST /internal/v1/jobs/metrics`: one job of a metrics query another querier is the
/// frontend of.
pub async fn metrics_job(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, _slot, job) = match super::accept::<MetricsJob>(&st, &headers, &body, "metrics").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if let Some(r) = super::unlisted("metrics", &job.blocks, &job.listing) {
        return r;
    }
    let query = match parse(&job.q) {
        Ok(q) => q,
        Err(e) => return bad(format!("invalid metrics job: {e}")),
    };
    if job.end <= job.start || job.step == 0 {
        return bad("invalid metrics job: an empty range or a zero step");
    }
    if job.exemplars > crate::tempo::metrics::MAX_EXEMPLARS {
        return bad(format!(
            "invalid metrics job: {} exemplars asked, at most {} are served",
            job.exemplars,
            crate::tempo::metrics::MAX_EXEMPLARS
        ));
    }
    let r = MetricsRequest {
        q: job.q.clone(),
        query,
        start: job.start,
        end: job.end,
        step: job.step,
        exemplars: job.exemplars,
    };
    let window = Some((job.start, job.end - 1));
    if job.whole {
        let mut m = match r.trace_metrics(job.max_series, job.max_points) {
            Ok(m) => m,
            Err(e) => return crate::query::eval_error(e),
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
        let served = match super::whole::serve(&st, &tenant, window, &part, "metrics", &mut m).await {
            Ok(s) => s,
            Err(r) => return r,
        };
        st.jobs.served.fetch_add(1, Ordering::Relaxed);
        return super::json_reply(&MetricsJobReply {
            version: JOB_VERSION,
            state: m.into_state().iter().map(WireAcc::of).collect(),
            stats: served.outcome.stats,
            missing_blocks: served.missing_blocks,
            outcome: Some(served.outcome),
            head: served.head,
        });
    }
    if !(job.exclude.is_empty() && job.recent.is_empty() && job.traces.is_empty()) {
        return bad(
            "invalid metrics job: `exclude`, `recent` and `traces` are for a query over whole traces (`whole`)",
        );
    }
    if let Some(r) = super::row_groups_unread("metrics", &job.blocks, &job.row_groups) {
        return r;
    }
    if job.head {
        return metrics_head_job(&st, &tenant, &job, &r, window).await;
    }
    let part = super::part_of(&job.blocks, &job.row_groups);
    let mut m = match r.span_metrics(job.max_series, job.max_points) {
        Ok(Some(m)) => m,
        Ok(None) => return bad("invalid metrics job: the query needs whole traces"),
        Err(e) => return crate::query::eval_error(e),
    };
    let q = st.querier();
    let missing = super::unknown_blocks(q, &tenant, &job.listing).await;
    let stats = match q.scan_columns_part(&tenant, window, &part, &mut m).await {
        Ok(s) => s,
        Err(e) => return scan_failed(e),
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    let reply = MetricsJobReply {
        version: JOB_VERSION,
        state: m.into_state().iter().map(WireAcc::of).collect(),
        stats,
        missing_blocks: missing,
        outcome: None,
        head: None,
    };
    super::json_reply(&reply)
}

/// A metrics head job, on a live store: its recent spans against the frontend's listing,
/// span by span (whole-trace head jobs are served by [`super::whole::serve`]).
async fn metrics_head_job(
    st: &AppState,
    tenant: &str,
    job: &MetricsJob,
    r: &MetricsRequest,
    window: Option<Window>,
) -> Response {
    let (q, extras) = match super::live::head_querier(st, tenant, &job.listing).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let reply = {
        let mut m = match r.span_metrics(job.max_series, job.max_points) {
            Ok(Some(m)) => m,
            Ok(None) => return bad("invalid metrics job: the query needs whole traces"),
            Err(e) => return crate::query::eval_error(e),
        };
        let stats = match q.scan_columns_head(tenant, window, &mut m).await {
            Ok((s, _)) => s,
            Err(e) => return scan_failed(e),
        };
        MetricsJobReply {
            version: JOB_VERSION,
            state: m.into_state().iter().map(WireAcc::of).collect(),
            stats,
            missing_blocks: Vec::new(),
            outcome: None,
            head: Some(extras),
        }
    };
    st.jobs.served.fetch_add(1, Ordering::Relaxed);
    super::json_reply(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quantile step crosses the wire as it is: exact values bit for bit, a sketch bucket for
    /// bucket, and a step past the exact bound as a sketch.
    #[test]
    fn quantile_steps_cross_the_wire_unchanged() {
        let mut small = Quantiles::default();
        for v in [0.5, -0.0, f64::INFINITY, 3.25] {
            small.push(v);
        }
        let mut large = Quantiles::default();
        for i in 0..5000 {
            large.push(f64::from(i) * 0.001 - 1.0);
        }
        assert!(matches!(large, Quantiles::Sketch(_)));
        for q in [small, large] {
            let json = serde_json::to_string(&WireQuantiles::of(&q)).unwrap();
            let back: WireQuantiles = serde_json::from_str(&json).unwrap();
            assert_eq!(back.quantiles().unwrap(), q, "{json:.200}");
        }
        let sketch: WireQuantiles =
            serde_json::from_str(r#"{"sketch": {"neg": [[3, 1]], "zero": 2, "pos": [[-5, 4]]}}"#).unwrap();
        assert_eq!(sketch.quantiles().unwrap().len(), 7);
        // Counts a peer could not have: refused, not overflowed.
        let huge = format!(
            r#"{{"sketch": {{"neg": [[1, {}]], "zero": 0, "pos": [[2, {}]]}}}}"#,
            u64::MAX,
            1
        );
        let huge: WireQuantiles = serde_json::from_str(&huge).unwrap();
        assert!(huge.quantiles().is_err());
    }

    /// Sums and averages cross the wire as exact sums, every part bit for bit: negative and
    /// past 64 bits, and the float part.
    #[test]
    fn exact_sums_cross_the_wire_unchanged() {
        let sums = [
            ExactSum::default(),
            ExactSum {
                int: -(1 << 100) - 7,
                fixed: (1 << 90) + 12_345,
                wide: -2048.5,
            },
            ExactSum {
                int: i128::MAX,
                fixed: i128::MIN,
                wide: f64::INFINITY,
            },
        ];
        let state = AccState {
            groups: vec![
                GroupState {
                    by: Vec::new(),
                    bucket: None,
                    data: StepData::Sum(vec![None, Some(sums[1]), Some(sums[2])]),
                    used: true,
                },
                GroupState {
                    by: Vec::new(),
                    bucket: None,
                    data: StepData::Avg(sums.iter().enumerate().map(|(n, s)| (*s, n as u64)).collect()),
                    used: true,
                },
            ],
            over_limit: false,
            compare: Default::default(),
            exemplars: Vec::new(),
        };
        let json = serde_json::to_string(&WireAcc::of(&state)).unwrap();
        let back: WireAcc = serde_json::from_str(&json).unwrap();
        assert_eq!(back.state().unwrap(), state, "{json}");
    }
}
