//! What counting root spans for adaptive sampling adds to admitting a request: the time of
//! `validate_request` on an OTLP request of 512 spans (10 a trace, so 51 or 52 roots; 4
//! services, 8 operations), with and without `Adaptive::roots` after it. Single-threaded, best of
//! 7 runs of 2,000 requests each. `cargo run --release -p weft-sampling --example count_cost`
//! (run by `make bench`).

use std::sync::Arc;
use std::time::Instant;

use prost::Message;
use weft_admission::RootSink;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span};
use weft_otlp::request::{RequestSummary, validate_request};
use weft_sampling::{Adaptive, AdaptiveConfig};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(V::StringValue(v.into())),
        }),
    }
}

fn request(seed: u64) -> Vec<u8> {
    let mut x = seed;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x
    };
    let mut resource_spans = Vec::new();
    for svc in 0..4 {
        let mut spans = Vec::new();
        for t in 0..13 {
            let trace_id: Vec<u8> = [next().to_be_bytes(), next().to_be_bytes()].concat();
            let root_id = next().to_be_bytes().to_vec();
            for i in 0..10 {
                let id = if i == 0 {
                    root_id.clone()
                } else {
                    next().to_be_bytes().to_vec()
                };
                spans.push(Span {
                    trace_id: trace_id.clone().into(),
                    span_id: id.into(),
                    parent_span_id: if i == 0 { Vec::new() } else { root_id.clone() }.into(),
                    name: format!("GET /api/v1/op{}", (t + i) % 8),
                    kind: 2,
                    start_time_unix_nano: 1_700_000_000_000_000_000 + next() % 1_000_000,
                    end_time_unix_nano: 1_700_000_000_001_000_000,
                    attributes: vec![kv("http.method", "GET"), kv("http.route", "/api/v1/items/{id}")],
                    ..Default::default()
                });
            }
        }
        spans.truncate(128);
        resource_spans.push(ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", &format!("service-{svc}")), kv("host.name", "node-1")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    ExportTraceServiceRequest { resource_spans }.encode_to_vec()
}

fn main() {
    let requests: Vec<Vec<u8>> = (0..64).map(request).collect();
    let adaptive = Adaptive::new(AdaptiveConfig::default());
    let tenant: Arc<str> = Arc::from("single-tenant");
    let mut summary = RequestSummary::default();
    let n = 2000;
    let spans_per_request = 512.0;
    let mut best = [f64::MAX; 2];
    for _ in 0..7 {
        for (which, count) in [(0, false), (1, true)] {
            let t = Instant::now();
            for i in 0..n {
                let body = &requests[i % requests.len()];
                validate_request(body, &mut summary).expect("valid");
                if count {
                    adaptive.roots(&tenant, body, &summary.roots);
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / (n as f64 * spans_per_request);
            best[which] = best[which].min(ns);
        }
    }
    let roots = {
        validate_request(&requests[0], &mut summary).unwrap();
        summary.roots.len()
    };
    println!(
        "{{\"spans_per_request\": 512, \"roots_per_request\": {roots}, \"validate_ns_per_span\": {:.1}, \"validate_and_count_ns_per_span\": {:.1}, \"count_ns_per_span\": {:.1}, \"count_ns_per_root\": {:.1}}}",
        best[0],
        best[1],
        best[1] - best[0],
        (best[1] - best[0]) * spans_per_request / roots as f64
    );
}
