//! Export: the span queue, the export thread and the exporters.
//!
//! **Design (why no global mutex on span end).** A finished span is moved into one of several
//! bounded lock-free queues (`crossbeam_queue::ArrayQueue`, one compare-and-swap per push). Each
//! application thread is assigned a shard round-robin the first time it ends a span, so threads
//! mostly touch different queues and different cache lines; the shard count is the number of
//! CPUs rounded up to a power of two (at most 16). If a thread's shard is full the other shards
//! are tried; if all are full the span is dropped, counted, and the drop is logged at most once
//! a minute. Nothing on this path blocks, allocates or takes a lock (benches
//! `export/queue_1_thread`, `export/queue_2_threads`).
//!
//! One export thread per provider drains the shards into batches (at most
//! `max_export_batch_size`), exports when a batch is full or `scheduled_delay` passed, and
//! returns the exported records (boxes whose attribute, event and link vectors keep their
//! capacity) to a bounded pool. A thread starting a sampled span takes a record from its own
//! small cache, refilled 16 at a time from the pool with a `try_lock` that never waits (if the
//! export thread holds the pool, the thread allocates instead), so once warm a sampled span
//! allocates nothing, whatever its attributes. The pool is a stack: the records reused next are
//! the ones most likely still in a cache. Producers check whether to wake the export thread once
//! every `max_export_batch_size` spans, and wake it when their shard holds a full batch.
//!
//! Memory is bounded: the queues hold at most `max_queue_size` spans, the export thread holds
//! one batch, and an exporter gives up on a batch at its deadline.

mod memory;
mod otlp;
mod pipeline;

use std::fmt;
use std::time::{Duration, Instant};

use opentelemetry::InstrumentationScope;

pub use self::memory::{InMemoryExporter, NoopExporter};
pub use self::otlp::{Compression, OtlpConfig, OtlpExporter, Protocol};
pub(crate) use self::pipeline::{Pipeline, recycle_local, submit, take_span_data};
pub use self::pipeline::{PipelineError, PipelineStats, after_fork, prepare_fork};

use crate::resource::Resource;
use crate::trace::SpanData;

/// One batch handed to an exporter.
#[derive(Clone, Copy, Debug)]
pub struct ExportBatch<'a> {
    /// The provider's resource.
    pub resource: &'a Resource,
    /// The scope table; `SpanData::scope` indexes it.
    pub scopes: &'a [InstrumentationScope],
    /// The spans, in the order they were taken from the queues.
    pub spans: &'a [Box<SpanData>],
}

/// Why an exporter dropped a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A permanent error (HTTP 400, gRPC INVALID_ARGUMENT, …).
    Permanent,
    /// Five attempts failed with retryable errors.
    RetriesExhausted,
    /// The export deadline (or the shutdown deadline) passed.
    Deadline,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::Permanent => "permanent",
            DropReason::RetriesExhausted => "retries_exhausted",
            DropReason::Deadline => "deadline",
        })
    }
}

/// The outcome of exporting one batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportResult {
    /// Every span was accepted.
    Success,
    /// The server accepted the request but rejected `rejected` spans.
    PartialSuccess {
        /// Spans rejected.
        rejected: u64,
        /// The server's message.
        message: String,
    },
    /// The batch was dropped.
    Dropped {
        /// Why.
        reason: DropReason,
        /// The last error.
        message: String,
    },
}

/// Deadlines an exporter must respect.
#[derive(Debug)]
pub struct ExportContext<'a> {
    deadline: Instant,
    shutdown_deadline: &'a pipeline::ShutdownDeadline,
}

impl ExportContext<'_> {
    /// Returns when the exporter must have given up: the batch deadline, or the shutdown
    /// deadline once a shutdown has started (whichever is earlier).
    pub fn deadline(&self) -> Instant {
        match self.shutdown_deadline.get() {
            Some(d) if d < self.deadline => d,
            _ => self.deadline,
        }
    }

    /// Sleeps for `d`, waking early (returning `false`) if the deadline moves before the end
    /// of the sleep, as when a shutdown starts.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            let now = Instant::now();
            if now >= end {
                return true;
            }
            if self.deadline() < end {
                return false;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(25)));
        }
    }

    /// A context with a fixed deadline (for tests and custom pipelines).
    pub fn with_deadline(deadline: Instant) -> ExportContext<'static> {
        static NONE: pipeline::ShutdownDeadline = pipeline::ShutdownDeadline::new();
        ExportContext {
            deadline,
            shutdown_deadline: &NONE,
        }
    }
}

/// Sends batches somewhere. Called only on the provider's export thread, one batch at a time.
pub trait SpanExporter: Send + 'static {
    /// Exports one batch, returning once it is delivered or given up on, no later than
    /// `cx.deadline()` (plus one in-flight request's cleanup).
    fn export(&mut self, batch: ExportBatch<'_>, cx: &ExportContext<'_>) -> ExportResult;
    /// Called once after the last export of a shutdown.
    fn shutdown(&mut self) {}
}

/// Export-side configuration (the OpenTelemetry `OTEL_BSP_*` settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    /// Spans the queues hold in total (2048). Past it, spans are dropped and counted.
    pub max_queue_size: usize,
    /// Spans per exported batch (512).
    pub max_export_batch_size: usize,
    /// Longest wait before a non-full batch is exported (5 s).
    pub scheduled_delay: Duration,
    /// Deadline of one batch's export, all attempts included (30 s).
    pub export_timeout: Duration,
    /// Queue shards; 0 picks the CPU count rounded up to a power of two, at most 16.
    pub shards: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_queue_size: 2048,
            max_export_batch_size: 512,
            scheduled_delay: Duration::from_secs(5),
            export_timeout: Duration::from_secs(30),
            shards: 0,
        }
    }
}

impl BatchConfig {
    /// Reads `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
    /// `OTEL_BSP_SCHEDULE_DELAY` and `OTEL_BSP_EXPORT_TIMEOUT` (milliseconds).
    pub fn from_env() -> Self {
        fn var(n: &str) -> Option<u64> {
            std::env::var(n).ok().and_then(|v| v.trim().parse().ok())
        }
        let d = BatchConfig::default();
        BatchConfig {
            max_queue_size: var("OTEL_BSP_MAX_QUEUE_SIZE").map_or(d.max_queue_size, |v| v as usize),
            max_export_batch_size: var("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
                .map_or(d.max_export_batch_size, |v| v as usize),
            scheduled_delay: var("OTEL_BSP_SCHEDULE_DELAY").map_or(d.scheduled_delay, Duration::from_millis),
            export_timeout: var("OTEL_BSP_EXPORT_TIMEOUT").map_or(d.export_timeout, Duration::from_millis),
            shards: 0,
        }
    }
}
