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

use bytes::Bytes;
use weft_block::columns::SpanColumns;
use weft_block::hash::{FastBuild, FastMap};
use weft_block::index::Bloom;
use weft_block::row::SpanRow;
use weft_block::{DictBuilder, DictColumn, MetricColumns, MetricNeeds, RowGroupStats};
use weft_traceql::ast::{AttributeScope, FieldExpr, Intrinsic, Stage};
use weft_traceql::{EvalError, MetricsRun, Query, Series, Trace};

use crate::decode::{self, KeysOf, Parts, decode_parts};
use crate::prefilter::Prefilter;

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

/// `compare()`'s counts over one source, by what is counted: per (in the selection, step) and
/// the ids of the values counted, the number of spans and one row that holds them. They go to
/// the run, decoded once per entry, at the end of [`SpanMetrics::add`]: every attribute of a
/// span is counted, so counting distinct ids instead of spans is what keeps the query cheap.
#[derive(Debug, Default)]
struct CompareTally {
    /// Name and status message ids, then status and kind.
    intrinsics: Tally<[u32; 2], u32>,
    /// Resource ids.
    resources: Tally<u32, ()>,
    /// Attribute blob ids.
    attributes: Tally<u32, ()>,
    /// Dedicated column and the id of the value moved to it.
    moved: Tally<u32, u32>,
}

/// Spans and one row holding them, per (in the selection, step, ids `A` and `B`).
type Tally<A, B> = FastMap<(bool, u32, A, B), (u64, usize)>;

impl CompareTally {
    fn count(&mut self, selected: bool, step: u32, src: &impl SpanSource, i: usize) {
        fn bump<K: std::hash::Hash + Eq>(m: &mut FastMap<K, (u64, usize)>, k: K, i: usize) {
            m.entry(k).or_insert((0, i)).0 += 1;
        }
        let ([name, message, resource, _], status_kind) = src.key(i);
        bump(&mut self.intrinsics, (selected, step, [name, message], status_kind), i);
        bump(&mut self.resources, (selected, step, resource, ()), i);
        bump(&mut self.attributes, (selected, step, src.blob_ids(i)[0], ()), i);
        for k in 0..src.moved_columns() {
            let (id, bytes) = src.moved(k, i);
            if !bytes.is_empty() {
                bump(&mut self.moved, (selected, step, k as u32, id), i);
            }
        }
    }

    /// Counts every entry into operand `k` of `run`, and empties the tally (keeping its
    /// memory for the next source).
    fn flush(&mut self, run: &mut MetricsRun, k: usize, src: &impl SpanSource) {
        use weft_traceql::Value;
        for ((selected, step, _, _), (n, i)) in self.intrinsics.drain() {
            let r = src.row(i);
            let step = step as usize;
            run.compare_add_in(k, selected, step, "name", Value::Str(r.name), n);
            run.compare_add_in(
                k,
                selected,
                step,
                "status",
                Value::Status(decode::status(r.status_code)),
                n,
            );
            run.compare_add_in(k, selected, step, "statusMessage", Value::Str(r.status_message), n);
            run.compare_add_in(k, selected, step, "kind", Value::Kind(decode::kind(r.kind)), n);
        }
        let mut label = String::new();
        for ((selected, step, _, ()), (n, i)) in self.resources.drain() {
            for (key, v) in decode::resource_attributes(src.part(KeysOf::Resource, i)) {
                label.clear();
                label.push_str("resource.");
                label.push_str(&key);
                run.compare_add_in(k, selected, step as usize, &label, v, n);
            }
        }
        // Span attributes are decoded lazily: most distinct blobs hold high-cardinality
        // values (user IDs, URLs) whose attributes soon have too many values to list, and then
        // only their totals count.
        let mut span = |run: &mut MetricsRun, selected, step: u32, blob: &[u8], n| {
            decode::each_span_attribute(blob, |key, value| {
                label.clear();
                label.push_str("span.");
                label.push_str(&String::from_utf8_lossy(key));
                let counted = decode::is_scalar(value);
                run.compare_add_with_in(k, selected, step as usize, &label, counted, || decode::value(value), n);
            });
        };
        for ((selected, step, _, ()), (n, i)) in self.attributes.drain() {
            span(run, selected, step, src.part(KeysOf::Span, i), n);
        }
        for ((selected, step, column, _), (n, i)) in self.moved.drain() {
            span(run, selected, step, src.moved(column as usize, i).1, n);
        }
    }
}

