//! TraceQL metrics over in-memory traces: `rate`, `count_over_time`, `min/max/avg/sum_over_time`,
//! `quantile_over_time` and `histogram_over_time`, each with an optional `by(...)`.
//!
//! # Semantics
//!
//! Tempo's metrics engine (`pkg/traceql/engine_metrics.go`) is the reference. Deliberate
//! differences are marked **differs**.
//!
//! - The spans observed are those of the final spansets of the query's spanset part (evaluated
//!   per trace as [`eval`](crate::eval()) does), each span once.
//! - A span falls in the step of its start time: step `i` covers
//!   `[start + i*step, start + (i+1)*step)`; spans starting outside `[start, end)` are ignored.
//!   There are `ceil((end - start) / step)` steps, at most [`MAX_METRICS_STEPS`].
//! - `rate()` is the step's span count divided by the step in seconds; `count_over_time()` is
//!   the count. A series has `0` at steps where it saw no span.
//! - `min/max/avg/sum_over_time(f)` aggregate `f` over spans where it is a number or a duration
//!   (durations in seconds, as Tempo does for `duration`); other spans are skipped and start no
//!   series. Steps without values are `None` (Tempo: NaN).
//! - `quantile_over_time(f, q...)` gives one series per `q`, labelled `p = q`. **differs**:
//!   exact quantiles of the values in the step, interpolated linearly between the closest ranks
//!   (Prometheus's `quantile_over_time` method), over every number and duration (in seconds);
//!   Tempo estimates them from log2 buckets and skips floats and values below 2.
//! - `histogram_over_time(f)` counts spans per power-of-two bucket, labelled `__bucket` with the
//!   bucket's upper bound: the smallest power of two at least the value, in seconds for
//!   durations. Integers and durations below 2, floats and other values are skipped, as in Tempo.
//! - `by(a, b)` makes one series per distinct combination of values. Its labels are the `by`
//!   fields, printed (`resource.service.name`), that have a value, in order. Spans lacking every
//!   field form the series labelled `<first field> = nil` (Tempo prints `<nil>`); for quantiles
//!   and histograms they only carry `p` or `__bucket`, as in Tempo.
//! - Without `by()`, the series of `rate` and the `*_over_time` aggregates are labelled
//!   `__name__ = "<function>"` (`rate`), like Tempo.
//! - Series are sorted by their labels. Event and link fields read the first event or link that
//!   has them.
//!
//! `compare({ selection }, topN, start, end)` counts every attribute value of the observed
//! spans per step, for the spans the selection matches (and that start in `(start, end]` when
//! given) and for the others: the intrinsics `name`, `status`, `statusMessage` and `kind`, and
//! every span and resource attribute (durations, IDs and arrays are not counted). Its series
//! are labelled `__meta_type` (`selection`, `baseline`) and the attribute with one of its
//! `topN` most frequent values over the range, plus `selection_total` / `baseline_total` with
//! the attribute's value `"nil"` for its total. An attribute with more than
//! `MAX_COMPARE_VALUES` values in a group gives only its total.
//!
//! Exemplars ([`MetricsRun::exemplars`]): spans that contributed to a series, chosen as Tempo
//! chooses them (see [`Exemplar`]); off unless asked for.
//!
//! After the metrics function, second stages run in order on the series, as Tempo's do:
//! - a comparison (`> 10`, `>= 1s` in seconds) keeps the points that satisfy it; a series left
//!   without a point is dropped;
//! - arithmetic with a number (`(...) * 100`, `100 / (...)`) applies to every point; division
//!   by zero has no value (Tempo: NaN);
//! - `topk(k)` / `bottomk(k)`: with at most `k` series, nothing changes; otherwise at each step
//!   the `k` series with the highest (lowest) values there keep them, other points are `None`,
//!   and series kept at no step are dropped. Ties go to the series whose labels sort first for
//!   `topk` and last for `bottomk` (Tempo's heap order).
//!
//! Arithmetic between queries (`(A) / (B)`) runs each operand (its own second stages included)
//! over the same traces and combines their series as Tempo does: series pair up when their
//! labels other than `__name__` are equal, and a series without other labels (no `by()`) pairs
//! with every series of the other side; unpaired series are dropped. Each point is `l op r`
//! (`None` when either is, or on division by zero). The labels are the left series' plus the
//! right's not already there; `__name__` becomes `(l op r)` (`(rate / count_over_time)`) when
//! both sides have one and is dropped otherwise (**differs**: Tempo moves the last label into
//! its place). Second stages written after the arithmetic apply to the combined series.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::ast::{BinaryOp, MetricsExpr, MetricsFn, Query};
use crate::eval::{CMetrics, CSecond, EvalError, Evaluator, GroupKey, TraceEnv, Val, eval_value};
use crate::trace::{Trace, Value};

/// The most steps a metrics query may ask for.
pub const MAX_METRICS_STEPS: u64 = 100_000;

/// One time series of a metrics query.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The labels, in the order described in the [module docs](self).
    pub labels: Vec<(String, Value)>,
    /// One value per step; `None` where the function has no value.
    pub values: Vec<Option<f64>>,
    /// Spans that contributed to the series, when the run asked for them
    /// ([`MetricsRun::exemplars`]).
    pub exemplars: Vec<Exemplar>,
}

/// A span that contributed to a series, so a graph can link to its trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    pub trace_id: [u8; 16],
    /// Known where the span's ID was read (whole traces, the head).
    pub span_id: Option<[u8; 8]>,
    /// The span's value of the metric's field (`quantile_over_time(duration, ...)`: its
    /// duration in seconds); `None` for the counting functions (`rate`, `count_over_time`,
    /// `histogram_over_time`), whose exemplars take the series' value at their step, as Tempo's
    /// do.
    pub value: Option<f64>,
    /// The span's start.
    pub timestamp_ns: u64,
}

impl Series {
    /// A series without exemplars.
    pub fn new(labels: Vec<(String, Value)>, values: Vec<Option<f64>>) -> Series {
        Series {
            labels,
            values,
            exemplars: Vec::new(),
        }
    }
}

