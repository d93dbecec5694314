//! Damaged blocks against a model (issue 45): any damage to any file of a block, on a local
//! directory and on a real S3-compatible server, never takes a query down, never serves a
//! wrong span, and never leaves spans out without saying so.
//!
//! Three blocks of known traces are written once through the real write path. Each case lays
//! them out again, damages one file of one block (truncated at any offset, deleted, a range
//! zeroed, a range flipped), then opens the block database as a restart would and runs every
//! query kind twice (the first may be the one that finds the damage): the trace scan behind
//! search, the column scans behind metrics and tags, the service graph, and trace by ID for
//! every trace, then one scrubber round. The model: every healthy trace reads back exactly; a
//! trace of the damaged block reads back exactly or not at all, and not at all only in an
//! answer marked partial; only the damaged block is ever quarantined, and it is quarantined
//! once the scrubber has run if any of its bytes changed (every byte is covered by a check); compaction then merges the healthy blocks and loses none
//! of their spans; and a restart after it still reads them and still says what is missing.
//!
//! A storage that fails reads the way an unreachable S3 does (the error after the retries) is
//! the other half: every query fails with a transient error, nothing is quarantined, and once
//! the storage answers again every trace reads back.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use common::Node;
use proptest::prelude::*;
use prost::Message;
use weft_block::row::SpanRow;
use weft_db::compact::{CompactionConfig, Compactor};
use weft_db::recent::NoRecentSpans;
use weft_db::{Db, DbOptions};
use weft_engine::graph::ServiceGraph;
use weft_engine::prefilter::Prefilter;
use weft_engine::search::TraceSink;
use weft_engine::span_metrics::SpanMetrics;
use weft_engine::tags::ColumnTagNames;
use weft_ingest::IngestConfig;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span};
use weft_querier::{Querier, QuerierConfig};
use weft_storage::{LocalStorage, ObjectMeta, S3Storage, Storage, StorageError};

#[path = "../../weft-storage/tests/support/s3_server.rs"]
mod s3_server;

const TENANT: &str = "t";
const BLOCKS: usize = 3;
const TRACES_PER_BLOCK: u8 = 6;
const SPANS_PER_TRACE: u8 = 3;
const BASE: u64 = 1_700_000_000_000_000_000;
const FILES: [&str; 3] = ["data.parquet", "index.bin", "meta.json"];

fn trace_id(block: usize, i: u8) -> [u8; 16] {
    [(block as u8) * 16 + i + 1; 16]
}

fn span_id(tid: &[u8; 16], s: u8) -> [u8; 8] {
    [tid[0], s + 1, 0, 0, 0, 0, 0, 1]
}

/// The request of block `block`: its traces, a root and two children each, from its service.
fn request(block: usize) -> Bytes {
    let mut spans = Vec::new();
    for i in 0..TRACES_PER_BLOCK {
        let tid = trace_id(block, i);
        for s in 0..SPANS_PER_TRACE {
            let start = BASE + (block as u64) * 1_000_000_000 + u64::from(i) * 1_000_000 + u64::from(s);
            spans.push(Span {
                trace_id: tid.to_vec().into(),
                span_id: span_id(&tid, s).to_vec().into(),
                parent_span_id: if s == 0 {
                    Bytes::new()
                } else {
                    span_id(&tid, 0).to_vec().into()
                },
                name: format!("op-{s}"),
                kind: if s == 0 { 2 } else { 3 },
                start_time_unix_nano: start,
                end_time_unix_nano: start + 500_000,
                attributes: vec![KeyValue {
                    key: "http.route".into(),
                    value: Some(AnyValue {
                        value: Some(V::StringValue(format!("/r/{i}"))),
                    }),
                }],
                ..Default::default()
            });
        }
    }
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(V::StringValue(format!("svc-{block}"))),
                    }),
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Bytes::from(req.encode_to_vec())
}

/// The objects of the three blocks, written once: (path, bytes), and each block's folder,
/// oldest first.
struct Pristine {
    objects: Vec<(String, Bytes)>,
    folders: Vec<String>,
}

fn pristine() -> &'static Pristine {
    static P: OnceLock<Pristine> = OnceLock::new();
    // Built on a thread of its own: callers may be inside a runtime already.
    P.get_or_init(|| std::thread::spawn(build_pristine).join().unwrap())
}

