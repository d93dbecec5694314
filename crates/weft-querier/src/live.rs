//! The live store: recent spans from Kafka, for queriers and live stores in cluster mode
//! (ADR 0008).
//!
//! A querier with `--kafka-brokers` tails every partition itself, and a live store
//! (`--target live-store`) the partitions it owns, from the block builders' committed offsets,
//! into one head per partition (the ingester's head type). Every second, and
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
//!
//! What a trim takes out (a covered part, or a part's covered records) is kept aside for
//! [`RETAIN_COVERED`] more, so a query frontend whose block list is a little older than this
//! store's still finds those spans in [`LiveStore::snapshot`], taken against its own listing.
//! A listing older than that is refused as stale ([`Stale`]): the frontend reads its block
//! list again.

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

/// Most bytes of recent spans held over all partitions, by default (`--live-store-max-bytes`).
/// Past it (block builders far behind or down), the oldest parts are dropped: their spans
/// become visible again once their blocks are written. Memory stays bounded; queries miss the
/// dropped spans until then (a frontend's head job is refused as stale, so its answer says
/// it is partial).
pub const MAX_LIVE_BYTES: usize = 512 << 20;

/// How long spans that this store's listed blocks cover are kept after a trim takes them
/// out: a frontend's listing (re-read every `--blocklist-poll`, 5 s by default) may not have
/// the covering blocks yet. A listing older than this gets [`Stale`].
pub const RETAIN_COVERED: Duration = Duration::from_secs(30);

/// Per tenant, where each record's rows start: (offset, first row).
type Bounds = HashMap<Arc<str>, Vec<(i64, usize)>>;

/// Spans a trim took out (covered by this store's blocks), kept for [`RETAIN_COVERED`].
struct Retired {
    at: Instant,
    part: Arc<FrozenSpans>,
    bounds: Bounds,
}

/// The active head's record bounds, each frozen part with its own, the retired parts, and
/// per tenant the offset below which spans are gone from this store (discarded, or skipped on
/// arrival as covered).
#[derive(Default)]
struct PartBounds {
    active: Bounds,
    frozen: Vec<(Arc<FrozenSpans>, Bounds)>,
    retired: Vec<Retired>,
    gone_below: HashMap<Arc<str>, i64>,
}

impl PartBounds {
    /// Forgets a part for good: a listing must cover its records from now on.
    fn discard(&mut self, bounds: &Bounds) {
        for (t, tb) in bounds {
            if let Some(&(last, _)) = tb.last() {
                let g = self.gone_below.entry(t.clone()).or_insert(i64::MIN);
                *g = (*g).max(last + 1);
            }
        }
    }
}

/// A query's listing does not cover spans this store no longer holds (`--blocklist-poll`
/// behind by more than [`RETAIN_COVERED`]): read the block list again and retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub partition: i32,
    /// This store holds the tenant's spans of the partition from this offset on.
    pub held_from: i64,
    /// The listing covers the partition up to here.
    pub listed_to: i64,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the block listing is stale: it covers partition {} up to offset {}, and this live store holds it from offset {} (read the block list again)",
            self.partition, self.listed_to, self.held_from
        )
    }
}

/// `cols`' rows `range`, as frozen columns of their own.
fn copy_rows(
    cols: &weft_block::columns::SpanColumns,
    range: std::ops::Range<usize>,
) -> weft_block::columns::SpanColumns {
    let mut fresh = weft_block::columns::SpanColumns::default();
    for r in range {
        fresh.push_row(&cols.row(r as u32));
    }
    fresh.end_run();
    fresh.freeze();
    fresh
}

/// The first row of the first record at or after offset `from` (the rows' count if none).
fn first_row_from(tb: &[(i64, usize)], from: i64, rows: usize) -> usize {
    tb.iter().find(|&&(o, _)| o >= from).map_or(rows, |&(_, r)| r)
}

struct LivePartition {
    partition: i32,
    head: Head,
    position: AtomicI64,
    /// The partition's end (high watermark) at the last fetch.
    end: AtomicI64,
    /// Record bounds of the active head, and of each frozen part. Held while applying a
    /// record, freezing, or trimming, so bounds and rows agree.
    bounds: parking_lot::Mutex<PartBounds>,
}

