//! The accumulator of one metrics query: the series its spans fall in, their per-step values,
//! `compare()`'s attribute counts and the exemplars chosen.
//!
//! `observe`, `resolve` and `record` run per span: they are `#[inline]` so that moving them
//! into this module did not make them calls from `metrics.rs`'s loops.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::ast::MetricsFn;
use crate::eval::{CMetrics, EvalError, GroupKey, TraceEnv, Val, eval_value};
use crate::trace::Value;

use super::{Exemplar, Series};

#[derive(Debug, Clone)]
pub(super) struct Accumulator {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) step: u64,
    pub(super) steps: usize,
    /// Group key (the `by` values, plus the bucket for histograms) to index in `groups`.
    index: HashMap<Vec<GroupKey>, usize>,
    groups: Vec<Group>,
    /// Most groups (series) the run may create; see
    /// [`MetricsRun::limit`](super::MetricsRun::limit).
    max_groups: usize,
    /// Set when a span needed a group past `max_groups`.
    pub(super) over_limit: bool,
    pub(super) limit_text: String,
    /// `compare()`'s counts: baseline (0) and selection (1), by attribute label.
    compare: [HashMap<String, AttrCounts>; 2],
    pub(super) exemplars: ExemplarPicker,
}

/// Chooses exemplars, as Tempo spreads them: the range is cut into `limit / 2` equal buckets
/// of at most two exemplars each, shared by every series of the query, and a trace gives at
/// most one.
///
/// Which spans: each bucket keeps the [`CANDIDATES`] smallest keys (trace ID, start, span ID)
/// of distinct traces, a uniform sample since trace IDs are random, and when the run finishes
/// the buckets in turn take their first two candidates of traces no earlier bucket took
/// ([`ExemplarPicker::chosen`]), up to `limit`. Unlike "the first spans offered win", that
/// does not depend on the order spans come in: a query split over row groups, query workers
/// or queriers, merged in any order, picks the same exemplars as one scan (the smallest keys
/// of a union are among the smallest of each part). The spare candidates stand in for traces
/// an earlier bucket took: a long trace of a small ID would otherwise take a slot in every
/// bucket it spans.
#[derive(Debug, Default, Clone)]
pub(super) struct ExemplarPicker {
    limit: usize,
    /// Per bucket, (group, exemplar) of distinct traces, smallest key first.
    best: Vec<[Option<(usize, Exemplar)>; CANDIDATES]>,
    /// Per bucket, the first 8 bytes (big-endian) of the largest trace ID of a full bucket,
    /// `u64::MAX` while it has room: a span whose trace ID begins above it cannot be taken.
    ceiling: Vec<u64>,
    /// The largest of `ceiling`.
    top: u64,
}

/// Candidates a bucket keeps for its two exemplars ([`ExemplarPicker`]).
const CANDIDATES: usize = 4;

/// The order exemplars are chosen in (smallest first).
fn exemplar_key(e: &Exemplar) -> ([u8; 16], u64, Option<[u8; 8]>) {
    (e.trace_id, e.timestamp_ns, e.span_id)
}

/// The first 8 bytes of a trace ID, big-endian: compared as the ID is.
#[inline]
pub(crate) fn trace_prefix(id: &[u8; 16]) -> u64 {
    u64::from_be_bytes([id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7]])
}

impl ExemplarPicker {
    pub(super) fn new(limit: usize) -> ExemplarPicker {
        let n = if limit == 0 { 0 } else { (limit / 2).max(1) };
        ExemplarPicker {
            limit,
            best: vec![Default::default(); n],
            ceiling: vec![u64::MAX; n],
            top: if n == 0 { 0 } else { u64::MAX },
        }
    }

    /// Whether exemplars are asked for at all.
    #[inline]
    pub(super) fn wants(&self) -> bool {
        self.limit > 0
    }

    fn bucket_of(&self, range: (u64, u64), t: u64) -> usize {
        let n = self.best.len() as u128;
        ((t.clamp(range.0, range.1 - 1) - range.0) as u128 * n / (range.1 - range.0) as u128).min(n - 1) as usize
    }

