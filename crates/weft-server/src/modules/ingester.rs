//! The Ingester module: the WAL, the head and the block flusher (`weft-ingest`), and the
//! options it shares with the block builder (when a head is cut) and the distributor (what is
//! admitted).

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use weft_db::Db;
use weft_head::CutPolicy;
use weft_ingest::{Ingest, IngestConfig};

use crate::config::Config;

/// The ingester's head is cut at this much memory by default. At high rates a cut of compact
/// spans then holds about 750,000 of them: a block of the compactor's final tier, which is
/// never rewritten (ADR 7). Smaller cuts were each rewritten once more by compaction.
pub const DEFAULT_INGESTER_HEAD_BYTES: usize = 64 << 20;

/// Each partition's head of a block builder is cut at this much memory by default: one
/// builder may own all of the topic's partitions (16 by default).
pub const DEFAULT_PARTITION_HEAD_BYTES: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fsync {
    /// fsync the WAL before acknowledging each request (group commit shares the cost). Nothing
    /// acknowledged is lost, even on power failure.
    Always,
    /// fsync at most every `fsync_interval_ms`; acknowledge after the write. A power failure
    /// may lose the last interval; a process crash loses nothing.
    Interval,
    /// Never fsync explicitly. Fastest; a power failure may lose whatever the OS had not
    /// written back.
    Never,
}

/// The WAL.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Write-ahead log")]
pub struct IngesterOptions {
    /// WAL fsync policy.
    #[arg(long, env = "WEFT_FSYNC", value_enum, default_value_t = Fsync::Always)]
    pub fsync: Fsync,
    /// With --fsync interval: milliseconds between syncs.
    #[arg(long, env = "WEFT_FSYNC_INTERVAL_MS", default_value_t = 100)]
    pub fsync_interval_ms: u64,
    /// A WAL segment is sealed and a new one started at this size.
    #[arg(long, env = "WEFT_WAL_SEGMENT_BYTES", default_value_t = 64 << 20)]
    pub wal_segment_bytes: u64,
    /// Milliseconds a WAL write (under --fsync always) may wait for more requests, so that
    /// requests arriving within it share one fsync. It waits only while another request is
    /// likely (one being admitted, or requests arriving more often than this), so a lone
    /// request pays nothing; it bounds the latency added to an acknowledgement; 0 turns it off.
    #[arg(long, env = "WEFT_WAL_GROUP_WAIT_MS", default_value_t = 2.0)]
    pub wal_group_wait_ms: f64,
    /// Under --fsync always, write the WAL with O_DIRECT | O_DSYNC where the filesystem allows
    /// it: each group commit is one write that is durable when it returns, with no page cache
    /// and no separate fdatasync (about a fifth less CPU per commit of a few hundred KB); false
    /// writes through the page cache and calls fdatasync.
    #[arg(long, env = "WEFT_WAL_DIRECT_IO", action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", default_value_t = true)]
    pub wal_direct_io: bool,
}

impl IngesterOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.wal_segment_bytes >= 4096,
            "wal_segment_bytes must be at least 4096"
        );
        anyhow::ensure!(
            self.wal_group_wait_ms >= 0.0 && self.wal_group_wait_ms <= 100.0,
            "wal_group_wait_ms must be from 0 to 100 milliseconds"
        );
        Ok(())
    }

    pub fn fsync_policy(&self) -> weft_wal::FsyncPolicy {
        match self.fsync {
            Fsync::Always => weft_wal::FsyncPolicy::Always,
            Fsync::Interval => weft_wal::FsyncPolicy::Interval(Duration::from_millis(self.fsync_interval_ms.max(1))),
            Fsync::Never => weft_wal::FsyncPolicy::Never,
        }
    }
}

