//! Search, metrics and tag lookups as consumers of whole traces.
//!
//! The storage side (`weft_querier::scan`) walks the head and the blocks, skips what the
//! [`Prefilter`] rules out, assembles each remaining trace whole (merging pieces from the head
//! and several blocks, spans de-duplicated and ordered by start time) and hands it to a
//! [`TraceSink`] exactly once. The sinks here decode the trace and run the exact evaluator, so
//! a result never depends on how a trace was split across storage.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use weft_block::columns::service_name;
use weft_block::row::SpanRow;
use weft_traceql::ast::{AttributeScope, FieldExpr, Intrinsic, Pipeline, SpansetExpr, Stage};
use weft_traceql::{EvalError, Evaluator, MetricsRun, Query, Series, Span, Trace, Value};

use crate::decode::{Parts, decode_parts};
use crate::graph::{STATUS_ERROR, UNKNOWN_SERVICE};
use crate::prefilter::Prefilter;

/// Something that consumes whole traces during a scan.
pub trait TraceSink {
    /// What a trace must satisfy to be worth offering.
    fn prefilter(&self) -> &Prefilter;
    /// The earliest start a trace may have and still change the result, once there is one
    /// (a search holding `limit` traces: its oldest). A scan may skip traces (and whole row
    /// groups) starting before it, and stop once nothing unread starts at or after it.
    fn start_floor(&self) -> Option<u64> {
        None
    }
    /// What [`start_floor`](Self::start_floor) is a floor of: the trace's start (the
    /// default), or the start of one of its spans ([`FloorOf`]).
    fn floor_of(&self) -> FloorOf {
        FloorOf::TraceStart
    }
    /// Whether a trace starting at `start_unix_nano` can still change the result.
    fn wants_start(&self, start_unix_nano: u64) -> bool {
        self.start_floor().is_none_or(|f| start_unix_nano >= f)
    }
    /// One whole trace: de-duplicated, ordered by start time, never empty, overlapping the
    /// scan's time window.
    fn offer(&mut self, rows: &[SpanRow]);
    /// True once more traces cannot change the result (a full tag-value list); the scan stops.
    fn done(&self) -> bool {
        false
    }
    /// An empty sink of the same query, offered the whole traces of one row group on a query
    /// worker while the scan goes on, and added back with [`Self::merge`] in the scan's order,
    /// so the answer does not depend on timing. It starts from this sink's
    /// [`start_floor`](Self::start_floor) now. `None` (the default): every trace is offered
    /// here.
    fn fork(&self) -> Option<Box<dyn TracePart>> {
        None
    }
    /// Adds what a [`fork`](Self::fork) of this sink was offered, as if offered here next.
    fn merge(&mut self, _part: Box<dyn TracePart>) {}
    /// How far the scan feeding this sink has got, told now and then while it runs (after
    /// each row group or job) and once at its end; a later report supersedes an earlier one.
    /// For progress reports only: nothing in the answer depends on it.
    fn progress(&mut self, _p: ScanProgress) {}
}

/// How far a scan has got ([`TraceSink::progress`]): what it inspected so far and its units
/// of work, done and planned. A unit is the recent spans (the head, or the live stores' part)
/// or one row group of a block when a process reads alone; one job when a frontend shares the
/// query out. Units the scan found it need not read (before the sink's floor, outside the
/// window) count as completed, so a scan that ends says `completed_jobs == total_jobs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanProgress {
    pub inspected_traces: u64,
    pub inspected_spans: u64,
    pub inspected_bytes: u64,
    pub completed_jobs: u64,
    pub total_jobs: u64,
}

/// Told a metrics query's partial answer as its scan goes ([`Metrics::watch`],
/// [`SpanMetrics::watch`](crate::span_metrics::SpanMetrics::watch)): the run so far (take its
/// [`MetricsRun::snapshot`] when wanted) and the scan's progress. Called on the thread that
/// merges the scan's parts, under the scan's lock: keep it short, and throttle snapshots.
#[derive(Clone)]
pub struct Watch(std::sync::Arc<WatchFn>);

/// What a [`Watch`] calls.
type WatchFn = dyn Fn(&MetricsRun, ScanProgress) + Send + Sync;

impl Watch {
    pub fn new(f: impl Fn(&MetricsRun, ScanProgress) + Send + Sync + 'static) -> Watch {
        Watch(std::sync::Arc::new(f))
    }

