//! Fuzz bodies, one per decoder of outside input.
//!
//! Each takes arbitrary bytes, must never panic, and checks a round trip where one exists. The
//! cargo-fuzz targets in `fuzz/fuzz_targets/` call them, and so do the proptest no-panic tests in
//! `tests/proptest.rs` (which run on stable, where libFuzzer does not).

/// `traceparent`.
pub fn traceparent(data: &[u8]) {
    crate::propagation::traceparent::fuzz(data)
}

/// `tracestate` (lines separated by `\n`).
pub fn tracestate(data: &[u8]) {
    crate::propagation::tracecontext::fuzz_tracestate(data)
}

/// `baggage` (lines separated by `\n`).
pub fn baggage(data: &[u8]) {
    crate::propagation::baggage::fuzz(data)
}

/// The single `b3` header.
pub fn b3(data: &[u8]) {
    crate::propagation::b3::fuzz(data)
}

/// `X-Amzn-Trace-Id`.
pub fn xray(data: &[u8]) {
    crate::propagation::xray::fuzz(data)
}

/// `uber-trace-id`.
pub fn jaeger(data: &[u8]) {
    crate::propagation::jaeger::fuzz(data)
}

/// Every propagator at once, through the composite and a header list built from the input
/// (`name: value` lines).
pub fn composite(data: &[u8]) {
    use crate::propagation::{CompositePropagator, HeaderVec, PropagatedContext, Propagator};
    let Ok(s) = std::str::from_utf8(data) else { return };
    let headers = HeaderVec::from_pairs(s.lines().filter_map(|l| l.split_once(':')));
    let (p, _) = CompositePropagator::from_names(["tracecontext", "baggage", "b3", "xray", "jaeger"]);
    let mut cx = PropagatedContext::default();
    p.extract(&headers, &mut cx);
    let mut out = HeaderVec::new();
    p.inject(&cx, &mut out);
}

/// An `ExportTraceServiceResponse` body.
pub fn otlp_response(data: &[u8]) {
    let _ = crate::otlp::decode_export_response(data);
    let _ = crate::otlp::decode_grpc_retry_delay(data);
}

/// A Jaeger remote sampling strategy body.
pub fn jaeger_strategy(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data)
        && let Ok(strategy) = crate::sampling::Strategy::parse(s)
    {
        let _ = strategy.resolve("op", 0, 2000);
    }
}

/// A `Retry-After` header value.
pub fn retry_after(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::otlp::retry::parse_retry_after(s, std::time::SystemTime::UNIX_EPOCH);
    }
}

/// A fuzz body.
pub type FuzzBody = fn(&[u8]);

/// Every body above, by name.
pub const ALL: &[(&str, FuzzBody)] = &[
    ("traceparent", traceparent),
    ("tracestate", tracestate),
    ("baggage", baggage),
    ("b3", b3),
    ("xray", xray),
    ("jaeger", jaeger),
    ("composite", composite),
    ("otlp_response", otlp_response),
    ("jaeger_strategy", jaeger_strategy),
    ("retry_after", retry_after),
];
