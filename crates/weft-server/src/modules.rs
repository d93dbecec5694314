//! The roles of the binary, as modules with dependencies (Tempo's `cmd/tempo/app/modules.go`).
//!
//! `--target` names the modules a process runs; [`Modules::init`] adds their dependencies and
//! initialises each once, dependencies first. `all` runs every module in one process.
//!
//! | module | needs | what it is |
//! |---|---|---|
//! | `Storage` | | where blocks live (the data directory, or an S3 bucket with `--storage s3`), counted |
//! | `Db` | Storage | the block list and block maintenance primitives (`weft-db`) |
//! | `Ingester` | Db | WAL, head, block flusher (`weft-ingest`) |
//! | `Distributor` | | admission, then spans routed by trace ID to Kafka (`weft-distributor`) |
//! | `BlockBuilder` | Db | Kafka partitions into heads, then blocks; offsets committed after the blocks (`weft-blockbuilder`) |
//! | `Receivers` | | every receiver port, pushing into the ingester or the distributor (a target names one before it) |
//! | `Querier` | Db | trace by ID, search, metrics over blocks (plus the ingester's head when in the same process, or, with `--kafka-brokers`, recent spans tailed from Kafka: `weft_blockbuilder::live`) |
//! | `QueryApi` | Querier | Tempo's HTTP API and the UI on the HTTP port |
//! | `Compactor` | Db | compaction, retention, clean-up of crashed writes, the block scrubber |
//! | `BlocklistPoller` | Db | re-reads the block list written by other processes |
//!
//! Every target also serves `/metrics`, `/ready`, `/api/echo` and `/api/status/buildinfo` on
//! its HTTP port.
//!
//! Several processes may share one data directory: only the compactor (or `all`) deletes
//! anything there ([`weft_db::DbOptions::maintains`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use weft_db::compact::Compactor;
use weft_db::recent::{NoRecentSpans, RecentSpans};
use weft_db::{Db, DbOptions};
use weft_ingest::head::CutPolicy;
use weft_ingest::{Ingest, IngestConfig};
use weft_querier::{Querier, QuerierConfig};
use weft_storage::Storage;

use crate::config::{Config, StorageKind, Target};
use crate::receivers::Receiver;
use crate::tenant::Tenants;

/// One role or shared service of the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Module {
    Storage,
    Db,
    Ingester,
    Distributor,
    BlockBuilder,
    Receivers,
    Querier,
    QueryApi,
    Compactor,
    BlocklistPoller,
}

impl Module {
    /// The modules this one needs, initialised before it.
    pub fn deps(self) -> &'static [Module] {
        use Module::*;
        match self {
            Storage | Distributor | Receivers => &[],
            Db => &[Storage],
            Ingester | Querier | Compactor | BlocklistPoller | BlockBuilder => &[Db],
            QueryApi => &[Querier],
        }
    }
}

/// The modules a target asks for (their dependencies are added by [`resolve`]).
pub fn target_modules(t: Target) -> &'static [Module] {
    use Module::*;
    match t {
        Target::All => &[Ingester, Receivers, QueryApi, Compactor],
        Target::Ingester => &[Ingester, Receivers, BlocklistPoller],
        Target::Querier => &[QueryApi, BlocklistPoller],
        Target::Compactor => &[Compactor],
        Target::Distributor => &[Distributor, Receivers],
        Target::BlockBuilder => &[BlockBuilder],
    }
}

/// `wanted` plus everything they need, each once, dependencies first.
pub fn resolve(wanted: &[Module]) -> Vec<Module> {
    fn visit(m: Module, out: &mut Vec<Module>) {
        if out.contains(&m) {
            return;
        }
        for &d in m.deps() {
            visit(d, out);
        }
        out.push(m);
    }
    let mut out = Vec::new();
    for &m in wanted {
        visit(m, &mut out);
    }
    out
}

