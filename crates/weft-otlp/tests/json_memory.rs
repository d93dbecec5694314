//! Peak memory of OTLP/JSON ⇄ protobuf. Pins the bugs where a 63 MiB body with 1.4M attributes
//! took 2.2 GiB (about 35x) through `request_from_json` + `encode_to_vec`, and a span with 1.36M
//! attributes took 2.2 GiB to render as 62 MiB of JSON through `TracesData::decode` +
//! `resource_spans_to_json`.

// A counting `#[global_allocator]` needs `unsafe impl GlobalAlloc`; this test binary is the only
// place in the crate that needs unsafe code, and it only forwards to `System`.
#![allow(unsafe_code)]

use prost::Message;
use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use weft_otlp::json::{request_from_json, request_json_to_protobuf, resource_spans_to_json, write_resource_spans_json};
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value};
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, TracesData};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = CURRENT.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

fn shrank(n: usize) {
    CURRENT.fetch_sub(n, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            if new_size > layout.size() {
                // Counted as an allocation and then a free: a moving realloc holds both for a moment.
                grew(new_size);
                shrank(layout.size());
            } else {
                // Shrinking happens in place (glibc splits the chunk, or mremaps a mapped one).
                shrank(layout.size() - new_size);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Held by each test while it measures: the counters are global, and tests run in parallel.
static MEASURING: Mutex<()> = Mutex::new(());

/// Runs `f`, returning its result, the peak bytes allocated above the level at the start
/// (its result included) and the time taken.
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize, Duration) {
    let base = CURRENT.load(Relaxed);
    PEAK.store(base, Relaxed);
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    (out, PEAK.load(Relaxed) - base, took)
}

/// One span with `n` small attributes of mixed kinds.
fn body(n: usize) -> Vec<u8> {
    let mut s = String::from(
        r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},"scopeSpans":[{"scope":{"name":"lib"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"big","kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000000000500","attributes":["#,
    );
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let _ = match i % 4 {
            0 => write!(s, r#"{{"key":"attr.{i:07}","value":{{"stringValue":"v{i:09}"}}}}"#),
            1 => write!(s, r#"{{"key":"attr.{i:07}","value":{{"intValue":"{}"}}}}"#, i * 1000),
            2 => write!(s, r#"{{"key":"attr.{i:07}","value":{{"doubleValue":{}.25}}}}"#, i),
            _ => write!(s, r#"{{"key":"attr.{i:07}","value":{{"boolValue":true}}}}"#),
        };
    }
    s.push_str("]}]}]}]}");
    s.into_bytes()
}

/// The streaming path peaks below 3x the body (its output included); the tree path is only
/// reported.
#[test]
fn json_to_protobuf_peak_memory_is_proportional_to_the_body() {
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let body = body(400_000);
    let mib = body.len() as f64 / (1024.0 * 1024.0);

    let (new, new_peak, new_took) = measure(|| request_json_to_protobuf(&body).expect("valid body"));
    let (old, old_peak, old_took) = measure(|| request_from_json(&body).expect("valid body").encode_to_vec());

    let ratio = |peak: usize| peak as f64 / body.len() as f64;
    let per_mib = |took: Duration| took.as_secs_f64() * 1000.0 / mib;
    println!(
        "body {mib:.1} MiB, 400000 attributes, protobuf {:.1} MiB\n\
         request_json_to_protobuf:          peak {:.2}x body, {:.1} ms/MiB\n\
         request_from_json + encode_to_vec: peak {:.2}x body, {:.1} ms/MiB",
        new.len() as f64 / (1024.0 * 1024.0),
        ratio(new_peak),
        per_mib(new_took),
        ratio(old_peak),
        per_mib(old_took),
    );

    assert!(
        ratio(new_peak) < 3.0,
        "request_json_to_protobuf peaked at {:.2}x the body",
        ratio(new_peak)
    );
    let decoded = ExportTraceServiceRequest::decode(new.as_slice()).expect("output decodes");
    assert_eq!(decoded.encode_to_vec(), old);
}

/// A `TracesData` with one span with `n` small attributes of mixed kinds.
fn big_span(n: usize) -> Vec<u8> {
    use any_value::Value as V;
    let attributes = (0..n)
        .map(|i| KeyValue {
            key: format!("attr.{i:07}"),
            value: Some(AnyValue {
                value: Some(match i % 4 {
                    0 => V::StringValue(format!("v{i:09}")),
                    1 => V::IntValue(i as i64 * 1000),
                    2 => V::DoubleValue(i as f64 + 0.25),
                    _ => V::BoolValue(true),
                }),
            }),
        })
        .collect();
    TracesData {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16].into(),
                    span_id: vec![8; 8].into(),
                    name: "big".into(),
                    kind: 2,
                    start_time_unix_nano: 1_700_000_000_000_000_000,
                    end_time_unix_nano: 1_700_000_000_000_000_500,
                    attributes,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// The streaming renderer peaks below 1.5x its output; the tree path (decode, render a
/// `serde_json::Value`, serialize it) is only reported.
#[test]
fn protobuf_to_json_peak_memory_is_proportional_to_the_output() {
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let pb = big_span(400_000);

    let (new, new_peak, new_took) = measure(|| {
        let mut out = Vec::new();
        write_resource_spans_json(&pb, &mut true, &mut out).expect("valid protobuf");
        out
    });
    let (old, old_peak, old_took) = measure(|| {
        let td = TracesData::decode(pb.as_slice()).expect("valid protobuf");
        serde_json::to_string(&resource_spans_to_json(&td.resource_spans)).expect("serializes")
    });

    let mib = new.len() as f64 / (1024.0 * 1024.0);
    let ratio = |peak: usize| peak as f64 / new.len() as f64;
    let per_mib = |took: Duration| took.as_secs_f64() * 1000.0 / mib;
    println!(
        "protobuf {:.1} MiB, 400000 attributes, JSON {mib:.1} MiB\n\
         write_resource_spans_json:                      peak {:.2}x output, {:.1} ms/MiB\n\
         decode + resource_spans_to_json + to_string:    peak {:.2}x output, {:.1} ms/MiB",
        pb.len() as f64 / (1024.0 * 1024.0),
        ratio(new_peak),
        per_mib(new_took),
        ratio(old_peak),
        per_mib(old_took),
    );

    assert!(
        ratio(new_peak) < 1.5,
        "write_resource_spans_json peaked at {:.2}x its output",
        ratio(new_peak)
    );
    let new: serde_json::Value = serde_json::from_slice(&[b"[", new.as_slice(), b"]"].concat()).expect("JSON");
    let old: serde_json::Value = serde_json::from_str(&old).expect("JSON");
    assert!(new == old, "the renderers disagree");
}
