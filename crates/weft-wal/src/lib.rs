//! The write-ahead log.
//!
//! # Design constraints
//! - A request is acknowledged only after its record is written and, under
//!   [`FsyncPolicy::Always`], `fdatasync`ed. Concurrent appends share one write and one sync
//!   (group commit): a single writer thread drains every pending append, writes them with one
//!   `write_all`, syncs once, then answers them all.
//! - Records are handed to the [`CommitSink`] in log order after they are durable, so the
//!   consumer (the block builder) can name a position below which everything is in blocks.
//! - Nothing is ever overwritten in place. Segments are append-only and deleted whole.
//!
//! # On-disk layout (format version 1)
//! `wal/` holds segments named `<seq:020>.wal`, `seq` strictly increasing. A segment is
//!
//! ```text
//! header:  b"WEFTWAL1" (8 bytes)
//! record:  len u32 LE | crc u32 LE | body[len]
//! body:    version u8 (=1) | kind u8 | tenant_len u16 LE | tenant utf-8 | payload
//! ```
//! `crc` is CRC32C of `body`. `kind` 1 is an OTLP `ExportTraceServiceRequest` payload.
//!
//! # Invariants
//! - **Invariant:** a record whose append returned `Ok` is in a segment on disk and, under
//!   `Always`, was synced before the call returned.
//! - A torn write can only affect the tail of the newest segment. Replay stops at the first
//!   record whose length runs past the end of the file or whose CRC does not match, truncates the
//!   segment there, and logs how many bytes were dropped. Such a record was never acknowledged.
//! - A [`WalPos`] names a record by (segment, offset). Positions only grow, across restarts too.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use thiserror::Error;

const MAGIC: &[u8; 8] = b"WEFTWAL1";
/// Record body format version written by this build.
pub const RECORD_VERSION: u8 = 1;
/// Record kind: an OTLP `ExportTraceServiceRequest`.
pub const KIND_OTLP: u8 = 1;
const HEADER_LEN: usize = 8;
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
    #[error("wal segment {path} has a bad header")]
    BadHeader { path: PathBuf },
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WalPos {
    pub segment: u64,
    pub offset: u64,
}

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
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            min_segment: 1,
        }
    }
}

struct Append {
    tenant: Arc<str>,
    kind: u8,
    payload: Bytes,
    done: tokio::sync::oneshot::Sender<Result<WalPos, String>>,
}

/// Appends gathered for one write and one sync: record headers end to end, and the payloads
/// they precede, written together with `writev`.
#[derive(Default)]
struct Group {
    headers: Vec<u8>,
    header_ends: Vec<usize>,
    appends: Vec<(Append, WalPos)>,
    /// File bytes of the group: headers plus payloads.
    bytes: u64,
}

impl Group {
    fn push(&mut self, a: Append, pos: WalPos) {
        let before = self.headers.len();
        encode_record_header(&mut self.headers, a.kind, &a.tenant, &a.payload);
        self.header_ends.push(self.headers.len());
        self.bytes += (self.headers.len() - before + a.payload.len()) as u64;
        self.appends.push((a, pos));
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
}

/// A handle to the log. Cloning is cheap; all clones feed the same writer thread.
#[derive(Clone)]
pub struct Wal {
    tx: mpsc::Sender<Cmd>,
    pub stats: Arc<WalStats>,
}

/// One segment found on disk.
#[derive(Debug, Clone)]
struct SegmentFile {
    seq: u64,
    path: PathBuf,
}

fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>, WalError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".wal")
            && let Ok(seq) = stem.parse::<u64>()
        {
            out.push(SegmentFile { seq, path: e.path() });
        }
    }
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.wal"))
}

fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(io(dir))
}

/// Encodes one record (length, CRC, body) onto `out`.
pub fn encode_record(out: &mut Vec<u8>, kind: u8, tenant: &str, payload: &[u8]) {
    encode_record_header(out, kind, tenant, payload);
    out.extend_from_slice(payload);
}

