//! One process's worth of weft for tests: a block database, the write path over it, a
//! querier reading both, and a compactor run by hand.

#![allow(dead_code)]

use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;
use weft_admission::{PushError, PushOutcome};
use weft_db::compact::{Compacted, CompactionConfig, Compactor};
use weft_db::{Db, DbOptions};
use weft_ingest::{Ingest, IngestConfig};
use weft_querier::{Querier, QuerierConfig};
use weft_storage::Storage;

pub struct Node {
    pub db: Arc<Db>,
    pub ingest: Arc<Ingest>,
    pub querier: Querier,
    pub compactor: Arc<Compactor>,
}

impl Node {
    /// Opens every role over `storage`; compaction runs only when a test calls it.
    pub async fn open(cfg: IngestConfig, compaction: CompactionConfig, storage: Arc<dyn Storage>) -> Node {
        let db = Db::open(storage, DbOptions::default()).await.unwrap();
        let ingest = Ingest::open(cfg, db.clone()).await.unwrap();
        let querier = Querier::new(db.clone(), ingest.clone(), QuerierConfig::default());
        let compactor = Compactor::new(
            db.clone(),
            CompactionConfig {
                interval: None,
                ..compaction
            },
        );
        Node {
            db,
            ingest,
            querier,
            compactor,
        }
    }

    /// A node over in-memory block storage, its WAL in `dir`, cutting row groups of
    /// `row_group_rows` spans (small ones, so a few traces make several).
    pub async fn in_memory(dir: &std::path::Path, row_group_rows: usize) -> Node {
        let cfg = IngestConfig {
            data_dir: dir.to_path_buf(),
            row_group_rows,
            ..Default::default()
        };
        Node::open(
            cfg,
            Default::default(),
            Arc::new(weft_storage::MemoryStorage::default()),
        )
        .await
    }

    /// The same node, its querier running `parallelism` pieces of query work at once.
    pub fn with_parallelism(mut self, parallelism: usize) -> Node {
        let cfg = QuerierConfig {
            parallelism,
            ..QuerierConfig::default()
        };
        self.querier = Querier::new(self.db.clone(), self.ingest.clone(), cfg);
        self
    }

    pub async fn push(&self, tenant: &Arc<str>, body: Bytes) -> Result<PushOutcome, PushError> {
        self.ingest.push(tenant, body, None).await
    }

    pub async fn flush(&self) {
        self.ingest.flush().await
    }

    pub fn head_span_count(&self) -> usize {
        self.ingest.head_span_count()
    }

    pub async fn compact_once(&self, tenant: &str) -> Result<Option<Compacted>, weft_block::BlockError> {
        self.compactor.compact_once(tenant).await
    }

    pub async fn shutdown(&self) {
        self.compactor.stop();
        self.ingest.shutdown().await
    }
}

impl Deref for Node {
    type Target = Querier;

    fn deref(&self) -> &Querier {
        &self.querier
    }
}

/// One OTLP export request of `spans` (one resource, one scope), encoded.
pub fn export(spans: Vec<weft_otlp::pb::trace::Span>) -> Bytes {
    use prost::Message;
    let req = weft_otlp::pb::collector::ExportTraceServiceRequest {
        resource_spans: vec![weft_otlp::pb::trace::ResourceSpans {
            scope_spans: vec![weft_otlp::pb::trace::ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Bytes::from(req.encode_to_vec())
}

/// A service graph's services (spans, errors, roots) and edges (calls, errors, latency p50 and
/// p99), for comparing graphs counted different ways.
pub type GraphShape = (Vec<(String, u64, u64, u64)>, Vec<(String, String, u64, u64, u64, u64)>);

pub fn graph_shape(g: &weft_engine::graph::ServiceGraph) -> GraphShape {
    let services = g
        .services()
        .into_iter()
        .map(|(n, s)| (n.to_owned(), s.spans, s.errors, s.roots))
        .collect();
    let edges = g
        .edges()
        .into_iter()
        .map(|(a, b, e)| {
            let (p50, p99) = (e.latency_quantile(0.5), e.latency_quantile(0.99));
            (a.to_owned(), b.to_owned(), e.calls, e.errors, p50, p99)
        })
        .collect();
    (services, edges)
}