    /// Whether a span starting in `[lo, hi]` whose trace ID begins at or above `min_trace`
    /// ([`trace_prefix`]; 0 when unknown) could still be taken: a bucket that overlaps the
    /// time has room, or holds a larger trace ID.
    #[inline]
    pub(super) fn wants_between(&self, range: (u64, u64), lo: u64, hi: u64, min_trace: u64) -> bool {
        if !self.wants() || hi < range.0 || lo >= range.1 || min_trace > self.top {
            return false;
        }
        let (a, b) = (self.bucket_of(range, lo), self.bucket_of(range, hi));
        self.ceiling[a..=b].iter().any(|&c| c >= min_trace)
    }

    /// A picker for a part of the spans (its own groups), merged back with
    /// [`ExemplarPicker::merge`]. It holds no candidate but keeps this one's ceilings, which
    /// only let it skip sooner the spans this one would refuse anyway.
    fn fork(&self) -> ExemplarPicker {
        ExemplarPicker {
            limit: self.limit,
            best: vec![Default::default(); self.best.len()],
            ceiling: self.ceiling.clone(),
            top: self.top,
        }
    }

    /// Offers a part's candidates, with their groups renumbered by `group`.
    fn merge(&mut self, range: (u64, u64), part: ExemplarPicker, group: impl Fn(usize) -> Option<usize>) {
        for (g, e) in part.candidates() {
            if let Some(g) = group(g) {
                self.offer(range, g, e);
            }
        }
    }

    /// Every candidate held, bucket by bucket: what a part hands on ([`AccState::exemplars`]).
    fn candidates(self) -> impl Iterator<Item = (usize, Exemplar)> {
        self.best.into_iter().flatten().flatten()
    }

    /// The exemplars chosen: each bucket in turn takes its first two candidates of traces not
    /// taken yet, at most `limit` in all.
    fn chosen(self) -> Vec<(usize, Exemplar)> {
        let limit = self.limit;
        let mut traces = std::collections::HashSet::new();
        let mut out = Vec::new();
        for bucket in self.best {
            let fresh = bucket.into_iter().flatten().filter(|(_, e)| traces.insert(e.trace_id));
            out.extend(fresh.take(2));
        }
        out.truncate(limit);
        out
    }

    #[inline]
    fn offer(&mut self, range: (u64, u64), group: usize, e: Exemplar) {
        let prefix = trace_prefix(&e.trace_id);
        if !self.wants() || e.timestamp_ns < range.0 || e.timestamp_ns >= range.1 || prefix > self.top {
            return;
        }
        let b = self.bucket_of(range, e.timestamp_ns);
        if prefix > self.ceiling[b] {
            return;
        }
        let key = exemplar_key(&e);
        let slots = &mut self.best[b];
        let key_at = |s: &Option<(usize, Exemplar)>| s.as_ref().map(|(_, x)| exemplar_key(x));
        if let Some(k) = slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|(_, x)| x.trace_id == e.trace_id))
        {
            // The same trace: it keeps its smaller key, at the same place (the trace ID,
            // which orders the slots first, is the same).
            if key_at(&slots[k]).is_some_and(|old| key < old) {
                slots[k] = Some((group, e));
            }
            return;
        }
        // Slots are filled in order, smallest key first: insert before the first larger one.
        let Some(at) = slots.iter().position(|s| key_at(s).is_none_or(|x| key < x)) else {
            return;
        };
        slots[at..].rotate_right(1);
        slots[at] = Some((group, e));
        if let Some((_, last)) = &slots[CANDIDATES - 1] {
            self.ceiling[b] = trace_prefix(&last.trace_id);
            self.top = self.ceiling.iter().copied().max().unwrap_or(0);
        }
    }
}

/// Most distinct values of one attribute `compare()` counts per group. An attribute with more
/// gives only its total series (Tempo marks it `__too_many_values__`, a series without
/// samples, so no series).
pub(crate) const MAX_COMPARE_VALUES: usize = 1000;

/// `compare()`'s counts of one attribute in one group, per step.
#[derive(Debug, Clone)]
struct AttrCounts {
    total: Vec<u64>,
    values: HashMap<GroupKey, (Value, Vec<u64>)>,
    too_many: bool,
}