fn build_pristine() -> Pristine {
    {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path().join("store")).unwrap());
            let cfg = IngestConfig {
                data_dir: dir.path().join("wal"),
                // Several row groups per block, and traces that cross them.
                row_group_rows: 4,
                ..Default::default()
            };
            let node = Node::open(cfg, CompactionConfig::default(), storage.clone()).await;
            let tenant: Arc<str> = TENANT.into();
            for b in 0..BLOCKS {
                node.push(&tenant, request(b)).await.unwrap();
                node.flush().await;
            }
            node.shutdown().await;
            let listed: Vec<ObjectMeta> = storage.list("blocks/").await.unwrap();
            let mut objects = Vec::new();
            for o in listed {
                objects.push((o.path.clone(), storage.get(&o.path).await.unwrap()));
            }
            let folders: BTreeSet<String> = objects
                .iter()
                .filter(|(p, _)| p.ends_with("/meta.json"))
                .map(|(p, _)| p.trim_end_matches("/meta.json").to_owned())
                .collect();
            assert_eq!(folders.len(), BLOCKS, "one block per flush: {folders:?}");
            Pristine {
                objects,
                // UUIDv7 block IDs sort by creation time.
                folders: folders.into_iter().collect(),
            }
        })
    }
}

#[derive(Debug, Clone)]
enum Damage {
    /// Cut the file at this fraction of its length.
    Truncate(f64),
    Delete,
    /// Zero `len` bytes from this fraction of the length.
    Zero(f64, usize),
    /// XOR `len` bytes from this fraction of the length with the mask.
    Flip(f64, usize, u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (0.0..1.0f64).prop_map(Damage::Truncate),
        Just(Damage::Delete),
        (0.0..1.0f64, 1..4096usize).prop_map(|(at, n)| Damage::Zero(at, n)),
        (0.0..1.0f64, 1..64usize, 1..=255u8).prop_map(|(at, n, m)| Damage::Flip(at, n, m)),
    ]
}

fn span_of(at: f64, len: usize) -> Range<usize> {
    let start = ((at * len as f64) as usize).min(len.saturating_sub(1));
    start..len
}

/// Damages the object at `path`. Returns whether its bytes changed (zeroing zeros does not).
async fn apply(storage: &dyn Storage, path: &str, d: &Damage) -> bool {
    let bytes = storage.get(path).await.unwrap();
    let mut b = bytes.to_vec();
    match d {
        Damage::Truncate(at) => b.truncate(span_of(*at, b.len()).start),
        Damage::Delete => {
            storage.delete(path).await.unwrap();
            return true;
        }
        Damage::Zero(at, n) => {
            let r = span_of(*at, b.len());
            let end = (r.start + n).min(r.end);
            b[r.start..end].fill(0);
        }
        Damage::Flip(at, n, mask) => {
            let r = span_of(*at, b.len());
            let end = (r.start + n).min(r.end);
            b[r.start..end].iter_mut().for_each(|x| *x ^= mask);
        }
    }
    let changed = b[..] != bytes[..];
    storage.put(path, Bytes::from(b)).await.unwrap();
    changed
}

/// Every trace: its span IDs, as written.
fn expected() -> BTreeMap<[u8; 16], (usize, BTreeSet<[u8; 8]>)> {
    let mut m = BTreeMap::new();
    for b in 0..BLOCKS {
        for i in 0..TRACES_PER_BLOCK {
            let tid = trace_id(b, i);
            m.insert(tid, (b, (0..SPANS_PER_TRACE).map(|s| span_id(&tid, s)).collect()));
        }
    }
    m
}

fn span_ids(rows: &[SpanRow]) -> BTreeSet<[u8; 8]> {
    rows.iter().map(|r| r.span_id).collect()
}

/// Collects every trace a scan offers.
struct Collect {
    prefilter: Prefilter,
    traces: BTreeMap<[u8; 16], BTreeSet<[u8; 8]>>,
}

impl TraceSink for Collect {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }
    fn offer(&mut self, rows: &[SpanRow]) {
        let prev = self.traces.insert(rows[0].trace_id, span_ids(rows));
        assert!(prev.is_none(), "a trace was offered twice");
    }
}

fn all() -> weft_traceql::ast::Query {
    weft_traceql::parse("{ }").unwrap()
}

