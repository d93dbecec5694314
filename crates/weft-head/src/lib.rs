//! The head: spans that are durable in the WAL but not yet in a block.
//!
//! The WAL writer thread hands durable records to the *builder* thread, which decodes them into
//! per-tenant [`SpanColumns`]. When the head reaches its size or age limit the builder *cuts* it:
//! every tenant's columns move into a [`Cut`], which stays readable while the *flusher* thread
//! encodes and writes one block per tenant. Once all of a cut's blocks are written, the cut
//! leaves the head and WAL segments it covers are deleted.
//!
//! **Invariant:** every acknowledged span is in exactly one of: the active head, a cut being
//! flushed, or a written block (transiently in both a cut and its block; readers de-duplicate).

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weft_admission::metrics::IngestMetrics;
use weft_block::columns::{Capacity, SpanColumns};
use weft_block::row::SpanRow;
use weft_block::{Origin, WriteOptions};
use weft_db::Db;
use weft_db::recent::FrozenSpans;
use weft_wal::{CommitSink, Record, WalPos};

/// A frozen head, being written as blocks (one per tenant).
pub type Cut = FrozenSpans;

#[derive(Debug, Default)]
pub(crate) struct HeadState {
    pub(crate) active: HashMap<Arc<str>, SpanColumns>,
    pub(crate) flushing: Vec<Arc<Cut>>,
    opened: Option<Instant>,
    /// The first record applied since the last cut (a Kafka part's start offset).
    first_pos: Option<WalPos>,
    last_pos: Option<WalPos>,
    spans: usize,
    /// Per tenant, the size of its columns at the last cut: the next head reserves that much.
    sizes: HashMap<Arc<str>, Capacity>,
}

/// When the head is cut.
#[derive(Debug, Clone)]
pub struct CutPolicy {
    pub max_age: Duration,
    pub max_spans: usize,
    pub max_bytes: usize,
}

/// The head, shared by the builder, the flusher and readers.
#[derive(Debug)]
pub struct Head {
    pub(crate) state: RwLock<HeadState>,
    /// Record groups applied by the builder; compared with the WAL's committed groups so a
    /// reader sees every acknowledged span.
    pub applied_groups: AtomicU64,
    /// The builder thread, to wake it early ([`Head::hurry`]).
    builder: std::sync::OnceLock<std::thread::Thread>,
    /// Set by [`Head::hurry`]: apply what is queued now instead of at the end of the window.
    hurry: std::sync::atomic::AtomicBool,
    /// Payload bytes and number of the groups sent to the builder and not yet applied.
    queued_bytes: std::sync::atomic::AtomicUsize,
    queued_groups: std::sync::atomic::AtomicUsize,
    metrics: Arc<IngestMetrics>,
    /// Set for a head fed from one Kafka partition: record positions are (partition, offset)
    /// and cuts carry their offset range ([`FrozenSpans::kafka`]).
    kafka_partition: Option<i32>,
}

impl Head {
    pub fn new(metrics: Arc<IngestMetrics>) -> Self {
        Head {
            state: RwLock::new(HeadState::default()),
            applied_groups: AtomicU64::new(0),
            builder: std::sync::OnceLock::new(),
            hurry: std::sync::atomic::AtomicBool::new(false),
            queued_bytes: std::sync::atomic::AtomicUsize::new(0),
            queued_groups: std::sync::atomic::AtomicUsize::new(0),
            metrics,
            kafka_partition: None,
        }
    }

    /// A head fed from Kafka partition `partition`: apply records with positions
    /// `WalPos { segment: partition, offset }`.
    pub fn for_partition(metrics: Arc<IngestMetrics>, partition: i32) -> Self {
        Head {
            kafka_partition: Some(partition),
            ..Head::new(metrics)
        }
    }

    /// Spans in the active (not yet cut) head.
    pub fn active_spans(&self) -> usize {
        self.state.read().spans
    }

