//! Segment files: their names, headers and stamps, and the writer's segment lifecycle
//! (creating, starting, rolling, reusing and deleting segments).

use crate::direct_io::{open_direct, refuses_direct};
use crate::writer::Writer;
use crate::{FsyncPolicy, WalError, WalPos, io};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// The magic of the segments this build writes (format 2).
pub(crate) const MAGIC: &[u8; 8] = b"WEFTWAL2";
/// The magic of format-1 segments, which this build still replays.
pub(crate) const MAGIC_V1: &[u8; 8] = b"WEFTWAL1";
/// Every format version's magic starts with this.
pub(crate) const MAGIC_PREFIX: &[u8; 7] = b"WEFTWAL";
/// How many segments whose records are all in blocks are kept for reuse instead of deleted.
pub(crate) const FREE_SEGMENTS: usize = 2;
/// Name suffix of a segment kept for reuse (`<old seq:020>.free`); replay never reads these.
const FREE_SUFFIX: &str = ".free";
/// A format-2 header: magic, the segment's stamp, and CRC32C of both.
pub(crate) const HEADER_LEN: usize = 20;
/// A format-1 header: the magic alone.
pub(crate) const HEADER_LEN_V1: usize = 8;

/// One segment found on disk.
#[derive(Debug, Clone)]
pub(crate) struct SegmentFile {
    pub(crate) seq: u64,
    pub(crate) path: PathBuf,
}

pub(crate) fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>, WalError> {
    Ok(list_numbered(dir, ".wal")?
        .into_iter()
        .map(|(seq, path)| SegmentFile { seq, path })
        .collect())
}

/// The free segment files in `dir` (see [`Writer::free`]), by old number.
pub(crate) fn list_free(dir: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
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

pub(crate) fn free_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{FREE_SUFFIX}"))
}

/// The header of a format-2 segment whose records carry `stamp`.
pub(crate) fn header(stamp: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&stamp.to_le_bytes());
    let crc = crc32c::crc32c(&h[..16]);
    h[16..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The stamp of a format-2 header whose stamp and checksum check out, whatever its magic's
/// last byte says (a damaged version digit must not make it a format-1 segment).
pub(crate) fn header_stamp(buf: &[u8]) -> Option<u64> {
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

pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.wal"))
}

fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(io(dir))
}

impl Writer {
    /// Makes `file`, a new segment at `self.path` holding only its header (synced, with
    /// `stamp`), or a `reused` one (that header, then a previous incarnation's records), the
    /// active segment: through a direct-I/O handle when the policy and the filesystem allow.
    pub(crate) fn start_segment(&mut self, file: File, stamp: u64, reused: bool) {
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

    /// Creates segment `seq` with its header (a new stamp), synced; returns it and its stamp.
    /// On failure nothing is left behind, so a later attempt can create it.
    pub(crate) fn create_segment(dir: &Path, seq: u64) -> Result<(File, u64), WalError> {
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

    /// Tries to start the next segment while none is writable.
    pub(crate) fn reopen(&mut self) {
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
    pub(crate) fn roll(&mut self) {
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

    pub(crate) fn truncate_before(&mut self, pos: WalPos) {
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