/// The initialised modules of this process.
#[derive(Default)]
pub struct Modules {
    pub running: Vec<Module>,
    pub storage: Option<Arc<dyn Storage>>,
    /// Requests, errors, latency and bytes of the block storage.
    pub storage_metrics: Option<Arc<weft_storage::StorageMetrics>>,
    pub db: Option<Arc<Db>>,
    pub ingest: Option<Arc<Ingest>>,
    pub distributor: Option<Arc<weft_distributor::Distributor>>,
    pub block_builder: Option<Arc<weft_blockbuilder::BlockBuilder>>,
    /// A querier's recent spans from Kafka (cluster mode).
    pub live_store: Option<Arc<weft_blockbuilder::live::LiveStore>>,
    pub receiver: Option<Receiver>,
    pub querier: Option<Arc<Querier>>,
    pub compactor: Option<Arc<Compactor>>,
}

impl Modules {
    /// Initialises the modules of `cfg.target`, dependencies first. Must be called inside the
    /// ingest runtime (the ingester's threads hand work to it).
    pub async fn init(cfg: &Config, tenants: Arc<Tenants>, background_thread_start: fn()) -> anyhow::Result<Modules> {
        let mut m = Modules::default();
        for module in resolve(target_modules(cfg.target)) {
            m.init_one(module, cfg, &tenants, background_thread_start)
                .await
                .with_context(|| format!("starting module {module:?}"))?;
            m.running.push(module);
        }
        Ok(m)
    }

    pub fn runs(&self, m: Module) -> bool {
        self.running.contains(&m)
    }

