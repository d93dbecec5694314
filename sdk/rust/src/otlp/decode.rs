//! Decoding the few OTLP/gRPC messages the exporter reads: `ExportTraceServiceResponse` and
//! the `google.rpc.RetryInfo` inside `grpc-status-details-bin`.

use std::fmt;
use std::time::Duration;

/// A malformed protobuf message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed protobuf: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Other,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or(DecodeError("truncated varint"))?;
            self.pos += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(DecodeError("truncated field"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// Returns the next field number and value, or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let field = match tag & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Other
            }
            2 => {
                let n = self.varint()? as usize;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Field::Other
            }
            _ => return Err(DecodeError("unsupported wire type")),
        };
        Ok(Some((tag >> 3, field)))
    }
}

/// The `partial_success` of an export response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartialSuccess {
    /// Spans the server rejected.
    pub rejected_spans: i64,
    /// The server's message.
    pub error_message: String,
}

impl PartialSuccess {
    /// Returns whether this reports anything (rejections or a message).
    pub fn is_partial(&self) -> bool {
        self.rejected_spans > 0 || !self.error_message.is_empty()
    }
}

/// Decodes an `ExportTraceServiceResponse`; an empty body is a full success.
pub fn decode_export_response(bytes: &[u8]) -> Result<PartialSuccess, DecodeError> {
    let mut out = PartialSuccess::default();
    let mut r = Reader::new(bytes);
    while let Some((field, value)) = r.next()? {
        if let (1, Field::Bytes(ps)) = (field, value) {
            let mut p = Reader::new(ps);
            while let Some((f, v)) = p.next()? {
                match (f, v) {
                    (1, Field::Varint(n)) => out.rejected_spans = n as i64,
                    (2, Field::Bytes(s)) => out.error_message = String::from_utf8_lossy(s).into_owned(),
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}

const RETRY_INFO_TYPE: &[u8] = b"type.googleapis.com/google.rpc.RetryInfo";

/// Reads `RetryInfo.retry_delay` from a serialized `google.rpc.Status` (the decoded
/// `grpc-status-details-bin` trailer). `None` if there is no `RetryInfo`.
pub fn decode_grpc_retry_delay(status: &[u8]) -> Option<Duration> {
    let mut r = Reader::new(status);
    while let Ok(Some((field, value))) = r.next() {
        let (3, Field::Bytes(any)) = (field, value) else {
            continue;
        };
        let (mut type_url, mut payload) = (&[][..], &[][..]);
        let mut a = Reader::new(any);
        while let Ok(Some((f, v))) = a.next() {
            match (f, v) {
                (1, Field::Bytes(t)) => type_url = t,
                (2, Field::Bytes(p)) => payload = p,
                _ => {}
            }
        }
        if type_url != RETRY_INFO_TYPE {
            continue;
        }
        let mut delay = Duration::ZERO;
        let mut ri = Reader::new(payload);
        while let Ok(Some((f, v))) = ri.next() {
            if let (1, Field::Bytes(d)) = (f, v) {
                let (mut secs, mut nanos) = (0i64, 0i64);
                let mut dr = Reader::new(d);
                while let Ok(Some((f, v))) = dr.next() {
                    match (f, v) {
                        (1, Field::Varint(s)) => secs = s as i64,
                        (2, Field::Varint(n)) => nanos = n as i32 as i64,
                        _ => {}
                    }
                }
                delay = Duration::from_secs(secs.max(0) as u64) + Duration::from_nanos(nanos.max(0) as u64);
            }
        }
        return Some(delay);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_success() {
        let b = [0x0a, 0x05, 0x08, 0x03, 0x12, 0x01, b'x'];
        let p = decode_export_response(&b).unwrap();
        assert_eq!(
            p,
            PartialSuccess {
                rejected_spans: 3,
                error_message: "x".into()
            }
        );
        assert!(decode_export_response(&[0x0a, 0x09]).is_err());
        assert_eq!(decode_export_response(&[]).unwrap(), PartialSuccess::default());
    }

    #[test]
    fn retry_info() {
        // Status{code:8, details:[Any{type_url, RetryInfo{retry_delay{seconds:2, nanos:5e8}}}]}
        let mut ri = vec![0x0a, 0x06, 0x08, 0x02, 0x10];
        ri.extend_from_slice(&[0x80, 0xca, 0xb5, 0xee, 0x01]);
        ri[1] = (ri.len() - 2) as u8;
        let mut any = vec![0x0a, RETRY_INFO_TYPE.len() as u8];
        any.extend_from_slice(RETRY_INFO_TYPE);
        any.push(0x12);
        any.push(ri.len() as u8);
        any.extend_from_slice(&ri);
        let mut status = vec![0x08, 0x08, 0x1a, any.len() as u8];
        status.extend_from_slice(&any);
        assert_eq!(decode_grpc_retry_delay(&status), Some(Duration::from_millis(2500)));
        assert_eq!(decode_grpc_retry_delay(&[0x08, 0x08]), None);
    }
}