#[derive(Debug, Clone)]
struct Group {
    /// The value of each `by` field, nil included.
    by: Vec<Value>,
    /// The histogram bucket.
    bucket: Option<f64>,
    data: Data,
    /// Whether a span was recorded: [`MetricsRun::resolve`](super::MetricsRun::resolve) creates
    /// groups that [`MetricsRun::record`](super::MetricsRun::record) may never use, and those
    /// make no series.
    used: bool,
}

/// What one metrics query (one operand) of a run counted: the part of a split query a job
/// returns ([`MetricsRun::into_state`](super::MetricsRun::into_state)).
#[derive(Debug, Clone, PartialEq)]
pub struct AccState {
    /// Every series started, in the order their first span came.
    pub groups: Vec<GroupState>,
    /// A limit was passed.
    pub over_limit: bool,
    /// `compare()`'s counts: baseline, then selection; by attribute label, in label order.
    pub compare: [Vec<(String, CompareState)>; 2],
    /// Exemplars taken, in the order taken, each with its index in `groups`.
    pub exemplars: Vec<(usize, Exemplar)>,
}

/// One series of an [`AccState`].
#[derive(Debug, Clone, PartialEq)]
pub struct GroupState {
    /// The value of each `by()` field, nil included.
    pub by: Vec<Value>,
    /// The histogram bucket (`histogram_over_time`).
    pub bucket: Option<f64>,
    pub data: Data,
    /// Whether a span was counted in it.
    pub used: bool,
}

/// `compare()`'s counts of one attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareState {
    /// Spans with the attribute, per step.
    pub total: Vec<u64>,
    /// Per value, per step, in no particular order; empty when `too_many`.
    pub values: Vec<(Value, Vec<u64>)>,
    /// More than [`MAX_COMPARE_VALUES`] values.
    pub too_many: bool,
}

/// A sum of floats that is the same in whatever order they are added: a query split over
/// row groups or queriers sums the same values in other groupings, and floating-point
/// addition is not associative (a cluster's `avg_over_time` differed from one querier's in
/// its last digit).
///
/// Values are added as integers, exactly, where they can be: whole numbers below 2^63 in
/// magnitude (counts, integer attributes) as they are; others below 2^10 (durations in
/// seconds up to 17 minutes, ratios) as multiples of 2^-76, which for a value above 2^-23
/// loses nothing (it already is one) and below that less than a float's own rounding. 2^40
/// values of the largest size still fit. The rest (larger fractions, NaN, infinities) go to
/// a float sum, which alone depends on the order. The result adds the three in a fixed order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExactSum {
    /// The sum of the whole values.
    pub int: i128,
    /// The sum of the small fractional values, in units of 2^-76.
    pub fixed: i128,
    /// The sum of the others.
    pub wide: f64,
}

impl ExactSum {
    /// 2^76.
    const SCALE: f64 = 75_557_863_725_914_323_419_136.0;
    /// Fractional values below this magnitude go to `fixed`.
    const SMALL: f64 = 1024.0;
    /// Whole values below this magnitude go to `int`.
    const WHOLE: f64 = 9_223_372_036_854_775_808.0;

    #[inline]
    pub fn add(&mut self, v: f64) {
        if v.fract() == 0.0 && v.abs() < Self::WHOLE {
            if let Some(s) = self.int.checked_add(v as i128) {
                self.int = s;
                return;
            }
        } else if v.abs() < Self::SMALL {
            // Multiplying by a power of two is exact; rounding gives each value one integer.
            if let Some(s) = self.fixed.checked_add((v * Self::SCALE).round() as i128) {
                self.fixed = s;
                return;
            }
        }
        self.wide += v;
    }

    pub fn merge(&mut self, o: ExactSum) {
        match self.int.checked_add(o.int) {
            Some(s) => self.int = s,
            None => self.wide += o.int as f64,
        }
        match self.fixed.checked_add(o.fixed) {
            Some(s) => self.fixed = s,
            None => self.wide += o.fixed as f64 / Self::SCALE,
        }
        self.wide += o.wide;
    }

    pub fn value(&self) -> f64 {
        self.int as f64 + self.fixed as f64 / Self::SCALE + self.wide
    }
}

