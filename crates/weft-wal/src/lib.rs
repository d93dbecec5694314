//! The write-ahead log.
//!
//! # Design constraints
//! - A request is acknowledged only after its record is written and, under
//!   [`FsyncPolicy::Always`], `fdatasync`ed. Concurrent appends share one write and one sync
//!   (group commit): a single writer thread drains every pending append, writes them with one
//!   `write_all`, syncs once, then answers them all.
//! - Records are handed to the [`CommitSink`] in log order after they are durable, so the
//!   consumer (the block builder) can name a position below which everything is in blocks.
//! - Segments are append-only and deleted (or reused, below) whole. No record is ever changed
//!   in place; the one rewrite is of a segment's last, partly filled 4 KiB block under direct
//!   I/O (below), with the same bytes it already held followed by new ones.
//! - **Direct I/O.** Under [`FsyncPolicy::Always`] (and [`WalOptions::direct_io`]), a segment
//!   is written with `O_DIRECT | O_DSYNC` where the filesystem allows it: each group is one
//!   aligned write that is durable when it returns, with no page cache and no separate
//!   `fdatasync`. With commits of a few hundred KB it costs about a fifth less CPU than a
//!   buffered write and `fdatasync` (docs/benchmarks/wal.md, "The WAL written with direct I/O");
//!   with small commits about the same, as extending the file still costs a journal commit.
//!   Writes must cover whole 4 KiB blocks at aligned offsets, so a group starts at the block
//!   holding the end of the log, rewriting that block's earlier bytes unchanged, and is padded
//!   with zeros to a block boundary. A torn write leaves each sector old or new; both hold the same earlier
//!   bytes, so an acknowledged record is never damaged by a later group. (PostgreSQL rewrites
//!   its WAL's last page the same way.) Filesystems that refuse `O_DIRECT` (tmpfs before Linux
//!   6.6, some network filesystems) get buffered writes and `fdatasync`.
//! - **Reused segments.** Under direct I/O, a sealed segment whose records are all in blocks
//!   is renamed `<seq:020>.free` instead of deleted (at most two are kept). The next roll
//!   gives it a new header (a new stamp, synced), renames it to the new segment's name (the
//!   directory synced) and overwrites it from the start. Writing into blocks that already
//!   exist leaves the file's size and extents alone, so a group's `O_DSYNC` write needs no
//!   metadata commit where only timestamps changed (ext4 with a journal; see
//!   docs/benchmarks/wal.md, "Reused WAL segments (format 2)"). The records after the end of
//!   the log are the file's previous incarnations'; each record carries its segment's stamp, so
//!   replay tells them apart.
//!
//! # On-disk layout (format version 2)
//! `wal/` holds segments named `<seq:020>.wal`, `seq` strictly increasing, and up to
//! two free files named `<old seq:020>.free`, which replay ignores. A segment is
//!
//! ```text
//! header:  b"WEFTWAL2" | stamp u64 LE | hcrc u32 LE        (20 bytes)
//! record:  len u32 LE | crc u32 LE | body[len]
//! body:    version u8 (=2) | kind u8 | tenant_len u16 LE | stamp u64 LE | tenant utf-8 | payload
//! ```
//! `hcrc` is CRC32C of the header's first 16 bytes, `crc` CRC32C of `body`. `stamp` is random,
//! drawn each time a file becomes a segment (created or reused); every record carries its
//! segment's. `kind` 1 is an OTLP `ExportTraceServiceRequest` payload. Replay reads the end of
//! the log where it meets:
//! - the end of the file;
//! - an intact record with another stamp (a previous incarnation's, in a reused file);
//! - zeros from the end of the log to the end of its block (a direct write's padding, when the
//!   writer stopped without trimming it), then either the end of the file or, in a reused file,
//!   the previous incarnation's bytes with no record of the segment's own among them. No record
//!   starts with a zero length;
//! - at a block's end (no padding then), bytes other than zeros that neither hold a record of
//!   the segment's own later on nor start with a header carrying its stamp: a reused file's
//!   previous incarnation, or a write whose first sector never landed.
//!
//! Anything else where a record should start is damage: replay looks for the next record with
//! the segment's stamp (to the end of the file) and skips to it, or drops the rest as a torn
//! tail. A client's payload is written verbatim and may hold what looks like a record, but not
//! one with a stamp it cannot know. A header whose checksum fails is damage too: the stamp of
//! an intact record where the first one starts stands in for it. Failing that, no stamp is
//! guessed from a record further on (it could be a client's): the segment is reported damaged
//! and left as it is.
//!
//! Format 1 (header b"WEFTWAL1"; body `version u8 (=1) | kind u8 | tenant_len u16 LE | tenant |
//! payload`, no stamp) is still replayed; its files are deleted, never reused.
//! `testdata/golden` holds segments of both formats that every build must replay.
//!
//! # Invariants
//! - **Invariant:** a record whose append returned `Ok` is in a segment on disk and, under
//!   `Always`, was synced before the call returned.
//! - **Invariant:** no acknowledged record is ever placed after bytes that replay would cut.
//!   A write or sync that fails is rolled back: the segment is truncated to the end of the last
//!   durable group and synced. If that fails too, the segment is fenced (never written again) and
//!   the next group goes to a new segment. While no segment can be written (disk full), every
//!   append is refused with [`WalError::Unavailable`]; each later append retries, so the log
//!   recovers by itself once space returns. A segment file whose header could not be written is
//!   removed, so a failed roll never blocks the next one.
//! - A torn write can only affect the tail of a segment, and only records that were never
//!   acknowledged. Replay drops a torn tail (the segment is truncated there when it can be) and
//!   logs how many bytes were dropped.
//! - Damage inside a segment (a flipped byte, a bad header) skips only the damaged bytes: records
//!   are self-delimiting and checksummed, so replay resynchronises on the next record whose
//!   length, version, kind, tenant and CRC all check out (first at the damaged record's stated
//!   end, then byte by byte), logs the skipped range and counts it in [`ReplayReport`] and
//!   [`WalStats`]. Segments shorter than a header hold no record and are removed. Opening never
//!   fails because of damaged content; it fails only on I/O errors reading the directory or on a
//!   segment written by a newer format version.
//! - A [`WalPos`] names a record by (segment, offset). Positions only grow, across restarts too.

