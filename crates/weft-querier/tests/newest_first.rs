//! A search with `limit N` returns the N matching traces that start last, latest first (ties
//! by trace ID), whatever the query parallelism, and stops reading once no unread row group
//! can hold a later match.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::Node;
use weft_engine::search::{Search, SearchParams};
use weft_otlp::pb::trace::Span;

const BASE: u64 = 1_700_000_000_000_000_000;
const TRACES: u64 = 400;

/// Trace `t` has one span, named "even" or "odd", starting `start(t)`.
fn trace_id(t: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&(t.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes());
    id[15] = 1;
    id
}

/// Start times in a scrambled order, several traces sharing some (ties).
fn start(t: u64) -> u64 {
    BASE + (t * 7919 % TRACES) / 2 * 1_000_000
}

fn request(traces: std::ops::Range<u64>, keep: &dyn Fn(u64) -> bool) -> Bytes {
    let spans = traces
        .filter(|&t| keep(t))
        .map(|t| Span {
            trace_id: trace_id(t).to_vec().into(),
            span_id: (t + 1).to_be_bytes().to_vec().into(),
            name: if t % 2 == 0 { "even" } else { "odd" }.into(),
            start_time_unix_nano: start(t),
            end_time_unix_nano: start(t) + 1_000,
            ..Default::default()
        })
        .collect();
    common::export(spans)
}

/// The `limit` matching traces that start last, latest first, ties by trace ID.
fn newest(matches: impl Fn(u64) -> bool, limit: usize) -> Vec<[u8; 16]> {
    latest_keys(
        (0..TRACES).filter(|&t| matches(t)).map(|t| (start(t), trace_id(t))),
        limit,
    )
}

/// The IDs of the `limit` latest keys, latest first, ties by trace ID.
fn latest_keys(keys: impl Iterator<Item = (u64, [u8; 16])>, limit: usize) -> Vec<[u8; 16]> {
    let mut all: Vec<(u64, [u8; 16])> = keys.collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    all.into_iter().take(limit).map(|(_, id)| id).collect()
}

/// A search of `query` with `limit` on the node's tenant "t": the trace IDs in order, and what
/// it read.
async fn search(node: &Node, query: &str, limit: usize) -> (Vec<[u8; 16]>, weft_querier::scan::ScanStats) {
    let q = weft_traceql::parse(query).unwrap();
    let params = SearchParams {
        limit,
        ..Default::default()
    };
    let mut sink = Search::new(&q, params).unwrap();
    let stats = node.scan("t", None, &mut sink).await.unwrap();
    (sink.finish().into_iter().map(|h| h.trace_id).collect(), stats)
}

/// A search in Zipkin's order ([`ByRoot`]) with `limit`, as [`search`].
async fn zipkin_search(node: &Node, all: bool, limit: usize) -> (Vec<[u8; 16]>, weft_querier::scan::ScanStats) {
    use weft_engine::newest::{Newest, Order};
    let q = weft_traceql::parse("{ }").unwrap();
    let prefilter = weft_engine::prefilter::Prefilter::new(&q);
    let mut sink = Newest::new(prefilter, Arc::new(ByRoot(all)), Order::SpanStartMicros, limit);
    let stats = node.scan("t", None, &mut sink).await.unwrap();
    (sink.into_traces().iter().map(|t| t[0].trace_id).collect(), stats)
}

/// A node holding the traces, `request` making each request: blocks cut by time, four blocks
/// of a fifth of the range each (their rows in trace ID order, so every row group spans its
/// block's time), then the oldest fifth in the head.
async fn load(dir: &std::path::Path, request: fn(std::ops::Range<u64>, &dyn Fn(u64) -> bool) -> Bytes) -> Node {
    let node = Node::in_memory(dir, 16).await;
    let tenant: Arc<str> = Arc::from("t");
    let slice = |t: u64| (start(t) - BASE) / 1_000_000 * 5 / (TRACES / 2);
    for part in [1, 2, 3, 4, 0] {
        node.push(&tenant, request(0..TRACES, &|t| slice(t) == part))
            .await
            .unwrap();
        if part != 0 {
            node.flush().await;
        }
    }
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_matches_latest_first_and_early() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = load(dir.path(), request).await;
    for parallelism in [1, 2, 3, 8] {
        node = node.with_parallelism(parallelism);
        for (query, matches) in [
            ("{ }", (|_| true) as fn(u64) -> bool),
            ("{ name = \"odd\" }", |t| t % 2 == 1),
        ] {
            for limit in [1, 7, 20] {
                let (got, stats) = search(&node, query, limit).await;
                assert_eq!(
                    got,
                    newest(matches, limit),
                    "`{query}` limit {limit}, parallelism {parallelism}"
                );
                assert!(
                    stats.skipped_row_groups > 0 && stats.inspected_spans < TRACES,
                    "`{query}` limit {limit}, parallelism {parallelism}: stops early ({stats:?})"
                );
            }
        }
    }
    node.shutdown().await;
}

/// Zipkin's order: the trace's timestamp is its root span's start (µs), which clock skew can
/// put after its other spans. Each trace here has a child starting at `start(t)` and a root;
/// every fifth root starts 150 ms late, later than the traces of the next blocks start.
fn root_start(t: u64) -> u64 {
    start(t) + if t.is_multiple_of(5) { 150_000_000 } else { 0 }
}

