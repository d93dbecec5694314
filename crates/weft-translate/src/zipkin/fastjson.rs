//! Zipkin v2 JSON, read by a scanner written for it: the receiver's hot path. serde_json's
//! derive-based reader ([`super::json::decode_v2_serde`], kept as the reference the tests and
//! the fuzz target compare this one with) spent 1.4 µs per span of Brave-like JSON, most of the
//! conversion's cost; this reads the same payload in about a third of that by matching keys
//! as bytes, borrowing every string without escapes, and never building an intermediate value.
//!
//! It accepts exactly what the reference accepts for well-formed JSON: unknown fields (any
//! value) are skipped, `null` means absent, tag values may be strings, numbers or booleans,
//! microseconds may be floats (truncated). Nesting of skipped values is bounded.

use std::borrow::Cow;

use super::json::{span_id, trace_id};
use super::{Annotation, Endpoint, Kind, Span};
use crate::TranslateError;

const MAX_DEPTH: usize = 64;

/// A key of at most 15 bytes as one integer (its bytes, then its length in the top byte), so
/// that matching a key against a dozen field names is integer comparisons, not a `memcmp`
/// per candidate (that was 14% of the conversion's time). Longer keys map to 0, which no
/// field name packs to.
const fn pack(k: &[u8]) -> u128 {
    if k.len() > 15 {
        return 0;
    }
    let mut v = (k.len() as u128) << 120;
    let mut i = 0;
    while i < k.len() {
        v |= (k[i] as u128) << (8 * i);
        i += 1;
    }
    v
}

mod key {
    use super::pack;
    pub const TRACE_ID: u128 = pack(b"traceId");
    pub const ID: u128 = pack(b"id");
    pub const PARENT_ID: u128 = pack(b"parentId");
    pub const KIND: u128 = pack(b"kind");
    pub const NAME: u128 = pack(b"name");
    pub const TIMESTAMP: u128 = pack(b"timestamp");
    pub const DURATION: u128 = pack(b"duration");
    pub const LOCAL_ENDPOINT: u128 = pack(b"localEndpoint");
    pub const REMOTE_ENDPOINT: u128 = pack(b"remoteEndpoint");
    pub const ANNOTATIONS: u128 = pack(b"annotations");
    pub const TAGS: u128 = pack(b"tags");
    pub const DEBUG: u128 = pack(b"debug");
    pub const SHARED: u128 = pack(b"shared");
    pub const VALUE: u128 = pack(b"value");
    pub const SERVICE_NAME: u128 = pack(b"serviceName");
    pub const IPV4: u128 = pack(b"ipv4");
    pub const IPV6: u128 = pack(b"ipv6");
    pub const PORT: u128 = pack(b"port");
}

struct Scanner<'a> {
    /// The whole payload, validated as UTF-8 once: every string between quotes is then valid
    /// too (a quote is ASCII, so never inside a multi-byte character) and is sliced out of it.
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

/// The bytes of `w` that are `b`, as their high bits; exact up to and including the lowest one
/// (the classic has-zero-byte test on `w ^ b*0x01..`; borrows can only add bits above it).
#[inline]
fn byte_mask(w: u64, b: u8) -> u64 {
    let x = w ^ (u64::from(b) * 0x0101_0101_0101_0101);
    x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080
}

/// The bytes of `w` below 0x20 (control characters), exact up to the lowest one as above.
#[inline]
fn control_mask(w: u64) -> u64 {
    w.wrapping_sub(0x2020_2020_2020_2020) & !w & 0x8080_8080_8080_8080
}

fn malformed(what: impl std::fmt::Display, at: usize) -> TranslateError {
    TranslateError::new(format!("malformed Zipkin JSON: {what} at byte {at}"))
}

