//! Tests against a real Kafka broker (4.3.1, KRaft), started once per test process by
//! `scripts/kafka-server.sh` (or the one `WEFT_KAFKA_BROKERS` names). A broker that cannot be
//! started fails the tests; they never skip.

use super::*;
use crate::batch::ProducerStamp;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::time::Instant;

fn broker() -> String {
    static BROKER: OnceLock<Result<String, String>> = OnceLock::new();
    BROKER
        .get_or_init(|| {
            if let Ok(b) = std::env::var("WEFT_KAFKA_BROKERS") {
                return Ok(b);
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-server.sh");
            let dir = std::env::temp_dir().join(format!("weft-kafka-test-{}", std::process::id()));
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let out = Command::new("bash")
                .arg(&script)
                .arg("start")
                .arg(&dir)
                .arg(port.to_string())
                .env("KAFKA_SERVER_OWNER_PID", std::process::id().to_string())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "the Kafka test broker did not start (`{} start {} {port}`, needs java 17 and mvn):\n{}",
                    script.display(),
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            stdout
                .trim()
                .strip_prefix("WEFT_KAFKA_BROKERS=")
                .map(str::to_string)
                .ok_or_else(|| format!("the script printed {stdout:?}"))
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn client() -> Arc<Client> {
    let cfg = ClientConfig {
        brokers: vec![broker()],
        client_id: "weft-kafka-test".into(),
        ..Default::default()
    };
    Client::connect(cfg).await.expect("connect to the test broker")
}

fn topic(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

async fn read_all(c: &Client, topic: &str, partition: i32) -> Vec<FetchedRecord> {
    let end = c.list_offset(topic, partition, OffsetAt::Latest).await.unwrap();
    let mut at = c.list_offset(topic, partition, OffsetAt::Earliest).await.unwrap();
    let mut out = Vec::new();
    while at < end {
        let f = c
            .fetch(topic, partition, at, 1 << 20, 1, Duration::from_millis(200))
            .await
            .unwrap();
        let (records, next) = f.into_records().unwrap();
        assert!(next > at || !records.is_empty(), "fetch made no progress at {at}");
        at = next;
        out.extend(records);
    }
    out
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_once_and_report_their_partitions() {
    let c = client().await;
    let t = topic("create");
    assert!(
        c.create_topic(&t, 3, 1, &[("max.message.bytes", "4194304")])
            .await
            .unwrap()
    );
    assert!(
        !c.create_topic(&t, 3, 1, &[]).await.unwrap(),
        "second create says it exists"
    );
    assert_eq!(c.partition_count(&t).await.unwrap(), 3);
    let err = c.partition_count(&topic("missing")).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_land_once_each_in_order_per_partition() {
    let c = client().await;
    let t = topic("sends");
    c.create_topic(&t, 4, 1, &[]).await.unwrap();
    let p = Arc::new(Producer::new(c.clone(), &t, Compression::None));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let head = format!("task {task} send {i} ");
                let tail = vec![b'x'; (task * 37 + i) % 300];
                let parts: [&[u8]; 2] = [head.as_bytes(), &tail];
                let headers: [(&str, &[u8]); 1] = [("v", b"1")];
                let rec = |n: i64| Record {
                    key: Some(b"tenant"),
                    value_parts: &parts,
                    headers: &headers,
                    timestamp_ms: 1_700_000_000_000 + n,
                };
                // Every partition gets one batch of (partition + 1) records.
                let sends: Vec<_> = (0..4)
                    .map(|part| PartitionRecords {
                        partition: part,
                        records: (0..=part as i64).map(rec).collect(),
                    })
                    .collect();
                p.send(&sends, deadline()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for part in 0..4 {
        let recs = read_all(&c, &t, part).await;
        assert_eq!(recs.len(), 16 * 20 * (part as usize + 1), "partition {part}");
        let mut last_send: HashMap<usize, i64> = HashMap::new();
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.offset, i as i64, "offsets are dense");
            assert_eq!(r.key.as_deref(), Some(&b"tenant"[..]));
            assert_eq!(r.header("v"), Some(&b"1"[..]));
            let text = String::from_utf8_lossy(&r.value);
            let mut words = text.split(' ');
            let task: usize = words.nth(1).unwrap().parse().unwrap();
            let send: i64 = words.nth(1).unwrap().parse().unwrap();
            let tail = words.next().unwrap();
            assert_eq!(tail.len(), (task * 37 + send as usize) % 300);
            let prev = last_send.insert(task, send).unwrap_or(-1);
            assert!(
                send == prev || send == prev + 1,
                "task {task}: send {send} after {prev}"
            );
        }
    }
    assert_eq!(p.stats.failures.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(p.stats.batches.load(std::sync::atomic::Ordering::Relaxed), 16 * 20 * 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_batch_is_dropped_by_the_broker() {
    let c = client().await;
    let t = topic("idem");
    c.create_topic(&t, 1, 1, &[]).await.unwrap();
    let p = Producer::new(c.clone(), &t, Compression::None);
    let parts: [&[u8]; 1] = [b"once"];
    let records = [Record {
        key: None,
        value_parts: &parts,
        headers: &[],
        timestamp_ms: 0,
    }];
    let mut batch = Vec::new();
    write_batch(&mut batch, &records, ProducerStamp::NONE, Compression::None).unwrap();
    p.ensure_producer_id().await.unwrap();
    let item = || producer::tests_support::item(0, 1, batch.clone());
    // The first copy takes a stamp; the second reuses it, as a retry after a lost answer does.
    let (conn, first) = (c.leader(&t, 0).await.unwrap().1, item());
    let (left, err) = p.produce_to(conn.clone(), vec![first], deadline()).await;
    assert!(left.is_empty() && err.is_none(), "{err:?}");
    let stamp = p.last_stamp(0);
    let mut again = item();
    again.stamp = Some(stamp);
    let (left, err) = p.produce_to(conn, vec![again], deadline()).await;
    assert!(left.is_empty() && err.is_none(), "{err:?}");
    let recs = read_all(&c, &t, 0).await;
    assert_eq!(recs.len(), 1, "the broker kept one copy");
    // A new batch after it still lands.
    p.send(
        &[PartitionRecords {
            partition: 0,
            records: records.to_vec(),
        }],
        deadline(),
    )
    .await
    .unwrap();
    assert_eq!(read_all(&c, &t, 0).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_the_topic_limit_fails_clearly_and_the_next_send_works() {
    let c = client().await;
    let t = topic("big");
    c.create_topic(&t, 1, 1, &[("max.message.bytes", "100000")])
        .await
        .unwrap();
    let p = Producer::new(c.clone(), &t, Compression::None);
    let big = vec![7u8; 200_000];
    let parts: [&[u8]; 1] = [&big];
    let records = vec![Record {
        key: None,
        value_parts: &parts,
        headers: &[],
        timestamp_ms: 0,
    }];
    let err = p
        .send(&[PartitionRecords { partition: 0, records }], deadline())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(10), "{err}");
    assert!(err.to_string().contains("MESSAGE_TOO_LARGE"), "{err}");
    let small: [&[u8]; 1] = [b"small"];
    let records = vec![Record {
        key: None,
        value_parts: &small,
        headers: &[],
        timestamp_ms: 0,
    }];
    p.send(&[PartitionRecords { partition: 0, records }], deadline())
        .await
        .unwrap();
    let recs = read_all(&c, &t, 0).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(&recs[0].value[..], b"small");
}

/// The broker validates compressed batches (it reads every record), so a batch it accepts is
/// one Kafka's own LZ4 and zstd readers decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_batches_read_back() {
    let c = client().await;
    for (name, compression) in [("lz4", Compression::Lz4), ("zstd", Compression::Zstd(1))] {
        let t = topic(name);
        c.create_topic(&t, 1, 1, &[]).await.unwrap();
        let p = Producer::new(c.clone(), &t, compression);
        // Over 64 KiB of values, so LZ4 writes several blocks.
        let body: Vec<u8> = (0..30_000u32).flat_map(|i| (i % 1000).to_le_bytes()).collect();
        let parts: [&[u8]; 1] = [&body];
        let records = vec![
            Record {
                key: Some(b"t"),
                value_parts: &parts,
                headers: &[],
                timestamp_ms: 5
            };
            3
        ];
        p.send(&[PartitionRecords { partition: 0, records }], deadline())
            .await
            .unwrap();
        let recs = read_all(&c, &t, 0).await;
        assert_eq!(recs.len(), 3, "{name}");
        assert!(recs.iter().all(|r| r.value[..] == body[..]), "{name}");
        let sent = p.stats.bytes.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            sent < body.len() as u64,
            "{name}: {sent} bytes on the wire for 3 × {}",
            body.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_stored_per_group() {
    let c = client().await;
    let t = topic("offsets");
    c.create_topic(&t, 2, 1, &[]).await.unwrap();
    let g = topic("group");
    assert_eq!(c.committed_offsets(&g, &t, &[0, 1]).await.unwrap(), [None, None]);
    c.commit_offsets(&g, &t, &[(0, 42), (1, 7)]).await.unwrap();
    assert_eq!(c.committed_offsets(&g, &t, &[1, 0]).await.unwrap(), [Some(7), Some(42)]);
    c.commit_offsets(&g, &t, &[(1, 8)]).await.unwrap();
    assert_eq!(c.committed_offsets(&g, &t, &[0, 1]).await.unwrap(), [Some(42), Some(8)]);
    assert_eq!(c.committed_offsets(&topic("other"), &t, &[0]).await.unwrap(), [None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_is_not_there_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = ClientConfig {
        brokers: vec![format!("127.0.0.1:{port}")],
        request_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let err = Client::connect(cfg).await.err().expect("no broker");
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
}