/// Runs the metrics query `query` over `traces` for the steps of `step_ns` nanoseconds from
/// `start_ns` (inclusive) to `end_ns` (exclusive).
///
/// Fails when the query does not compile or has no metrics function, when `step_ns` is 0, when
/// `end_ns <= start_ns`, or when there would be more than [`MAX_METRICS_STEPS`] steps.
pub fn eval_metrics<'a>(
    query: &Query,
    traces: impl IntoIterator<Item = &'a Trace>,
    start_ns: u64,
    end_ns: u64,
    step_ns: u64,
) -> Result<Vec<Series>, EvalError> {
    let mut run = MetricsRun::new(query, start_ns, end_ns, step_ns)?;
    for trace in traces {
        run.add(trace);
    }
    Ok(run.finish())
}

/// A metrics query being run over traces fed one at a time, so the caller can stream traces
/// from storage without holding them all: [`MetricsRun::add`] each trace once, then
/// [`MetricsRun::finish`]. Gives the same series as [`eval_metrics`] over the same traces.
#[derive(Debug)]
pub struct MetricsRun {
    /// One per metrics query: the query itself, or each operand of metrics arithmetic.
    operands: Vec<Operand>,
    /// How the operands' series combine.
    plan: Plan,
}

#[derive(Debug)]
struct Operand {
    evaluator: Evaluator,
    acc: Accumulator,
}

/// The series a metrics query answers with, from its operands' series.
#[derive(Debug)]
enum Plan {
    /// Operand `n`'s series (its own second stages are applied when it finishes).
    Operand(usize),
    /// `lhs op rhs`, then `stages`.
    Binary {
        op: BinaryOp,
        lhs: Box<Plan>,
        rhs: Box<Plan>,
        stages: Vec<CSecond>,
    },
}

impl MetricsRun {
    /// Compiles `query` for the steps of `step_ns` nanoseconds from `start_ns` (inclusive) to
    /// `end_ns` (exclusive). Fails as [`eval_metrics`] does.
    pub fn new(query: &Query, start_ns: u64, end_ns: u64, step_ns: u64) -> Result<MetricsRun, EvalError> {
        let evaluator = Evaluator::new(query)?;
        if !evaluator.is_metrics() {
            return Err(EvalError::NotMetricsQuery {
                query: evaluator.text().to_owned(),
            });
        }
        let range = |message: String| Err(EvalError::Range { message });
        if step_ns == 0 {
            return range("step must be positive, found 0".to_owned());
        }
        if end_ns <= start_ns {
            return range(format!("end {end_ns} must be after start {start_ns}"));
        }
        let width = end_ns - start_ns;
        let steps = width / step_ns + u64::from(!width.is_multiple_of(step_ns));
        if steps > MAX_METRICS_STEPS {
            return range(format!(
                "{steps} steps of {step_ns}ns from {start_ns} to {end_ns}; at most {MAX_METRICS_STEPS} are allowed"
            ));
        }
        let acc = || Accumulator {
            start: start_ns,
            end: end_ns,
            step: step_ns,
            steps: steps as usize,
            index: HashMap::new(),
            groups: Vec::new(),
            max_groups: usize::MAX,
            over_limit: false,
            limit_text: String::new(),
            compare: Default::default(),
            exemplars: ExemplarPicker::default(),
        };
        let mut operands = Vec::new();
        let plan = match &query.math {
            None => {
                operands.push(Operand { evaluator, acc: acc() });
                Plan::Operand(0)
            }
            Some(math) => plan(math, &mut operands, &acc)?,
        };
        Ok(MetricsRun { operands, plan })
    }

    /// Bounds the memory of the run: at most `max_series` series, and at most `max_points`
    /// series times steps, for each metrics query of it (each operand of arithmetic between
    /// queries). Fails at once if one series alone has more points than allowed.
    /// A run that would pass a limit stops adding series and reports it from
    /// [`MetricsRun::over_limit`]; its result must then not be returned.
    pub fn limit(&mut self, max_series: usize, max_points: u64) -> Result<(), EvalError> {
        for operand in &mut self.operands {
            operand.acc.limit(max_series, max_points)?;
        }
        Ok(())
    }

    /// Whether the run hit a limit (see [`MetricsRun::limit`]).
    pub fn is_over_limit(&self) -> bool {
        self.operands.iter().any(|o| o.acc.over_limit)
    }

    /// The limit the run hit, if any (see [`MetricsRun::limit`]).
    pub fn over_limit(&self) -> Option<EvalError> {
        self.operands
            .iter()
            .find(|o| o.acc.over_limit)
            .map(|o| EvalError::Limit {
                message: o.acc.limit_text.clone(),
            })
    }

    /// Asks for up to `limit` exemplars per query (0: none, the default). They are kept for
    /// the series of a single query; arithmetic between queries makes new series without
    /// exemplars, and `compare()` gives none.
    pub fn exemplars(&mut self, limit: usize) {
        let single = matches!(self.plan, Plan::Operand(_));
        for operand in &mut self.operands {
            let compare = operand.evaluator.metrics.as_ref().is_some_and(|m| m.compare.is_some());
            operand.acc.exemplars = ExemplarPicker::new(if single && !compare { limit } else { 0 });
        }
    }

    /// Whether operand `k` still takes exemplars ([`MetricsRun::exemplar_in`]).
    pub fn wants_exemplars_in(&self, k: usize) -> bool {
        self.operands[k].acc.exemplars.wants()
    }

    /// Whether some operand would still take an exemplar of a span starting in `[lo, hi]`
    /// (nanoseconds): a source whose spans all start there need not offer any otherwise.
    pub fn wants_exemplars_between(&self, lo: u64, hi: u64) -> bool {
        self.operands
            .iter()
            .any(|o| o.acc.exemplars.wants_between((o.acc.start, o.acc.end), lo, hi))
    }