impl<'a> Scanner<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), TranslateError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(malformed(format!("expected '{}'", c as char), self.i))
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), TranslateError> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(malformed("invalid literal", self.i))
        }
    }

    /// `null` (consumed) or not.
    fn null(&mut self) -> Result<bool, TranslateError> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    /// A string; borrowed unless it has escapes.
    #[inline]
    fn string(&mut self) -> Result<Cow<'a, str>, TranslateError> {
        if !self.eat(b'"') {
            return Err(malformed("expected a string", self.i));
        }
        let start = self.i;
        // Eight bytes at a time: the lowest flagged byte of the three masks is the first quote,
        // backslash or control character, found without a byte loop. Most strings (keys, names,
        // IDs) are plain ASCII and end at their first quote.
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            let m = byte_mask(w, b'"') | byte_mask(w, b'\\') | control_mask(w);
            if m == 0 {
                self.i += 8;
                continue;
            }
            self.i += (m.trailing_zeros() / 8) as usize;
            if self.b[self.i] == b'"' {
                let s = &self.text[start..self.i];
                self.i += 1;
                return Ok(Cow::Borrowed(s));
            }
            break;
        }
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'"' => {
                    let s = &self.text[start..self.i];
                    self.i += 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => return self.string_escaped(start).map(Cow::Owned),
                0..=0x1f => return Err(malformed("control character in a string", self.i)),
                _ => self.i += 1,
            }
        }
        Err(malformed("unterminated string", start))
    }

    fn string_escaped(&mut self, start: usize) -> Result<String, TranslateError> {
        let mut out: Vec<u8> = self.b[start..self.i].to_vec();
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return Err(malformed("unterminated string", start));
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.b.get(self.i) else {
                        return Err(malformed("unterminated escape", self.i));
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xd800..0xdc00).contains(&cp) {
                                // A high surrogate must be followed by a low one.
                                if self.b.get(self.i) != Some(&b'\\') || self.b.get(self.i + 1) != Some(&b'u') {
                                    return Err(malformed("lone surrogate in a string", self.i));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(malformed("invalid surrogate pair", self.i));
                                }
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                            } else if (0xdc00..0xe000).contains(&cp) {
                                return Err(malformed("lone surrogate in a string", self.i));
                            }
                            let ch = char::from_u32(cp).ok_or_else(|| malformed("invalid \\u escape", self.i))?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(malformed("invalid escape", self.i - 1)),
                    }
                }
                0..=0x1f => return Err(malformed("control character in a string", self.i - 1)),
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| malformed("string is not UTF-8", start))
    }

    fn hex4(&mut self) -> Result<u32, TranslateError> {
        let Some(h) = self.b.get(self.i..self.i + 4) else {
            return Err(malformed("short \\u escape", self.i));
        };
        let mut v = 0u32;
        for &c in h {
            let d = (c as char)
                .to_digit(16)
                .ok_or_else(|| malformed("invalid \\u escape", self.i))?;
            v = v * 16 + d;
        }
        self.i += 4;
        Ok(v)
    }

    /// The text of a JSON number (validated), for tag values.
    fn number_text(&mut self) -> Result<&'a str, TranslateError> {
        self.ws();
        let start = self.i;
        let b = self.b;
        let mut j = self.i;
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        let int_start = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        if j == int_start || (b[int_start] == b'0' && j - int_start > 1) {
            return Err(malformed("invalid number", start));
        }
        if b.get(j) == Some(&b'.') {
            j += 1;
            let f = j;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            if j == f {
                return Err(malformed("invalid number", start));
            }
        }
        if matches!(b.get(j), Some(b'e' | b'E')) {
            j += 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            let e = j;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            if j == e {
                return Err(malformed("invalid number", start));
            }
        }
        self.i = j;
        Ok(&self.text[start..j])
    }

    /// Microseconds: a non-negative integer, or a float truncated; `null` is 0.
    fn micros(&mut self, what: &str) -> Result<u64, TranslateError> {
        if self.null()? {
            return Ok(0);
        }
        let at = self.i;
        let t = self.number_text()?;
        if let Ok(v) = t.parse::<u64>() {
            return Ok(v);
        }
        match t.parse::<f64>() {
            Ok(f) if f.is_finite() && f >= 0.0 && !t.starts_with('-') => Ok(f as u64),
            _ if t.starts_with('-') => Err(malformed(format!("negative microseconds in {what}"), at)),
            _ => Err(malformed(format!("invalid microseconds in {what}"), at)),
        }
    }

    fn bool(&mut self) -> Result<Option<bool>, TranslateError> {
        match self.peek() {
            Some(b't') => self.literal(b"true").map(|_| Some(true)),
            Some(b'f') => self.literal(b"false").map(|_| Some(false)),
            Some(b'n') => self.literal(b"null").map(|_| None),
            _ => Err(malformed("expected a boolean", self.i)),
        }
    }

    /// A string, number or boolean as text; `None` for `null`.
    fn text(&mut self) -> Result<Option<Cow<'a, str>>, TranslateError> {
        match self.peek() {
            Some(b'"') => self.string().map(Some),
            Some(b't') => self.literal(b"true").map(|_| Some(Cow::Borrowed("true"))),
            Some(b'f') => self.literal(b"false").map(|_| Some(Cow::Borrowed("false"))),
            Some(b'n') => self.literal(b"null").map(|_| None),
            Some(b'-' | b'0'..=b'9') => self.number_text().map(|t| Some(Cow::Borrowed(t))),
            _ => Err(malformed("expected a string, number or boolean", self.i)),
        }
    }

    fn opt_string(&mut self) -> Result<Option<Cow<'a, str>>, TranslateError> {
        if self.null()? {
            Ok(None)
        } else {
            self.string().map(Some)
        }
    }

    fn skip(&mut self, depth: usize) -> Result<(), TranslateError> {
        if depth > MAX_DEPTH {
            return Err(malformed("nesting too deep", self.i));
        }
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{') => {
                self.i += 1;
                if self.eat(b'}') {
                    return Ok(());
                }
                loop {
                    self.string()?;
                    self.expect(b':')?;
                    self.skip(depth + 1)?;
                    if self.eat(b'}') {
                        return Ok(());
                    }
                    self.expect(b',')?;
                }
            }
            Some(b'[') => {
                self.i += 1;
                if self.eat(b']') {
                    return Ok(());
                }
                loop {
                    self.skip(depth + 1)?;
                    if self.eat(b']') {
                        return Ok(());
                    }
                    self.expect(b',')?;
                }
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number_text().map(|_| ()),
            _ => Err(malformed("expected a value", self.i)),
        }
    }

    /// Iterates an object's keys: `f(self, key)` reads each value.
    fn object(
        &mut self,
        mut f: impl FnMut(&mut Self, u128, Cow<'a, str>) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Ok(());
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            f(self, pack(key.as_bytes()), key)?;
            if self.eat(b'}') {
                return Ok(());
            }
            self.expect(b',')?;
        }
    }

    /// An endpoint; `n` and `side` name it in errors (formatted only then).
    fn endpoint(&mut self, n: usize, side: &str) -> Result<Option<Endpoint<'a>>, TranslateError> {
        let what = || format!("span {n}: {side}");
        if self.null()? {
            return Ok(None);
        }
        let mut e = Endpoint::default();
        let mut port: Option<i64> = None;
        let (mut v4, mut v6) = (None, None);
        self.object(|s, k, _| {
            match k {
                key::SERVICE_NAME => e.service_name = s.opt_string()?.filter(|x| !x.is_empty()),
                key::IPV4 => v4 = s.opt_string()?,
                key::IPV6 => v6 = s.opt_string()?,
                key::PORT => {
                    if !s.null()? {
                        let at = s.i;
                        let t = s.number_text()?;
                        port = Some(t.parse::<i64>().map_err(|_| malformed("invalid port", at))?);
                    }
                }
                _ => s.skip(0)?,
            }
            Ok(())
        })?;
        if let Some(a) = v4.as_deref().filter(|a| !a.is_empty()) {
            e.ipv4 = Some(
                parse_ipv4(a.as_bytes())
                    .map(Ok)
                    .unwrap_or_else(|| a.parse())
                    .map_err(|_| TranslateError::new(format!("{}.ipv4 {a:?} is not an IPv4 address", what())))?,
            );
        }
        if let Some(a) = v6.as_deref().filter(|a| !a.is_empty()) {
            e.ipv6 = Some(
                a.parse()
                    .map_err(|_| TranslateError::new(format!("{}.ipv6 {a:?} is not an IPv6 address", what())))?,
            );
        }
        e.port = match port {
            None => 0,
            Some(p) if p <= 0 => 0,
            Some(p) => {
                u16::try_from(p).map_err(|_| TranslateError::new(format!("{}.port {p} is out of range", what())))?
            }
        };
        Ok((!e.is_empty()).then_some(e))
    }
}