mod direct_io;
mod record;
mod replay;
mod segment;
mod writer;

use bytes::Bytes;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use thiserror::Error;

use record::BODY_FIXED;
pub use record::{KIND_OTLP, MAX_RECORD, RECORD_VERSION, encode_record, encode_record_header};
use replay::replay_segment;
use segment::{FREE_SEGMENTS, list_free, list_segments};
use writer::{Append, Arrivals, Cmd, GROUP_WAIT_BYTES, Refusal, Writer};

#[derive(Debug, Error)]
pub enum WalError {
    #[error("wal i/o error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("wal is closed")]
    Closed,
    #[error("wal record of {0} bytes exceeds the {MAX_RECORD} byte limit")]
    TooLarge(usize),
    #[error("wal segment {path} was written by a newer weft (format {version}); refusing to replay it")]
    NewerFormat { path: PathBuf, version: String },
    /// No segment can be written (e.g. the disk is full); the append was not stored.
    #[error("wal is not writable: {0}")]
    Unavailable(String),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// When the log is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Sync before every acknowledgement (group commit). Nothing acknowledged is lost on a crash
    /// or power loss.
    Always,
    /// Sync at most every interval; acknowledge after the write. A power loss may lose the last
    /// interval of acknowledged data; a process crash loses nothing.
    Interval(Duration),
    /// Never sync explicitly; the OS writes back when it likes. Fastest, least durable.
    Never,
}

/// The position of a record: segment sequence number and byte offset in that segment.
pub use weft_core::WalPos;

/// A durable record handed to the [`CommitSink`] or returned by replay.
#[derive(Debug, Clone)]
pub struct Record {
    pub pos: WalPos,
    pub kind: u8,
    pub tenant: Arc<str>,
    pub payload: Bytes,
}

/// Receives records after they are durable, in log order.
pub trait CommitSink: Send + 'static {
    /// Called on the WAL writer thread with a group of newly durable records. It should hand
    /// them on quickly; blocking here applies back-pressure to every writer.
    fn committed(&mut self, records: Vec<Record>);
}

/// Options for [`Wal::open`].
#[derive(Debug, Clone)]
pub struct WalOptions {
    pub fsync: FsyncPolicy,
    /// A segment is sealed and a new one started once it reaches this size.
    pub segment_bytes: u64,
    /// The first segment number to use if the directory is empty (callers pass one past the
    /// highest position recorded elsewhere, e.g. in blocks, so positions never repeat).
    pub min_segment: u64,
    /// Under [`FsyncPolicy::Always`], how long a group may wait for more appends before its
    /// write and sync, so that requests arriving within this of each other share one fsync.
    /// It waits only while another append is likely: one announced by a caller
    /// ([`Wal::announce`]) and not yet made, or appends arriving on average more often than
    /// this. A lone request pays nothing; an acknowledgement is delayed by at most this; zero
    /// turns the wait off.
    pub group_wait: Duration,
    /// Under [`FsyncPolicy::Always`], write segments with `O_DIRECT | O_DSYNC` where the
    /// filesystem allows it (see the module's "Direct I/O"); `false` always uses buffered writes
    /// and `fdatasync`. Other policies always write buffered.
    pub direct_io: bool,
    /// Failures injected by tests into the direct-I/O path.
    #[cfg(test)]
    pub(crate) inject: Option<Arc<Inject>>,
}