/// Per-step state of one series.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Count(Vec<u64>),
    Min(Vec<Option<f64>>),
    Max(Vec<Option<f64>>),
    Sum(Vec<Option<ExactSum>>),
    Avg(Vec<(ExactSum, u64)>),
    /// `quantile_over_time`: exact values up to a bound, then a sketch ([`super::sketch`]).
    Values(Vec<super::sketch::Quantiles>),
}

impl Data {
    /// Adds a part's per-step state of the same group.
    fn merge(&mut self, part: Data) {
        fn each<T>(into: &mut [T], part: Vec<T>, f: impl Fn(&mut T, T)) {
            for (a, b) in into.iter_mut().zip(part) {
                f(a, b);
            }
        }
        let opt = |a: &mut Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| {
            *a = match (*a, b) {
                (Some(x), Some(y)) => Some(f(x, y)),
                (x, y) => x.or(y),
            }
        };
        match (self, part) {
            (Data::Count(a), Data::Count(b)) => each(a, b, |x, y| *x += y),
            (Data::Min(a), Data::Min(b)) => each(a, b, |x, y| opt(x, y, f64::min)),
            (Data::Max(a), Data::Max(b)) => each(a, b, |x, y| opt(x, y, f64::max)),
            (Data::Sum(a), Data::Sum(b)) => each(a, b, |x, y| {
                *x = match (*x, y) {
                    (Some(mut p), Some(q)) => {
                        p.merge(q);
                        Some(p)
                    }
                    (p, q) => p.or(q),
                }
            }),
            (Data::Avg(a), Data::Avg(b)) => each(a, b, |x, y| {
                x.0.merge(y.0);
                x.1 += y.1;
            }),
            (Data::Values(a), Data::Values(b)) => each(a, b, |x, y| x.merge(y)),
            (a, b) => debug_assert!(false, "merged {a:?} with {b:?}"),
        }
    }
}

/// A number or duration as a metrics value (durations in seconds).
#[inline]
fn metric_value(v: Val<'_>) -> Option<f64> {
    match v {
        Val::Int(i) => Some(i as f64),
        Val::Float(x) if !x.is_nan() => Some(x),
        Val::Duration(d) => Some(d as f64 / 1e9),
        _ => None,
    }
}

