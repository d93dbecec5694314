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
//!   buffered write and `fdatasync` (BENCHMARKS.md, "The WAL written with direct I/O"); with
//!   small commits about the same, as extending the file still costs a journal commit.
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
//!   metadata commit where only timestamps changed (ext4 with a journal; see BENCHMARKS.md,
//!   "Reused WAL segments"). The records after the end of the log are the file's previous
//!   incarnations'; each record carries its segment's stamp, so replay tells them apart.
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

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// The magic of the segments this build writes (format 2).
const MAGIC: &[u8; 8] = b"WEFTWAL2";
/// The magic of format-1 segments, which this build still replays.
const MAGIC_V1: &[u8; 8] = b"WEFTWAL1";
/// Every format version's magic starts with this.
const MAGIC_PREFIX: &[u8; 7] = b"WEFTWAL";
/// Record body format version written by this build.
pub const RECORD_VERSION: u8 = 2;
/// The record version of format-1 segments.
const RECORD_VERSION_1: u8 = 1;
/// Body bytes before the tenant: version, kind, tenant length and the segment's stamp.
const BODY_FIXED: usize = 12;
/// How many segments whose records are all in blocks are kept for reuse instead of deleted.
const FREE_SEGMENTS: usize = 2;
/// Name suffix of a segment kept for reuse (`<old seq:020>.free`); replay never reads these.
const FREE_SUFFIX: &str = ".free";
/// Record kind: an OTLP `ExportTraceServiceRequest`.
pub const KIND_OTLP: u8 = 1;
/// A format-2 header: magic, the segment's stamp, and CRC32C of both.
const HEADER_LEN: usize = 20;
/// A format-1 header: the magic alone.
const HEADER_LEN_V1: usize = 8;
/// Records larger than this are refused on append and treated as corruption on replay.
pub const MAX_RECORD: usize = 256 << 20;

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

/// What callers and the writer share about appends on their way to it.
struct Arrivals {
    /// Appends announced ([`Wal::announce`]) and not yet queued.
    coming: AtomicUsize,
    /// Payload bytes of appends queued and not yet taken by the writer.
    queued: AtomicU64,
}

/// A group this large is written without waiting for more appends.
const GROUP_WAIT_BYTES: u64 = 1 << 20;

struct Append {
    tenant: Arc<str>,
    kind: u8,
    payload: Bytes,
    done: tokio::sync::oneshot::Sender<Result<WalPos, Refusal>>,
}

/// Why the writer refused a group.
#[derive(Debug, Clone)]
enum Refusal {
    /// The write or sync failed (and was rolled back).
    Io(String),
    /// No writable segment.
    Unavailable(String),
}

/// Appends gathered for one write and one sync: record headers end to end, and the payloads
/// they precede, written together with `writev`. Headers and positions are made when the group
/// is written, as the segment it lands in (whose stamp each record carries) is known only then.
#[derive(Default)]
struct Group {
    headers: Vec<u8>,
    header_ends: Vec<usize>,
    appends: Vec<Append>,
    /// File bytes of the group: headers plus payloads.
    bytes: u64,
}

impl Group {
    fn push(&mut self, a: Append) {
        self.bytes += record_len(&a.tenant, &a.payload);
        self.appends.push(a);
    }

    /// Encodes the headers of the group's records for the segment stamped `stamp`.
    fn encode(&mut self, stamp: u64) {
        self.headers.clear();
        self.header_ends.clear();
        for a in &self.appends {
            encode_record_header(&mut self.headers, stamp, a.kind, &a.tenant, &a.payload);
            self.header_ends.push(self.headers.len());
        }
        debug_assert_eq!(
            self.headers.len() as u64 + self.appends.iter().map(|a| a.payload.len() as u64).sum::<u64>(),
            self.bytes
        );
    }

    fn clear(&mut self) {
        self.headers.clear();
        self.header_ends.clear();
        self.bytes = 0;
    }
}

