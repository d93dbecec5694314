//! Zipkin v2 JSON, read with the receivers' JSON scanner (`crate::scan`): the receiver's hot
//! path. serde_json's derive-based reader ([`super::json::decode_v2_serde`], kept as the
//! reference the property tests compare this one with) spent 1.4 µs per span of Brave-like
//! JSON, most of the conversion's cost; this reads the same payload in about a third of that by
//! matching keys as integers, borrowing every string without escapes, and never building an
//! intermediate value.
//!
//! It accepts exactly what the reference accepts for well-formed JSON: unknown fields (any
//! value) are skipped, `null` means absent, tag values may be strings, numbers or booleans,
//! microseconds may be floats (truncated). Nesting of skipped values is bounded.

use std::borrow::Cow;

use super::json::{span_id, trace_id};
use super::{Annotation, Endpoint, Kind, Span};
use crate::TranslateError;
use crate::scan::{Scanner, pack};

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

impl<'a> Scanner<'a> {
    /// An endpoint; `n` and `side` name it in errors (formatted only then).
    fn endpoint(&mut self, n: usize, side: &str) -> Result<Option<Endpoint<'a>>, TranslateError> {
        let what = || format!("span {n}: {side}");
        if self.null()? {
            return Ok(None);
        }
        let mut e = Endpoint::default();
        let mut port: Option<i64> = None;
        let (mut v4, mut v6) = (None, None);
        self.object(|s, k| {
            match k {
                key::SERVICE_NAME => e.service_name = s.opt_string()?.filter(|x| !x.is_empty()),
                key::IPV4 => v4 = s.opt_string()?,
                key::IPV6 => v6 = s.opt_string()?,
                key::PORT => {
                    if !s.null()? {
                        let at = s.i;
                        let t = s.number_text()?;
                        port = Some(t.parse::<i64>().map_err(|_| s.malformed("invalid port", at))?);
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
    // The address is shifted into one integer, not stored into a byte array: `perf annotate`
    // had a hot spot where the array's four byte stores were read back as one word.
    let mut addr: u32 = 0;
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
                addr = addr << 8 | v;
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
    Some(std::net::Ipv4Addr::from(addr << 8 | v))
}

/// Decodes a v2 JSON list of spans.
pub fn decode_v2(body: &[u8]) -> Result<Vec<Span<'_>>, TranslateError> {
    let mut s = Scanner::new(body, "Zipkin JSON")?;
    s.expect(b'[')?;
    // Room for spans of about 400 bytes of JSON (Brave's are 300 to 600), so the vector of
    // large spans is rarely moved as it grows.
    let mut out = Vec::with_capacity((body.len() / 400).min(4096));
    if !s.eat(b']') {
        loop {
            let n = out.len();
            out.push(Span::default());
            span_into(&mut s, n, out.last_mut().expect("just pushed"))?;
            if s.eat(b']') {
                break;
            }
            s.expect(b',')?;
        }
    }
    s.end()?;
    Ok(out)
}

/// Reads span `n` into `sp`, a default one already in the output vector (a span is a few
/// hundred bytes; building it on the stack and moving it there was a copy per span).
fn span_into<'a>(s: &mut Scanner<'a>, n: usize, sp: &mut Span<'a>) -> Result<(), TranslateError> {
    let (mut tid, mut id, mut parent, mut kind) = (None, None, None, None);
    s.object(|s, k| {
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
                            s.object(|s, k| {
                                match k {
                                    key::TIMESTAMP => a.timestamp_us = s.micros("annotation timestamp")?,
                                    key::VALUE => {
                                        let at = s.i;
                                        a.value = s.text()?.ok_or_else(|| s.malformed("null annotation value", at))?;
                                        has_value = true;
                                    }
                                    _ => s.skip(0)?,
                                }
                                Ok(())
                            })?;
                            if !has_value {
                                return Err(s.malformed("annotation without a value", s.i));
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
                    s.object(|s, _| {
                        let key = s.last_key()?;
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
    Ok(())
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
