//! The W3C `traceparent` fast path: parse from bytes into a stack [`SpanContext`], format into a
//! caller's `[u8; 55]`. No allocation, no `Context`, no tracestate (bench `traceparent/*`).

use crate::context::SpanContext;
use crate::id::{SpanId, TraceId};

/// Length of a version-00 `traceparent` value.
pub const LEN: usize = 55;

/// Lowercase hex digit values; `0xff` marks a non-digit.
static HEX: [u8; 256] = crate::id::hex_table(false);

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Flags (0x80) each byte `b` with `m < b < n`, for bytes below 0x80 (the "hasbetween" bit trick).
#[inline(always)]
fn bytes_between(x: u64, m: u64, n: u64) -> u64 {
    let low7 = x & (ONES * 127);
    (ONES * (127 + n)).wrapping_sub(low7) & !x & low7.wrapping_add(ONES * (127 - m)) & HIGHS
}

/// Parses 8 lowercase hex digits (most significant first) into a `u32`, or `None`.
///
/// SWAR: one 64-bit load, range checks on all eight bytes at once, then three shift-and-mask
/// steps to pack the nibbles. Parsing the 48 digits of a `traceparent` this way is about 3×
/// faster than a table lookup per digit, whose shift chain is serial (bench
/// `traceparent_extract`).
#[inline(always)]
fn hex8(b: &[u8]) -> Option<u32> {
    let x = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let digits = bytes_between(x, 0x2f, 0x3a);
    let letters = bytes_between(x, 0x60, 0x67);
    if (digits | letters) != HIGHS || x & HIGHS != 0 {
        return None;
    }
    // Nibble per byte: low four bits, plus 9 for 'a'..'f'.
    let n = (x & (ONES * 0x0f)) + (letters >> 7) * 9;
    // Byte 0 holds the most significant digit: pack big-endian.
    let n = n.swap_bytes();
    let n = (n | (n >> 4)) & 0x00ff_00ff_00ff_00ff;
    let n = (n | (n >> 8)) & 0x0000_ffff_0000_ffff;
    let n = (n | (n >> 16)) & 0x0000_0000_ffff_ffff;
    Some(n as u32)
}

/// Parses exactly 16 lowercase hex digits.
#[inline(always)]
fn hex16(b: &[u8]) -> Option<u64> {
    let hi = hex8(&b[..8]);
    let lo = hex8(&b[8..16]);
    Some(((hi? as u64) << 32) | lo? as u64)
}

#[inline(always)]
fn hex2(b: &[u8]) -> Option<u8> {
    let (h, l) = (HEX[b[0] as usize], HEX[b[1] as usize]);
    if (h | l) & 0xf0 != 0 { None } else { Some(h << 4 | l) }
}

#[inline(always)]
fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Parses a `traceparent` value (leading and trailing SP/HTAB are ignored).
///
/// Returns `None` for anything spec/propagation.md calls invalid. The result is remote; its
/// flags are the received byte `& 0x03` for version 00 and `& 0x01` for a future version.
#[inline]
pub fn parse(value: &[u8]) -> Option<SpanContext> {
    let v = trim(value);
    if v.len() < LEN || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex2(&v[0..2])?;
    let flag_mask = match version {
        0xff => return None,
        0x00 if v.len() != LEN => return None,
        0x00 => 0x03,
        _ if v.len() > LEN && v[LEN] != b'-' => return None,
        _ => 0x01,
    };
    let hi = hex16(&v[3..19])?;
    let lo = hex16(&v[19..35])?;
    let span = hex16(&v[36..52])?;
    let flags = hex2(&v[53..55])?;
    if hi | lo == 0 || span == 0 {
        return None;
    }
    Some(SpanContext {
        trace_id: TraceId::from(((hi as u128) << 64) | lo as u128),
        span_id: SpanId::from(span),
        trace_flags: flags & flag_mask,
        is_remote: true,
    })
}

/// [`parse`] for a `&str`.
#[inline]
pub fn parse_str(value: &str) -> Option<SpanContext> {
    parse(value.as_bytes())
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

#[inline(always)]
fn put_hex_u64(out: &mut [u8], v: u64) {
    for (i, o) in out[..16].iter_mut().enumerate() {
        *o = DIGITS[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
}

/// Formats `00-{trace_id}-{span_id}-{flags & 0x03}` into `out` and returns it as `&str`.
#[inline]
pub fn format<'a>(sc: &SpanContext, out: &'a mut [u8; LEN]) -> &'a str {
    let t = sc.trace_id.to_bytes();
    let hi = u64::from_be_bytes([t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]]);
    let lo = u64::from_be_bytes([t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15]]);
    out[0] = b'0';
    out[1] = b'0';
    out[2] = b'-';
    put_hex_u64(&mut out[3..19], hi);
    put_hex_u64(&mut out[19..35], lo);
    out[35] = b'-';
    put_hex_u64(&mut out[36..52], u64::from_be_bytes(sc.span_id.to_bytes()));
    out[52] = b'-';
    let f = sc.trace_flags & 0x03;
    out[53] = b'0';
    out[54] = DIGITS[f as usize];
    // Every byte written above is ASCII.
    std::str::from_utf8(out).unwrap_or_default()
}

/// The fuzz body: parses arbitrary bytes and, when valid, checks the format round trip.
/// Never panics for any input.
pub fn fuzz(data: &[u8]) {
    if let Some(sc) = parse(data) {
        let mut buf = [0u8; LEN];
        let s = format(&sc, &mut buf);
        let again = parse_str(s).expect("formatted traceparent must parse");
        assert_eq!(again.trace_id, sc.trace_id);
        assert_eq!(again.span_id, sc.span_id);
        assert_eq!(again.trace_flags, sc.trace_flags & 0x03);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn round_trip() {
        let sc = parse_str(TP).unwrap();
        assert!(sc.is_remote && sc.is_sampled());
        let mut buf = [0u8; LEN];
        assert_eq!(format(&sc, &mut buf), TP);
    }

    #[test]
    fn future_versions_and_masks() {
        assert_eq!(parse_str(&TP.replace("-01", "-ff")).unwrap().trace_flags, 0x03);
        let fut = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-xyz";
        assert_eq!(parse_str(fut).unwrap().trace_flags, 0x01);
        assert!(parse_str("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03x").is_none());
        assert!(parse_str(&format!("{TP}-x")).is_none());
        assert!(parse_str(&TP.replacen("00", "ff", 1)).is_none());
    }

    #[test]
    fn swar_hex_matches_a_plain_parser() {
        for s in ["00000000", "ffffffff", "0123abcd", "89abcdef", "deadbeef"] {
            assert_eq!(hex8(s.as_bytes()), Some(u32::from_str_radix(s, 16).unwrap()), "{s}");
        }
        for s in [
            "0000000g",
            "A0000000",
            "/0000000",
            ":0000000",
            "`0000000",
            "000000 0",
            "0000000\u{80}",
        ] {
            let mut b = [b'0'; 8];
            b[..s.len().min(8)].copy_from_slice(&s.as_bytes()[..s.len().min(8)]);
            assert_eq!(hex8(&b), None, "{s:?}");
        }
        for b in 0..=255u8 {
            let mut w = [b'0'; 8];
            w[3] = b;
            let ok = b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
            assert_eq!(hex8(&w).is_some(), ok, "byte {b:#x}");
        }
    }

    #[test]
    fn fuzz_body_accepts_garbage() {
        for s in [
            "",
            "-",
            "\t\t",
            TP,
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            fuzz(s.as_bytes());
        }
    }
}
