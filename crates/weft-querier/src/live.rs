//! The live store: recent spans from Kafka, for queriers in cluster mode (ADR 0008).
//!
//! A querier with `--kafka-brokers` tails every partition itself, from the block builders'
//! committed offsets, into one head per partition (the ingester's head type). Every second, and
//! when a query asks ([`RecentSpans::catch_up`]), the active head is frozen into a part that
//! records its offset range. A part is dropped once this querier's own block list holds blocks
//! covering it for every tenant in it ([`FrozenSpans::covered_by`]), so a span is always in a
//! part or in a listed block, and a query sees spans within a second of their acknowledgement.
//!
//! Records that listed blocks already cover (written by a block builder but not yet committed)
//! are skipped as they arrive, as block builders skip them after a restart. A part that a new
//! block covers only in part (the builder cut inside the part's offsets) is rebuilt without
//! the covered records' rows, before every query ([`trim`]), so each span is counted once:
//! in a part or in a block. The live store keeps, per part and tenant, the first row of each
//! record for this.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};
use weft_admission::metrics::IngestMetrics;
use weft_block::row::SpanRow;
use weft_db::Db;
use weft_db::recent::{FrozenSpans, RecentSpans, RecentView};
use weft_head::Head;
use weft_kafka::record::{FORMAT_HEADER, read_record};
use weft_kafka::{Client, OffsetAt};
use weft_wal::{KIND_OTLP, Record, WalPos};

/// How often an active head is frozen into a readable part without a query asking.
const FREEZE_EVERY: Duration = Duration::from_secs(1);

/// Most bytes of recent spans held over all partitions. Past it (block builders far behind or
/// down), the oldest parts are dropped: their spans become visible again once their blocks are
/// written. Memory stays bounded; queries may miss the dropped spans until then.
pub const MAX_LIVE_BYTES: usize = 512 << 20;

/// Per tenant, where each record's rows start: (offset, first row).
type Bounds = HashMap<Arc<str>, Vec<(i64, usize)>>;

/// The active head's record bounds, and each frozen part with its own.
type PartBounds = (Bounds, Vec<(Arc<FrozenSpans>, Bounds)>);

struct LivePartition {
    partition: i32,
    head: Head,
    position: AtomicI64,
    /// Record bounds of the active head, and of each frozen part. Held while applying a
    /// record, freezing, or trimming, so bounds and rows agree.
    bounds: parking_lot::Mutex<PartBounds>,
}

impl LivePartition {
    fn apply(&self, rec: Record, offset: i64) {
        let mut b = self.bounds.lock();
        let rows = self.head.tenant_rows(&rec.tenant);
        b.0.entry(rec.tenant.clone()).or_default().push((offset, rows));
        self.head.apply(&rec);
    }

    fn freeze(&self) {
        let mut b = self.bounds.lock();
        if let Some(cut) = self.head.cut() {
            let active = std::mem::take(&mut b.0);
            b.1.push((cut, active));
        }
    }

