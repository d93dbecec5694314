//! Tempo's metrics endpoints (`/api/metrics/query_range`, `/api/metrics/query`) and the
//! service graph (`/api/service-graph`).

use crate::app::AppState;
use crate::query::*;
use crate::tempo::json::{self as tempo};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use weft_core::now_ns;
use weft_engine::graph::ServiceGraph;
use weft_engine::search::{Metrics, Watch};
use weft_engine::span_metrics::SpanMetrics;
use weft_querier::scan::ScanStats;
use weft_traceql::Query as TraceQl;

pub(crate) async fn metrics_query(
    st: Arc<AppState>,
    headers: HeaderMap,
    p: HashMap<String, String>,
    instant: bool,
) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    // The scan's last progress report: the reply's jobs, as a streamed query's last message has
    // them.
    let jobs = Arc::new(parking_lot::Mutex::new(None));
    let watch = {
        let jobs = jobs.clone();
        Watch::new(move |_, p| *jobs.lock() = Some(p))
    };
    let (series, start, step, stats) = match run_metrics(&st, &tenant, &p, Form::tempo(instant), Some(watch)).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    st.metrics_latency.observe(started.elapsed().as_secs_f64());
    let m = inspected(&stats, &st, &tenant).with_jobs(*jobs.lock());
    let partial = crate::query::reply::partial_message(&stats);
    if instant {
        json_scanned(tempo::query_instant_response(&series, &m, partial.as_deref()), &stats)
    } else {
        json_text_scanned(
            tempo::query_range_response(&series, start, step, &m, partial.as_deref()),
            &stats,
        )
    }
}

/// A metrics request, its parameters resolved (a frontend sends these to its queriers, so
/// every part of a query counts the same range whatever each one's clock says).
pub(crate) struct MetricsRequest {
    pub q: String,
    pub query: TraceQl,
    pub start: u64,
    pub end: u64,
    pub step: u64,
    pub exemplars: usize,
}

impl MetricsRequest {
    /// The span-local form of the query, limited and asking for exemplars as configured;
    /// `Ok(None)` when it needs whole traces.
    pub(crate) fn span_metrics(
        &self,
        max_series: usize,
        max_points: u64,
    ) -> Result<Option<SpanMetrics>, weft_traceql::EvalError> {
        match SpanMetrics::new(&self.query, self.start, self.end, self.step)? {
            None => Ok(None),
            Some(mut m) => {
                m.limit(max_series, max_points)?;
                m.exemplars(self.exemplars);
                Ok(Some(m))
            }
        }
    }

    /// The query over whole traces, limited and asking for exemplars as configured.
    pub(crate) fn trace_metrics(&self, max_series: usize, max_points: u64) -> Result<Metrics, weft_traceql::EvalError> {
        let mut m = Metrics::new(&self.query, self.start, self.end, self.step)?;
        m.limit(max_series, max_points)?;
        m.exemplars(self.exemplars);
        Ok(m)
    }
}

/// How a metrics query's range becomes its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// Tempo's `query_range`: start down and end up to whole steps.
    Range,
    /// Tempo's `query`: one step over the whole range, as asked.
    Instant,
    /// Steps from exactly `start`, as Prometheus evaluates a range: Jaeger's SPM API, whose
    /// last point is over the step ending at its `endTs`.
    Exact,
}

impl Form {
    /// Tempo's form: a range query, or `instant`.
    pub(crate) fn tempo(instant: bool) -> Form {
        if instant { Form::Instant } else { Form::Range }
    }
}

