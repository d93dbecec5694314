//! Several processes on one storage: a writer adds blocks, a reader re-lists them, and only the
//! maintaining process deletes (replaced blocks, old incomplete folders).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use weft_block::columns::SpanColumns;
use weft_block::{Origin, WriteOptions};
use weft_db::compact::{CompactionConfig, Compactor};
use weft_db::{Db, DbOptions};
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span};
use weft_storage::{LocalStorage, Storage};

fn columns(trace: u8, spans: u8) -> SpanColumns {
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
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut cols = SpanColumns::default();
    cols.push_request(&Bytes::from(req.encode_to_vec())).unwrap();
    cols.freeze();
    cols
}

const READER: DbOptions = DbOptions {
    maintains: false,
    incomplete_grace: Duration::from_secs(600),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_poll_what_writers_add_and_the_maintainer_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let writer = Db::open(storage.clone(), READER).await.unwrap();
    let reader = Db::open(storage.clone(), READER).await.unwrap();
    for t in 1..=3u8 {
        writer
            .write_block(&columns(t, 2), "t", Origin::default(), &WriteOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(writer.blocks("t").len(), 3);
    assert_eq!(
        reader.blocks("t").len(),
        0,
        "a reader sees new blocks only when it polls"
    );
    assert_eq!(reader.poll().await.unwrap(), (3, 0));
    assert_eq!(reader.poll().await.unwrap(), (0, 0), "polling again changes nothing");
    let found = reader.find_trace("t", &[2; 16], None, u64::MAX, 2).await.unwrap();
    assert_eq!(found.rows.len(), 2);

    // A folder without meta.json: a block being written by another process.
    storage
        .put(
            "blocks/t/0190aaaa-0000-7000-8000-000000000000/data.parquet",
            Bytes::from_static(b"x"),
        )
        .await
        .unwrap();
    let fresh = uuid_now();
    storage
        .put(&format!("blocks/t/{fresh}/data.parquet"), Bytes::from_static(b"x"))
        .await
        .unwrap();

    // The maintainer (a compactor process) merges the three blocks into one.
    let maintainer = Db::open(
        storage.clone(),
        DbOptions {
            maintains: true,
            incomplete_grace: Duration::from_secs(600),
        },
    )
    .await
    .unwrap();
    let c = Compactor::new(
        maintainer.clone(),
        CompactionConfig {
            interval: None,
            delete_grace: Duration::ZERO,
            retention: None,
            // Three small blocks of one level open the valve.
            max_inputs: 3,
            ..Default::default()
        },
    );
    let done = c.compact_once("t").await.unwrap().expect("three small blocks merge");
    assert_eq!(done.inputs.len(), 3);
    assert_eq!(
        reader.poll().await.unwrap(),
        (1, 3),
        "the merged block replaces its inputs"
    );
    assert_eq!(reader.blocks("t").len(), 1);
    assert_eq!(
        reader
            .find_trace("t", &[3; 16], None, u64::MAX, 2)
            .await
            .unwrap()
            .rows
            .len(),
        2
    );

    // Only the maintainer deletes, and only incomplete folders older than the grace.
    c.maintain().await;
    let listed: Vec<String> = storage
        .list("blocks/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.path)
        .collect();
    assert!(
        !listed.iter().any(|p| p.contains("0190aaaa")),
        "an old incomplete folder is deleted: {listed:?}"
    );
    assert!(
        listed.iter().any(|p| p.contains(&fresh)),
        "a folder another process may still be writing is kept: {listed:?}"
    );
    // The writer, which does not maintain, drops the replaced blocks when it polls.
    assert_eq!(writer.poll().await.unwrap(), (1, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_skips_replaced_blocks_without_deleting_them() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let writer = Db::open(storage.clone(), READER).await.unwrap();
    let a = writer
        .write_block(&columns(1, 2), "t", Origin::default(), &WriteOptions::default())
        .await
        .unwrap();
    // A compacted block naming `a`, as a compactor that crashed before retiring `a` leaves it.
    writer
        .write_block(
            &columns(1, 2),
            "t",
            Origin {
                compacted_from: vec![a.meta.block_id.clone()],
                compaction_level: 1,
                ..Origin::default()
            },
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let reader = Db::open(storage.clone(), READER).await.unwrap();
    assert_eq!(reader.blocks("t").len(), 1, "the replaced block is not read");
    assert!(
        storage.get(&format!("{}/meta.json", a.prefix())).await.is_ok(),
        "a reader deletes nothing"
    );
    let maintainer = Db::open(storage.clone(), DbOptions::default()).await.unwrap();
    assert_eq!(maintainer.blocks("t").len(), 1);
    assert!(
        storage.get(&format!("{}/meta.json", a.prefix())).await.is_err(),
        "the maintaining process deletes the replaced block"
    );
}

/// A UUIDv7-shaped block ID made now.
fn uuid_now() -> String {
    let ms = format!("{:012x}", weft_core::now_ns() / 1_000_000);
    format!("{}-{}-7000-8000-000000000000", &ms[..8], &ms[8..])
}

/// A store whose first listing of `blocks/` is followed, before the caller reads any block, by
/// a compaction elsewhere: the interleaving of a process that starts while another compacts.
struct CompactsAfterFirstList {
    inner: Arc<dyn Storage>,
    compactor: Arc<Compactor>,
    done: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for CompactsAfterFirstList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompactsAfterFirstList")
    }
}

#[async_trait::async_trait]
impl Storage for CompactsAfterFirstList {
    async fn put(&self, path: &str, data: Bytes) -> Result<(), weft_storage::StorageError> {
        self.inner.put(path, data).await
    }
    async fn get(&self, path: &str) -> Result<Bytes, weft_storage::StorageError> {
        self.inner.get(path).await
    }
    async fn get_range(&self, path: &str, range: std::ops::Range<u64>) -> Result<Bytes, weft_storage::StorageError> {
        self.inner.get_range(path, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<weft_storage::ObjectMeta>, weft_storage::StorageError> {
        let listed = self.inner.list(prefix).await?;
        if prefix == "blocks/" && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let merged = self.compactor.compact_once("t").await.unwrap();
            assert!(merged.is_some(), "the two blocks merge");
        }
        Ok(listed)
    }
    async fn delete(&self, path: &str) -> Result<(), weft_storage::StorageError> {
        self.inner.delete(path).await
    }
    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, weft_storage::StorageError> {
        self.inner.put_if_absent(path, data).await
    }
}

/// A process that starts while a compaction elsewhere retires the blocks it just listed still
/// loads every span once, from the merged block, and a block builder's Kafka coverage keeps
/// both blocks' ranges (without them it would build those records again: duplicates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_during_a_compaction_elsewhere_loads_the_merged_block() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let writer = Db::open(storage.clone(), READER).await.unwrap();
    for (t, start, end) in [(1u8, 0, 10), (2, 10, 25)] {
        let origin = Origin {
            kafka: vec![weft_block::meta::KafkaRange {
                partition: 0,
                start,
                end,
            }],
            ..Origin::default()
        };
        writer
            .write_block(&columns(t, 2), "t", origin, &WriteOptions::default())
            .await
            .unwrap();
    }
    let maintainer = Db::open(storage.clone(), DbOptions::default()).await.unwrap();
    let compactor = Compactor::new(
        maintainer,
        CompactionConfig {
            interval: None,
            delete_grace: Duration::ZERO,
            retention: None,
            max_inputs: 2,
            ..Default::default()
        },
    );
    let racing: Arc<dyn Storage> = Arc::new(CompactsAfterFirstList {
        inner: storage.clone(),
        compactor,
        done: Default::default(),
    });
    let started = Db::open(racing, READER).await.unwrap();
    let blocks = started.blocks("t");
    assert_eq!(blocks.len(), 1, "the merged block, and not its retired inputs");
    assert_eq!(blocks[0].meta.span_count, 4);
    assert_eq!(blocks[0].meta.compacted_from.len(), 2);
    assert_eq!(started.kafka_coverage(0).get("t"), Some(&25));
}

/// A store that refuses to retire blocks while `down` is set: the retirement marker's put and
/// the deletion of `meta.json` fail as an unreachable bucket's do, everything else works. The
/// store going down between a compaction's write and its retirement of the inputs.
#[derive(Debug)]
struct RetirementsFail {
    inner: Arc<dyn Storage>,
    down: std::sync::atomic::AtomicBool,
}

impl RetirementsFail {
    fn refuses(&self, path: &str) -> Result<(), weft_storage::StorageError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(weft_storage::StorageError::Backend {
                op: "test",
                path: path.into(),
                source: "the store is down".into(),
            });
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Storage for RetirementsFail {
    async fn put(&self, path: &str, data: Bytes) -> Result<(), weft_storage::StorageError> {
        if path.ends_with(weft_block::RETIRED_MARKER) {
            self.refuses(path)?;
        }
        self.inner.put(path, data).await
    }
    async fn get(&self, path: &str) -> Result<Bytes, weft_storage::StorageError> {
        self.inner.get(path).await
    }
    async fn get_range(&self, path: &str, range: std::ops::Range<u64>) -> Result<Bytes, weft_storage::StorageError> {
        self.inner.get_range(path, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<weft_storage::ObjectMeta>, weft_storage::StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, path: &str) -> Result<(), weft_storage::StorageError> {
        if path.ends_with("meta.json") {
            self.refuses(path)?;
        }
        self.inner.delete(path).await
    }
    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, weft_storage::StorageError> {
        self.inner.put_if_absent(path, data).await
    }
}

/// Four one-span blocks written to `storage`, and a compactor whose every compaction merges
/// two small blocks of one level (the valve), on a maintaining Db over `store`.
async fn blocks_and_compactor(storage: &Arc<dyn Storage>, store: Arc<dyn Storage>) -> (Arc<Db>, Arc<Compactor>) {
    let writer = Db::open(storage.clone(), READER).await.unwrap();
    for t in 1..=4u8 {
        writer
            .write_block(&columns(t, 1), "t", Origin::default(), &WriteOptions::default())
            .await
            .unwrap();
    }
    let maintainer = Db::open(store, DbOptions::default()).await.unwrap();
    let c = Compactor::new(
        maintainer.clone(),
        CompactionConfig {
            interval: None,
            delete_grace: Duration::ZERO,
            retention: None,
            max_inputs: 2,
            ..Default::default()
        },
    );
    (maintainer, c)
}

/// Every block a fresh start loads, and the spans they hold.
async fn loaded(storage: &Arc<dyn Storage>) -> (usize, u64) {
    let db = Db::open(storage.clone(), READER).await.unwrap();
    let blocks = db.blocks("t");
    (blocks.len(), blocks.iter().map(|b| b.meta.span_count).sum())
}

/// CI's exactly-once cluster test found 47 spans twice in the blocks after the bucket was
/// stopped: a compaction wrote its block, the store failed before the inputs were retired,
/// and the merged block was compacted again and retired. Nothing named the inputs any more,
/// so they came back as live blocks. A block is now retired only after what it replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_left_by_a_failed_retirement_never_outlive_the_block_that_replaced_them() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let flaky = Arc::new(RetirementsFail {
        inner: storage.clone(),
        down: true.into(),
    });
    let (_, c) = blocks_and_compactor(&storage, flaky.clone()).await;
    let first = c.compact_once("t").await.unwrap().expect("two blocks merge");
    assert_eq!(
        loaded(&storage).await,
        (3, 4),
        "the inputs stay, replaced by the merged block"
    );
    for id in &first.inputs {
        assert!(
            storage.get(&format!("blocks/t/{id}/meta.json")).await.is_ok(),
            "the retirement failed"
        );
    }
    flaky.down.store(false, std::sync::atomic::Ordering::SeqCst);
    // The other two merge, then the two merged blocks: the first merged block is retired.
    let mut retired = Vec::new();
    while let Some(done) = c.compact_once("t").await.unwrap() {
        retired.extend(done.inputs);
    }
    assert!(
        retired.contains(&first.output),
        "the first merged block was merged again: {retired:?}"
    );
    assert_eq!(loaded(&storage).await, (1, 4), "every span once, in one block");
    for id in &first.inputs {
        assert!(
            storage.get(&format!("blocks/t/{id}/meta.json")).await.is_err(),
            "{id} is retired"
        );
    }
}

/// The maintainer's folder sweep finishes a retirement the store cut short, without waiting
/// for a restart or another compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_finishes_a_retirement_the_store_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let flaky = Arc::new(RetirementsFail {
        inner: storage.clone(),
        down: true.into(),
    });
    let (db, c) = blocks_and_compactor(&storage, flaky.clone()).await;
    let first = c.compact_once("t").await.unwrap().expect("two blocks merge");
    db.sweep_folders().await.unwrap();
    assert_eq!(loaded(&storage).await, (3, 4), "still down: the inputs stay");
    flaky.down.store(false, std::sync::atomic::Ordering::SeqCst);
    db.sweep_folders().await.unwrap();
    for id in &first.inputs {
        assert!(
            storage.get(&format!("blocks/t/{id}/meta.json")).await.is_err(),
            "{id} is retired"
        );
    }
    assert_eq!(
        loaded(&storage).await,
        (3, 4),
        "the merged block and the two never merged"
    );
}