fn request_with_roots(traces: std::ops::Range<u64>, keep: &dyn Fn(u64) -> bool) -> Bytes {
    let spans = traces
        .filter(|&t| keep(t))
        .flat_map(|t| {
            let root = Span {
                trace_id: trace_id(t).to_vec().into(),
                span_id: (t + 1).to_be_bytes().to_vec().into(),
                name: if t % 2 == 0 { "even" } else { "odd" }.into(),
                start_time_unix_nano: root_start(t),
                end_time_unix_nano: root_start(t) + 1_000,
                ..Default::default()
            };
            let child = Span {
                span_id: (t + 1 + (1 << 40)).to_be_bytes().to_vec().into(),
                parent_span_id: root.span_id.clone(),
                start_time_unix_nano: start(t),
                end_time_unix_nano: start(t) + 1_000,
                ..root.clone()
            };
            [root, child]
        })
        .collect();
    common::export(spans)
}

/// Matches "odd" roots (or every trace), keyed by the root span's start in µs.
struct ByRoot(bool);

impl weft_engine::newest::Matcher for ByRoot {
    fn key(&self, rows: &[weft_block::row::SpanRow]) -> Option<u64> {
        let root = rows.iter().find(|r| r.parent_span_id == [0; 8])?;
        (self.0 || root.name == "odd").then_some((root.start_unix_nano + 500) / 1000)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_zipkins_order_the_newest_roots_first_and_early_even_with_skewed_roots() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = load(dir.path(), request_with_roots).await;
    let want = |all: bool, limit: usize| -> Vec<[u8; 16]> {
        let keys = (0..TRACES).filter(|&t| all || t % 2 == 1);
        latest_keys(keys.map(|t| ((root_start(t) + 500) / 1000, trace_id(t))), limit)
    };
    for parallelism in [1, 2, 8] {
        node = node.with_parallelism(parallelism);
        for all in [true, false] {
            for limit in [1, 7, 20] {
                let (got, stats) = zipkin_search(&node, all, limit).await;
                assert_eq!(
                    got,
                    want(all, limit),
                    "all {all}, limit {limit}, parallelism {parallelism}"
                );
                assert!(
                    stats.skipped_row_groups > 0 && stats.inspected_spans < 2 * TRACES,
                    "all {all}, limit {limit}, parallelism {parallelism}: stops early ({stats:?})"
                );
            }
        }
    }
    node.shutdown().await;
}

/// The head holds its traces in arrival order, not by start: here mostly by start with jitter,
/// the trace that starts last arriving first and a late span of the oldest trace arriving
/// last. A first page from the head is still exactly the newest matches, and it stops before
/// reading every chunk of the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_the_head_the_newest_matches_latest_first_and_early() {
    const N: u64 = 3000;
    let starts = |t: u64| -> u64 {
        match t {
            1 => BASE + (N + 500) * 1_000_000,
            _ => BASE + t * 1_000_000 + (t * 7919 % 97) * 1_000_000,
        }
    };
    let span = |t: u64, k: u64, start: u64| Span {
        trace_id: trace_id(t).to_vec().into(),
        span_id: (t * 4 + k + 1).to_be_bytes().to_vec().into(),
        name: if t.is_multiple_of(2) { "even" } else { "odd" }.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1_000,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::in_memory(dir.path(), 16).await;
    let tenant: Arc<str> = Arc::from("t");
    let mut arrival: Vec<u64> = (0..N).collect();
    arrival.swap(0, 1); // trace 1, the latest start, arrives first
    for batch in arrival.chunks(100) {
        let spans = batch.iter().map(|&t| span(t, 0, starts(t))).collect();
        node.push(&tenant, common::export(spans)).await.unwrap();
    }
    // A child of trace 0 (the earliest start) starting after every other span, arriving last:
    // trace 0 still starts first.
    let late = span(0, 1, BASE + (N + 900) * 1_000_000);
    node.push(&tenant, common::export(vec![late])).await.unwrap();
    assert!(node.blocks("t").is_empty(), "everything in the head");
    let want = |matches: fn(u64) -> bool, limit: usize| -> Vec<[u8; 16]> {
        latest_keys((0..N).filter(|&t| matches(t)).map(|t| (starts(t), trace_id(t))), limit)
    };
    for parallelism in [1, 2, 8] {
        node = node.with_parallelism(parallelism);
        for (query, matches) in [
            ("{ }", (|_| true) as fn(u64) -> bool),
            ("{ name = \"odd\" }", |t| t % 2 == 1),
            ("{ name = \"even\" }", |t| t.is_multiple_of(2)),
        ] {
            for limit in [1, 7, 20, 600] {
                let (got, stats) = search(&node, query, limit).await;
                let what = format!("`{query}` limit {limit}, parallelism {parallelism}");
                assert_eq!(got, want(matches, limit), "{what}");
                if limit <= 20 {
                    assert!(stats.inspected_spans < N / 2, "{what}: stops early ({stats:?})");
                }
            }
        }
        // Zipkin's order: by a span's start (here the earliest root's), the latest start of
        // each trace's spans bounding it.
        for all in [true, false] {
            for limit in [1, 7, 20, 600] {
                let (got, stats) = zipkin_search(&node, all, limit).await;
                let keys = (0..N).filter(|&t| all || t % 2 == 1);
                let want = latest_keys(keys.map(|t| ((starts(t) + 500) / 1000, trace_id(t))), limit);
                let what = format!("Zipkin's order, all {all}, limit {limit}, parallelism {parallelism}");
                assert_eq!(got, want, "{what}");
                if limit <= 20 {
                    assert!(stats.inspected_spans < N / 2, "{what}: stops early ({stats:?})");
                }
            }
        }
    }
    node.shutdown().await;
}