/// When a head (the ingester's, or each partition's of a block builder) is cut into a block.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Head")]
pub struct HeadOptions {
    /// Cut a block once the oldest span in the head is this many seconds old.
    #[arg(long, env = "WEFT_BLOCK_MAX_AGE", default_value_t = 30.0)]
    pub block_max_age: f64,
    /// Cut a block once the head holds this many spans.
    #[arg(long, env = "WEFT_BLOCK_MAX_SPANS", default_value_t = 1_000_000)]
    pub block_max_spans: usize,
    /// Cut a block once the head holds about this many bytes of memory [default: 67108864 for
    /// the ingester, 16777216 per partition for a block builder]. The ingester's peak memory
    /// is about three times this: the active head plus cuts being written.
    #[arg(long, env = "WEFT_BLOCK_MAX_BYTES")]
    pub block_max_bytes: Option<usize>,
}

impl HeadOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.block_max_age > 0.0 && self.block_max_age.is_finite(),
            "block_max_age must be a positive number of seconds"
        );
        anyhow::ensure!(self.block_max_spans > 0, "block_max_spans must be positive");
        anyhow::ensure!(self.block_max_bytes != Some(0), "block_max_bytes must be positive");
        Ok(())
    }

    /// When a head is cut by its memory: `block_max_bytes` if set, otherwise
    /// [`DEFAULT_INGESTER_HEAD_BYTES`] for the ingester's one head, and
    /// [`DEFAULT_PARTITION_HEAD_BYTES`] for each partition's head of a block builder (which
    /// may own all the topic's partitions at once).
    pub fn head_max_bytes(&self, per_partition: bool) -> usize {
        self.block_max_bytes.unwrap_or(if per_partition {
            DEFAULT_PARTITION_HEAD_BYTES
        } else {
            DEFAULT_INGESTER_HEAD_BYTES
        })
    }

    /// The cut policy of a head.
    pub fn cut(&self, per_partition: bool) -> CutPolicy {
        CutPolicy {
            max_age: Duration::from_secs_f64(self.block_max_age),
            max_spans: self.block_max_spans,
            max_bytes: self.head_max_bytes(per_partition),
        }
    }
}

/// What is admitted, per trace and per tenant (the ingester's and the distributor's limits).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Admission")]
pub struct AdmissionOptions {
    /// Largest trace, in encoded bytes, while it is live; 0 disables. Tempo's 5 MB default
    /// refuses real traces (a 200,000-span batch job is ~60 MB); memory stays bounded by the
    /// head limits and the query read cap instead.
    #[arg(long, env = "WEFT_MAX_TRACE_BYTES", default_value_t = 128 << 20)]
    pub max_trace_bytes: u64,
    /// Per-tenant ingestion rate in bytes per second; 0 disables.
    #[arg(long, env = "WEFT_INGESTION_RATE_BYTES", default_value_t = 0)]
    pub ingestion_rate_bytes: u64,
    /// Per-tenant ingestion burst in bytes; 0 is twice the rate.
    #[arg(long, env = "WEFT_INGESTION_BURST_BYTES", default_value_t = 0)]
    pub ingestion_burst_bytes: u64,
}

/// Replays the WAL into the head and starts the flusher.
pub async fn init(cfg: &Config, db: Arc<Db>) -> anyhow::Result<Arc<Ingest>> {
    let wal = &cfg.ingester;
    let icfg = IngestConfig {
        data_dir: cfg.server.data_dir.clone(),
        fsync: wal.fsync_policy(),
        wal_segment_bytes: wal.wal_segment_bytes,
        wal_group_wait: Duration::from_secs_f64(wal.wal_group_wait_ms / 1000.0),
        wal_direct_io: wal.wal_direct_io,
        cut: cfg.head.cut(false),
        max_trace_bytes: cfg.admission.max_trace_bytes,
        rate_bytes: cfg.admission.ingestion_rate_bytes,
        burst_bytes: cfg.admission.ingestion_burst_bytes,
        // One cut may wait for the flusher while the next fills; more means the flusher is
        // behind, and receivers answer 503 instead of growing memory.
        max_flushing_bytes: cfg.head.head_max_bytes(false) as u64,
        final_block_spans: cfg.compactor.final_block_spans(),
        ..IngestConfig::default()
    };
    Ingest::open(icfg, db).await.map_err(anyhow::Error::msg)
}