    /// Drops or rebuilds frozen parts that listed blocks cover, wholly or in part, and drops
    /// the oldest parts past `budget` bytes.
    fn trim(&self, db: &Db, budget: usize) {
        let mut b = self.bounds.lock();
        let covered = db.kafka_coverage(self.partition);
        let mut held: usize = b.1.iter().map(|(c, _)| c.bytes).sum();
        let mut kept = Vec::with_capacity(b.1.len());
        for (cut, bounds) in std::mem::take(&mut b.1) {
            let end = cut.kafka.map_or(i64::MAX, |r| r.end);
            let cover = |t: &str| covered.get(t).copied().unwrap_or(i64::MIN);
            if cut.tenants.iter().all(|(t, _)| cover(t) >= end) || held > budget {
                if held > budget && !cut.tenants.iter().all(|(t, _)| cover(t) >= end) {
                    tracing::warn!(partition = self.partition, bytes = cut.bytes, kafka = ?cut.kafka, "live store over its memory budget: dropping its oldest recent spans until their blocks are written");
                }
                held -= cut.bytes;
                self.head.replace_frozen(&cut, None);
                continue;
            }
            let partial = cut.tenants.iter().any(|(t, _)| {
                let c = cover(t);
                bounds
                    .get(t)
                    .is_some_and(|v| v.first().is_some_and(|&(first, _)| c > first))
            });
            if !partial {
                kept.push((cut, bounds));
                continue;
            }
            // Rebuild without the rows of covered records.
            let mut tenants = Vec::new();
            let mut new_bounds = Bounds::new();
            let mut bytes = 0;
            for (t, cols) in &cut.tenants {
                let tb = bounds.get(t).cloned().unwrap_or_default();
                let c = cover(t);
                let skip = tb.iter().find(|&&(o, _)| o >= c).map_or(cols.len(), |&(_, r)| r);
                if skip >= cols.len() {
                    continue;
                }
                let mut fresh = weft_block::columns::SpanColumns::default();
                for r in skip..cols.len() {
                    fresh.push_row(&cols.row(r as u32));
                }
                fresh.end_run();
                fresh.freeze();
                bytes += fresh.memory_bytes();
                new_bounds.insert(
                    t.clone(),
                    tb.iter()
                        .filter(|&&(o, _)| o >= c)
                        .map(|&(o, r)| (o, r - skip))
                        .collect(),
                );
                tenants.push((t.clone(), fresh));
            }
            held -= cut.bytes;
            if tenants.is_empty() {
                self.head.replace_frozen(&cut, None);
                continue;
            }
            held += bytes;
            let fresh = Arc::new(FrozenSpans {
                tenants,
                wal_end: cut.wal_end,
                kafka: cut.kafka,
                bytes,
            });
            self.head.replace_frozen(&cut, Some(fresh.clone()));
            kept.push((fresh, new_bounds));
        }
        b.1 = kept;
    }
}

/// Recent spans of every partition of the topic. Implements [`RecentSpans`].
pub struct LiveStore {
    parts: Vec<Arc<LivePartition>>,
    topic: String,
    client: Arc<Client>,
    db: Arc<Db>,
    budget: usize,
    stop: Arc<AtomicBool>,
    /// The partitions' threads, waited for by [`LiveStore::stop`].
    threads: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
    pub metrics: Arc<IngestMetrics>,
}

