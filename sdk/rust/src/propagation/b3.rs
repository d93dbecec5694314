//! B3 single (`b3`) and multi (`X-B3-*`) header propagation.

use super::{Getter, PropagatedContext, Propagator, Setter, first_value};
use crate::context::{FullSpanContext, SpanContext};
use crate::id::{SpanId, TraceId, encode_hex, parse_hex_lower_u128, parse_span_id};

/// Which headers the B3 propagator injects. Extract always accepts both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum B3Encoding {
    /// `b3: {trace}-{span}-{sampling}` (the OpenTelemetry default).
    #[default]
    Single,
    /// `x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled` / `x-b3-flags`.
    Multi,
}

/// The B3 propagator.
#[derive(Clone, Debug)]
pub struct B3Propagator {
    encoding: B3Encoding,
    fields: Vec<String>,
}

impl Default for B3Propagator {
    fn default() -> Self {
        Self::new(B3Encoding::Single)
    }
}

/// A parsed B3 sampling state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Deny,
    Accept,
    Debug,
    Defer,
}

/// The result of the B3 fast path: IDs plus the debug flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct B3Context {
    /// IDs and flags (`01` for accept and debug).
    pub context: SpanContext,
    /// Whether the debug state was received.
    pub debug: bool,
}

/// Parses a 32- or 16-digit lowercase trace ID (16 digits are left-padded), rejecting zero.
fn parse_b3_trace_id(s: &[u8]) -> Option<TraceId> {
    if s.len() != 32 && s.len() != 16 {
        return None;
    }
    match parse_hex_lower_u128(s)? {
        0 => None,
        v => Some(TraceId::from(v)),
    }
}

fn finish(trace_id: TraceId, span_id: SpanId, state: State) -> B3Context {
    let sampled = matches!(state, State::Accept | State::Debug);
    B3Context {
        context: SpanContext::new(trace_id, span_id, u8::from(sampled), true),
        debug: state == State::Debug,
    }
}

/// Parses a single `b3` header value (already trimmed). `None` for an invalid header and for a
/// sampling-only value (`0`, `1`, `d`), which carries no IDs.
pub fn parse_single(v: &str) -> Option<B3Context> {
    let mut parts = v.split('-');
    let trace = parse_b3_trace_id(parts.next()?.as_bytes())?;
    let span = parse_span_id(parts.next()?.as_bytes())?;
    let state = match parts.next() {
        None => State::Defer,
        Some("0") => State::Deny,
        Some("1") => State::Accept,
        Some("d") => State::Debug,
        Some(_) => return None,
    };
    if let Some(parent) = parts.next() {
        parse_span_id(parent.as_bytes())?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(finish(trace, span, state))
}

fn parse_multi(carrier: &dyn Getter) -> Option<B3Context> {
    let trace = parse_b3_trace_id(first_value(carrier, "x-b3-traceid")?.as_bytes())?;
    let span = parse_span_id(first_value(carrier, "x-b3-spanid")?.as_bytes())?;
    if let Some(parent) = first_value(carrier, "x-b3-parentspanid") {
        parse_span_id(parent.as_bytes())?;
    }
    let mut state = match first_value(carrier, "x-b3-sampled") {
        None => State::Defer,
        Some(s) if s == "1" || s.eq_ignore_ascii_case("true") => State::Accept,
        Some(s) if s == "0" || s.eq_ignore_ascii_case("false") => State::Deny,
        Some(_) => return None,
    };
    if first_value(carrier, "x-b3-flags") == Some("1") {
        state = State::Debug;
    }
    Some(finish(trace, span, state))
}

/// Extracts B3 from a carrier: the single header first, then the multi headers.
pub fn extract_b3(carrier: &dyn Getter) -> Option<B3Context> {
    first_value(carrier, "b3")
        .and_then(parse_single)
        .or_else(|| parse_multi(carrier))
}

/// Formats `{trace}-{span}-{s}` into `out` (51 bytes) and returns it.
pub fn format_single<'a>(sc: &SpanContext, debug: bool, out: &'a mut [u8; 51]) -> &'a str {
    encode_hex(&sc.trace_id.to_bytes(), &mut out[..32]);
    out[32] = b'-';
    encode_hex(&sc.span_id.to_bytes(), &mut out[33..49]);
    out[49] = b'-';
    out[50] = if debug {
        b'd'
    } else if sc.is_sampled() {
        b'1'
    } else {
        b'0'
    };
    std::str::from_utf8(out).unwrap_or_default()
}