    /// Tells the watcher `run` and `p`.
    pub fn tell(&self, run: &MetricsRun, p: ScanProgress) {
        (self.0)(run, p)
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

/// What a sink's [`TraceSink::start_floor`] bounds, and so which start of a trace's piece a
/// scan compares with it ([`FloorOf::bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FloorOf {
    /// The trace's start (its earliest span's). It is at most any piece's earliest start, so
    /// a piece, a row group or a block whose spans all start before the floor holds nothing
    /// the sink wants.
    #[default]
    TraceStart,
    /// The start of one of the trace's spans (Zipkin's order: the root span's timestamp, else
    /// the earliest). A whole trace's key is at most its latest span start. A scan takes it
    /// that a matching trace's key is at most the latest start of the spans that pass the
    /// prefilter, so that a piece or a row group whose spans all start before the floor
    /// holds nothing the sink wants: true unless a root span starts after every span of its
    /// trace that the prefilter looks for (clock skew), and always true of a trivial
    /// prefilter (spec/search.md).
    SpanStart,
}

impl FloorOf {
    /// The start of a piece (`starts`: its spans') that the floor is compared with: the
    /// earliest for [`FloorOf::TraceStart`], the latest for [`FloorOf::SpanStart`]. 0 for
    /// no spans.
    pub fn bound(self, starts: impl IntoIterator<Item = u64>) -> u64 {
        let it = starts.into_iter();
        match self {
            FloorOf::TraceStart => it.min(),
            FloorOf::SpanStart => it.max(),
        }
        .unwrap_or(0)
    }

    /// The bound of two pieces of one trace together.
    pub fn join(self, a: u64, b: u64) -> u64 {
        match self {
            FloorOf::TraceStart => a.min(b),
            FloorOf::SpanStart => a.max(b),
        }
    }
}

/// A [`TraceSink::fork`]: offered traces as the sink is, then handed back to its
/// [`TraceSink::merge`], which takes its own type back with [`TracePart::into_any`].
pub trait TracePart: Send {
    /// As [`TraceSink::offer`]; the trace is offered nowhere else.
    fn offer(&mut self, rows: &[SpanRow]);
    /// As [`TraceSink::wants_start`].
    fn wants_start(&self, start_unix_nano: u64) -> bool;
    /// The part itself, for the sink's `merge` to downcast.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

/// Decodes a whole trace.
pub fn to_trace(rows: &[SpanRow]) -> Trace {
    to_trace_parts(rows, Parts::ALL)
}

/// Decodes the parts of a whole trace that a query reads.
pub fn to_trace_parts(rows: &[SpanRow], parts: Parts) -> Trace {
    Trace {
        spans: rows.iter().map(|r| decode_parts(r, parts)).collect(),
    }
}

/// The filters of `/api/search` besides the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchParams {
    /// Only traces at least this long (trace duration: last span end − first span start).
    pub min_duration_ns: Option<u64>,
    /// Only traces at most this long.
    pub max_duration_ns: Option<u64>,
    /// At most this many traces, the most recent (by start time) first.
    pub limit: usize,
    /// At most this many spans per spanset (`spss`); `matched` still counts them all.
    pub spans_per_spanset: usize,
}

impl Default for SearchParams {
    /// Tempo's defaults: 20 traces, 3 spans per spanset.
    fn default() -> Self {
        SearchParams {
            min_duration_ns: None,
            max_duration_ns: None,
            limit: 20,
            spans_per_spanset: 3,
        }
    }
}

/// One matching trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub trace_id: [u8; 16],
    /// Empty when the trace has no root span.
    pub root_service_name: String,
    /// Empty when the trace has no root span.
    pub root_trace_name: String,
    pub start_unix_nano: u64,
    pub duration_nano: u64,
    pub spansets: Vec<HitSpanset>,
    /// Every span of the trace counted by service, in name order (Tempo's `serviceStats`).
    pub service_stats: Vec<ServiceCount>,
}

/// The spans of one service in a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCount {
    /// `service.name` of the spans' resource; [`UNKNOWN_SERVICE`] without one.
    pub service: String,
    pub spans: u32,
    /// Spans with status error.
    pub errors: u32,
}

