//! The sharded span queue and the export thread (see the module docs of `export`).

// Records are boxed on purpose: they move between threads, queues and pools by pointer, and a
// recycled box keeps the capacity of its vectors.
#![allow(clippy::vec_box)]

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use opentelemetry::InstrumentationScope;

use super::{BatchConfig, DropReason, ExportBatch, ExportContext, ExportResult, SpanExporter};
use crate::id::{SpanId, TraceId};
use crate::log::RateLimited;
use crate::resource::Resource;
use crate::trace::SpanData;

/// Attribute, event and link vectors larger than this are not kept when a record is recycled.
const MAX_POOLED_CAPACITY: usize = 256;
/// Records a thread keeps for itself before going back to the shared pool.
const LOCAL_RECORDS: usize = 32;

/// Why flush or shutdown did not complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineError {
    /// The timeout passed first; the export thread carries on until its own deadline.
    Timeout,
    /// The pipeline was shut down already.
    AlreadyShutdown,
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineError::Timeout => f.write_str("timed out waiting for the export thread"),
            PipelineError::AlreadyShutdown => f.write_str("the pipeline is shut down"),
        }
    }
}

impl std::error::Error for PipelineError {}

/// Counters of the pipeline, monotonically increasing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Spans delivered (fully or partially accepted requests count their accepted spans).
    pub exported: u64,
    /// Spans dropped because every queue shard was full.
    pub dropped_queue_full: u64,
    /// Spans ended after shutdown, or with no exporter configured.
    pub dropped_shutdown: u64,
    /// Spans in batches dropped after a permanent error.
    pub dropped_permanent: u64,
    /// Spans in batches dropped after five failed attempts.
    pub dropped_retries_exhausted: u64,
    /// Spans in batches dropped at their export or shutdown deadline.
    pub dropped_deadline: u64,
    /// Spans the server rejected in a partial success.
    pub rejected: u64,
    /// Batches sent to the exporter.
    pub batches: u64,
}

impl PipelineStats {
    /// Total spans dropped for any reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_queue_full
            + self.dropped_shutdown
            + self.dropped_permanent
            + self.dropped_retries_exhausted
            + self.dropped_deadline
            + self.rejected
    }
}

#[derive(Default)]
struct Counters {
    exported: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_shutdown: AtomicU64,
    dropped_permanent: AtomicU64,
    dropped_retries_exhausted: AtomicU64,
    dropped_deadline: AtomicU64,
    rejected: AtomicU64,
    batches: AtomicU64,
}

/// The shutdown deadline shared with exporters, as nanoseconds after a fixed origin; 0 = none.
#[derive(Debug)]
pub struct ShutdownDeadline {
    nanos: AtomicU64,
}

fn origin() -> Instant {
    static O: OnceLock<Instant> = OnceLock::new();
    *O.get_or_init(Instant::now)
}

impl ShutdownDeadline {
    pub(crate) const fn new() -> Self {
        ShutdownDeadline {
            nanos: AtomicU64::new(0),
        }
    }
    fn set(&self, at: Instant) {
        let n = at.saturating_duration_since(origin()).as_nanos() as u64;
        self.nanos.store(n.max(1), Ordering::Release);
    }
    pub(crate) fn get(&self) -> Option<Instant> {
        match self.nanos.load(Ordering::Acquire) {
            0 => None,
            n => Some(origin() + Duration::from_nanos(n)),
        }
    }
}

/// A queue shard on its own cache lines, so producers on different shards do not contend.
#[repr(align(128))]
struct Shard {
    queue: ArrayQueue<Box<SpanData>>,
}

enum Control {
    Flush(Sender<()>),
    Shutdown(Sender<()>, Instant),
}

