//! The service graph from columns, row groups counted on the query workers and merged in
//! order, equals the graph of the same spans offered as whole traces, at every parallelism and
//! span budget: traces split between row groups, blocks and the head included.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Node, graph_shape as shape};
use weft_engine::graph::ServiceGraph;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, Status};

const BASE: u64 = 1_700_000_000_000_000_000;
const TRACES: u64 = 300;
const SERVICES: [&str; 4] = ["frontend", "cart", "payments", "db"];

fn trace_id(t: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&t.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    id[15] = 7;
    id
}

/// Trace `t`: a root server span of service `t % 4`, a client span under it, and a server span
/// of the next service under that (an edge), then a call on from there for every third trace.
/// Span `k` of it is `(service, parent index, kind, error)`.
fn spans_of(t: u64) -> Vec<(usize, Option<usize>, i32, bool)> {
    let s = (t % 4) as usize;
    let mut v = vec![
        (s, None, 2, false),
        (s, Some(0), 3, t.is_multiple_of(5)),
        ((s + 1) % 4, Some(1), 2, t.is_multiple_of(7)),
    ];
    if t.is_multiple_of(3) {
        v.push(((s + 1) % 4, Some(2), 3, false));
        v.push(((s + 2) % 4, Some(3), 2, t.is_multiple_of(11)));
    }
    v
}

/// Span `k` of trace `t`, of the spans `keep` selects, as export requests (one resource per
/// service).
fn request(traces: impl Iterator<Item = u64>, keep: impl Fn(u64, usize) -> bool) -> Bytes {
    use prost::Message;
    let mut by_service: Vec<Vec<Span>> = vec![Vec::new(); SERVICES.len()];
    for t in traces {
        let start = BASE + t * 1_000_000;
        for (k, (service, parent, kind, error)) in spans_of(t).into_iter().enumerate() {
            if !keep(t, k) {
                continue;
            }
            by_service[service].push(Span {
                trace_id: trace_id(t).to_vec().into(),
                span_id: (t * 16 + k as u64 + 1).to_be_bytes().to_vec().into(),
                parent_span_id: parent
                    .map(|p| (t * 16 + p as u64 + 1).to_be_bytes().to_vec().into())
                    .unwrap_or_default(),
                name: format!("op{k}"),
                kind,
                start_time_unix_nano: start + k as u64 * 1_000,
                end_time_unix_nano: start + k as u64 * 1_000 + 1_000 * (t % 97 + 1),
                status: Some(Status {
                    code: if error { 2 } else { 0 },
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    let req = ExportTraceServiceRequest {
        resource_spans: by_service
            .into_iter()
            .enumerate()
            .map(|(i, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".to_owned(),
                        value: Some(AnyValue {
                            value: Some(V::StringValue(SERVICES[i].to_owned())),
                        }),
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    };
    Bytes::from(req.encode_to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_groups_counted_on_workers_give_the_whole_trace_graph() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::in_memory(dir.path(), 16).await;
    let tenant: Arc<str> = Arc::from("t");
    // Three blocks and the head. Every fourth trace has its calls (spans 2 and up) stored in
    // the next part, apart from its root: split between blocks, and between a block and the
    // head.
    let split = |t: u64| t % 4 == 1;
    for part in 0..4u64 {
        let here = |t: u64| t * 4 / TRACES == part;
        let before = |t: u64| part > 0 && (t * 4 / TRACES) == part - 1 && split(t);
        node.push(
            &tenant,
            request((0..TRACES).filter(|&t| here(t) || before(t)), |t, k| {
                if !here(t) {
                    k >= 2
                } else {
                    !(split(t) && part < 3) || k < 2
                }
            }),
        )
        .await
        .unwrap();
        if part < 3 {
            node.flush().await;
        }
    }
    let query = weft_traceql::parse("{ }").unwrap();
    let mut whole = ServiceGraph::new(&query, None, u64::MAX).unwrap();
    // The trace path: every trace assembled whole, then counted.
    let mut node = node;
    node.scan("t", None, &mut whole).await.unwrap();
    let want = shape(&whole);
    assert_eq!(want.0.len(), SERVICES.len(), "{want:?}");
    let calls: u64 = want.1.iter().map(|e| e.2).sum();
    // One call per trace, and one more for every third.
    assert_eq!(calls, TRACES + TRACES.div_ceil(3), "{want:?}");
    for parallelism in [1, 2, 3, 8] {
        node = node.with_parallelism(parallelism);
        let mut g = ServiceGraph::new(&query, None, u64::MAX).unwrap();
        let stats = node.scan_service_graph("t", None, &mut g).await.unwrap();
        assert!(g.complete());
        assert!(stats.split_traces > 0, "split traces are read whole: {stats:?}");
        assert_eq!(g.unresolved_calls, 0);
        assert_eq!(shape(&g), want, "parallelism {parallelism}");
        // A budget stops at the same row group whatever the parallelism.
        let mut small = ServiceGraph::new(&query, None, 200).unwrap();
        node.scan_service_graph("t", None, &mut small).await.unwrap();
        assert!(!small.complete());
        let mut one = ServiceGraph::new(&query, None, 200).unwrap();
        let again = node.with_parallelism(1);
        again.scan_service_graph("t", None, &mut one).await.unwrap();
        assert_eq!(shape(&small), shape(&one), "parallelism {parallelism}, budget 200");
        assert_eq!(small.inspected_spans, one.inspected_spans);
        node = again;
    }
}