    async fn init_one(
        &mut self,
        module: Module,
        cfg: &Config,
        tenants: &Arc<Tenants>,
        lower: fn(),
    ) -> anyhow::Result<()> {
        match module {
            Module::Storage => {
                std::fs::create_dir_all(&cfg.data_dir)
                    .with_context(|| format!("creating data dir {}", cfg.data_dir.display()))?;
                let inner: Arc<dyn Storage> = match cfg.storage {
                    StorageKind::Local => Arc::new(weft_storage::LocalStorage::new(&cfg.data_dir)?),
                    StorageKind::S3 => {
                        let s3 = weft_storage::S3Storage::new(cfg.s3_config().map_err(anyhow::Error::msg)?)?;
                        // Fail at start, not at the first block, on a wrong endpoint, bucket
                        // or credentials.
                        // The error's text already holds its causes: no chain to repeat.
                        s3.list("blocks/").await.map_err(|e| {
                            anyhow::anyhow!(
                                "listing bucket {} at {}: {e}",
                                cfg.s3_bucket,
                                cfg.s3_endpoint.as_deref().unwrap_or("AWS S3")
                            )
                        })?;
                        Arc::new(s3)
                    }
                };
                let metrics = Arc::new(weft_storage::StorageMetrics::new());
                self.storage_metrics = Some(metrics.clone());
                self.storage = Some(Arc::new(weft_storage::CountingStorage::with_metrics(inner, metrics)));
            }
            Module::Db => {
                let opts = match cfg.target {
                    // The only process: clean up at once.
                    Target::All => DbOptions {
                        maintains: true,
                        incomplete_grace: Duration::ZERO,
                    },
                    // Shares the directory with an ingester that may be writing a block.
                    Target::Compactor => DbOptions {
                        maintains: true,
                        incomplete_grace: INCOMPLETE_GRACE,
                    },
                    Target::Ingester | Target::Querier | Target::Distributor | Target::BlockBuilder => DbOptions {
                        maintains: false,
                        incomplete_grace: INCOMPLETE_GRACE,
                    },
                };
                let storage = self.storage.clone().expect("Storage runs before Db");
                self.db = Some(Db::open(storage, opts).await.context("loading blocks")?);
            }
            Module::Ingester => {
                let icfg = IngestConfig {
                    data_dir: cfg.data_dir.clone(),
                    fsync: cfg.fsync_policy(),
                    wal_segment_bytes: cfg.wal_segment_bytes,
                    wal_group_wait: std::time::Duration::from_secs_f64(cfg.wal_group_wait_ms / 1000.0),
                    wal_direct_io: cfg.wal_direct_io,
                    cut: CutPolicy {
                        max_age: Duration::from_secs_f64(cfg.block_max_age),
                        max_spans: cfg.block_max_spans,
                        max_bytes: cfg.head_max_bytes(false),
                    },
                    max_trace_bytes: cfg.max_trace_bytes,
                    rate_bytes: cfg.ingestion_rate_bytes,
                    burst_bytes: cfg.ingestion_burst_bytes,
                    // One cut may wait for the flusher while the next fills; more means the
                    // flusher is behind, and receivers answer 503 instead of growing memory.
                    max_flushing_bytes: cfg.head_max_bytes(false) as u64,
                    final_block_spans: cfg.final_block_spans(),
                    ..IngestConfig::default()
                };
                let db = self.db.clone().expect("Db runs before Ingester");
                self.ingest = Some(Ingest::open(icfg, db).await.map_err(anyhow::Error::msg)?);
            }
            Module::Distributor => {
                let client = kafka_client(cfg, "weft-distributor").await?;
                // A request's spans of one partition are one record: allow records as large
                // as the largest request.
                let max_message = (cfg.max_decompressed_bytes + (1 << 20)).to_string();
                let created = client
                    .create_topic(
                        &cfg.kafka_topic,
                        cfg.kafka_partitions as i32,
                        cfg.kafka_replication as i16,
                        &[("max.message.bytes", &max_message)],
                    )
                    .await
                    .with_context(|| format!("creating Kafka topic {}", cfg.kafka_topic))?;
                let compression = match cfg.kafka_compression {
                    crate::config::KafkaCompression::None => weft_kafka::Compression::None,
                    crate::config::KafkaCompression::Lz4 => weft_kafka::Compression::Lz4,
                    crate::config::KafkaCompression::Zstd => weft_kafka::Compression::Zstd(1),
                };
                let producer = Arc::new(weft_kafka::Producer::new(client, &cfg.kafka_topic, compression));
                let dcfg = weft_distributor::DistributorConfig {
                    rate_bytes: cfg.ingestion_rate_bytes,
                    burst_bytes: cfg.ingestion_burst_bytes,
                    ..Default::default()
                };
                let d = weft_distributor::Distributor::new(dcfg, producer)
                    .await
                    .with_context(|| format!("reading Kafka topic {}", cfg.kafka_topic))?;
                tracing::info!(
                    topic = %cfg.kafka_topic,
                    partitions = d.partitions(),
                    created,
                    "distributing to Kafka"
                );
                self.distributor = Some(d);
            }
            Module::BlockBuilder => {
                let client = kafka_client(cfg, "weft-block-builder").await?;
                let bcfg = weft_blockbuilder::BlockBuilderConfig {
                    topic: cfg.kafka_topic.clone(),
                    group: cfg.kafka_group.clone(),
                    partitions: cfg.block_builder_partitions.clone(),
                    cut: CutPolicy {
                        max_age: Duration::from_secs_f64(cfg.block_max_age),
                        max_spans: cfg.block_max_spans,
                        max_bytes: cfg.head_max_bytes(true),
                    },
                    row_group_rows: IngestConfig::default().row_group_rows,
                    final_block_spans: cfg.final_block_spans(),
                    fetch_bytes: 8 << 20,
                    fetch_min_bytes: 1 << 20,
                };
                let db = self.db.clone().expect("Db runs before BlockBuilder");
                let b = weft_blockbuilder::BlockBuilder::start(bcfg, client, db, tokio::runtime::Handle::current())
                    .await
                    .with_context(|| format!("starting to read Kafka topic {}", cfg.kafka_topic))?;
                self.block_builder = Some(b);
            }
            Module::Receivers => {
                let consumer: Arc<dyn weft_ingest::TraceConsumer> = match (&self.ingest, &self.distributor) {
                    (Some(i), _) => i.clone(),
                    (None, Some(d)) => d.clone(),
                    (None, None) => anyhow::bail!("receivers need an ingester or a distributor to push into"),
                };
                self.receiver = Some(Receiver {
                    tenants: tenants.clone(),
                    consumer,
                });
            }
            Module::Querier => {
                // In one process with the ingester, queries see its head at once; a querier on
                // its own sees spans once their block is written.
                let recent: Arc<dyn RecentSpans> = match &self.ingest {
                    Some(i) => i.clone(),
                    // Cluster mode: recent spans come from Kafka, tailed here.
                    None if !cfg.kafka_brokers.is_empty() => {
                        let client = kafka_client(cfg, "weft-querier").await?;
                        let db = self.db.clone().expect("Db runs before Querier");
                        let live = weft_blockbuilder::live::LiveStore::start(
                            &cfg.kafka_topic,
                            &cfg.kafka_group,
                            client,
                            db,
                            tokio::runtime::Handle::current(),
                        )
                        .await
                        .with_context(|| format!("tailing Kafka topic {}", cfg.kafka_topic))?;
                        self.live_store = Some(live.clone());
                        live
                    }
                    None => Arc::new(NoRecentSpans),
                };
                let qcfg = QuerierConfig {
                    max_trace_read_bytes: cfg.max_trace_response_bytes,
                };
                let db = self.db.clone().expect("Db runs before Querier");
                self.querier = Some(Arc::new(Querier::new(db, recent, qcfg)));
            }
            Module::QueryApi => {}
            Module::Compactor => {
                let db = self.db.clone().expect("Db runs before Compactor");
                let c = Compactor::new(db, cfg.compaction());
                if let Some(every) = c.config().interval {
                    c.spawn(every, Some(lower)).context("starting the compactor thread")?;
                }
                if let Some(scrub) = cfg.scrub() {
                    let db = self.db.clone().expect("Db runs before Compactor");
                    weft_db::scrub::Scrubber::new(db, scrub)
                        .spawn(Some(lower))
                        .context("starting the scrubber thread")?;
                }
                self.compactor = Some(c);
            }
            Module::BlocklistPoller => {
                let db = Arc::downgrade(self.db.as_ref().expect("Db runs before BlocklistPoller"));
                let every = Duration::from_secs_f64(cfg.blocklist_poll);
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(every);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tick.tick().await;
                        let Some(db) = db.upgrade() else { break };
                        if let Err(e) = db.poll().await {
                            tracing::warn!(error = %e, "re-reading the block list failed; keeping the last one");
                        }
                    }
                });
            }
        }
        Ok(())
    }

    /// Stops background work and syncs the WAL.
    pub async fn stop(&self) {
        if let Some(c) = &self.compactor {
            c.stop();
        }
        if let Some(b) = &self.block_builder {
            b.stop();
        }
        if let Some(l) = &self.live_store {
            l.stop();
        }
        if let Some(i) = &self.ingest {
            i.shutdown().await;
        }
    }
}