    /// Lends `tenant`'s active columns and the cuts being flushed to `f`: the head as the
    /// read path sees it ([`weft_db::recent::RecentSpans::view`]).
    pub fn view(&self, tenant: &str, f: &mut dyn FnMut(weft_db::recent::RecentView<'_>)) {
        let st = self.state.read();
        f(weft_db::recent::RecentView {
            active: st.active.get(tenant),
            frozen: &st.flushing,
        })
    }

    /// Rows of `tenant` in the active head.
    pub fn tenant_rows(&self, tenant: &str) -> usize {
        self.state.read().active.get(tenant).map_or(0, |c| c.len())
    }

    /// Puts `new` in place of the frozen part `old` (same position), or drops `old` when `new`
    /// is `None`.
    pub fn replace_frozen(&self, old: &Arc<Cut>, new: Option<Arc<Cut>>) {
        let mut st = self.state.write();
        if let Some(i) = st.flushing.iter().position(|c| Arc::ptr_eq(c, old)) {
            let freed = old.bytes - new.as_ref().map_or(0, |n| n.bytes.min(old.bytes));
            match new {
                Some(n) => st.flushing[i] = n,
                None => {
                    st.flushing.remove(i);
                }
            }
            self.metrics.flushing_bytes.fetch_sub(freed as u64, Ordering::Relaxed);
        }
    }

    /// The frozen parts held (cut, not yet finished), oldest first.
    pub fn frozen(&self) -> Vec<Arc<Cut>> {
        self.state.read().flushing.clone()
    }

    /// Decodes one durable record into the head. Used by replay and by the builder.
    pub fn apply(&self, rec: &Record) {
        let mut st = self.state.write();
        if rec.kind == weft_wal::KIND_OTLP {
            let st = &mut *st;
            let cols = st
                .active
                .entry(rec.tenant.clone())
                .or_insert_with(|| SpanColumns::with_capacity(st.sizes.get(&rec.tenant).copied().unwrap_or_default()));
            let before = cols.len();
            if let Err(e) = cols.push_request(&rec.payload) {
                // Requests are validated before they reach the WAL; this is corruption.
                tracing::error!(tenant = %rec.tenant, segment = rec.pos.segment, offset = rec.pos.offset, error = %e, "skipping undecodable wal record");
            }
            let added = cols.len() - before;
            st.spans += added;
            if st.opened.is_none() && added > 0 {
                st.opened = Some(Instant::now());
            }
        }
        st.first_pos.get_or_insert(rec.pos);
        st.last_pos = Some(rec.pos);
    }

    /// Whether the head has reached a limit of `p` (and updates the head gauges).
    pub fn should_cut(&self, p: &CutPolicy) -> bool {
        let st = self.state.read();
        if st.spans == 0 {
            return false;
        }
        let bytes: usize = st.active.values().map(|c| c.memory_bytes()).sum();
        self.metrics.head_spans.store(st.spans as u64, Ordering::Relaxed);
        self.metrics.head_bytes.store(bytes as u64, Ordering::Relaxed);
        st.spans >= p.max_spans || bytes >= p.max_bytes || st.opened.is_some_and(|o| o.elapsed() >= p.max_age)
    }

    /// Freezes the active head into a cut, or returns `None` if it is empty.
    pub fn cut(&self) -> Option<Arc<Cut>> {
        let mut st = self.state.write();
        if st.spans == 0 {
            return None;
        }
        let pos = st.last_pos.expect("a non-empty head has a position");
        let tenants: Vec<(Arc<str>, SpanColumns)> = st
            .active
            .drain()
            .filter(|(_, c)| !c.is_empty())
            .map(|(t, mut c)| {
                c.freeze();
                (t, c)
            })
            .collect();
        for (t, c) in &tenants {
            st.sizes.insert(t.clone(), c.capacity_hint());
        }
        let bytes = tenants.iter().map(|(_, c)| c.memory_bytes()).sum();
        let first = st.first_pos.take().unwrap_or(pos);
        let cut = Arc::new(Cut {
            tenants,
            wal_end: WalPos {
                segment: pos.segment,
                offset: pos.offset + 1,
            },
            kafka: self.kafka_partition.map(|partition| weft_block::meta::KafkaRange {
                partition,
                start: first.offset as i64,
                end: pos.offset as i64 + 1,
            }),
            bytes,
        });
        st.flushing.push(cut.clone());
        st.spans = 0;
        st.opened = None;
        self.metrics.flushing_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.metrics.head_spans.store(0, Ordering::Relaxed);
        self.metrics.head_bytes.store(0, Ordering::Relaxed);
        Some(cut)
    }

    /// Drops a cut whose blocks are all written.
    pub fn finish(&self, cut: &Arc<Cut>) {
        self.state.write().flushing.retain(|c| !Arc::ptr_eq(c, cut));
        self.metrics
            .flushing_bytes
            .fetch_sub(cut.bytes as u64, Ordering::Relaxed);
    }

    /// Whether the head (active or cuts) holds spans of the trace.
    pub fn holds(&self, tenant: &str, id: &[u8; 16]) -> bool {
        let st = self.state.read();
        st.active.get(tenant).is_some_and(|c| c.traces.contains_key(id))
            || st.flushing.iter().any(|cut| {
                cut.tenants
                    .iter()
                    .any(|(t, c)| &**t == tenant && c.traces.contains_key(id))
            })
    }

    /// Copies out the head's spans of one trace (active head and cuts being flushed).
    pub fn find_trace(&self, tenant: &str, id: &[u8; 16]) -> Vec<SpanRow> {
        let st = self.state.read();
        let parts: Vec<(&SpanColumns, Vec<u32>)> = st
            .active
            .get(tenant)
            .into_iter()
            .chain(
                st.flushing
                    .iter()
                    .flat_map(|cut| cut.tenants.iter().filter(|(t, _)| &**t == tenant).map(|(_, c)| c)),
            )
            .map(|c| (c, c.rows_of(id)))
            .collect();
        // Sized once: a large trace's rows are most of what a fetch holds, and growing the
        // list by doubling would hold up to one and a half times them while it copies.
        let mut out = Vec::with_capacity(parts.iter().map(|(_, r)| r.len()).sum());
        for (c, rows) in parts {
            c.copy_rows(rows, &mut out);
        }
        out
    }
}

/// How long the builder lets durable groups queue before applying them, unless a query asks
/// for them ([`Head::hurry`]) or [`APPLY_QUEUED_BYTES`] are queued. Applying a group right away
/// cost a wake-up of the builder per group commit: two context switches, and a futex call on
/// the WAL writer's side, for each request at 75 requests a second (docs/benchmarks/wal.md,
/// "The head applied in batches"). Queries do not wait for the window: they wake the builder.
pub const APPLY_WINDOW: Duration = Duration::from_millis(50);

/// Queued payload bytes that end the window early, bounding the memory held by queued groups.
pub const APPLY_QUEUED_BYTES: usize = 8 << 20;

/// Queued groups that end the window early: half the builder channel's room
/// ([`BUILDER_CHANNEL_GROUPS`]), so that the WAL writer never blocks on a sleeping builder.
pub const APPLY_QUEUED_GROUPS: usize = BUILDER_CHANNEL_GROUPS / 2;

/// The room of the channel from the WAL writer to the builder, in groups.
pub const BUILDER_CHANNEL_GROUPS: usize = 64;

impl Head {
    /// Whether enough is queued to apply it before the window ends.
    fn queue_full(&self) -> bool {
        self.queued_bytes.load(Ordering::Acquire) >= APPLY_QUEUED_BYTES
            || self.queued_groups.load(Ordering::Acquire) >= APPLY_QUEUED_GROUPS
    }
}

/// The WAL's sink: queues durable record groups for the builder thread ([`run_builder`]). The
/// queue is bounded, so a builder that falls behind slows the WAL writer, which raises
/// in-flight bytes until receivers refuse work.
pub struct BuilderSink(pub mpsc::SyncSender<Vec<Record>>, pub Arc<Head>);

impl CommitSink for BuilderSink {
    fn committed(&mut self, records: Vec<Record>) {
        let bytes: usize = records.iter().map(|r| r.payload.len()).sum();
        self.1.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.1.queued_groups.fetch_add(1, Ordering::AcqRel);
        if self.0.send(records).is_err() {
            tracing::error!("head builder stopped; durable records will be applied on replay");
        }
        if self.1.queue_full() {
            self.1.wake_builder();
        }
    }
}

impl Drop for BuilderSink {
    /// The WAL is closing: the builder applies what is queued and stops, without waiting the
    /// window out.
    fn drop(&mut self) {
        self.1.hurry();
    }
}

impl Head {
    /// Asks the builder to apply every queued group now (a query is waiting for them).
    pub fn hurry(&self) {
        self.hurry.store(true, Ordering::Release);
        self.wake_builder();
    }