impl LiveStore {
    /// Starts tailing every partition of `topic` from `group`'s committed offsets.
    pub async fn start(
        topic: &str,
        group: &str,
        client: Arc<Client>,
        db: Arc<Db>,
        rt: tokio::runtime::Handle,
    ) -> Result<Arc<LiveStore>, weft_kafka::Error> {
        let count = client.partition_count(topic).await? as i32;
        let partitions: Vec<i32> = (0..count).collect();
        let committed = client.committed_offsets(group, topic, &partitions).await?;
        // Blocks below the committed offsets were written before they were committed: list
        // them now, so nothing falls between the blocks and the live store.
        if let Err(e) = db.poll().await {
            tracing::warn!(error = %e, "re-reading the block list failed; the next poll catches up");
        }
        let metrics = Arc::new(IngestMetrics::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut parts = Vec::new();
        let mut threads = Vec::new();
        for (&p, start) in partitions.iter().zip(committed) {
            let start = match start {
                Some(o) => o,
                None => client.list_offset(topic, p, OffsetAt::Earliest).await?,
            };
            let part = Arc::new(LivePartition {
                partition: p,
                head: Head::for_partition(metrics.clone(), p),
                position: AtomicI64::new(start),
                bounds: parking_lot::Mutex::new((Bounds::new(), Vec::new())),
            });
            parts.push(part.clone());
            let (topic, client, db, stop, rt) =
                (topic.to_string(), client.clone(), db.clone(), stop.clone(), rt.clone());
            let budget = MAX_LIVE_BYTES / partitions.len().max(1);
            let thread = std::thread::Builder::new()
                .name(format!("weft-live-{p}"))
                .spawn(move || rt.block_on(tail(part, topic, client, db, stop, budget)))
                .map_err(|e| weft_kafka::Error::Io(format!("starting a live-store thread: {e}")))?;
            threads.push(thread);
        }
        let budget = MAX_LIVE_BYTES / parts.len().max(1);
        Ok(Arc::new(LiveStore {
            parts,
            topic: topic.to_string(),
            client,
            db,
            budget,
            stop,
            threads: parking_lot::Mutex::new(threads),
            metrics,
        }))
    }

    /// Stops tailing: each partition's thread ends after its current fetch (at most 250 ms
    /// of waiting for records). Waits up to 2 s for them, so that none is still waiting on the
    /// runtime's timers when the runtime shuts down.
    pub async fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && !self.threads.lock().iter().all(|t| t.is_finished()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The next offset each partition reads.
    pub fn positions(&self) -> Vec<(i32, i64)> {
        self.parts
            .iter()
            .map(|p| (p.partition, p.position.load(Ordering::Relaxed)))
            .collect()
    }

    fn all_frozen(&self) -> Vec<Arc<FrozenSpans>> {
        self.parts.iter().flat_map(|p| p.head.frozen()).collect()
    }
}

async fn tail(
    part: Arc<LivePartition>,
    topic: String,
    client: Arc<Client>,
    db: Arc<Db>,
    stop: Arc<AtomicBool>,
    budget: usize,
) {
    let p = part.partition;
    let mut tenants: HashMap<Bytes, Arc<str>> = HashMap::new();
    let mut last_freeze = Instant::now();
    let mut backoff = Duration::from_millis(100);
    while !stop.load(Ordering::Acquire) {
        let position = part.position.load(Ordering::Relaxed);
        match client
            .fetch(&topic, p, position, 8 << 20, 1, Duration::from_millis(250))
            .await
        {
            Ok(f) => {
                let covered = if f.batches.is_empty() {
                    HashMap::new()
                } else {
                    db.kafka_coverage(p)
                };
                let applied = f.apply_batches(|batch| {
                    for rec in batch.records {
                        let Ok(tenant) = read_record(rec.key.as_deref(), rec.header(FORMAT_HEADER)) else {
                            continue;
                        };
                        if covered.get(tenant).is_some_and(|&end| rec.offset < end) {
                            continue;
                        }
                        let key = rec.key.clone().unwrap_or_default();
                        let tenant = tenants.entry(key).or_insert_with(|| Arc::from(tenant)).clone();
                        let offset = rec.offset;
                        part.apply(
                            Record {
                                pos: WalPos {
                                    segment: p as u64,
                                    offset: offset as u64,
                                },
                                kind: KIND_OTLP,
                                tenant,
                                payload: rec.value,
                            },
                            offset,
                        );
                    }
                    part.position.fetch_max(batch.next_offset, Ordering::AcqRel);
                });
                match applied {
                    Err(e) => {
                        tracing::warn!(partition = p, error = %e, "live store: a Kafka record batch is unreadable; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                    Ok(()) => backoff = Duration::from_millis(100),
                }
            }
            Err(e) if e.code() == Some(1) => {
                let earliest = client
                    .list_offset(&topic, p, OffsetAt::Earliest)
                    .await
                    .unwrap_or(position);
                part.position.store(earliest.max(position), Ordering::Release);
            }
            Err(e) => {
                tracing::warn!(partition = p, error = %e, "live store: Kafka fetch failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
        if last_freeze.elapsed() >= FREEZE_EVERY {
            part.freeze();
            last_freeze = Instant::now();
        }
        part.trim(&db, budget);
    }
}

#[async_trait::async_trait]
impl RecentSpans for LiveStore {
    /// Waits (up to 5 s) until every partition has read up to the offset Kafka reports as its
    /// end when the call starts, then freezes what it read, so spans acknowledged before the
    /// call are visible. An idle store answers after one `ListOffsets` per partition.
    async fn catch_up(&self) {
        let until = Instant::now() + Duration::from_secs(5);
        for p in &self.parts {
            let end = match self
                .client
                .list_offset(&self.topic, p.partition, OffsetAt::Latest)
                .await
            {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(partition = p.partition, error = %e, "live store: reading the partition's end failed");
                    continue;
                }
            };
            while p.position.load(Ordering::Acquire) < end && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if p.head.active_spans() > 0 {
                p.freeze();
            }
            p.trim(&self.db, self.budget);
        }
    }

    fn view(&self, _tenant: &str, f: &mut dyn FnMut(RecentView<'_>)) {
        let frozen = self.all_frozen();
        f(RecentView {
            active: None,
            frozen: &frozen,
        })
    }

    fn frozen(&self) -> Vec<Arc<FrozenSpans>> {
        self.all_frozen()
    }

    fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        self.parts.iter().any(|p| p.head.holds(tenant, id))
    }

    fn trace(&self, tenant: &str, id: &[u8; 16]) -> Vec<SpanRow> {
        self.parts.iter().flat_map(|p| p.head.find_trace(tenant, id)).collect()
    }
}
