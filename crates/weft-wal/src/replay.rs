//! Replay: reading one segment's records back, skipping damaged bytes and cutting a torn tail.

use crate::direct_io::BLOCK;
use crate::record::{Decoded, decode_record, first_record_stamp, resync, starts_own_record};
use crate::segment::{HEADER_LEN, HEADER_LEN_V1, MAGIC, MAGIC_PREFIX, MAGIC_V1, SegmentFile, header_stamp};
use crate::{Record, ReplayReport, WalError, WalPos, io};
use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::Read;

/// Replays the records of one segment through `visit`; returns the segment's valid length.
pub(crate) fn replay_segment(
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
