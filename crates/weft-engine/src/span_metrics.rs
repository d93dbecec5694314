//! TraceQL metrics one span at a time, straight from block columns.
//!
//! `{ } | rate() by (resource.service.name)` over ten million spans does not need ten million
//! decoded spans grouped into traces: every span counts on its own. When a metrics query is
//! *span-local* ([`MetricsRun::span_local`]) and reads only fields of the span itself (span
//! name, status, status message, kind, duration, resource and instrumentation-scope attributes,
//! up to [`MAX_SPAN_KEYS`] span attribute keys, and whether the span has a parent, which is
//! what `nestedSetParent < 0` and `span:parentID = nil` test), [`SpanMetrics`] runs it over a
//! row group's columns:
//!
//! - only those column chunks are fetched (`Block::fetch_metric_columns`); a span attribute
//!   comes from its dedicated column when the block has a complete one, otherwise it is picked
//!   out of each span's attribute blob;
//! - name, status message, resource, scope and each span attribute's values keep ids, so the
//!   evaluator runs once per distinct combination of the fields the query reads (a few hundred
//!   per row group), never per row. A filter that compares the duration with literals
//!   (`duration > 1s`) adds to the combination only how the duration orders against each of
//!   them (`DurationReads::class`); only a query that reads the duration some other way
//!   (arithmetic, `by(duration)`) is evaluated per row;
//! - each row then costs a hash lookup and an add.
//!
//! `compare()` (Grafana Traces Drilldown's comparison tab) counts every attribute of every span
//! it takes, so it reads every span attribute as well: the attribute blobs and the values moved
//! to dedicated columns (`MetricNeeds::all_span_attributes`). Its filter and selection are
//! evaluated by combination as above; each row then adds one to a tally per (selection or
//! baseline, step) and per id of what it counts: name, status message, status and kind; the
//! resource; the attribute blob; each moved value. At the end of the source every distinct
//! entry is decoded once and counted with its number of spans (`CompareTally`), attributes
//! walked without decoding values that `compare()` no longer lists.
//!
//! The result is exactly what [`MetricsRun::add`] gives over the same spans: a combination is
//! evaluated as a one-span trace built by [`decode_parts`] from its column values, the same
//! decoding the trace path uses (checked against it by this module's tests and by
//! `weft-querier`'s model test).
//!
//! Spans are not de-duplicated across blocks (a client retry stored in two blocks before
//! compaction merges them counts twice), as in Tempo's metrics.

mod compare;
mod head;
mod key;
mod reads;
mod sink;
mod source;

pub use head::HeadRows;
pub use key::BaseKey;
pub(crate) use key::KeyMask;
pub use reads::MAX_SPAN_KEYS;
pub(crate) use reads::{DurationReads, evaluated_duration, span_filter_needs};
pub use sink::ColumnSink;
pub use source::SpanSource;

use weft_block::hash::{FastBuild, FastMap};
use weft_block::index::Bloom;
use weft_block::{MetricNeeds, RowGroupStats};
use weft_traceql::ast::{FieldExpr, Intrinsic, Stage};
use weft_traceql::{EvalError, MetricsRun, Query, Series, Trace};

use crate::decode::{Parts, decode_parts};
use crate::prefilter::Prefilter;
use compare::CompareTally;
use key::Key;
use reads::Reads;

/// What operand `k` of `run` gives for a one-span trace: the series and value, or for
/// `compare()` whether the selection's condition holds, as series 1 or 0.
fn resolve(run: &mut MetricsRun, k: usize, one_span: &Trace) -> Option<(usize, f64)> {
    if run.is_compare_in(k) {
        run.compare_condition_in(k, one_span).map(|c| (usize::from(c), 0.0))
    } else {
        run.resolve_in(k, one_span)
    }
}