/// Parses Tempo's metrics parameters (`q`, `start`, `end`, `since`, `step`, `exemplars`) in the
/// given form.
pub(crate) fn metrics_request(p: &HashMap<String, String>, form: Form) -> Result<MetricsRequest, Box<Response>> {
    let instant = form == Form::Instant;
    let Some(q) = param(p, "q").or_else(|| param(p, "query")) else {
        return Err(Box::new(bad("missing q: a TraceQL metrics query such as { } | rate()")));
    };
    let query = match parse_query(q) {
        Ok(q) => q,
        Err(e) => return Err(Box::new(bad(e))),
    };
    let now = now_ns();
    let since = match param(p, "since").map(parse_duration).transpose() {
        Ok(s) => s.unwrap_or(3600 * 1_000_000_000),
        Err(e) => return Err(Box::new(bad(e))),
    };
    let end = match param(p, "end").map(|s| parse_time("end", s)).transpose() {
        Ok(e) => e.unwrap_or(now),
        Err(e) => return Err(Box::new(bad(e))),
    };
    let start = match param(p, "start").map(|s| parse_time("start", s)).transpose() {
        Ok(s) => s.unwrap_or(end.saturating_sub(since)),
        Err(e) => return Err(Box::new(bad(e))),
    };
    if start >= end {
        return Err(Box::new(bad(format!(
            "invalid range: start {start} is not before end {end} (nanoseconds)"
        ))));
    }
    let step = if instant {
        end - start
    } else {
        match param(p, "step").map(parse_duration).transpose() {
            Ok(Some(0)) => return Err(Box::new(bad("invalid step: must be positive"))),
            Ok(Some(s)) => s,
            // Tempo's default: a 240th of the range, rounded down to 5s when above it, at least 1s.
            Ok(None) => {
                let s = (end - start) / 240;
                let five = 5_000_000_000;
                if s >= five { s - s % five } else { s.max(1_000_000_000) }
            }
            Err(e) => return Err(Box::new(bad(e))),
        }
    };
    let exemplars = if instant {
        // Tempo's instant replies carry no exemplars.
        0
    } else {
        exemplar_limit(p, &query).map_err(|e| Box::new(bad(e)))?
    };
    let (start, end) = match form {
        Form::Range => align_to_step(start, end, step),
        Form::Instant | Form::Exact => (start, end),
    };
    Ok(MetricsRequest {
        q: q.to_owned(),
        query,
        start,
        end,
        step,
        exemplars,
    })
}

/// A range query's start rounded down and its end rounded up to multiples of `step`, as
/// Tempo aligns them: a chart of "the last hour" refreshed a few seconds later keeps its
/// buckets, where unaligned every refresh would shift them and move spans between points.
fn align_to_step(start: u64, end: u64, step: u64) -> (u64, u64) {
    if step == 0 {
        return (start, end);
    }
    let up = match end % step {
        0 => end,
        r => end.saturating_add(step - r),
    };
    (start - start % step, up)
}

/// A metrics query with Tempo's parameters (`q`, `start`, `end`, `since`, `step`): its series,
/// start and step (nanoseconds) and what it inspected, or the error reply. `form` says how the
/// range becomes steps. `watch` is told the run so far as the scan goes (the
/// streamed API's partial answers).
pub(crate) async fn run_metrics(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
    form: Form,
    watch: Option<Watch>,
) -> Result<(Vec<weft_traceql::Series>, u64, u64, ScanStats), Response> {
    let r = metrics_request(p, form).map_err(|r| *r)?;
    let (start, end, step) = (r.start, r.end, r.step);
    // Span-local queries over columns, one span at a time; the rest over whole traces.
    let window = Some((start, end - 1));
    let (max_series, max_points) = (st.cfg.query.max_metrics_series, st.cfg.query.max_metrics_points);
    let relay = watch.map(Relay::new);
    let (series, stats) = match r.span_metrics(max_series, max_points).map_err(eval_error)? {
        Some(mut m) => {
            let split = match &st.peers {
                Some(peers) => {
                    let w = relay.as_ref().map(Relay::split);
                    crate::query::jobs::metrics::span_metrics(st, peers, tenant, &r, window, w).await?
                }
                None => None,
            };
            if let Some(w) = relay.as_ref().map(Relay::fallback) {
                m.watch(w);
            }
            match split {
                Some((m, stats)) => (m.finish(), stats),
                None => {
                    let stats = crate::query::run_column_scan(st, tenant, window, &mut m).await?;
                    (m.finish(), stats)
                }
            }
        }
        None => {
            let split = match &st.peers {
                Some(peers) => {
                    let w = relay.as_ref().map(Relay::split);
                    crate::query::jobs::metrics::trace_metrics(st, peers, tenant, &r, window, w).await?
                }
                None => None,
            };
            match split {
                Some((m, stats)) => (m.finish(), stats),
                None => {
                    let mut sink = r.trace_metrics(max_series, max_points).map_err(eval_error)?;
                    if let Some(w) = relay.as_ref().map(Relay::fallback) {
                        sink.watch(w);
                    }
                    let stats = run_scan(st, tenant, window, &mut sink).await?;
                    (sink.finish(), stats)
                }
            }
        }
    };
    let series = match series {
        Ok(s) => s,
        Err(e) => return Err(eval_error(e)),
    };
    Ok((series, start, step, stats))
}