/// One provider's queue, pools and export thread.
pub(crate) struct Pipeline {
    pub(crate) id: u64,
    shards: Box<[Shard]>,
    mask: usize,
    wake_threshold: usize,
    notified: AtomicBool,
    has_exporter: bool,
    shutdown: AtomicBool,
    shutdown_deadline: ShutdownDeadline,
    thread: OnceLock<Thread>,
    join: Mutex<Option<JoinHandle<()>>>,
    control: Mutex<Option<Sender<Control>>>,
    counters: Counters,
    /// Exported records waiting to be filled again, most recent last. A stack, so the records
    /// reused next are the ones most likely still in a cache. Producers only `try_lock` it, to
    /// take several records at once, and allocate instead if the export thread holds it.
    record_pool: Mutex<Vec<Box<SpanData>>>,
    pool_capacity: usize,
    scopes: RwLock<Arc<Vec<InstrumentationScope>>>,
    resource: Resource,
    config: BatchConfig,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("id", &self.id)
            .field("shards", &self.shards.len())
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static REGISTRY: Mutex<Registry> = Mutex::new(Vec::new());
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
static QUEUE_FULL_LOG: RateLimited = RateLimited::new(Duration::from_secs(60));
static EXPORT_DROP_LOG: [RateLimited; 4] = [
    RateLimited::new(Duration::from_secs(60)),
    RateLimited::new(Duration::from_secs(60)),
    RateLimited::new(Duration::from_secs(60)),
    RateLimited::new(Duration::from_secs(60)),
];

struct Local {
    pipeline: Option<Arc<Pipeline>>,
    shard: usize,
    /// Cleared records of `pipeline`, reused before going to the shared pool.
    records: Vec<Box<SpanData>>,
    /// Spans this thread queued since it last checked whether to wake the export thread.
    since_wake_check: usize,
}

thread_local! {
    // The pipeline this thread last used, its shard and a few spare records. Looking a pipeline
    // up here instead of holding an `Arc` in every span avoids two shared reference-count updates
    // per span (bench `export_queue_2_thread`).
    static LOCAL: RefCell<Local> =
        const { RefCell::new(Local { pipeline: None, shard: usize::MAX, records: Vec::new(), since_wake_check: 0 }) };
}

type Registry = Vec<(u64, Weak<Pipeline>)>;

thread_local! {
    // The registry's lock, held across a `fork()` by the thread that forks.
    static FORK_GUARD: RefCell<Option<std::sync::MutexGuard<'static, Registry>>> = const { RefCell::new(None) };
}

/// Takes the lock every pipeline shares (the registry a thread consults when it first uses a
/// pipeline), for a `fork()` the calling thread is about to make: a child forked while another
/// thread held it would find it locked forever. Call [`after_fork`] in the parent and in the
/// child once `fork()` returns. A second call before `after_fork` does nothing.
pub fn prepare_fork() {
    let _ = FORK_GUARD.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.is_none() {
            *f = Some(REGISTRY.lock().unwrap_or_else(|p| p.into_inner()));
        }
    });
}

/// Releases the lock [`prepare_fork`] took (in the parent and in the child after `fork()`);
/// does nothing without it.
pub fn after_fork() {
    let _ = FORK_GUARD.try_with(|f| f.borrow_mut().take());
}

fn lookup(id: u64) -> Option<Arc<Pipeline>> {
    let reg = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    reg.iter().find(|(i, _)| *i == id).and_then(|(_, w)| w.upgrade())
}

#[inline]
fn with_local<R>(id: u64, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
    LOCAL
        .try_with(|l| {
            let mut l = l.try_borrow_mut().ok()?;
            if l.pipeline.as_ref().map(|p| p.id) != Some(id) {
                switch_pipeline(&mut l, id);
            }
            Some(f(&mut l))
        })
        .ok()
        .flatten()
}

#[cold]
fn switch_pipeline(l: &mut Local, id: u64) {
    if l.shard == usize::MAX {
        l.shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
    }
    l.records.clear();
    l.pipeline = lookup(id);
}

/// Queues a finished span on pipeline `id`. Never blocks; drops (and counts) when full.
#[inline]
pub(crate) fn submit(id: u64, data: Box<SpanData>) {
    let mut data = Some(data);
    with_local(id, |l| {
        let Some(p) = l.pipeline.as_deref() else { return };
        if p.has_exporter {
            if let Some(d) = data.take() {
                l.since_wake_check += 1;
                let check = l.since_wake_check >= p.wake_threshold;
                if check {
                    l.since_wake_check = 0;
                }
                p.push(l.shard, d, check);
            }
        } else if l.records.len() < LOCAL_RECORDS
            && let Some(mut d) = data.take()
        {
            d.reset(MAX_POOLED_CAPACITY);
            l.records.push(d);
        }
    });
}