/// A span-local metrics query over stored spans; see the [module docs](self).
#[derive(Debug)]
pub struct SpanMetrics {
    run: MetricsRun,
    needs: MetricNeeds,
    parts: Parts,
    /// One per query the run evaluates (one, or each operand of arithmetic between queries).
    ops: Vec<OpState>,
    /// For per-row evaluation: the span of each combination, decoded once per source.
    decoded: FastMap<Key, weft_traceql::Span>,
    one: Trace,
    /// Which row groups may hold a span the query counts.
    prefilter: Prefilter,
    /// The parts of [`SpanSource::key`] the query reads.
    mask: KeyMask,
    /// Told the run as the scan's parts are merged (forks have none).
    watch: Option<crate::search::Watch>,
}

/// How one operand's spans are evaluated, and its cache.
#[derive(Debug)]
struct OpState {
    /// The filter or `by()` reads the duration other than by comparing it with literals, so
    /// each row is evaluated on its own.
    per_row: bool,
    /// The literals the filter compares the duration with: part of the cache key.
    durations: DurationReads,
    /// The metric's value is the span's duration: cached evaluations give the series, each row
    /// its own value.
    value_is_duration: bool,
    /// `histogram_over_time(duration)`: the series depends on the duration only through its
    /// power-of-two bucket, which becomes part of the cache key.
    histogram_of_duration: bool,
    /// Series and value of each combination of dictionary ids (and duration bucket, and
    /// duration class) seen in the current source. For `compare()`, whether the selection's
    /// condition holds, as series 1 or 0.
    cache: FastMap<(Key, u64, u64), Option<(usize, f64)>>,
    /// For `compare()`: the current source's counts.
    compare: Option<CompareTally>,
}

impl SpanMetrics {
    /// Compiles `query` for span-at-a-time evaluation over `[start_ns, end_ns)` in steps of
    /// `step_ns`. `Ok(None)` when the query is not span-local or reads a field without its own
    /// column (span, event or link attributes, IDs); run it over whole traces instead.
    pub fn new(query: &Query, start_ns: u64, end_ns: u64, step_ns: u64) -> Result<Option<SpanMetrics>, EvalError> {
        let run = MetricsRun::new(query, start_ns, end_ns, step_ns)?;
        if !run.span_local() {
            return Ok(None);
        }
        let mut needs = MetricNeeds::default();
        let mut ops = Vec::new();
        // Each query of the run (arithmetic between queries has several), in the run's order.
        for pipeline in query.pipelines() {
            let mut reads = Reads::default();
            let mut value_is_duration = false;
            let mut histogram_of_duration = false;
            for stage in &pipeline.stages {
                let ok = match stage {
                    Stage::Spanset(weft_traceql::ast::SpansetExpr::Filter(f)) => {
                        f.expr.iter().try_for_each(|e| reads.expr(e, false))
                    }
                    Stage::Metrics(m) => {
                        let histogram = m.func == weft_traceql::ast::MetricsFn::HistogramOverTime;
                        let of_duration = matches!(m.args.first(), Some(FieldExpr::Intrinsic(Intrinsic::Duration)));
                        value_is_duration = of_duration && !histogram;
                        histogram_of_duration = of_duration && histogram;
                        m.args
                            .iter()
                            .try_for_each(|e| reads.expr(e, true))
                            .and_then(|()| m.by.iter().flatten().try_for_each(|e| reads.expr(e, false)))
                    }
                    // The selection is evaluated as a filter is; what compare() counts is read
                    // below.
                    Stage::Compare(c) => c.filter.expr.iter().try_for_each(|e| reads.expr(e, false)),
                    // topk/bottomk, comparisons and arithmetic with numbers act on the
                    // finished series (`MetricsRun::finish`), so they do not stop
                    // span-at-a-time evaluation.
                    Stage::SecondStage(_) => Some(()),
                    _ => None,
                };
                if ok.is_none() {
                    return Ok(None);
                }
            }
            let per_row = reads.durations.per_span();
            needs = needs.union(reads.needs);
            if needs.span_keys.len() > MAX_SPAN_KEYS {
                return Ok(None);
            }
            ops.push(OpState {
                per_row,
                durations: reads.durations,
                value_is_duration: value_is_duration && !per_row,
                histogram_of_duration: histogram_of_duration && !per_row,
                cache: FastMap::with_hasher(FastBuild::default()),
                compare: run.is_compare_in(ops.len()).then(CompareTally::default),
            });
        }
        if ops.len() != run.operand_count() {
            return Ok(None);
        }
        // Evaluations are decoded and cached by what the query's fields read; compare() also
        // counts every attribute of each span it takes.
        let parts = Parts {
            resource: needs.resource,
            scope: needs.scope,
            span_attrs: !needs.span_keys.is_empty(),
            ..Parts::default()
        };
        let mask = KeyMask::of(&needs);
        if ops.iter().any(|op| op.compare.is_some()) {
            needs.name = true;
            needs.status = true;
            needs.status_message = true;
            needs.kind = true;
            needs.resource = true;
            needs.all_span_attributes = true;
        }
        Ok(Some(SpanMetrics {
            run,
            parts,
            mask,
            needs,
            ops,
            decoded: FastMap::with_hasher(FastBuild::default()),
            one: Trace {
                spans: vec![Default::default()],
            },
            prefilter: Prefilter::new(query),
            watch: None,
        }))
    }