impl LivePartition {
    fn apply(&self, rec: Record, offset: i64) {
        let mut b = self.bounds.lock();
        let rows = self.head.tenant_rows(&rec.tenant);
        b.active.entry(rec.tenant.clone()).or_default().push((offset, rows));
        self.head.apply(&rec);
    }

    /// A record skipped on arrival because listed blocks cover it: a listing must too.
    fn skipped(&self, tenant: &str, offset: i64) {
        let mut b = self.bounds.lock();
        match b.gone_below.get_mut(tenant) {
            Some(g) => *g = (*g).max(offset + 1),
            None => {
                b.gone_below.insert(Arc::from(tenant), offset + 1);
            }
        }
    }

    fn freeze(&self) {
        let mut b = self.bounds.lock();
        if let Some(cut) = self.head.cut() {
            let active = std::mem::take(&mut b.active);
            b.frozen.push((cut, active));
        }
    }

    /// Retires or rebuilds frozen parts that listed blocks cover, wholly or in part (what is
    /// taken out is kept for [`RETAIN_COVERED`]), and drops the oldest spans past `budget`
    /// bytes, retired ones first.
    fn trim(&self, db: &Db, budget: usize) {
        self.trim_at(&db.kafka_coverage(self.partition), budget, Instant::now());
    }

