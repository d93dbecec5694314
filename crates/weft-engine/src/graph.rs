//! The service graph: calls between services, aggregated from the parent/child spans of
//! traces.
//!
//! An *edge* `A → B` is a span of service `B` whose parent span belongs to service `A ≠ B` (a
//! client span and the server span it caused, or a producer and its consumer). Counting from
//! stored traces means a call is found wherever its two spans are stored, unlike a streaming
//! processor that pairs spans within a wait window. It is counted once per child span:
//!
//! - it is an **error** when the child span's status is error, or the parent is a client or
//!   producer span whose status is error (the call failed as seen by the caller);
//! - its **latency** is the child span's duration (the callee's view, which every instrumented
//!   service reports), kept in a log-bucketed histogram with 8 buckets per power of two
//!   (quantiles within 9%).
//!
//! Only spans that start inside the window are counted; the rest of a trace still supplies
//! parents. A span whose parent was never stored counts for its service but makes no edge.
//!
//! Two ways in: whole traces from a search scan ([`TraceSink`], needed when a TraceQL filter
//! picks the traces), or, for every trace, the few columns the graph reads straight from row
//! groups and head columns, a trace's consecutive rows at a time (IDs, kind, status, times and
//! the service name column; about a tenth of a block's bytes). Calls whose parent is stored in
//! another piece of a split trace are resolved once that trace is read whole.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use weft_block::GraphColumns;
use weft_block::columns::{SpanColumns, service_name};
use weft_block::hash::{FastBuild, FastMap};
use weft_block::row::SpanRow;
use weft_traceql::{EvalError, Evaluator, Query};

use crate::decode::Parts;
use crate::prefilter::Prefilter;
use crate::search::{TraceSink, to_trace_parts};

/// OTLP `Span.SpanKind` values.
const KIND_CLIENT: u8 = 3;
const KIND_PRODUCER: u8 = 4;
/// OTLP `Status.StatusCode.STATUS_CODE_ERROR`.
pub(crate) const STATUS_ERROR: u8 = 2;
/// The service of spans whose resource has no `service.name`, as the OpenTelemetry SDKs name
/// it by default.
pub const UNKNOWN_SERVICE: &str = "unknown_service";
/// Distinct resource headers remembered before the cache is cleared.
const NAME_CACHE: usize = 4096;

/// Per-service totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceStats {
    pub spans: u64,
    pub errors: u64,
    /// Root spans (trace entry points) of this service.
    pub roots: u64,
}

/// Calls from one service to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeStats {
    pub calls: u64,
    pub errors: u64,
    latency: LogHistogram,
}

impl EdgeStats {
    /// The `q`-quantile (0..=1) of the callee spans' durations in nanoseconds, within 9%.
    pub fn latency_quantile(&self, q: f64) -> u64 {
        self.latency.quantile(q)
    }
}

/// A log-bucketed histogram of nanosecond durations: 8 buckets per power of two.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct LogHistogram {
    counts: Vec<u64>,
    total: u64,
}

impl LogHistogram {
    const SUB: u32 = 3; // log2 of the buckets per power of two
    /// Buckets of the largest `u64` value, plus one: every bucket there can be.
    const BUCKETS: usize = (((64 - Self::SUB) << Self::SUB) + (1 << Self::SUB)) as usize;

    fn bucket(v: u64) -> usize {
        if v < (1 << Self::SUB) {
            return v as usize;
        }
        let top = 63 - v.leading_zeros(); // ≥ SUB
        let sub = (v >> (top - Self::SUB)) & ((1 << Self::SUB) - 1);
        (((top - Self::SUB + 1) << Self::SUB) as u64 + sub) as usize
    }

    /// The middle of bucket `i`'s value range.
    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < (1 << Self::SUB) {
            return i;
        }
        let top = (i >> Self::SUB) + u64::from(Self::SUB) - 1;
        let sub = i & ((1 << Self::SUB) - 1);
        let low = (1u64 << top) | (sub << (top - u64::from(Self::SUB)));
        low + (1u64 << (top - u64::from(Self::SUB))) / 2
    }

    fn add(&mut self, v: u64) {
        let b = Self::bucket(v);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.total += 1;
    }

    fn merge(&mut self, other: &LogHistogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i);
            }
        }
        Self::value(self.counts.len() - 1)
    }
}

/// One span as the graph sees it.
#[derive(Debug, Clone, Copy)]
struct GraphSpan {
    id: u64,
    /// 0 for a root span.
    parent: u64,
    /// Index into [`ServiceGraph::names`].
    service: u32,
    kind: u8,
    status: u8,
    start: u64,
    duration: i64,
}

