//! The block builder (`--target block-builder`): the write path's back half in cluster mode
//! (ADR 0008).
//!
//! ```text
//! per assigned partition (a thread each):
//!   resume at the group's committed offset (or the partition's earliest)
//!   fetch ─► record: tenant (key) + format header ─► skip what the tenant's blocks cover
//!         ─► Head::apply (the ingester's head: decode once into columns)
//!   cut by span count / memory / age ─► one block per tenant (weft_head::write_cut), each
//!         named from (topic, partition, offset range, tenant) and recording that range
//!   ─► commit the cut's end offset to the consumer group
//! ```
//!
//! **Crash safety.** Offsets are committed only after every block of a cut is written. A
//! restart resumes from the committed offset and skips each tenant's records below the highest
//! offset its blocks cover (`BlockMeta::kafka`), exactly as WAL replay skips records already in
//! blocks; so a crash anywhere neither loses nor duplicates spans. A rebuild of the same cut
//! gets the same block IDs, so it rewrites the same folders instead of adding copies.
//!
//! **Assignment** is static (`--block-builder-partitions`): each partition must have exactly
//! one block builder. Kafka keeps the records until they are committed and past retention, so a
//! block builder that is down only delays blocks.
//!
//! **Fencing.** Each partition is leased in the block storage (`weft_db::lease`,
//! `block-builder-leases/<topic>/<partition>`, created with `If-None-Match: *`). A builder
//! starts only if it takes every lease of its partitions, naming the holder of any it cannot;
//! it keeps them while it runs, checks its lease before each cut is written, and stops
//! building a partition whose lease it lost. A clean stop releases them; after a crash they
//! lapse within two periods, or at once for a restart with the same identity.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;
use weft_admission::metrics::IngestMetrics;
use weft_block::Origin;
use weft_block::meta::KafkaRange;
use weft_core::prom::{Exposition, Kind};
use weft_db::Db;
use weft_db::lease::{BLOCK_BUILDER_LEASE_PREFIX, Leases};
use weft_head::{CutPolicy, Head};
use weft_kafka::record::read_record;
use weft_kafka::{Client, OffsetAt};
use weft_wal::{KIND_OTLP, Record, WalPos};

/// Settings of a block builder.
#[derive(Debug, Clone)]
pub struct BlockBuilderConfig {
    pub topic: String,
    /// Consumer group whose committed offsets record progress.
    pub group: String,
    /// The partitions this builder owns; empty means every partition of the topic.
    pub partitions: Vec<i32>,
    pub cut: CutPolicy,
    pub row_group_rows: usize,
    /// A tenant's part of a cut with at least this many spans is written as a lasting block
    /// ([`weft_head::CutOptions`]).
    pub final_block_spans: u64,
    /// Bytes asked for per fetch.
    pub fetch_bytes: i32,
    /// Bytes a partition's fetch waits for (up to [`FETCH_MAX_WAIT`]). A block builder has no
    /// reader waiting on it, so it lets the broker gather a few batches per answer rather
    /// than waking for each one.
    pub fetch_min_bytes: i32,
    /// Who this builder is, in its partitions' leases: a restart with the same identity takes
    /// its leases back at once (the server uses `<host>:<http port>`).
    pub owner: String,
    /// Length of a lease period: a builder that dies without releasing its partitions frees
    /// them within two periods.
    pub lease_period: Duration,
}

/// The longest a fetch waits for `fetch_min_bytes`.
pub const FETCH_MAX_WAIT: Duration = Duration::from_millis(250);

/// Per-partition progress, for `/metrics`.
#[derive(Debug, Default)]
pub struct PartitionStats {
    /// The next offset to read.
    pub position: AtomicI64,
    /// The offset committed after the last written cut.
    pub committed: AtomicI64,
    /// The partition's high watermark at the last fetch.
    pub high_watermark: AtomicI64,
    pub records: AtomicU64,
    /// Records skipped because the tenant's blocks already cover them (after a restart).
    pub skipped: AtomicU64,
    /// Records that are not weft's format (counted, logged, skipped).
    pub refused: AtomicU64,
    pub fetch_errors: AtomicU64,
    pub fetches: AtomicU64,
    /// Until when (ms since the epoch) a cut may start being written: the partition's lease,
    /// less a margin for the write. 0 once the lease is lost.
    pub lease_until_ms: AtomicU64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// This builder's leases of its partitions.
struct Fence {
    leases: Leases,
    db: Arc<Db>,
    topic: String,
}

impl Fence {
    fn key(&self, partition: i32) -> String {
        format!("{}/{partition}", self.topic)
    }