/// Returns an empty record for a new span of pipeline `id`: a recycled one when available
/// (so a sampled span allocates nothing once the pool is warm), else a new one.
#[inline]
pub(crate) fn take_span_data(id: u64) -> Box<SpanData> {
    with_local(id, |l| {
        if let Some(r) = l.records.pop() {
            return Some(r);
        }
        let p = l.pipeline.as_deref()?;
        let mut pool = p.record_pool.try_lock().ok()?;
        let take = pool.len().min(LOCAL_RECORDS / 2);
        let start = pool.len() - take;
        l.records.extend(pool.drain(start..));
        drop(pool);
        // The export thread only read these records; clearing them here, on the thread that
        // fills them, keeps their cache lines from bouncing twice (bench `export_queue_1_thread`).
        for r in l.records.iter_mut() {
            r.reset(MAX_POOLED_CAPACITY);
        }
        l.records.pop()
    })
    .flatten()
    .unwrap_or_else(|| Box::new(SpanData::new(TraceId::INVALID, SpanId::INVALID, "")))
}

/// Takes back a record that will not be exported (an unsampled recording span, or no exporter).
#[inline]
pub(crate) fn recycle_local(id: u64, mut data: Box<SpanData>) {
    data.reset(MAX_POOLED_CAPACITY);
    let mut data = Some(data);
    with_local(id, |l| {
        if l.records.len() < LOCAL_RECORDS
            && let Some(d) = data.take()
        {
            l.records.push(d);
        }
    });
}

impl Pipeline {
    /// Creates a pipeline; with an exporter, starts its export thread.
    pub(crate) fn start(
        resource: Resource,
        config: BatchConfig,
        exporter: Option<Box<dyn SpanExporter>>,
    ) -> Arc<Pipeline> {
        let shards = match config.shards {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .next_power_of_two()
                .min(16),
            n => n.next_power_of_two(),
        };
        let capacity = config.max_queue_size.max(1);
        let per_shard = capacity.div_ceil(shards).max(1);
        let batch = config.max_export_batch_size.max(1);
        let pipeline = Arc::new(Pipeline {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: (0..shards)
                .map(|_| Shard {
                    queue: ArrayQueue::new(per_shard),
                })
                .collect(),
            mask: shards - 1,
            wake_threshold: batch.clamp(1, per_shard),
            notified: AtomicBool::new(false),
            has_exporter: exporter.is_some(),
            shutdown: AtomicBool::new(false),
            shutdown_deadline: ShutdownDeadline::new(),
            thread: OnceLock::new(),
            join: Mutex::new(None),
            control: Mutex::new(None),
            counters: Counters::default(),
            record_pool: Mutex::new(Vec::with_capacity(capacity)),
            pool_capacity: capacity,
            scopes: RwLock::new(Arc::new(Vec::new())),
            resource,
            config,
        });
        {
            let mut reg = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
            reg.retain(|(_, w)| w.strong_count() > 0);
            reg.push((pipeline.id, Arc::downgrade(&pipeline)));
        }
        if let Some(exporter) = exporter {
            let (tx, rx) = mpsc::channel();
            *pipeline.control.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
            let p = pipeline.clone();
            let spawned = std::thread::Builder::new()
                .name("weft-export".into())
                .spawn(move || p.run(exporter, rx));
            match spawned {
                Ok(handle) => {
                    let _ = pipeline.thread.set(handle.thread().clone());
                    *pipeline.join.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
                }
                Err(e) => {
                    crate::log::warn(format_args!(
                        "cannot start the export thread, spans will be dropped: {e}"
                    ));
                    pipeline.shutdown.store(true, Ordering::Release);
                }
            }
        }
        pipeline
    }

    /// Returns the index of `scope` in the scope table, adding it if new.
    pub(crate) fn scope_index(&self, scope: &InstrumentationScope) -> u32 {
        if let Some(i) = self.scopes.read().ok().and_then(|s| s.iter().position(|x| x == scope)) {
            return i as u32;
        }
        let mut w = self.scopes.write().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = w.iter().position(|x| x == scope) {
            return i as u32;
        }
        let mut next = Vec::clone(&w);
        next.push(scope.clone());
        *w = Arc::new(next);
        (w.len() - 1) as u32
    }

