//! X-Ray quotas across distributors. Every [`SHARE_EVERY`] each distributor writes the X-Ray
//! SDK instances it serves ([`Quotas::snapshot`]: per rule, each client's request rate, quota
//! and its expiry) to the Kafka topic `<kafka_topic>-xray`, and reads every other
//! distributor's ([`Quotas::peer`]), so that a rule's reservoir is split among the clients of
//! all distributors, as the X-Ray service splits it among a fleet.
//!
//! A record: key = the distributor's node ID; value = JSON `{"node", "at", "rules"}`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_kafka::Producer;

use super::sampling::Quotas;
use crate::modules::kafka::KafkaOptions;
use crate::sampling::share::{node_id, open_topic, publish, read_json};

/// How often a distributor shares its clients: well inside the SDKs' 10 s reporting interval,
/// so that a client's report meets the others' of the last few seconds.
pub const SHARE_EVERY: Duration = Duration::from_secs(2);

/// Creates the topic if needed and shares quotas until `stop`.
pub async fn run(
    quotas: Arc<Quotas>,
    kafka: KafkaOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (client, topic, from) = open_topic(&kafka, "xray", "weft-xray").await?;
    let node = node_id();
    tracing::info!(%topic, %node, "X-Ray reservoirs are split among every distributor's clients through Kafka");
    let (me, into) = (node.clone(), quotas.clone());
    tokio::spawn(read_json(client.clone(), topic.clone(), from, stop.clone(), move |v| {
        let (Some(peer), Some(rules)) = (v.get("node").and_then(Value::as_str), v.get("rules")) else {
            return;
        };
        if peer != me {
            into.peer(peer, rules, now());
        }
    }));
    let producer = Producer::new(client, &topic, weft_kafka::Compression::None);
    let mut tick = tokio::time::interval(SHARE_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return Ok(()),
        }
        let at = now();
        let value = json!({"node": node, "at": at, "rules": quotas.snapshot(at)});
        let deadline = tokio::time::Instant::now() + SHARE_EVERY;
        if let Err(e) = publish(&producer, &node, &value, (at * 1000.0) as i64, deadline).await {
            tracing::warn!(error = %e, "X-Ray quotas not shared this time");
        }
    }
}

fn now() -> f64 {
    weft_core::now_ns() as f64 / 1e9
}
