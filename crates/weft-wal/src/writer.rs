//! The writer thread: appends gathered into groups, each written and synced once (group
//! commit), then handed to the sink and acknowledged.

use crate::direct_io::{Staging, refuses_direct, write_direct};
use crate::record::{encode_record_header, record_len};
use crate::segment::{HEADER_LEN, segment_path};
use crate::{CommitSink, FsyncPolicy, Record, WalOptions, WalPos, WalStats};
use bytes::Bytes;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What callers and the writer share about appends on their way to it.
pub(crate) struct Arrivals {
    /// Appends announced ([`Wal::announce`](crate::Wal::announce)) and not yet queued.
    pub(crate) coming: AtomicUsize,
    /// Payload bytes of appends queued and not yet taken by the writer.
    pub(crate) queued: AtomicU64,
}

/// A group this large is written without waiting for more appends.
pub(crate) const GROUP_WAIT_BYTES: u64 = 1 << 20;

pub(crate) struct Append {
    pub(crate) tenant: Arc<str>,
    pub(crate) kind: u8,
    pub(crate) payload: Bytes,
    pub(crate) done: tokio::sync::oneshot::Sender<Result<WalPos, Refusal>>,
}

/// Why the writer refused a group.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
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

pub(crate) enum Cmd {
    Append(Append),
    /// Delete sealed segments whose every record is before the position.
    TruncateBefore(WalPos),
    Shutdown(tokio::sync::oneshot::Sender<()>),
}

pub(crate) struct Writer {
    pub(crate) dir: PathBuf,
    pub(crate) opts: WalOptions,
    /// The segment being written, or the last one that was when `file` is `None`.
    pub(crate) seq: u64,
    /// `None` while no segment is writable: appends are refused until one can be created.
    pub(crate) file: Option<File>,
    pub(crate) path: PathBuf,
    /// End of the last durable group in the current segment. Everything before it is intact
    /// records; nothing after it is ever left behind by a failed write.
    pub(crate) offset: u64,
    /// The active segment's stamp, which its records carry.
    pub(crate) stamp: u64,
    /// Sealed segments and the bytes of their logs.
    pub(crate) sealed: Vec<(u64, u64)>,
    /// Files of segments whose records are all in blocks, kept for reuse: each old number and
    /// path (`<old seq>.free`), at most [`FREE_SEGMENTS`](crate::segment::FREE_SEGMENTS).
    pub(crate) free: Vec<(u64, PathBuf)>,
    pub(crate) stats: Arc<WalStats>,
    pub(crate) sink: Box<dyn CommitSink>,
    pub(crate) last_sync: Instant,
    pub(crate) dirty: bool,
    /// Error logs while the disk refuses writes are limited to one per interval.
    pub(crate) last_error_log: Option<Instant>,
    pub(crate) suppressed_errors: u64,
    /// Appends announced by callers and not yet queued ([`Wal::announce`](crate::Wal::announce)), and the bytes
    /// queued and not yet taken.
    pub(crate) arrivals: Arc<Arrivals>,
    /// When the last append arrived, and the average time between appends (weighted 1/4 to
    /// the newest): appends closer together than the group wait make a group wait for more.
    pub(crate) last_append: Instant,
    pub(crate) append_gap: Duration,
    /// Whether the active segment's handle was opened with `O_DIRECT | O_DSYNC`.
    pub(crate) direct: bool,
    /// Set once the filesystem refused direct I/O: later segments are not tried again.
    pub(crate) direct_refused: bool,
    /// Under direct I/O, the bytes of the active segment's last, partly filled block (from the
    /// block's start to `offset`): each direct write starts with them.
    pub(crate) tail: Vec<u8>,
    /// The aligned staging buffer of direct writes, allocated on the first one.
    pub(crate) staging: Option<Staging>,
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
    pub(crate) fn new(
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

    pub(crate) fn run(mut self, rx: mpsc::Receiver<Cmd>) {
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
    ///   [`GROUP_WAIT_BYTES`] ([`Wal::append`](crate::Wal::append)), so a large group is not held back.
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
    pub(crate) fn log_error(&mut self, msg: &str, what: &str) {
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

    pub(crate) fn sync_now(&mut self) {
        if self.dirty
            && let Err(e) = self.sync()
        {
            tracing::error!(path = %self.path.display(), error = %e, "wal sync failed");
        }
    }
}