    #[inline]
    /// Queues a record. `check_wake` asks to wake the export thread if the shard holds at least
    /// its share of a batch; callers ask every `wake_threshold` pushes, because reading the queue
    /// length touches the consumer's cache line.
    fn push(&self, shard: usize, data: Box<SpanData>, check_wake: bool) {
        if self.shutdown.load(Ordering::Relaxed) {
            self.counters.dropped_shutdown.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = shard & self.mask;
        let mut data = data;
        for i in 0..self.shards.len() {
            let s = &self.shards[(first + i) & self.mask];
            match s.queue.push(data) {
                Ok(()) => {
                    if check_wake && !self.notified.load(Ordering::Relaxed) && s.queue.len() >= self.wake_threshold {
                        self.wake();
                    }
                    return;
                }
                Err(back) => data = back,
            }
        }
        drop(data);
        let n = self.counters.dropped_queue_full.fetch_add(1, Ordering::Relaxed) + 1;
        QUEUE_FULL_LOG.warn(format_args!("span queue is full, dropping spans ({n} dropped so far)"));
    }

    #[cold]
    fn wake(&self) {
        if !self.notified.swap(true, Ordering::AcqRel)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }

    fn queued(&self) -> usize {
        self.shards.iter().map(|s| s.queue.len()).sum()
    }

    /// Moves up to `max` spans from the shards into `batch`, round-robin.
    fn drain_into(&self, batch: &mut Vec<Box<SpanData>>, max: usize) {
        let mut empty = 0;
        let mut i = 0;
        while batch.len() < max && empty < self.shards.len() {
            match self.shards[i & self.mask].queue.pop() {
                Some(s) => {
                    batch.push(s);
                    empty = 0;
                }
                None => empty += 1,
            }
            i += 1;
        }
    }

    fn export_batch(&self, exporter: &mut dyn SpanExporter, batch: &mut Vec<Box<SpanData>>) {
        if batch.is_empty() {
            return;
        }
        let scopes = self.scopes.read().map(|s| s.clone()).unwrap_or_default();
        let deadline = Instant::now() + self.config.export_timeout;
        let cx = ExportContext {
            deadline,
            shutdown_deadline: &self.shutdown_deadline,
        };
        let n = batch.len() as u64;
        let result = exporter.export(
            ExportBatch {
                resource: &self.resource,
                scopes: &scopes,
                spans: batch,
            },
            &cx,
        );
        let c = &self.counters;
        c.batches.fetch_add(1, Ordering::Relaxed);
        match result {
            ExportResult::Success => {
                c.exported.fetch_add(n, Ordering::Relaxed);
            }
            ExportResult::PartialSuccess { rejected, message } => {
                let rejected = rejected.min(n);
                c.exported.fetch_add(n - rejected, Ordering::Relaxed);
                c.rejected.fetch_add(rejected, Ordering::Relaxed);
                if rejected > 0 || !message.is_empty() {
                    EXPORT_DROP_LOG[3].warn(format_args!(
                        "export partially rejected: {rejected} spans rejected: {message}"
                    ));
                }
            }
            ExportResult::Dropped { reason, message } => {
                let (counter, log) = match reason {
                    DropReason::Permanent => (&c.dropped_permanent, &EXPORT_DROP_LOG[0]),
                    DropReason::RetriesExhausted => (&c.dropped_retries_exhausted, &EXPORT_DROP_LOG[1]),
                    DropReason::Deadline => (&c.dropped_deadline, &EXPORT_DROP_LOG[2]),
                };
                counter.fetch_add(n, Ordering::Relaxed);
                log.warn(format_args!("dropped a batch of {n} spans ({reason}): {message}"));
            }
        }
        self.recycle(batch);
    }

    /// Returns exported records to the pool as they are; the thread that reuses one clears it.
    fn recycle(&self, batch: &mut Vec<Box<SpanData>>) {
        let mut pool = self.record_pool.lock().unwrap_or_else(|p| p.into_inner());
        let room = self.pool_capacity.saturating_sub(pool.len()).min(batch.len());
        pool.extend(batch.drain(..room));
        drop(pool);
        batch.clear();
    }

    fn export_all(&self, exporter: &mut dyn SpanExporter, batch: &mut Vec<Box<SpanData>>) {
        loop {
            self.drain_into(batch, self.config.max_export_batch_size.max(1));
            if batch.is_empty() {
                return;
            }
            self.export_batch(exporter, batch);
        }
    }

    fn run(self: Arc<Self>, mut exporter: Box<dyn SpanExporter>, rx: Receiver<Control>) {
        let max = self.config.max_export_batch_size.max(1);
        let delay = self.config.scheduled_delay;
        let mut batch: Vec<Box<SpanData>> = Vec::with_capacity(max);
        let mut last = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(Control::Flush(reply)) => {
                    self.export_all(exporter.as_mut(), &mut batch);
                    let _ = reply.send(());
                    last = Instant::now();
                    continue;
                }
                Ok(Control::Shutdown(reply, deadline)) => {
                    self.shutdown_deadline.set(deadline);
                    self.export_all(exporter.as_mut(), &mut batch);
                    exporter.shutdown();
                    let _ = reply.send(());
                    return;
                }
                Err(TryRecvError::Disconnected) => {
                    self.export_all(exporter.as_mut(), &mut batch);
                    exporter.shutdown();
                    return;
                }
                Err(TryRecvError::Empty) => {}
            }
            self.drain_into(&mut batch, max);
            let due = last.elapsed() >= delay;
            if batch.len() >= max || (due && !batch.is_empty()) {
                self.export_batch(exporter.as_mut(), &mut batch);
                last = Instant::now();
                continue;
            }
            if due {
                last = Instant::now();
            }
            // A producer that sees `notified == false` unparks us; an unpark that races with
            // this store leaves the thread's park token set, so no wake-up is lost.
            self.notified.store(false, Ordering::Release);
            if self.queued() < self.wake_threshold {
                std::thread::park_timeout(delay.saturating_sub(last.elapsed()).max(Duration::from_millis(1)));
            }
        }
    }

    fn send_control(&self, make: impl FnOnce(Sender<()>) -> Control, timeout: Duration) -> Result<(), PipelineError> {
        let (tx, rx) = mpsc::channel();
        {
            let guard = self.control.lock().unwrap_or_else(|p| p.into_inner());
            let Some(control) = guard.as_ref() else {
                return Err(PipelineError::AlreadyShutdown);
            };
            control.send(make(tx)).map_err(|_| PipelineError::AlreadyShutdown)?;
        }
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        match rx.recv_timeout(timeout) {
            Ok(()) => Ok(()),
            Err(RecvTimeoutError::Timeout) => Err(PipelineError::Timeout),
            Err(RecvTimeoutError::Disconnected) => Err(PipelineError::AlreadyShutdown),
        }
    }

    /// Exports everything queued now; waits at most `timeout`.
    pub(crate) fn force_flush(&self, timeout: Duration) -> Result<(), PipelineError> {
        if !self.has_exporter {
            return Ok(());
        }
        if self.shutdown.load(Ordering::Acquire) {
            return Err(PipelineError::AlreadyShutdown);
        }
        self.send_control(Control::Flush, timeout)
    }

    /// Stops accepting spans, exports what is queued within `timeout`, and stops the thread.
    /// Calling it again returns `AlreadyShutdown`.
    pub(crate) fn shutdown(&self, timeout: Duration) -> Result<(), PipelineError> {
        if self.shutdown.swap(true, Ordering::AcqRel) {
            return Err(PipelineError::AlreadyShutdown);
        }
        if !self.has_exporter {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        self.shutdown_deadline.set(deadline);
        let r = self.send_control(|tx| Control::Shutdown(tx, deadline), timeout);
        *self.control.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if r.is_ok()
            && let Some(h) = self.join.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            let _ = h.join();
        }
        r
    }

    /// Returns a snapshot of the counters.
    pub(crate) fn stats(&self) -> PipelineStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PipelineStats {
            exported: l(&c.exported),
            dropped_queue_full: l(&c.dropped_queue_full),
            dropped_shutdown: l(&c.dropped_shutdown),
            dropped_permanent: l(&c.dropped_permanent),
            dropped_retries_exhausted: l(&c.dropped_retries_exhausted),
            dropped_deadline: l(&c.dropped_deadline),
            rejected: l(&c.rejected),
            batches: l(&c.batches),
        }
    }

    /// The resource.
    pub(crate) fn resource(&self) -> &Resource {
        &self.resource
    }
}

#[cfg(test)]
mod fork_tests {
    use super::*;

    #[test]
    fn prepare_fork_holds_the_registry_until_after_fork() {
        prepare_fork();
        prepare_fork(); // a second call keeps the guard it has (no self-deadlock)
        assert!(REGISTRY.try_lock().is_err());
        after_fork();
        drop(REGISTRY.lock().unwrap_or_else(|p| p.into_inner()));
        after_fork();
    }
}
