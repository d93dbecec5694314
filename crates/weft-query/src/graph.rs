//! The service graph: calls between services, aggregated from the parent/child spans of whole
//! traces.
//!
//! An *edge* `A → B` is a span of service `B` whose parent span belongs to service `A ≠ B` (a
//! client span and the server span it caused, or a producer and its consumer). Counting from
//! whole traces means a call is found wherever its two spans are stored, unlike a streaming
//! processor that pairs spans within a wait window. It is counted once per child span:
//!
//! - it is an **error** when the child span's status is error, or the parent is a client or
//!   producer span whose status is error (the call failed as seen by the caller);
//! - its **latency** is the child span's duration (the callee's view, which every instrumented
//!   service reports), kept in a log-bucketed histogram with 8 buckets per power of two
//!   (quantiles within 9%).
//!
//! Only spans that start inside the window are counted; the rest of a trace still supplies
//! parents. A span whose parent is not in the trace counts for its service but makes no edge.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use weft_block::columns::service_name;
use weft_block::row::SpanRow;
use weft_traceql::{EvalError, Evaluator, Query};

use crate::decode::Parts;
use crate::prefilter::Prefilter;
use crate::search::{TraceSink, to_trace_parts};

/// OTLP `Span.SpanKind` values.
const KIND_CLIENT: u8 = 3;
const KIND_PRODUCER: u8 = 4;
/// OTLP `Status.StatusCode.STATUS_CODE_ERROR`.
const STATUS_ERROR: u8 = 2;
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

/// Builds the service graph from the traces a scan offers. Feed it traces, then read
/// [`services`](ServiceGraph::services) and [`edges`](ServiceGraph::edges).
#[derive(Debug)]
pub struct ServiceGraph {
    /// `None` for `{ }`: every trace counts and nothing is decoded beyond the service name.
    filter: Option<(Evaluator, Parts)>,
    prefilter: Prefilter,
    window: Option<(u64, u64)>,
    max_spans: u64,
    /// Spans of the offered traces, counted or not (the budget is spent on reading them).
    pub inspected_spans: u64,
    /// Start of the oldest counted span: with a scan that stops early (newest first), the
    /// counts cover `[oldest_start, window end]`.
    pub oldest_start: Option<u64>,
    services: HashMap<Arc<str>, ServiceStats>,
    edges: HashMap<(Arc<str>, Arc<str>), EdgeStats>,
    names: HashMap<Bytes, Arc<str>>,
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
        Ok(ServiceGraph {
            filter,
            prefilter,
            window,
            max_spans,
            inspected_spans: 0,
            oldest_start: None,
            services: HashMap::new(),
            edges: HashMap::new(),
            names: HashMap::new(),
        })
    }

    /// False when the span budget ran out before every trace of the window was read.
    pub fn complete(&self) -> bool {
        self.inspected_spans < self.max_spans
    }

    /// Services by name.
    pub fn services(&self) -> Vec<(&str, &ServiceStats)> {
        let mut v: Vec<_> = self.services.iter().map(|(k, s)| (&**k, s)).collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// Edges `(caller, callee, stats)`, most calls first.
    pub fn edges(&self) -> Vec<(&str, &str, &EdgeStats)> {
        let mut v: Vec<_> = self.edges.iter().map(|((a, b), e)| (&**a, &**b, e)).collect();
        v.sort_unstable_by(|x, y| y.2.calls.cmp(&x.2.calls).then(x.0.cmp(y.0)).then(x.1.cmp(y.1)));
        v
    }

    fn service(&mut self, resource: &Bytes) -> Arc<str> {
        if let Some(n) = self.names.get(resource) {
            return n.clone();
        }
        if self.names.len() >= NAME_CACHE {
            self.names.clear();
        }
        let name: Arc<str> = service_name(resource)
            .filter(|s| !s.is_empty())
            .as_deref()
            .unwrap_or(UNKNOWN_SERVICE)
            .into();
        // one Arc per distinct name, so map keys share it
        let name = self
            .services
            .get_key_value(&name)
            .map(|(k, _)| k.clone())
            .unwrap_or(name);
        self.names.insert(resource.clone(), name.clone());
        name
    }

    fn in_window(&self, start: u64) -> bool {
        self.window.is_none_or(|(s, e)| start >= s && start <= e)
    }
}

/// True for a query that matches every trace with a span: `{ }` or `{ true }`.
fn is_match_all(query: &Query) -> bool {
    let printed = query.to_string();
    printed == "{ }" || printed == "{ true }"
}

impl TraceSink for ServiceGraph {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn done(&self) -> bool {
        !self.complete()
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        self.inspected_spans += rows.len() as u64;
        if let Some((evaluator, parts)) = &self.filter {
            let trace = to_trace_parts(rows, *parts);
            if !matches!(evaluator.eval(&trace), Ok(sets) if sets.iter().any(|s| !s.spans.is_empty())) {
                return;
            }
        }
        let services: Vec<Arc<str>> = rows.iter().map(|r| self.service(&r.resource)).collect();
        // span ID → row; a trace's rows are few enough that a sorted index beats hashing
        let mut by_id: Vec<(u64, u32)> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (u64::from_be_bytes(r.span_id), i as u32))
            .collect();
        by_id.sort_unstable();
        for (i, r) in rows.iter().enumerate() {
            if !self.in_window(r.start_unix_nano) {
                continue;
            }
            self.oldest_start = Some(
                self.oldest_start
                    .map_or(r.start_unix_nano, |o| o.min(r.start_unix_nano)),
            );
            let svc = &services[i];
            let error = r.status_code == STATUS_ERROR;
            let root = r.parent_span_id == [0; 8];
            let st = self.services.entry(svc.clone()).or_default();
            st.spans += 1;
            st.errors += u64::from(error);
            st.roots += u64::from(root);
            if root {
                continue;
            }
            let pid = u64::from_be_bytes(r.parent_span_id);
            let Ok(at) = by_id.binary_search_by_key(&pid, |&(id, _)| id) else {
                continue;
            };
            let p = by_id[at].1 as usize;
            let psvc = &services[p];
            if psvc == svc {
                continue;
            }
            let parent = &rows[p];
            let caller_failed =
                matches!(parent.kind, KIND_CLIENT | KIND_PRODUCER) && parent.status_code == STATUS_ERROR;
            let e = self
                .edges
                .entry((psvc.clone(), svc.clone()))
                .or_insert_with(|| EdgeStats {
                    calls: 0,
                    errors: 0,
                    latency: LogHistogram::default(),
                });
            e.calls += 1;
            e.errors += u64::from(error || caller_failed);
            e.latency.add(r.duration_nano.max(0) as u64);
        }
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
        assert!(g.done() && !g.complete());
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