/// Counts the spans and error spans of a trace per service.
pub fn service_stats(rows: &[SpanRow]) -> Vec<ServiceCount> {
    // A trace holds few distinct resources: count by encoded resource, then read the service
    // name of each distinct one once.
    let mut by_resource: HashMap<&[u8], (u32, u32)> = HashMap::new();
    for r in rows {
        let c = by_resource.entry(&r.resource[..]).or_default();
        c.0 += 1;
        c.1 += u32::from(r.status_code == STATUS_ERROR);
    }
    let mut by_service: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for (resource, (spans, errors)) in by_resource {
        let service = service_name(resource).unwrap_or_else(|| UNKNOWN_SERVICE.to_owned());
        let c = by_service.entry(service).or_default();
        c.0 += spans;
        c.1 += errors;
    }
    by_service
        .into_iter()
        .map(|(service, (spans, errors))| ServiceCount { service, spans, errors })
        .collect()
}

/// One spanset of a matching trace.
#[derive(Debug, Clone, PartialEq)]
pub struct HitSpanset {
    /// The first `spans_per_spanset` spans, by start time.
    pub spans: Vec<HitSpan>,
    /// How many spans the spanset holds.
    pub matched: usize,
    /// `by()` keys and aggregate results (`count()`), under their printed names.
    pub attributes: Vec<(String, Value)>,
}

/// A span of a spanset with the fields the query looked at.
#[derive(Debug, Clone, PartialEq)]
pub struct HitSpan {
    pub span_id: [u8; 8],
    pub name: String,
    pub start_unix_nano: u64,
    pub duration_nano: u64,
    /// `service.name`, then the attributes and intrinsics the query reads, then `select()`
    /// fields; each present value once, under the attribute's key (intrinsics by name).
    pub attributes: Vec<(String, Value)>,
}

/// A spanset query being run: feed it traces, then take the hits.
#[derive(Debug)]
pub struct Search {
    evaluator: Evaluator,
    parts: Parts,
    prefilter: Prefilter,
    params: SearchParams,
    fields: Vec<Field>,
    hits: Vec<Hit>,
    /// Start time of the oldest hit kept once `limit` are kept.
    floor: Option<u64>,
}

/// A field shown on result spans.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    Attr(AttributeScope, String),
    Status,
    StatusMessage,
    Kind,
}

impl Search {
    /// Compiles a spanset query. Fails when it is invalid, unsupported or a metrics query.
    pub fn new(query: &Query, params: SearchParams) -> Result<Search, EvalError> {
        let evaluator = Evaluator::new(query)?;
        if evaluator.is_metrics() {
            return Err(EvalError::MetricsQuery {
                query: query.to_string(),
            });
        }
        let mut fields = Vec::new();
        pipeline_fields(&query.pipeline, &mut fields);
        Ok(Search {
            evaluator,
            // Hits show the root's service and each span's `service.name`.
            parts: Parts::of(query).with_resource_key("service.name"),
            prefilter: Prefilter::new(query),
            params: SearchParams {
                limit: params.limit.max(1),
                ..params
            },
            fields,
            hits: Vec::new(),
            floor: None,
        })
    }

    /// An empty search of the same query and parameters that keeps only traces starting at
    /// or after this one's floor now: a [`TraceSink::fork`].
    pub fn fork(&self) -> Search {
        Search {
            evaluator: self.evaluator.clone(),
            parts: self.parts,
            prefilter: self.prefilter.clone(),
            params: self.params.clone(),
            fields: self.fields.clone(),
            hits: Vec::new(),
            floor: self.floor,
        }
    }

    /// Adds a fork's hits: the result is the `limit` newest of both, ties by trace ID, the
    /// same whatever order the traces came in.
    pub fn merge(&mut self, part: Search) {
        for hit in part.hits {
            if TraceSink::wants_start(self, hit.start_unix_nano) {
                self.hits.push(hit);
            }
        }
        if self.hits.len() >= self.params.limit {
            self.trim();
        }
    }

    /// Adds hits found elsewhere (another querier's part of the same search), as
    /// [`Search::merge`] adds a fork's.
    pub fn merge_hits(&mut self, hits: Vec<Hit>) {
        let mut part = self.fork();
        part.hits = hits;
        self.merge(part);
    }

    /// Keeps only traces starting at or after `floor` from now on: the oldest hit of a result
    /// this search's hits will be merged into, once that result is full.
    pub fn raise_floor(&mut self, floor: u64) {
        self.floor = Some(self.floor.map_or(floor, |f| f.max(floor)));
    }