    /// Offers a span that [`MetricsRun::record_in`] added to `series` of operand `k`, with
    /// the same start and value, as an exemplar.
    pub fn exemplar_in(
        &mut self,
        k: usize,
        series: usize,
        start_unix_nano: u64,
        value: f64,
        trace_id: [u8; 16],
        span_id: Option<[u8; 8]>,
    ) {
        let operand = &mut self.operands[k];
        let metrics = operand.evaluator.metrics.as_ref().expect("checked in new");
        operand
            .acc
            .exemplar(metrics, series, start_unix_nano, value, trace_id, span_id);
    }

    /// The number of steps of the range.
    pub fn steps(&self) -> usize {
        self.operands[0].acc.steps
    }

    /// Observes the spans `trace` contributes. Each trace must be added once, whole.
    pub fn add(&mut self, trace: &Trace) {
        for operand in &mut self.operands {
            operand.add(trace);
        }
    }

    /// Whether each span's contribution depends on that span alone, so spans can be fed one at
    /// a time with [`MetricsRun::resolve`]: the query is one spanset filter (no structural
    /// operators, no pipeline stages) followed by the metrics function, and no field of it is
    /// trace-level (`rootName`, `rootServiceName`, `traceDuration`, `trace:id`, nested sets,
    /// parent attributes, `span:childCount`). For arithmetic between queries, every operand
    /// must be; feed each span to each operand ([`MetricsRun::resolve_in`]).
    pub fn span_local(&self) -> bool {
        self.operands.iter().all(|o| o.evaluator.span_local())
    }

    /// The queries the run evaluates: 1, or each operand of arithmetic between queries, in
    /// the order of [`Query::pipelines`](crate::ast::Query::pipelines).
    pub fn operand_count(&self) -> usize {
        self.operands.len()
    }

    /// Evaluates a trace of exactly one span, for a [`span_local`](Self::span_local) query:
    /// the series the span falls in and the value it adds, or `None` when it adds nothing.
    /// Nothing is recorded; pass the result to [`MetricsRun::record`]. A span-local query gives
    /// the same series from `resolve` and `record` over each span of a trace as from
    /// [`MetricsRun::add`] over the trace.
    pub fn resolve(&mut self, one_span: &Trace) -> Option<(usize, f64)> {
        self.resolve_in(0, one_span)
    }

    /// [`MetricsRun::resolve`] for operand `k` (< [`MetricsRun::operand_count`]).
    pub fn resolve_in(&mut self, k: usize, one_span: &Trace) -> Option<(usize, f64)> {
        debug_assert_eq!(one_span.spans.len(), 1);
        debug_assert!(self.span_local());
        let operand = &mut self.operands[k];
        let metrics = operand.evaluator.metrics.as_ref().expect("checked in new");
        let env = TraceEnv::span_local(one_span);
        if operand.evaluator.run(&env).is_empty() {
            return None;
        }
        operand.acc.resolve(metrics, &env, 0)
    }

    /// Whether operand `k` is a `compare()` query: feed its spans with
    /// [`MetricsRun::compare_condition_in`], [`MetricsRun::compare_step_in`] and
    /// [`MetricsRun::compare_add_in`] instead of `resolve_in`.
    pub fn is_compare_in(&self, k: usize) -> bool {
        self.operands[k]
            .evaluator
            .metrics
            .as_ref()
            .is_some_and(|m| m.compare.is_some())
    }

    /// For a [`span_local`](Self::span_local) `compare()` operand `k`: `None` when the span of
    /// `one_span` does not pass the query's filter, else whether the selection's condition holds
    /// for it (its time window aside, which [`MetricsRun::compare_step_in`] applies).
    pub fn compare_condition_in(&mut self, k: usize, one_span: &Trace) -> Option<bool> {
        debug_assert_eq!(one_span.spans.len(), 1);
        let operand = &self.operands[k];
        let c = operand.evaluator.metrics.as_ref()?.compare.as_ref()?;
        let env = TraceEnv::span_local(one_span);
        if operand.evaluator.run(&env).is_empty() {
            return None;
        }
        Some(c.condition(&env, 0))
    }

    /// Where a span of `compare()` operand `k` starting at `start_unix_nano`, which passed the
    /// filter with the selection's condition `condition`, is counted: whether in the selection
    /// (the condition holds and the span starts in the selection's window), and its step.
    /// `None` when it starts outside the range.
    pub fn compare_step_in(&self, k: usize, start_unix_nano: u64, condition: bool) -> Option<(bool, usize)> {
        let operand = &self.operands[k];
        let c = operand.evaluator.metrics.as_ref()?.compare.as_ref()?;
        let acc = &operand.acc;
        if start_unix_nano < acc.start || start_unix_nano >= acc.end {
            return None;
        }
        Some((
            condition && c.in_window(start_unix_nano),
            ((start_unix_nano - acc.start) / acc.step) as usize,
        ))
    }

    /// Counts `n` spans of `compare()` operand `k` at `step` (from
    /// [`MetricsRun::compare_step_in`]) whose attribute `label` (`name`, `status`,
    /// `statusMessage`, `kind`, `span.x`, `resource.x`) is `value`. Counting each attribute of
    /// each span so gives the series [`MetricsRun::add`] does, in any order.
    pub fn compare_add_in(&mut self, k: usize, selected: bool, step: usize, label: &str, value: Value, n: u64) {
        let counted = !matches!(value, Value::Nil | Value::Array(_));
        self.compare_add_with_in(k, selected, step, label, counted, || value, n);
    }

    /// [`MetricsRun::compare_add_in`] with the value made by `value` only when it is listed:
    /// `counted` must say whether it is neither nil nor an array. An attribute with more
    /// distinct values than `compare()` lists (user IDs, URLs) then costs no decoding.
    #[allow(clippy::too_many_arguments)]
    pub fn compare_add_with_in(
        &mut self,
        k: usize,
        selected: bool,
        step: usize,
        label: &str,
        counted: bool,
        value: impl FnOnce() -> Value,
        n: u64,
    ) {
        let operand = &mut self.operands[k];
        let Some(c) = operand.evaluator.metrics.as_ref().and_then(|m| m.compare.as_ref()) else {
            return;
        };
        let top_n = c.top_n;
        operand
            .acc
            .compare_add_with(selected, top_n, step, label, counted, value, n);
    }

