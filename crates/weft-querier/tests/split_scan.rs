//! A scan split into parts (the head and any grouping of the blocks or of their row groups,
//! each part into a sink of its own), the sinks merged in the parts' order and the split traces finished once, gives
//! what one scan gives: the same search hits in the same order, the same metrics series, the
//! same tag values, the same service graph. This is what lets a query frontend split a query into jobs (issue 47).

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Node, graph_shape};
use proptest::prelude::*;
use weft_engine::graph::ServiceGraph;
use weft_engine::search::{Metrics, Search, SearchParams, TraceSink};
use weft_engine::span_metrics::SpanMetrics;
use weft_engine::tags::ColumnTagValues;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, Status};
use weft_querier::scan::ScanPart;

const BASE: u64 = 1_700_000_000_000_000_000;
const SERVICES: [&str; 3] = ["a", "b", "c"];
/// Where a span is stored: blocks 0 to 2 (flushed in that order), or the head (3).
const PLACES: u8 = 4;

/// A span: its service, whether it failed, and where it is stored. Span 0 of a trace is its
/// root; span `k` is a child of span `k / 2`.
type SpanSpec = (usize, bool, u8);

fn trace_id(t: usize) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&(t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    id[15] = 3;
    id
}

fn span_of(t: usize, k: usize, (_, error, _): SpanSpec) -> Span {
    let start = BASE + (t as u64 * 7 % 50) * 1_000_000 + k as u64 * 1_000;
    Span {
        trace_id: trace_id(t).to_vec().into(),
        span_id: ((t * 16 + k + 1) as u64).to_be_bytes().to_vec().into(),
        parent_span_id: if k == 0 {
            Default::default()
        } else {
            ((t * 16 + k / 2 + 1) as u64).to_be_bytes().to_vec().into()
        },
        name: format!("op{}", k % 3),
        kind: if k == 0 { 2 } else { 3 },
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1_000 * (k as u64 + 1),
        status: Some(Status {
            code: if error { 2 } else { 0 },
            ..Default::default()
        }),
        attributes: vec![KeyValue {
            key: "user".to_owned(),
            value: Some(AnyValue {
                value: Some(V::StringValue(format!("u{}", (t + k) % 5))),
            }),
        }],
        ..Default::default()
    }
}