/// At most this many span attribute keys are read one span at a time; a query reading more
/// runs over whole traces.
pub const MAX_SPAN_KEYS: usize = 4;

/// Dictionary ids of name, status message, resource and scope (ids of columns the query does
/// not read are 0), then `status << 8 | kind`, with bit 16 set for a span that has a parent
/// span ID (read with [`MetricNeeds::parents`]; always known in the head); see
/// [`SpanSource::key`].
pub type BaseKey = ([u32; 4], u32);

/// The bit of [`BaseKey`] set for a span with a parent.
const HAS_PARENT: u32 = 1 << 16;

/// The parts of a [`BaseKey`] that a query reads; the others are cleared, so that spans that
/// differ only in fields the query does not read share one evaluation. Block columns the query
/// does not read already give id 0, but head rows have every id, and the tag APIs read the
/// column of the field they list beside the filter's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyMask {
    ids: [u32; 4],
    status_kind: u32,
}

impl KeyMask {
    pub(crate) fn of(needs: &MetricNeeds) -> KeyMask {
        let all = |read: bool| if read { u32::MAX } else { 0 };
        KeyMask {
            ids: [
                all(needs.name),
                all(needs.status_message),
                all(needs.resource),
                all(needs.scope),
            ],
            status_kind: if needs.status { 0xff00 } else { 0 }
                | if needs.kind { 0x00ff } else { 0 }
                | if needs.parents { HAS_PARENT } else { 0 },
        }
    }

    pub(crate) fn apply(&self, (ids, status_kind): BaseKey) -> BaseKey {
        (
            std::array::from_fn(|k| ids[k] & self.ids[k]),
            status_kind & self.status_kind,
        )
    }
}

/// What a span is evaluated by: a [`BaseKey`] and one id for the values of the span attributes
/// read (the value id itself for one key, an id of the combination per source for several),
/// packed two ids to a word. The cache lookup is the per-row cost of `bench_search.py`'s
/// metrics queries: built as six `u32` stores, the hasher's 8-byte loads stalled on store
/// forwarding and the lookup took twice as long (`rate() > 1` over 3M spans: 130 ms against
/// 84 ms).
type Key = [u64; 3];

/// The columns a plain filter `{ … }` reads, and how it reads the duration, when every field
/// it reads is a field of the span itself with a column (as span-at-a-time metrics require);
/// `None` for any other query. Such a filter matches a span alone exactly as it matches it in
/// its trace.
pub(crate) fn span_filter_needs(query: &Query) -> Option<(MetricNeeds, DurationReads)> {
    let [Stage::Spanset(weft_traceql::ast::SpansetExpr::Filter(f))] = query.pipeline.stages.as_slice() else {
        return None;
    };
    if query.math.is_some() {
        return None;
    }
    let mut reads = Reads::default();
    f.expr.iter().try_for_each(|e| reads.expr(e, false))?;
    Some((reads.needs, reads.durations))
}

/// How a filter reads the span's duration, so that spans with different durations can share
/// one evaluation.
///
/// A comparison of the duration with a literal (`duration > 1s`, `100ms <= duration`) depends
/// only on how the duration orders against that literal. So two spans that agree on every
/// other field the filter reads, and whose durations order alike against each literal the
/// filter compares them with, match alike: [`Self::class`] is that ordering, and is part of
/// the key evaluations are cached by. Any other use of the duration (arithmetic, `by()`, a
/// comparison with a field) makes every span be evaluated on its own ([`Self::per_span`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct DurationReads {
    thresholds: Vec<Threshold>,
    per_span: bool,
}

/// A literal the duration is compared with, as the evaluator compares them
/// (`weft_traceql`'s `compare_scalar`): integers and durations as integers, floats as floats.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Threshold {
    Int(i64),
    Float(f64),
}

/// More literals than this (two bits each in [`DurationReads::class`]) and spans are
/// evaluated one by one.
const MAX_THRESHOLDS: usize = 32;

/// A stored duration as the evaluator reads it (`decode_parts`, then `Val::Duration`): the
/// stored bits as unsigned nanoseconds, saturating at `i64::MAX`.
pub(crate) fn evaluated_duration(stored: i64) -> i64 {
    i64::try_from(stored as u64).unwrap_or(i64::MAX)
}