    /// Records a span that starts at `start_unix_nano` in the series and with the value
    /// [`MetricsRun::resolve`] returned.
    pub fn record(&mut self, series: usize, start_unix_nano: u64, value: f64) {
        self.record_in(0, series, start_unix_nano, value);
    }

    /// [`MetricsRun::record`] for operand `k`.
    pub fn record_in(&mut self, k: usize, series: usize, start_unix_nano: u64, value: f64) {
        self.operands[k].acc.record(series, start_unix_nano, value);
    }

    /// The series, or the limit the run passed ([`MetricsRun::limit`]).
    pub fn finish_within_limits(self) -> Result<Vec<Series>, EvalError> {
        match self.over_limit() {
            Some(e) => Err(e),
            None => Ok(self.finish()),
        }
    }

    /// The series, sorted by their labels.
    pub fn finish(self) -> Vec<Series> {
        let steps = self.steps();
        let mut finished: Vec<Option<Vec<Series>>> = self
            .operands
            .into_iter()
            .map(|o| {
                let metrics = o.evaluator.metrics.as_ref().expect("checked in new");
                let series = o.acc.finish(metrics);
                Some(second_stages(series, &metrics.second, steps))
            })
            .collect();
        let mut out = run_plan(&self.plan, &mut finished, steps);
        out.sort_by(|a, b| cmp_labels(&a.labels, &b.labels));
        out
    }
}

/// Compiles metrics arithmetic: each operand pipeline becomes an [`Operand`].
fn plan(math: &MetricsExpr, operands: &mut Vec<Operand>, acc: &dyn Fn() -> Accumulator) -> Result<Plan, EvalError> {
    Ok(match math {
        MetricsExpr::Query(pipeline) => {
            let evaluator = Evaluator::compile(pipeline, pipeline.to_string())?;
            operands.push(Operand { evaluator, acc: acc() });
            Plan::Operand(operands.len() - 1)
        }
        MetricsExpr::Binary { op, lhs, rhs, stages } => Plan::Binary {
            op: *op,
            lhs: Box::new(plan(lhs, operands, acc)?),
            rhs: Box::new(plan(rhs, operands, acc)?),
            stages: stages.iter().map(CSecond::compile).collect::<Result<_, _>>()?,
        },
    })
}

fn run_plan(plan: &Plan, finished: &mut [Option<Vec<Series>>], steps: usize) -> Vec<Series> {
    match plan {
        Plan::Operand(n) => finished[*n].take().unwrap_or_default(),
        Plan::Binary { op, lhs, rhs, stages } => {
            let l = run_plan(lhs, finished, steps);
            let r = run_plan(rhs, finished, steps);
            second_stages(binary(*op, &l, &r), stages, steps)
        }
    }
}

impl Operand {
    fn add(&mut self, trace: &Trace) {
        let metrics = self.evaluator.metrics.as_ref().expect("checked in new");
        let env = TraceEnv::new(trace, self.evaluator.structural);
        let sets = self.evaluator.run(&env);
        let mut seen = vec![false; if sets.len() > 1 { trace.spans.len() } else { 0 }];
        for set in &sets {
            for &i in &set.spans {
                if sets.len() > 1 {
                    if seen[i] {
                        continue;
                    }
                    seen[i] = true;
                }
                self.acc.observe(metrics, &env, i);
            }
        }
    }
}

#[derive(Debug)]
struct Accumulator {
    start: u64,
    end: u64,
    step: u64,
    steps: usize,
    /// Group key (the `by` values, plus the bucket for histograms) to index in `groups`.
    index: HashMap<Vec<GroupKey>, usize>,
    groups: Vec<Group>,
    /// Most groups (series) the run may create; see [`MetricsRun::limit`].
    max_groups: usize,
    /// Set when a span needed a group past `max_groups`.
    over_limit: bool,
    limit_text: String,
    /// `compare()`'s counts: baseline (0) and selection (1), by attribute label.
    compare: [HashMap<String, AttrCounts>; 2],
    exemplars: ExemplarPicker,
}

/// Chooses exemplars as Tempo does: the range is cut into `limit / 2` equal buckets of at most
/// two exemplars each, shared by every series of the query, and a trace gives at most one.
/// The first spans offered win.
#[derive(Debug, Default)]
struct ExemplarPicker {
    limit: usize,
    buckets: Vec<u8>,
    traces: std::collections::HashSet<[u8; 16]>,
    /// (group, exemplar).
    taken: Vec<(usize, Exemplar)>,
}

impl ExemplarPicker {
    fn new(limit: usize) -> ExemplarPicker {
        ExemplarPicker {
            limit,
            buckets: vec![0; (limit / 2).max(1)],
            ..Default::default()
        }
    }

    fn wants(&self) -> bool {
        self.taken.len() < self.limit
    }

    /// Whether a span starting in `[lo, hi]` could still be taken: a bucket that overlaps it
    /// has room.
    fn wants_between(&self, range: (u64, u64), lo: u64, hi: u64) -> bool {
        if !self.wants() || hi < range.0 || lo >= range.1 {
            return false;
        }
        let n = self.buckets.len() as u128;
        let at = |t: u64| {
            ((t.clamp(range.0, range.1 - 1) - range.0) as u128 * n / (range.1 - range.0) as u128).min(n - 1) as usize
        };
        self.buckets[at(lo)..=at(hi)].iter().any(|&c| c < 2)
    }

