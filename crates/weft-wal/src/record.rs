//! The record codec: encoding a record, and decoding one (or finding the next intact one) in a
//! segment being replayed.

use crate::segment::HEADER_LEN;
use bytes::Bytes;
use std::sync::Arc;

/// Record body format version written by this build.
pub const RECORD_VERSION: u8 = 2;
/// The record version of format-1 segments.
pub(crate) const RECORD_VERSION_1: u8 = 1;
/// Body bytes before the tenant: version, kind, tenant length and the segment's stamp.
pub(crate) const BODY_FIXED: usize = 12;
/// Record kind: an OTLP `ExportTraceServiceRequest`.
pub const KIND_OTLP: u8 = 1;
/// Records larger than this are refused on append and treated as corruption on replay.
pub const MAX_RECORD: usize = 256 << 20;

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

/// Bytes a record takes in a segment.
pub(crate) fn record_len(tenant: &str, payload: &[u8]) -> u64 {
    (8 + BODY_FIXED + tenant.len() + payload.len()) as u64
}

/// Outcome of decoding one record from a segment buffer.
pub(crate) enum Decoded {
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
pub(crate) fn decode_record(buf: &Bytes, at: usize, stamp: Option<u64>) -> Decoded {
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
pub(crate) fn resync(buf: &Bytes, at: usize, stamp: Option<u64>) -> Option<usize> {
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
pub(crate) fn starts_own_record(buf: &[u8], at: usize, stamp: u64) -> bool {
    buf.get(at + 8) == Some(&RECORD_VERSION) && buf.get(at + 12..at + 20) == Some(&stamp.to_le_bytes()[..])
}

/// The stamp of an intact format-2 record where a segment's first one starts, if there is one
/// (the stamp of a segment whose header is damaged).
pub(crate) fn first_record_stamp(buf: &Bytes) -> Option<u64> {
    let body = buf.get(HEADER_LEN + 8..HEADER_LEN + 8 + BODY_FIXED)?;
    let stamp = u64::from_le_bytes(body[4..12].try_into().expect("8 bytes"));
    matches!(decode_record(buf, HEADER_LEN, Some(stamp)), Decoded::Record { .. }).then_some(stamp)
}