impl DurationReads {
    /// Every span must be evaluated with its own duration.
    pub(crate) fn per_span(&self) -> bool {
        self.per_span
    }

    /// How `duration` (as the evaluator reads it: `Val::Duration`) orders against each
    /// literal, two bits per literal; 0 when the filter compares it with none, or when every
    /// span is evaluated on its own.
    pub(crate) fn class(&self, duration: i64) -> u64 {
        let mut class = 0;
        if self.per_span {
            return class;
        }
        for (k, t) in self.thresholds.iter().enumerate() {
            let ord = match *t {
                Threshold::Int(b) => duration.cmp(&b),
                // Literals are finite; a duration as a float is never NaN.
                Threshold::Float(b) => (duration as f64).partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
            };
            class |= ((ord as i64 + 1) as u64) << (2 * k);
        }
        class
    }

    /// Records `duration op e` (or `e op duration`) for a comparison `op`: true when `e` is a
    /// numeric literal, and the comparison is then accounted for.
    fn threshold(&mut self, e: &FieldExpr) -> bool {
        use weft_traceql::ast::Static;
        let t = match e {
            FieldExpr::Static(Static::Int(i) | Static::Duration(i)) => Threshold::Int(*i),
            FieldExpr::Static(Static::Float(x)) => Threshold::Float(*x),
            _ => return false,
        };
        if !self.thresholds.contains(&t) {
            self.thresholds.push(t);
            self.per_span |= self.thresholds.len() > MAX_THRESHOLDS;
        }
        true
    }
}

/// What the fields of a query read, or `None` when one has no column.
#[derive(Default)]
struct Reads {
    needs: MetricNeeds,
    /// How the filter and `by()` read the duration (the metric's value aside).
    durations: DurationReads,
}

impl Reads {
    fn expr(&mut self, e: &FieldExpr, in_value: bool) -> Option<()> {
        use Intrinsic as I;
        let duration = |e: &FieldExpr| matches!(e, FieldExpr::Intrinsic(I::Duration));
        match e {
            FieldExpr::Binary { op, lhs, rhs }
                if !in_value
                    && op.is_comparison()
                    && !op.is_regex()
                    && ((duration(lhs) && self.durations.threshold(rhs))
                        || (duration(rhs) && self.durations.threshold(lhs))) =>
            {
                self.needs.duration = true;
            }
            // `nestedSetParent < 0` and the like, `span:parentID = nil`: whether the span has
            // a parent, the one structural fact a span carries itself.
            FieldExpr::Binary { op, lhs, rhs } if crate::prefilter::root_comparison(*op, lhs, rhs).is_some() => {
                self.needs.parents = true;
            }
            FieldExpr::Static(_) => {}
            FieldExpr::Attribute(a) if a.parent => return None,
            FieldExpr::Attribute(a) => match a.scope {
                AttributeScope::Resource => self.needs.resource = true,
                AttributeScope::Instrumentation => self.needs.scope = true,
                AttributeScope::Span => self.span_key(&a.name)?,
                // The span's attribute, else the resource's.
                AttributeScope::Unscoped => {
                    self.span_key(&a.name)?;
                    self.needs.resource = true;
                }
                AttributeScope::Event | AttributeScope::Link => return None,
            },
            FieldExpr::Intrinsic(i) => match i {
                I::Name => self.needs.name = true,
                I::Status => self.needs.status = true,
                I::StatusMessage => self.needs.status_message = true,
                I::Kind => self.needs.kind = true,
                I::Duration => {
                    self.needs.duration = true;
                    self.durations.per_span |= !in_value;
                }
                I::InstrumentationName | I::InstrumentationVersion => self.needs.scope = true,
                _ => return None,
            },
            FieldExpr::Unary { expr, .. } => self.expr(expr, false)?,
            FieldExpr::Binary { lhs, rhs, .. } => {
                self.expr(lhs, false)?;
                self.expr(rhs, false)?;
            }
        }
        Some(())
    }

    fn span_key(&mut self, key: &str) -> Option<()> {
        if !self.needs.span_keys.iter().any(|k| k == key) {
            if self.needs.span_keys.len() == MAX_SPAN_KEYS {
                return None;
            }
            self.needs.span_keys.push(key.to_string());
        }
        Some(())
    }
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
            let per_row = reads.durations.per_span;
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

    /// Asks for up to `limit` exemplars ([`MetricsRun::exemplars`]).
    pub fn exemplars(&mut self, limit: usize) {
        self.run.exemplars(limit);
    }

