//! The stack span context used on the fast paths.

use std::fmt;

use crate::id::{FLAG_RANDOM, FLAG_SAMPLED, SpanId, TraceFlags, TraceId, encode_hex};
use crate::tracestate::TraceState;

/// A span context without tracestate: 32 bytes, `Copy`, never allocates.
///
/// `trace_flags` holds the W3C flags (`0x01` sampled, `0x02` random).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanContext {
    /// The trace ID.
    pub trace_id: TraceId,
    /// The span ID.
    pub span_id: SpanId,
    /// W3C trace flags.
    pub trace_flags: u8,
    /// Whether the context came from another process.
    pub is_remote: bool,
}

impl SpanContext {
    /// The invalid context (both IDs zero).
    pub const INVALID: SpanContext = SpanContext {
        trace_id: TraceId::INVALID,
        span_id: SpanId::INVALID,
        trace_flags: 0,
        is_remote: false,
    };

    /// Returns a context.
    pub const fn new(trace_id: TraceId, span_id: SpanId, trace_flags: u8, is_remote: bool) -> Self {
        SpanContext {
            trace_id,
            span_id,
            trace_flags,
            is_remote,
        }
    }

    /// Returns whether both IDs are valid (not all zero).
    #[inline]
    pub fn is_valid(&self) -> bool {
        self.trace_id != TraceId::INVALID && self.span_id != SpanId::INVALID
    }

    /// Returns whether the sampled flag is set.
    #[inline]
    pub fn is_sampled(&self) -> bool {
        self.trace_flags & FLAG_SAMPLED != 0
    }

    /// Returns whether the W3C random flag is set.
    #[inline]
    pub fn is_random(&self) -> bool {
        self.trace_flags & FLAG_RANDOM != 0
    }

    /// Converts to the `opentelemetry` API type with the given tracestate.
    #[inline]
    pub fn to_otel(&self, trace_state: opentelemetry::trace::TraceState) -> opentelemetry::trace::SpanContext {
        opentelemetry::trace::SpanContext::new(
            self.trace_id,
            self.span_id,
            TraceFlags::new(self.trace_flags),
            self.is_remote,
            trace_state,
        )
    }

    /// Converts from the `opentelemetry` API type (dropping its tracestate).
    #[inline]
    pub fn from_otel(sc: &opentelemetry::trace::SpanContext) -> Self {
        SpanContext {
            trace_id: sc.trace_id(),
            span_id: sc.span_id(),
            trace_flags: sc.trace_flags().to_u8(),
            is_remote: sc.is_remote(),
        }
    }

    /// Writes `{trace_id}-{span_id}` hex into a 49-byte buffer (for logs).
    pub fn write_ids(&self, out: &mut [u8; 49]) {
        encode_hex(&self.trace_id.to_bytes(), &mut out[..32]);
        out[32] = b'-';
        encode_hex(&self.span_id.to_bytes(), &mut out[33..]);
    }
}

impl Default for SpanContext {
    fn default() -> Self {
        SpanContext::INVALID
    }
}

impl fmt::Debug for SpanContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanContext")
            .field(
                "trace_id",
                &format_args!("{:032x}", u128::from_be_bytes(self.trace_id.to_bytes())),
            )
            .field(
                "span_id",
                &format_args!("{:016x}", u64::from_be_bytes(self.span_id.to_bytes())),
            )
            .field("trace_flags", &format_args!("{:02x}", self.trace_flags))
            .field("is_remote", &self.is_remote)
            .finish()
    }
}

/// A span context with everything the propagators carry beside the IDs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FullSpanContext {
    /// IDs, flags and remoteness.
    pub context: SpanContext,
    /// The W3C tracestate (Level 2 rules; may hold keys the `opentelemetry` API rejects).
    pub trace_state: TraceState,
    /// B3 debug (`b3: …-d`, `X-B3-Flags: 1`).
    pub b3_debug: bool,
    /// Jaeger debug (flags `0x02` with `0x01`).
    pub jaeger_debug: bool,
    /// The X-Ray `Lineage` value, passed through unchanged.
    pub xray_lineage: Option<String>,
}

impl FullSpanContext {
    /// Returns a context with no extras.
    pub fn new(context: SpanContext, trace_state: TraceState) -> Self {
        FullSpanContext {
            context,
            trace_state,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_and_flags() {
        let sc = SpanContext::new(TraceId::from(1u128), SpanId::from(2), 3, true);
        assert!(sc.is_valid() && sc.is_sampled() && sc.is_random());
        assert!(!SpanContext::INVALID.is_valid());
        let back = SpanContext::from_otel(&sc.to_otel(Default::default()));
        assert_eq!(back, sc);
        let mut buf = [0u8; 49];
        sc.write_ids(&mut buf);
        assert_eq!(&buf[..], b"00000000000000000000000000000001-0000000000000002");
    }
}