    fn offer(&mut self, range: (u64, u64), group: usize, e: Exemplar) {
        if !self.wants() || e.timestamp_ns < range.0 || e.timestamp_ns >= range.1 || self.traces.contains(&e.trace_id) {
            return;
        }
        let n = self.buckets.len() as u128;
        let b = ((e.timestamp_ns - range.0) as u128 * n / (range.1 - range.0) as u128).min(n - 1) as usize;
        if self.buckets[b] >= 2 {
            return;
        }
        self.buckets[b] += 1;
        self.traces.insert(e.trace_id);
        self.taken.push((group, e));
    }
}

/// Most distinct values of one attribute `compare()` counts per group. An attribute with more
/// gives only its total series (Tempo marks it `__too_many_values__`, a series without
/// samples, so no series).
pub(crate) const MAX_COMPARE_VALUES: usize = 1000;

/// `compare()`'s counts of one attribute in one group, per step.
#[derive(Debug)]
struct AttrCounts {
    total: Vec<u64>,
    values: HashMap<GroupKey, (Value, Vec<u64>)>,
    too_many: bool,
}

#[derive(Debug)]
struct Group {
    /// The value of each `by` field, nil included.
    by: Vec<Value>,
    /// The histogram bucket.
    bucket: Option<f64>,
    data: Data,
    /// Whether a span was recorded: [`MetricsRun::resolve`] creates groups that
    /// [`MetricsRun::record`] may never use, and those make no series.
    used: bool,
}

/// Per-step state.
#[derive(Debug)]
enum Data {
    Count(Vec<u64>),
    Min(Vec<Option<f64>>),
    Max(Vec<Option<f64>>),
    Sum(Vec<Option<f64>>),
    Avg(Vec<(f64, u64)>),
    Values(Vec<Vec<f64>>),
}

/// A number or duration as a metrics value (durations in seconds).
fn metric_value(v: Val<'_>) -> Option<f64> {
    match v {
        Val::Int(i) => Some(i as f64),
        Val::Float(x) if !x.is_nan() => Some(x),
        Val::Duration(d) => Some(d as f64 / 1e9),
        _ => None,
    }
}

/// The power-of-two histogram bucket of a value, as Tempo's `Log2Bucketize`.
fn bucket(v: Val<'_>) -> Option<f64> {
    let upper = |x: i64| {
        u64::try_from(x)
            .ok()
            .filter(|&x| x >= 2)
            .map(|x| x.next_power_of_two() as f64)
    };
    match v {
        Val::Int(i) => upper(i),
        Val::Duration(d) => upper(d).map(|b| b / 1e9),
        _ => None,
    }
}

impl Accumulator {
    fn limit(&mut self, max_series: usize, max_points: u64) -> Result<(), EvalError> {
        let steps = self.steps as u64;
        if steps > max_points {
            return Err(EvalError::Limit {
                message: format!(
                    "{steps} steps exceed the maximum of {max_points} points per query (max_metrics_points); use a larger step or a shorter range"
                ),
            });
        }
        let by_points = (max_points / steps.max(1)) as usize;
        self.max_groups = max_series.min(by_points);
        self.over_limit = false;
        if self.max_groups < max_series {
            self.limit_text = format!(
                "{} series of {steps} steps would exceed the maximum of {max_points} points per query (max_metrics_points); use a larger step, a shorter range or fewer by() fields",
                self.max_groups + 1
            );
        } else {
            self.limit_text = format!(
                "the query produces more than the maximum of {max_series} series (max_metrics_series); narrow its filter or use fewer by() fields"
            );
        }
        Ok(())
    }

    fn observe(&mut self, metrics: &CMetrics, env: &TraceEnv<'_>, i: usize) {
        let start = env.trace.spans[i].start_unix_nano;
        if start < self.start || start >= self.end {
            return;
        }
        if let Some(c) = &metrics.compare {
            self.observe_compare(c.selects(env, i), c.top_n, env, i);
            return;
        }
        if let Some((group, value)) = self.resolve(metrics, env, i) {
            self.record(group, start, value);
            if self.exemplars.wants() {
                let span = &env.trace.spans[i];
                self.exemplar(metrics, group, start, value, span.trace_id, Some(span.span_id));
            }
        }
    }

    /// Counts each attribute of span `i` for `compare()`: the intrinsics `name`, `status`,
    /// `statusMessage` and `kind`, every span attribute (`span.x`) and every resource
    /// attribute (`resource.x`), as Tempo's compare selects them; durations, IDs and arrays
    /// are not counted.
    ///
    /// Each attribute of each group makes up to `top_n + 1` series, which count against the
    /// run's series limit ([`MetricsRun::limit`]).
    fn observe_compare(&mut self, selected: bool, top_n: usize, env: &TraceEnv<'_>, i: usize) {
        let span = &env.trace.spans[i];
        let step = ((span.start_unix_nano - self.start) / self.step) as usize;
        self.compare_add(selected, top_n, step, "name", Value::Str(span.name.clone()), 1);
        self.compare_add(selected, top_n, step, "status", Value::Status(span.status), 1);
        self.compare_add(
            selected,
            top_n,
            step,
            "statusMessage",
            Value::Str(span.status_message.clone()),
            1,
        );
        self.compare_add(selected, top_n, step, "kind", Value::Kind(span.kind), 1);
        let mut label = String::new();
        for (prefix, attrs) in [("span.", &span.span_attrs), ("resource.", &span.resource_attrs)] {
            for (k, v) in attrs {
                label.clear();
                label.push_str(prefix);
                label.push_str(k);
                self.compare_add(selected, top_n, step, &label, v.clone(), 1);
            }
        }
    }

    /// Counts `n` spans of step `step` whose attribute `label` is `value`, in the selection or
    /// the baseline of `compare()`. Whether an attribute passes the series limit, or has too
    /// many values to list, depends only on how many distinct attributes and values were
    /// counted, not on their order: spans may be counted in any order and grouping.
    fn compare_add(&mut self, selected: bool, top_n: usize, step: usize, label: &str, value: Value, n: u64) {
        let counted = !matches!(value, Value::Nil | Value::Array(_));
        self.compare_add_with(selected, top_n, step, label, counted, || value, n);
    }