/// The spans stored at `place`, one resource per service.
fn request(traces: &[Vec<SpanSpec>], place: u8) -> Bytes {
    use prost::Message;
    let resource_spans = SERVICES
        .iter()
        .enumerate()
        .map(|(s, name)| ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".to_owned(),
                    value: Some(AnyValue {
                        value: Some(V::StringValue((*name).to_owned())),
                    }),
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: traces
                    .iter()
                    .enumerate()
                    .flat_map(|(t, spans)| {
                        spans
                            .iter()
                            .enumerate()
                            .filter(move |(_, sp)| sp.0 == s && sp.2 == place)
                            .map(move |(k, &sp)| span_of(t, k, sp))
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    Bytes::from(ExportTraceServiceRequest { resource_spans }.encode_to_vec())
}

fn traces() -> impl Strategy<Value = Vec<Vec<SpanSpec>>> {
    let span = (0..SERVICES.len(), proptest::bool::weighted(0.2), 0..PLACES);
    proptest::collection::vec(proptest::collection::vec(span, 1..6), 5..60)
}

const SEARCHES: [&str; 4] = [
    "{ }",
    "{ status = error }",
    "{ resource.service.name = \"a\" } >> { status = error }",
    "{ span.user = \"u1\" } && { resource.service.name = \"c\" }",
];
const TRACE_METRICS: &str = "{ resource.service.name = \"a\" } >> { } | count_over_time() by (resource.service.name)";
const SPAN_METRICS: &str = "{ status = error } | count_over_time() by (resource.service.name, name)";

/// The parts: the head alone or with the first group, and the blocks grouped by `groups`;
/// with `by_row_group`, each row group of each block goes to a group of its own choosing, so
/// one block's row groups are split between parts, as a frontend splits a large block.
fn parts(blocks: &[(String, usize)], groups: &[usize], head_alone: bool, by_row_group: bool) -> Vec<ScanPart> {
    let n = groups.iter().copied().max().unwrap_or(0) + 1;
    let mut parts: Vec<ScanPart> = (0..n).map(|_| ScanPart::of_blocks([])).collect();
    let mut group = groups.iter().cycle();
    for (id, row_groups) in blocks {
        if !by_row_group {
            let g = *group.next().unwrap();
            parts[g].blocks.as_mut().unwrap().insert(id.clone());
            continue;
        }
        for rg in 0..*row_groups {
            let part = &mut parts[*group.next().unwrap()];
            part.blocks.as_mut().unwrap().insert(id.clone());
            part.row_groups.entry(id.clone()).or_default().insert(rg);
        }
    }
    if head_alone {
        parts.insert(0, ScanPart::head_only());
    } else {
        parts[0].head = true;
    }
    parts
}

async fn check(traces: Vec<Vec<SpanSpec>>, groups: Vec<usize>, head_alone: bool, by_row_group: bool, limit: usize) {
    let any_error = traces.iter().flatten().any(|&(_, error, _)| error);
    let dir = tempfile::tempdir().unwrap();
    let node = Node::in_memory(dir.path(), 8).await;
    let tenant: Arc<str> = Arc::from("t");
    for place in 0..PLACES {
        node.push(&tenant, request(&traces, place)).await.unwrap();
        if place < PLACES - 1 {
            node.flush().await;
        }
    }
    let blocks: Vec<(String, usize)> = node
        .blocks("t")
        .iter()
        .map(|b| (b.meta.block_id.clone(), b.row_group_count()))
        .collect();
    let parts = parts(&blocks, &groups, head_alone, by_row_group);
    let window = Some((BASE, BASE + 100_000_000));
    let params = SearchParams {
        limit,
        ..SearchParams::default()
    };

    for q in SEARCHES {
        let query = weft_traceql::parse(q).unwrap();
        let mut whole = Search::new(&query, params.clone()).unwrap();
        node.scan("t", window, &mut whole).await.unwrap();
        let mut merged = Search::new(&query, params.clone()).unwrap();
        let mut outcomes = Vec::new();
        for part in &parts {
            let mut sink = Search::new(&query, params.clone()).unwrap();
            outcomes.push(node.scan_part("t", window, part, &mut sink).await.unwrap());
            TraceSink::merge(&mut merged, Box::new(sink));
        }
        node.finish_scan("t", window, outcomes, &mut merged).await.unwrap();
        let hits = |s: Search| {
            s.finish()
                .into_iter()
                .map(|h| (h.trace_id, h.start_unix_nano))
                .collect::<Vec<_>>()
        };
        assert_eq!(hits(merged), hits(whole), "`{q}` split as {parts:?}");
    }

    let query = weft_traceql::parse(TRACE_METRICS).unwrap();
    // Exemplars too: the same picks, span IDs and all, however the scan is split.
    let metrics = || {
        let mut m = Metrics::new(&query, BASE, BASE + 100_000_000, 10_000_000).unwrap();
        m.exemplars(6);
        m
    };
    let mut whole = metrics();
    node.scan("t", window, &mut whole).await.unwrap();
    let mut merged = metrics();
    let mut outcomes = Vec::new();
    for part in &parts {
        let mut sink = metrics();
        outcomes.push(node.scan_part("t", window, part, &mut sink).await.unwrap());
        TraceSink::merge(&mut merged, Box::new(sink));
    }
    node.finish_scan("t", window, outcomes, &mut merged).await.unwrap();
    assert_eq!(merged.finish().unwrap(), whole.finish().unwrap(), "`{TRACE_METRICS}`");

    let query = weft_traceql::parse(SPAN_METRICS).unwrap();
    let span_metrics = || {
        let mut m = SpanMetrics::new(&query, BASE, BASE + 100_000_000, 10_000_000)
            .unwrap()
            .unwrap();
        m.exemplars(6);
        m
    };
    // Each block counts once, inspected or skipped, however its row groups are split.
    let blocks_counted = |s: &weft_querier::scan::ScanStats| s.inspected_blocks + s.skipped_blocks;
    let mut whole = span_metrics();
    let whole_stats = node.scan_columns("t", window, &mut whole).await.unwrap();
    let mut merged = span_metrics();
    let mut counted = 0;
    for part in &parts {
        let mut sink = merged.fork();
        counted += blocks_counted(&node.scan_columns_part("t", window, part, &mut sink).await.unwrap());
        merged.merge(sink);
    }
    assert_eq!(
        counted,
        blocks_counted(&whole_stats),
        "blocks counted, split as {parts:?}"
    );
    assert_eq!(counted, blocks.len() as u64);
    let (merged, whole) = (merged.finish().unwrap(), whole.finish().unwrap());
    assert_eq!(merged, whole, "`{SPAN_METRICS}`");
    // Every exemplar names its span, whether it came from the head or a block's columns.
    let picked: Vec<_> = whole.iter().flat_map(|s| &s.exemplars).collect();
    assert_eq!(!picked.is_empty(), any_error, "{picked:?}");
    assert!(picked.iter().all(|e| e.span_id.is_some()), "{picked:?}");

    let filter = weft_traceql::parse("{ status = error }").unwrap();
    let field = {
        use weft_traceql::ast::{SpansetExpr, Stage};
        let q = weft_traceql::parse("{ span.user }").unwrap();
        let Some(Stage::Spanset(SpansetExpr::Filter(f))) = q.pipeline.stages.first() else {
            unreachable!()
        };
        f.expr.clone().unwrap()
    };
    let values = || ColumnTagValues::new(&filter, &field, window, 100).unwrap();
    let mut whole = values();
    node.scan_columns("t", window, &mut whole).await.unwrap();
    let mut merged = values();
    for part in &parts {
        let mut sink = values();
        node.scan_columns_part("t", window, part, &mut sink).await.unwrap();
        weft_engine::span_metrics::ColumnSink::merge(&mut merged, sink);
    }
    let set = |v: Vec<weft_traceql::Value>| {
        let mut v: Vec<String> = v.into_iter().map(|v| format!("{v:?}")).collect();
        v.sort();
        v
    };
    assert_eq!(set(merged.finish()), set(whole.finish()), "tag values of span.user");

    // The service graph of every trace, as a frontend splits it: the head here, each part's
    // blocks or row groups counted apart and merged as the wire carries them, the calls kept
    // aside resolved once at the end.
    let every = weft_traceql::parse("{ }").unwrap();
    let graph = || ServiceGraph::new(&every, window, u64::MAX).unwrap();
    let mut whole = graph();
    let whole_stats = node.scan_service_graph("t", window, &mut whole).await.unwrap();
    let mut merged = graph();
    node.scan_service_graph_head("t", window, &mut merged).await;
    let mut counted = 0;
    for part in &parts {
        let mut sink = merged.fork();
        counted += blocks_counted(
            &node
                .scan_service_graph_part("t", window, part, &mut sink)
                .await
                .unwrap(),
        );
        merged.merge_state(sink.into_state()).unwrap();
    }
    assert_eq!(
        counted,
        blocks_counted(&whole_stats),
        "graph: blocks counted, split as {parts:?}"
    );
    let mut stats = weft_querier::scan::ScanStats::default();
    node.resolve_service_graph("t", &mut merged, &mut stats).await.unwrap();
    assert_eq!(merged.unresolved_calls, 0, "split as {parts:?}");
    assert!(merged.complete() && whole.complete());
    assert_eq!(
        graph_shape(&merged),
        graph_shape(&whole),
        "service graph split as {parts:?}"
    );
    node.shutdown().await;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn parts_merged_give_the_whole_scan(
        traces in traces(),
        groups in proptest::collection::vec(0usize..3, 1..4),
        head_alone in any::<bool>(),
        by_row_group in any::<bool>(),
        limit in 1usize..8,
    ) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(check(traces, groups, head_alone, by_row_group, limit));
    }
}

/// A frontend's head part runs first; a block is cut from the head before the block parts
/// run, so the listing they read holds the head's traces again. Excluding the traces the head
/// part took that a listed block may hold (`ScanPart::exclude`) counts each trace once, as
/// one scan does; without it they count twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_cut_from_the_head_after_the_head_part_count_once_when_excluded() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::in_memory(dir.path(), 8).await;
    let tenant: Arc<str> = Arc::from("t");
    // Even traces in the first block, odd ones in the head.
    let traces: Vec<Vec<SpanSpec>> = (0..12)
        .map(|t| {
            (0..4)
                .map(|k| ((t + k) % 3, k == 3, if t % 2 == 0 { 0 } else { 3 }))
                .collect()
        })
        .collect();
    node.push(&tenant, request(&traces, 0)).await.unwrap();
    node.flush().await;
    node.push(&tenant, request(&traces, 3)).await.unwrap();
    let window = Some((BASE, BASE + 100_000_000));
    let query = weft_traceql::parse(TRACE_METRICS).unwrap();
    // Exemplars too: the same picks, span IDs and all, however the scan is split.
    let metrics = || {
        let mut m = Metrics::new(&query, BASE, BASE + 100_000_000, 10_000_000).unwrap();
        m.exemplars(6);
        m
    };

    let mut head_sink = metrics();
    let head = node
        .scan_part("t", window, &ScanPart::head_only(), &mut head_sink)
        .await
        .unwrap();
    let head_state = head_sink.into_state();
    node.flush().await; // the head's traces are in a block now
    let blocks = node.blocks("t");
    assert_eq!(blocks.len(), 2);
    let ids = blocks.iter().map(|b| b.meta.block_id.clone());
    let exclude: std::collections::HashSet<[u8; 16]> = head
        .handled()
        .iter()
        .filter(|id| blocks.iter().any(|b| !b.index.candidates(id).is_empty()))
        .copied()
        .collect();
    assert_eq!(exclude.len(), 6, "the odd traces moved into the new block");

    let mut whole = metrics();
    node.scan("t", window, &mut whole).await.unwrap();
    let whole = whole.finish().unwrap();

    // Without the exclusion, the moved traces count twice.
    let mut twice = metrics();
    twice.merge_state(head_state.clone()).unwrap();
    let mut sink = metrics();
    node.scan_part("t", window, &ScanPart::of_blocks(ids.clone()), &mut sink)
        .await
        .unwrap();
    twice.merge_state(sink.into_state()).unwrap();
    assert_ne!(twice.finish().unwrap(), whole, "the moved traces counted twice");

    let mut merged = metrics();
    merged.merge_state(head_state).unwrap();
    let mut part = ScanPart::of_blocks(ids);
    part.exclude = exclude;
    let mut sink = metrics();
    let mut outcome = node.scan_part("t", window, &part, &mut sink).await.unwrap();
    merged.merge_state(sink.into_state()).unwrap();
    outcome.forget(head.handled());
    node.finish_scan("t", window, vec![head, outcome], &mut merged)
        .await
        .unwrap();
    assert_eq!(merged.finish().unwrap(), whole);
    node.shutdown().await;
}