/// Checks a trace read back (`got`: its spans, `None` when absent) against the model: exact,
/// or absent (or short) only where the answer says it is partial.
fn check_trace(what: &str, tid: &[u8; 16], want: &BTreeSet<[u8; 8]>, got: Option<&BTreeSet<[u8; 8]>>, partial: bool) {
    match got {
        Some(g) if g == want => {}
        Some(g) => {
            assert!(
                g.is_subset(want),
                "{what}: trace {tid:02x?} has spans never written: {g:02x?}"
            );
            assert!(
                partial,
                "{what}: trace {tid:02x?} lacks spans and the answer is not partial"
            );
        }
        None => assert!(
            partial,
            "{what}: trace {tid:02x?} is missing and the answer is not partial"
        ),
    }
}

/// Runs every query kind against `q` and checks the answers against the model, where block
/// `damaged` (if any) may be damaged. Returns whether any answer was partial.
async fn check_queries(q: &Querier, damaged: Option<usize>, round: &str) -> bool {
    let want = expected();
    let mut any_partial = false;

    let mut sink = Collect {
        prefilter: Prefilter::new(&all()),
        traces: BTreeMap::new(),
    };
    let stats = q
        .scan(TENANT, None, &mut sink)
        .await
        .unwrap_or_else(|e| panic!("{round}: search failed: {e}"));
    let partial = stats.damaged_blocks > 0;
    any_partial |= partial;
    for (tid, (b, spans)) in &want {
        let got = sink.traces.get(tid);
        if Some(*b) != damaged {
            assert_eq!(got, Some(spans), "{round}: search: healthy trace {tid:02x?}");
        }
        check_trace(&format!("{round}: search"), tid, spans, got, partial);
    }
    assert!(
        sink.traces.keys().all(|t| want.contains_key(t)),
        "{round}: search invented a trace"
    );

    let end = BASE + 10_000_000_000;
    let mut m = SpanMetrics::new(
        &weft_traceql::parse("{ } | count_over_time() by (resource.service.name)").unwrap(),
        BASE,
        end,
        1_000_000_000,
    )
    .unwrap()
    .expect("span-local");
    let stats = q
        .scan_columns(TENANT, Some((BASE, end)), &mut m)
        .await
        .unwrap_or_else(|e| panic!("{round}: metrics failed: {e}"));
    any_partial |= stats.damaged_blocks > 0;
    let series = m.finish().unwrap();
    let count = |svc: &str| -> f64 {
        series
            .iter()
            .filter(|s| format!("{:?}", s.labels).contains(svc))
            .flat_map(|s| s.values.iter().flatten().copied())
            .sum()
    };
    let per_block = f64::from(TRACES_PER_BLOCK) * f64::from(SPANS_PER_TRACE);
    for b in 0..BLOCKS {
        let n = count(&format!("svc-{b}"));
        if Some(b) == damaged && n != per_block {
            assert!(
                stats.damaged_blocks > 0,
                "{round}: metrics left out spans of svc-{b} ({n}) unannounced"
            );
            assert!(n <= per_block, "{round}: metrics counted spans never written");
        } else {
            assert_eq!(n, per_block, "{round}: metrics of svc-{b}");
        }
    }

    let mut names = ColumnTagNames::new(&all(), None, 1000).expect("columns");
    let stats = q
        .scan_columns(TENANT, None, &mut names)
        .await
        .unwrap_or_else(|e| panic!("{round}: tag names failed: {e}"));
    any_partial |= stats.damaged_blocks > 0;

    let mut g = ServiceGraph::new(&all(), None, 1_000_000).unwrap();
    let stats = q
        .scan_service_graph(TENANT, None, &mut g)
        .await
        .unwrap_or_else(|e| panic!("{round}: service graph failed: {e}"));
    any_partial |= stats.damaged_blocks > 0;

    for (tid, (b, spans)) in &want {
        let found = q
            .find_trace_capped(TENANT, tid, None, 1 << 30)
            .await
            .unwrap_or_else(|e| panic!("{round}: trace by ID failed: {e}"));
        let got = (!found.rows.is_empty()).then(|| span_ids(&found.rows));
        if Some(*b) != damaged {
            assert_eq!(
                got.as_ref(),
                Some(spans),
                "{round}: trace by ID: healthy trace {tid:02x?}"
            );
        }
        check_trace(
            &format!("{round}: trace by ID"),
            tid,
            spans,
            got.as_ref(),
            found.damaged_blocks > 0,
        );
        any_partial |= found.damaged_blocks > 0;
    }
    any_partial
}

