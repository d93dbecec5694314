//! The W3C Trace Context propagator (`traceparent` + `tracestate`, Level 2).

use super::{Getter, PropagatedContext, Propagator, Setter, single_value, traceparent};
use crate::context::FullSpanContext;
use crate::tracestate::TraceState;

/// Extracts and injects `traceparent` and `tracestate`.
#[derive(Clone, Debug)]
pub struct TraceContextPropagator {
    fields: Vec<String>,
}

impl Default for TraceContextPropagator {
    fn default() -> Self {
        TraceContextPropagator {
            fields: super::fields(&["traceparent", "tracestate"]),
        }
    }
}

impl TraceContextPropagator {
    /// Returns the propagator.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Reads every `tracestate` line; an invalid list becomes empty (it never invalidates the
/// `traceparent`).
pub(crate) fn extract_tracestate(carrier: &dyn Getter) -> TraceState {
    let mut lines: Vec<&str> = Vec::new();
    carrier.values("tracestate", &mut |v| {
        lines.push(v);
        true
    });
    if lines.is_empty() {
        return TraceState::EMPTY;
    }
    TraceState::parse(lines).unwrap_or_default()
}

impl Propagator for TraceContextPropagator {
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext) {
        let Some(sc) = single_value(carrier, "traceparent").and_then(traceparent::parse_str) else {
            return;
        };
        cx.span = Some(FullSpanContext::new(sc, extract_tracestate(carrier)));
    }

    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter) {
        let Some(span) = cx.span.as_ref().filter(|s| s.context.is_valid()) else {
            return;
        };
        let mut buf = [0u8; traceparent::LEN];
        carrier.set("traceparent", traceparent::format(&span.context, &mut buf).to_owned());
        if !span.trace_state.is_empty() {
            carrier.set("tracestate", span.trace_state.header_value().into_owned());
        }
    }

    fn fields(&self) -> &[String] {
        &self.fields
    }
}

/// The fuzz body for `tracestate`: never panics; a parsed state has at most 32 members, no
/// repeated key, and re-parses to itself.
pub fn fuzz_tracestate(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let lines: Vec<&str> = s.split('\n').collect();
    if let Ok(ts) = TraceState::parse(lines) {
        let keys: Vec<&str> = ts.members().map(|(k, _)| k).collect();
        assert!(keys.len() <= crate::tracestate::MAX_MEMBERS);
        assert!(keys.iter().enumerate().all(|(i, k)| !keys[..i].contains(k)));
        assert_eq!(TraceState::parse_str(ts.as_str()).as_ref(), Ok(&ts));
        let header = ts.header_value();
        assert!(header.len() <= crate::tracestate::MAX_HEADER_LEN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::propagation::HeaderVec;

    #[test]
    fn extract_then_inject() {
        let h = HeaderVec::from_pairs([
            ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            ("tracestate", "congo=t61rcWkgMzE"),
            ("tracestate", "rojo=1"),
        ]);
        let p = TraceContextPropagator::new();
        let mut cx = PropagatedContext::default();
        p.extract(&h, &mut cx);
        assert_eq!(
            cx.span.as_ref().unwrap().trace_state.as_str(),
            "congo=t61rcWkgMzE,rojo=1"
        );
        let mut out = HeaderVec::new();
        p.inject(&cx, &mut out);
        assert_eq!(out.get("tracestate"), Some("congo=t61rcWkgMzE,rojo=1"));
    }

    #[test]
    fn duplicate_tracestate_keys_keep_the_first() {
        let h = HeaderVec::from_pairs([
            ("traceparent", "00-12345678901234567890123456789012-1234567890123456-00"),
            ("tracestate", "foo=1,bar=2"),
            ("tracestate", "foo=2,baz=3"),
        ]);
        let p = TraceContextPropagator::new();
        let mut cx = PropagatedContext::default();
        p.extract(&h, &mut cx);
        let mut out = HeaderVec::new();
        p.inject(&cx, &mut out);
        assert_eq!(out.get("tracestate"), Some("foo=1,bar=2,baz=3"));
    }

    #[test]
    fn bad_tracestate_keeps_traceparent() {
        let h = HeaderVec::from_pairs([
            ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            ("tracestate", "BAD=1"),
        ]);
        let mut cx = PropagatedContext::default();
        TraceContextPropagator::new().extract(&h, &mut cx);
        assert!(cx.span.unwrap().trace_state.is_empty());
    }
}