    /// [`LivePartition::trim`] with this partition's coverage per tenant (`covered`: listed
    /// blocks hold its records below these offsets), at `now`.
    fn trim_at(&self, covered: &HashMap<String, i64>, budget: usize, now: Instant) {
        let mut guard = self.bounds.lock();
        let b = &mut *guard;
        for r in std::mem::take(&mut b.retired) {
            if now.duration_since(r.at) >= RETAIN_COVERED {
                b.discard(&r.bounds);
            } else {
                b.retired.push(r);
            }
        }
        let mut held: usize = b.frozen.iter().map(|(c, _)| c.bytes).sum::<usize>()
            + b.retired.iter().map(|r| r.part.bytes).sum::<usize>();
        while held > budget && !b.retired.is_empty() {
            let r = b.retired.remove(0);
            held -= r.part.bytes;
            b.discard(&r.bounds);
        }
        let mut kept = Vec::with_capacity(b.frozen.len());
        for (cut, bounds) in std::mem::take(&mut b.frozen) {
            let end = cut.kafka.map_or(i64::MAX, |r| r.end);
            let cover = |t: &str| covered.get(t).copied().unwrap_or(i64::MIN);
            let whole = cut.tenants.iter().all(|(t, _)| cover(t) >= end);
            if whole || held > budget {
                if !whole {
                    tracing::warn!(partition = self.partition, bytes = cut.bytes, kafka = ?cut.kafka, "live store over its memory budget: dropping its oldest recent spans until their blocks are written");
                    held -= cut.bytes;
                    b.discard(&bounds);
                }
                self.head.replace_frozen(&cut, None);
                if whole {
                    b.retired.push(Retired {
                        at: now,
                        part: cut,
                        bounds,
                    });
                }
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
            // Rebuild without the rows of covered records; those are retired.
            let (mut tenants, mut new_bounds, mut bytes) = (Vec::new(), Bounds::new(), 0);
            let (mut gone, mut gone_bounds, mut gone_bytes) = (Vec::new(), Bounds::new(), 0);
            for (t, cols) in &cut.tenants {
                let tb = bounds.get(t).cloned().unwrap_or_default();
                let c = cover(t);
                let skip = first_row_from(&tb, c, cols.len());
                if skip > 0 {
                    let out = copy_rows(cols, 0..skip);
                    gone_bytes += out.memory_bytes();
                    gone_bounds.insert(t.clone(), tb.iter().filter(|&&(o, _)| o < c).copied().collect());
                    gone.push((t.clone(), out));
                }
                if skip >= cols.len() {
                    continue;
                }
                let fresh = copy_rows(cols, skip..cols.len());
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
            if !gone.is_empty() {
                held += gone_bytes;
                b.retired.push(Retired {
                    at: now,
                    part: Arc::new(FrozenSpans {
                        tenants: gone,
                        wal_end: cut.wal_end,
                        kafka: cut.kafka,
                        bytes: gone_bytes,
                    }),
                    bounds: gone_bounds,
                });
            }
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
        b.frozen = kept;
    }

    /// This partition's spans of `tenant` that a listing covering the partition up to offset
    /// `listed` (exclusive) leaves out, oldest first: retired and frozen parts, those the
    /// listing covers in part rebuilt without the covered records.
    fn snapshot(&self, tenant: &str, listed: i64, out: &mut Vec<Arc<FrozenSpans>>) -> Result<(), Stale> {
        let b = self.bounds.lock();
        if let Some(&gone) = b.gone_below.get(tenant)
            && gone > listed
        {
            return Err(Stale {
                partition: self.partition,
                held_from: gone,
                listed_to: listed,
            });
        }
        let parts = b
            .retired
            .iter()
            .map(|r| (&r.part, &r.bounds))
            .chain(b.frozen.iter().map(|(p, bounds)| (p, bounds)));
        for (part, bounds) in parts {
            let (Some(cols), Some(tb)) = (part.of(tenant), bounds.get(tenant)) else {
                continue;
            };
            let skip = first_row_from(tb, listed, cols.len());
            if skip == 0 {
                out.push(part.clone());
            } else if skip < cols.len() {
                let fresh = copy_rows(cols, skip..cols.len());
                let bytes = fresh.memory_bytes();
                out.push(Arc::new(FrozenSpans {
                    tenants: vec![(Arc::from(tenant), fresh)],
                    wal_end: part.wal_end,
                    kafka: part.kafka.map(|k| weft_block::meta::KafkaRange { start: listed, ..k }),
                    bytes,
                }));
            }
        }
        Ok(())
    }
}

/// Recent spans of the partitions of the topic this store tails (every one, for a querier).
/// Implements [`RecentSpans`].
pub struct LiveStore {
    parts: Vec<Arc<LivePartition>>,
    /// The topic's partitions, all of them (this store tails `parts`).
    partition_count: i32,
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
    /// Starts tailing `partitions` of `topic` (empty: every partition) from `group`'s
    /// committed offsets, holding at most `max_bytes` of recent spans.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        topic: &str,
        group: &str,
        partitions: &[i32],
        max_bytes: usize,
        client: Arc<Client>,
        db: Arc<Db>,
        rt: tokio::runtime::Handle,
    ) -> Result<Arc<LiveStore>, weft_kafka::Error> {
        let count = client.partition_count(topic).await? as i32;
        let partitions: Vec<i32> = if partitions.is_empty() {
            (0..count).collect()
        } else {
            if let Some(p) = partitions.iter().find(|&&p| p < 0 || p >= count) {
                return Err(weft_kafka::Error::Io(format!(
                    "partition {p} is not a partition of topic {topic} (it has {count})"
                )));
            }
            partitions.to_vec()
        };
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
                end: AtomicI64::new(start),
                bounds: parking_lot::Mutex::new(PartBounds::default()),
            });
            parts.push(part.clone());
            let (topic, client, db, stop, rt) =
                (topic.to_string(), client.clone(), db.clone(), stop.clone(), rt.clone());
            let budget = max_bytes / partitions.len().max(1);
            let thread = std::thread::Builder::new()
                .name(format!("weft-live-{p}"))
                .spawn(move || rt.block_on(tail(part, topic, client, db, stop, budget)))
                .map_err(|e| weft_kafka::Error::Io(format!("starting a live-store thread: {e}")))?;
            threads.push(thread);
        }
        let budget = max_bytes / parts.len().max(1);
        Ok(Arc::new(LiveStore {
            parts,
            partition_count: count,
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

    /// `weft_live_store_*`: what this store holds and where it reads.
    pub fn render_metrics(&self, out: &mut weft_core::prom::Exposition) {
        use weft_core::prom::Kind;
        let (mut spans, mut bytes, mut retired) = (0usize, 0usize, 0usize);
        for p in &self.parts {
            let b = p.bounds.lock();
            for (c, _) in &b.frozen {
                bytes += c.bytes;
                spans += c.tenants.iter().map(|(_, t)| t.len()).sum::<usize>();
            }
            for r in &b.retired {
                retired += r.part.bytes;
            }
            spans += p.head.active_spans();
        }
        out.single(
            "weft_live_store_spans",
            Kind::Gauge,
            "Recent spans held (not yet in a listed block).",
            spans as f64,
        );
        out.single(
            "weft_live_store_bytes",
            Kind::Gauge,
            "Approximate memory of the recent spans held, retired ones included (--live-store-max-bytes).",
            (bytes + retired) as f64,
        );
        out.single(
            "weft_live_store_retired_bytes",
            Kind::Gauge,
            "Of those, spans listed blocks cover, kept for frontends whose listing lags.",
            retired as f64,
        );
        let name = "weft_live_store_position";
        out.family(name, Kind::Gauge, "The next Kafka offset read, by partition.");
        for p in &self.parts {
            let partition = p.partition.to_string();
            out.sample(
                name,
                &[("partition", partition.as_str())],
                p.position.load(Ordering::Relaxed) as f64,
            );
        }
        let name = "weft_live_store_lag_records";
        out.family(
            name,
            Kind::Gauge,
            "Records of the partition not yet read (its end at the last fetch, less the position).",
        );
        for p in &self.parts {
            let partition = p.partition.to_string();
            let lag = p.end.load(Ordering::Relaxed) - p.position.load(Ordering::Relaxed);
            out.sample(name, &[("partition", partition.as_str())], lag.max(0) as f64);
        }
    }

    /// How many partitions the topic has.
    pub fn partition_count(&self) -> i32 {
        self.partition_count
    }

    /// The partitions this store tails.
    pub fn partitions(&self) -> Vec<i32> {
        self.parts.iter().map(|p| p.partition).collect()
    }

    /// `tenant`'s recent spans as a query planned over `listing` (the tenant's blocks it
    /// reads) must see them: every span this store holds that no block of the listing
    /// covers, including spans this store's own (newer) block list has it drop since
    /// ([`RETAIN_COVERED`]). Call [`RecentSpans::catch_up`] first. [`Stale`] when the
    /// listing is older than what this store still holds.
    pub fn snapshot(&self, tenant: &str, listing: &[Arc<weft_block::Block>]) -> Result<Vec<Arc<FrozenSpans>>, Stale> {
        let mut out = Vec::new();
        for p in &self.parts {
            let listed = listing
                .iter()
                .flat_map(|b| b.meta.kafka.iter())
                .filter(|k| k.partition == p.partition)
                .map(|k| k.end)
                .max()
                .unwrap_or(i64::MIN);
            p.trim(&self.db, self.budget);
            p.snapshot(tenant, listed, &mut out)?;
        }
        Ok(out)
    }

    /// The spans of trace `id` of `tenant` this store holds, including those retired for
    /// [`RETAIN_COVERED`] (a frontend's block list may not hold their blocks yet).
    pub fn trace_retained(&self, tenant: &str, id: &[u8; 16]) -> Vec<SpanRow> {
        let mut out = Vec::new();
        for p in &self.parts {
            out.extend(p.head.find_trace(tenant, id));
            let b = p.bounds.lock();
            for r in &b.retired {
                if let Some(c) = r.part.of(tenant)
                    && let Some(&last) = c.traces.get(id)
                {
                    c.copy_rows(c.trace_rows(last), &mut out);
                }
            }
        }
        out
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
                part.end.store(f.high_watermark, Ordering::Relaxed);
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
                            part.skipped(tenant, rec.offset);
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

    async fn trace(&self, tenant: &str, id: &[u8; 16]) -> weft_db::recent::RecentTrace {
        let rows: Vec<SpanRow> = self.parts.iter().flat_map(|p| p.head.find_trace(tenant, id)).collect();
        rows.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;
    use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span};

    /// A partition whose records `offsets` each hold one span of its own trace (ID: offset).
    fn partition_with(parts: &[std::ops::Range<i64>]) -> LivePartition {
        let p = LivePartition {
            partition: 0,
            head: Head::for_partition(Arc::new(IngestMetrics::default()), 0),
            position: AtomicI64::new(0),
            end: AtomicI64::new(0),
            bounds: parking_lot::Mutex::new(PartBounds::default()),
        };
        for range in parts {
            for o in range.clone() {
                let mut trace_id = vec![0u8; 16];
                trace_id[8..].copy_from_slice(&(o as u64 + 1).to_be_bytes());
                let span = Span {
                    trace_id: trace_id.into(),
                    span_id: (o as u64 + 1).to_be_bytes().to_vec().into(),
                    name: format!("op-{o}"),
                    start_time_unix_nano: 1_700_000_000_000_000_000 + o as u64,
                    end_time_unix_nano: 1_700_000_000_000_000_100 + o as u64,
                    ..Default::default()
                };
                let req = ExportTraceServiceRequest {
                    resource_spans: vec![ResourceSpans {
                        scope_spans: vec![ScopeSpans {
                            spans: vec![span],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                };
                let rec = Record {
                    pos: WalPos {
                        segment: 0,
                        offset: o as u64,
                    },
                    kind: KIND_OTLP,
                    tenant: Arc::from("t"),
                    payload: req.encode_to_vec().into(),
                };
                p.apply(rec, o);
            }
            p.freeze();
        }
        p
    }

    /// The offsets (span names) a snapshot against a listing covering up to `listed` holds.
    fn seen(p: &LivePartition, listed: i64) -> Result<Vec<i64>, Stale> {
        let mut parts = Vec::new();
        p.snapshot("t", listed, &mut parts)?;
        let mut out: Vec<i64> = parts
            .iter()
            .filter_map(|part| part.of("t"))
            .flat_map(|c| {
                (0..c.len() as u32)
                    .map(|r| c.row(r).name[3..].parse::<i64>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    fn covered(end: i64) -> HashMap<String, i64> {
        HashMap::from([("t".to_string(), end)])
    }

    #[test]
    fn a_snapshot_holds_what_an_older_listing_leaves_out_until_the_grace_ends() {
        let p = partition_with(&[0..10, 10..20]);
        let now = Instant::now();
        let all: Vec<i64> = (0..20).collect();
        assert_eq!(seen(&p, i64::MIN).unwrap(), all);

        // A block cut inside the first part: the part is rebuilt, the covered records retired.
        p.trim_at(&covered(5), usize::MAX, now);
        assert_eq!(
            p.head
                .frozen()
                .iter()
                .map(|c| c.of("t").map_or(0, |c| c.len()))
                .sum::<usize>(),
            15
        );
        assert_eq!(
            seen(&p, i64::MIN).unwrap(),
            all,
            "a listing without the block still sees every span"
        );
        assert_eq!(
            seen(&p, 5).unwrap(),
            (5..20).collect::<Vec<_>>(),
            "a listing with it: each span once"
        );
        assert_eq!(
            seen(&p, 12).unwrap(),
            (12..20).collect::<Vec<_>>(),
            "a newer listing than the store's"
        );

        // The whole first part covered: retired, still seen by older listings.
        p.trim_at(&covered(10), usize::MAX, now);
        assert_eq!(seen(&p, i64::MIN).unwrap(), all);
        assert_eq!(seen(&p, 10).unwrap(), (10..20).collect::<Vec<_>>());

        // Past the grace: gone, and a listing that does not cover them is stale.
        p.trim_at(&covered(10), usize::MAX, now + RETAIN_COVERED + Duration::from_secs(1));
        assert_eq!(
            seen(&p, 5),
            Err(Stale {
                partition: 0,
                held_from: 10,
                listed_to: 5
            })
        );
        assert_eq!(seen(&p, 10).unwrap(), (10..20).collect::<Vec<_>>());
    }

    #[test]
    fn spans_dropped_over_budget_or_skipped_on_arrival_make_older_listings_stale() {
        let p = partition_with(&[0..10, 10..20]);
        // Over budget: the oldest part is dropped at once, not retired.
        p.trim_at(&HashMap::new(), 1, Instant::now());
        assert!(seen(&p, i64::MIN).is_err());
        let p = partition_with(std::slice::from_ref(&(0..10)));
        p.skipped("t", 25);
        assert_eq!(seen(&p, 20).unwrap_err().held_from, 26);
        assert_eq!(seen(&p, 26).unwrap(), Vec::<i64>::new());
    }
}