    /// Whether exemplars are still wanted from spans starting in `[lo, hi]`, so a source of
    /// such spans should give trace IDs ([`MetricNeeds::trace_ids`]).
    pub fn wants_exemplars_between(&self, lo: u64, hi: u64) -> bool {
        self.run.wants_exemplars_between(lo, hi)
    }

    /// Bounds the series and points the query may hold ([`MetricsRun::limit`]).
    pub fn limit(&mut self, max_series: usize, max_points: u64) -> Result<(), EvalError> {
        self.run.limit(max_series, max_points)
    }

    /// The series, or the limit the query passed.
    pub fn finish(self) -> Result<Vec<Series>, EvalError> {
        self.run.finish_within_limits()
    }
}

/// What the querier's column scan (`weft_querier::Querier::scan_columns`) feeds: spans one at
/// a time from the head's columns and from the column chunks of each row group in the window,
/// never assembled into traces.
pub trait ColumnSink {
    /// The columns to read from each row group.
    fn needs(&self) -> &MetricNeeds;
    /// The columns to read from a row group whose spans start within `[lo, hi]`; by default
    /// [`Self::needs`].
    fn needs_between(&self, _lo: u64, _hi: u64) -> MetricNeeds {
        self.needs().clone()
    }
    /// Whether a row group with these statistics and value bloom may hold a span that counts
    /// (`false`: skip it).
    fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool;
    /// Whether head rows must come in `SpanColumns::sorted_order` (client retries left out,
    /// each trace's spans together); otherwise in row order, which costs no sort.
    fn sorted_head(&self) -> bool {
        true
    }
    /// Offered a row group's attribute keys from the block's index (compaction writes them;
    /// [`weft_block::index::KeyLists`]) before its columns are read. Returns true when the sink
    /// took from them all it needs of the row group, which is then not read. By default it
    /// takes nothing.
    fn take_row_group_keys(
        &mut self,
        _stats: &RowGroupStats,
        _keys: &mut dyn Iterator<Item = (weft_block::index::KeyScope, &[u8])>,
    ) -> bool {
        false
    }
    /// Adds the spans of head columns.
    fn add_head(&mut self, rows: &HeadRows<'_>);
    /// Adds the spans of a row group, read with [`Self::needs_between`].
    fn add_columns(&mut self, cols: &MetricColumns);
    /// True once more spans cannot change the result; the scan stops.
    fn done(&self) -> bool {
        false
    }
}

impl ColumnSink for SpanMetrics {
    fn needs(&self) -> &MetricNeeds {
        &self.needs
    }

    fn needs_between(&self, lo: u64, hi: u64) -> MetricNeeds {
        // Trace IDs (16 B per trace plus an index per span) only while exemplars are still
        // wanted in the row group's time range: the first row group of each range usually
        // fills its buckets.
        MetricNeeds {
            trace_ids: self.wants_exemplars_between(lo, hi),
            ..self.needs.clone()
        }
    }

    fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool {
        SpanMetrics::row_group_may_match(self, stats, values)
    }

    fn add_head(&mut self, rows: &HeadRows<'_>) {
        self.add(rows)
    }

