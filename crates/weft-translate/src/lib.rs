//! Foreign trace formats in and out.
//!
//! Every receiver of a foreign format converts what it receives **exactly once**, here, into
//! the bytes of an OTLP `ExportTraceServiceRequest`, which then follows the OTLP path (limits,
//! tenancy, WAL, ack after fsync); nothing downstream knows where a span came from except its
//! attributes. The query APIs of those formats convert stored OTLP spans back.
//!
//! - [`zipkin`]: Zipkin v2 JSON and proto3, v1 JSON and thrift in; Zipkin v2 JSON out.
//! - [`jaeger`]: Jaeger thrift batches in (collector HTTP, agent UDP); Jaeger's query model out.
//! - [`xray`]: AWS X-Ray segment documents in (the daemon's UDP protocol).
//! - [`thrift`]: the Thrift binary and compact protocols, read without copying.
//! - [`otlp`]: the OTLP encoder the translators write with.
//!
//! The mapping of every field is in `spec/formats/zipkin.md`, with vectors in `spec/formats/vectors/zipkin.json`.

pub mod jaeger;
pub mod otlp;
mod scan;
pub mod thrift;
#[cfg(test)]
mod vectors;
pub mod xray;
pub mod zipkin;

/// Panics unless `otlp`, a conversion's output, is a request that
/// [`weft_otlp::request::validate_request`] accepts and that
/// [`weft_otlp::request::summarize_converted`] summarizes alike: the receivers push their
/// conversions without validating them again. For the tests and fuzz targets of every
/// conversion.
#[doc(hidden)]
pub fn assert_valid_conversion(otlp: &[u8]) {
    use weft_otlp::request::{RequestSummary, summarize_converted, validate_request};
    let (mut full, mut quick) = (RequestSummary::default(), RequestSummary::default());
    if let Err(e) = validate_request(otlp, &mut full) {
        panic!("a conversion wrote OTLP that validation refuses: {e}");
    }
    summarize_converted(otlp, &mut quick).expect("a converted request summarizes");
    assert_eq!((full.spans, &full.runs), (quick.spans, &quick.runs), "summaries differ");
}

/// Calls `f` with every span of `data`, with its resource's attributes and its scope's name and
/// version: the walk every query-side conversion makes.
pub fn for_each_span<'d>(
    data: &'d weft_otlp::pb::trace::TracesData,
    mut f: impl FnMut(&'d [weft_otlp::pb::common::KeyValue], (&'d str, &'d str), &'d weft_otlp::pb::trace::Span),
) {
    for rs in &data.resource_spans {
        let res = rs.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or(&[]);
        for ss in &rs.scope_spans {
            let sc = ss
                .scope
                .as_ref()
                .map(|s| (s.name.as_str(), s.version.as_str()))
                .unwrap_or(("", ""));
            for s in &ss.spans {
                f(res, sc, s);
            }
        }
    }
}

/// Why a foreign payload was refused. The message names the problem and where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TranslateError(pub String);

impl TranslateError {
    pub fn new(msg: impl Into<String>) -> Self {
        TranslateError(msg.into())
    }
}

/// Each byte's value as a hex digit, or 0xff: one load per digit on the receivers' hot path
/// (every span carries 48 to 64 hex digits of IDs).
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Parses 1 to `N * 2` hex digits (either case) into `N` bytes, left-padded with zeros, as
/// Zipkin and Jaeger accept IDs.
pub fn parse_hex_id<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    let pad = N * 2 - b.len();
    let mut bad = 0u8;
    for (i, &c) in b.iter().enumerate() {
        let v = HEX[c as usize];
        bad |= v;
        let at = pad + i;
        out[at / 2] |= if at.is_multiple_of(2) { v << 4 } else { v & 0x0f };
    }
    // A non-digit maps to 0xff, whose high bit no digit has.
    (bad & 0x80 == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_pad_left_and_refuse_junk() {
        assert_eq!(parse_hex_id::<8>("1"), Some([0, 0, 0, 0, 0, 0, 0, 1]));
        assert_eq!(
            parse_hex_id::<8>("a1B2c3d4e5f60718"),
            Some([0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18])
        );
        assert_eq!(parse_hex_id::<16>("abc").unwrap()[14..], [0x0a, 0xbc]);
        assert_eq!(parse_hex_id::<8>(""), None);
        assert_eq!(parse_hex_id::<8>("00000000000000001"), None);
        assert_eq!(parse_hex_id::<8>("x"), None);
    }
}
