//! Propagators (spec/propagation.md).
//!
//! Every format has three layers:
//! - a zero-allocation fast path for its ID header (`traceparent::parse`/`format` and friends),
//!   working on `&[u8]` and caller buffers;
//! - a [`Propagator`] implementation over [`Getter`]/[`Setter`] carriers and a
//!   [`PropagatedContext`], which is what the shared vectors test;
//! - an `opentelemetry::propagation::TextMapPropagator` implementation (see [`otel`]), so the
//!   propagators plug into any code written against the OpenTelemetry API.
//!
//! Invalid input never reaches the application as an error: a propagator that cannot parse its
//! headers leaves the context as it was.

pub mod b3;
pub mod baggage;
mod carrier;
pub mod composite;
pub mod jaeger;
pub mod otel;
pub mod tracecontext;
pub mod traceparent;
pub mod xray;

use std::fmt;

pub use self::b3::{B3Encoding, B3Propagator};
pub use self::baggage::BaggagePropagator;
pub use self::carrier::{Getter, HeaderVec, Setter};
pub use self::composite::{CompositePropagator, UnknownPropagator};
pub use self::jaeger::JaegerPropagator;
pub use self::otel::SpanExtras;
pub use self::tracecontext::TraceContextPropagator;
pub use self::xray::XrayPropagator;

use crate::baggage::Baggage;
use crate::context::FullSpanContext;
use crate::tracestate::trim_ows;

/// What propagators read and write: the remote span context (if any) and the baggage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropagatedContext {
    /// The span context; `None` when no valid context is known.
    pub span: Option<FullSpanContext>,
    /// The baggage.
    pub baggage: Baggage,
}

/// A propagator in weft's own carrier API.
pub trait Propagator: Send + Sync + fmt::Debug {
    /// Reads this format's headers from `carrier` into `cx`. A format that finds no valid span
    /// context leaves `cx.span` unchanged; one that does replaces it. Baggage formats add to
    /// `cx.baggage`.
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext);
    /// Writes this format's headers for `cx` into `carrier`. Nothing is written for an absent or
    /// invalid span context (baggage headers depend only on the baggage).
    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter);
    /// The header names this propagator sets (lowercase).
    fn fields(&self) -> &[String];
}

/// Returns the first value of `name`, trimmed of SP/HTAB.
pub(crate) fn first_value<'a>(carrier: &'a dyn Getter, name: &str) -> Option<&'a str> {
    let mut out = None;
    carrier.values(name, &mut |v| {
        out = Some(trim_ows(v));
        false
    });
    out
}

/// Returns the only value of `name` (trimmed), or `None` if it is absent or repeated.
pub(crate) fn single_value<'a>(carrier: &'a dyn Getter, name: &str) -> Option<&'a str> {
    let mut out = None;
    let mut n = 0;
    carrier.values(name, &mut |v| {
        n += 1;
        out = Some(trim_ows(v));
        n < 2
    });
    if n == 1 { out } else { None }
}

pub(crate) fn fields(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_first_values() {
        let h = HeaderVec::from_pairs([("A", " 1 "), ("a", "2"), ("b", "3")]);
        assert_eq!(first_value(&h, "a"), Some("1"));
        assert_eq!(single_value(&h, "a"), None);
        assert_eq!(single_value(&h, "B"), Some("3"));
        assert_eq!(single_value(&h, "c"), None);
    }
}