/// Builds the service graph from the spans it is given, whole traces ([`TraceSink::offer`])
/// or row-group columns ([`ServiceGraph::add_block_rows`], [`ServiceGraph::add_head_rows`]),
/// then read [`services`](ServiceGraph::services) and [`edges`](ServiceGraph::edges).
///
/// Columns hold a trace's rows consecutively, but a trace can be split between the head, a
/// row group and blocks. A child whose parent is not in its piece, in a trace that may be
/// stored elsewhere too, is kept aside: [`pending_traces`](ServiceGraph::pending_traces)
/// lists those traces, and [`resolve`](ServiceGraph::resolve) counts the kept calls once the
/// whole trace is read. The spans themselves count where they are found.
#[derive(Debug)]
pub struct ServiceGraph {
    /// `None` for `{ }`: every trace counts and nothing is decoded beyond the service name.
    filter: Option<(Evaluator, Parts)>,
    prefilter: Prefilter,
    window: Option<(u64, u64)>,
    max_spans: u64,
    /// Spans of the offered traces, counted or not (the budget is spent on reading them).
    pub inspected_spans: u64,
    /// Traces (or pieces of split traces) read.
    pub inspected_traces: u64,
    /// Start of the oldest counted span: with a scan that stops early (newest first), the
    /// counts cover `[oldest_start, window end]`.
    pub oldest_start: Option<u64>,
    /// Calls whose parent span was kept aside and never found ([`ServiceGraph::give_up`]).
    pub unresolved_calls: u64,
    /// The budget ran out with spans left to read.
    truncated: bool,
    /// Service names, by index; `services[i]` holds the totals of `names[i]`.
    names: Vec<Arc<str>>,
    name_ids: HashMap<Arc<str>, u32>,
    services: Vec<ServiceStats>,
    edges: FastMap<(u32, u32), EdgeStats>,
    /// Resource header → service index, for offered rows.
    resource_names: HashMap<Bytes, u32>,
    /// Children kept aside until their trace is read whole, by trace ID.
    pending: HashMap<[u8; 16], Vec<GraphSpan>>,
    /// Scratch: one trace's spans, and their (span ID, position) sorted.
    run: Vec<GraphSpan>,
    by_id: Vec<(u64, u32)>,
    orphans: Vec<GraphSpan>,
}

impl ServiceGraph {
    /// A graph of the traces that match `query` (a spanset query; `{ }` for all), counting the
    /// spans that start inside `window` (inclusive Unix nanoseconds; `None` for all). The scan
    /// stops once about `max_spans` spans were read; [`complete`](ServiceGraph::complete) then
    /// says false.
    pub fn new(query: &Query, window: Option<(u64, u64)>, max_spans: u64) -> Result<ServiceGraph, EvalError> {
        let prefilter = Prefilter::new(query);
        let evaluator = Evaluator::new(query)?;
        if evaluator.is_metrics() {
            return Err(EvalError::MetricsQuery {
                query: query.to_string(),
            });
        }
        let filter = (!is_match_all(query)).then(|| (evaluator, Parts::of(query)));
        Ok(ServiceGraph::empty(filter, prefilter, window, max_spans))
    }

    fn empty(
        filter: Option<(Evaluator, Parts)>,
        prefilter: Prefilter,
        window: Option<(u64, u64)>,
        max_spans: u64,
    ) -> ServiceGraph {
        ServiceGraph {
            filter,
            prefilter,
            window,
            max_spans,
            inspected_spans: 0,
            inspected_traces: 0,
            oldest_start: None,
            unresolved_calls: 0,
            truncated: false,
            names: Vec::new(),
            name_ids: HashMap::new(),
            services: Vec::new(),
            edges: FastMap::with_hasher(FastBuild::default()),
            resource_names: HashMap::new(),
            pending: HashMap::new(),
            run: Vec::new(),
            by_id: Vec::new(),
            orphans: Vec::new(),
        }
    }

    /// An empty graph of the same query, window and budget, for a part of the spans (a row
    /// group, on a query worker); add it back with [`ServiceGraph::merge`].
    pub fn fork(&self) -> ServiceGraph {
        ServiceGraph::empty(self.filter.clone(), self.prefilter.clone(), self.window, self.max_spans)
    }

