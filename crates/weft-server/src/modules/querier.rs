//! The Querier module: trace by ID, search and metrics over blocks, plus the recent spans not
//! yet in a block (the ingester's head in the same process, or tailed from Kafka).

use std::sync::Arc;

use anyhow::Context;
use weft_db::Db;
use weft_db::recent::{NoRecentSpans, RecentSpans};
use weft_ingest::Ingest;
use weft_querier::{Querier, QuerierConfig};

use crate::config::Config;
use crate::modules::Target;

/// The querier, and the live store it tails Kafka with in cluster mode.
pub async fn init(
    cfg: &Config,
    db: Arc<Db>,
    ingest: Option<Arc<Ingest>>,
) -> anyhow::Result<(Arc<Querier>, Option<Arc<weft_querier::live::LiveStore>>)> {
    let k = &cfg.kafka;
    let mut live_store = None;
    // In one process with the ingester, queries see its head at once; a querier on its own
    // sees spans once their block is written, unless it tails Kafka (a query-frontend always
    // does; a querier unless --querier-live-store false).
    let live_role = cfg.server.target == Target::LiveStore;
    let recent: Arc<dyn RecentSpans> = match ingest {
        Some(i) => i,
        // Cluster mode, with live stores: each query asks them (crate::query::jobs::live).
        None if !cfg.query.live_stores.is_empty() => Arc::new(crate::query::jobs::live::RemoteRecent::new(
            crate::query::jobs::Peers::of(
                cfg.query.live_stores.clone(),
                std::time::Duration::from_secs_f64(cfg.query.query_job_timeout),
            ),
        )),
        // Cluster mode: recent spans come from Kafka, tailed here (a live store's own
        // partitions only).
        None if !k.kafka_brokers.is_empty()
            && (cfg.query.querier_live_store || live_role || cfg.server.target == Target::QueryFrontend) =>
        {
            let client = k
                .client(if live_role { "weft-live-store" } else { "weft-querier" })
                .await?;
            let partitions: &[i32] = if live_role { &k.live_store_partitions } else { &[] };
            let live = weft_querier::live::LiveStore::start(
                &k.kafka_topic,
                &k.kafka_group,
                partitions,
                k.live_store_max_bytes,
                client,
                db.clone(),
                tokio::runtime::Handle::current(),
            )
            .await
            .with_context(|| format!("tailing Kafka topic {}", k.kafka_topic))?;
            live_store = Some(live.clone());
            live
        }
        None => Arc::new(NoRecentSpans),
    };
    let qcfg = QuerierConfig {
        max_trace_read_bytes: cfg.query.max_trace_response_bytes,
        parallelism: cfg.query.query_parallelism.unwrap_or_else(weft_querier::workers::cores),
    };
    Ok((Arc::new(Querier::new(db, recent, qcfg)), live_store))
}