/// Failures a test makes the writer meet: the direct write numbered `fail_write` (counting
/// from 0) fails with `errno`, and reopening a segment for buffered writes fails if
/// `fail_reopen`.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Inject {
    pub writes: AtomicU64,
    pub fail_write: AtomicU64,
    pub errno: std::sync::atomic::AtomicI32,
    pub fail_reopen: std::sync::atomic::AtomicBool,
}

#[cfg(test)]
impl Inject {
    fn before_write(&self) -> std::io::Result<()> {
        if self.writes.fetch_add(1, Ordering::Relaxed) == self.fail_write.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(self.errno.load(Ordering::Relaxed)));
        }
        Ok(())
    }
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            min_segment: 1,
            group_wait: Duration::from_millis(2),
            direct_io: true,
            #[cfg(test)]
            inject: None,
        }
    }
}

/// An append a caller announced: it is on its way (being validated, say) and the writer's
/// group may wait for it. Dropped when the append is handed to the writer, or abandoned.
pub struct Coming(Arc<Arrivals>);

impl Drop for Coming {
    fn drop(&mut self) {
        self.0.coming.fetch_sub(1, Ordering::Release);
    }
}

/// Metrics the WAL keeps; read them any time.
#[derive(Debug, Default)]
pub struct WalStats {
    pub bytes_written: AtomicU64,
    pub records_written: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_nanos_total: AtomicU64,
    pub size_bytes: AtomicU64,
    /// Sequence number of the last group whose records reached the sink.
    pub committed_groups: AtomicU64,
    /// Groups whose write or sync failed and was refused (rolled back or fenced).
    pub write_errors: AtomicU64,
    /// Appends refused because no segment could be written.
    pub unavailable_refusals: AtomicU64,
    /// 1 while no segment can be written (the log refuses appends), else 0.
    pub unwritable: AtomicU64,
    /// Segments fenced after a failed write could not be rolled back.
    pub fenced_segments: AtomicU64,
    /// 1 while the active segment is written with direct I/O (`O_DIRECT | O_DSYNC`), else 0.
    pub direct_io: AtomicU64,
    /// Segments started in the file of an older one instead of a new file (see "Reused
    /// segments" in the module's docs).
    pub reused_segments: AtomicU64,
    /// What the last replay dropped: torn tail bytes, damaged bytes skipped inside segments, the
    /// number of damaged ranges, and segments removed for having no complete header.
    pub replay_torn_bytes: AtomicU64,
    pub replay_damaged_bytes: AtomicU64,
    pub replay_damaged_ranges: AtomicU64,
    pub replay_removed_segments: AtomicU64,
}

/// A handle to the log. Cloning is cheap; all clones feed the same writer thread.
#[derive(Clone)]
pub struct Wal {
    tx: mpsc::Sender<Cmd>,
    pub stats: Arc<WalStats>,
    arrivals: Arc<Arrivals>,
    /// The writer's thread: woken by an append only when the queue reaches
    /// [`GROUP_WAIT_BYTES`] while it sleeps through a busy group's wait.
    writer: std::thread::Thread,
}

/// What replay found.
#[derive(Debug, Default)]
pub struct ReplayReport {
    pub segments: usize,
    pub records: u64,
    pub bytes: u64,
    /// Bytes dropped from torn tails (never acknowledged).
    pub torn_bytes: u64,
    /// Bytes skipped inside segments because they were damaged, and how many ranges.
    pub damaged_bytes: u64,
    pub damaged_ranges: u64,
    /// Segments removed because they were too short to hold a header.
    pub removed_segments: u64,
}

