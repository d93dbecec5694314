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

mod accumulator;
mod second_stage;
pub mod sketch;

use crate::ast::{BinaryOp, MetricsExpr, Query};
use crate::eval::{CSecond, EvalError, Evaluator, TraceEnv};
use crate::trace::{Trace, Value};

pub use accumulator::{AccState, CompareState, Data as StepData, ExactSum, GroupState};
use accumulator::{Accumulator, ExemplarPicker, cmp_labels};
use second_stage::{binary, second_stages};

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
    /// Every source weft reads gives it (the head, whole traces, a block's columns); `None`
    /// only from a caller that has no span IDs.
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
#[derive(Debug, Clone)]
pub struct MetricsRun {
    /// One per metrics query: the query itself, or each operand of metrics arithmetic.
    operands: Vec<Operand>,
    /// How the operands' series combine.
    plan: Plan,
}

#[derive(Debug, Clone)]
struct Operand {
    evaluator: Evaluator,
    acc: Accumulator,
}

/// The series a metrics query answers with, from its operands' series.
#[derive(Debug, Clone)]
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
        let acc = || Accumulator::new(start_ns, end_ns, step_ns, steps as usize);
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

    /// An empty run of the same query, range, limits and exemplar room, that counts a part of
    /// the spans (a row group on a query worker, a job on another querier) on its own; add
    /// it back with [`MetricsRun::merge`]. It wants exemplars only where this run still has
    /// room.
    pub fn fork(&self) -> MetricsRun {
        MetricsRun {
            operands: self
                .operands
                .iter()
                .map(|o| Operand {
                    evaluator: o.evaluator.clone(),
                    acc: o.acc.fork(),
                })
                .collect(),
            plan: self.plan.clone(),
        }
    }

    /// Adds what a [`fork`](Self::fork) counted, as if its spans were added here after the
    /// ones already added. Parts merged in the same order give the same series whatever ran
    /// when; a part's spans must not also be added elsewhere (each stored span counts once).
    /// Sums and averages may differ in their last bits from adding every span to one run
    /// (floating-point addition is not associative); counts, minimums, maximums and quantiles
    /// do not.
    pub fn merge(&mut self, part: MetricsRun) {
        debug_assert_eq!(self.operands.len(), part.operands.len());
        for (into, p) in self.operands.iter_mut().zip(part.operands) {
            let top_n = into
                .evaluator
                .metrics
                .as_ref()
                .and_then(|m| m.compare.as_ref())
                .map(|c| c.top_n);
            into.acc.merge(p.acc, top_n);
        }
    }

    /// The series of what the run has counted so far, as [`MetricsRun::finish_within_limits`]
    /// would give them now; the run goes on. A streamed query's partial answers (which clone
    /// the run where it is counted, and finish the copy elsewhere).
    pub fn snapshot(&self) -> Result<Vec<Series>, EvalError> {
        self.clone().finish_within_limits()
    }

    /// What the run counted, one state per operand, as plain data: a job's part of a query
    /// split across queriers, added to the frontend's run with [`MetricsRun::merge_state`].
    pub fn into_state(self) -> Vec<AccState> {
        self.operands.into_iter().map(|o| o.acc.into_state()).collect()
    }

    /// Adds what another run of the same query counted ([`MetricsRun::into_state`]), as
    /// [`MetricsRun::merge`] adds a fork. Fails when the state is not of this query's shape
    /// (operands, steps, series kinds).
    pub fn merge_state(&mut self, state: Vec<AccState>) -> Result<(), String> {
        if state.len() != self.operands.len() {
            return Err(format!(
                "{} operands in a part of a query of {}",
                state.len(),
                self.operands.len()
            ));
        }
        let mut part = self.fork();
        for (o, s) in part.operands.iter_mut().zip(state) {
            o.acc = o.acc.fork_holding(s)?;
        }
        self.merge(part);
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

    /// Whether some operand could still take an exemplar of a span starting in `[lo, hi]`
    /// (nanoseconds) whose trace ID is at least `min_trace` (when known): a source whose
    /// spans are all such need not offer any otherwise. Exemplars are the spans of the
    /// smallest trace IDs in each time bucket, so once a bucket holds two, a source of larger
    /// IDs (a row group, by its index's ID range) has none to give.
    pub fn wants_exemplars_between(&self, lo: u64, hi: u64, min_trace: Option<&[u8; 16]>) -> bool {
        let min = min_trace.map_or(0, accumulator::trace_prefix);
        self.operands
            .iter()
            .any(|o| o.acc.exemplars.wants_between((o.acc.start, o.acc.end), lo, hi, min))
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

#[cfg(test)]
mod tests;