/// Dotted-quad IPv4 (`10.0.0.1`), the common case, without the general parser; `None` sends
/// anything else to it (which gives the same answer, and the error).
#[inline]
fn parse_ipv4(b: &[u8]) -> Option<std::net::Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut part = 0;
    let mut digits = 0;
    let mut v: u32 = 0;
    for &c in b {
        match c {
            b'0'..=b'9' => {
                // No leading zeros (the general parser refuses them too), at most 3 digits.
                if digits == 1 && v == 0 {
                    return None;
                }
                v = v * 10 + u32::from(c - b'0');
                digits += 1;
                if digits > 3 || v > 255 {
                    return None;
                }
            }
            b'.' if digits > 0 && part < 3 => {
                octets[part] = v as u8;
                part += 1;
                digits = 0;
                v = 0;
            }
            _ => return None,
        }
    }
    if part != 3 || digits == 0 {
        return None;
    }
    octets[3] = v as u8;
    Some(std::net::Ipv4Addr::from(octets))
}

/// Decodes a v2 JSON list of spans.
pub fn decode_v2(body: &[u8]) -> Result<Vec<Span<'_>>, TranslateError> {
    let text = std::str::from_utf8(body).map_err(|e| malformed("not UTF-8", e.valid_up_to()))?;
    let mut s = Scanner { text, b: body, i: 0 };
    s.expect(b'[')?;
    let mut out = Vec::new();
    if !s.eat(b']') {
        loop {
            let n = out.len();
            out.push(span(&mut s, n)?);
            if s.eat(b']') {
                break;
            }
            s.expect(b',')?;
        }
    }
    if s.peek().is_some() {
        return Err(malformed("trailing characters", s.i));
    }
    Ok(out)
}