    /// [`Self::compare_add`] with the value made only when it is listed: `counted` says
    /// whether it is neither nil nor an array (those are not counted at all). An attribute
    /// with too many values to list counts only its total, so its values need not be made.
    #[allow(clippy::too_many_arguments)]
    fn compare_add_with(
        &mut self,
        selected: bool,
        top_n: usize,
        step: usize,
        label: &str,
        counted: bool,
        value: impl FnOnce() -> Value,
        n: u64,
    ) {
        if !counted {
            return;
        }
        let max_attrs = self.max_groups / (top_n + 1);
        let attrs = self.compare[0].len() + self.compare[1].len();
        let steps = self.steps;
        let groups = &mut self.compare[usize::from(selected)];
        let attr = match groups.get_mut(label) {
            Some(a) => a,
            None if attrs >= max_attrs => {
                self.over_limit = true;
                return;
            }
            None => groups.entry(label.to_owned()).or_insert_with(|| AttrCounts {
                total: vec![0; steps],
                values: HashMap::new(),
                too_many: false,
            }),
        };
        attr.total[step] += n;
        if attr.too_many {
            return;
        }
        let value = value();
        let key = GroupKey::of(&value);
        if let Some((_, counts)) = attr.values.get_mut(&key) {
            counts[step] += n;
        } else if attr.values.len() == MAX_COMPARE_VALUES {
            attr.too_many = true;
            attr.values = HashMap::new();
        } else {
            let mut counts = vec![0; steps];
            counts[step] = n;
            attr.values.insert(key, (value, counts));
        }
    }

    /// `compare()`'s series: per group and attribute, the `top_n` values with the most spans
    /// over the range (`__meta_type` `baseline` or `selection`), and the attribute's total
    /// (`baseline_total` or `selection_total`, the attribute's value `nil`). Counts per step.
    fn finish_compare(self, top_n: usize) -> Vec<Series> {
        let mut out = Vec::new();
        let as_values = |c: &[u64]| c.iter().map(|&n| Some(n as f64)).collect::<Vec<_>>();
        for (groups, (kind, total)) in self
            .compare
            .into_iter()
            .zip([("baseline", "baseline_total"), ("selection", "selection_total")])
        {
            for (label, attr) in groups {
                let meta = |t: &str| ("__meta_type".to_owned(), Value::Str(t.to_owned()));
                out.push(Series::new(
                    vec![meta(total), (label.clone(), Value::Str("nil".to_owned()))],
                    as_values(&attr.total),
                ));
                let mut values: Vec<(Value, Vec<u64>)> = attr.values.into_values().collect();
                values.sort_by(|a, b| {
                    let sum = |c: &[u64]| c.iter().sum::<u64>();
                    sum(&b.1).cmp(&sum(&a.1)).then_with(|| cmp_value(&a.0, &b.0))
                });
                for (value, counts) in values.into_iter().take(top_n) {
                    out.push(Series::new(
                        vec![meta(kind), (label.clone(), value)],
                        as_values(&counts),
                    ));
                }
            }
        }
        out.sort_by(|a, b| cmp_labels(&a.labels, &b.labels));
        out
    }

    /// The group span `i` falls in (created if new) and the value it contributes; `None` when
    /// it contributes nothing.
    fn resolve(&mut self, metrics: &CMetrics, env: &TraceEnv<'_>, i: usize) -> Option<(usize, f64)> {
        let ctx = env.ctx(i);
        let field = metrics.field.as_ref().map(|f| eval_value(f, ctx));
        let value = field.and_then(metric_value);
        let func = metrics.func;
        let bucket = match func {
            MetricsFn::HistogramOverTime => Some(field.and_then(bucket)?),
            MetricsFn::Rate | MetricsFn::CountOverTime => None,
            _ if value.is_none() => return None,
            _ => None,
        };
        let by: Vec<Value> = metrics.by.iter().map(|(_, e)| eval_value(e, ctx).to_value()).collect();
        let mut key: Vec<GroupKey> = by.iter().map(GroupKey::of).collect();
        if let Some(b) = bucket {
            key.push(GroupKey::of(&Value::Float(b)));
        }
        let steps = self.steps;
        let groups = &mut self.groups;
        if groups.len() >= self.max_groups && !self.index.contains_key(&key) {
            self.over_limit = true;
            return None;
        }
        let n = *self.index.entry(key).or_insert_with(|| {
            let data = match func {
                MetricsFn::Rate | MetricsFn::CountOverTime | MetricsFn::HistogramOverTime => {
                    Data::Count(vec![0; steps])
                }
                MetricsFn::MinOverTime => Data::Min(vec![None; steps]),
                MetricsFn::MaxOverTime => Data::Max(vec![None; steps]),
                MetricsFn::SumOverTime => Data::Sum(vec![None; steps]),
                MetricsFn::AvgOverTime => Data::Avg(vec![(0.0, 0); steps]),
                MetricsFn::QuantileOverTime => Data::Values(vec![Vec::new(); steps]),
            };
            groups.push(Group {
                by,
                bucket,
                data,
                used: false,
            });
            groups.len() - 1
        });
        Some((n, value.unwrap_or(0.0)))
    }

    /// Offers the span of `trace_id` that [`Accumulator::record`] added to group `n` as an
    /// exemplar.
    fn exemplar(
        &mut self,
        metrics: &CMetrics,
        n: usize,
        start: u64,
        v: f64,
        trace_id: [u8; 16],
        span_id: Option<[u8; 8]>,
    ) {
        let value = match metrics.func {
            MetricsFn::Rate | MetricsFn::CountOverTime | MetricsFn::HistogramOverTime => None,
            _ => Some(v),
        };
        let e = Exemplar {
            trace_id,
            span_id,
            value,
            timestamp_ns: start,
        };
        self.exemplars.offer((self.start, self.end), n, e);
    }