/// A metrics query's watcher, handed first to the split over the queriers and then, when the
/// frontend replans and counts alone, to the scan here. That scan counts from nothing, so it
/// is told on only once it has done as large a share of its work as the split last told (and
/// always at its end): a streamed chart does not start over from an empty count.
struct Relay {
    watch: Watch,
    /// The split's last progress: completed and total units.
    reached: Arc<parking_lot::Mutex<(u64, u64)>>,
}

impl Relay {
    fn new(watch: Watch) -> Relay {
        Relay {
            watch,
            reached: Arc::new(parking_lot::Mutex::new((0, 1))),
        }
    }

    /// The watcher for the split, which notes how far it got.
    fn split(&self) -> Watch {
        let (watch, reached) = (self.watch.clone(), self.reached.clone());
        Watch::new(move |run, p| {
            *reached.lock() = (p.completed_jobs, p.total_jobs.max(1));
            watch.tell(run, p)
        })
    }

    /// The watcher for the scan here.
    fn fallback(&self) -> Watch {
        let (done, of) = *self.reached.lock();
        if done == 0 {
            return self.watch.clone();
        }
        let watch = self.watch.clone();
        Watch::new(move |run, p| {
            if caught_up(p, done, of) {
                watch.tell(run, p)
            }
        })
    }
}

/// Whether progress `p` is at its end or has done at least `done` of `of` of its own units.
fn caught_up(p: weft_engine::search::ScanProgress, done: u64, of: u64) -> bool {
    p.completed_jobs >= p.total_jobs
        || u128::from(p.completed_jobs) * u128::from(of) >= u128::from(done) * u128::from(p.total_jobs)
}

/// The most exemplars a range query returns, as Tempo's default `max_exemplars`.
pub const MAX_EXEMPLARS: usize = 100;

/// How many exemplars a range query asks for, as Tempo reads it: the `with(exemplars=N)` hint
/// over the `exemplars` parameter; `with(exemplars=false)` is none; 0 or neither means the
/// most, [`MAX_EXEMPLARS`], which also caps any number asked.
pub(crate) fn exemplar_limit(p: &HashMap<String, String>, query: &TraceQl) -> Result<usize, String> {
    use weft_traceql::ast::Static;
    let mut n = match param(p, "exemplars") {
        None => 0,
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| format!("invalid exemplars {v:?}: expected a non-negative integer"))?,
    };
    if let Some(h) = query.hints.iter().find(|h| h.key == "exemplars") {
        match &h.value {
            Static::Bool(false) => return Ok(0),
            Static::Int(i) if *i >= 0 => n = *i as u64,
            _ => {}
        }
    }
    Ok(if n == 0 {
        MAX_EXEMPLARS
    } else {
        (n as usize).min(MAX_EXEMPLARS)
    })
}

/// `GET /api/metrics/query_range`.
pub async fn query_range(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    metrics_query(st, headers, p, false).await
}

/// `GET /api/metrics/query`.
pub async fn query_instant(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    metrics_query(st, headers, p, true).await
}

/// Most spans one service-graph request reads by default, and at most (`maxSpans`). Counting
/// every trace from columns costs about 0.1 s per million spans on one core (a filter, which
/// needs whole traces, about 3 s); a larger range is counted newest first and marked
/// incomplete rather than holding the request for minutes.
pub(crate) const GRAPH_DEFAULT_SPANS: u64 = 10_000_000;
pub(crate) const GRAPH_MAX_SPANS: u64 = 50_000_000;