fn span<'a>(s: &mut Scanner<'a>, n: usize) -> Result<Span<'a>, TranslateError> {
    let mut sp = Span::default();
    let (mut tid, mut id, mut parent, mut kind) = (None, None, None, None);
    s.object(|s, k, _| {
        match k {
            key::TRACE_ID => tid = s.opt_string()?,
            key::ID => id = s.opt_string()?,
            key::PARENT_ID => parent = s.opt_string()?,
            key::KIND => kind = s.opt_string()?,
            key::NAME => sp.name = s.opt_string()?.filter(|x| !x.is_empty()),
            key::TIMESTAMP => sp.timestamp_us = s.micros("timestamp")?,
            key::DURATION => sp.duration_us = s.micros("duration")?,
            key::LOCAL_ENDPOINT => sp.local = s.endpoint(n, "localEndpoint")?,
            key::REMOTE_ENDPOINT => sp.remote = s.endpoint(n, "remoteEndpoint")?,
            key::ANNOTATIONS => {
                if !s.null()? {
                    s.expect(b'[')?;
                    if !s.eat(b']') {
                        loop {
                            let mut a = Annotation {
                                timestamp_us: 0,
                                value: Cow::Borrowed(""),
                            };
                            let mut has_value = false;
                            s.object(|s, k, _| {
                                match k {
                                    key::TIMESTAMP => a.timestamp_us = s.micros("annotation timestamp")?,
                                    key::VALUE => {
                                        let at = s.i;
                                        a.value = s.text()?.ok_or_else(|| malformed("null annotation value", at))?;
                                        has_value = true;
                                    }
                                    _ => s.skip(0)?,
                                }
                                Ok(())
                            })?;
                            if !has_value {
                                return Err(malformed("annotation without a value", s.i));
                            }
                            sp.annotations.push(a);
                            if s.eat(b']') {
                                break;
                            }
                            s.expect(b',')?;
                        }
                    }
                }
            }
            key::TAGS => {
                if !s.null()? {
                    s.object(|s, _, key| {
                        if let Some(v) = s.text()? {
                            sp.tags.push((key, v));
                        }
                        Ok(())
                    })?;
                }
            }
            key::DEBUG => sp.debug = s.bool()?.unwrap_or(false),
            key::SHARED => sp.shared = s.bool()?.unwrap_or(false),
            _ => s.skip(0)?,
        }
        Ok(())
    })?;
    sp.trace_id = trace_id(tid.as_deref(), n)?;
    sp.id = span_id(id.as_deref(), "id", n)?;
    sp.parent_id = match parent.as_deref() {
        None | Some("") => None,
        Some(p) => Some(span_id(Some(p), "parentId", n)?),
    };
    sp.kind = match kind.as_deref() {
        None | Some("") => None,
        Some(k) => Some(Kind::parse(k).ok_or_else(|| {
            TranslateError::new(format!(
                "span {n}: kind {k:?} is not one of CLIENT, SERVER, PRODUCER, CONSUMER"
            ))
        })?),
    };
    Ok(sp)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    #[test]
    fn ipv4_samples() {
        for s in ["10.0.0.1", "255.255.255.255", "0.0.0.0", "192.168.1.17"] {
            assert_eq!(super::parse_ipv4(s.as_bytes()), s.parse().ok(), "{s}");
        }
        for s in [
            "256.0.0.1",
            "1.2.3",
            "01.2.3.4",
            "1..2.3",
            "1.2.3.4.",
            ".1.2.3",
            "1.2.3.4.5",
            "1.2.3.1000",
        ] {
            assert_eq!(super::parse_ipv4(s.as_bytes()), None, "{s}");
        }
    }

    proptest! {
        /// The dotted-quad fast path gives the general parser's answer, or defers to it.
        #[test]
        fn ipv4_fast_path_agrees(s in "([0-9]{1,3}\\.){0,4}[0-9]{0,4}") {
            let std: Option<std::net::Ipv4Addr> = s.parse().ok();
            if let Some(fast) = super::parse_ipv4(s.as_bytes()) {
                prop_assert_eq!(Some(fast), std);
            }
            if std.is_some() {
                prop_assert_eq!(super::parse_ipv4(s.as_bytes()), std);
            }
        }
    }
}