/// The power-of-two histogram bucket of a value, as Tempo's `Log2Bucketize`.
#[inline]
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
    /// An accumulator for `steps` steps of `step` nanoseconds from `start` (inclusive) to `end`
    /// (exclusive), without limits or exemplars.
    pub(super) fn new(start: u64, end: u64, step: u64, steps: usize) -> Accumulator {
        Accumulator {
            start,
            end,
            step,
            steps,
            index: HashMap::new(),
            groups: Vec::new(),
            max_groups: usize::MAX,
            over_limit: false,
            limit_text: String::new(),
            compare: Default::default(),
            exemplars: ExemplarPicker::default(),
        }
    }

    /// What this accumulator counted, as plain data ([`AccState`]).
    pub(super) fn into_state(self) -> AccState {
        let mut keys: Vec<Option<Vec<GroupKey>>> = vec![None; self.groups.len()];
        for (key, n) in self.index {
            keys[n] = Some(key);
        }
        let compare = self.compare.map(|attrs| {
            let mut v: Vec<(String, CompareState)> = attrs
                .into_iter()
                .map(|(label, a)| {
                    let values: Vec<(Value, Vec<u64>)> = a.values.into_values().collect();
                    (
                        label,
                        CompareState {
                            total: a.total,
                            values,
                            too_many: a.too_many,
                        },
                    )
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        });
        AccState {
            groups: self
                .groups
                .into_iter()
                .map(|g| GroupState {
                    by: g.by,
                    bucket: g.bucket,
                    data: g.data,
                    used: g.used,
                })
                .collect(),
            over_limit: self.over_limit,
            compare,
            exemplars: self.exemplars.candidates().collect(),
        }
    }

    /// An accumulator of this one's range, limits and exemplar room holding `state` (what
    /// another run's part counted), to be merged with [`Accumulator::merge`].
    pub(super) fn fork_holding(&self, state: AccState) -> Result<Accumulator, String> {
        let mut part = self.fork();
        part.over_limit = state.over_limit;
        for g in state.groups {
            if !matches!(
                (&g.data, part.groups.first().map(|f| &f.data)),
                (Data::Count(_), None | Some(Data::Count(_)))
                    | (Data::Min(_), None | Some(Data::Min(_)))
                    | (Data::Max(_), None | Some(Data::Max(_)))
                    | (Data::Sum(_), None | Some(Data::Sum(_)))
                    | (Data::Avg(_), None | Some(Data::Avg(_)))
                    | (Data::Values(_), None | Some(Data::Values(_)))
            ) {
                return Err("series of different kinds in one part".to_owned());
            }
            let len = match &g.data {
                Data::Count(v) => v.len(),
                Data::Min(v) | Data::Max(v) => v.len(),
                Data::Sum(v) => v.len(),
                Data::Avg(v) => v.len(),
                Data::Values(v) => v.len(),
            };
            if len != self.steps {
                return Err(format!("a series of {len} steps in a query of {}", self.steps));
            }
            let mut key: Vec<GroupKey> = g.by.iter().map(GroupKey::of).collect();
            if let Some(b) = g.bucket {
                key.push(GroupKey::of(&Value::Float(b)));
            }
            part.index.insert(key, part.groups.len());
            part.groups.push(Group {
                by: g.by,
                bucket: g.bucket,
                data: g.data,
                used: g.used,
            });
        }
        for (selected, attrs) in state.compare.into_iter().enumerate() {
            for (label, c) in attrs {
                let values = c
                    .values
                    .into_iter()
                    .map(|(v, counts)| (GroupKey::of(&v), (v, counts)))
                    .collect();
                part.compare[selected].insert(
                    label,
                    AttrCounts {
                        total: c.total,
                        values,
                        too_many: c.too_many,
                    },
                );
            }
        }
        let range = (part.start, part.end);
        for (g, e) in state.exemplars {
            if g < part.groups.len() {
                part.exemplars.offer(range, g, e);
            }
        }
        Ok(part)
    }

    /// An empty accumulator with this one's range, limits and exemplar room, for a part of the
    /// spans (a row group, a job) counted on its own and merged back with
    /// [`Accumulator::merge`].
    pub(super) fn fork(&self) -> Accumulator {
        Accumulator {
            index: HashMap::new(),
            groups: Vec::new(),
            over_limit: false,
            compare: Default::default(),
            exemplars: self.exemplars.fork(),
            limit_text: self.limit_text.clone(),
            ..*self
        }
    }

    /// Adds the spans `part` counted after the spans this accumulator counted. Counts, sums,
    /// minimums, maximums and averages combine per step; quantiles keep every value; groups
    /// are created in the order they first appear, so the series limit is passed exactly when
    /// counting every span here would have passed it. Exemplars are offered in the order the
    /// part took them.
    /// `compare_top_n` is `compare()`'s `top_n` for a `compare()` query.
    pub(super) fn merge(&mut self, part: Accumulator, compare_top_n: Option<usize>) {
        self.over_limit |= part.over_limit;
        let mut keys: Vec<Option<Vec<GroupKey>>> = vec![None; part.groups.len()];
        for (key, n) in part.index {
            keys[n] = Some(key);
        }
        let mut renumbered: Vec<Option<usize>> = vec![None; part.groups.len()];
        for ((g, key), to) in part.groups.into_iter().zip(keys).zip(&mut renumbered) {
            let Some(key) = key.filter(|_| g.used) else { continue };
            if let Some(&n) = self.index.get(&key) {
                let into = &mut self.groups[n];
                into.used = true;
                into.data.merge(g.data);
                *to = Some(n);
            } else if self.groups.len() >= self.max_groups {
                self.over_limit = true;
            } else {
                self.index.insert(key, self.groups.len());
                self.groups.push(g);
                *to = Some(self.groups.len() - 1);
            }
        }
        if let Some(top_n) = compare_top_n {
            for (selected, attrs) in part.compare.into_iter().enumerate() {
                for (label, attr) in attrs {
                    self.compare_merge(selected == 1, top_n, label, attr);
                }
            }
        }
        let range = (self.start, self.end);
        self.exemplars.merge(range, part.exemplars, |g| renumbered[g]);
    }

    /// Adds a part's `compare()` counts of one attribute, as [`Accumulator::compare_add_with`]
    /// of each of its spans would have.
    fn compare_merge(&mut self, selected: bool, top_n: usize, label: String, part: AttrCounts) {
        let max_attrs = self.max_groups / (top_n + 1);
        let attrs = self.compare[0].len() + self.compare[1].len();
        let groups = &mut self.compare[usize::from(selected)];
        let attr = match groups.entry(label) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if attrs >= max_attrs => {
                self.over_limit = true;
                return;
            }
            std::collections::hash_map::Entry::Vacant(v) => v.insert(AttrCounts {
                total: vec![0; part.total.len()],
                values: HashMap::new(),
                too_many: false,
            }),
        };
        for (t, n) in attr.total.iter_mut().zip(&part.total) {
            *t += n;
        }
        if part.too_many {
            attr.too_many = true;
            attr.values = HashMap::new();
        }
        if attr.too_many {
            return;
        }
        for (key, (value, counts)) in part.values {
            if let Some((_, into)) = attr.values.get_mut(&key) {
                for (t, n) in into.iter_mut().zip(&counts) {
                    *t += n;
                }
            } else if attr.values.len() == MAX_COMPARE_VALUES {
                attr.too_many = true;
                attr.values = HashMap::new();
                return;
            } else {
                attr.values.insert(key, (value, counts));
            }
        }
    }

    pub(super) fn limit(&mut self, max_series: usize, max_points: u64) -> Result<(), EvalError> {
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

    #[inline]
    pub(super) fn observe(&mut self, metrics: &CMetrics, env: &TraceEnv<'_>, i: usize) {
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
    /// run's series limit ([`MetricsRun::limit`](super::MetricsRun::limit)).
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
    pub(super) fn compare_add_with(
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
    #[inline]
    pub(super) fn resolve(&mut self, metrics: &CMetrics, env: &TraceEnv<'_>, i: usize) -> Option<(usize, f64)> {
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
                MetricsFn::AvgOverTime => Data::Avg(vec![(ExactSum::default(), 0); steps]),
                MetricsFn::QuantileOverTime => Data::Values(vec![Default::default(); steps]),
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
    #[inline]
    pub(super) fn exemplar(
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
    #[inline]
    pub(super) fn record(&mut self, n: usize, start: u64, v: f64) {
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
            Data::Sum(s) => s[step].get_or_insert_with(ExactSum::default).add(v),
            Data::Avg(a) => {
                a[step].0.add(v);
                a[step].1 += 1;
            }
            Data::Values(vs) => vs[step].push(v),
        }
    }

    pub(super) fn finish(self, metrics: &CMetrics) -> Vec<Series> {
        if let Some(c) = &metrics.compare {
            return self.finish_compare(c.top_n);
        }
        let step_seconds = self.step as f64 / 1e9;
        let mut exemplars: Vec<Vec<Exemplar>> = vec![Vec::new(); self.groups.len()];
        for (n, e) in self.exemplars.chosen() {
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
                Data::Min(values) | Data::Max(values) => out.push(Series {
                    labels,
                    values,
                    exemplars,
                }),
                Data::Sum(sums) => out.push(Series {
                    labels,
                    values: sums.iter().map(|s| s.map(|s| s.value())).collect(),
                    exemplars,
                }),
                Data::Avg(sums) => {
                    let values = sums
                        .iter()
                        .map(|&(sum, n)| (n > 0).then(|| sum.value() / n as f64))
                        .collect();
                    out.push(Series {
                        labels,
                        values,
                        exemplars,
                    });
                }
                Data::Values(mut steps) => {
                    let first = out.len();
                    for &q in &metrics.quantiles {
                        let mut labels = labels.clone();
                        labels.push(("p".to_owned(), Value::Float(q)));
                        let values = steps.iter_mut().map(|values| values.quantile(q)).collect();
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

pub(super) fn cmp_labels(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
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