    /// Adds `v` at the step of `start` to group `n`. Starts outside the range are ignored.
    fn record(&mut self, n: usize, start: u64, v: f64) {
        if start < self.start || start >= self.end {
            return;
        }
        let step = ((start - self.start) / self.step) as usize;
        let group = &mut self.groups[n];
        group.used = true;
        match &mut group.data {
            Data::Count(c) => c[step] += 1,
            Data::Min(m) => m[step] = Some(m[step].map_or(v, |x| x.min(v))),
            Data::Max(m) => m[step] = Some(m[step].map_or(v, |x| x.max(v))),
            Data::Sum(s) => s[step] = Some(s[step].unwrap_or(0.0) + v),
            Data::Avg(a) => {
                a[step].0 += v;
                a[step].1 += 1;
            }
            Data::Values(vs) => vs[step].push(v),
        }
    }

    fn finish(self, metrics: &CMetrics) -> Vec<Series> {
        if let Some(c) = &metrics.compare {
            return self.finish_compare(c.top_n);
        }
        let step_seconds = self.step as f64 / 1e9;
        let mut exemplars: Vec<Vec<Exemplar>> = vec![Vec::new(); self.groups.len()];
        for (n, e) in self.exemplars.taken {
            exemplars[n].push(e);
        }
        let (start, step) = (self.start, self.step);
        let mut out = Vec::new();
        for (group, exemplars) in self.groups.into_iter().zip(exemplars).filter(|(g, _)| g.used) {
            let mut labels: Vec<(String, Value)> = metrics
                .by
                .iter()
                .zip(&group.by)
                .filter(|(_, v)| !matches!(v, Value::Nil))
                .map(|((name, _), v)| (name.clone(), v.clone()))
                .collect();
            match metrics.func {
                MetricsFn::HistogramOverTime | MetricsFn::QuantileOverTime => {}
                _ if metrics.by.is_empty() => {
                    labels.push(("__name__".to_owned(), Value::Str(metrics.func.name().to_owned())));
                }
                _ if labels.is_empty() => labels.push((metrics.by[0].0.clone(), Value::Nil)),
                _ => {}
            }
            if let Some(b) = group.bucket {
                labels.push(("__bucket".to_owned(), Value::Float(b)));
            }
            match group.data {
                Data::Count(counts) => {
                    let scale = if metrics.func == MetricsFn::Rate {
                        1.0 / step_seconds
                    } else {
                        1.0
                    };
                    let values = counts.iter().map(|&c| Some(c as f64 * scale)).collect();
                    out.push(Series {
                        labels,
                        values,
                        exemplars,
                    });
                }
                Data::Min(values) | Data::Max(values) | Data::Sum(values) => out.push(Series {
                    labels,
                    values,
                    exemplars,
                }),
                Data::Avg(sums) => {
                    let values = sums.iter().map(|&(sum, n)| (n > 0).then(|| sum / n as f64)).collect();
                    out.push(Series {
                        labels,
                        values,
                        exemplars,
                    });
                }
                Data::Values(mut steps) => {
                    for values in &mut steps {
                        values.sort_by(f64::total_cmp);
                    }
                    let first = out.len();
                    for &q in &metrics.quantiles {
                        let mut labels = labels.clone();
                        labels.push(("p".to_owned(), Value::Float(q)));
                        let values = steps.iter().map(|values| quantile(values, q)).collect();
                        out.push(Series::new(labels, values));
                    }
                    // Each exemplar goes to the quantile whose value at its step is nearest.
                    for e in exemplars {
                        let at = ((e.timestamp_ns - start) / step) as usize;
                        let v = e.value.unwrap_or(0.0);
                        let nearest = (first..out.len())
                            .filter_map(|k| Some((k, (out[k].values.get(at).copied().flatten()? - v).abs())))
                            .min_by(|a, b| a.1.total_cmp(&b.1));
                        if let Some((k, _)) = nearest {
                            out[k].exemplars.push(e);
                        }
                    }
                }
            }
        }
        out.sort_by(|a, b| cmp_labels(&a.labels, &b.labels));
        out
    }
}

/// The `q` quantile of ascending `values`, interpolated linearly between the closest ranks:
/// rank `h = q * (n - 1)`, value `x[⌊h⌋] + (h - ⌊h⌋) * (x[⌊h⌋ + 1] - x[⌊h⌋])`.
fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let last = values.len().checked_sub(1)?;
    let h = q.clamp(0.0, 1.0) * last as f64;
    let lo = (h.floor() as usize).min(last);
    let hi = (lo + 1).min(last);
    let (a, b) = (values[lo], values[hi]);
    Some(if a == b { a } else { a + (h - lo as f64) * (b - a) })
}

