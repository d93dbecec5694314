//! Search against a model: random traces and random TraceQL queries from the supported grammar.
//!
//! The spans are pushed through the real write path in several batches (so traces are split
//! over the head and several blocks, with small row groups so traces also cross row groups, and
//! some spans are sent twice like client retries). The engine's answer — `Querier::scan` with
//! the prefilter feeding the search and metrics sinks — must equal the exact evaluator run on
//! the model: the same spans built directly as `weft_traceql::Span`s, never stored or decoded.
//!
//! States checked: head only; head and blocks mixed; blocks only; after compaction into one
//! block (which must also drop the retried duplicates).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use common::Node;
use proptest::prelude::*;
use prost::Message;
use weft_db::compact::CompactionConfig;
use weft_engine::search::{Metrics, Search, SearchParams};
use weft_engine::span_metrics::SpanMetrics;
use weft_ingest::IngestConfig;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, InstrumentationScope, KeyValue, any_value::Value as V};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span as PbSpan, Status as PbStatus, span::Event as PbEvent};
use weft_storage::MemoryStorage;
use weft_traceql::ast::{Kind, Status};
use weft_traceql::{Event, Span, Trace, Value};

const SERVICES: [&str; 3] = ["svc1", "svc2", "svc3"];
const NAMES: [&str; 3] = ["a", "b", "c"];
const USERS: [&str; 3] = ["u1", "u2", "u3"];
const CODES: [i64; 3] = [200, 404, 500];
const DURATIONS: [u64; 4] = [5_000_000, 50_000_000, 500_000_000, 2_000_000_000];
const KINDS: [Kind; 6] = [
    Kind::Unspecified,
    Kind::Internal,
    Kind::Server,
    Kind::Client,
    Kind::Producer,
    Kind::Consumer,
];
const BASE: u64 = 1_700_000_000_000_000_000;

#[derive(Debug, Clone)]
struct SpanSpec {
    service: usize,
    name: usize,
    kind: u8,
    status: u8,
    duration: usize,
    offset_ms: u64,
    parent: Option<usize>,
    user: Option<usize>,
    code: Option<usize>,
    event: Option<bool>,
}

fn span_spec(i: usize) -> impl Strategy<Value = SpanSpec> {
    (
        (0..3usize, 0..3usize, 0..6u8, 0..3u8, 0..4usize, 0..100u64),
        proptest::option::weighted(0.85, 0..i.max(1)),
        proptest::option::of(0..3usize),
        proptest::option::of(0..3usize),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            move |((service, name, kind, status, duration, offset_ms), parent, user, code, event)| SpanSpec {
                service,
                name,
                kind,
                status,
                duration,
                offset_ms,
                parent: if i == 0 { None } else { parent },
                user,
                code,
                event,
            },
        )
}

fn trace_spec() -> impl Strategy<Value = Vec<SpanSpec>> {
    (1..7usize).prop_flat_map(|n| (0..n).map(span_spec).collect::<Vec<_>>())
}

fn ids(t: usize, s: usize) -> ([u8; 16], [u8; 8]) {
    let mut tid = [0u8; 16];
    tid[0] = 0x40 + t as u8;
    tid[15] = t as u8 + 1;
    let mut sid = [0u8; 8];
    sid[0] = t as u8 + 1;
    sid[7] = s as u8 + 1;
    (tid, sid)
}

fn start_of(t: usize, s: &SpanSpec) -> u64 {
    BASE + t as u64 * 10_000_000_000 + s.offset_ms * 1_000_000
}

/// The model span, built directly from the spec.
fn model_span(t: usize, i: usize, spans: &[SpanSpec]) -> Span {
    let s = &spans[i];
    let (trace_id, span_id) = ids(t, i);
    let mut span_attrs = Vec::new();
    if let Some(u) = s.user {
        span_attrs.push(("user".to_owned(), Value::Str(USERS[u].to_owned())));
    }
    if let Some(c) = s.code {
        span_attrs.push(("http.status_code".to_owned(), Value::Int(CODES[c])));
    }
    let start = start_of(t, s);
    Span {
        trace_id,
        span_id,
        parent_span_id: s.parent.map(|p| ids(t, p).1),
        name: NAMES[s.name].to_owned(),
        kind: KINDS[s.kind as usize],
        status: [Status::Unset, Status::Ok, Status::Error][s.status as usize],
        status_message: String::new(),
        start_unix_nano: start,
        duration_nano: DURATIONS[s.duration],
        span_attrs,
        resource_attrs: vec![("service.name".to_owned(), Value::Str(SERVICES[s.service].to_owned()))],
        scope_name: "model".to_owned(),
        scope_version: "1".to_owned(),
        scope_attrs: Vec::new(),
        events: s
            .event
            .map(|retry| Event {
                name: if retry { "retry" } else { "log" }.to_owned(),
                time_unix_nano: start + 1,
                attrs: vec![("attempt".to_owned(), Value::Int(i64::from(retry) + 1))],
            })
            .into_iter()
            .collect(),
        links: Vec::new(),
    }
}

fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