fn block_id(folder: &str) -> &str {
    folder.rsplit('/').next().unwrap()
}

/// One case: lay the blocks out in `storage` (empty), damage `file` of block `block`, and
/// check the model through a restart, the queries, compaction and another restart.
async fn run_case(storage: Arc<dyn Storage>, block: usize, file: usize, d: Damage) {
    let p = pristine();
    for (path, bytes) in &p.objects {
        storage.put(path, bytes.clone()).await.unwrap();
    }
    let victim = &p.folders[block];
    let changed = apply(&*storage, &format!("{victim}/{}", FILES[file]), &d).await;

    let db = Db::open(storage.clone(), DbOptions::default())
        .await
        .expect("opening the block database never fails on a damaged block");
    let q = Querier::new(db.clone(), Arc::new(NoRecentSpans), QuerierConfig::default());
    let mut partial = false;
    for round in ["first", "second"] {
        partial |= check_queries(&q, Some(block), round).await;
    }
    // The scrubber finds whatever the queries did not read: every changed byte is covered by
    // a check, so a changed block is quarantined now, and every later answer says so.
    weft_db::scrub::Scrubber::new(
        db.clone(),
        weft_db::scrub::ScrubConfig {
            bytes_per_second: 1 << 40,
            ..Default::default()
        },
    )
    .round()
    .await;
    let quarantined: Vec<String> = db.quarantined().iter().map(|q| q.block.clone()).collect();
    assert_eq!(
        changed,
        quarantined.iter().any(|id| id == block_id(victim)),
        "changed bytes must quarantine the block, and unchanged ones must not (quarantined: {quarantined:?})"
    );
    if changed {
        assert!(check_queries(&q, Some(block), "after the scrubber").await);
    }
    for (b, f) in p.folders.iter().enumerate() {
        if b != block {
            assert!(
                !quarantined.iter().any(|id| id == block_id(f)),
                "healthy block {b} quarantined"
            );
        }
    }
    if !quarantined.is_empty() {
        assert!(partial, "a block was quarantined and no answer said it was partial");
        assert_eq!(db.quarantined_overlapping(TENANT, None), 1);
    }

    // Compaction merges what is healthy and loses none of it. Blocks of 18 spans: with a
    // largest block of 72 and a fanout of 2, any two of them make a final block.
    let compactor = Compactor::new(
        db.clone(),
        CompactionConfig {
            interval: None,
            max_inputs: BLOCKS,
            max_block_spans: 72,
            fanout: 2,
            delete_grace: std::time::Duration::ZERO,
            row_group_rows: 4,
            ..Default::default()
        },
    );
    let mut merges = 0;
    for _ in 0..BLOCKS {
        let merged = compactor
            .compact_once(TENANT)
            .await
            .unwrap_or_else(|e| panic!("compaction failed on a damaged block: {e}"));
        if merged.is_none() {
            break;
        }
        merges += 1;
    }
    assert!(merges > 0, "compaction merged nothing");
    let quarantined_now = !db.quarantined().is_empty();
    if quarantined_now {
        // Two healthy blocks of 18 spans are a final block together: both merged.
        let left: Vec<String> = db.blocks(TENANT).iter().map(|b| b.meta.block_id.clone()).collect();
        for (b, f) in p.folders.iter().enumerate() {
            if b != block {
                assert!(
                    !left.iter().any(|id| id == block_id(f)),
                    "healthy block {b} was not merged: {left:?}"
                );
            }
        }
    }
    partial |= check_queries(&q, Some(block), "after compaction").await;
    drop((q, compactor, db));

    // A restart reads the same, and still says what is missing.
    let db = Db::open(storage.clone(), DbOptions::default()).await.unwrap();
    let q = Querier::new(db.clone(), Arc::new(NoRecentSpans), QuerierConfig::default());
    let after = check_queries(&q, Some(block), "after a restart").await;
    if !quarantined.is_empty() {
        assert!(after, "the restart forgot the quarantined block");
    }
    let _ = partial;
}