fn cmp_labels(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for ((ka, va), (kb, vb)) in a.iter().zip(b) {
        let ord = ka.cmp(kb).then_with(|| cmp_value(va, vb));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

/// A total order on values: by kind, then by value (floats by `total_cmp`).
fn cmp_value(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Nil => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Float(_) => 3,
            Value::Duration(_) => 4,
            Value::Str(_) => 5,
            Value::Status(_) => 6,
            Value::Kind(_) => 7,
            Value::Array(_) => 8,
        }
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Int(x), Value::Int(y)) | (Value::Duration(x), Value::Duration(y)) => x.cmp(y),
        (Value::Float(x), Value::Float(y)) => x.total_cmp(y),
        (Value::Str(x), Value::Str(y)) => x.cmp(y),
        (Value::Status(x), Value::Status(y)) => x.name().cmp(y.name()),
        (Value::Kind(x), Value::Kind(y)) => x.name().cmp(y.name()),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let ord = cmp_value(p, q);
                if ord != Ordering::Equal {
                    return ord;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

// ---------------------------------------------------------------------------------------------
// Second stages and arithmetic between queries

/// Applies second stages in order.
fn second_stages(mut series: Vec<Series>, stages: &[CSecond], steps: usize) -> Vec<Series> {
    for stage in stages {
        series = match *stage {
            CSecond::TopK(k) => top_k(series, k, steps, true),
            CSecond::BottomK(k) => top_k(series, k, steps, false),
            CSecond::Filter(op, value) => series
                .into_iter()
                .filter_map(|mut s| {
                    for v in &mut s.values {
                        *v = v.filter(|x| !x.is_nan() && compare_f64(op, *x, value));
                    }
                    s.values.iter().any(Option::is_some).then_some(s)
                })
                .collect(),
            CSecond::Arithmetic {
                op,
                value,
                scalar_first,
            } => series
                .into_iter()
                .map(|mut s| {
                    for v in &mut s.values {
                        *v = v.and_then(|x| {
                            let (a, b) = if scalar_first { (value, x) } else { (x, value) };
                            arithmetic(op, a, b)
                        });
                    }
                    s
                })
                .collect(),
        };
    }
    series
}

fn compare_f64(op: BinaryOp, a: f64, b: f64) -> bool {
    match op {
        BinaryOp::Eq => a == b,
        BinaryOp::Neq => a != b,
        BinaryOp::Lt => a < b,
        BinaryOp::Lte => a <= b,
        BinaryOp::Gt => a > b,
        BinaryOp::Gte => a >= b,
        _ => false,
    }
}

/// `a op b` for `+ - * /`; `None` for division by zero and any other undefined result.
fn arithmetic(op: BinaryOp, a: f64, b: f64) -> Option<f64> {
    let x = match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div if b == 0.0 => return None,
        BinaryOp::Div => a / b,
        _ => return None,
    };
    (!x.is_nan()).then_some(x)
}

/// `topk(k)` (`highest`) or `bottomk(k)`, as Tempo: with at most `k` series, all of them
/// unchanged; otherwise, at each step, the `k` series with the highest (lowest) values there
/// keep that value, and a series kept at no step is dropped. Ties go to the series whose labels
/// sort first for `topk` and last for `bottomk`, as Tempo's heaps break them.
fn top_k(series: Vec<Series>, k: usize, steps: usize, highest: bool) -> Vec<Series> {
    if series.len() <= k {
        return series;
    }
    // keep[n * steps + step]: series n is among the k at that step.
    let mut keep = vec![false; series.len() * steps];
    let mut order: Vec<usize> = Vec::with_capacity(series.len());
    for step in 0..steps {
        order.clear();
        order.extend((0..series.len()).filter(|&n| series[n].values.get(step).copied().flatten().is_some()));
        let value = |n: usize| series[n].values[step].unwrap_or(f64::NAN);
        order.sort_by(|&a, &b| {
            let by_value = value(a).total_cmp(&value(b));
            let by_labels = cmp_labels(&series[a].labels, &series[b].labels);
            if highest {
                by_value.reverse().then(by_labels)
            } else {
                by_value.then(by_labels.reverse())
            }
        });
        for &n in order.iter().take(k) {
            keep[n * steps + step] = true;
        }
    }
    series
        .into_iter()
        .zip(keep.chunks(steps.max(1)))
        .filter(|(_, keep)| keep.iter().any(|&k| k))
        .map(|(mut s, keep)| {
            for (v, &k) in s.values.iter_mut().zip(keep) {
                if !k {
                    *v = None;
                }
            }
            s
        })
        .collect()
}

/// The labels that identify a series for matching: all but `__name__`.
fn match_key(labels: &[(String, Value)]) -> Vec<(String, GroupKey)> {
    labels
        .iter()
        .filter(|(k, _)| k != "__name__")
        .map(|(k, v)| (k.clone(), GroupKey::of(v)))
        .collect()
}

/// `lhs op rhs` between the series of two metrics queries, as Tempo: series pair up when their
/// labels other than `__name__` are equal, and a series without such labels pairs with every
/// series of the other side. Unpaired series are dropped. Each point is `l op r` (`None` if
/// either is, or on division by zero). The labels are the left series' plus the right's not
/// already there; `__name__` becomes `(l op r)` when both sides have one, else it is dropped.
fn binary(op: BinaryOp, lhs: &[Series], rhs: &[Series]) -> Vec<Series> {
    let index = |set: &[Series]| -> HashMap<Vec<(String, GroupKey)>, usize> {
        set.iter().enumerate().map(|(n, s)| (match_key(&s.labels), n)).collect()
    };
    let (li, ri) = (index(lhs), index(rhs));
    let bare: Vec<(String, GroupKey)> = Vec::new();
    let target = if ri.contains_key(&bare) { lhs } else { rhs };
    let mut out = Vec::new();
    for t in target {
        let key = match_key(&t.labels);
        let find =
            |index: &HashMap<Vec<(String, GroupKey)>, usize>| index.get(&key).or_else(|| index.get(&bare)).copied();
        let (Some(l), Some(r)) = (find(&li), find(&ri)) else {
            continue;
        };
        let (l, r) = (&lhs[l], &rhs[r]);
        let values = l
            .values
            .iter()
            .zip(&r.values)
            .map(|(a, b)| arithmetic(op, (*a)?, (*b)?))
            .collect();
        out.push(Series::new(merge_labels(op, &l.labels, &r.labels), values));
    }
    out
}

fn merge_labels(op: BinaryOp, l: &[(String, Value)], r: &[(String, Value)]) -> Vec<(String, Value)> {
    let mut out = l.to_vec();
    for (k, v) in r {
        if k != "__name__" && !l.iter().any(|(lk, _)| lk == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    let name = |labels: &[(String, Value)]| {
        labels.iter().find_map(|(k, v)| match v {
            Value::Str(s) if k == "__name__" => Some(s.clone()),
            _ => None,
        })
    };
    match (name(l), name(r)) {
        (Some(a), Some(b)) => {
            if let Some(slot) = out.iter_mut().find(|(k, _)| k == "__name__") {
                slot.1 = Value::Str(format!("({a} {} {b})", op.symbol()));
            }
        }
        _ => out.retain(|(k, _)| k != "__name__"),
    }
    out
}

#[cfg(test)]
mod tests;