    fn wake_builder(&self) {
        if let Some(t) = self.builder.get() {
            t.unpark();
        }
    }
}

/// Runs the builder: applies record groups and cuts the head by policy. Returns when the WAL
/// side of the channel closes.
///
/// Once a group arrives, the builder sleeps until [`APPLY_WINDOW`] has passed, a query hurries
/// it, or [`APPLY_QUEUED_BYTES`] or [`APPLY_QUEUED_GROUPS`] are queued, then applies every
/// queued group in order. It sleeps instead of waiting on the channel, so the groups sent
/// meanwhile wake nobody.
pub fn run_builder(head: Arc<Head>, rx: mpsc::Receiver<Vec<Record>>, policy: CutPolicy, cuts: mpsc::Sender<Arc<Cut>>) {
    run_builder_with(head, rx, policy, cuts, APPLY_WINDOW);
}

/// [`run_builder`] with another window (tests use one longer than they wait).
fn run_builder_with(
    head: Arc<Head>,
    rx: mpsc::Receiver<Vec<Record>>,
    policy: CutPolicy,
    cuts: mpsc::Sender<Arc<Cut>>,
    window: Duration,
) {
    let _ = head.builder.set(std::thread::current());
    let mut groups = Vec::new();
    loop {
        let mut closed = false;
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(group) => {
                groups.push(group);
                let until = Instant::now() + window;
                loop {
                    if head.hurry.swap(false, Ordering::AcqRel) || head.queue_full() {
                        break;
                    }
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    std::thread::park_timeout(until - now);
                }
                loop {
                    match rx.try_recv() {
                        Ok(g) => groups.push(g),
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => {
                            closed = true;
                            break;
                        }
                    }
                }
                for group in groups.drain(..) {
                    let bytes: usize = group.iter().map(|r| r.payload.len()).sum();
                    for rec in &group {
                        head.apply(rec);
                    }
                    head.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                    head.queued_groups.fetch_sub(1, Ordering::AcqRel);
                    head.applied_groups.fetch_add(1, Ordering::Release);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if head.should_cut(&policy)
            && let Some(cut) = head.cut()
            && cuts.send(cut).is_err()
        {
            return;
        }
        if closed {
            return;
        }
    }
}

/// How the blocks of a cut are written.
#[derive(Debug, Clone)]
pub struct CutOptions {
    pub row_group_rows: usize,
    /// A tenant's part holding at least this many spans is written with
    /// [`WriteOptions::lasting`] (value blooms, dedicated columns, zstd level 3), as compaction
    /// writes its final blocks: a block that large is already in the final tier and is never
    /// rewritten, so it must not lack what a merge would have added. Smaller parts are
    /// written cheaply ([`WriteOptions::head_cut`]) and merged later.
    pub final_block_spans: u64,
}

impl CutOptions {
    /// The options of a tenant's part of `spans` spans.
    pub fn for_spans(&self, spans: usize) -> WriteOptions {
        if spans as u64 >= self.final_block_spans {
            WriteOptions::lasting(self.row_group_rows)
        } else {
            WriteOptions::head_cut(self.row_group_rows)
        }
    }
}

/// Writes one block per tenant of a cut, each with the origin `origin(tenant)` gives, retrying
/// failed writes (with back-off up to 30 s) until they succeed, and counting them in `metrics`.
pub async fn write_cut(
    cut: &Cut,
    db: &Db,
    metrics: &IngestMetrics,
    opts: &CutOptions,
    origin: impl Fn(&str) -> Origin,
) {
    for (tenant, cols) in &cut.tenants {
        let mut delay = Duration::from_millis(200);
        let write = opts.for_spans(cols.len());
        loop {
            let started = Instant::now();
            match db.write_block(cols, tenant, origin(tenant), &write).await {
                Ok(b) => {
                    metrics.blocks_written.fetch_add(1, Ordering::Relaxed);
                    metrics
                        .block_bytes_written
                        .fetch_add(b.meta.size_bytes, Ordering::Relaxed);
                    metrics
                        .block_spans_written
                        .fetch_add(b.meta.span_count, Ordering::Relaxed);
                    metrics
                        .block_write_nanos
                        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    tracing::info!(tenant = %tenant, block = %b.meta.block_id, spans = b.meta.span_count, traces = b.meta.trace_count, bytes = b.meta.size_bytes, elapsed_ms = started.elapsed().as_millis() as u64, "block written");
                    break;
                }
                Err(e) => {
                    metrics.block_write_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(tenant = %tenant, error = %e, retry_in_ms = delay.as_millis() as u64, "block write failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;
    use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span};
    use weft_wal::CommitSink;

    /// A window longer than the tests wait: only a hurry or a full queue can end it.
    const LONG: Duration = Duration::from_secs(60);

    /// A group of `n` records from position `first` on, each an OTLP request with one span
    /// whose ID is its position.
    fn group(first: u64, n: u64) -> Vec<Record> {
        (first..first + n)
            .map(|i| {
                let span = Span {
                    trace_id: vec![7; 16].into(),
                    span_id: (i + 1).to_be_bytes().to_vec().into(),
                    name: "s".into(),
                    start_time_unix_nano: 1,
                    end_time_unix_nano: 2,
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
                Record {
                    pos: WalPos { segment: 1, offset: i },
                    kind: weft_wal::KIND_OTLP,
                    tenant: Arc::from("t"),
                    payload: req.encode_to_vec().into(),
                }
            })
            .collect()
    }

    /// The span IDs of `head`, in row order, as the positions they were made from.
    fn applied_positions(head: &Head) -> Vec<u64> {
        let st = head.state.read();
        st.active
            .get("t")
            .map(|c| c.span_id.iter().map(|id| u64::from_be_bytes(*id) - 1).collect())
            .unwrap_or_default()
    }

    struct Builder {
        head: Arc<Head>,
        sink: Option<BuilderSink>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Builder {
        fn start(window: Duration) -> Self {
            let head = Arc::new(Head::new(Arc::new(IngestMetrics::default())));
            let (tx, rx) = mpsc::sync_channel(BUILDER_CHANNEL_GROUPS);
            let (cut_tx, _) = mpsc::channel();
            let policy = CutPolicy {
                max_age: Duration::from_secs(3600),
                max_spans: usize::MAX,
                max_bytes: usize::MAX,
            };
            let thread = {
                let head = head.clone();
                std::thread::spawn(move || run_builder_with(head, rx, policy, cut_tx, window))
            };
            Builder {
                sink: Some(BuilderSink(tx, head.clone())),
                head,
                thread: Some(thread),
            }
        }

        fn send(&mut self, g: Vec<Record>) {
            self.sink.as_mut().expect("open").committed(g);
        }

        /// Waits (at most 10 s) until `groups` groups are applied, hurrying the builder if asked.
        fn wait_applied(&self, groups: u64, hurry: bool) -> bool {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.head.applied_groups.load(Ordering::Acquire) < groups {
                if Instant::now() >= deadline {
                    return false;
                }
                if hurry {
                    self.head.hurry();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            true
        }

        fn stop(mut self) {
            drop(self.sink.take());
            self.thread.take().expect("running").join().unwrap();
        }
    }

    /// Groups queue while the window is open, and a reader's hurry applies them all, in order,
    /// without waiting the window out.
    #[test]
    fn a_hurry_applies_every_queued_group_in_order() {
        let mut b = Builder::start(LONG);
        for g in 0..5 {
            b.send(group(g * 3, 3));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            b.head.applied_groups.load(Ordering::Acquire),
            0,
            "applied before the window ended"
        );
        assert!(b.wait_applied(5, true), "a hurry did not end the window");
        assert_eq!(applied_positions(&b.head), (0..15).collect::<Vec<_>>());
        assert_eq!(b.head.queued_bytes.load(Ordering::Acquire), 0);
        assert_eq!(b.head.queued_groups.load(Ordering::Acquire), 0);
        b.stop();
    }

    /// Without any reader, a full queue ends the window, so the WAL writer never waits on a
    /// sleeping builder; closing the channel applies what is left at once.
    #[test]
    fn a_full_queue_ends_the_window_and_closing_applies_the_rest() {
        let mut b = Builder::start(LONG);
        let full = APPLY_QUEUED_GROUPS as u64;
        for g in 0..full + 3 {
            b.send(group(g * 2, 2));
            if g == 0 {
                // The builder is asleep in its window before the queue fills up: the sink
                // must wake it.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(
            b.wait_applied(full, false),
            "{full} queued groups did not end the window"
        );
        b.send(group(1000, 1));
        let head = b.head.clone();
        let t = Instant::now();
        b.stop();
        assert!(t.elapsed() < Duration::from_secs(10), "closing waited the window out");
        let mut want: Vec<u64> = (0..(full + 3) * 2).collect();
        want.push(1000);
        assert_eq!(applied_positions(&head), want, "every group applied once, in order");
        assert_eq!(head.queued_groups.load(Ordering::Acquire), 0);
    }
}
