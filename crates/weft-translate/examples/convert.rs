//! Times the conversion of a Zipkin payload to OTLP: `cargo run --release -p weft-translate
//! --example convert -- FILE [json_v2|json_v1|proto3|thrift_v1|jaeger_thrift] [iterations]`. Prints ns per span,
//! and what validating the OTLP written costs against summarizing it (as the receivers do).
use weft_translate::zipkin::{Encoding, to_otlp_request};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let body = std::fs::read(&args[1]).expect("payload file");
    let enc = match args.get(2).map(String::as_str).unwrap_or("json_v2") {
        "json_v1" => Encoding::JsonV1,
        "proto3" => Encoding::Proto3,
        "thrift_v1" => Encoding::ThriftV1,
        _ => Encoding::JsonV2,
    };
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2000);
    if args.get(2).map(String::as_str) == Some("jaeger_thrift") {
        return jaeger(&body, iters);
    }
    let (_, spans) = to_otlp_request(enc, &body).expect("valid payload");
    let t = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..iters {
        bytes += to_otlp_request(enc, &body).expect("valid").0.len();
    }
    let ns = t.elapsed().as_nanos() as f64 / (iters * spans) as f64;
    let t = std::time::Instant::now();
    for _ in 0..iters {
        std::hint::black_box(weft_translate::zipkin::decode(enc, &body).expect("valid"));
    }
    let decode_ns = t.elapsed().as_nanos() as f64 / (iters * spans) as f64;
    // What the receiver does with the OTLP next: validation (any client's request) against
    // the summary a converted request gets.
    let (otlp, _) = to_otlp_request(enc, &body).expect("valid");
    let mut summary = weft_otlp::request::RequestSummary::default();
    let t = std::time::Instant::now();
    for _ in 0..iters {
        weft_otlp::request::validate_request(std::hint::black_box(&otlp), &mut summary).expect("valid");
    }
    let validate_ns = t.elapsed().as_nanos() as f64 / (iters * spans) as f64;
    let t = std::time::Instant::now();
    for _ in 0..iters {
        weft_otlp::request::summarize_converted(std::hint::black_box(&otlp), &mut summary).expect("valid");
    }
    let summarize_ns = t.elapsed().as_nanos() as f64 / (iters * spans) as f64;
    println!(
        "{spans} spans, {ns:.0} ns/span ({decode_ns:.0} decoding), {:.0} OTLP bytes/span; then \
         {validate_ns:.0} ns/span to validate, {summarize_ns:.0} to summarize",
        bytes as f64 / (iters * spans) as f64
    );
}

/// Jaeger's `POST /api/traces` body (a binary-thrift `Batch`), as the receiver converts it.
fn jaeger(body: &[u8], iters: usize) {
    use weft_translate::jaeger::{decode_http, to_otlp};
    let spans = decode_http(body).expect("valid batch").spans.len();
    let t = std::time::Instant::now();
    for _ in 0..iters {
        std::hint::black_box(to_otlp(&decode_http(body).expect("valid")));
    }
    let ns = t.elapsed().as_nanos() as f64 / (iters * spans) as f64;
    let t = std::time::Instant::now();
    for _ in 0..iters {
        std::hint::black_box(decode_http(body).expect("valid"));
    }
    let decode_ns = t.elapsed().as_nanos() as f64 / (iters * spans) as f64;
    println!("{spans} spans, {ns:.0} ns/span ({decode_ns:.0} decoding)");
}
