//! Jaeger `uber-trace-id` and `uberctx-*` propagation.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{Getter, PropagatedContext, Propagator, Setter, first_value};
use crate::baggage::{is_token, percent_decode};
use crate::context::{FullSpanContext, SpanContext};
use crate::id::{SpanId, TraceId, encode_hex, parse_hex_any_u128, parse_hex_lower_u128};

const BAGGAGE_PREFIX: &str = "uberctx-";

/// The result of parsing `uber-trace-id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JaegerContext {
    /// IDs and the sampled flag.
    pub context: SpanContext,
    /// Sampled and debug bits were both set.
    pub debug: bool,
}

/// Parses an `uber-trace-id` value (already trimmed). `None` if it is invalid.
pub fn parse(value: &str) -> Option<JaegerContext> {
    let decoded = percent_decode(value, false)?;
    let mut fields = decoded.split(':');
    let (t, s, _parent, f) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() || t.len() > 32 || s.len() > 16 || f.is_empty() || f.len() > 2 {
        return None;
    }
    let trace = parse_hex_lower_u128(t.as_bytes()).filter(|v| *v != 0)?;
    let span = parse_hex_lower_u128(s.as_bytes()).filter(|v| *v != 0)? as u64;
    let flags = parse_hex_any_u128(f.as_bytes())? as u8;
    let sampled = flags & 0x01 != 0;
    Some(JaegerContext {
        context: SpanContext::new(TraceId::from(trace), SpanId::from(span), u8::from(sampled), true),
        debug: sampled && flags & 0x02 != 0,
    })
}

/// Formats `{trace}:{span}:0:{flags}` with full-width IDs.
pub fn format(sc: &SpanContext, debug: bool) -> String {
    let mut buf = [0u8; 54];
    encode_hex(&sc.trace_id.to_bytes(), &mut buf[..32]);
    buf[32] = b':';
    encode_hex(&sc.span_id.to_bytes(), &mut buf[33..49]);
    buf[49..52].copy_from_slice(b":0:");
    buf[52] = if debug {
        b'3'
    } else if sc.is_sampled() {
        b'1'
    } else {
        b'0'
    };
    String::from_utf8_lossy(&buf[..53]).into_owned()
}

fn encode_baggage_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for &b in v.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The Jaeger propagator.
#[derive(Clone, Debug)]
pub struct JaegerPropagator {
    fields: Vec<String>,
}

impl Default for JaegerPropagator {
    fn default() -> Self {
        JaegerPropagator {
            fields: super::fields(&["uber-trace-id"]),
        }
    }
}

impl JaegerPropagator {
    /// Returns the propagator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Propagator for JaegerPropagator {
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext) {
        if let Some(j) = first_value(carrier, "uber-trace-id").and_then(parse) {
            cx.span = Some(FullSpanContext {
                jaeger_debug: j.debug,
                ..FullSpanContext::new(j.context, Default::default())
            });
        }
        let mut names: BTreeSet<String> = BTreeSet::new();
        carrier.names(&mut |n| {
            if n.len() > BAGGAGE_PREFIX.len()
                && n.is_char_boundary(BAGGAGE_PREFIX.len())
                && n[..BAGGAGE_PREFIX.len()].eq_ignore_ascii_case(BAGGAGE_PREFIX)
            {
                names.insert(n.to_ascii_lowercase());
            }
        });
        for name in names {
            let Some(raw) = first_value(carrier, &name) else {
                continue;
            };
            if let Some(value) = percent_decode(raw, true).filter(|v| !v.is_empty()) {
                cx.baggage.insert(&name[BAGGAGE_PREFIX.len()..], value, "");
            }
        }
    }

    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter) {
        if let Some(span) = cx.span.as_ref().filter(|s| s.context.is_valid()) {
            carrier.set("uber-trace-id", format(&span.context, span.jaeger_debug));
        }
        for e in cx.baggage.entries() {
            if is_token(&e.key) && !e.key.bytes().any(|b| b.is_ascii_uppercase()) {
                carrier.set(&format!("{BAGGAGE_PREFIX}{}", e.key), encode_baggage_value(&e.value));
            }
        }
    }

    fn fields(&self) -> &[String] {
        &self.fields
    }
}

/// The fuzz body: never panics; a parsed header re-formats and re-parses to the same context.
pub fn fuzz(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some(j) = parse(crate::tracestate::trim_ows(s)) {
        let again = parse(&format(&j.context, j.debug)).expect("formatted uber-trace-id must parse");
        assert_eq!(again, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::propagation::HeaderVec;

    #[test]
    fn short_ids_and_encoded_separators() {
        let j = parse("1%3a2:0:0B").unwrap();
        assert_eq!(j.context.trace_id, TraceId::from(1u128));
        assert!(j.debug);
        assert_eq!(
            format(&j.context, j.debug),
            "00000000000000000000000000000001:0000000000000002:0:3"
        );
        assert!(parse("1:2:0:2").is_some_and(|j| !j.debug && !j.context.is_sampled()));
    }

    #[test]
    fn uberctx_round_trip() {
        let h = HeaderVec::from_pairs([("Uberctx-Note", "a%20b+c%C3%A9")]);
        let mut cx = PropagatedContext::default();
        JaegerPropagator::new().extract(&h, &mut cx);
        assert_eq!(cx.baggage.get("note"), Some("a b cé"));
        let mut out = HeaderVec::new();
        JaegerPropagator::new().inject(&cx, &mut out);
        assert_eq!(out.get("uberctx-note"), Some("a%20b%20c%C3%A9"));
    }
}