    fn add_columns(&mut self, cols: &MetricColumns) {
        self.add(cols)
    }
}

/// Spans fed to [`SpanMetrics::add`] (and the column tag sinks) by index.
pub trait SpanSource {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn start(&self, i: usize) -> u64;
    fn duration(&self, i: usize) -> i64;
    /// Equal keys within one source mean equal name, status, status message, kind, resource
    /// and scope (so the same evaluation, unless the duration matters or attributes are read).
    fn key(&self, i: usize) -> BaseKey;
    /// The value id of span attribute `k` of [`MetricNeeds::span_keys`] in span `i`: equal
    /// ids within one source mean equal values.
    fn attr_id(&self, k: usize, i: usize) -> u32;
    /// Span `i` with at least the fields [`SpanMetrics::needs`] names filled in.
    fn row(&self, i: usize) -> SpanRow;
    /// The trace ID of span `i`, where the source has it (for exemplars).
    fn trace_id(&self, i: usize) -> Option<[u8; 16]>;
    /// The span ID of span `i`, where the source has it.
    fn span_id(&self, _i: usize) -> Option<[u8; 8]> {
        None
    }
    /// The value ids of span `i`'s attribute blob (with [`MetricNeeds::blobs`]) and event and
    /// link blobs (with [`MetricNeeds::lists`]); equal ids within one source mean equal bytes,
    /// and a block's blob not read has id 0. [`Self::row`] then fills in the blobs read. A
    /// block's attribute blob lacks the values moved to dedicated columns, so the row's
    /// attributes are the blob followed by the picked values of [`MetricNeeds::span_keys`]: a
    /// key read may appear twice, its first value being the span's.
    fn blob_ids(&self, _i: usize) -> [u32; 3] {
        [0; 3]
    }
    /// The stored bytes of span `i`'s part `of`: its resource or scope header (with
    /// [`MetricNeeds::resource`] or [`MetricNeeds::scope`]), its attribute blob (with
    /// [`MetricNeeds::blobs`]; in a block, without the values moved to dedicated columns), or
    /// its event or link blob (with [`MetricNeeds::lists`]). Empty when not read.
    fn part(&self, _of: KeysOf, _i: usize) -> &[u8] {
        &[]
    }
    /// With [`MetricNeeds::blobs`]: the span attribute keys whose values were moved out of the
    /// attribute blobs into dedicated columns.
    fn dedicated_keys(&self) -> &[String] {
        &[]
    }
    /// Which of [`Self::dedicated_keys`] span `i` has (bit `k` for key `k`).
    fn dedicated_mask(&self, _i: usize) -> u16 {
        0
    }
    /// With [`MetricNeeds::all_span_attributes`]: how many dedicated columns hold values moved
    /// out of the attribute blobs ([`MetricColumns::moved`]); the head moves nothing.
    fn moved_columns(&self) -> usize {
        0
    }
    /// The id and bytes of span `i`'s value moved to dedicated column `k`, which [`Self::part`]
    /// of [`KeysOf::Span`] lacks (empty if none). Equal ids within one source and column mean
    /// equal bytes.
    fn moved(&self, _k: usize, _i: usize) -> (u32, &[u8]) {
        (0, &[])
    }
}

/// Span `i`'s parent ID from a parent column (zeros for a root, or when the column was not
/// read), as the row reader gives it.
fn parent_of(d: &DictColumn, i: usize) -> [u8; 8] {
    d.values
        .get(dict_id(d, i) as usize)
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .unwrap_or_default()
}

fn dict_id(d: &DictColumn, i: usize) -> u32 {
    d.ids.get(i).copied().unwrap_or(0)
}

fn small(v: &[i32], i: usize) -> u8 {
    v.get(i).map_or(0, |&x| x.clamp(0, 255) as u8)
}

/// A row group's columns; columns not read are empty and read as empty values.
impl SpanSource for MetricColumns {
    fn len(&self) -> usize {
        self.start.len()
    }

    fn start(&self, i: usize) -> u64 {
        self.start[i] as u64
    }

    fn trace_id(&self, i: usize) -> Option<[u8; 16]> {
        let id = self.trace_id.values.get(*self.trace_id.ids.get(i)? as usize)?;
        id.as_ref().try_into().ok()
    }

    fn duration(&self, i: usize) -> i64 {
        self.duration.get(i).copied().unwrap_or(0)
    }

    fn key(&self, i: usize) -> BaseKey {
        (
            [
                dict_id(&self.name, i),
                dict_id(&self.status_message, i),
                dict_id(&self.resource, i),
                dict_id(&self.scope, i),
            ],
            u32::from(small(&self.status, i)) << 8
                | u32::from(small(&self.kind, i))
                | if parent_of(&self.parent, i) == [0; 8] {
                    0
                } else {
                    HAS_PARENT
                },
        )
    }

    fn attr_id(&self, k: usize, i: usize) -> u32 {
        self.span_attributes.get(k).map_or(0, |d| dict_id(d, i))
    }

    fn blob_ids(&self, i: usize) -> [u32; 3] {
        [
            dict_id(&self.attributes, i),
            dict_id(&self.events, i),
            dict_id(&self.links, i),
        ]
    }

    fn dedicated_keys(&self) -> &[String] {
        &self.dedicated_keys
    }

    fn part(&self, of: KeysOf, i: usize) -> &[u8] {
        let d = match of {
            KeysOf::Span => &self.attributes,
            KeysOf::Resource => &self.resource,
            KeysOf::Scope => &self.scope,
            KeysOf::Events => &self.events,
            KeysOf::Links => &self.links,
        };
        d.values.get(dict_id(d, i) as usize).map_or(&[], |v| v)
    }