enum Cmd {
    Append(Append),
    /// Delete sealed segments whose every record is before the position.
    TruncateBefore(WalPos),
    Shutdown(tokio::sync::oneshot::Sender<()>),
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

/// One segment found on disk.
#[derive(Debug, Clone)]
struct SegmentFile {
    seq: u64,
    path: PathBuf,
}

fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>, WalError> {
    Ok(list_numbered(dir, ".wal")?
        .into_iter()
        .map(|(seq, path)| SegmentFile { seq, path })
        .collect())
}

/// The free segment files in `dir` (see [`Writer::free`]), by old number.
fn list_free(dir: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
    list_numbered(dir, FREE_SUFFIX)
}

/// The files in `dir` named `<number><suffix>`, by number.
fn list_numbered(dir: &Path, suffix: &str) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(suffix)
            && let Ok(seq) = stem.parse::<u64>()
        {
            out.push((seq, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn free_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{FREE_SUFFIX}"))
}

/// The header of a format-2 segment whose records carry `stamp`.
fn header(stamp: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&stamp.to_le_bytes());
    let crc = crc32c::crc32c(&h[..16]);
    h[16..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The stamp of a format-2 header whose stamp and checksum check out, whatever its magic's
/// last byte says (a damaged version digit must not make it a format-1 segment).
fn header_stamp(buf: &[u8]) -> Option<u64> {
    if buf.len() < HEADER_LEN || buf[..7] != MAGIC_PREFIX[..] {
        return None;
    }
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&buf[8..16]);
    let crc = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
    (crc32c::crc32c(&h) == crc).then(|| u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")))
}

/// A new segment's stamp: random, so that no record a client can make (a payload is written
/// verbatim) carries the stamp of a segment its file will later become.
fn new_stamp() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    #[allow(unsafe_code)]
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_le_bytes(b);
    }
    // No getrandom: the standard library's per-process random hash keys, and the time.
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.wal"))
}

fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(io(dir))
}

/// Encodes one record of the segment stamped `stamp` (length, CRC, body; format 2) onto `out`.
pub fn encode_record(out: &mut Vec<u8>, stamp: u64, kind: u8, tenant: &str, payload: &[u8]) {
    encode_record_header(out, stamp, kind, tenant, payload);
    out.extend_from_slice(payload);
}

/// Encodes everything of a record of the segment stamped `stamp` except its payload, which must
/// follow it in the file. The writer sends the payload from its own buffer (`writev`), so it is
/// never copied in user space.
pub fn encode_record_header(out: &mut Vec<u8>, stamp: u64, kind: u8, tenant: &str, payload: &[u8]) {
    let body_len = BODY_FIXED + tenant.len() + payload.len();
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let body_at = out.len();
    out.push(RECORD_VERSION);
    out.push(kind);
    out.extend_from_slice(&(tenant.len() as u16).to_le_bytes());
    out.extend_from_slice(&stamp.to_le_bytes());
    out.extend_from_slice(tenant.as_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[body_at..]), payload);
    out[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Writes all of `parts` with as few `writev` calls as the kernel allows.
fn write_all_vectored(file: &mut File, parts: &[&[u8]]) -> std::io::Result<()> {
    use std::io::IoSlice;
    // IOV_MAX is 1024 on Linux.
    for batch in parts.chunks(1024) {
        let mut slices: Vec<IoSlice<'_>> = batch.iter().map(|p| IoSlice::new(p)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let n = file.write_vectored(rest)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut rest, n);
        }
    }
    Ok(())
}

/// Outcome of decoding one record from a segment buffer.
enum Decoded {
    Record {
        kind: u8,
        tenant: Arc<str>,
        payload: Bytes,
        next: usize,
    },
    End,
    /// An intact record of format 2 with another stamp: at the end of the log, a previous
    /// incarnation's record in a reused file.
    Stale,
    Torn(&'static str),
}

/// Decodes the record at `at` of a segment: of format 1 when `stamp` is `None`, else of format
/// 2 stamped `stamp`. An intact format-2 record with another stamp is [`Decoded::Stale`]; a
/// record of the other format is damage (format-1 files are never reused).
fn decode_record(buf: &Bytes, at: usize, stamp: Option<u64>) -> Decoded {
    if at == buf.len() {
        return Decoded::End;
    }
    if buf.len() - at < 8 {
        return Decoded::Torn("truncated record header");
    }
    let len = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(buf[at + 4..at + 8].try_into().expect("4 bytes"));
    if !(4..=MAX_RECORD).contains(&len) || buf.len() - at - 8 < len {
        return Decoded::Torn("record length runs past the end of the segment");
    }
    let body = &buf[at + 8..at + 8 + len];
    let (fixed, stamped) = match body[0] {
        RECORD_VERSION_1 => (4, None),
        RECORD_VERSION if len >= BODY_FIXED => (
            BODY_FIXED,
            Some(u64::from_le_bytes(body[4..12].try_into().expect("8 bytes"))),
        ),
        _ => return Decoded::Torn("unknown record version"),
    };
    let tlen = u16::from_le_bytes([body[2], body[3]]) as usize;
    if fixed + tlen > len {
        return Decoded::Torn("tenant runs past the record");
    }
    // The cheap checks above come first: resynchronisation calls this at every byte offset.
    if crc32c::crc32c(body) != crc {
        return Decoded::Torn("record checksum mismatch");
    }
    match (stamp, stamped) {
        (None, None) => {}
        (Some(s), Some(t)) if s == t => {}
        (Some(_), Some(_)) => return Decoded::Stale,
        (Some(_), None) => return Decoded::Torn("a format-1 record in a format-2 segment"),
        (None, Some(_)) => return Decoded::Torn("a format-2 record in a format-1 segment"),
    }
    let kind = body[1];
    let Ok(tenant) = std::str::from_utf8(&body[fixed..fixed + tlen]) else {
        return Decoded::Torn("tenant is not utf-8");
    };
    let start = at + 8 + fixed + tlen;
    Decoded::Record {
        kind,
        tenant: Arc::from(tenant),
        payload: buf.slice(start..at + 8 + len),
        next: at + 8 + len,
    }
}

/// The offset of the next intact record of the segment's own after damage at `at`, if any.
///
/// Format 2: byte by byte to the end of the file, taking the first record with the segment's
/// stamp. Other records do not end the search: a client can put one in a payload (it is
/// written verbatim), or a reused file holds its previous incarnation's, but none can carry the
/// stamp, which is random. Where the stamp bytes differ, no checksum is computed, so a search
/// through megabytes of old records (after every crash in a reused segment) stays cheap.
///
/// Format 1 (no stamp): first where the damaged record says it ends (a flipped payload byte
/// leaves its length intact, and the payload is not searched), then byte by byte.
fn resync(buf: &Bytes, at: usize, stamp: Option<u64>) -> Option<usize> {
    if let Some(stamp) = stamp {
        let last = buf.len().saturating_sub(8 + BODY_FIXED);
        return (at + 1..=last).find(|&p| {
            starts_own_record(buf, p, stamp) && matches!(decode_record(buf, p, Some(stamp)), Decoded::Record { .. })
        });
    }
    if buf.len() - at >= 8 {
        let len = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
        let end = at.saturating_add(8).saturating_add(len);
        if (4..=MAX_RECORD).contains(&len)
            && end < buf.len()
            && matches!(decode_record(buf, end, stamp), Decoded::Record { .. })
        {
            return Some(end);
        }
    }
    (at + 1..buf.len().saturating_sub(11)).find(|&p| matches!(decode_record(buf, p, stamp), Decoded::Record { .. }))
}

/// Whether the bytes at `at` begin a format-2 record header stamped `stamp`, intact or not.
fn starts_own_record(buf: &[u8], at: usize, stamp: u64) -> bool {
    buf.get(at + 8) == Some(&RECORD_VERSION) && buf.get(at + 12..at + 20) == Some(&stamp.to_le_bytes()[..])
}

/// The stamp of an intact format-2 record where a segment's first one starts, if there is one
/// (the stamp of a segment whose header is damaged).
fn first_record_stamp(buf: &Bytes) -> Option<u64> {
    let body = buf.get(HEADER_LEN + 8..HEADER_LEN + 8 + BODY_FIXED)?;
    let stamp = u64::from_le_bytes(body[4..12].try_into().expect("8 bytes"));
    matches!(decode_record(buf, HEADER_LEN, Some(stamp)), Decoded::Record { .. }).then_some(stamp)
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

/// Replays the records of one segment through `visit`; returns the segment's valid length.
fn replay_segment(
    seg: &SegmentFile,
    report: &mut ReplayReport,
    visit: &mut impl FnMut(Record),
) -> Result<Option<u64>, WalError> {
    let mut data = Vec::new();
    File::open(&seg.path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(io(&seg.path))?;
    if data.len() < HEADER_LEN {
        // A segment whose header never reached the disk holds no record.
        tracing::warn!(path = %seg.path.display(), bytes = data.len(), "removing wal segment with no complete header");
        report.removed_segments += 1;
        if let Err(e) = fs::remove_file(&seg.path) {
            tracing::warn!(path = %seg.path.display(), error = %e, "cannot remove wal segment");
        }
        return Ok(None);
    }
    let buf = Bytes::from(data);
    // Format 2's header holds the stamp its records carry, under a checksum; format 1's is the
    // magic alone. A format-2 header whose checksum holds is read as one whatever its version
    // digit says, so a damaged digit neither hides its records nor stops the log from opening.
    let (stamp, mut at) = if let Some(stamp) = header_stamp(&buf) {
        (Some(stamp), HEADER_LEN)
    } else if &buf[..HEADER_LEN_V1] == MAGIC_V1 {
        (None, HEADER_LEN_V1)
    } else {
        if buf[..MAGIC_PREFIX.len()] == MAGIC_PREFIX[..] && buf[7].is_ascii_digit() && buf[7] > MAGIC[7] {
            return Err(WalError::NewerFormat {
                path: seg.path.clone(),
                version: char::from(buf[7]).to_string(),
            });
        }
        // A damaged header: its records may still be intact. The first record where format 2
        // puts it gives the stamp, or one where format 1 puts it says format 1. Nothing further
        // is searched for a stamp: a record found inside a payload could be a client's.
        let found = first_record_stamp(&buf)
            .map(|stamp| (Some(stamp), HEADER_LEN))
            .or_else(|| {
                matches!(decode_record(&buf, HEADER_LEN_V1, None), Decoded::Record { .. })
                    .then_some((None, HEADER_LEN_V1))
            });
        match found {
            Some((stamp, p)) => {
                damaged(seg, report, 0, p, "segment header is damaged");
                (stamp, p)
            }
            None => {
                damaged(
                    seg,
                    report,
                    0,
                    buf.len(),
                    "segment header is damaged and no record follows",
                );
                return Ok(Some(buf.len() as u64));
            }
        }
    };
    loop {
        match decode_record(&buf, at, stamp) {
            Decoded::Record {
                kind,
                tenant,
                payload,
                next,
            } => {
                report.records += 1;
                report.bytes += (next - at) as u64;
                visit(Record {
                    pos: WalPos {
                        segment: seg.seq,
                        offset: at as u64,
                    },
                    kind,
                    tenant,
                    payload,
                });
                at = next;
            }
            // The end of the log, or of this incarnation's log in a reused file.
            Decoded::End | Decoded::Stale => return Ok(Some(at as u64)),
            // The padding of a direct write that was not trimmed (the writer stopped first):
            // zeros from the end of the log to the end of its block, and no further.
            Decoded::Torn(_)
                if buf.len() % BLOCK == 0 && buf.len() - at < BLOCK && buf[at..].iter().all(|&b| b == 0) =>
            {
                return Ok(Some(at as u64));
            }
            Decoded::Torn(why) => match resync(&buf, at, stamp) {
                Some(p) => {
                    damaged(seg, report, at, p, why);
                    at = p;
                }
                // No record of the segment's own follows, zeros run from the end of the log to
                // the end of its block, and other bytes come after: the padding of the last
                // direct write, then what a reused file held before. The log ends here. (Only
                // zeros after it is a write that never landed: a torn tail, as in format 1.)
                None if stamp.is_some()
                    && at % BLOCK != 0
                    && at.next_multiple_of(BLOCK) < buf.len()
                    && buf[at..at.next_multiple_of(BLOCK)].iter().all(|&b| b == 0)
                    && buf[at.next_multiple_of(BLOCK)..].iter().any(|&b| b != 0) =>
                {
                    return Ok(Some(at as u64));
                }
                // The log ends exactly at a block's end, so no padding follows it, and the
                // bytes there are not a record of the segment's own (no stamp of its own) but
                // other bytes: a reused file's previous incarnation, or a write whose first
                // sector never landed. Either way nothing after was acknowledged; the log ends.
                None if stamp.is_some_and(|s| !starts_own_record(&buf, at, s))
                    && at % BLOCK == 0
                    && buf[at..].iter().any(|&b| b != 0) =>
                {
                    return Ok(Some(at as u64));
                }
                None => {
                    let dropped = (buf.len() - at) as u64;
                    report.torn_bytes += dropped;
                    tracing::warn!(path = %seg.path.display(), offset = at, dropped_bytes = dropped, reason = why, "truncating torn wal tail");
                    // Nothing is appended to a replayed segment, so truncating is only tidying:
                    // a failure (e.g. a read-only disk) is logged and replay goes on.
                    if let Err(e) = OpenOptions::new()
                        .write(true)
                        .open(&seg.path)
                        .and_then(|f| f.set_len(at as u64).and_then(|_| f.sync_all()))
                    {
                        tracing::warn!(path = %seg.path.display(), error = %e, "cannot truncate torn wal tail");
                    }
                    return Ok(Some(at as u64));
                }
            },
        }
    }
}

fn damaged(seg: &SegmentFile, report: &mut ReplayReport, from: usize, to: usize, why: &str) {
    report.damaged_bytes += (to - from) as u64;
    report.damaged_ranges += 1;
    tracing::error!(
        path = %seg.path.display(),
        from_offset = from,
        to_offset = to,
        skipped_bytes = to - from,
        reason = why,
        "skipping damaged wal bytes; replay continues with the next intact record"
    );
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

struct Writer {
    dir: PathBuf,
    opts: WalOptions,
    /// The segment being written, or the last one that was when `file` is `None`.
    seq: u64,
    /// `None` while no segment is writable: appends are refused until one can be created.
    file: Option<File>,
    path: PathBuf,
    /// End of the last durable group in the current segment. Everything before it is intact
    /// records; nothing after it is ever left behind by a failed write.
    offset: u64,
    /// The active segment's stamp, which its records carry.
    stamp: u64,
    /// Sealed segments and the bytes of their logs.
    sealed: Vec<(u64, u64)>,
    /// Files of segments whose records are all in blocks, kept for reuse: each old number and
    /// path (`<old seq>.free`), at most [`FREE_SEGMENTS`].
    free: Vec<(u64, PathBuf)>,
    stats: Arc<WalStats>,
    sink: Box<dyn CommitSink>,
    last_sync: Instant,
    dirty: bool,
    /// Error logs while the disk refuses writes are limited to one per interval.
    last_error_log: Option<Instant>,
    suppressed_errors: u64,
    /// Appends announced by callers and not yet queued ([`Wal::announce`]), and the bytes
    /// queued and not yet taken.
    arrivals: Arc<Arrivals>,
    /// When the last append arrived, and the average time between appends (weighted 1/4 to
    /// the newest): appends closer together than the group wait make a group wait for more.
    last_append: Instant,
    append_gap: Duration,
    /// Whether the active segment's handle was opened with `O_DIRECT | O_DSYNC`.
    direct: bool,
    /// Set once the filesystem refused direct I/O: later segments are not tried again.
    direct_refused: bool,
    /// Under direct I/O, the bytes of the active segment's last, partly filled block (from the
    /// block's start to `offset`): each direct write starts with them.
    tail: Vec<u8>,
    /// The aligned staging buffer of direct writes, allocated on the first one.
    staging: Option<Staging>,
}

/// Direct writes are aligned to this: the largest common logical block size, so they suit
/// 512-byte devices too.
const BLOCK: usize = 4096;
/// A direct write carries at most this; a larger group takes several writes, each durable.
const DIRECT_CHUNK: usize = 4 << 20;

/// `DIRECT_CHUNK` bytes at a `BLOCK`-aligned address, as `O_DIRECT` requires of a buffer.
struct Staging {
    raw: Vec<u8>,
    at: usize,
}

impl Staging {
    fn new() -> Self {
        let raw = vec![0u8; DIRECT_CHUNK + BLOCK];
        let at = raw.as_ptr().align_offset(BLOCK);
        assert!(at < BLOCK, "a byte buffer can be aligned");
        Staging { raw, at }
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + DIRECT_CHUNK]
    }
}

/// Opens `path` for direct, synchronous writes; fails where the filesystem refuses `O_DIRECT`
/// (`EINVAL`: tmpfs before Linux 6.6) and off Linux.
fn open_direct(path: &Path) -> std::io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(path)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// Writes `parts` at `offset` of a segment opened for direct I/O, in whole aligned blocks: the
/// first write starts at the block holding `offset` and carries `tail`, that block's bytes
/// before `offset` (unchanged); the last is padded with zeros. On success `tail` holds the new
/// last, partly filled block. A failed write leaves `tail` as it was.
///
/// `before_write` runs before each write (tests inject failures there).
fn write_direct(
    file: &File,
    staging: &mut Staging,
    tail: &mut Vec<u8>,
    offset: u64,
    parts: &[&[u8]],
    mut before_write: impl FnMut() -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    debug_assert_eq!(tail.len() as u64, offset % BLOCK as u64);
    let buf = staging.buf();
    let mut file_at = offset - tail.len() as u64;
    buf[..tail.len()].copy_from_slice(tail);
    let mut pos = tail.len();
    for part in parts {
        let mut part = *part;
        while !part.is_empty() {
            let n = part.len().min(buf.len() - pos);
            buf[pos..pos + n].copy_from_slice(&part[..n]);
            pos += n;
            part = &part[n..];
            if pos == buf.len() {
                before_write()?;
                file.write_all_at(buf, file_at)?;
                file_at += buf.len() as u64;
                pos = 0;
            }
        }
    }
    if pos > 0 {
        let end = pos.next_multiple_of(BLOCK);
        buf[pos..end].fill(0);
        before_write()?;
        file.write_all_at(&buf[..end], file_at)?;
    }
    let last = pos - pos % BLOCK;
    tail.clear();
    tail.extend_from_slice(&buf[last..pos]);
    Ok(())
}

/// Whether an error from opening or writing with `O_DIRECT` means the filesystem does not
/// support it (rather than a failure of this write).
fn refuses_direct(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EOPNOTSUPP))
}

/// A group's bytes in file order: each record's header, then its payload.
fn group_parts(g: &Group) -> Vec<&[u8]> {
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * g.appends.len());
    let mut from = 0;
    for (a, &end) in g.appends.iter().zip(&g.header_ends) {
        parts.push(&g.headers[from..end]);
        parts.push(&a.payload);
        from = end;
    }
    parts
}

const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Writer {
    fn new(
        dir: PathBuf,
        opts: WalOptions,
        seq: u64,
        stats: Arc<WalStats>,
        sink: Box<dyn CommitSink>,
        arrivals: Arc<Arrivals>,
    ) -> Self {
        let mut w = Writer {
            path: segment_path(&dir, seq),
            dir,
            opts,
            seq,
            file: None,
            offset: HEADER_LEN as u64,
            stamp: 0,
            sealed: Vec::new(),
            free: Vec::new(),
            stats,
            sink,
            last_sync: Instant::now(),
            dirty: false,
            last_error_log: None,
            suppressed_errors: 0,
            arrivals,
            last_append: Instant::now(),
            append_gap: Duration::from_secs(1),
            direct: false,
            direct_refused: false,
            tail: Vec::new(),
            staging: None,
        };
        match Self::create_segment(&w.dir, seq) {
            Ok((file, stamp)) => {
                w.start_segment(file, stamp, false);
                w.stats.size_bytes.fetch_add(HEADER_LEN as u64, Ordering::Relaxed);
            }
            Err(e) => {
                // Start anyway, so queries are served; appends retry creating the segment.
                tracing::error!(error = %e, "cannot start a wal segment; refusing writes until it can (is the disk full?)");
                w.seq = seq.saturating_sub(1);
                w.stats.unwritable.store(1, Ordering::Relaxed);
            }
        }
        w
    }

    /// Makes `file`, a new segment at `self.path` holding only its header (synced, with
    /// `stamp`), or a `reused` one (that header, then a previous incarnation's records), the
    /// active segment: through a direct-I/O handle when the policy and the filesystem allow.
    fn start_segment(&mut self, file: File, stamp: u64, reused: bool) {
        self.direct = false;
        self.file = Some(file);
        self.stamp = stamp;
        if self.opts.direct_io && matches!(self.opts.fsync, FsyncPolicy::Always) && !self.direct_refused {
            match open_direct(&self.path) {
                Ok(f) => {
                    self.file = Some(f);
                    self.direct = true;
                    self.tail.clear();
                    self.tail.extend_from_slice(&header(stamp));
                }
                Err(e) if refuses_direct(&e) => {
                    self.direct_refused = true;
                    tracing::info!(path = %self.path.display(), error = %e, "the wal's filesystem refuses direct I/O; using buffered writes and fdatasync");
                }
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot open the wal segment for direct I/O; writing it buffered");
                }
            }
        }
        self.stats.direct_io.store(self.direct as u64, Ordering::Relaxed);
        if reused && !self.direct {
            // Buffered writes append, so the previous incarnation's records go first.
            let cut = self
                .file
                .as_ref()
                .map(|f| f.set_len(HEADER_LEN as u64).and_then(|_| f.sync_data()));
            if let Some(Err(e)) = cut {
                tracing::error!(path = %self.path.display(), error = %e, "cannot empty a reused wal segment; fencing it");
                self.stats.fenced_segments.fetch_add(1, Ordering::Relaxed);
                self.file = None;
                self.sealed.push((self.seq, HEADER_LEN as u64));
            }
        }
    }

