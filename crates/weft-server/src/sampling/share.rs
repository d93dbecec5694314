//! Adaptive sampling across distributors: each distributor counts the roots it admits, and at
//! every interval boundary (wall-clock multiples of the interval, so all distributors end an
//! interval together) writes its counts to the Kafka topic `<kafka_topic>-sampling` and
//! calculates over every distributor's counts of that interval, read from the same topic. All
//! distributors so compute from the same counts, without a leader or a database.
//!
//! A record: key = the distributor's random node ID; value = JSON `{"node", "interval",
//! "seconds", "counts": [Count, …]}` (`weft_sampling::Count::to_json`). Counts arriving after
//! the grace period (half the interval, at most 5 s) go into the next interval's calculation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Value, json};
use weft_kafka::{Client, OffsetAt, PartitionRecords, Producer, Record};
use weft_sampling::{Adaptive, Count};

use crate::modules::kafka::KafkaOptions;

/// Every interval's counts read so far, by interval and node.
type Seen = Arc<Mutex<BTreeMap<u64, HashMap<String, Vec<Count>>>>>;

/// Creates the topic if needed and runs the exchange until `stop`.
pub async fn run(
    adaptive: Arc<Adaptive>,
    interval: f64,
    kafka: KafkaOptions,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (client, topic, from) = open_topic(&kafka, "sampling", "weft-sampling").await?;
    let node = node_id();
    tracing::info!(%topic, %node, "adaptive sampling combines the distributors' counts through Kafka");
    let seen: Seen = Default::default();
    let (me, into) = (node.clone(), seen.clone());
    tokio::spawn(read_json(client.clone(), topic.clone(), from, stop.clone(), move |v| {
        let (Some(node), Some(index), Some(list)) = (
            v.get("node").and_then(Value::as_str),
            v.get("interval").and_then(Value::as_u64),
            v.get("counts").and_then(Value::as_array),
        ) else {
            return;
        };
        if node == me {
            // Its own counts go into its calculation directly.
            return;
        }
        let counts: Vec<Count> = list.iter().filter_map(Count::from_json).collect();
        into.lock().entry(index).or_default().insert(node.to_owned(), counts);
    }));
    let producer = Producer::new(client, &topic, weft_kafka::Compression::None);
    exchange(adaptive, interval, producer, node, seen, stop).await;
    Ok(())
}

/// A distributor's ID among the others on an exchange topic: when it started, and its process.
pub(crate) fn node_id() -> String {
    format!("{:x}-{:x}", weft_core::now_ns(), std::process::id())
}

/// The one-partition topic `<kafka_topic>-<suffix>` that distributors exchange JSON records on,
/// created if needed, and its end offset now (where a newcomer starts reading).
pub(crate) async fn open_topic(
    kafka: &KafkaOptions,
    suffix: &str,
    client_id: &str,
) -> anyhow::Result<(Arc<Client>, String, i64)> {
    let topic = format!("{}-{suffix}", kafka.kafka_topic);
    let client = kafka.client(client_id).await?;
    client
        .create_topic(
            &topic,
            1,
            kafka.kafka_replication as i16,
            &[("retention.ms", "3600000")],
        )
        .await
        .map_err(|e| anyhow::anyhow!("creating Kafka topic {topic}: {e}"))?;
    let from = client
        .list_offset(&topic, 0, OffsetAt::Latest)
        .await
        .map_err(|e| anyhow::anyhow!("reading Kafka topic {topic}: {e}"))?;
    Ok((client, topic, from))
}

/// Writes `value` to the exchange topic as one record keyed by `node`, by `deadline`.
pub(crate) async fn publish(
    producer: &Producer,
    node: &str,
    value: &Value,
    timestamp_ms: i64,
    deadline: tokio::time::Instant,
) -> Result<(), weft_kafka::Error> {
    let value = value.to_string();
    let parts = [value.as_bytes()];
    let records = [PartitionRecords {
        partition: 0,
        records: vec![Record {
            key: Some(node.as_bytes()),
            value_parts: &parts,
            headers: &[],
            timestamp_ms,
        }],
    }];
    producer.send(&records, deadline).await.map(|_| ())
}

/// Reads the exchange topic's records from `from` on, each JSON value handed to `f` (others
/// skipped), until `stop`.
pub(crate) async fn read_json(
    client: Arc<Client>,
    topic: String,
    from: i64,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut f: impl FnMut(Value) + Send,
) {
    let mut offset = from;
    loop {
        let fetched = tokio::select! {
            f = client.fetch(&topic, 0, offset, 4 << 20, 1, Duration::from_millis(250)) => f,
            _ = stop.changed() => return,
        };
        let (records, next) = match fetched.and_then(|f| f.into_records()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, %topic, "reading the distributors' exchange topic failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        offset = next;
        for r in records {
            if let Ok(v) = serde_json::from_slice::<Value>(&r.value) {
                f(v);
            }
        }
    }
}

fn unix_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

async fn exchange(
    adaptive: Arc<Adaptive>,
    interval: f64,
    producer: Producer,
    node: String,
    seen: Seen,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let grace = Duration::from_secs_f64((interval / 2.0).min(5.0));
    loop {
        let now = unix_secs();
        let end = ((now / interval).floor() + 1.0) * interval;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(end - now)) => {}
            _ = stop.changed() => return,
        }
        let index = (end / interval).round() as u64 - 1;
        let mine = adaptive.take_counts();
        let value = json!({
            "node": node,
            "interval": index,
            "seconds": interval,
            "counts": mine.iter().map(Count::to_json).collect::<Vec<_>>(),
        });
        let deadline = tokio::time::Instant::now() + grace;
        if let Err(e) = publish(&producer, &node, &value, (end * 1000.0) as i64, deadline).await {
            tracing::warn!(error = %e, "sampling counts not shared this interval");
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = stop.changed() => return,
        }
        // Every other distributor's counts of this interval, and of earlier ones that came
        // after their own calculation: late counts move to the next interval, not lost.
        let mut counts: Vec<Vec<Count>> = {
            let mut seen = seen.lock();
            let later = seen.split_off(&(index + 1));
            std::mem::replace(&mut *seen, later)
                .into_values()
                .flat_map(HashMap::into_values)
                .collect()
        };
        counts.push(mine);
        adaptive.calculate_with(&counts, interval);
    }
}