    /// Adds what a [`fork`](ServiceGraph::fork) counted: service totals, calls and their
    /// latency histograms add up, and the calls it kept aside wait here for their traces. The
    /// result is what counting the fork's spans here would have given.
    pub fn merge(&mut self, part: ServiceGraph) {
        let ids: Vec<u32> = part.names.iter().map(|n| self.name_id(n)).collect();
        for (i, st) in part.services.iter().enumerate() {
            let into = &mut self.services[ids[i] as usize];
            into.spans += st.spans;
            into.errors += st.errors;
            into.roots += st.roots;
        }
        for ((a, b), e) in part.edges {
            let into = self
                .edges
                .entry((ids[a as usize], ids[b as usize]))
                .or_insert_with(|| EdgeStats {
                    calls: 0,
                    errors: 0,
                    latency: LogHistogram::default(),
                });
            into.calls += e.calls;
            into.errors += e.errors;
            into.latency.merge(&e.latency);
        }
        for (trace, children) in part.pending {
            self.pending
                .entry(trace)
                .or_default()
                .extend(children.into_iter().map(|c| GraphSpan {
                    service: ids[c.service as usize],
                    ..c
                }));
        }
        self.inspected_spans += part.inspected_spans;
        self.inspected_traces += part.inspected_traces;
        self.unresolved_calls += part.unresolved_calls;
        self.truncated |= part.truncated;
        self.oldest_start = match (self.oldest_start, part.oldest_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// True when every trace counts (`{ }`): the graph can then be fed columns, without
    /// assembling traces.
    pub fn counts_every_trace(&self) -> bool {
        self.filter.is_none()
    }

    /// False when the span budget ran out before every trace of the window was read.
    pub fn complete(&self) -> bool {
        !self.truncated
    }

    /// True once the spans read reach the budget: a scan reads no more, and marks the graph
    /// truncated ([`ServiceGraph::mark_truncated`]) if anything was left.
    pub fn budget_spent(&self) -> bool {
        self.inspected_spans >= self.max_spans
    }

    /// Records that the scan stopped with spans of the window unread.
    pub fn mark_truncated(&mut self) {
        self.truncated = true;
    }

    /// Services by name.
    pub fn services(&self) -> Vec<(&str, &ServiceStats)> {
        let mut v: Vec<_> = self
            .services
            .iter()
            .enumerate()
            .filter(|(_, s)| s.spans > 0)
            .map(|(i, s)| (&*self.names[i], s))
            .collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// Edges `(caller, callee, stats)`, most calls first.
    pub fn edges(&self) -> Vec<(&str, &str, &EdgeStats)> {
        let mut v: Vec<_> = self
            .edges
            .iter()
            .map(|(&(a, b), e)| (&*self.names[a as usize], &*self.names[b as usize], e))
            .collect();
        v.sort_unstable_by(|x, y| y.2.calls.cmp(&x.2.calls).then(x.0.cmp(y.0)).then(x.1.cmp(y.1)));
        v
    }

    /// The index of a service name; the empty name is [`UNKNOWN_SERVICE`].
    fn name_id(&mut self, name: &str) -> u32 {
        let name = if name.is_empty() { UNKNOWN_SERVICE } else { name };
        if let Some(&i) = self.name_ids.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        let name: Arc<str> = name.into();
        self.names.push(name.clone());
        self.name_ids.insert(name, i);
        self.services.push(ServiceStats::default());
        i
    }

    fn resource_service(&mut self, resource: &Bytes) -> u32 {
        if let Some(&i) = self.resource_names.get(resource) {
            return i;
        }
        if self.resource_names.len() >= NAME_CACHE {
            self.resource_names.clear();
        }
        let i = self.name_id(service_name(resource).as_deref().unwrap_or_default());
        self.resource_names.insert(resource.clone(), i);
        i
    }

    fn in_window(&self, start: u64) -> bool {
        self.window.is_none_or(|(s, e)| start >= s && start <= e)
    }

    /// Counts the spans of one trace (or a piece of one) in `self.run`. A child whose parent
    /// is not in the piece makes no edge, unless `elsewhere()` says the trace may be stored
    /// elsewhere too: then it is kept for [`ServiceGraph::resolve`].
    fn count_run(&mut self, trace_id: &[u8; 16], elsewhere: impl FnOnce() -> bool) {
        let run = std::mem::take(&mut self.run);
        self.inspected_spans += run.len() as u64;
        self.inspected_traces += 1;
        self.by_id.clear();
        self.by_id.extend(run.iter().enumerate().map(|(i, s)| (s.id, i as u32)));
        // A trace's spans are few enough that a sorted index beats hashing.
        self.by_id.sort_unstable();
        self.orphans.clear();
        for s in &run {
            if !self.in_window(s.start) {
                continue;
            }
            self.oldest_start = Some(self.oldest_start.map_or(s.start, |o| o.min(s.start)));
            let error = s.status == STATUS_ERROR;
            let st = &mut self.services[s.service as usize];
            st.spans += 1;
            st.errors += u64::from(error);
            if s.parent == 0 {
                st.roots += 1;
                continue;
            }
            match self.by_id.binary_search_by_key(&s.parent, |&(id, _)| id) {
                Ok(at) => {
                    let p = run[self.by_id[at].1 as usize];
                    self.edge(&p, s);
                }
                Err(_) => self.orphans.push(*s),
            }
        }
        if !self.orphans.is_empty() && elsewhere() {
            self.pending
                .entry(*trace_id)
                .or_default()
                .extend_from_slice(&self.orphans);
        }
        self.run = run;
        self.run.clear();
    }

    /// Counts the call from `parent` to `child` when their services differ.
    fn edge(&mut self, parent: &GraphSpan, child: &GraphSpan) {
        if parent.service == child.service {
            return;
        }
        let caller_failed = matches!(parent.kind, KIND_CLIENT | KIND_PRODUCER) && parent.status == STATUS_ERROR;
        let e = self
            .edges
            .entry((parent.service, child.service))
            .or_insert_with(|| EdgeStats {
                calls: 0,
                errors: 0,
                latency: LogHistogram::default(),
            });
        e.calls += 1;
        e.errors += u64::from(child.status == STATUS_ERROR || caller_failed);
        e.latency.add(child.duration.max(0) as u64);
    }

    /// Counts a row group's columns, trace by trace. `elsewhere(trace_id, at_edge)` says
    /// whether the trace may also be stored outside this row group; `at_edge` is true when
    /// its rows touch the row group's first or last row (a trace the writer split between
    /// row groups). It is asked only for traces with a child whose parent is not in them.
    pub fn add_block_rows(&mut self, c: &GraphColumns, mut elsewhere: impl FnMut(&[u8; 16], bool) -> bool) {
        let n = c.span_id.len();
        // this row group's service dictionary → service index
        let services: Vec<u32> = c
            .service
            .values
            .iter()
            .map(|v| self.name_id(&String::from_utf8_lossy(v)))
            .collect();
        let small = |v: i32| v.clamp(0, 255) as u8;
        let mut from = 0;
        while from < n {
            let trace = c.trace.ids[from];
            let mut to = from + 1;
            while to < n && c.trace.ids[to] == trace {
                to += 1;
            }
            self.run.extend((from..to).map(|i| GraphSpan {
                id: c.span_id[i],
                parent: c.parent[i],
                service: services[c.service.ids[i] as usize],
                kind: small(c.kind[i]),
                status: small(c.status[i]),
                start: c.start[i] as u64,
                duration: c.duration[i],
            }));
            let id: [u8; 16] = c.trace.values[trace as usize][..].try_into().unwrap_or([0; 16]);
            let at_edge = from == 0 || to == n;
            self.count_run(&id, || elsewhere(&id, at_edge));
            from = to;
        }
    }

    /// Counts head rows in `order` (`SpanColumns::sorted_order`: by trace, without client
    /// retries). `elsewhere(trace_id)` says whether the trace may also be stored outside these
    /// columns; it is asked only for traces with a child whose parent is not in them.
    pub fn add_head_rows(&mut self, cols: &SpanColumns, order: &[u32], mut elsewhere: impl FnMut(&[u8; 16]) -> bool) {
        // string id of a service name → service index
        let mut services: FastMap<u32, u32> = FastMap::with_hasher(FastBuild::default());
        let mut from = 0;
        while from < order.len() {
            let trace = cols.trace_id[order[from] as usize];
            let mut to = from + 1;
            while to < order.len() && cols.trace_id[order[to] as usize] == trace {
                to += 1;
            }
            for &r in &order[from..to] {
                let r = r as usize;
                let sid = cols.service_of.get(&cols.resource[r]).copied();
                let service = match sid {
                    Some(sid) => match services.get(&sid) {
                        Some(&i) => i,
                        None => {
                            let i = self.name_id(&String::from_utf8_lossy(cols.strings.get(sid)));
                            services.insert(sid, i);
                            i
                        }
                    },
                    None => self.name_id(""),
                };
                self.run.push(GraphSpan {
                    id: u64::from_be_bytes(cols.span_id[r]),
                    parent: u64::from_be_bytes(cols.parent_span_id[r]),
                    service,
                    kind: cols.kind[r],
                    status: cols.status_code[r],
                    start: cols.start[r],
                    duration: cols.duration[r],
                });
            }
            self.count_run(&trace, || elsewhere(&trace));
            from = to;
        }
    }

    /// Traces with calls kept aside until the trace is read whole.
    pub fn pending_traces(&self) -> Vec<[u8; 16]> {
        let mut v: Vec<_> = self.pending.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Counts the calls kept aside for `trace_id`, finding their parents among `rows` (the
    /// whole trace).
    pub fn resolve(&mut self, trace_id: &[u8; 16], rows: &[SpanRow]) {
        let Some(children) = self.pending.remove(trace_id) else {
            return;
        };
        let mut parents: HashMap<u64, usize> = HashMap::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            parents.insert(u64::from_be_bytes(r.span_id), i);
        }
        for child in children {
            let Some(&p) = parents.get(&child.parent) else {
                continue; // the parent was never stored
            };
            let r = &rows[p];
            let parent = GraphSpan {
                id: child.parent,
                parent: 0,
                service: self.resource_service(&r.resource),
                kind: r.kind,
                status: r.status_code,
                start: r.start_unix_nano,
                duration: r.duration_nano,
            };
            self.edge(&parent, &child);
        }
    }

    /// What this graph counted, for another process to add with
    /// [`ServiceGraph::merge_state`] (a part of a service graph split over queriers).
    pub fn into_state(self) -> GraphState {
        GraphState {
            names: self.names.iter().map(|n| n.to_string()).collect(),
            services: self.services.iter().map(|s| [s.spans, s.errors, s.roots]).collect(),
            edges: self
                .edges
                .into_iter()
                .map(|((a, b), e)| GraphEdge {
                    caller: a,
                    callee: b,
                    calls: e.calls,
                    errors: e.errors,
                    latency: e.latency.counts,
                })
                .collect(),
            pending: self
                .pending
                .into_iter()
                .map(|(trace, calls)| PendingCalls {
                    trace_id: hex::encode(trace),
                    calls: calls
                        .iter()
                        .map(|c| PendingCall {
                            span_id: format!("{:016x}", c.id),
                            parent_span_id: format!("{:016x}", c.parent),
                            service: c.service,
                            kind: c.kind,
                            status: c.status,
                            start: c.start,
                            duration: c.duration,
                        })
                        .collect(),
                })
                .collect(),
            inspected_spans: self.inspected_spans,
            inspected_traces: self.inspected_traces,
            oldest_start: self.oldest_start,
            unresolved_calls: self.unresolved_calls,
            truncated: self.truncated,
        }
    }

    /// Adds what another graph of the same query counted ([`ServiceGraph::into_state`]), as
    /// [`ServiceGraph::merge`] adds a fork. Fails, adding nothing, on a state that refers to a
    /// service it does not name or holds an invalid ID.
    pub fn merge_state(&mut self, s: GraphState) -> Result<(), String> {
        let n = s.names.len();
        if s.services.len() != n {
            return Err(format!("{} services for {n} names", s.services.len()));
        }
        // Counts from another process: bounded, so adding them up cannot overflow.
        let counts = s.services.iter().flatten().copied().chain(
            s.edges
                .iter()
                .flat_map(|e| [e.calls, e.errors].into_iter().chain(e.latency.iter().copied())),
        );
        let totals = [s.inspected_spans, s.inspected_traces, s.unresolved_calls];
        if counts.chain(totals).any(|c| c > MAX_STATE_COUNT) {
            return Err(format!("a count over {MAX_STATE_COUNT}"));
        }
        if let Some(e) = s.edges.iter().find(|e| e.latency.len() > LogHistogram::BUCKETS) {
            return Err(format!(
                "{} latency buckets (at most {})",
                e.latency.len(),
                LogHistogram::BUCKETS
            ));
        }
        let known = |i: u32, what: &str| {
            if (i as usize) < n {
                Ok(i)
            } else {
                Err(format!("{what} refers to service {i} of {n}"))
            }
        };
        let span_id = |h: &str| u64::from_str_radix(h, 16).map_err(|_| format!("invalid span ID {h:?}"));
        let mut part = self.fork();
        let ids: Vec<u32> = s.names.iter().map(|name| part.name_id(name)).collect();
        for (i, [spans, errors, roots]) in s.services.into_iter().enumerate() {
            let into = &mut part.services[ids[i] as usize];
            into.spans += spans;
            into.errors += errors;
            into.roots += roots;
        }
        for e in s.edges {
            let key = (
                ids[known(e.caller, "an edge")? as usize],
                ids[known(e.callee, "an edge")? as usize],
            );
            let latency = LogHistogram {
                total: e.latency.iter().sum(),
                counts: e.latency,
            };
            let into = part.edges.entry(key).or_insert_with(|| EdgeStats {
                calls: 0,
                errors: 0,
                latency: LogHistogram::default(),
            });
            into.calls += e.calls;
            into.errors += e.errors;
            into.latency.merge(&latency);
        }
        for p in s.pending {
            let mut trace = [0u8; 16];
            hex::decode_to_slice(&p.trace_id, &mut trace).map_err(|_| format!("invalid trace ID {:?}", p.trace_id))?;
            let kept = part.pending.entry(trace).or_default();
            for c in p.calls {
                kept.push(GraphSpan {
                    id: span_id(&c.span_id)?,
                    parent: span_id(&c.parent_span_id)?,
                    service: ids[known(c.service, "a pending call")? as usize],
                    kind: c.kind,
                    status: c.status,
                    start: c.start,
                    duration: c.duration,
                });
            }
        }
        part.inspected_spans = s.inspected_spans;
        part.inspected_traces = s.inspected_traces;
        part.oldest_start = s.oldest_start;
        part.unresolved_calls = s.unresolved_calls;
        part.truncated = s.truncated;
        self.merge(part);
        Ok(())
    }

    /// Drops the calls still kept aside, counting them in
    /// [`unresolved_calls`](ServiceGraph::unresolved_calls).
    pub fn give_up(&mut self) {
        self.unresolved_calls += self.pending.drain().map(|(_, v)| v.len() as u64).sum::<u64>();
    }
}

/// The largest count a [`GraphState`] may hold (2^48): far above any real graph, and low
/// enough that adding the states of many processes cannot overflow.
const MAX_STATE_COUNT: u64 = 1 << 48;

/// What a [`ServiceGraph`] counted, as another process adds it (`spec/jobs.md`: the
/// service-graph job's reply). Services are referred to by their position in `names`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphState {
    pub names: Vec<String>,
    /// `[spans, errors, roots]` of each name.
    pub services: Vec<[u64; 3]>,
    pub edges: Vec<GraphEdge>,
    /// Calls whose parent is in another piece of their trace, by trace.
    pub pending: Vec<PendingCalls>,
    pub inspected_spans: u64,
    pub inspected_traces: u64,
    pub oldest_start: Option<u64>,
    pub unresolved_calls: u64,
    pub truncated: bool,
}

/// Calls from one service to another in a [`GraphState`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphEdge {
    pub caller: u32,
    pub callee: u32,
    pub calls: u64,
    pub errors: u64,
    /// Callee durations: counts of the log buckets (8 per power of two of nanoseconds).
    pub latency: Vec<u64>,
}

/// The calls of one trace (ID in hex) kept aside until the trace is read whole.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingCalls {
    pub trace_id: String,
    pub calls: Vec<PendingCall>,
}

/// A child span whose parent is stored elsewhere (span IDs in hex).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingCall {
    pub span_id: String,
    pub parent_span_id: String,
    pub service: u32,
    pub kind: u8,
    pub status: u8,
    pub start: u64,
    pub duration: i64,
}

