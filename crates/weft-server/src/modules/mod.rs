//! The roles of the binary, as modules with dependencies (Tempo's `cmd/tempo/app/modules.go`).
//!
//! `--target` names the modules a process runs; [`Modules::init`] adds their dependencies and
//! initialises each once, dependencies first. `all` runs every module in one process. Each
//! role module is a file here owning its options section and its initialisation; the ports and
//! routes a process serves are built afterwards by the API folders (`crate::apis`), from the
//! modules that run.
//!
//! | module | needs | what it is |
//! |---|---|---|
//! | `Storage` | | where blocks live (the data directory, or an S3 bucket with `--storage s3`), counted ([`storage`]) |
//! | `Db` | Storage | the block list and block maintenance primitives (`weft-db`, [`db`]) |
//! | `Ingester` | Db | WAL, head, block flusher (`weft-ingest`, [`ingester`]) |
//! | `Distributor` | | admission, then spans routed by trace ID to Kafka (`weft-distributor`, [`kafka`]) |
//! | `BlockBuilder` | Db | Kafka partitions into heads, then blocks; offsets committed after the blocks (`weft-blockbuilder`, [`kafka`]) |
//! | `Receivers` | | every receiver port, pushing into the ingester or the distributor (a target names one before it) |
//! | `Querier` | Db | trace by ID, search, metrics over blocks (plus the ingester's head when in the same process, or, with `--kafka-brokers`, recent spans tailed from Kafka: `weft_querier::live` (a live store's own partitions only), or asked of `--live-stores`; [`querier`]) |
//! | `QueryApi` | Querier | the query APIs (Tempo's, Jaeger's, Zipkin's) and the UI; with `--query-peers` (required by `--target query-frontend`) each query is split over the peers (`crate::query::jobs`) |
//! | `LiveStore` | Querier | a live store's jobs (and Tempo's routes) on the HTTP port only; its querier tails `--live-store-partitions` |
//! | `Compactor` | Db | compaction, retention, clean-up of crashed writes, the block scrubber ([`compactor`]) |
//! | `BlocklistPoller` | Db | re-reads the block list written by other processes ([`db`]) |
//!
//! Every target also serves `/metrics`, `/ready`, `/api/echo` and `/api/status/buildinfo` on
//! its HTTP port.
//!
//! Several processes may share one data directory: only the compactor (or `all`) deletes
//! anything there ([`weft_db::DbOptions::maintains`]).

pub mod compactor;
pub mod db;
pub mod ingester;
pub mod kafka;
pub mod querier;
pub mod storage;

use std::sync::Arc;

use anyhow::Context;
use clap::ValueEnum;
use weft_db::Db;
use weft_db::compact::Compactor;
use weft_ingest::Ingest;
use weft_querier::Querier;
use weft_storage::Storage;

use crate::config::Config;
use crate::receivers::Receiver;
use crate::tenant::Tenants;

/// What names this process in the leases it holds: its host and HTTP port. A process that
/// restarts takes its own leases back at once instead of waiting them out, and two processes
/// on one host cannot share a name (nor an HTTP port).
pub fn instance_name(http_port: u16) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "weft".into());
    format!("{host}:{http_port}")
}

/// Which roles this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// Every role in one process (the default).
    All,
    /// Receives spans (OTLP ports), keeps the WAL and the head, and writes blocks. Serves
    /// /metrics and /ready on the HTTP port, no queries. Leaves compaction to a compactor.
    Ingester,
    /// Answers the query API and the UI from the blocks of the data directory, re-reading the
    /// block list every --blocklist-poll seconds. Writes nothing.
    Querier,
    /// A querier that splits every query it can across the queriers of --query-peers
    /// (required) and merges their answers (spec/jobs.md). It asks the live stores of
    /// --live-stores for the recent spans, or, without them, reads those itself (tailed from
    /// Kafka with --kafka-brokers); either way the queriers behind it can read blocks only
    /// (--querier-live-store false).
    QueryFrontend,
    /// Tails the Kafka partitions of --live-store-partitions (default all) and answers the
    /// recent part (spans not yet in a block) of the queries that frontends and queriers
    /// with --live-stores send it. Reads the block list, writes nothing; a replacement
    /// replays from the block builders' committed offsets.
    LiveStore,
    /// Compacts blocks, applies retention and deletes what crashed writers left behind.
    /// Serves /metrics and /ready on the HTTP port.
    Compactor,
    /// Receives spans on every receiver port, admits them (validation, tenancy, rate limits)
    /// and writes them to Kafka (--kafka-brokers), routed by trace ID. Keeps no WAL and no
    /// blocks; a request is acknowledged once Kafka acknowledged it.
    Distributor,
    /// Reads its Kafka partitions (--block-builder-partitions, default all) into heads and
    /// writes blocks to storage, committing offsets to --kafka-group only after the blocks are
    /// written. Serves /metrics and /ready on the HTTP port.
    BlockBuilder,
}

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
    /// The live-store role: its querier tails its partitions and answers jobs on the HTTP
    /// port (Tempo's routes); no other query port is opened.
    LiveStore,
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
            QueryApi | LiveStore => &[Querier],
        }
    }
}