    /// After the filesystem refused a direct write: the segment is cut back to the end of the
    /// log and written buffered from now on. If it cannot be reopened so, it is fenced (never
    /// written again; bytes of the failed write may follow its last record, which replay cuts)
    /// and the next segment is started, buffered; the group is refused.
    fn leave_direct(&mut self, e: &std::io::Error) -> Result<(), Refusal> {
        tracing::warn!(path = %self.path.display(), error = %e, "the wal's filesystem refuses direct writes; using buffered writes and fdatasync");
        self.direct_refused = true;
        self.direct = false;
        self.stats.direct_io.store(0, Ordering::Relaxed);
        let reopened = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .and_then(|f| f.set_len(self.offset).map(|_| f));
        #[cfg(test)]
        let reopened = match &self.opts.inject {
            Some(i) if i.fail_reopen.load(Ordering::Relaxed) => Err(std::io::Error::other("injected")),
            _ => reopened,
        };
        match reopened {
            Ok(file) => {
                self.file = Some(file);
                Ok(())
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "cannot reopen the wal segment for buffered writes; fencing it");
                self.stats.fenced_segments.fetch_add(1, Ordering::Relaxed);
                self.file = None;
                self.sealed.push((self.seq, self.offset));
                self.reopen();
                Err(Refusal::Io(e.to_string()))
            }
        }
    }

    /// Drops the zero padding after the end of the log in a segment written with direct I/O
    /// (tidiness: replay reads padding as the end). Not synced: if the trim is lost, the
    /// padding stays and means the same.
    fn trim_padding(&mut self) {
        if self.direct
            && let Some(file) = self.file.as_ref()
            && let Err(e) = file.set_len(self.offset)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot trim a wal segment's padding");
        }
    }

    /// Creates segment `seq` with its header (a new stamp), synced; returns it and its stamp.
    /// On failure nothing is left behind, so a later attempt can create it.
    fn create_segment(dir: &Path, seq: u64) -> Result<(File, u64), WalError> {
        let path = segment_path(dir, seq);
        let open = || OpenOptions::new().create_new(true).append(true).open(&path);
        let mut file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Left by a crash between creating the file and writing its header, or by an
                // older build: nothing was acknowledged in a segment without a complete header.
                let len = fs::metadata(&path).map_err(io(&path))?.len();
                if len > HEADER_LEN as u64 {
                    return Err(io(&path)(e));
                }
                fs::remove_file(&path).map_err(io(&path))?;
                open().map_err(io(&path))?
            }
            r => r.map_err(io(&path))?,
        };
        let stamp = new_stamp();
        let written = file
            .write_all(&header(stamp))
            .and_then(|_| file.sync_all())
            .map_err(io(&path))
            .and_then(|_| sync_dir(dir));
        if let Err(e) = written {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok((file, stamp))
    }

    fn run(mut self, rx: mpsc::Receiver<Cmd>) {
        let mut group = Group::default();
        loop {
            let first = match self.opts.fsync {
                FsyncPolicy::Interval(d) if self.dirty => {
                    match rx.recv_timeout(d.saturating_sub(self.last_sync.elapsed())) {
                        Ok(c) => c,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            self.sync_now();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                _ => match rx.recv() {
                    Ok(c) => c,
                    Err(_) => break,
                },
            };
            let mut shutdown = None;
            let mut cmd = Some(first);
            let wait_until = Instant::now() + self.opts.group_wait;
            // Drain everything already queued into one group: one write, one sync.
            while let Some(c) = cmd.take() {
                match c {
                    Cmd::Append(a) => {
                        self.arrivals.queued.fetch_sub(a.payload.len() as u64, Ordering::AcqRel);
                        let now = Instant::now();
                        self.append_gap = (self.append_gap * 3 + (now - self.last_append)) / 4;
                        self.last_append = now;
                        if self.offset + group.bytes >= self.opts.segment_bytes && self.offset > HEADER_LEN as u64 {
                            // Finish the current group in this segment before rolling.
                            self.flush_group(&mut group);
                            self.roll();
                        }
                        group.push(a);
                        if group.bytes >= 16 << 20 {
                            break;
                        }
                    }
                    Cmd::TruncateBefore(p) => self.truncate_before(p),
                    Cmd::Shutdown(done) => {
                        shutdown = Some(done);
                        break;
                    }
                }
                cmd = rx.try_recv().ok();
                // Nothing more queued: wait a little for appends announced and on their way,
                // so that requests close together share one write and one sync.
                if cmd.is_none() && shutdown.is_none() {
                    cmd = self.wait_for_coming(&rx, wait_until, group.bytes);
                }
            }
            self.flush_group(&mut group);
            if let Some(done) = shutdown {
                self.sync_now();
                self.trim_padding();
                let _ = done.send(());
                return;
            }
        }
        self.sync_now();
        self.trim_padding();
    }

    /// The next command if one arrives before `until` while another append is likely (see
    /// [`WalOptions::group_wait`]; under [`FsyncPolicy::Always`], for groups under
    /// [`GROUP_WAIT_BYTES`]); `None` otherwise.
    ///
    /// - **Busy** (appends arriving on average more often than the group wait): the group
    ///   will wait until `until` anyway, so the writer sleeps through it and then takes what
    ///   has queued. Waiting in the channel instead woke it once per append, and each wake-up
    ///   cost the sender a futex call and the writer a context switch (a few per group at
    ///   hundreds of requests a second). Appends wake it early only once the queue holds
    ///   [`GROUP_WAIT_BYTES`] ([`Wal::append`]), so a large group is not held back.
    /// - **Not busy, an append announced:** one timed wait in the channel, which the append
    ///   ends, so a lone request is written as soon as it arrives. An announced request that
    ///   is then refused (and never appends) holds the group back until `until`, which is rare
    ///   and bounded.
    fn wait_for_coming(&self, rx: &mpsc::Receiver<Cmd>, until: Instant, group_bytes: u64) -> Option<Cmd> {
        if !matches!(self.opts.fsync, FsyncPolicy::Always) || group_bytes >= GROUP_WAIT_BYTES {
            return None;
        }
        let busy = self.append_gap < self.opts.group_wait;
        if busy {
            loop {
                let now = Instant::now();
                let queued = self.arrivals.queued.load(Ordering::Acquire);
                if now >= until || group_bytes + queued >= GROUP_WAIT_BYTES {
                    break;
                }
                // Ends early on an unpark, or spuriously; either way the loop looks again.
                std::thread::park_timeout(until - now);
            }
            return rx.try_recv().ok();
        }
        if self.arrivals.coming.load(Ordering::Acquire) == 0 {
            return None;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        rx.recv_timeout(left).ok()
    }

    /// Logs a write-path error, at most once per [`ERROR_LOG_INTERVAL`] (a full disk fails
    /// every append until space returns).
    fn log_error(&mut self, msg: &str, what: &str) {
        if self.last_error_log.is_some_and(|t| t.elapsed() < ERROR_LOG_INTERVAL) {
            self.suppressed_errors += 1;
            return;
        }
        tracing::error!(path = %self.path.display(), error = %msg, similar_errors_suppressed = self.suppressed_errors, "{what}");
        self.last_error_log = Some(Instant::now());
        self.suppressed_errors = 0;
    }

    fn flush_group(&mut self, g: &mut Group) {
        if g.appends.is_empty() {
            return;
        }
        if self.file.is_none() {
            self.reopen();
        }
        let result = self.write_group(g);
        let bytes = g.bytes;
        g.clear();
        match result {
            Ok(()) => {
                let mut records = Vec::with_capacity(g.appends.len());
                let mut acks = Vec::with_capacity(g.appends.len());
                let mut offset = self.offset;
                for a in g.appends.drain(..) {
                    let pos = WalPos {
                        segment: self.seq,
                        offset,
                    };
                    offset += record_len(&a.tenant, &a.payload);
                    records.push(Record {
                        pos,
                        kind: a.kind,
                        tenant: a.tenant,
                        payload: a.payload,
                    });
                    acks.push((a.done, pos));
                }
                debug_assert_eq!(offset, self.offset + bytes);
                self.offset += bytes;
                self.stats.bytes_written.fetch_add(bytes, Ordering::Relaxed);
                self.stats.size_bytes.fetch_add(bytes, Ordering::Relaxed);
                self.stats
                    .records_written
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
                // The sink sees records before their writers are answered, so a reader that
                // waits for the sink observes every acknowledged record.
                self.sink.committed(records);
                self.stats.committed_groups.fetch_add(1, Ordering::Release);
                for (done, pos) in acks {
                    let _ = done.send(Ok(pos));
                }
            }
            Err(refusal) => {
                match &refusal {
                    Refusal::Io(msg) => {
                        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                        let msg = msg.clone();
                        self.log_error(&msg, "wal write failed; refusing the group and rolling it back");
                        self.roll_back();
                    }
                    Refusal::Unavailable(msg) => {
                        let msg = msg.clone();
                        self.log_error(&msg, "wal is not writable; refusing appends");
                    }
                }
                if matches!(refusal, Refusal::Unavailable(_)) {
                    self.stats
                        .unavailable_refusals
                        .fetch_add(g.appends.len() as u64, Ordering::Relaxed);
                }
                for a in g.appends.drain(..) {
                    let _ = a.done.send(Err(refusal.clone()));
                }
            }
        }
    }

    /// Writes a group at the end of the log and makes it durable under the fsync policy.
    fn write_group(&mut self, g: &mut Group) -> Result<(), Refusal> {
        if self.file.is_none() {
            return Err(Refusal::Unavailable(format!(
                "no wal segment can be written in {} (is the disk full?)",
                self.dir.display()
            )));
        }
        g.encode(self.stamp);
        if self.direct {
            let parts = group_parts(g);
            let file = self.file.as_ref().expect("checked above");
            let staging = self.staging.get_or_insert_with(Staging::new);
            #[cfg(test)]
            let inject = self.opts.inject.clone();
            let before_write = || {
                #[cfg(test)]
                if let Some(i) = &inject {
                    return i.before_write();
                }
                Ok(())
            };
            let t = Instant::now();
            match write_direct(file, staging, &mut self.tail, self.offset, &parts, before_write) {
                Ok(()) => {
                    // Durable on return (O_DSYNC): counted as the group's sync.
                    self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .sync_nanos_total
                        .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    self.last_sync = Instant::now();
                    return Ok(());
                }
                Err(e) if refuses_direct(&e) => self.leave_direct(&e)?,
                Err(e) => return Err(Refusal::Io(e.to_string())),
            }
        }
        let file = self.file.as_mut().expect("checked above");
        write_all_vectored(file, &group_parts(g)).map_err(|e| Refusal::Io(e.to_string()))?;
        self.dirty = true;
        match self.opts.fsync {
            FsyncPolicy::Always => self.sync().map_err(Refusal::Io),
            FsyncPolicy::Interval(d) if self.last_sync.elapsed() >= d => self.sync().map_err(Refusal::Io),
            _ => Ok(()),
        }
    }

    /// After a failed write or sync: cuts the segment back to the end of the last durable group,
    /// so no later record follows torn bytes. If that fails, fences the segment: it is never
    /// written again, and the next group starts a new one.
    fn roll_back(&mut self) {
        let Some(file) = self.file.as_mut() else { return };
        let cut = file.set_len(self.offset).and_then(|_| file.sync_data());
        match cut {
            Ok(()) => self.dirty = false,
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "cannot roll back a failed wal write; fencing the segment");
                self.stats.fenced_segments.fetch_add(1, Ordering::Relaxed);
                self.file = None;
                self.direct = false;
                self.stats.direct_io.store(0, Ordering::Relaxed);
                self.sealed.push((self.seq, self.offset));
                self.dirty = false;
                self.reopen();
            }
        }
    }

    /// Tries to start the next segment while none is writable.
    fn reopen(&mut self) {
        let next = self.seq + 1;
        match Self::create_segment(&self.dir, next) {
            Ok((file, stamp)) => {
                self.seq = next;
                self.path = segment_path(&self.dir, next);
                self.offset = HEADER_LEN as u64;
                self.start_segment(file, stamp, false);
                self.stats.size_bytes.fetch_add(HEADER_LEN as u64, Ordering::Relaxed);
                if self.stats.unwritable.swap(0, Ordering::Relaxed) == 1 {
                    tracing::info!(path = %self.path.display(), "wal is writable again");
                }
            }
            Err(e) => {
                self.stats.unwritable.store(1, Ordering::Relaxed);
                self.log_error(&e.to_string(), "cannot start a new wal segment");
                // The disk is likely full: give back the space held for reuse.
                self.drop_free();
            }
        }
    }

    /// Deletes the free files kept for reuse.
    fn drop_free(&mut self) {
        for (_, path) in self.free.drain(..) {
            if let Err(e) = fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot delete a free wal segment");
            }
        }
    }

    fn sync(&mut self) -> Result<(), String> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let t = Instant::now();
        file.sync_data().map_err(|e| e.to_string())?;
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        self.stats
            .sync_nanos_total
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.last_sync = Instant::now();
        self.dirty = false;
        Ok(())
    }

    fn sync_now(&mut self) {
        if self.dirty
            && let Err(e) = self.sync()
        {
            tracing::error!(path = %self.path.display(), error = %e, "wal sync failed");
        }
    }

    /// Whether the sealed segment at `path`, whose records are all in blocks, is kept for
    /// reuse: while segments are written with direct I/O (which overwrites a reused file in
    /// place; buffered writes append), fewer than [`FREE_SEGMENTS`] are kept, and it is of
    /// format 2 (so that none of its records can be taken for a later segment's own).
    fn reusable(&self, path: &Path) -> bool {
        if !self.direct || self.free.len() >= FREE_SEGMENTS {
            return false;
        }
        let mut head = [0u8; HEADER_LEN];
        File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && header_stamp(&head).is_some()
    }

    /// A kept free file made segment `seq`, if there is one and segments are written with
    /// direct I/O: its header is rewritten with a new stamp and synced, then it is renamed and
    /// the directory synced, so under the segment's name it never holds a header whose stamp its
    /// old records carry. Those records stay after the header until overwritten; replay reads
    /// them as the end of the log. On failure the free file is deleted and `None` returned.
    fn reuse_segment(&mut self, seq: u64) -> Option<(File, u64)> {
        use std::os::unix::fs::FileExt;
        if !self.direct {
            return None;
        }
        let (old, free) = self.free.pop()?;
        let path = segment_path(&self.dir, seq);
        if fs::symlink_metadata(&path).is_ok() {
            // Left by a crash while it was created: `create_segment` deals with it, and the
            // free file waits for the next roll.
            self.free.push((old, free));
            return None;
        }
        let stamp = new_stamp();
        let restamped = OpenOptions::new()
            .write(true)
            .open(&free)
            .and_then(|f| f.write_all_at(&header(stamp), 0).and_then(|_| f.sync_data()));
        // Neither name of the file holds a record of a later segment's, so on failure it is
        // deleted under whichever it has.
        if let Err(e) = restamped.and_then(|_| fs::rename(&free, &path)) {
            tracing::warn!(path = %free.display(), error = %e, "cannot reuse a free wal segment; deleting it");
            let _ = fs::remove_file(&free);
            return None;
        }
        match sync_dir(&self.dir).and_then(|_| OpenOptions::new().append(true).open(&path).map_err(io(&path))) {
            Ok(file) => {
                self.stats.reused_segments.fetch_add(1, Ordering::Relaxed);
                Some((file, stamp))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot reuse a free wal segment; deleting it");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Seals the current segment and starts the next one, in a free file when one is kept.
    /// If the next cannot be created, the current one stays in use (it is intact) and a later
    /// roll tries again.
    fn roll(&mut self) {
        if self.file.is_none() {
            self.reopen();
            return;
        }
        self.sync_now();
        let next = self.seq + 1;
        let started = match self.reuse_segment(next) {
            Some((file, stamp)) => Ok((file, stamp, true)),
            None => Self::create_segment(&self.dir, next).map(|(f, stamp)| (f, stamp, false)),
        };
        match started {
            Ok((file, stamp, reused)) => {
                self.trim_padding();
                self.sealed.push((self.seq, self.offset));
                self.seq = next;
                self.path = segment_path(&self.dir, next);
                self.offset = HEADER_LEN as u64;
                self.start_segment(file, stamp, reused);
                self.stats.size_bytes.fetch_add(HEADER_LEN as u64, Ordering::Relaxed);
            }
            Err(e) => self.log_error(
                &e.to_string(),
                "cannot start a new wal segment; continuing in the current one",
            ),
        }
    }

    fn truncate_before(&mut self, pos: WalPos) {
        if !self.direct {
            // Only direct writes reuse a file (the policy changed, or the filesystem refused
            // them since): the kept ones would never be used.
            self.drop_free();
        }
        // A sealed segment below pos.segment holds only records before pos.
        let (drop, keep): (Vec<_>, Vec<_>) = self.sealed.iter().partition(|&&(s, _)| s < pos.segment);
        self.sealed = keep;
        for (seq, bytes) in drop {
            let path = segment_path(&self.dir, seq);
            // Not synced: if a crash undoes it, the segment is replayed again, as when a
            // deletion is undone, and its records are found to be in blocks.
            let gone = if self.reusable(&path) {
                let to = free_path(&self.dir, seq);
                fs::rename(&path, &to).map(|()| self.free.push((seq, to)))
            } else {
                fs::remove_file(&path)
            };
            match gone {
                Ok(()) => {
                    self.stats.size_bytes.fetch_sub(
                        bytes.min(self.stats.size_bytes.load(Ordering::Relaxed)),
                        Ordering::Relaxed,
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete wal segment")
                }
            }
        }
        // The active segment may also be fully covered: roll so it can be deleted next time.
        if pos.segment == self.seq && pos.offset >= self.offset && self.offset > HEADER_LEN as u64 {
            self.roll();
        }
    }
}

/// Bytes a record takes in a segment.
fn record_len(tenant: &str, payload: &[u8]) -> u64 {
    (8 + BODY_FIXED + tenant.len() + payload.len()) as u64
}

#[cfg(test)]
mod tests;