/// One OTLP request holding `spans` (model spans), one resource per service.
fn request(spans: &[&Span]) -> Bytes {
    let mut by_service: BTreeMap<String, Vec<PbSpan>> = BTreeMap::new();
    for s in spans {
        let Some(Value::Str(svc)) = s.resource_attr("service.name") else {
            unreachable!()
        };
        let attrs = s
            .span_attrs
            .iter()
            .map(|(k, v)| match v {
                Value::Str(x) => kv(k, V::StringValue(x.clone())),
                Value::Int(i) => kv(k, V::IntValue(*i)),
                _ => unreachable!(),
            })
            .collect();
        let events = s
            .events
            .iter()
            .map(|e| PbEvent {
                time_unix_nano: e.time_unix_nano,
                name: e.name.clone(),
                attributes: e
                    .attrs
                    .iter()
                    .map(|(k, v)| match v {
                        Value::Int(i) => kv(k, V::IntValue(*i)),
                        _ => unreachable!(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        let kind = KINDS.iter().position(|k| *k == s.kind).unwrap() as i32;
        let code = [Status::Unset, Status::Ok, Status::Error]
            .iter()
            .position(|k| *k == s.status)
            .unwrap() as i32;
        by_service.entry(svc.clone()).or_default().push(PbSpan {
            trace_id: s.trace_id.to_vec().into(),
            span_id: s.span_id.to_vec().into(),
            parent_span_id: s.parent_span_id.map(|p| p.to_vec()).unwrap_or_default().into(),
            name: s.name.clone(),
            kind,
            start_time_unix_nano: s.start_unix_nano,
            end_time_unix_nano: s.end_unix_nano(),
            attributes: attrs,
            events,
            status: Some(PbStatus {
                code,
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let req = ExportTraceServiceRequest {
        resource_spans: by_service
            .into_iter()
            .map(|(svc, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", V::StringValue(svc))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "model".to_owned(),
                        version: "1".to_owned(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    };
    Bytes::from(req.encode_to_vec())
}

/// Random queries from the supported grammar.
fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..3usize).prop_map(|i| format!("name = \"{}\"", NAMES[i])),
        (0..3usize).prop_map(|i| format!("resource.service.name = \"{}\"", SERVICES[i])),
        (0..3usize).prop_map(|i| format!(".user = \"{}\"", USERS[i])),
        (0..3usize).prop_map(|i| format!("span.user != \"{}\"", USERS[i])),
        (0..3usize, prop_oneof![Just(">="), Just("<"), Just("=")])
            .prop_map(|(i, op)| format!("span.http.status_code {op} {}", CODES[i])),
        (0..4usize, prop_oneof![Just(">"), Just("<="), Just("=")])
            .prop_map(|(i, op)| format!("duration {op} {}ms", DURATIONS[i] / 1_000_000)),
        // The literal first, as a float, and the duration read other than against a literal.
        (0..4usize, prop_oneof![Just("<"), Just(">="), Just("!=")])
            .prop_map(|(i, op)| format!("{}ms {op} duration", DURATIONS[i] / 1_000_000)),
        Just("duration > 499999999.5".to_owned()),
        // Root spans, as Grafana's Traces Drilldown selects them.
        prop_oneof![
            Just("nestedSetParent < 0"),
            Just("nestedSetParent != -1"),
            Just("span:parentID = nil"),
            Just("0 <= nestedSetParent"),
            Just("span:parentID != nil"),
            Just("nestedSetParent < -1")
        ]
        .prop_map(str::to_owned),
        Just("duration - 40ms > 10ms".to_owned()),
        prop_oneof![Just("error"), Just("ok"), Just("unset")].prop_map(|s| format!("status = {s}")),
        prop_oneof![Just("server"), Just("client"), Just("internal")].prop_map(|k| format!("kind != {k}")),
        Just("name =~ \"a|b\"".to_owned()),
        Just(".user =~ \"u[12]\"".to_owned()),
        Just("span.user !~ \"u1\"".to_owned()),
        Just("span.http.status_code != 200".to_owned()),
        Just("resource.service.name != \"svc2\"".to_owned()),
        Just("event:name = \"retry\"".to_owned()),
        Just("event.attempt > 1".to_owned()),
        Just(".user = nil".to_owned()),
        Just("rootServiceName = \"svc1\"".to_owned()),
        Just("traceDuration > 1s".to_owned()),
    ]
}

fn filter() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("{ }".to_owned()),
        3 => atom().prop_map(|a| format!("{{ {a} }}")),
        3 => (atom(), atom(), prop_oneof![Just("&&"), Just("||")]).prop_map(|(a, b, op)| format!("{{ {a} {op} {b} }}")),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let spanset = prop_oneof![
        2 => filter(),
        3 => (filter(), filter(), prop_oneof![
            Just("&&"), Just("||"), Just(">"), Just(">>"), Just("<"), Just("<<"),
            Just("!>"), Just("!>>"), Just("!<"), Just("!<<"),
        ]).prop_map(|(a, b, op)| format!("{a} {op} {b}")),
    ];
    (
        spanset,
        prop_oneof![
            3 => Just(String::new()),
            1 => Just(" | count() > 1".to_owned()),
            1 => Just(" | by(resource.service.name)".to_owned()),
            1 => Just(" | select(span.user)".to_owned()),
            1 => Just(" | avg(duration) > 100ms".to_owned()),
        ],
    )
        .prop_map(|(s, p)| format!("{s}{p}"))
}

fn metrics_query() -> impl Strategy<Value = String> {
    (
        filter(),
        prop_oneof![
            Just(" | count_over_time()"),
            Just(" | rate() by (resource.service.name)"),
            Just(" | count_over_time() by (span.user, name)"),
            Just(" | quantile_over_time(duration, .5, .9) by (name)"),
            Just(" | histogram_over_time(duration) by (status)"),
            Just(" | avg_over_time(duration) by (resource.service.name, kind)"),
            Just(" | count_over_time() by (instrumentation:name, status)"),
        ],
    )
        .prop_map(|(f, m)| format!("{f}{m}"))
}

/// A search result reduced to what must match: per trace, each spanset's span IDs (sorted) and
/// attributes.
type Answer = BTreeMap<[u8; 16], Vec<(Vec<[u8; 8]>, Vec<(String, Value)>)>>;

fn model_answer(query: &weft_traceql::Query, traces: &[Trace]) -> Answer {
    let mut out = Answer::new();
    for t in traces {
        let sets = weft_traceql::eval(query, t).unwrap();
        if sets.is_empty() {
            continue;
        }
        let sets = sets
            .into_iter()
            .map(|s| {
                let mut ids: Vec<[u8; 8]> = s.spans.iter().map(|&i| t.spans[i].span_id).collect();
                ids.sort();
                (ids, s.attributes)
            })
            .collect();
        out.insert(t.spans[0].trace_id, sets);
    }
    out
}

async fn engine_answer(ing: &Node, query: &weft_traceql::Query, window: Option<(u64, u64)>) -> Answer {
    let params = SearchParams {
        limit: 10_000,
        spans_per_spanset: 10_000,
        ..Default::default()
    };
    let mut sink = Search::new(query, params).unwrap();
    ing.scan("t", window, &mut sink).await.unwrap();
    sink.finish()
        .into_iter()
        .map(|h| {
            let sets = h
                .spansets
                .into_iter()
                .map(|s| {
                    assert_eq!(s.matched, s.spans.len());
                    let mut ids: Vec<[u8; 8]> = s.spans.iter().map(|x| x.span_id).collect();
                    ids.sort();
                    (ids, s.attributes)
                })
                .collect();
            (h.trace_id, sets)
        })
        .collect()
}

/// The `limit` traces of `answer` that start last, latest first (ties by trace ID).
fn newest_matches(answer: &Answer, traces: &[Trace], limit: usize) -> Vec<[u8; 16]> {
    let mut starts: Vec<(u64, [u8; 16])> = traces
        .iter()
        .filter(|t| answer.contains_key(&t.spans[0].trace_id))
        .map(|t| (t.spans[0].start_unix_nano, t.spans[0].trace_id))
        .collect();
    starts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    starts.into_iter().take(limit).map(|(_, id)| id).collect()
}

/// The trace IDs a search with `limit` returns, in order.
async fn engine_newest(ing: &Node, query: &weft_traceql::Query, limit: usize) -> Vec<[u8; 16]> {
    let params = SearchParams {
        limit,
        ..Default::default()
    };
    let mut sink = Search::new(query, params).unwrap();
    ing.scan("t", None, &mut sink).await.unwrap();
    sink.finish().into_iter().map(|h| h.trace_id).collect()
}

/// Zipkin's order over the model's answer: the trace's timestamp, its root span's start, else
/// its earliest span's, rounded to the nearest microsecond as weft's Zipkin JSON writes it.
fn zipkin_key(spans: impl IntoIterator<Item = (bool, u64)>) -> Option<u64> {
    let mut earliest = None::<u64>;
    for (root, start) in spans {
        if root {
            return Some((start + 500) / 1000);
        }
        earliest = Some(earliest.map_or(start, |e| e.min(start)));
    }
    earliest.map(|e| (e + 500) / 1000)
}

/// The `limit` traces of `answer` newest first in Zipkin's order (ties by trace ID).
fn zipkin_newest(answer: &Answer, traces: &[Trace], limit: usize) -> Vec<[u8; 16]> {
    let mut keys: Vec<(u64, [u8; 16])> = traces
        .iter()
        .filter(|t| answer.contains_key(&t.spans[0].trace_id))
        .filter_map(|t| {
            let key = zipkin_key(t.spans.iter().map(|s| (s.parent_span_id.is_none(), s.start_unix_nano)))?;
            Some((key, t.spans[0].trace_id))
        })
        .collect();
    keys.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    keys.into_iter().take(limit).map(|(_, id)| id).collect()
}

/// The model's answer as a foreign API's matcher: a trace matches when the answer holds it,
/// keyed by Zipkin's timestamp.
struct ZipkinOrder(std::collections::BTreeSet<[u8; 16]>);

impl weft_engine::newest::Matcher for ZipkinOrder {
    fn key(&self, rows: &[weft_block::row::SpanRow]) -> Option<u64> {
        if !self.0.contains(&rows.first()?.trace_id) {
            return None;
        }
        zipkin_key(rows.iter().map(|r| (r.parent_span_id == [0; 8], r.start_unix_nano)))
    }
}

/// The trace IDs a search in Zipkin's order returns (a scan that stops early by the latest
/// span starts, `FloorOf::SpanStart`), with a trivial prefilter, for which the early stop is
/// exact whatever the roots' times.
async fn engine_zipkin_newest(ing: &Node, answer: &Answer, limit: usize) -> Vec<[u8; 16]> {
    use weft_engine::newest::{Newest, Order};
    let all = weft_traceql::parse("{ }").unwrap();
    let matcher = Arc::new(ZipkinOrder(answer.keys().copied().collect()));
    let mut sink = Newest::new(
        weft_engine::prefilter::Prefilter::new(&all),
        matcher,
        Order::SpanStartMicros,
        limit,
    );
    ing.scan("t", None, &mut sink).await.unwrap();
    sink.into_traces().iter().map(|t| t[0].trace_id).collect()
}

const METRICS_STEP: u64 = 5_000_000_000;

async fn engine_metrics(ing: &Node, query: &weft_traceql::Query, end: u64) -> Vec<weft_traceql::Series> {
    let mut sink = Metrics::new(query, BASE, end, METRICS_STEP).unwrap();
    ing.scan("t", Some((BASE, end - 1)), &mut sink).await.unwrap();
    sink.finish().unwrap()
}

/// The span-at-a-time path from columns, when the query allows it.
async fn engine_span_metrics(ing: &Node, query: &weft_traceql::Query, end: u64) -> Option<Vec<weft_traceql::Series>> {
    let mut m = SpanMetrics::new(query, BASE, end, METRICS_STEP).unwrap()?;
    ing.scan_columns("t", Some((BASE, end - 1)), &mut m).await.unwrap();
    Some(m.finish().unwrap())
}

/// Exemplars on both engine paths: each names a stored span of the series' query (its trace
/// and start), at most one per trace, at most `limit` in all; the series are unchanged.
async fn check_exemplars(ing: &Node, c: &Case, q: &weft_traceql::Query, end: u64, want: &[weft_traceql::Series]) {
    const LIMIT: usize = 6;
    let mut sink = Metrics::new(q, BASE, end, METRICS_STEP).unwrap();
    sink.exemplars(LIMIT);
    ing.scan("t", Some((BASE, end - 1)), &mut sink).await.unwrap();
    let mut runs = vec![(sink.finish().unwrap(), want.to_vec())];
    if let Some(mut m) = SpanMetrics::new(q, BASE, end, METRICS_STEP).unwrap() {
        m.exemplars(LIMIT);
        ing.scan_columns("t", Some((BASE, end - 1)), &mut m).await.unwrap();
        let without = engine_span_metrics(ing, q, end).await.expect("span-local");
        runs.push((m.finish().unwrap(), without));
    }
    for (got, want) in runs {
        let strip =
            |s: &[weft_traceql::Series]| -> Vec<_> { s.iter().map(|s| (s.labels.clone(), s.values.clone())).collect() };
        assert_eq!(strip(&got), strip(&want), "`{q}`: exemplars change no series");
        let all: Vec<_> = got.iter().flat_map(|s| &s.exemplars).collect();
        assert!(all.len() <= LIMIT, "`{q}`: {} exemplars", all.len());
        let traces: std::collections::BTreeSet<_> = all.iter().map(|e| e.trace_id).collect();
        assert_eq!(traces.len(), all.len(), "`{q}`: one exemplar per trace");
        // Arithmetic between queries makes new series, without exemplars; topk/bottomk and
        // comparisons may drop the series that got them.
        let plain = q.math.is_none() && matches!(q.pipeline.stages.last(), Some(weft_traceql::ast::Stage::Metrics(_)));
        if plain && want.iter().any(|s| s.values.iter().any(|v| v.is_some_and(|v| v > 0.0))) {
            assert!(!all.is_empty(), "`{q}`: spans counted but no exemplar");
        }
        for e in all {
            let found = c.traces.iter().flat_map(|t| &t.spans).any(|s| {
                s.trace_id == e.trace_id
                    && s.start_unix_nano == e.timestamp_ns
                    && e.span_id.is_none_or(|id| id == s.span_id)
            });
            assert!(found, "`{q}`: exemplar {e:?} is a stored span");
        }
    }
}

#[derive(Debug)]
struct Case {
    traces: Vec<Trace>,
    batches: Vec<Bytes>,
    queries: Vec<weft_traceql::Query>,
    metrics: Vec<weft_traceql::Query>,
    /// The querier's `--query-parallelism`: any gives the model's answer.
    parallelism: usize,
    /// A search `limit`: the answer is the model's that many newest traces.
    limit: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(trace_spec(), 1..6),
        proptest::collection::vec(query(), 4),
        proptest::collection::vec(metrics_query(), 2),
        any::<u64>(),
        1..=4usize,
        1..=3usize,
    )
        .prop_map(|(specs, queries, metrics, seed, parallelism, limit)| {
            let traces: Vec<Trace> = specs
                .iter()
                .enumerate()
                .map(|(t, spans)| {
                    let mut spans: Vec<Span> = (0..spans.len()).map(|i| model_span(t, i, spans)).collect();
                    // The order the engine sees a whole trace in (start time, then span ID).
                    spans.sort_by_key(|s| (s.start_unix_nano, s.span_id));
                    Trace { spans }
                })
                .collect();
            // Split the spans over up to four batches; re-send some (client retries).
            let all: Vec<&Span> = traces.iter().flat_map(|t| &t.spans).collect();
            let mut batches: Vec<Vec<&Span>> = vec![Vec::new(); 4];
            let mut x = seed | 1;
            for s in &all {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                batches[(x % 4) as usize].push(s);
                if x % 7 == 0 {
                    batches[((x >> 8) % 4) as usize].push(s);
                }
            }
            let parse = |q: &String| weft_traceql::parse(q).unwrap_or_else(|e| panic!("{q}: {e}"));
            let batches = batches.iter().filter(|b| !b.is_empty()).map(|b| request(b)).collect();
            Case {
                traces,
                batches,
                queries: queries.iter().map(parse).collect(),
                metrics: metrics.iter().map(parse).collect(),
                parallelism,
                limit,
            }
        })
}

/// A node whose compactor merges `blocks` small blocks at once (the valve of the size-tiered
/// policy), so that compacting the model's few small blocks leaves one.
async fn open(dir: &std::path::Path, blocks: usize) -> Node {
    let cfg = IngestConfig {
        data_dir: dir.to_path_buf(),
        // Traces cross row groups.
        row_group_rows: 3,
        ..Default::default()
    };
    let compaction = CompactionConfig {
        delete_grace: std::time::Duration::ZERO,
        row_group_rows: 3,
        max_inputs: blocks.max(2),
        ..Default::default()
    };
    Node::open(cfg, compaction, Arc::new(MemoryStorage::default())).await
}

/// Tempo's metrics forms over the generated spans: arithmetic between queries, with numbers,
/// topk/bottomk and comparisons, each span-local so that both engine paths run them.
const METRICS_FORMS: &[&str] = &[
    "({ } | rate() by (resource.service.name)) / ({ } | count_over_time() by (resource.service.name))",
    "({ status = error } | count_over_time()) * 100",
    "{ } | count_over_time() by (name) | topk(2)",
    "{ } | count_over_time() by (resource.service.name) | bottomk(1)",
    "{ } | count_over_time() by (name) > 1",
    "({ } | count_over_time() by (kind)) - ({ duration > 5ms } | count_over_time() by (kind))",
    // Span attributes: from the attribute blob (blocks the head wrote) or from dedicated
    // columns (compacted blocks), and from the head's distinct blobs.
    "{ } | count_over_time() by (span.user) | topk(2)",
    "{ span.http.status_code >= 400 } | rate() by (.user)",
    "{ .user != nil } | count_over_time() by (span.http.status_code, resource.service.name)",
    "{ } | avg_over_time(span.http.status_code) by (span.user)",
    "{ span.user = nil } | histogram_over_time(duration) by (span.http.status_code)",
    // The duration compared with literals: evaluated once per class of durations.
    "{ duration > 5ms && duration <= 500ms } | histogram_over_time(duration) by (name)",
    "{ 50ms < duration || status = error } | avg_over_time(duration) by (resource.service.name)",
    "{ duration >= 5ms && 2s != duration } | count_over_time() by (span.user)",
    // Root spans (Grafana's Traces Drilldown): the parent column, or the head's parent IDs.
    "{ nestedSetParent<0 && true } | rate() by (resource.service.name)",
    "{ nestedSetParent<0 && status = error } | count_over_time() by (name)",
    "{ -1 != nestedSetParent } | histogram_over_time(duration)",
    "{ span:parentID = nil || kind = client } | count_over_time() by (kind)",
    // compare(): every attribute of each span counted, in the selection or the baseline; a
    // selection reading the duration per span; a selection window (traces 1 and 2).
    "{ } | compare({ status = error })",
    "{ nestedSetParent < 0 } | compare({ duration > 40ms || span.user = \"u1\" }, 2)",
    "{ kind != internal } | compare({ duration * 2 > 100ms }, 1)",
    "{ resource.service.name != \"svc3\" } | compare({ }, 3, 1700000005000000000, 1700000025000000000)",
];

/// Fields whose values the tag check lists.
const TAG_FIELDS: &[&str] = &[
    "resource.service.name",
    "span.user",
    ".user",
    "span.http.status_code",
    "name",
    "event:name",
    "event.attempt",
    "instrumentation:name",
];

/// Span-local filters of the tag APIs, which read columns too.
const TAG_FILTERS: &[&str] = &[
    "{ }",
    r#"{ resource.service.name = "svc1" }"#,
    r#"{ span.user = "u2" || status = error }"#,
    "{ duration > 100ms }",
    "{ 50ms <= duration && duration < 2s }",
    "{ nestedSetParent < 0 }",
    "{ duration * 2 > 1s }",
    r#"{ name != "a" && span.http.status_code >= 400 }"#,
    "{ .user != nil && kind = server }",
];

/// The tag APIs with the empty or a span-local filter read columns: their keys and values must
/// be those of the model's spans overlapping the window that the filter matches alone, and
/// without a window those of the trace path too.
async fn check_tags(ing: &Node, c: &Case, state: &str) {
    for filter in TAG_FILTERS {
        let all = weft_traceql::parse(filter).unwrap();
        check_tags_with(ing, c, &format!("{state}, {filter}"), &all).await;
    }
}

/// [`check_tags`] for one filter.
async fn check_tags_with(ing: &Node, c: &Case, state: &str, all: &weft_traceql::Query) {
    use std::collections::BTreeSet;
    use weft_engine::search::{TagNames, TagScope, TagValues};
    use weft_engine::tags::{ColumnTagNames, ColumnTagValues};
    // None, one trace's first 40 ms, and a window that holds no span.
    let windows = [
        None,
        Some((BASE + 10_000_000_000, BASE + 10_040_000_000)),
        Some((BASE + 5_000_000_000, BASE + 5_000_000_001)),
    ];
    let spans: Vec<&Span> = c.traces.iter().flat_map(|t| &t.spans).collect();
    for window in windows {
        let inside: Vec<&Span> = spans
            .iter()
            .copied()
            .filter(|s| {
                window.is_none_or(|(ws, we)| s.start_unix_nano <= we && s.start_unix_nano + s.duration_nano >= ws)
            })
            .filter(|s| {
                let alone = Trace {
                    spans: vec![(*s).clone()],
                };
                !weft_traceql::eval(all, &alone).unwrap().is_empty()
            })
            .collect();
        let mut want: BTreeMap<TagScope, BTreeSet<String>> = BTreeMap::new();
        for s in &inside {
            let mut add = |scope, attrs: &[(String, Value)]| {
                want.entry(scope)
                    .or_default()
                    .extend(attrs.iter().map(|(k, _)| k.clone()))
            };
            add(TagScope::Resource, &s.resource_attrs);
            add(TagScope::Span, &s.span_attrs);
            add(TagScope::Instrumentation, &s.scope_attrs);
            s.events.iter().for_each(|e| add(TagScope::Event, &e.attrs));
        }
        want.retain(|_, keys| !keys.is_empty());
        let mut names = ColumnTagNames::new(all, window, 1000).expect("a span-local filter reads columns");
        ing.scan_columns("t", window, &mut names).await.unwrap();
        let mut got = names.keys;
        got.retain(|_, keys| !keys.is_empty());
        assert_eq!(got, want, "{state}: tag names in {window:?}");
        if window.is_none() {
            let mut traces = TagNames::new(all, 1000).unwrap();
            ing.scan("t", None, &mut traces).await.unwrap();
            traces.keys.retain(|_, keys| !keys.is_empty());
            assert_eq!(traces.keys, want, "{state}: tag names over traces");
        }
        for tag in TAG_FIELDS {
            let q = weft_traceql::parse(&format!("{{ {tag} }}")).unwrap();
            let Some(weft_traceql::ast::Stage::Spanset(weft_traceql::ast::SpansetExpr::Filter(f))) =
                q.pipeline.stages.first()
            else {
                unreachable!()
            };
            let field = f.expr.clone().unwrap();
            let attr = |attrs: &[(String, Value)], k: &str| -> Vec<Value> {
                attrs
                    .iter()
                    .filter(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
                    .collect()
            };
            let values_of = |s: &Span| -> Vec<Value> {
                match *tag {
                    "resource.service.name" => attr(&s.resource_attrs, "service.name"),
                    "span.user" | ".user" => attr(&s.span_attrs, "user"),
                    "span.http.status_code" => attr(&s.span_attrs, "http.status_code"),
                    "name" => vec![Value::Str(s.name.clone())],
                    "event:name" => s.events.iter().map(|e| Value::Str(e.name.clone())).collect(),
                    "event.attempt" => s.events.iter().flat_map(|e| attr(&e.attrs, "attempt")).collect(),
                    "instrumentation:name" => vec![Value::Str(s.scope_name.clone())],
                    _ => unreachable!("{tag}"),
                }
            };
            let want: BTreeSet<String> = inside
                .iter()
                .flat_map(|s| values_of(s))
                .map(|v| format!("{v:?}"))
                .collect();
            let mut sink = ColumnTagValues::new(all, &field, window, 1000).expect("a field with a column");
            ing.scan_columns("t", window, &mut sink).await.unwrap();
            let got: BTreeSet<String> = sink.finish().iter().map(|v| format!("{v:?}")).collect();
            assert_eq!(got, want, "{state}: values of {tag} in {window:?}");
            if window.is_none() {
                let mut traces = TagValues::new(all, field, 1000).unwrap();
                ing.scan("t", None, &mut traces).await.unwrap();
                let over: BTreeSet<String> = traces.finish().iter().map(|v| format!("{v:?}")).collect();
                assert_eq!(over, want, "{state}: values of {tag} over traces");
            }
        }
    }
}

async fn check(ing: &Node, c: &Case, state: &str, stored_once: bool) {
    let end = BASE + 100_000_000_000;
    check_tags(ing, c, state).await;
    // A window takes the traces one of whose stored pieces (its spans in the head, or in one
    // row group of a block) has a span in it and a span passing the prefilter, each evaluated
    // whole (`weft_querier::scan`). Where a trace is one piece (the head alone) that is every
    // trace with a span in the window; elsewhere it is at least every trace inside the window
    // and at most every trace touching it. The windows cut traces 0 and 1.
    let windows = [
        (BASE + 10_000_000_000, BASE + 10_040_000_000),
        (BASE + 60_000_000, BASE + 10_020_000_000),
    ];
    for q in &c.queries {
        let want = model_answer(q, &c.traces);
        let got = engine_answer(ing, q, None).await;
        assert_eq!(got, want, "{state}: search `{q}`");
        let newest = newest_matches(&want, &c.traces, c.limit);
        assert_eq!(
            engine_newest(ing, q, c.limit).await,
            newest,
            "{state}: `{q}` with limit {}: the newest matches, newest first",
            c.limit
        );
        assert_eq!(
            engine_zipkin_newest(ing, &want, c.limit).await,
            zipkin_newest(&want, &c.traces, c.limit),
            "{state}: `{q}` with limit {}: the newest matches in Zipkin's order",
            c.limit
        );
        for (ws, we) in windows {
            let touches = |s: &Span| s.start_unix_nano <= we && s.start_unix_nano + s.duration_nano >= ws;
            let inside = |s: &Span| s.start_unix_nano >= ws && s.start_unix_nano + s.duration_nano <= we;
            let some: Vec<Trace> = c
                .traces
                .iter()
                .filter(|t| t.spans.iter().any(touches))
                .cloned()
                .collect();
            let all: Vec<Trace> = c
                .traces
                .iter()
                .filter(|t| t.spans.iter().all(inside))
                .cloned()
                .collect();
            let (most, least) = (model_answer(q, &some), model_answer(q, &all));
            let got = engine_answer(ing, q, Some((ws, we))).await;
            if state == "head only" {
                assert_eq!(got, most, "{state}: search `{q}` in {ws}..{we}");
            }
            for (id, sets) in &got {
                assert_eq!(
                    Some(sets),
                    most.get(id),
                    "{state}: `{q}` in {ws}..{we} gave a trace not touching it"
                );
            }
            for (id, sets) in &least {
                assert_eq!(
                    got.get(id),
                    Some(sets),
                    "{state}: `{q}` in {ws}..{we} missed a trace inside it"
                );
            }
        }
    }
    let forms: Vec<weft_traceql::Query> = METRICS_FORMS
        .iter()
        .map(|q| weft_traceql::parse(q).unwrap_or_else(|e| panic!("`{q}`: {e}")))
        .collect();
    for (k, q) in c.metrics.iter().chain(&forms).enumerate() {
        if k >= c.metrics.len() {
            let got = engine_span_metrics(ing, q, end).await;
            assert!(got.is_some(), "`{q}` runs span at a time");
        }
        let want = weft_traceql::eval_metrics(q, &c.traces, BASE, end, METRICS_STEP).unwrap();
        let got = engine_metrics(ing, q, end).await;
        assert_series_close(&got, &want, &format!("{state}: metrics `{q}`"));
        check_exemplars(ing, c, q, end, &want).await;
        // Span at a time does not drop retries stored in two places (head and block, or two
        // blocks); compare where every span is stored once.
        if stored_once && let Some(got) = engine_span_metrics(ing, q, end).await {
            assert_series_close(&got, &want, &format!("{state}: span-at-a-time metrics `{q}`"));
        }
    }
}

/// `got` equals `want` but for the last bits of sums: floating-point addition depends on the
/// order of the spans, which is the blocks' row order (time slices, then trace ID), not the
/// model's.
fn assert_series_close(got: &[weft_traceql::metrics::Series], want: &[weft_traceql::metrics::Series], what: &str) {
    let close = |a: &Option<f64>, b: &Option<f64>| match (a, b) {
        (Some(a), Some(b)) => a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
        _ => a == b,
    };
    let same = got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            g.labels == w.labels
                && g.exemplars == w.exemplars
                && g.values.len() == w.values.len()
                && g.values.iter().zip(&w.values).all(|(a, b)| close(a, b))
        });
    assert!(same, "{what}:\n got {got:?}\nwant {want:?}");
}

async fn run(c: Case) {
    let t: Arc<str> = Arc::from("t");
    // Head only.
    let dir = tempfile::tempdir().unwrap();
    let ing = open(dir.path(), c.batches.len()).await.with_parallelism(c.parallelism);
    for b in &c.batches {
        ing.push(&t, b.clone()).await.unwrap();
    }
    check(&ing, &c, "head only", true).await;
    ing.shutdown().await;
    drop(ing);

    // Head and blocks, then blocks only, then compacted.
    let dir = tempfile::tempdir().unwrap();
    let ing = open(dir.path(), c.batches.len()).await.with_parallelism(c.parallelism);
    for (i, b) in c.batches.iter().enumerate() {
        ing.push(&t, b.clone()).await.unwrap();
        if i + 1 < c.batches.len() {
            ing.flush().await;
        }
    }
    check(&ing, &c, "head and blocks", false).await;
    ing.flush().await;
    assert_eq!(ing.head_span_count(), 0);
    check(&ing, &c, "blocks only", false).await;
    while ing.compact_once("t").await.unwrap().is_some() {}
    let blocks = ing.blocks("t");
    assert_eq!(blocks.len(), 1, "compaction leaves one block");
    let unique: usize = c.traces.iter().map(|t| t.spans.len()).sum();
    assert_eq!(
        blocks[0].meta.span_count as usize, unique,
        "compaction drops retried duplicates"
    );
    check(&ing, &c, "after compaction", true).await;
    ing.shutdown().await;
}

/// Cases of the model test: 16 in `make test` (each builds and scans blocks, about 2.7 s in a
/// debug build on 2 cores), more with `WEFT_MODEL_CASES` (`make fuzz` runs 256).
fn model_cases() -> u32 {
    std::env::var("WEFT_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: model_cases(), ..ProptestConfig::default() })]

    #[test]
    fn search_and_metrics_match_the_model(c in case()) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(c));
    }
}

/// A trace split so that its pieces pass different leaves of `{ status = unset } >> { status =
/// error }`, searched in a window that holds only its unset spans: the leaves of every piece
/// the scan sees, in the window or not, and of every row group the window skipped, must count
/// before a split trace is ruled out unread (`weft_querier::scan`, step 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_traces_count_every_piece_before_they_are_ruled_out() {
    let spec = |status: u8, parent: Option<usize>| SpanSpec {
        service: 0,
        name: 0,
        kind: 1,
        status,
        duration: 0,
        offset_ms: 0,
        parent,
        user: None,
        code: None,
        event: None,
    };
    // Trace 1: six unset spans at 0-5 ms (in the window; a row group of 3 rows grows to 6
    // to hold one trace), two errors at 90-91 ms (outside); trace 0 (a lower ID, so first in
    // a block): one span in the window.
    let mut t1: Vec<SpanSpec> = vec![spec(0, None)];
    t1.extend((0..5).map(|_| spec(0, Some(0))));
    t1.extend((0..2).map(|_| spec(2, Some(0))));
    let at = |t: usize, specs: &[SpanSpec], i: usize, ms: u64| {
        let mut s = model_span(t, i, specs);
        s.start_unix_nano = BASE + ms * 1_000_000;
        s.events.clear();
        s
    };
    let inside: Vec<Span> = (0..6).map(|i| at(1, &t1, i, i as u64)).collect();
    let outside: Vec<Span> = (6..8).map(|i| at(1, &t1, i, 84 + i as u64)).collect();
    let other = at(0, &[spec(0, None)], 0, 0);
    let q = weft_traceql::parse("{ status = unset } >> { status = error }").unwrap();
    let mut whole = inside.clone();
    whole.extend(outside.clone());
    let want = model_answer(&q, &[Trace { spans: whole }]);
    assert_eq!(want.len(), 1);
    let window = Some((BASE, BASE + 10_000_000));
    let with_other = |mut v: Vec<Span>| {
        v.insert(0, other.clone());
        v
    };
    // What each batch holds, and whether it is flushed into a block.
    type Batches = Vec<(Vec<Span>, bool)>;
    let cases: [(&str, Batches); 3] = [
        // One block: the errors fill the second row group, which the window skips.
        (
            "row group skipped for the window",
            vec![([inside.clone(), outside.clone()].concat(), true)],
        ),
        // Two blocks; the errors' (newer) block is scanned first, outside the window.
        (
            "piece outside the window seen first",
            vec![(inside.clone(), true), (with_other(outside.clone()), true)],
        ),
        // The head is scanned first and defers the trace; the block's piece comes later.
        (
            "piece outside the window seen after",
            vec![(with_other(outside.clone()), true), (inside.clone(), false)],
        ),
    ];
    for (name, batches) in cases {
        let dir = tempfile::tempdir().unwrap();
        let ing = open(dir.path(), 2).await;
        let t: Arc<str> = Arc::from("t");
        for (spans, flush) in &batches {
            let refs: Vec<&Span> = spans.iter().collect();
            ing.push(&t, request(&refs)).await.unwrap();
            if *flush {
                ing.flush().await;
            }
        }
        let got = engine_answer(&ing, &q, window).await;
        assert_eq!(got, want, "{name}");
        ing.shutdown().await;
    }
}
