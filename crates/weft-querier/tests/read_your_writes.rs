//! The write path end to end, read back through the querier, in process: push → WAL → head →
//! block → find_trace, and restarts.

mod common;

use bytes::Bytes;
use common::Node;
use prost::Message;
use std::sync::Arc;
use weft_admission::{PushError, PushOutcome};
use weft_ingest::IngestConfig;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::trace::Span;
use weft_storage::LocalStorage;

fn request(trace: u8, spans: u8) -> Bytes {
    let spans = (0..spans)
        .map(|i| Span {
            trace_id: vec![trace; 16].into(),
            span_id: vec![trace, i + 1, 0, 0, 0, 0, 0, 1].into(),
            name: format!("s{i}"),
            start_time_unix_nano: 1_000 + u64::from(i),
            end_time_unix_nano: 2_000,
            ..Default::default()
        })
        .collect();
    common::export(spans)
}

async fn open(dir: &std::path::Path, cfg: IngestConfig) -> Node {
    let storage = Arc::new(LocalStorage::new(dir).unwrap());
    Node::open(
        IngestConfig {
            data_dir: dir.to_path_buf(),
            ..cfg
        },
        Default::default(),
        storage,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_spans_are_readable_from_head_blocks_and_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t: Arc<str> = Arc::from("t1");
    let ing = open(dir.path(), IngestConfig::default()).await;
    let out = ing.push(&t, request(7, 3)).await.unwrap();
    assert_eq!(out.accepted_spans, 3);
    assert_eq!(
        ing.find_trace("t1", &[7; 16], None).await.unwrap().len(),
        3,
        "readable from the head at once"
    );
    assert!(
        ing.find_trace("other", &[7; 16], None).await.unwrap().is_empty(),
        "tenants are isolated"
    );
    ing.flush().await;
    assert_eq!(ing.db.block_count(), 1);
    ing.push(&t, request(7, 5)).await.unwrap(); // span ids 1..3 repeat: a client retry
    let rows = ing.find_trace("t1", &[7; 16], None).await.unwrap();
    assert_eq!(rows.len(), 5, "head and block merged, duplicates removed");
    ing.shutdown().await;
    drop(ing);
    let ing = open(dir.path(), IngestConfig::default()).await;
    assert_eq!(
        ing.find_trace("t1", &[7; 16], None).await.unwrap().len(),
        5,
        "after restart"
    );
    ing.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_skips_records_already_in_blocks() {
    // Regression: a crash after a block is written but before its WAL segments are deleted
    // must not put those spans into the head a second time.
    let dir = tempfile::tempdir().unwrap();
    let t: Arc<str> = Arc::from("t1");
    let ing = open(dir.path(), IngestConfig::default()).await;
    ing.push(&t, request(1, 4)).await.unwrap();
    ing.shutdown().await;
    drop(ing);
    let wal_copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir.path().join("wal")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), wal_copy.path().join(e.file_name())).unwrap();
    }
    let ing = open(dir.path(), IngestConfig::default()).await;
    assert_eq!(ing.head_span_count(), 4);
    ing.flush().await;
    ing.shutdown().await;
    drop(ing);
    // Put the old segments back, as if the deletion never happened.
    for e in std::fs::read_dir(wal_copy.path()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join("wal").join(e.file_name())).unwrap();
    }
    let ing = open(dir.path(), IngestConfig::default()).await;
    assert_eq!(ing.head_span_count(), 0, "covered records are skipped on replay");
    assert_eq!(ing.find_trace("t1", &[1; 16], None).await.unwrap().len(), 4);
    ing.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_refuse_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let t: Arc<str> = Arc::from("t1");
    let one = request(3, 1).len() as u64;
    // A burst of ten five-span requests: the loop below must run out of it.
    let burst = 10 * request(100, 5).len() as u64;
    let ing = open(
        dir.path(),
        IngestConfig {
            max_trace_bytes: 5 * one,
            rate_bytes: 1,
            burst_bytes: burst,
            ..IngestConfig::default()
        },
    )
    .await;
    assert!(matches!(
        ing.push(&t, Bytes::from_static(b"\xff\xff")).await,
        Err(PushError::Invalid(_))
    ));
    // 4 spans fit; the next 4 of the same trace do not.
    assert_eq!(ing.push(&t, request(3, 4)).await.unwrap().rejected_spans, 0);
    // Every span over the limit: a partial success rejecting all of them (OTLP: valid data
    // the server will not keep), with nothing stored.
    match ing.push(&t, request(3, 4)).await {
        Ok(PushOutcome {
            accepted_spans: 0,
            rejected_spans: 4,
            message,
        }) => assert!(message.contains("trace too large"), "{message}"),
        other => panic!("expected every span rejected as too large, got {other:?}"),
    }
    assert_eq!(
        ing.find_trace("t1", &[3; 16], None).await.unwrap().len(),
        4,
        "the stored part stays readable"
    );
    // Exhaust the burst.
    let mut limited = false;
    for i in 0..20u8 {
        if let Err(PushError::RateLimited { retry_after, .. }) = ing.push(&t, request(100u8.wrapping_add(i), 5)).await {
            assert!(retry_after.as_secs_f64() > 0.0);
            limited = true;
            break;
        }
    }
    assert!(limited, "rate limit must trigger");
    ing.shutdown().await;
}

/// `spans` spans of trace `trace`, each with a string attribute `user`.
fn request_with_user(trace: u8, spans: u8) -> Bytes {
    use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value};
    let mut req = ExportTraceServiceRequest::decode(request(trace, spans)).unwrap();
    for s in &mut req.resource_spans[0].scope_spans[0].spans {
        s.attributes.push(KeyValue {
            key: "user".into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(format!("u{}", s.span_id[1]))),
            }),
        });
    }
    Bytes::from(req.encode_to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_as_large_as_a_final_block_is_written_as_compaction_would() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = IngestConfig {
        final_block_spans: 6,
        ..IngestConfig::default()
    };
    let ing = open(dir.path(), cfg).await;
    let (small, large): (Arc<str>, Arc<str>) = (Arc::from("small"), Arc::from("large"));
    ing.push(&small, request_with_user(1, 5)).await.unwrap();
    ing.push(&large, request_with_user(2, 6)).await.unwrap();
    ing.flush().await;
    // Both are head cuts (level 0); only the tenant whose part reached the final tier gets
    // the value blooms compaction would have added, since nothing will rewrite its block.
    let only = |t: &str| {
        let blocks = ing.db.blocks(t);
        assert_eq!(blocks.len(), 1, "{t}");
        blocks[0].clone()
    };
    let (s, l) = (only("small"), only("large"));
    assert_eq!((s.meta.compaction_level, l.meta.compaction_level), (0, 0));
    assert!(s.index.value_blooms.is_empty(), "a small cut is written cheaply");
    assert_eq!(l.index.value_blooms.len(), l.meta.row_groups as usize);
    assert!(l.index.value_blooms[0].may_contain_bytes(b"u3"));
    assert_eq!(ing.find_trace("large", &[2; 16], None).await.unwrap().len(), 6);
    ing.shutdown().await;
}