    fn dedicated_mask(&self, i: usize) -> u16 {
        self.dedicated_mask.get(i).copied().unwrap_or(0)
    }

    fn moved_columns(&self) -> usize {
        self.moved.len()
    }

    fn moved(&self, k: usize, i: usize) -> (u32, &[u8]) {
        let d = &self.moved[k];
        let id = dict_id(d, i);
        (id, d.values.get(id as usize).map_or(&[], |v| v))
    }

    fn row(&self, i: usize) -> SpanRow {
        let value = |d: &DictColumn| -> Bytes { d.values.get(dict_id(d, i) as usize).cloned().unwrap_or_default() };
        let text = |d: &DictColumn| String::from_utf8_lossy(&value(d)).into_owned();
        let picked = match self.span_attributes.as_slice() {
            [] => Bytes::new(),
            [one] => value(one),
            many => many.iter().flat_map(&value).collect::<Vec<u8>>().into(),
        };
        let attributes = match (self.attributes.ids.is_empty(), picked.is_empty()) {
            (true, _) => picked,
            (false, true) => value(&self.attributes),
            (false, false) => [value(&self.attributes), picked].concat().into(),
        };
        SpanRow {
            name: text(&self.name),
            status_message: text(&self.status_message),
            status_code: small(&self.status, i),
            kind: small(&self.kind, i),
            start_unix_nano: self.start(i),
            duration_nano: self.duration(i),
            resource: value(&self.resource),
            scope: value(&self.scope),
            attributes,
            events: value(&self.events),
            links: value(&self.links),
            parent_span_id: parent_of(&self.parent, i),
            ..Default::default()
        }
    }
}

/// Rows of head columns, in the order given (`SpanColumns::sorted_order`, which leaves out
/// client-retry duplicates).
pub struct HeadRows<'a> {
    cols: &'a SpanColumns,
    order: &'a [u32],
    /// Per span attribute key read: the picked attributes of each distinct attribute blob of
    /// the head, as a [`DictColumn`] indexed by blob id.
    attrs: Vec<DictColumn>,
    /// [`MetricNeeds::blobs`] and [`MetricNeeds::lists`].
    blobs: bool,
    lists: bool,
}

impl<'a> HeadRows<'a> {
    /// The rows `order` of `cols`, with the span attributes `needs` names picked out of each
    /// distinct attribute blob once.
    pub fn new(cols: &'a SpanColumns, order: &'a [u32], needs: &MetricNeeds) -> HeadRows<'a> {
        let keys: Vec<&[u8]> = needs.span_keys.iter().map(|k| k.as_bytes()).collect();
        let mut attrs: Vec<DictBuilder> = keys.iter().map(|_| DictBuilder::default()).collect();
        let mut picked: Vec<Vec<u8>> = vec![Vec::new(); keys.len()];
        if !keys.is_empty() {
            let blobs = &cols.attributes;
            for id in 0..blobs.distinct() as u32 {
                picked.iter_mut().for_each(Vec::clear);
                weft_block::dedicated::pick_attributes(&blobs.bytes()[blobs.value_range(id)], &keys, &mut picked);
                for (d, p) in attrs.iter_mut().zip(&picked) {
                    d.push(p);
                }
            }
        }
        let attrs = attrs.into_iter().map(DictBuilder::finish).collect();
        HeadRows {
            cols,
            order,
            attrs,
            blobs: needs.blobs,
            lists: needs.lists,
        }
    }

    /// The value id of attribute `k` in row `r` of the columns.
    fn attr_of(&self, k: usize, r: usize) -> u32 {
        self.attrs[k].ids[self.cols.attributes.ids[r] as usize]
    }
}