/// `GET /api/service-graph`: calls between services in a time range, with request and error
/// counts and callee latency quantiles, from the parent/child spans of every trace in the
/// range (not a sample). `start`/`end` as in search (default: the last `since`, 1h); `q`
/// keeps only traces matching a spanset query; `maxSpans` bounds the work. When the budget
/// runs out first, `complete` is false and `countedFrom` says how far back the counts reach.
pub async fn service_graph(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let query = match parse_query(param(&p, "q").unwrap_or("{ }")) {
        Ok(q) => q,
        Err(e) => return bad(e),
    };
    let since = match param(&p, "since").map(parse_duration).transpose() {
        Ok(s) => s.unwrap_or(3600 * 1_000_000_000),
        Err(e) => return bad(e),
    };
    let window = match search_window(&p) {
        Ok(Some((s, e))) if param(&p, "start").is_none() => (e.saturating_sub(since).max(s), e),
        Ok(Some(w)) => w,
        Ok(None) => {
            let end = now_ns();
            (end.saturating_sub(since), end)
        }
        Err(e) => return bad(e),
    };
    let max_spans = match param(&p, "maxSpans") {
        None => GRAPH_DEFAULT_SPANS,
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n > 0 => n.min(GRAPH_MAX_SPANS),
            _ => return bad(format!("invalid maxSpans {s:?}: expected a positive integer")),
        },
    };
    let mut sink = match ServiceGraph::new(&query, Some(window), max_spans) {
        Ok(s) => s,
        Err(e) => return eval_error(e),
    };
    // Every trace: straight from columns. A filter needs whole traces.
    let split = match &st.peers {
        Some(peers) if sink.counts_every_trace() => {
            match crate::query::jobs::graph::service_graph(&st, peers, &tenant, window, max_spans, &mut sink).await {
                Ok(s) => s,
                Err(r) => return r,
            }
        }
        Some(peers) => {
            let q = query.to_string();
            match crate::query::jobs::graph::filtered_graph(&st, peers, &tenant, &q, window, max_spans, &mut sink).await
            {
                Ok(s) => s,
                Err(r) => return r,
            }
        }
        None => None,
    };
    let stats = if let Some(s) = split {
        s
    } else if sink.counts_every_trace() {
        let (q, partial) = match crate::query::local_querier(&st, &tenant, None).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        match q
            .scan_service_graph(&tenant, Some(window), &mut sink)
            .await
            .map(|mut s| {
                s.add(&partial);
                s
            }) {
            Ok(s) => s,
            Err(e) => return scan_failed(e),
        }
    } else {
        match run_scan(&st, &tenant, Some(window), &mut sink).await {
            Ok(s) => s,
            Err(r) => return r,
        }
    };
    st.graph_latency.observe(started.elapsed().as_secs_f64());
    let edges: Vec<serde_json::Value> = sink
        .edges()
        .into_iter()
        .map(|(from, to, e)| {
            serde_json::json!({
                "parent": from, "child": to, "callCount": e.calls, "errorCount": e.errors,
                "latencyP50Nano": e.latency_quantile(0.5).to_string(),
                "latencyP90Nano": e.latency_quantile(0.9).to_string(),
                "latencyP99Nano": e.latency_quantile(0.99).to_string(),
            })
        })
        .collect();
    let services: Vec<serde_json::Value> = sink
        .services()
        .into_iter()
        .map(|(name, s)| serde_json::json!({ "name": name, "spanCount": s.spans, "errorCount": s.errors, "rootCount": s.roots }))
        .collect();
    let mut out = serde_json::json!({
        "services": services,
        "edges": edges,
        "start": (window.0 / 1_000_000_000).to_string(),
        "end": (window.1 / 1_000_000_000).to_string(),
        "complete": sink.complete(),
        "metrics": tempo::metrics(&inspected(&stats, &st, &tenant)),
    });
    if !sink.complete()
        && let Some(oldest) = sink.oldest_start
    {
        out["countedFrom"] = serde_json::Value::String(oldest.to_string());
    }
    if sink.unresolved_calls > 0 {
        out["unresolvedCalls"] = sink.unresolved_calls.into();
    }
    if stats.damaged_blocks > 0 {
        out["complete"] = false.into();
        out["damagedBlocks"] = stats.damaged_blocks.into();
    }
    json_scanned(out, &stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_engine::search::ScanProgress;

    fn progress(completed_jobs: u64, total_jobs: u64) -> ScanProgress {
        ScanProgress {
            completed_jobs,
            total_jobs,
            ..ScanProgress::default()
        }
    }

    /// A replanned query's scan here is told on from the share of its work the split reached,
    /// and at its end; with nothing told by the split, all of it.
    #[test]
    fn a_fallback_scan_is_told_on_from_where_the_split_was() {
        let query = weft_traceql::parse("{ } | rate()").unwrap();
        let run = weft_traceql::MetricsRun::new(&query, 0, 10, 10).unwrap();
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let relay = Relay::new({
            let seen = seen.clone();
            Watch::new(move |_, p| seen.lock().push((p.completed_jobs, p.total_jobs)))
        });
        assert_eq!(relay.reached.lock().0, 0);
        let split = relay.split();
        split.tell(&run, progress(1, 5));
        split.tell(&run, progress(3, 5));
        let here = relay.fallback();
        for done in [1, 5, 6, 9, 10] {
            here.tell(&run, progress(done, 10));
        }
        assert_eq!(*seen.lock(), [(1, 5), (3, 5), (6, 10), (9, 10), (10, 10)]);

        let told = Arc::new(parking_lot::Mutex::new(0));
        let all = Relay::new({
            let told = told.clone();
            Watch::new(move |_, _| *told.lock() += 1)
        });
        let here = all.fallback();
        for done in 0..=4 {
            here.tell(&run, progress(done, 4));
        }
        assert_eq!(*told.lock(), 5);
    }

    /// A range query's bounds move out to whole steps, so two refreshes a few seconds apart
    /// count the same buckets; an instant query keeps its own, and so do Jaeger's SPM points,
    /// which Prometheus evaluates at exactly start + k·step.
    #[test]
    fn range_queries_are_aligned_to_their_step_as_tempo_aligns_them() {
        let s = 1_000_000_000;
        assert_eq!(align_to_step(61 * s, 3_599 * s, 60 * s), (60 * s, 3_600 * s));
        assert_eq!(align_to_step(60 * s, 3_600 * s, 60 * s), (60 * s, 3_600 * s));
        assert_eq!(align_to_step(7, u64::MAX - 1, 10), (0, u64::MAX));
        let request = |start: &str, end: &str, form| {
            let p: HashMap<String, String> = [("q", "{ } | rate()"), ("start", start), ("end", end), ("step", "30s")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let r = metrics_request(&p, form).unwrap_or_else(|_| panic!("{start}..{end}"));
            (r.start / s, r.end / s, r.step / s)
        };
        assert_eq!(
            request("1800000005", "1800003605", Form::Range),
            (1_800_000_000, 1_800_003_630, 30)
        );
        assert_eq!(
            request("1800000012", "1800003630", Form::Range),
            (1_800_000_000, 1_800_003_630, 30)
        );
        assert_eq!(
            request("1800000005", "1800003605", Form::Instant),
            (1_800_000_005, 1_800_003_605, 3_600)
        );
        assert_eq!(
            request("1800000005", "1800003605", Form::Exact),
            (1_800_000_005, 1_800_003_605, 30)
        );
    }

    #[test]
    fn caught_up_compares_shares_without_overflow() {
        assert!(caught_up(progress(0, 0), 1, 2));
        assert!(!caught_up(progress(1, 3), 1, 2));
        assert!(caught_up(progress(2, 4), 1, 2));
        assert!(!caught_up(progress(u64::MAX / 2, u64::MAX), u64::MAX - 1, u64::MAX));
        assert!(caught_up(progress(u64::MAX, u64::MAX), u64::MAX, u64::MAX));
    }
}