async fn clear(storage: &dyn Storage) {
    for o in storage.list("").await.unwrap() {
        storage.delete(&o.path).await.unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_damage_in_a_local_directory(block in 0..BLOCKS, file in 0..FILES.len(), d in damage()) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
            run_case(storage, block, file, d).await;
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_damage_in_an_s3_bucket(block in 0..BLOCKS, file in 0..FILES.len(), d in damage()) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = Arc::new(S3Storage::new(s3_server::config("damage-model")).unwrap());
            run_case(store.clone(), block, file, d).await;
            clear(&*store).await;
        });
    }
}

/// Every row of the issue's table, by name, on a local directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rows_of_the_issue() {
    for (file, d) in [
        (0, Damage::Truncate(0.5)),
        (0, Damage::Truncate(100.0 / 4096.0)),
        (0, Damage::Delete),
        (0, Damage::Zero(1.0 - 1e-9, 4096)),
        (1, Damage::Truncate(0.5)),
        (2, Damage::Flip(0.0, 16, 0x55)),
        (2, Damage::Delete),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
        run_case(storage.clone(), 0, file, d.clone()).await;
        let listed = storage.list("quarantine/").await.unwrap();
        assert!(
            listed.iter().any(|o| o.path.contains(block_id(&pristine().folders[0]))),
            "{} {d:?}: the block is not listed under quarantine/",
            FILES[file]
        );
    }
}

/// A store whose reads of paths containing `fail_on` fail as an unreachable S3 does once its
/// retries are spent, while `failing` is set.
#[derive(Debug)]
struct Unreachable {
    inner: Arc<dyn Storage>,
    fail_on: String,
    failing: AtomicBool,
}

impl Unreachable {
    fn check(&self, path: &str) -> Result<(), StorageError> {
        if self.failing.load(Ordering::SeqCst) && path.contains(&self.fail_on) {
            return Err(StorageError::Backend {
                op: "get",
                path: path.to_owned(),
                source: "connection refused (after 5 retries)".into(),
            });
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Storage for Unreachable {
    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError> {
        self.inner.put(path, data).await
    }
    async fn get(&self, path: &str) -> Result<Bytes, StorageError> {
        self.check(path)?;
        self.inner.get(path).await
    }
    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.check(path)?;
        self.inner.get_range(path, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, path: &str) -> Result<(), StorageError> {
        self.inner.delete(path).await
    }
    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError> {
        self.inner.put_if_absent(path, data).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_storage_fails_queries_as_transient_and_quarantines_nothing() {
    let p = pristine();
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    for (path, bytes) in &p.objects {
        local.put(path, bytes.clone()).await.unwrap();
    }
    let store = Arc::new(Unreachable {
        inner: local,
        fail_on: format!("{}/data.parquet", p.folders[1]),
        failing: AtomicBool::new(false),
    });
    let db = Db::open(store.clone(), DbOptions::default()).await.unwrap();
    let q = Querier::new(db.clone(), Arc::new(NoRecentSpans), QuerierConfig::default());
    store.failing.store(true, Ordering::SeqCst);
    let mut sink = Collect {
        prefilter: Prefilter::new(&all()),
        traces: BTreeMap::new(),
    };
    let e = q
        .scan(TENANT, None, &mut sink)
        .await
        .expect_err("the scan reads the unreachable block");
    assert!(e.is_transient(), "{e}");
    let e = q
        .find_trace_capped(TENANT, &trace_id(1, 0), None, 1 << 30)
        .await
        .expect_err("trace by ID reads the unreachable block");
    assert!(e.is_transient(), "{e}");
    let mut g = ServiceGraph::new(&all(), None, 1_000_000).unwrap();
    assert!(
        q.scan_service_graph(TENANT, None, &mut g)
            .await
            .unwrap_err()
            .is_transient()
    );
    // The scrubber meets it too, and blames no block.
    let mut scrubber = weft_db::scrub::Scrubber::new(db.clone(), Default::default());
    scrubber.round().await;
    assert!(
        db.quarantined().is_empty(),
        "a healthy block was quarantined for a transient error"
    );
    assert_eq!(db.block_count(), BLOCKS);

    store.failing.store(false, Ordering::SeqCst);
    assert!(!check_queries(&q, None, "storage back").await);
}