impl Wal {
    /// Replays every record in `dir` (creating it if needed) through `visit`, skipping damaged
    /// bytes and dropping torn tails, then starts the writer thread on a fresh segment. `sink`
    /// receives records appended from now on.
    ///
    /// If no segment can be created (e.g. the disk is full) the log still opens: appends are
    /// refused with [`WalError::Unavailable`] until a segment can be created.
    pub fn open(
        dir: &Path,
        opts: WalOptions,
        mut visit: impl FnMut(Record),
        sink: Box<dyn CommitSink>,
    ) -> Result<(Wal, ReplayReport), WalError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let segments = list_segments(dir)?;
        let mut report = ReplayReport {
            segments: segments.len(),
            ..Default::default()
        };
        let mut total_size = 0u64;
        let mut kept = Vec::with_capacity(segments.len());
        let started = Instant::now();
        for (i, seg) in segments.iter().enumerate() {
            if let Some(len) = replay_segment(seg, &mut report, &mut visit)? {
                total_size += len;
                kept.push((seg.seq, len));
            }
            if (i + 1) % 16 == 0 {
                tracing::info!(
                    segments_done = i + 1,
                    segments_total = segments.len(),
                    records = report.records,
                    "wal replay progress"
                );
            }
        }
        if !segments.is_empty() {
            tracing::info!(
                segments = report.segments,
                records = report.records,
                bytes = report.bytes,
                torn_bytes = report.torn_bytes,
                damaged_bytes = report.damaged_bytes,
                damaged_ranges = report.damaged_ranges,
                removed_segments = report.removed_segments,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "wal replay done"
            );
        }
        let mut free = list_free(dir)?;
        // More than are kept (left by a crash between reuses, or a build that kept more).
        while free.len() > FREE_SEGMENTS {
            let (_, path) = free.remove(0);
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot delete a free wal segment");
            }
        }
        // Above every free file's old number too, so that positions only grow even if every
        // segment was freed.
        let next_seq = segments
            .last()
            .map(|s| s.seq + 1)
            .unwrap_or(0)
            .max(opts.min_segment)
            .max(free.iter().map(|(s, _)| s + 1).max().unwrap_or(0));
        let stats = Arc::new(WalStats::default());
        stats.size_bytes.store(total_size, Ordering::Relaxed);
        stats.replay_torn_bytes.store(report.torn_bytes, Ordering::Relaxed);
        stats
            .replay_damaged_bytes
            .store(report.damaged_bytes, Ordering::Relaxed);
        stats
            .replay_damaged_ranges
            .store(report.damaged_ranges, Ordering::Relaxed);
        stats
            .replay_removed_segments
            .store(report.removed_segments, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let arrivals = Arc::new(Arrivals {
            coming: AtomicUsize::new(0),
            queued: AtomicU64::new(0),
        });
        let mut writer = Writer::new(dir.to_path_buf(), opts, next_seq, stats.clone(), sink, arrivals.clone());
        writer.sealed = kept;
        writer.free = free;
        let writer = std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(io(dir))?
            .thread()
            .clone();
        Ok((
            Wal {
                tx,
                stats,
                arrivals,
                writer,
            },
            report,
        ))
    }

    /// Announces an append this caller is about to make (see [`WalOptions::group_wait`]); pass
    /// the guard to [`Wal::append_announced`], or drop it if the append does not happen.
    pub fn announce(&self) -> Coming {
        self.arrivals.coming.fetch_add(1, Ordering::AcqRel);
        Coming(self.arrivals.clone())
    }

    /// [`Wal::append`] of an announced append: the announcement ends as the record is queued.
    pub async fn append_announced(
        &self,
        coming: Coming,
        tenant: Arc<str>,
        kind: u8,
        payload: Bytes,
    ) -> Result<WalPos, WalError> {
        // Ended before the record is queued, so the writer never waits for one it already has.
        drop(coming);
        self.append(tenant, kind, payload).await
    }
    /// Appends a record and resolves once it is durable under the fsync policy.
    ///
    /// Cancel safety: if the future is dropped, the record may still be written and passed to
    /// the sink; it is simply not acknowledged.
    pub async fn append(&self, tenant: Arc<str>, kind: u8, payload: Bytes) -> Result<WalPos, WalError> {
        if payload.len() + tenant.len() + BODY_FIXED > MAX_RECORD {
            return Err(WalError::TooLarge(payload.len()));
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        // Counted before it is queued, so the writer's count on taking it never goes below zero.
        let len = payload.len() as u64;
        let before = self.arrivals.queued.fetch_add(len, Ordering::AcqRel);
        let sent = self.tx.send(Cmd::Append(Append {
            tenant,
            kind,
            payload,
            done,
        }));
        if sent.is_err() {
            self.arrivals.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(WalError::Closed);
        }
        // A writer sleeping through a busy group's wait is woken only once the queue holds a
        // group's worth ([`Writer::wait_for_coming`]). A writer waiting in the channel is woken
        // by the send itself.
        if before < GROUP_WAIT_BYTES && before + len >= GROUP_WAIT_BYTES {
            self.writer.unpark();
        }
        match rx.await {
            Ok(Ok(pos)) => Ok(pos),
            Ok(Err(Refusal::Io(msg))) => Err(WalError::Io {
                path: PathBuf::from("wal"),
                source: std::io::Error::other(msg),
            }),
            Ok(Err(Refusal::Unavailable(msg))) => Err(WalError::Unavailable(msg)),
            Err(_) => Err(WalError::Closed),
        }
    }

    /// Deletes sealed segments that hold only records before `pos`. Idempotent.
    pub fn truncate_before(&self, pos: WalPos) {
        let _ = self.tx.send(Cmd::TruncateBefore(pos));
    }

    /// Writes and syncs everything queued, then stops the writer. Later appends fail with
    /// [`WalError::Closed`].
    pub async fn shutdown(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(Cmd::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

#[cfg(test)]
mod tests;
