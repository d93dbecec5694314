//! Direct I/O: segments written with `O_DIRECT | O_DSYNC` in whole aligned blocks (see the
//! crate's "Direct I/O"), and the writer's way back to buffered writes.

use crate::writer::{Refusal, Writer};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::Ordering;

/// Direct writes are aligned to this: the largest common logical block size, so they suit
/// 512-byte devices too.
pub(crate) const BLOCK: usize = 4096;
/// A direct write carries at most this; a larger group takes several writes, each durable.
pub(crate) const DIRECT_CHUNK: usize = 4 << 20;

/// `DIRECT_CHUNK` bytes at a `BLOCK`-aligned address, as `O_DIRECT` requires of a buffer.
pub(crate) struct Staging {
    raw: Vec<u8>,
    at: usize,
}

impl Staging {
    pub(crate) fn new() -> Self {
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
pub(crate) fn open_direct(path: &Path) -> std::io::Result<File> {
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
pub(crate) fn write_direct(
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
pub(crate) fn refuses_direct(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EOPNOTSUPP))
}

impl Writer {
    /// After the filesystem refused a direct write: the segment is cut back to the end of the
    /// log and written buffered from now on. If it cannot be reopened so, it is fenced (never
    /// written again; bytes of the failed write may follow its last record, which replay cuts)
    /// and the next segment is started, buffered; the group is refused.
    pub(crate) fn leave_direct(&mut self, e: &std::io::Error) -> Result<(), Refusal> {
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
    pub(crate) fn trim_padding(&mut self) {
        if self.direct
            && let Some(file) = self.file.as_ref()
            && let Err(e) = file.set_len(self.offset)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot trim a wal segment's padding");
        }
    }
}