    /// The hits, most recent first, at most `limit`.
    pub fn finish(mut self) -> Vec<Hit> {
        self.trim();
        self.hits
    }

    /// The hits so far, as [`Search::finish`] would return them now (for progressive
    /// results; later traces may still displace some of them).
    pub fn hits_so_far(&self) -> Vec<Hit> {
        let mut hits = self.hits.clone();
        hits.sort_by(|a, b| {
            b.start_unix_nano
                .cmp(&a.start_unix_nano)
                .then(a.trace_id.cmp(&b.trace_id))
        });
        hits.truncate(self.params.limit);
        hits
    }

    fn trim(&mut self) {
        self.hits.sort_by(|a, b| {
            b.start_unix_nano
                .cmp(&a.start_unix_nano)
                .then(a.trace_id.cmp(&b.trace_id))
        });
        self.hits.truncate(self.params.limit);
        if self.hits.len() == self.params.limit {
            self.floor = self.hits.last().map(|h| h.start_unix_nano);
        }
    }
}

impl TraceSink for Search {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn start_floor(&self) -> Option<u64> {
        // Ties are kept (`>=`): the trace ID breaks them, so a later trace may still displace one.
        self.floor
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        let start = rows.iter().map(|r| r.start_unix_nano).min().unwrap_or(0);
        if !TraceSink::wants_start(self, start) {
            return;
        }
        let end = rows.iter().map(SpanRow::end_unix_nano).max().unwrap_or(0);
        let duration = end.saturating_sub(start);
        if self.params.min_duration_ns.is_some_and(|m| duration < m)
            || self.params.max_duration_ns.is_some_and(|m| duration > m)
        {
            return;
        }
        let trace = to_trace_parts(rows, self.parts);
        let Ok(sets) = self.evaluator.eval(&trace) else {
            return;
        };
        if sets.is_empty() {
            return;
        }
        let spss = self.params.spans_per_spanset;
        let spansets = sets
            .into_iter()
            .map(|set| {
                let mut order: Vec<usize> = (0..set.spans.len()).collect();
                order.sort_by_key(|&k| (trace.spans[set.spans[k]].start_unix_nano, set.spans[k]));
                let spans = order
                    .into_iter()
                    .take(spss)
                    .map(|k| {
                        let span = &trace.spans[set.spans[k]];
                        let mut attributes = self.span_fields(span);
                        for (name, value) in set.selected.iter().zip(&set.selected_values[k]) {
                            let key = display_key(name);
                            if !matches!(value, Value::Nil) && !attributes.iter().any(|(k, _)| *k == key) {
                                attributes.push((key, value.clone()));
                            }
                        }
                        HitSpan {
                            span_id: span.span_id,
                            name: span.name.clone(),
                            start_unix_nano: span.start_unix_nano,
                            duration_nano: span.duration_nano,
                            attributes,
                        }
                    })
                    .collect();
                HitSpanset {
                    spans,
                    matched: set.spans.len(),
                    attributes: set.attributes,
                }
            })
            .collect();
        let root = trace.root().map(|i| &trace.spans[i]);
        self.hits.push(Hit {
            trace_id: rows[0].trace_id,
            root_service_name: root.and_then(Span::service_name).unwrap_or_default().to_owned(),
            root_trace_name: root.map(|s| s.name.clone()).unwrap_or_default(),
            start_unix_nano: start,
            duration_nano: duration,
            spansets,
            service_stats: service_stats(rows),
        });
        if self.hits.len() >= self.params.limit * 2 {
            self.trim();
        }
    }

    fn fork(&self) -> Option<Box<dyn TracePart>> {
        Some(Box::new(Search::fork(self)))
    }

    fn merge(&mut self, part: Box<dyn TracePart>) {
        if let Ok(part) = part.into_any().downcast::<Search>() {
            Search::merge(self, *part);
        }
    }
}

impl TracePart for Search {
    fn offer(&mut self, rows: &[SpanRow]) {
        TraceSink::offer(self, rows)
    }

