//! AWS X-Ray `X-Amzn-Trace-Id` propagation.

use super::{Getter, PropagatedContext, Propagator, Setter, first_value};
use crate::context::{FullSpanContext, SpanContext};
use crate::id::{TraceId, encode_hex, parse_hex_lower_u128, parse_span_id};
use crate::tracestate::trim_ows;

/// The result of parsing an X-Ray header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XrayContext<'a> {
    /// IDs and the sampled flag.
    pub context: SpanContext,
    /// The `Lineage` value, as received (trimmed).
    pub lineage: Option<&'a str>,
}

/// Parses `1-{epoch: 1..8 hex}-{unique: 24 hex}` into a trace ID (epoch left-padded).
fn parse_root(root: &str) -> Option<TraceId> {
    let rest = root.strip_prefix("1-")?;
    let (epoch, unique) = rest.split_once('-')?;
    if epoch.is_empty() || epoch.len() > 8 || unique.len() != 24 {
        return None;
    }
    let e = parse_hex_lower_u128(epoch.as_bytes())?;
    let u = parse_hex_lower_u128(unique.as_bytes())?;
    match (e << 96) | u {
        0 => None,
        v => Some(TraceId::from(v)),
    }
}

/// Parses an `X-Amzn-Trace-Id` value. `None` if it is invalid.
pub fn parse(value: &str) -> Option<XrayContext<'_>> {
    let (mut root, mut parent, mut sampled, mut lineage) = (None, None, None, None);
    for part in value.split(';') {
        let part = trim_ows(part);
        if part.is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=')?;
        let (k, v) = (trim_ows(k), trim_ows(v));
        match k {
            "Root" => root = Some(v),
            "Parent" => parent = Some(v),
            "Sampled" => sampled = Some(v),
            "Lineage" => lineage = Some(v),
            _ => {}
        }
    }
    let trace_id = parse_root(root?)?;
    let span_id = parse_span_id(parent?.as_bytes())?;
    let flags = match sampled {
        None | Some("0") | Some("?") => 0,
        Some("1") => 1,
        Some(_) => return None,
    };
    Some(XrayContext {
        context: SpanContext::new(trace_id, span_id, flags, true),
        lineage,
    })
}

/// Formats the header value for a context.
pub fn format(sc: &SpanContext, lineage: Option<&str>) -> String {
    let mut t = [0u8; 32];
    encode_hex(&sc.trace_id.to_bytes(), &mut t);
    let mut s = [0u8; 16];
    encode_hex(&sc.span_id.to_bytes(), &mut s);
    let t = std::str::from_utf8(&t).unwrap_or_default();
    let s = std::str::from_utf8(&s).unwrap_or_default();
    let mut out = format!(
        "Root=1-{}-{};Parent={};Sampled={}",
        &t[..8],
        &t[8..],
        s,
        u8::from(sc.is_sampled())
    );
    if let Some(l) = lineage {
        out.push_str(";Lineage=");
        out.push_str(l);
    }
    out
}

/// The X-Ray propagator.
#[derive(Clone, Debug)]
pub struct XrayPropagator {
    fields: Vec<String>,
}

impl Default for XrayPropagator {
    fn default() -> Self {
        XrayPropagator {
            fields: super::fields(&["x-amzn-trace-id"]),
        }
    }
}

impl XrayPropagator {
    /// Returns the propagator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Propagator for XrayPropagator {
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext) {
        if let Some(x) = first_value(carrier, "x-amzn-trace-id").and_then(parse) {
            cx.span = Some(FullSpanContext {
                xray_lineage: x.lineage.map(str::to_owned),
                ..FullSpanContext::new(x.context, Default::default())
            });
        }
    }

    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter) {
        if let Some(span) = cx.span.as_ref().filter(|s| s.context.is_valid()) {
            carrier.set("x-amzn-trace-id", format(&span.context, span.xray_lineage.as_deref()));
        }
    }

    fn fields(&self) -> &[String] {
        &self.fields
    }
}

/// The fuzz body: never panics; a parsed header re-formats and re-parses to the same context.
pub fn fuzz(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some(x) = parse(s) {
        // A lineage containing ';' cannot round-trip; X-Ray never produces one.
        if x.lineage.is_some_and(|l| l.contains(';') || l.contains('=')) {
            return;
        }
        let header = format(&x.context, x.lineage);
        let again = parse(&header).expect("formatted x-ray header must parse");
        assert_eq!(again.context, x.context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_epoch_and_lineage() {
        let x = parse("Root=1-a-bd862e3fe1be46a994272793; Parent=53995c3f42cd8ad8;Sampled=?;Lineage=a:1").unwrap();
        assert_eq!(
            x.context.trace_id,
            TraceId::from(0x0000000abd862e3fe1be46a994272793u128)
        );
        assert!(!x.context.is_sampled());
        assert_eq!(
            format(&x.context, x.lineage),
            "Root=1-0000000a-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0;Lineage=a:1"
        );
        assert!(parse("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;x").is_none());
    }
}