/// The modules a target asks for (their dependencies are added by [`resolve`]).
pub fn target_modules(t: Target) -> &'static [Module] {
    use Module::*;
    match t {
        Target::All => &[Ingester, Receivers, QueryApi, Compactor],
        Target::Ingester => &[Ingester, Receivers, BlocklistPoller],
        Target::Querier | Target::QueryFrontend => &[QueryApi, BlocklistPoller],
        Target::LiveStore => &[LiveStore, BlocklistPoller],
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
    /// A querier's or a live store's recent spans from Kafka (cluster mode).
    pub live_store: Option<Arc<weft_querier::live::LiveStore>>,
    pub receiver: Option<Receiver>,
    pub querier: Option<Arc<Querier>>,
    pub compactor: Option<Arc<Compactor>>,
}

impl Modules {
    /// Initialises the modules of the configured target, dependencies first. Must be called
    /// inside the ingest runtime (the ingester's threads hand work to it). `lower` lowers the
    /// priority of the calling thread (for background threads).
    pub async fn init(cfg: &Config, tenants: Arc<Tenants>, lower: fn()) -> anyhow::Result<Modules> {
        let mut m = Modules::default();
        for module in resolve(target_modules(cfg.server.target)) {
            m.init_one(module, cfg, &tenants, lower)
                .await
                .with_context(|| format!("starting module {module:?}"))?;
            m.running.push(module);
        }
        Ok(m)
    }

    pub fn runs(&self, m: Module) -> bool {
        self.running.contains(&m)
    }

    /// The Db, which every module but the distributor and the receivers needs.
    fn db(&self) -> Arc<Db> {
        self.db.clone().expect("Db runs before the modules that need it")
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
                let (storage, metrics) = storage::init(&cfg.storage, &cfg.server.data_dir).await?;
                self.storage = Some(storage);
                self.storage_metrics = Some(metrics);
            }
            Module::Db => {
                let storage = self.storage.clone().expect("Storage runs before Db");
                self.db = Some(db::init(cfg.server.target, storage).await?);
            }
            Module::Ingester => self.ingest = Some(ingester::init(cfg, self.db()).await?),
            Module::Distributor => self.distributor = Some(kafka::init_distributor(cfg).await?),
            Module::BlockBuilder => self.block_builder = Some(kafka::init_block_builder(cfg, self.db()).await?),
            Module::Receivers => {
                let consumer: Arc<dyn weft_admission::TraceConsumer> = match (&self.ingest, &self.distributor) {
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
                let (querier, live) = querier::init(cfg, self.db(), self.ingest.clone()).await?;
                self.querier = Some(querier);
                self.live_store = live;
            }
            // Their ports are built by the API folders.
            Module::QueryApi | Module::LiveStore => {}
            Module::Compactor => self.compactor = Some(compactor::init(cfg, self.db(), lower)?),
            Module::BlocklistPoller => db::spawn_poller(&self.db(), &cfg.poller),
        }
        Ok(())
    }

    /// Stops background work and syncs the WAL.
    pub async fn stop(&self) {
        if let Some(c) = &self.compactor {
            c.stop();
        }
        if let Some(b) = &self.block_builder {
            b.stop().await;
        }
        if let Some(l) = &self.live_store {
            l.stop().await;
        }
        if let Some(i) = &self.ingest {
            i.shutdown().await;
        }
    }
}

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
            resolve(target_modules(Target::LiveStore)),
            vec![Storage, Db, Querier, LiveStore, BlocklistPoller]
        );
        assert_eq!(
            resolve(target_modules(Target::Distributor)),
            vec![Distributor, Receivers]
        );
        for t in [
            Target::All,
            Target::Ingester,
            Target::Querier,
            Target::QueryFrontend,
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