    /// Whether a row group with these statistics and value bloom may hold a span the query
    /// counts (`false`: skip it).
    pub fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool {
        self.prefilter.row_group_may_match(stats, values)
    }

    /// The columns to read from each row group.
    pub fn needs(&self) -> &MetricNeeds {
        &self.needs
    }

    /// Adds every span of `src` (a row group's columns read with [`Self::needs`], or head
    /// rows). Evaluates once per distinct [`SpanSource::key`] (and duration bucket and class)
    /// unless the duration is read some other way.
    pub fn add(&mut self, src: &impl SpanSource) {
        for op in &mut self.ops {
            op.cache.clear();
        }
        self.decoded.clear();
        let keys = self.needs.span_keys.len();
        let mut combos: FastMap<[u32; MAX_SPAN_KEYS], u32> = FastMap::with_hasher(FastBuild::default());
        for i in 0..src.len() {
            let start = src.start(i);
            let duration = src.duration(i);
            let evaluated = evaluated_duration(duration);
            let (base, status_kind) = self.mask.apply(src.key(i));
            let attrs = match keys {
                0 => 0,
                1 => src.attr_id(0, i),
                _ => {
                    let mut ids = [0; MAX_SPAN_KEYS];
                    for (k, id) in ids.iter_mut().enumerate().take(keys) {
                        *id = src.attr_id(k, i);
                    }
                    let next = combos.len() as u32;
                    *combos.entry(ids).or_insert(next)
                }
            };
            let pack = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
            let key: Key = [pack(base[0], base[1]), pack(base[2], base[3]), pack(status_kind, attrs)];
            for k in 0..self.ops.len() {
                let op = &mut self.ops[k];
                let got = if op.per_row {
                    let parts = self.parts;
                    let span = self
                        .decoded
                        .entry(key)
                        .or_insert_with(|| decode_parts(&src.row(i), parts));
                    self.one.spans[0].clone_from(span);
                    self.one.spans[0].start_unix_nano = start;
                    self.one.spans[0].duration_nano = duration as u64;
                    resolve(&mut self.run, k, &self.one)
                } else {
                    // Durations under 2ns have no histogram bucket; others share one per power
                    // of two.
                    let class = if op.histogram_of_duration {
                        if evaluated < 2 {
                            evaluated as u64
                        } else {
                            (evaluated as u64).next_power_of_two()
                        }
                    } else {
                        0
                    };
                    let compared = op.durations.class(evaluated);
                    match op.cache.get(&(key, class, compared)) {
                        Some(&got) => got,
                        None => {
                            let span = &mut self.one.spans[0];
                            *span = decode_parts(&src.row(i), self.parts);
                            span.start_unix_nano = start;
                            span.duration_nano = duration as u64;
                            let got = resolve(&mut self.run, k, &self.one);
                            self.ops[k].cache.insert((key, class, compared), got);
                            got
                        }
                    }
                };
                if let Some(tally) = &mut self.ops[k].compare {
                    if let Some((condition, _)) = got
                        && let Some((selected, step)) = self.run.compare_step_in(k, start, condition == 1)
                    {
                        tally.count(selected, step as u32, src, i);
                    }
                    continue;
                }
                if let Some((series, value)) = got {
                    let value = if self.ops[k].value_is_duration {
                        evaluated as f64 / 1e9
                    } else {
                        value
                    };
                    self.run.record_in(k, series, start, value);
                    if self.run.wants_exemplars_in(k)
                        && let Some(trace) = src.trace_id(i)
                    {
                        self.run.exemplar_in(k, series, start, value, trace, src.span_id(i));
                    }
                }
            }
        }
        for (k, op) in self.ops.iter_mut().enumerate() {
            if let Some(tally) = &mut op.compare {
                tally.flush(&mut self.run, k, src);
            }
        }
    }

