//! The Kafka write path's modules: the Distributor (receivers' spans into the topic, routed
//! by trace ID) and the BlockBuilder (partitions of the topic into blocks), and the options of
//! the cluster and topic they share with a querier tailing recent spans.

use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use weft_db::Db;
use weft_ingest::IngestConfig;

use super::Target;
use crate::config::Config;

/// How the distributor compresses record batches it writes to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KafkaCompression {
    /// Batches as received: OTLP protobuf as clients sent it.
    None,
    /// LZ4 frames, as Kafka's own producer writes them (the default): a sixth of the bytes on
    /// the wire and on the brokers' disks in `make bench`, for little CPU on distributors, and
    /// less on block builders and brokers than uncompressed batches.
    Lz4,
    /// zstd level 1: fewer bytes than LZ4, for more CPU on the distributor.
    Zstd,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kafka")]
pub struct KafkaOptions {
    /// Kafka: bootstrap brokers, `host:port`, comma-separated (needed by --target distributor).
    #[arg(long, env = "WEFT_KAFKA_BROKERS", value_delimiter = ',')]
    pub kafka_brokers: Vec<String>,
    /// Kafka: the topic spans go through.
    #[arg(long, env = "WEFT_KAFKA_TOPIC", default_value = "weft-traces")]
    pub kafka_topic: String,
    /// Kafka: partitions of the topic when weft creates it (a distributor creates a missing
    /// topic; an existing topic keeps its own count).
    #[arg(long, env = "WEFT_KAFKA_PARTITIONS", default_value_t = 16)]
    pub kafka_partitions: u32,
    /// Kafka: replication factor of the topic when weft creates it.
    #[arg(long, env = "WEFT_KAFKA_REPLICATION", default_value_t = 1)]
    pub kafka_replication: u16,
    /// Kafka: compression of the record batches the distributor writes.
    #[arg(long, env = "WEFT_KAFKA_COMPRESSION", value_enum, default_value_t = KafkaCompression::Lz4)]
    pub kafka_compression: KafkaCompression,
    /// Kafka: the consumer group whose committed offsets record block builders' progress.
    #[arg(long, env = "WEFT_KAFKA_GROUP", default_value = "weft-block-builder")]
    pub kafka_group: String,
    /// Block builder: the partitions this process builds, comma-separated (`0,1,2`); each
    /// partition needs exactly one block builder [default: every partition].
    #[arg(long, env = "WEFT_BLOCK_BUILDER_PARTITIONS", value_delimiter = ',')]
    pub block_builder_partitions: Vec<i32>,
    /// Live store: the partitions whose recent spans this process holds, comma-separated;
    /// together the live stores of --live-stores must hold every partition [default: every
    /// partition].
    #[arg(long, env = "WEFT_LIVE_STORE_PARTITIONS", value_delimiter = ',')]
    pub live_store_partitions: Vec<i32>,
    /// Live store (or a querier tailing Kafka): most bytes of recent spans held in memory;
    /// past it the oldest are dropped until their blocks are written, and answers that need
    /// them say they are partial. Size it for your rate times --block-max-age plus 30 s.
    #[arg(long, env = "WEFT_LIVE_STORE_MAX_BYTES", default_value_t = weft_querier::live::MAX_LIVE_BYTES)]
    pub live_store_max_bytes: usize,
}

impl KafkaOptions {
    pub(crate) fn validate(&self, target: Target) -> anyhow::Result<()> {
        if matches!(target, Target::Distributor | Target::BlockBuilder | Target::LiveStore) {
            anyhow::ensure!(
                !self.kafka_brokers.is_empty(),
                "--target {} needs --kafka-brokers (or kafka_brokers in the config file)",
                match target {
                    Target::Distributor => "distributor",
                    Target::BlockBuilder => "block-builder",
                    _ => "live-store",
                }
            );
        }
        anyhow::ensure!(!self.kafka_group.is_empty(), "kafka_group must not be empty");
        anyhow::ensure!(self.live_store_max_bytes > 0, "live_store_max_bytes must be positive");
        anyhow::ensure!(!self.kafka_topic.is_empty(), "kafka_topic must not be empty");
        anyhow::ensure!(self.kafka_partitions > 0, "kafka_partitions must be positive");
        anyhow::ensure!(self.kafka_replication > 0, "kafka_replication must be positive");
        Ok(())
    }

    /// A client of the configured Kafka cluster.
    pub async fn client(&self, client_id: &str) -> anyhow::Result<Arc<weft_kafka::Client>> {
        let kafka = weft_kafka::ClientConfig {
            brokers: self.kafka_brokers.clone(),
            client_id: client_id.into(),
            ..Default::default()
        };
        weft_kafka::Client::connect(kafka)
            .await
            .with_context(|| format!("connecting to Kafka at {}", self.kafka_brokers.join(",")))
    }
}

/// Creates the topic if it is missing and starts producing to it.
pub async fn init_distributor(cfg: &Config) -> anyhow::Result<Arc<weft_distributor::Distributor>> {
    let k = &cfg.kafka;
    let client = k.client("weft-distributor").await?;
    // A request's spans of one partition are one record: allow records as large as the
    // largest request.
    let max_message = (cfg.receivers.max_decompressed_bytes + (1 << 20)).to_string();
    let created = client
        .create_topic(
            &k.kafka_topic,
            k.kafka_partitions as i32,
            k.kafka_replication as i16,
            &[("max.message.bytes", &max_message)],
        )
        .await
        .with_context(|| format!("creating Kafka topic {}", k.kafka_topic))?;
    let compression = match k.kafka_compression {
        KafkaCompression::None => weft_kafka::Compression::None,
        KafkaCompression::Lz4 => weft_kafka::Compression::Lz4,
        KafkaCompression::Zstd => weft_kafka::Compression::Zstd(1),
    };
    let producer = Arc::new(weft_kafka::Producer::new(client, &k.kafka_topic, compression));
    let dcfg = weft_distributor::DistributorConfig {
        rate_bytes: cfg.admission.ingestion_rate_bytes,
        burst_bytes: cfg.admission.ingestion_burst_bytes,
        ..Default::default()
    };
    let d = weft_distributor::Distributor::new(dcfg, producer)
        .await
        .with_context(|| format!("reading Kafka topic {}", k.kafka_topic))?;
    tracing::info!(
        topic = %k.kafka_topic,
        partitions = d.partitions(),
        created,
        "distributing to Kafka"
    );
    Ok(d)
}

/// Starts reading this builder's partitions into heads.
pub async fn init_block_builder(cfg: &Config, db: Arc<Db>) -> anyhow::Result<Arc<weft_blockbuilder::BlockBuilder>> {
    let k = &cfg.kafka;
    let client = k.client("weft-block-builder").await?;
    let bcfg = weft_blockbuilder::BlockBuilderConfig {
        topic: k.kafka_topic.clone(),
        group: k.kafka_group.clone(),
        partitions: k.block_builder_partitions.clone(),
        cut: cfg.head.cut(true),
        row_group_rows: IngestConfig::default().row_group_rows,
        final_block_spans: cfg.compactor.final_block_spans(),
        fetch_bytes: 8 << 20,
        fetch_min_bytes: 1 << 20,
    };
    weft_blockbuilder::BlockBuilder::start(bcfg, client, db, tokio::runtime::Handle::current())
        .await
        .with_context(|| format!("starting to read Kafka topic {}", k.kafka_topic))
}