/// A client of the configured Kafka cluster (`--kafka-brokers`).
async fn kafka_client(cfg: &Config, client_id: &str) -> anyhow::Result<Arc<weft_kafka::Client>> {
    let kafka = weft_kafka::ClientConfig {
        brokers: cfg.kafka_brokers.clone(),
        client_id: client_id.into(),
        ..Default::default()
    };
    weft_kafka::Client::connect(kafka)
        .await
        .with_context(|| format!("connecting to Kafka at {}", cfg.kafka_brokers.join(",")))
}

/// A block folder without `meta.json` younger than this may still be being written by another
/// process sharing the data directory, and is not deleted as a crashed write.
const INCOMPLETE_GRACE: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_dependencies_first() {
        use Module::*;
        assert_eq!(
            resolve(target_modules(Target::All)),
            vec![Storage, Db, Ingester, Receivers, Querier, QueryApi, Compactor]
        );
        assert_eq!(
            resolve(target_modules(Target::Querier)),
            vec![Storage, Db, Querier, QueryApi, BlocklistPoller]
        );
        assert_eq!(
            resolve(target_modules(Target::Ingester)),
            vec![Storage, Db, Ingester, Receivers, BlocklistPoller]
        );
        assert_eq!(resolve(target_modules(Target::Compactor)), vec![Storage, Db, Compactor]);
        assert_eq!(
            resolve(target_modules(Target::Distributor)),
            vec![Distributor, Receivers]
        );
        for t in [
            Target::All,
            Target::Ingester,
            Target::Querier,
            Target::Compactor,
            Target::Distributor,
        ] {
            let order = resolve(target_modules(t));
            for (i, m) in order.iter().enumerate() {
                for d in m.deps() {
                    assert!(order[..i].contains(d), "{m:?} before its dependency {d:?}");
                }
            }
        }
    }
}