/// Encodes everything of a record except its payload, which must follow it in the file. The
/// writer sends the payload from its own buffer (`writev`), so it is never copied in user space.
pub fn encode_record_header(out: &mut Vec<u8>, kind: u8, tenant: &str, payload: &[u8]) {
    let body_len = 4 + tenant.len() + payload.len();
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let body_at = out.len();
    out.push(RECORD_VERSION);
    out.push(kind);
    out.extend_from_slice(&(tenant.len() as u16).to_le_bytes());
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
    Torn(&'static str),
}

fn decode_record(buf: &Bytes, at: usize) -> Decoded {
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
    if crc32c::crc32c(body) != crc {
        return Decoded::Torn("record checksum mismatch");
    }
    if body[0] != RECORD_VERSION {
        return Decoded::Torn("unknown record version");
    }
    let kind = body[1];
    let tlen = u16::from_le_bytes([body[2], body[3]]) as usize;
    if 4 + tlen > len {
        return Decoded::Torn("tenant runs past the record");
    }
    let Ok(tenant) = std::str::from_utf8(&body[4..4 + tlen]) else {
        return Decoded::Torn("tenant is not utf-8");
    };
    let start = at + 8 + 4 + tlen;
    Decoded::Record {
        kind,
        tenant: Arc::from(tenant),
        payload: buf.slice(start..at + 8 + len),
        next: at + 8 + len,
    }
}

/// What replay found.
#[derive(Debug, Default)]
pub struct ReplayReport {
    pub segments: usize,
    pub records: u64,
    pub bytes: u64,
    /// Bytes dropped from torn tails.
    pub torn_bytes: u64,
}

impl Wal {
    /// Replays every record in `dir` (creating it if needed) through `visit`, truncates a torn
    /// tail, then starts the writer thread on a fresh segment. `sink` receives records appended
    /// from now on.
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
        let started = Instant::now();
        for (i, seg) in segments.iter().enumerate() {
            let mut data = Vec::new();
            File::open(&seg.path)
                .and_then(|mut f| f.read_to_end(&mut data))
                .map_err(io(&seg.path))?;
            if data.len() < HEADER_LEN || &data[..HEADER_LEN] != MAGIC {
                if data.len() < HEADER_LEN && i + 1 == segments.len() {
                    // A segment whose header never reached the disk: nothing in it was acknowledged.
                    tracing::warn!(path = %seg.path.display(), "dropping wal segment with a torn header");
                    fs::remove_file(&seg.path).map_err(io(&seg.path))?;
                    continue;
                }
                return Err(WalError::BadHeader { path: seg.path.clone() });
            }
            let buf = Bytes::from(data);
            let mut at = HEADER_LEN;
            loop {
                match decode_record(&buf, at) {
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
                    Decoded::End => break,
                    Decoded::Torn(why) => {
                        let dropped = (buf.len() - at) as u64;
                        report.torn_bytes += dropped;
                        tracing::warn!(path = %seg.path.display(), offset = at, dropped_bytes = dropped, reason = why, "truncating torn wal tail");
                        let f = OpenOptions::new().write(true).open(&seg.path).map_err(io(&seg.path))?;
                        f.set_len(at as u64).and_then(|_| f.sync_all()).map_err(io(&seg.path))?;
                        break;
                    }
                }
            }
            total_size += at as u64;
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
                elapsed_ms = started.elapsed().as_millis() as u64,
                "wal replay done"
            );
        }
        let next_seq = segments.last().map(|s| s.seq + 1).unwrap_or(0).max(opts.min_segment);
        let stats = Arc::new(WalStats::default());
        stats.size_bytes.store(total_size, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let mut writer = Writer::new(dir.to_path_buf(), opts, next_seq, stats.clone(), sink)?;
        writer.sealed = segments.iter().filter(|s| s.path.exists()).map(|s| s.seq).collect();
        std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(io(dir))?;
        Ok((Wal { tx, stats }, report))
    }

    /// Appends a record and resolves once it is durable under the fsync policy.
    ///
    /// Cancel safety: if the future is dropped, the record may still be written and passed to
    /// the sink; it is simply not acknowledged.
    pub async fn append(&self, tenant: Arc<str>, kind: u8, payload: Bytes) -> Result<WalPos, WalError> {
        if payload.len() + tenant.len() + 12 > MAX_RECORD {
            return Err(WalError::TooLarge(payload.len()));
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Cmd::Append(Append {
                tenant,
                kind,
                payload,
                done,
            }))
            .map_err(|_| WalError::Closed)?;
        match rx.await {
            Ok(Ok(pos)) => Ok(pos),
            Ok(Err(msg)) => Err(WalError::Io {
                path: PathBuf::from("wal"),
                source: std::io::Error::other(msg),
            }),
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
    seq: u64,
    file: File,
    path: PathBuf,
    offset: u64,
    sealed: Vec<u64>,
    stats: Arc<WalStats>,
    sink: Box<dyn CommitSink>,
    last_sync: Instant,
    dirty: bool,
}

impl Writer {
    fn new(
        dir: PathBuf,
        opts: WalOptions,
        seq: u64,
        stats: Arc<WalStats>,
        sink: Box<dyn CommitSink>,
    ) -> Result<Self, WalError> {
        let (file, path) = Self::create_segment(&dir, seq)?;
        stats.size_bytes.fetch_add(HEADER_LEN as u64, Ordering::Relaxed);
        Ok(Writer {
            dir,
            opts,
            seq,
            file,
            path,
            offset: HEADER_LEN as u64,
            sealed: Vec::new(),
            stats,
            sink,
            last_sync: Instant::now(),
            dirty: false,
        })
    }

    fn create_segment(dir: &Path, seq: u64) -> Result<(File, PathBuf), WalError> {
        let path = segment_path(dir, seq);
        let mut file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        file.write_all(MAGIC).and_then(|_| file.sync_all()).map_err(io(&path))?;
        sync_dir(dir)?;
        Ok((file, path))
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
            // Drain everything already queued into one group: one write, one sync.
            while let Some(c) = cmd.take() {
                match c {
                    Cmd::Append(a) => {
                        if self.offset + group.bytes >= self.opts.segment_bytes && self.offset > HEADER_LEN as u64 {
                            // Finish the current group in this segment before rolling.
                            self.flush_group(&mut group);
                            self.roll();
                        }
                        let pos = WalPos {
                            segment: self.seq,
                            offset: self.offset + group.bytes,
                        };
                        group.push(a, pos);
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
            }
            self.flush_group(&mut group);
            if let Some(done) = shutdown {
                self.sync_now();
                let _ = done.send(());
                return;
            }
        }
        self.sync_now();
    }

    fn flush_group(&mut self, g: &mut Group) {
        if g.appends.is_empty() {
            return;
        }
        let bytes = g.bytes;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * g.appends.len());
        let mut from = 0;
        for ((a, _), &end) in g.appends.iter().zip(&g.header_ends) {
            parts.push(&g.headers[from..end]);
            parts.push(&a.payload);
            from = end;
        }
        let result = write_all_vectored(&mut self.file, &parts).map_err(|e| e.to_string());
        drop(parts);
        let group = &mut g.appends;
        let result = result.and_then(|_| {
            self.offset += bytes;
            self.dirty = true;
            self.stats.bytes_written.fetch_add(bytes, Ordering::Relaxed);
            self.stats.size_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.stats
                .records_written
                .fetch_add(group.len() as u64, Ordering::Relaxed);
            match self.opts.fsync {
                FsyncPolicy::Always => self.sync(),
                FsyncPolicy::Interval(d) if self.last_sync.elapsed() >= d => self.sync(),
                _ => Ok(()),
            }
        });
        g.headers.clear();
        g.header_ends.clear();
        g.bytes = 0;
        match result {
            Ok(()) => {
                let mut records = Vec::with_capacity(group.len());
                let mut acks = Vec::with_capacity(group.len());
                for (a, pos) in group.drain(..) {
                    records.push(Record {
                        pos,
                        kind: a.kind,
                        tenant: a.tenant,
                        payload: a.payload,
                    });
                    acks.push((a.done, pos));
                }
                // The sink sees records before their writers are answered, so a reader that
                // waits for the sink observes every acknowledged record.
                self.sink.committed(records);
                self.stats.committed_groups.fetch_add(1, Ordering::Release);
                for (done, pos) in acks {
                    let _ = done.send(Ok(pos));
                }
            }
            Err(msg) => {
                tracing::error!(path = %self.path.display(), error = %msg, "wal write failed; refusing the group");
                // The file may now hold a partial group; start a new segment so replay stops
                // at this torn tail and later records stay readable.
                for (a, _) in group.drain(..) {
                    let _ = a.done.send(Err(msg.clone()));
                }
                self.roll();
            }
        }
    }

    fn sync(&mut self) -> Result<(), String> {
        let t = Instant::now();
        self.file.sync_data().map_err(|e| e.to_string())?;
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

    fn roll(&mut self) {
        self.sync_now();
        let next = self.seq + 1;
        match Self::create_segment(&self.dir, next) {
            Ok((file, path)) => {
                self.sealed.push(self.seq);
                self.seq = next;
                self.file = file;
                self.path = path;
                self.offset = HEADER_LEN as u64;
                self.stats.size_bytes.fetch_add(HEADER_LEN as u64, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start a new wal segment; continuing in the current one")
            }
        }
    }

    fn truncate_before(&mut self, pos: WalPos) {
        // A sealed segment below pos.segment holds only records before pos.
        let (drop, keep): (Vec<u64>, Vec<u64>) = self.sealed.iter().partition(|&&s| s < pos.segment);
        self.sealed = keep;
        for seq in drop {
            let path = segment_path(&self.dir, seq);
            let size = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            match fs::remove_file(&path) {
                Ok(()) => {
                    self.stats.size_bytes.fetch_sub(
                        size.min(self.stats.size_bytes.load(Ordering::Relaxed)),
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

#[cfg(test)]
mod tests;
