//! The W3C Baggage propagator.

use super::{Getter, PropagatedContext, Propagator, Setter};

/// Extracts and injects the W3C `baggage` header.
#[derive(Clone, Debug)]
pub struct BaggagePropagator {
    fields: Vec<String>,
}

impl Default for BaggagePropagator {
    fn default() -> Self {
        BaggagePropagator {
            fields: super::fields(&["baggage"]),
        }
    }
}

impl BaggagePropagator {
    /// Returns the propagator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Propagator for BaggagePropagator {
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext) {
        let mut lines: Vec<&str> = Vec::new();
        carrier.values("baggage", &mut |v| {
            lines.push(v);
            true
        });
        if !lines.is_empty() {
            cx.baggage.extend_from_header(lines);
        }
    }

    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter) {
        if let Some(h) = cx.baggage.to_header() {
            carrier.set("baggage", h);
        }
    }

    fn fields(&self) -> &[String] {
        &self.fields
    }
}

/// The fuzz body for `baggage`: never panics; what is injected extracts to the same entries.
pub fn fuzz(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let mut b = crate::baggage::Baggage::new();
    b.extend_from_header(s.split('\n'));
    if let Some(h) = b.to_header() {
        assert!(h.len() <= crate::baggage::MAX_BYTES);
        let mut again = crate::baggage::Baggage::new();
        again.extend_from_header([h.as_str()]);
        assert_eq!(again, b, "baggage round trip through {h:?}");
    }
}