    /// An empty copy of the query that counts a part of the spans (a row group, on a query
    /// worker) on its own; add it back with [`SpanMetrics::merge`] ([`MetricsRun::fork`]).
    pub fn fork(&self) -> SpanMetrics {
        SpanMetrics {
            run: self.run.fork(),
            needs: self.needs.clone(),
            parts: self.parts,
            ops: self
                .ops
                .iter()
                .map(|op| OpState {
                    per_row: op.per_row,
                    durations: op.durations.clone(),
                    value_is_duration: op.value_is_duration,
                    histogram_of_duration: op.histogram_of_duration,
                    cache: FastMap::with_hasher(FastBuild::default()),
                    compare: op.compare.as_ref().map(|_| CompareTally::default()),
                })
                .collect(),
            decoded: FastMap::with_hasher(FastBuild::default()),
            one: self.one.clone(),
            prefilter: self.prefilter.clone(),
            mask: self.mask,
            watch: None,
        }
    }

    /// Tells `w` the run so far at each progress report of the scan ([`ColumnSink::progress`]).
    pub fn watch(&mut self, w: crate::search::Watch) {
        self.watch = Some(w);
    }

    /// Tells the watcher, if any, the run so far (a frontend after merging a job).
    pub fn tell(&self, p: crate::search::ScanProgress) {
        if let Some(w) = &self.watch {
            w.tell(&self.run, p);
        }
    }

    /// Adds what a fork counted, as if its spans were added here next ([`MetricsRun::merge`]).
    pub fn merge(&mut self, part: SpanMetrics) {
        self.run.merge(part.run);
    }

    /// Asks for up to `limit` exemplars ([`MetricsRun::exemplars`]).
    pub fn exemplars(&mut self, limit: usize) {
        self.run.exemplars(limit);
    }

    /// Whether exemplars could still come from spans starting in `[lo, hi]` whose trace IDs
    /// are at least `min_trace` (when known), so a source of such spans should give trace
    /// IDs ([`MetricNeeds::trace_ids`], [`MetricsRun::wants_exemplars_between`]).
    pub fn wants_exemplars_between(&self, lo: u64, hi: u64, min_trace: Option<&[u8; 16]>) -> bool {
        self.run.wants_exemplars_between(lo, hi, min_trace)
    }

    /// Bounds the series and points the query may hold ([`MetricsRun::limit`]).
    pub fn limit(&mut self, max_series: usize, max_points: u64) -> Result<(), EvalError> {
        self.run.limit(max_series, max_points)
    }

    /// The series, or the limit the query passed.
    pub fn finish(self) -> Result<Vec<Series>, EvalError> {
        self.run.finish_within_limits()
    }

    /// What the query counted, for the frontend of a query split across queriers
    /// ([`MetricsRun::into_state`](weft_traceql::MetricsRun::into_state)).
    pub fn into_state(self) -> Vec<weft_traceql::metrics::AccState> {
        self.run.into_state()
    }

    /// Adds what another querier's run of the same query counted.
    pub fn merge_state(&mut self, state: Vec<weft_traceql::metrics::AccState>) -> Result<(), String> {
        self.run.merge_state(state)
    }
}