impl B3Propagator {
    /// Returns a propagator injecting with `encoding`.
    pub fn new(encoding: B3Encoding) -> Self {
        let fields = match encoding {
            B3Encoding::Single => super::fields(&["b3"]),
            B3Encoding::Multi => super::fields(&["x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags"]),
        };
        B3Propagator { encoding, fields }
    }

    /// Returns the inject encoding.
    pub fn encoding(&self) -> B3Encoding {
        self.encoding
    }
}

impl Propagator for B3Propagator {
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext) {
        if let Some(b3) = extract_b3(carrier) {
            cx.span = Some(FullSpanContext {
                b3_debug: b3.debug,
                ..FullSpanContext::new(b3.context, Default::default())
            });
        }
    }

    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter) {
        let Some(span) = cx.span.as_ref().filter(|s| s.context.is_valid()) else {
            return;
        };
        match self.encoding {
            B3Encoding::Single => {
                let mut buf = [0u8; 51];
                carrier.set("b3", format_single(&span.context, span.b3_debug, &mut buf).to_owned());
            }
            B3Encoding::Multi => {
                let mut t = [0u8; 32];
                encode_hex(&span.context.trace_id.to_bytes(), &mut t);
                let mut s = [0u8; 16];
                encode_hex(&span.context.span_id.to_bytes(), &mut s);
                carrier.set("x-b3-traceid", String::from_utf8_lossy(&t).into_owned());
                carrier.set("x-b3-spanid", String::from_utf8_lossy(&s).into_owned());
                if span.b3_debug {
                    carrier.set("x-b3-flags", "1".to_owned());
                } else {
                    let v = if span.context.is_sampled() { "1" } else { "0" };
                    carrier.set("x-b3-sampled", v.to_owned());
                }
            }
        }
    }

    fn fields(&self) -> &[String] {
        &self.fields
    }
}

/// The fuzz body for the single header: never panics; a parsed header re-formats and re-parses
/// to the same context.
pub fn fuzz(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some(c) = parse_single(crate::tracestate::trim_ows(s)) {
        let mut buf = [0u8; 51];
        let again = parse_single(format_single(&c.context, c.debug, &mut buf)).expect("formatted b3 must parse");
        assert_eq!(again, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::propagation::HeaderVec;

    #[test]
    fn single_header_forms() {
        let c = parse_single("64fe8b2a57d3eff7-05e3ac9a4f6e3b90-d").unwrap();
        assert!(c.debug && c.context.is_sampled());
        assert_eq!(c.context.trace_id, TraceId::from(0x64fe8b2a57d3eff7u128));
        assert!(parse_single("0").is_none());
        assert!(parse_single("80f198ee56343ba864fe8b2a57d3eff7-05e3ac9a4f6e3b90-e457b5a2e4d86bd1").is_none());
    }

    #[test]
    fn multi_inject_debug_uses_flags() {
        let mut cx = PropagatedContext::default();
        let h = HeaderVec::from_pairs([
            ("X-B3-TraceId", "463ac35c9f6413ad48485a3953bb6124"),
            ("X-B3-SpanId", "a2fb4a1d1a96d312"),
            ("X-B3-Flags", "1"),
        ]);
        let p = B3Propagator::new(B3Encoding::Multi);
        p.extract(&h, &mut cx);
        let mut out = HeaderVec::new();
        p.inject(&cx, &mut out);
        assert_eq!(out.get("x-b3-flags"), Some("1"));
        assert_eq!(out.get("x-b3-sampled"), None);
    }
}