    /// Takes or keeps the lease of `partition`, recording until when cuts may be written.
    /// `Ok(false)` when another builder holds it.
    async fn renew(&self, partition: i32, stats: &PartitionStats) -> Result<bool, weft_kafka::Error> {
        let lease = self
            .leases
            .acquire(&**self.db.storage(), &self.key(partition))
            .await
            .map_err(|e| weft_kafka::Error::Io(format!("leasing partition {partition} in block storage: {e}")))?;
        let until = match lease {
            // A cut starts only with a third of a period to spare before the lease's commit
            // deadline: writing a cut's blocks takes well under that.
            Some(l) => (l.commit_before() - self.leases.period / 3)
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64,
            None => 0,
        };
        stats.lease_until_ms.store(until, Ordering::Release);
        Ok(lease.is_some())
    }

    async fn holder(&self, partition: i32) -> String {
        self.leases
            .holder(&**self.db.storage(), &self.key(partition))
            .await
            .unwrap_or_else(|| "unknown".into())
    }
}

/// A running block builder.
pub struct BlockBuilder {
    pub metrics: Arc<IngestMetrics>,
    pub partitions: Vec<(i32, Arc<PartitionStats>)>,
    stop: Arc<AtomicBool>,
    /// The partitions' threads, waited for by [`BlockBuilder::stop`].
    threads: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
    fence: Arc<Fence>,
}

impl BlockBuilder {
    /// Starts one thread per partition on the runtime `rt` (whose tasks serve the Kafka
    /// connections and storage).
    pub async fn start(
        cfg: BlockBuilderConfig,
        client: Arc<Client>,
        db: Arc<Db>,
        rt: tokio::runtime::Handle,
    ) -> Result<Arc<BlockBuilder>, weft_kafka::Error> {
        let count = client.partition_count(&cfg.topic).await? as i32;
        let partitions: Vec<i32> = if cfg.partitions.is_empty() {
            (0..count).collect()
        } else {
            cfg.partitions.clone()
        };
        if let Some(p) = partitions.iter().find(|&&p| p < 0 || p >= count) {
            return Err(weft_kafka::Error::Config(format!(
                "partition {p} is not one of topic {}'s {count} partitions",
                cfg.topic
            )));
        }
        let fence = Arc::new(Fence {
            leases: Leases::with_prefix(BLOCK_BUILDER_LEASE_PREFIX, cfg.owner.clone(), cfg.lease_period),
            db: db.clone(),
            topic: cfg.topic.clone(),
        });
        // Every lease first, before any offset is read: a builder that cannot have all of its
        // partitions starts none of them.
        let stats: Vec<(i32, Arc<PartitionStats>)> = partitions
            .iter()
            .map(|&p| (p, Arc::new(PartitionStats::default())))
            .collect();
        for (i, (p, st)) in stats.iter().enumerate() {
            let taken = match fence.renew(*p, st).await {
                Ok(t) => t,
                Err(e) => {
                    release(&fence, &partitions[..i]).await;
                    return Err(e);
                }
            };
            if !taken {
                let holder = fence.holder(*p).await;
                release(&fence, &partitions[..i]).await;
                return Err(weft_kafka::Error::Config(format!(
                    "partition {p} of topic {} is being built by another block builder ({holder}); each \
                     partition needs exactly one. Give this one other partitions \
                     (--block-builder-partitions), or, if that builder is gone, start this one again \
                     within {} s, when its lease has lapsed",
                    cfg.topic,
                    (2 * cfg.lease_period).as_secs()
                )));
            }
        }
        let committed = match client.committed_offsets(&cfg.group, &cfg.topic, &partitions).await {
            Ok(c) => c,
            Err(e) => {
                release(&fence, &partitions).await;
                return Err(e);
            }
        };
        let metrics = Arc::new(IngestMetrics::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for ((p, st), start) in stats.iter().zip(committed) {
            let (p, st) = (*p, st.clone());
            let start = match start {
                Some(o) => o,
                None => client.list_offset(&cfg.topic, p, OffsetAt::Earliest).await?,
            };
            st.position.store(start, Ordering::Relaxed);
            st.committed.store(start, Ordering::Relaxed);
            let worker = Partition {
                fence: fence.clone(),
                cfg: cfg.clone(),
                partition: p,
                client: client.clone(),
                db: db.clone(),
                head: Head::new(metrics.clone()),
                metrics: metrics.clone(),
                stats: st,
                stop: stop.clone(),
            };
            let rt = rt.clone();
            tracing::info!(topic = %cfg.topic, partition = p, offset = start, "block builder resumes");
            let thread = std::thread::Builder::new()
                .name(format!("weft-bb-{p}"))
                .spawn(move || rt.block_on(worker.run(start)))
                .map_err(|e| weft_kafka::Error::Io(format!("starting a block builder thread: {e}")))?;
            threads.push(thread);
        }
        // Keeps the leases: renewed five times a period.
        let keeper = (fence.clone(), stats.clone(), stop.clone());
        rt.spawn(async move {
            let (fence, stats, stop) = keeper;
            let mut lost = vec![false; stats.len()];
            while !stop.load(Ordering::Acquire) {
                tokio::time::sleep(fence.leases.period / 5).await;
                if stop.load(Ordering::Acquire) {
                    break;
                }
                for (i, (p, st)) in stats.iter().enumerate() {
                    if lost[i] {
                        continue;
                    }
                    match fence.renew(*p, st).await {
                        Ok(true) => {}
                        Ok(false) => {
                            lost[i] = true;
                            let holder = fence.holder(*p).await;
                            tracing::error!(partition = *p, holder = %holder, "another block builder took this partition's lease; this one stops building it");
                        }
                        Err(e) => tracing::warn!(partition = *p, error = %e, "renewing the partition's lease failed; retrying"),
                    }
                }
            }
        });
        Ok(Arc::new(BlockBuilder {
            metrics,
            partitions: stats,
            stop,
            threads: parking_lot::Mutex::new(threads),
            fence,
        }))
    }

    /// Asks every partition thread to stop after its current fetch or cut, and waits up to
    /// 2 s for them (so that none is still on the runtime's timers when it shuts down). What
    /// the heads hold is not written: it is still in Kafka, uncommitted, and the next start
    /// reads it again.
    pub async fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < until && !self.threads.lock().iter().all(|t| t.is_finished()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A replacement may take the partitions at once.
        let partitions: Vec<i32> = self.partitions.iter().map(|(p, _)| *p).collect();
        release(&self.fence, &partitions).await;
    }

    /// Appends the block builder's counters to a Prometheus page.
    pub fn render_metrics(&self, out: &mut Exposition) {
        self.metrics.render(out);
        type Get = fn(&PartitionStats) -> f64;
        let families: [(&str, Kind, &str, Get); 9] = [
            (
                "weft_block_builder_lease_held",
                Kind::Gauge,
                "1 while this builder holds the partition's lease (it writes the partition's blocks), else 0.",
                |s| f64::from(u8::from(s.lease_until_ms.load(Ordering::Relaxed) > 0)),
            ),
            (
                "weft_block_builder_position",
                Kind::Gauge,
                "The next Kafka offset each partition reads.",
                |s| s.position.load(Ordering::Relaxed) as f64,
            ),
            (
                "weft_block_builder_committed_offset",
                Kind::Gauge,
                "The offset committed after each partition's last written cut.",
                |s| s.committed.load(Ordering::Relaxed) as f64,
            ),
            (
                "weft_block_builder_lag_records",
                Kind::Gauge,
                "Records of each partition not yet read (high watermark minus position).",
                |s| (s.high_watermark.load(Ordering::Relaxed) - s.position.load(Ordering::Relaxed)).max(0) as f64,
            ),
            (
                "weft_block_builder_records_total",
                Kind::Counter,
                "Records read into the head.",
                |s| s.records.load(Ordering::Relaxed) as f64,
            ),
            (
                "weft_block_builder_records_skipped_total",
                Kind::Counter,
                "Records skipped because the tenant's blocks already hold them (after a restart).",
                |s| s.skipped.load(Ordering::Relaxed) as f64,
            ),
            (
                "weft_block_builder_records_refused_total",
                Kind::Counter,
                "Records that are not in a record format this weft reads (skipped).",
                |s| s.refused.load(Ordering::Relaxed) as f64,
            ),
            (
                "weft_block_builder_fetches_total",
                Kind::Counter,
                "Fetch requests answered.",
                |s| s.fetches.load(Ordering::Relaxed) as f64,
            ),
            (
                "weft_block_builder_fetch_errors_total",
                Kind::Counter,
                "Fetches that failed (retried).",
                |s| s.fetch_errors.load(Ordering::Relaxed) as f64,
            ),
        ];
        for (name, kind, help, get) in families {
            out.family(name, kind, help);
            for (p, s) in &self.partitions {
                out.sample(name, &[("partition", &p.to_string())], get(s));
            }
        }
    }
}

async fn release(fence: &Fence, partitions: &[i32]) {
    for &p in partitions {
        fence.leases.release(&**fence.db.storage(), &fence.key(p)).await;
    }
}

struct Partition {
    fence: Arc<Fence>,
    cfg: BlockBuilderConfig,
    partition: i32,
    client: Arc<Client>,
    db: Arc<Db>,
    head: Head,
    metrics: Arc<IngestMetrics>,
    stats: Arc<PartitionStats>,
    stop: Arc<AtomicBool>,
}

impl Partition {
    async fn run(self, start: i64) {
        let p = self.partition;
        // What each tenant's blocks already hold (a previous run wrote them, then stopped
        // before committing).
        let covered: HashMap<String, i64> = self.db.kafka_coverage(p);
        let mut tenants: HashMap<Bytes, Arc<str>> = HashMap::new();
        let mut position = start;
        let mut cut_start = start;
        let mut first_ts: Option<i64> = None;
        let mut backoff = Duration::from_millis(100);
        while !self.stop.load(Ordering::Acquire) {
            let fetched = self
                .client
                .fetch(
                    &self.cfg.topic,
                    p,
                    position,
                    self.cfg.fetch_bytes,
                    self.cfg.fetch_min_bytes,
                    FETCH_MAX_WAIT,
                )
                .await;
            match fetched {
                Ok(f) => {
                    self.stats.fetches.fetch_add(1, Ordering::Relaxed);
                    self.stats.high_watermark.store(f.high_watermark, Ordering::Relaxed);
                    // Batch by batch: each is inflated just before its records go into the
                    // head, so it is still in cache when they are read.
                    let applied = f.apply_batches(|batch| {
                        for rec in batch.records {
                            let tenant = match read_record(
                                rec.key.as_deref(),
                                rec.header(weft_kafka::record::FORMAT_HEADER),
                            ) {
                                Ok(t) => t,
                                Err(e) => {
                                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                                    tracing::error!(partition = p, offset = rec.offset, error = %e, "skipping a Kafka record");
                                    continue;
                                }
                            };
                            if covered.get(tenant).is_some_and(|&end| rec.offset < end) {
                                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            let key = rec.key.clone().unwrap_or_default();
                            let tenant = tenants.entry(key).or_insert_with(|| Arc::from(tenant)).clone();
                            first_ts = Some(first_ts.map_or(rec.timestamp_ms, |t: i64| t.min(rec.timestamp_ms)));
                            self.head.apply(&Record {
                                pos: WalPos {
                                    segment: p as u64,
                                    offset: rec.offset as u64,
                                },
                                kind: KIND_OTLP,
                                tenant,
                                payload: rec.value,
                            });
                            self.stats.records.fetch_add(1, Ordering::Relaxed);
                        }
                        position = position.max(batch.next_offset);
                    });
                    self.stats.position.store(position, Ordering::Relaxed);
                    match applied {
                        // The batches before it are in the head; the next fetch starts at it.
                        Err(e) => {
                            self.stats.fetch_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(partition = p, offset = position, error = %e, retry_in_ms = backoff.as_millis() as u64, "a Kafka record batch is unreadable; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(5));
                        }
                        Ok(()) => backoff = Duration::from_millis(100),
                    }
                }
                Err(e) => {
                    self.stats.fetch_errors.fetch_add(1, Ordering::Relaxed);
                    if e.code() == Some(1) {
                        // OFFSET_OUT_OF_RANGE: retention removed records never built (the
                        // builder was down longer than the topic keeps data). Say so loudly.
                        let earliest = self
                            .client
                            .list_offset(&self.cfg.topic, p, OffsetAt::Earliest)
                            .await
                            .unwrap_or(position);
                        tracing::error!(
                            partition = p,
                            from = position,
                            to = earliest,
                            "records expired in Kafka before they were built into blocks; skipping to the earliest kept"
                        );
                        position = earliest.max(position);
                        cut_start = cut_start.max(position);
                    } else {
                        tracing::warn!(partition = p, error = %e, retry_in_ms = backoff.as_millis() as u64, "Kafka fetch failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
            }
            if self.head.should_cut(&self.cfg.cut) && !self.may_write().await {
                // Another builder has the partition now; what the head holds is uncommitted,
                // so it reads those records itself.
                return;
            }
            if self.head.should_cut(&self.cfg.cut)
                && let Some(cut) = self.head.cut()
            {
                let end = position;
                let range = KafkaRange {
                    partition: p,
                    start: cut_start,
                    end,
                };
                let ts = first_ts.take().unwrap_or(0);
                let opts = weft_head::CutOptions {
                    row_group_rows: self.cfg.row_group_rows,
                    final_block_spans: self.cfg.final_block_spans,
                };
                let topic = &self.cfg.topic;
                let origin = |tenant: &str| Origin {
                    kafka: vec![range],
                    block_id: Some(block_id(topic, range, tenant, ts)),
                    ..Origin::default()
                };
                weft_head::write_cut(&cut, &self.db, &self.metrics, &opts, origin).await;
                self.head.finish(&cut);
                self.commit(end).await;
                cut_start = end;
            }
        }
    }

    /// Whether this builder still holds the partition's lease with time to write a cut,
    /// renewing it if it is close to its end (the keeper renews it five times a period).
    async fn may_write(&self) -> bool {
        if now_ms() < self.stats.lease_until_ms.load(Ordering::Acquire) {
            return true;
        }
        loop {
            match self.fence.renew(self.partition, &self.stats).await {
                Ok(true) => return true,
                Ok(false) => {
                    let holder = self.fence.holder(self.partition).await;
                    tracing::error!(partition = self.partition, holder = %holder, "this block builder no longer holds the partition's lease; it stops building it");
                    return false;
                }
                Err(e) if !self.stop.load(Ordering::Acquire) => {
                    tracing::warn!(partition = self.partition, error = %e, "renewing the partition's lease failed; retrying before the cut is written");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(_) => return false,
            }
        }
    }

    /// Commits `offset` for the partition, retrying until it succeeds or the builder stops.
    async fn commit(&self, offset: i64) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self
                .client
                .commit_offsets(&self.cfg.group, &self.cfg.topic, &[(self.partition, offset)])
                .await
            {
                Ok(()) => {
                    self.stats.committed.store(offset, Ordering::Relaxed);
                    return;
                }
                Err(e) if !self.stop.load(Ordering::Acquire) => {
                    tracing::warn!(partition = self.partition, offset, error = %e, "committing the offset failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                // Not committed: the blocks' ranges make the next start skip what they hold.
                Err(_) => return,
            }
        }
    }
}

/// The ID of the block of `tenant` built from `range` of `topic`: a UUIDv7 whose time is the
/// cut's first record's timestamp (so blocks sort by when their spans arrived, and the
/// compactor's grace for incomplete folders works) and whose other bits are a hash of what the
/// block covers. Building the same records again gives the same ID.
pub fn block_id(topic: &str, range: KafkaRange, tenant: &str, first_record_ms: i64) -> String {
    let mut key = Vec::with_capacity(topic.len() + tenant.len() + 24);
    key.extend_from_slice(topic.as_bytes());
    key.push(0);
    key.extend_from_slice(&range.partition.to_be_bytes());
    key.extend_from_slice(&range.start.to_be_bytes());
    key.extend_from_slice(&range.end.to_be_bytes());
    key.extend_from_slice(tenant.as_bytes());
    let h = xxhash_rust::xxh3::xxh3_128(&key).to_be_bytes();
    let mut rand = [0u8; 10];
    rand.copy_from_slice(&h[..10]);
    uuid::Builder::from_unix_timestamp_millis(first_record_ms.max(0) as u64, &rand)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_follow_what_the_block_covers() {
        let r = KafkaRange {
            partition: 3,
            start: 100,
            end: 250,
        };
        let a = block_id("weft-traces", r, "acme", 1_700_000_000_000);
        assert_eq!(a, block_id("weft-traces", r, "acme", 1_700_000_000_000));
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 7);
        assert_eq!(u.get_timestamp().unwrap().to_unix().0, 1_700_000_000);
        for other in [
            block_id("weft-traces", KafkaRange { end: 251, ..r }, "acme", 1_700_000_000_000),
            block_id(
                "weft-traces",
                KafkaRange { partition: 4, ..r },
                "acme",
                1_700_000_000_000,
            ),
            block_id("weft-traces", r, "globex", 1_700_000_000_000),
            block_id("other", r, "acme", 1_700_000_000_000),
        ] {
            assert_ne!(a, other);
        }
    }
}