/// True for a query that matches every trace with a span: `{ }` or `{ true }`.
pub(crate) fn is_match_all(query: &Query) -> bool {
    let printed = query.to_string();
    printed == "{ }" || printed == "{ true }"
}

impl TraceSink for ServiceGraph {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn done(&self) -> bool {
        self.truncated
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        if rows.is_empty() {
            return;
        }
        if self.budget_spent() {
            // a trace past the budget: more was left to read, and the scan stops
            self.truncated = true;
            return;
        }
        if let Some((evaluator, parts)) = &self.filter {
            let trace = to_trace_parts(rows, *parts);
            if !matches!(evaluator.eval(&trace), Ok(sets) if sets.iter().any(|s| !s.spans.is_empty())) {
                self.inspected_spans += rows.len() as u64;
                self.inspected_traces += 1;
                return;
            }
        }
        let mut run = std::mem::take(&mut self.run);
        for r in rows {
            run.push(GraphSpan {
                id: u64::from_be_bytes(r.span_id),
                parent: u64::from_be_bytes(r.parent_span_id),
                service: self.resource_service(&r.resource),
                kind: r.kind,
                status: r.status_code,
                start: r.start_unix_nano,
                duration: r.duration_nano,
            });
        }
        self.run = run;
        // An offered trace is whole: a missing parent was never stored.
        self.count_run(&rows[0].trace_id, || false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(service: Option<&str>) -> Bytes {
        use prost::Message;
        use weft_otlp::pb::common::{AnyValue, KeyValue, any_value};
        use weft_otlp::pb::resource::Resource;
        let attributes = service
            .map(|s| KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(s.into())),
                }),
            })
            .into_iter()
            .collect();
        let res = Resource {
            attributes,
            ..Default::default()
        };
        // ResourceSpans field 1 (resource), length-delimited
        let body = res.encode_to_vec();
        let mut out = vec![0x0a];
        prost::encoding::encode_varint(body.len() as u64, &mut out);
        out.extend(body);
        Bytes::from(out)
    }

    struct S {
        id: u8,
        parent: u8,
        service: Option<&'static str>,
        kind: u8,
        error: bool,
        start: u64,
        dur: i64,
    }

    fn rows(trace: u8, spans: &[S]) -> Vec<SpanRow> {
        spans
            .iter()
            .map(|s| SpanRow {
                trace_id: [trace; 16],
                span_id: [0, 0, 0, 0, 0, 0, 1, s.id],
                parent_span_id: if s.parent == 0 {
                    [0; 8]
                } else {
                    [0, 0, 0, 0, 0, 0, 1, s.parent]
                },
                name: format!("op{}", s.id),
                kind: s.kind,
                start_unix_nano: s.start,
                duration_nano: s.dur,
                status_code: if s.error { STATUS_ERROR } else { 0 },
                status_message: String::new(),
                resource: resource(s.service),
                scope: Bytes::new(),
                attributes: Bytes::new(),
                events: Bytes::new(),
                links: Bytes::new(),
                extra: Bytes::new(),
            })
            .collect()
    }

    fn sp(id: u8, parent: u8, service: &'static str, kind: u8, error: bool) -> S {
        S {
            id,
            parent,
            service: Some(service),
            kind,
            error,
            start: 1000 + u64::from(id),
            dur: 100 * i64::from(id),
        }
    }

    fn graph(q: &str, window: Option<(u64, u64)>) -> ServiceGraph {
        ServiceGraph::new(&weft_traceql::parse(q).unwrap(), window, u64::MAX).unwrap()
    }

    fn edge<'a>(g: &'a ServiceGraph, a: &str, b: &str) -> Option<&'a EdgeStats> {
        g.edges().into_iter().find(|e| e.0 == a && e.1 == b).map(|e| e.2)
    }

    /// frontend(server) → frontend(client) → checkout(server) → checkout(client, error) →
    /// payments(server, error), and a same-service child that makes no edge.
    fn checkout_trace(trace: u8) -> Vec<SpanRow> {
        rows(
            trace,
            &[
                sp(1, 0, "frontend", 2, false),
                sp(2, 1, "frontend", KIND_CLIENT, false),
                sp(3, 2, "checkout", 2, false),
                sp(4, 3, "checkout", KIND_CLIENT, true),
                sp(5, 4, "payments", 2, true),
                sp(6, 3, "checkout", 1, false),
            ],
        )
    }

    #[test]
    fn edges_join_parent_and_child_services() {
        let mut g = graph("{ }", None);
        g.offer(&checkout_trace(1));
        g.offer(&checkout_trace(2));
        let fc = edge(&g, "frontend", "checkout").expect("frontend calls checkout");
        assert_eq!((fc.calls, fc.errors), (2, 0));
        let cp = edge(&g, "checkout", "payments").expect("checkout calls payments");
        assert_eq!((cp.calls, cp.errors), (2, 2));
        assert_eq!(g.edges().len(), 2, "same-service parents make no edge: {:?}", g.edges());
        let svc: HashMap<_, _> = g
            .services()
            .into_iter()
            .map(|(n, s)| (n.to_owned(), s.clone()))
            .collect();
        assert_eq!(
            svc["frontend"],
            ServiceStats {
                spans: 4,
                errors: 0,
                roots: 2
            }
        );
        assert_eq!(
            svc["checkout"],
            ServiceStats {
                spans: 6,
                errors: 2,
                roots: 0
            }
        );
        assert_eq!(
            svc["payments"],
            ServiceStats {
                spans: 2,
                errors: 2,
                roots: 0
            }
        );
        assert!(g.complete());
        assert_eq!(g.inspected_spans, 12);
    }

    #[test]
    fn a_failed_client_call_is_an_error_even_when_the_callee_says_ok() {
        let mut g = graph("{ }", None);
        g.offer(&rows(1, &[sp(1, 0, "a", KIND_CLIENT, true), sp(2, 1, "b", 2, false)]));
        // an internal parent's error is its own, not the call's
        g.offer(&rows(2, &[sp(1, 0, "a", 1, true), sp(2, 1, "b", 2, false)]));
        let e = edge(&g, "a", "b").unwrap();
        assert_eq!((e.calls, e.errors), (2, 1));
    }

    #[test]
    fn missing_parents_and_service_names() {
        let mut g = graph("{ }", None);
        let mut r = rows(1, &[sp(2, 9, "orphan", 2, false)]);
        r.extend(rows(
            1,
            &[S {
                service: None,
                ..sp(3, 2, "x", 2, false)
            }],
        ));
        g.offer(&r);
        let e = edge(&g, "orphan", UNKNOWN_SERVICE).expect("a span without service.name is unknown_service");
        assert_eq!(e.calls, 1);
        assert_eq!(g.services().len(), 2);
        assert_eq!(g.services().iter().map(|s| s.1.roots).sum::<u64>(), 0);
    }

    #[test]
    fn only_spans_starting_in_the_window_count_but_parents_may_be_outside() {
        // spans start at 1000 + id; the window holds spans 4..=5
        let mut g = graph("{ }", Some((1004, 1005)));
        g.offer(&checkout_trace(1));
        assert!(
            edge(&g, "frontend", "checkout").is_none(),
            "span 3 starts before the window"
        );
        assert_eq!(
            edge(&g, "checkout", "payments").unwrap().calls,
            1,
            "parent 4 is in, child 5 is in"
        );
        let total: u64 = g.services().iter().map(|s| s.1.spans).sum();
        assert_eq!(total, 2);
        assert_eq!(g.oldest_start, Some(1004));
    }

    #[test]
    fn a_query_keeps_only_matching_traces() {
        let mut g = graph("{ resource.service.name = \"payments\" }", None);
        assert!(g.filter.is_some());
        g.offer(&checkout_trace(1));
        g.offer(&rows(2, &[sp(1, 0, "a", 2, false), sp(2, 1, "b", 2, false)]));
        assert!(edge(&g, "a", "b").is_none(), "trace 2 has no payments span");
        assert_eq!(
            edge(&g, "frontend", "checkout").unwrap().calls,
            1,
            "the whole matching trace counts"
        );
        assert!(graph("{ }", None).filter.is_none());
        assert!(graph("{ true }", None).filter.is_none());
        let metrics = ServiceGraph::new(&weft_traceql::parse("{ } | rate()").unwrap(), None, 1);
        assert!(metrics.is_err());
    }

    #[test]
    fn the_span_budget_stops_the_scan() {
        let mut g = ServiceGraph::new(&weft_traceql::parse("{ }").unwrap(), None, 10).unwrap();
        g.offer(&checkout_trace(1));
        assert!(!g.done());
        g.offer(&checkout_trace(2));
        assert!(
            g.budget_spent() && g.complete() && !g.done(),
            "nothing was left unread yet"
        );
        g.offer(&checkout_trace(3));
        assert!(g.done() && !g.complete());
        assert_eq!(g.inspected_spans, 12, "the trace past the budget is not counted");
    }

    /// The graph columns of `rows` (one row group, in order).
    fn columns(rows: &[SpanRow]) -> GraphColumns {
        let mut c = GraphColumns::default();
        let dict = |d: &mut weft_block::DictColumn, v: Bytes| {
            let id = d.values.iter().position(|x| *x == v).unwrap_or_else(|| {
                d.values.push(v);
                d.values.len() - 1
            });
            d.ids.push(id as u32);
        };
        for r in rows {
            dict(&mut c.trace, Bytes::copy_from_slice(&r.trace_id));
            dict(
                &mut c.service,
                Bytes::from(service_name(&r.resource).unwrap_or_default()),
            );
            c.span_id.push(u64::from_be_bytes(r.span_id));
            c.parent.push(u64::from_be_bytes(r.parent_span_id));
            c.kind.push(i32::from(r.kind));
            c.status.push(i32::from(r.status_code));
            c.start.push(r.start_unix_nano as i64);
            c.duration.push(r.duration_nano);
        }
        c
    }

    /// (caller, callee, calls, errors, p50) per edge.
    type EdgeSummary = (String, String, u64, u64, u64);

    fn summary(g: &ServiceGraph) -> (Vec<EdgeSummary>, Vec<(String, ServiceStats)>) {
        (
            g.edges()
                .into_iter()
                .map(|(a, b, e)| (a.to_owned(), b.to_owned(), e.calls, e.errors, e.latency_quantile(0.5)))
                .collect(),
            g.services()
                .into_iter()
                .map(|(n, s)| (n.to_owned(), s.clone()))
                .collect(),
        )
    }

    #[test]
    fn search_results_count_spans_and_errors_per_service() {
        let mut trace = checkout_trace(1);
        trace.extend(rows(
            1,
            &[S {
                service: None,
                ..sp(7, 1, "x", 1, true)
            }],
        ));
        let got: Vec<(String, u32, u32)> = crate::search::service_stats(&trace)
            .into_iter()
            .map(|c| (c.service, c.spans, c.errors))
            .collect();
        assert_eq!(
            got,
            vec![
                ("checkout".to_owned(), 3, 1),
                ("frontend".to_owned(), 2, 0),
                ("payments".to_owned(), 1, 1),
                (UNKNOWN_SERVICE.to_owned(), 1, 1),
            ]
        );
    }

    #[test]
    fn columns_count_what_whole_traces_count() {
        let traces: Vec<Vec<SpanRow>> = (1..=5).map(checkout_trace).collect();
        let mut whole = graph("{ }", None);
        for t in &traces {
            whole.offer(t);
        }
        let all: Vec<SpanRow> = traces.concat();
        let mut cols = graph("{ }", None);
        assert!(cols.counts_every_trace());
        cols.add_block_rows(&columns(&all), |_, _| panic!("no trace has a missing parent"));
        assert_eq!(summary(&cols), summary(&whole));
        assert_eq!(cols.inspected_spans, whole.inspected_spans);
    }

    #[test]
    fn a_trace_split_between_row_groups_counts_its_calls_once_read_whole() {
        let trace = checkout_trace(7);
        // Spans 1-3 end one row group; 4-6 start the next, where 4's parent (3) is missing.
        let (a, b) = trace.split_at(3);
        let mut g = graph("{ }", None);
        let mut asked = Vec::new();
        g.add_block_rows(&columns(&[checkout_trace(1), a.to_vec()].concat()), |id, edge| {
            asked.push((id[0], edge));
            true
        });
        assert!(asked.is_empty(), "the first piece has every parent it needs");
        g.add_block_rows(&columns(&[b.to_vec(), checkout_trace(2)].concat()), |id, edge| {
            asked.push((id[0], edge));
            edge
        });
        assert_eq!(
            asked,
            vec![(7, true)],
            "asked only about the piece with a missing parent"
        );
        assert_eq!(g.pending_traces(), vec![[7; 16]]);
        // checkout → payments of trace 7 is inside the second piece; spans 4 and 6 wait
        assert_eq!(edge(&g, "checkout", "payments").unwrap().calls, 3);
        assert_eq!(edge(&g, "frontend", "checkout").unwrap().calls, 3);
        g.resolve(&[7; 16], &trace);
        assert!(g.pending_traces().is_empty());
        let mut whole = graph("{ }", None);
        for t in [1, 7, 2] {
            whole.offer(&checkout_trace(t));
        }
        assert_eq!(summary(&g), summary(&whole));

        // An orphan whose trace is stored nowhere else makes no edge and is not kept.
        let mut g = graph("{ }", None);
        let orphan = rows(
            9,
            &[
                sp(1, 0, "a", 2, false),
                sp(2, 1, "b", 2, false),
                sp(3, 8, "c", 2, false),
            ],
        );
        g.add_block_rows(
            &columns(&[checkout_trace(1), orphan, checkout_trace(2)].concat()),
            |_, edge| edge,
        );
        assert!(g.pending_traces().is_empty());
        assert_eq!(edge(&g, "a", "b").unwrap().calls, 1);
        assert_eq!(g.services().iter().find(|s| s.0 == "c").unwrap().1.spans, 1);
        // Kept calls whose trace is never read are reported, not counted.
        let mut g = graph("{ }", None);
        g.add_block_rows(&columns(b), |_, _| true);
        g.give_up();
        assert_eq!(g.unresolved_calls, 2, "spans 4 and 6");
    }

    #[test]
    fn parts_counted_elsewhere_add_up_to_the_whole_graph() {
        let trace = checkout_trace(7);
        let (a, b) = trace.split_at(3);
        // One process counts the first piece, another the second (whose span 4 waits for its
        // parent); the frontend adds both states, then reads trace 7 whole.
        let mut first = graph("{ }", None);
        first.add_block_rows(&columns(&[checkout_trace(1), a.to_vec()].concat()), |_, _| true);
        let mut second = graph("{ }", None);
        second.add_block_rows(&columns(&[b.to_vec(), checkout_trace(2)].concat()), |_, edge| edge);
        let mut merged = graph("{ }", None);
        let state = first.into_state();
        let wire = serde_json::to_string(&second.into_state()).unwrap();
        merged.merge_state(state).unwrap();
        merged.merge_state(serde_json::from_str(&wire).unwrap()).unwrap();
        assert_eq!(merged.pending_traces(), vec![[7; 16]]);
        merged.resolve(&[7; 16], &trace);
        let mut whole = graph("{ }", None);
        for t in [1, 7, 2] {
            whole.offer(&checkout_trace(t));
        }
        assert_eq!(summary(&merged), summary(&whole));
        assert_eq!(merged.inspected_spans, whole.inspected_spans);
        let p99 = |g: &ServiceGraph| edge(g, "checkout", "payments").unwrap().latency_quantile(0.99);
        assert_eq!(p99(&merged), p99(&whole));

        // A state naming a service it does not have is refused, and adds nothing.
        let mut bad = graph("{ }", None).into_state();
        bad.names.push("a".into());
        bad.services.push([1, 0, 0]);
        bad.edges.push(GraphEdge {
            caller: 0,
            callee: 5,
            calls: 1,
            errors: 0,
            latency: vec![1],
        });
        let mut g = graph("{ }", None);
        assert!(g.merge_state(bad).unwrap_err().contains("service 5"));
        assert!(g.services().is_empty());
    }

    #[test]
    fn the_bucket_count_covers_every_value() {
        assert_eq!(LogHistogram::bucket(u64::MAX) + 1, LogHistogram::BUCKETS);
        let _ = LogHistogram::value(LogHistogram::BUCKETS - 1);
    }

    proptest::proptest! {
        /// Any state a peer sends is merged or refused, never a panic (with the quantiles
        /// and pending calls read out after).
        #[test]
        fn any_graph_state_merges_or_is_refused(
            names in proptest::collection::vec("[a-c]{0,2}", 0..4),
            services in proptest::collection::vec(proptest::array::uniform3(proptest::prelude::any::<u64>()), 0..4),
            edges in proptest::collection::vec(
                (0u32..6, 0u32..6, proptest::prelude::any::<u64>(), 0u64..10,
                 proptest::collection::vec(proptest::prelude::any::<u64>(), 0..600)), 0..4),
            pending in proptest::collection::vec(("[0-9a-f]{0,33}", "[0-9a-g]{0,17}", 0u32..6), 0..4),
            totals in proptest::array::uniform3(proptest::prelude::any::<u64>()),
        ) {
            let state = GraphState {
                names,
                services,
                edges: edges
                    .into_iter()
                    .map(|(caller, callee, calls, errors, latency)| GraphEdge { caller, callee, calls, errors, latency })
                    .collect(),
                pending: pending
                    .into_iter()
                    .map(|(trace_id, span_id, service)| PendingCalls {
                        trace_id,
                        calls: vec![PendingCall {
                            span_id: span_id.clone(),
                            parent_span_id: span_id,
                            service,
                            kind: 2,
                            status: 0,
                            start: 1,
                            duration: -1,
                        }],
                    })
                    .collect(),
                inspected_spans: totals[0],
                inspected_traces: totals[1],
                oldest_start: Some(totals[2]),
                unresolved_calls: totals[2],
                truncated: false,
            };
            let mut g = graph("{ }", None);
            for _ in 0..2 {
                if g.merge_state(state.clone()).is_ok() {
                    for e in g.edges() {
                        let _ = e.2.latency_quantile(0.5);
                    }
                    let _ = g.services();
                }
            }
            for id in g.pending_traces() {
                g.resolve(&id, &[]);
            }
            g.give_up();
        }
    }

    #[test]
    fn latency_quantiles_are_within_nine_percent() {
        let mut h = LogHistogram::default();
        for v in 1..=100_000u64 {
            h.add(v * 1000);
        }
        for (q, want) in [(0.5, 50_000_000.0), (0.9, 90_000_000.0), (0.99, 99_000_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.09, "q{q}: {got} vs {want}");
        }
        for v in [0u64, 1, 7, 8, 9, 15, 16, 1 << 40, u64::MAX] {
            let b = LogHistogram::bucket(v);
            let mid = LogHistogram::value(b);
            assert_eq!(
                LogHistogram::bucket(mid),
                b,
                "the middle of bucket {b} (for {v}) is in it"
            );
        }
        assert_eq!(LogHistogram::default().quantile(0.5), 0);
    }
}