    fn wants_start(&self, start_unix_nano: u64) -> bool {
        TraceSink::wants_start(self, start_unix_nano)
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl Search {
    fn span_fields(&self, span: &Span) -> Vec<(String, Value)> {
        let mut out: Vec<(String, Value)> = Vec::new();
        let mut push = |k: &str, v: Option<Value>| {
            if let Some(v) = v
                && !matches!(v, Value::Nil)
                && !out.iter().any(|(key, _)| key == k)
            {
                out.push((k.to_owned(), v));
            }
        };
        push("service.name", span.resource_attr("service.name").cloned());
        for f in &self.fields {
            match f {
                Field::Attr(scope, key) => {
                    let v = match scope {
                        AttributeScope::Span => span.span_attr(key),
                        AttributeScope::Resource => span.resource_attr(key),
                        AttributeScope::Unscoped => span.span_attr(key).or_else(|| span.resource_attr(key)),
                        AttributeScope::Instrumentation => {
                            span.scope_attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
                        }
                        AttributeScope::Event | AttributeScope::Link => None,
                    };
                    push(key, v.cloned());
                }
                Field::Status => push("status", Some(Value::Status(span.status))),
                Field::Kind => push("kind", Some(Value::Kind(span.kind))),
                Field::StatusMessage => push(
                    "statusMessage",
                    (!span.status_message.is_empty()).then(|| Value::Str(span.status_message.clone())),
                ),
            }
        }
        out
    }
}

/// The key under which a `select()`ed field is shown: an attribute's key without its scope.
fn display_key(printed: &str) -> String {
    for p in ["resource.", "span.", "instrumentation.", "event.", "link.", "."] {
        if let Some(rest) = printed.strip_prefix(p) {
            return rest.trim_matches('"').to_owned();
        }
    }
    printed.to_owned()
}

fn pipeline_fields(p: &Pipeline, out: &mut Vec<Field>) {
    for s in &p.stages {
        match s {
            Stage::Spanset(e) => spanset_fields(e, out),
            Stage::By(es) => es.iter().for_each(|e| expr_fields(e, out)),
            _ => {}
        }
    }
}

fn spanset_fields(e: &SpansetExpr, out: &mut Vec<Field>) {
    match e {
        SpansetExpr::Filter(f) => {
            if let Some(e) = &f.expr {
                expr_fields(e, out);
            }
        }
        SpansetExpr::Op { lhs, rhs, .. } => {
            spanset_fields(lhs, out);
            spanset_fields(rhs, out);
        }
        SpansetExpr::Pipeline(p) => pipeline_fields(p, out),
    }
}

fn add(out: &mut Vec<Field>, f: Field) {
    if !out.contains(&f) {
        out.push(f);
    }
}

fn expr_fields(e: &FieldExpr, out: &mut Vec<Field>) {
    match e {
        FieldExpr::Attribute(a) if !a.parent => add(out, Field::Attr(a.scope, a.name.clone())),
        FieldExpr::Intrinsic(Intrinsic::Status) => add(out, Field::Status),
        FieldExpr::Intrinsic(Intrinsic::Kind) => add(out, Field::Kind),
        FieldExpr::Intrinsic(Intrinsic::StatusMessage) => add(out, Field::StatusMessage),
        FieldExpr::Unary { expr, .. } => expr_fields(expr, out),
        FieldExpr::Binary { lhs, rhs, .. } => {
            expr_fields(lhs, out);
            expr_fields(rhs, out);
        }
        _ => {}
    }
}

/// A metrics query being run over whole traces.
#[derive(Debug)]
pub struct Metrics {
    run: MetricsRun,
    parts: Parts,
    prefilter: Prefilter,
    /// Told the run as the scan's parts are merged (forks have none).
    watch: Option<Watch>,
}

impl Metrics {
    /// Compiles a metrics query over `[start_ns, end_ns)` in steps of `step_ns`.
    pub fn new(query: &Query, start_ns: u64, end_ns: u64, step_ns: u64) -> Result<Metrics, EvalError> {
        Ok(Metrics {
            run: MetricsRun::new(query, start_ns, end_ns, step_ns)?,
            parts: Parts::of(query),
            prefilter: Prefilter::new(query),
            watch: None,
        })
    }

    /// Tells `w` the run so far at each progress report of the scan ([`TraceSink::progress`]).
    pub fn watch(&mut self, w: Watch) {
        self.watch = Some(w);
    }

    /// Tells the watcher, if any, the run so far (a frontend after merging a job).
    pub fn tell(&self, p: ScanProgress) {
        if let Some(w) = &self.watch {
            w.tell(&self.run, p);
        }
    }

    /// Bounds the series and points the query may hold ([`MetricsRun::limit`]).
    pub fn limit(&mut self, max_series: usize, max_points: u64) -> Result<(), EvalError> {
        self.run.limit(max_series, max_points)
    }

    /// Asks for up to `limit` exemplars ([`MetricsRun::exemplars`]).
    pub fn exemplars(&mut self, limit: usize) {
        self.run.exemplars(limit);
    }

    /// The series, or the limit the query passed.
    pub fn finish(self) -> Result<Vec<Series>, EvalError> {
        self.run.finish_within_limits()
    }

    /// What the query counted, for the frontend of a query split across queriers.
    pub fn into_state(self) -> Vec<weft_traceql::metrics::AccState> {
        self.run.into_state()
    }

    /// Adds what another querier's run of the same query counted.
    pub fn merge_state(&mut self, state: Vec<weft_traceql::metrics::AccState>) -> Result<(), String> {
        self.run.merge_state(state)
    }
}

impl TraceSink for Metrics {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    /// Once over a limit the answer is an error: reading more cannot change it.
    fn done(&self) -> bool {
        self.run.is_over_limit()
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        self.run.add(&to_trace_parts(rows, self.parts));
    }

    fn fork(&self) -> Option<Box<dyn TracePart>> {
        Some(Box::new(Metrics {
            run: self.run.fork(),
            parts: self.parts,
            prefilter: self.prefilter.clone(),
            watch: None,
        }))
    }

    fn merge(&mut self, part: Box<dyn TracePart>) {
        if let Ok(part) = part.into_any().downcast::<Metrics>() {
            self.run.merge(part.run);
        }
    }

    fn progress(&mut self, p: ScanProgress) {
        self.tell(p);
    }
}

impl TracePart for Metrics {
    fn offer(&mut self, rows: &[SpanRow]) {
        TraceSink::offer(self, rows)
    }

    fn wants_start(&self, _start_unix_nano: u64) -> bool {
        true
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Attribute scopes listed by the tag APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TagScope {
    Resource,
    Span,
    Event,
    Link,
    Instrumentation,
}

impl TagScope {
    pub fn name(self) -> &'static str {
        match self {
            TagScope::Resource => "resource",
            TagScope::Span => "span",
            TagScope::Event => "event",
            TagScope::Link => "link",
            TagScope::Instrumentation => "instrumentation",
        }
    }

    pub fn parse(s: &str) -> Option<TagScope> {
        Some(match s {
            "resource" => TagScope::Resource,
            "span" => TagScope::Span,
            "event" => TagScope::Event,
            "link" => TagScope::Link,
            "instrumentation" => TagScope::Instrumentation,
            _ => return None,
        })
    }

    pub const ALL: [TagScope; 5] = [
        TagScope::Resource,
        TagScope::Span,
        TagScope::Event,
        TagScope::Link,
        TagScope::Instrumentation,
    ];
}

/// Collects attribute keys per scope from the spans of traces matching a query (every trace
/// for `{ }`).
#[derive(Debug)]
pub struct TagNames {
    evaluator: Evaluator,
    prefilter: Prefilter,
    /// Most distinct keys kept per scope.
    cap: usize,
    pub keys: BTreeMap<TagScope, BTreeSet<String>>,
    /// The scan's last progress report: the reply's jobs.
    pub jobs: Option<ScanProgress>,
}

impl TagNames {
    pub fn new(query: &Query, cap: usize) -> Result<TagNames, EvalError> {
        Ok(TagNames {
            evaluator: spanset_evaluator(query)?,
            prefilter: Prefilter::new(query),
            cap,
            keys: BTreeMap::new(),
            jobs: None,
        })
    }

    /// An empty collector of the same query and cap, for another part of a split scan.
    pub fn empty_like(&self) -> TagNames {
        TagNames {
            evaluator: self.evaluator.clone(),
            prefilter: self.prefilter.clone(),
            cap: self.cap,
            keys: BTreeMap::new(),
            jobs: None,
        }
    }

    /// Adds another part's keys, as if its traces came next (each scope up to the cap).
    pub fn merge_keys(&mut self, keys: BTreeMap<TagScope, BTreeSet<String>>) {
        for (scope, keys) in keys {
            for key in keys {
                add_key(&mut self.keys, self.cap, scope, &key);
            }
        }
    }
}

impl TraceSink for TagNames {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn progress(&mut self, p: ScanProgress) {
        self.jobs = Some(p)
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        let trace = to_trace(rows);
        let Ok(sets) = self.evaluator.eval(&trace) else {
            return;
        };
        let cap = self.cap;
        let mut add = |scope: TagScope, key: &str| add_key(&mut self.keys, cap, scope, key);
        for &i in matched(&sets, trace.spans.len()).iter() {
            let s = &trace.spans[i];
            s.resource_attrs.iter().for_each(|(k, _)| add(TagScope::Resource, k));
            s.span_attrs.iter().for_each(|(k, _)| add(TagScope::Span, k));
            s.scope_attrs
                .iter()
                .for_each(|(k, _)| add(TagScope::Instrumentation, k));
            for e in &s.events {
                e.attrs.iter().for_each(|(k, _)| add(TagScope::Event, k));
            }
            for l in &s.links {
                l.attrs.iter().for_each(|(k, _)| add(TagScope::Link, k));
            }
        }
    }
}

/// Adds `key` to `scope`'s keys unless it holds `cap` keys already.
pub(crate) fn add_key(keys: &mut BTreeMap<TagScope, BTreeSet<String>>, cap: usize, scope: TagScope, key: &str) {
    let set = keys.entry(scope).or_default();
    if set.len() < cap && !set.contains(key) {
        set.insert(key.to_owned());
    }
}

/// The spans of any spanset, ascending, each once.
fn matched(sets: &[weft_traceql::Spanset], n: usize) -> Vec<usize> {
    let mut seen = vec![false; n];
    for s in sets {
        for &i in &s.spans {
            seen[i] = true;
        }
    }
    (0..n).filter(|&i| seen[i]).collect()
}

fn spanset_evaluator(query: &Query) -> Result<Evaluator, EvalError> {
    let e = Evaluator::new(query)?;
    if e.is_metrics() {
        return Err(EvalError::MetricsQuery {
            query: query.to_string(),
        });
    }
    Ok(e)
}

/// Distinct tag values in the order first seen, at most `cap` of them.
#[derive(Debug)]
pub(crate) struct ValueList {
    pub(crate) cap: usize,
    /// Set when more than `cap` distinct values were seen.
    pub(crate) truncated: bool,
    pub(crate) values: Vec<Value>,
    seen: std::collections::HashSet<String>,
}

impl ValueList {
    pub(crate) fn new(cap: usize) -> ValueList {
        ValueList {
            cap,
            truncated: false,
            values: Vec::new(),
            seen: Default::default(),
        }
    }

    /// Adds `vals` (nils and arrays are not tag values); stops at the first value past the cap.
    pub(crate) fn extend(&mut self, vals: Vec<Value>) {
        for v in vals {
            if matches!(v, Value::Nil | Value::Array(_)) {
                continue;
            }
            let key = format!("{v:?}");
            if self.seen.contains(&key) {
                continue;
            }
            if self.values.len() >= self.cap {
                self.truncated = true;
                return;
            }
            self.seen.insert(key);
            self.values.push(v);
        }
    }
}

/// Collects the distinct values of one field over the spans matching a query.
#[derive(Debug)]
pub struct TagValues {
    evaluator: Evaluator,
    prefilter: Prefilter,
    field: FieldExpr,
    pub(crate) list: ValueList,
    /// The scan's last progress report: the reply's jobs.
    pub jobs: Option<ScanProgress>,
}

impl TagValues {
    /// `field` is an attribute (`resource.service.name`, `.http.url`) or intrinsic (`name`,
    /// `status`) as TraceQL spells it. At most `cap` distinct values are kept.
    pub fn new(query: &Query, field: FieldExpr, cap: usize) -> Result<TagValues, EvalError> {
        Ok(TagValues {
            evaluator: spanset_evaluator(query)?,
            prefilter: Prefilter::new(query),
            field,
            list: ValueList::new(cap),
            jobs: None,
        })
    }

    /// Set when more than the cap of distinct values were seen.
    pub fn truncated(&self) -> bool {
        self.list.truncated
    }

    /// The values, in the order first seen.
    pub fn finish(self) -> Vec<Value> {
        self.list.values
    }

    /// An empty collector of the same query, field and cap, for another part of a split scan.
    pub fn empty_like(&self) -> TagValues {
        TagValues {
            evaluator: self.evaluator.clone(),
            prefilter: self.prefilter.clone(),
            field: self.field.clone(),
            list: ValueList::new(self.list.cap),
            jobs: None,
        }
    }

    /// Adds another part's values after these, as if its traces came next: the values in the
    /// order first seen, truncated when one pass would be.
    pub fn merge_values(&mut self, values: Vec<Value>, truncated: bool) {
        self.list.extend(values);
        self.list.truncated |= truncated;
    }
}

impl TraceSink for TagValues {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn progress(&mut self, p: ScanProgress) {
        self.jobs = Some(p)
    }

    fn done(&self) -> bool {
        self.list.truncated
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        let trace = to_trace(rows);
        let Ok(sets) = self.evaluator.eval(&trace) else {
            return;
        };
        let spans = matched(&sets, trace.spans.len());
        if spans.is_empty() {
            return;
        }
        let mut vals = Vec::new();
        match &self.field {
            // Trace-level intrinsics take one value per trace that has a matching span.
            FieldExpr::Intrinsic(i @ (Intrinsic::RootName | Intrinsic::RootServiceName | Intrinsic::TraceDuration)) => {
                vals.extend(trace_value(*i, &trace))
            }
            field => {
                for i in spans {
                    field_values(field, &trace.spans[i], &mut vals);
                }
            }
        }
        self.list.extend(vals);
    }
}

/// The value of a trace-level intrinsic (`rootName`, `rootServiceName`, `traceDuration`) of
/// `trace`, or `None` when `i` is not one (or the trace has no root for the root ones).
fn trace_value(i: Intrinsic, trace: &Trace) -> Option<Value> {
    let root = || trace.spans.iter().find(|s| s.parent_span_id.is_none());
    match i {
        Intrinsic::RootName => root().map(|r| Value::Str(r.name.clone())),
        Intrinsic::RootServiceName => root().and_then(|r| r.resource_attr("service.name").cloned()),
        Intrinsic::TraceDuration => {
            let start = trace.spans.iter().map(|s| s.start_unix_nano).min()?;
            let end = trace.spans.iter().map(|s| s.start_unix_nano + s.duration_nano).max()?;
            Some(Value::Duration(end.saturating_sub(start) as i64))
        }
        _ => None,
    }
}

/// The values `field` takes on `span` (several for event and link attributes).
pub(crate) fn field_values(field: &FieldExpr, span: &Span, out: &mut Vec<Value>) {
    let find = |attrs: &[(String, Value)], key: &str| attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    match field {
        FieldExpr::Attribute(a) => match a.scope {
            AttributeScope::Span => out.extend(span.span_attr(&a.name).cloned()),
            AttributeScope::Resource => out.extend(span.resource_attr(&a.name).cloned()),
            AttributeScope::Unscoped => {
                out.extend(span.span_attr(&a.name).cloned());
                out.extend(span.resource_attr(&a.name).cloned());
            }
            AttributeScope::Instrumentation => out.extend(find(&span.scope_attrs, &a.name)),
            AttributeScope::Event => out.extend(span.events.iter().filter_map(|e| find(&e.attrs, &a.name))),
            AttributeScope::Link => out.extend(span.links.iter().filter_map(|l| find(&l.attrs, &a.name))),
        },
        FieldExpr::Intrinsic(i) => match i {
            Intrinsic::Name => out.push(Value::Str(span.name.clone())),
            Intrinsic::Status => out.push(Value::Status(span.status)),
            Intrinsic::Kind => out.push(Value::Kind(span.kind)),
            Intrinsic::StatusMessage if !span.status_message.is_empty() => {
                out.push(Value::Str(span.status_message.clone()))
            }
            Intrinsic::EventName => out.extend(span.events.iter().map(|e| Value::Str(e.name.clone()))),
            Intrinsic::InstrumentationName if !span.scope_name.is_empty() => {
                out.push(Value::Str(span.scope_name.clone()))
            }
            Intrinsic::InstrumentationVersion if !span.scope_version.is_empty() => {
                out.push(Value::Str(span.scope_version.clone()))
            }
            Intrinsic::Duration => out.push(Value::Duration(span.duration_nano as i64)),
            Intrinsic::EventTimeSinceStart => out.extend(
                span.events
                    .iter()
                    .map(|e| Value::Duration(e.time_unix_nano.wrapping_sub(span.start_unix_nano) as i64)),
            ),
            _ => {}
        },
        _ => {}
    }
}