impl SpanSource for HeadRows<'_> {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn start(&self, i: usize) -> u64 {
        self.cols.start[self.order[i] as usize]
    }

    fn trace_id(&self, i: usize) -> Option<[u8; 16]> {
        Some(self.cols.trace_id[self.order[i] as usize])
    }

    fn span_id(&self, i: usize) -> Option<[u8; 8]> {
        Some(self.cols.span_id[self.order[i] as usize])
    }

    fn duration(&self, i: usize) -> i64 {
        self.cols.duration[self.order[i] as usize]
    }

    fn key(&self, i: usize) -> BaseKey {
        let (c, r) = (self.cols, self.order[i] as usize);
        (
            [c.name[r], c.status_message[r], c.resource[r], c.scope[r]],
            u32::from(c.status_code[r]) << 8
                | u32::from(c.kind[r])
                | if c.parent_span_id[r] == [0; 8] { 0 } else { HAS_PARENT },
        )
    }

    fn attr_id(&self, k: usize, i: usize) -> u32 {
        self.attrs.get(k).map_or(0, |_| self.attr_of(k, self.order[i] as usize))
    }

    fn blob_ids(&self, i: usize) -> [u32; 3] {
        let (c, r) = (self.cols, self.order[i] as usize);
        [c.attributes.ids[r], c.events.ids[r], c.links.ids[r]]
    }

    fn part(&self, of: KeysOf, i: usize) -> &[u8] {
        let (c, r) = (self.cols, self.order[i] as usize);
        match of {
            KeysOf::Span => c.attributes.get(r),
            KeysOf::Resource => c.headers.get(c.resource[r]),
            KeysOf::Scope => c.headers.get(c.scope[r]),
            KeysOf::Events => c.events.get(r),
            KeysOf::Links => c.links.get(r),
        }
    }

    fn row(&self, i: usize) -> SpanRow {
        let (c, r) = (self.cols, self.order[i] as usize);
        let header = |id: u32| Bytes::copy_from_slice(c.headers.get(id));
        let text = |id: u32| String::from_utf8_lossy(c.strings.get(id)).into_owned();
        let mut attributes = Vec::new();
        let (mut events, mut links) = (Vec::new(), Vec::new());
        if self.lists {
            events.extend_from_slice(c.events.get(r));
            links.extend_from_slice(c.links.get(r));
        }
        if self.blobs {
            attributes.extend_from_slice(c.attributes.get(r));
        } else {
            for k in 0..self.attrs.len() {
                attributes.extend_from_slice(&self.attrs[k].values[self.attr_of(k, r) as usize]);
            }
        }
        SpanRow {
            name: text(c.name[r]),
            status_message: text(c.status_message[r]),
            status_code: c.status_code[r],
            kind: c.kind[r],
            start_unix_nano: c.start[r],
            duration_nano: c.duration[r],
            resource: header(c.resource[r]),
            scope: header(c.scope[r]),
            attributes: attributes.into(),
            events: events.into(),
            links: links.into(),
            parent_span_id: c.parent_span_id[r],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DurationReads, MAX_THRESHOLDS, span_filter_needs};

    fn reads(q: &str) -> DurationReads {
        let query = weft_traceql::parse(q).unwrap();
        span_filter_needs(&query).expect("span-local").1
    }

    /// Durations share a class exactly when they order alike against every literal; the model
    /// test in `weft-querier` checks the results against whole-trace evaluation.
    #[test]
    fn duration_classes_split_at_each_literal() {
        let r = reads("{ duration > 1ms && 5ms >= duration }");
        assert!(!r.per_span());
        let class = |d| r.class(d);
        assert_eq!(class(0), class(999_999));
        assert_ne!(class(999_999), class(1_000_000));
        assert_ne!(class(1_000_000), class(1_000_001));
        assert_eq!(class(1_000_001), class(4_999_999));
        assert_ne!(class(4_999_999), class(5_000_000));
        assert_ne!(class(5_000_000), class(5_000_001));
        assert_eq!(class(5_000_001), class(i64::MAX));

        // A float literal splits where the evaluator's float comparison does.
        let f = reads("{ duration < 1.5 }");
        assert_ne!(f.class(1), f.class(2));
        assert_eq!(f.class(2), f.class(3));

        // A filter without the duration has one class.
        let none = reads(r#"{ name = "a" }"#);
        assert!(!none.per_span() && none.class(1) == none.class(1 << 40));
    }

    #[test]
    fn other_reads_of_the_duration_evaluate_every_span() {
        assert!(reads("{ duration * 2 > 1s }").per_span());
        assert!(reads("{ duration = nil }").per_span());
        let literals = |n: usize| {
            let terms: Vec<String> = (1..=n).map(|i| format!("duration = {i}ns")).collect();
            format!("{{ {} }}", terms.join(" || "))
        };
        assert!(!reads(&literals(MAX_THRESHOLDS)).per_span());
        let past = reads(&literals(MAX_THRESHOLDS + 1));
        assert!(past.per_span());
        assert_eq!(past.class(7), 0);
    }
}
