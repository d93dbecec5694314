//! Entry points into the core for the shared vectors (`spec/vectors/`), exposed as
//! `weft_sdk._native.testing`. Each runs the same function the SDK runs in production: ID
//! encoding and generation, sampler arithmetic, the OTLP encoder, response decoding and the
//! retry rules. They are not part of the public API.

use std::time::{Duration, SystemTime};

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::SpanKind;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;
use weft_sdk::id::{self, SpanId, TraceId, WyRand};
use weft_sdk::otlp::retry::{self, Outcome};
use weft_sdk::otlp::{AnyKeyValue, AnyValue, Encoder};
use weft_sdk::sampling::{RateLimiter, ResolvedSampler, Strategy, ratio_bound, threshold_for_probability};
use weft_sdk::trace::{EventData, LinkData, SpanData};
use weft_sdk::{SpanContext, TraceState};

fn err(msg: impl Into<String>) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(msg.into())
}

#[pyfunction]
fn hex_encode(bytes: Vec<u8>) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    id::encode_hex(&bytes, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[pyfunction]
fn parse_trace_id(hex: &str) -> Option<u128> {
    id::parse_trace_id(hex.as_bytes()).map(|t| u128::from_be_bytes(t.to_bytes()))
}

#[pyfunction]
fn parse_span_id(hex: &str) -> Option<u64> {
    id::parse_span_id(hex.as_bytes()).map(|s| u64::from_be_bytes(s.to_bytes()))
}

/// `(hex id, draws used)`; fails if the draws run out.
#[pyfunction]
fn id_from_draws(kind: &str, draws: Vec<u64>) -> PyResult<(String, usize)> {
    let mut used = 0;
    let mut short = false;
    let next = || {
        used += 1;
        draws.get(used - 1).copied().unwrap_or_else(|| {
            short = true;
            1
        })
    };
    let hex = match kind {
        "trace_id" => id::trace_id_hex(id::trace_id_from_draws(next)),
        "span_id" => id::span_id_hex(id::span_id_from_draws(next)),
        other => return Err(err(format!("unknown id kind {other:?}"))),
    };
    if short {
        return Err(err("ran out of draws"));
    }
    Ok((hex, used))
}

#[pyfunction]
fn xray_trace_id_from_draws(unix_nanos: u64, draws: Vec<u64>) -> PyResult<String> {
    let mut i = 0;
    let t = id::xray_trace_id_from_draws(unix_nanos, || {
        i += 1;
        draws.get(i - 1).copied().unwrap_or(1)
    });
    if i > draws.len() {
        return Err(err("ran out of draws"));
    }
    Ok(id::trace_id_hex(t))
}

#[pyfunction]
#[pyo3(signature = (parent_flags, sampled))]
fn new_span_flags(parent_flags: Option<u8>, sampled: bool) -> u8 {
    id::new_span_flags(parent_flags, sampled, true)
}

#[pyfunction]
fn wyrand(seed: u64, count: usize) -> Vec<u64> {
    let mut r = WyRand::new(seed);
    (0..count).map(|_| r.next_u64()).collect()
}

#[pyfunction(name = "ratio_bound")]
fn ratio_bound_py(ratio: f64) -> Option<u64> {
    ratio_bound(ratio)
}

#[pyfunction(name = "threshold_for_probability")]
fn threshold_py(p: f64) -> String {
    threshold_for_probability(p)
}

#[pyfunction]
fn rate_limit_sequence(rate: f64, created_ns: u64, calls_ns: Vec<u64>) -> Vec<bool> {
    let mut l = RateLimiter::new(rate, created_ns);
    calls_ns.into_iter().map(|t| l.try_acquire(t)).collect()
}

/// Resolves each operation of a Jaeger strategies body: `(type, a, b)` per operation, where
/// `(a, b)` is `(ratio, 0)`, `(spans_per_second, 0)` or `(ratio, lower_bound)`.
#[pyfunction]
fn jaeger_resolve(body: &str, operations: Vec<String>) -> PyResult<Vec<(String, String, f64, f64)>> {
    let strategy = Strategy::parse(body).map_err(|e| err(e.0))?;
    let mut tracked = 0;
    let mut out = Vec::new();
    for op in operations {
        let r = strategy.resolve(&op, tracked, 2000);
        let (t, a, b) = match r {
            ResolvedSampler::TraceIdRatio(r) => ("trace_id_ratio", r, 0.0),
            ResolvedSampler::RateLimiting(r) => ("rate_limiting", r, 0.0),
            ResolvedSampler::GuaranteedThroughput { ratio, lower_bound } => {
                tracked += 1;
                ("guaranteed_throughput", ratio, lower_bound)
            }
        };
        out.push((op, t.to_owned(), a, b));
    }
    Ok(out)
}

fn http_now(now: Option<&str>) -> PyResult<SystemTime> {
    match now {
        None => Ok(SystemTime::now()),
        Some(d) => retry::parse_retry_after(d, SystemTime::UNIX_EPOCH)
            .map(|x| SystemTime::UNIX_EPOCH + x)
            .ok_or_else(|| err(format!("bad HTTP date {d:?}"))),
    }
}

fn outcome(o: Outcome) -> (&'static str, Option<u64>) {
    match o {
        Outcome::Success => ("success", None),
        Outcome::Permanent => ("permanent", None),
        Outcome::Retryable(d) => ("retryable", d.map(|d| d.as_millis() as u64)),
    }
}

#[pyfunction]
#[pyo3(signature = (status, retry_after, now))]
fn classify_http(status: u16, retry_after: Option<&str>, now: Option<&str>) -> PyResult<(&'static str, Option<u64>)> {
    Ok(outcome(retry::classify_http(status, retry_after, http_now(now)?)))
}

#[pyfunction]
#[pyo3(signature = (code, retry_info_delay_ms))]
fn classify_grpc(code: &str, retry_info_delay_ms: Option<u64>) -> PyResult<(&'static str, Option<u64>)> {
    let c = retry::grpc_code::from_name(code).ok_or_else(|| err(format!("unknown gRPC code {code:?}")))?;
    Ok(outcome(retry::classify_grpc(
        c,
        retry_info_delay_ms.map(Duration::from_millis),
    )))
}

#[pyfunction]
fn backoff_range_ms(k: u32) -> Option<(f64, f64)> {
    retry::backoff_range(k).map(|(lo, hi)| (lo.as_secs_f64() * 1000.0, hi.as_secs_f64() * 1000.0))
}

#[pyfunction]
#[pyo3(signature = (value, now))]
fn parse_retry_after(value: &str, now: Option<&str>) -> PyResult<Option<u64>> {
    Ok(retry::parse_retry_after(value, http_now(now)?).map(|d| d.as_millis() as u64))
}

/// `(rejected_spans, error_message, partial)` of an `ExportTraceServiceResponse`.
#[pyfunction]
fn decode_response(bytes: &[u8]) -> PyResult<(i64, String, bool)> {
    let p = weft_sdk::otlp::decode_export_response(bytes).map_err(|e| err(e.to_string()))?;
    Ok((p.rejected_spans, p.error_message.clone(), p.is_partial()))
}

/// A string field; absent (null) reads as empty, as in `sdk/rust`'s vector runner.
fn s(v: &Value) -> PyResult<&str> {
    match v {
        Value::Null => Ok(""),
        _ => v.as_str().ok_or_else(|| err(format!("expected a string, got {v}"))),
    }
}

fn hex_u128(v: &Value) -> PyResult<u128> {
    u128::from_str_radix(s(v)?, 16).map_err(|e| err(e.to_string()))
}

fn hex_u64(v: &Value) -> PyResult<u64> {
    u64::from_str_radix(s(v)?, 16).map_err(|e| err(e.to_string()))
}

fn dec_u64(v: &Value) -> PyResult<u64> {
    s(v)?.parse().map_err(|e: std::num::ParseIntError| err(e.to_string()))
}

fn any_value(v: &Value) -> PyResult<AnyValue> {
    let (k, x) = v
        .as_object()
        .and_then(|m| m.iter().next())
        .ok_or_else(|| err("a value is a one-member object"))?;
    Ok(match k.as_str() {
        "string" => AnyValue::String(s(x)?.to_owned()),
        "int" => AnyValue::Int(s(x)?.parse().map_err(|e: std::num::ParseIntError| err(e.to_string()))?),
        "double" => AnyValue::Double(x.as_f64().ok_or_else(|| err("double"))?),
        "bool" => AnyValue::Bool(x.as_bool().ok_or_else(|| err("bool"))?),
        "array" => AnyValue::Array(
            x.as_array()
                .ok_or_else(|| err("array"))?
                .iter()
                .map(any_value)
                .collect::<PyResult<_>>()?,
        ),
        "kvlist" => AnyValue::KvList(any_attrs(x)?),
        "bytes" => {
            let h = s(x)?;
            AnyValue::Bytes(
                (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|e| err(e.to_string())))
                    .collect::<PyResult<_>>()?,
            )
        }
        other => return Err(err(format!("unknown value type {other}"))),
    })
}

fn any_attrs(v: &Value) -> PyResult<Vec<AnyKeyValue>> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            Ok(AnyKeyValue {
                key: s(&kv["key"])?.to_owned(),
                value: any_value(&kv["value"])?,
            })
        })
        .collect()
}

fn api_attrs(v: &Value) -> PyResult<Vec<opentelemetry::KeyValue>> {
    any_attrs(v)?
        .into_iter()
        .map(|kv| {
            let value: opentelemetry::Value = match kv.value {
                AnyValue::String(s) => s.into(),
                AnyValue::Int(i) => i.into(),
                AnyValue::Double(d) => d.into(),
                AnyValue::Bool(b) => b.into(),
                other => return Err(err(format!("attribute {other:?} is not expressible in the API"))),
            };
            Ok(opentelemetry::KeyValue::new(kv.key, value))
        })
        .collect()
}

fn u32_of(v: &Value) -> u32 {
    v.as_u64().unwrap_or(0) as u32
}

fn span_data(v: &Value, scope: u32) -> PyResult<SpanData<AnyKeyValue>> {
    use opentelemetry::trace::SpanKind::*;
    let mut d = SpanData::new(
        TraceId::from(hex_u128(&v["trace_id"])?),
        SpanId::from(hex_u64(&v["span_id"])?),
        s(&v["name"])?.to_owned(),
    );
    d.trace_state = TraceState::parse_str(s(&v["trace_state"])?).map_err(|e| err(format!("{e:?}")))?;
    if !v["parent_span_id"].is_null() {
        d.parent_span_id = SpanId::from(hex_u64(&v["parent_span_id"])?);
    }
    d.kind = match s(&v["kind"])? {
        "SERVER" => Server,
        "CLIENT" => Client,
        "PRODUCER" => Producer,
        "CONSUMER" => Consumer,
        _ => Internal,
    };
    d.start_time_unix_nano = dec_u64(&v["start_time_unix_nano"])?;
    d.end_time_unix_nano = dec_u64(&v["end_time_unix_nano"])?;
    d.trace_flags = u8::from_str_radix(s(&v["trace_flags"])?, 16).map_err(|e| err(e.to_string()))?;
    d.parent_is_remote = v["parent_is_remote"].as_bool().unwrap_or(false);
    d.attributes = any_attrs(&v["attributes"])?;
    d.dropped_attributes_count = u32_of(&v["dropped_attributes_count"]);
    for e in v["events"].as_array().into_iter().flatten() {
        d.events.push(EventData {
            name: s(&e["name"])?.to_owned().into(),
            time_unix_nano: dec_u64(&e["time_unix_nano"])?,
            attributes: any_attrs(&e["attributes"])?,
            dropped_attributes_count: u32_of(&e["dropped_attributes_count"]),
        });
    }
    d.dropped_events_count = u32_of(&v["dropped_events_count"]);
    for l in v["links"].as_array().into_iter().flatten() {
        d.links.push(LinkData {
            context: SpanContext::new(
                TraceId::from(hex_u128(&l["trace_id"])?),
                SpanId::from(hex_u64(&l["span_id"])?),
                u8::from_str_radix(s(&l["trace_flags"])?, 16).map_err(|e| err(e.to_string()))?,
                l["is_remote"].as_bool().unwrap_or(false),
            ),
            trace_state: TraceState::parse_str(s(&l["trace_state"])?).map_err(|e| err(format!("{e:?}")))?,
            attributes: any_attrs(&l["attributes"])?,
            dropped_attributes_count: u32_of(&l["dropped_attributes_count"]),
        });
    }
    d.dropped_links_count = u32_of(&v["dropped_links_count"]);
    d.status = match v["status"]["code"].as_str().unwrap_or("UNSET") {
        "OK" => opentelemetry::trace::Status::Ok,
        "ERROR" => opentelemetry::trace::Status::error(v["status"]["message"].as_str().unwrap_or("").to_owned()),
        _ => opentelemetry::trace::Status::Unset,
    };
    d.scope = scope;
    Ok(d)
}

/// Encodes the `encode_request` vector input (as JSON) with the exporter's encoder.
#[pyfunction]
fn encode_request<'py>(py: Python<'py>, input_json: &str) -> PyResult<Bound<'py, PyBytes>> {
    let input: Value = serde_json::from_str(input_json).map_err(|e| err(e.to_string()))?;
    let r = &input["resource"];
    let resource = weft_sdk::Resource {
        attributes: api_attrs(&r["attributes"])?,
        schema_url: r["schema_url"].as_str().map(str::to_owned),
        dropped_attributes_count: u32_of(&r["dropped_attributes_count"]),
    };
    let mut scopes = Vec::new();
    let mut spans = Vec::new();
    for (i, ss) in input["scope_spans"].as_array().into_iter().flatten().enumerate() {
        let sc = &ss["scope"];
        let mut b =
            InstrumentationScope::builder(s(&sc["name"])?.to_owned()).with_attributes(api_attrs(&sc["attributes"])?);
        if let Some(ver) = sc["version"].as_str() {
            b = b.with_version(ver.to_owned());
        }
        if let Some(url) = ss["schema_url"].as_str() {
            b = b.with_schema_url(url.to_owned());
        }
        scopes.push(b.build());
        for sp in ss["spans"].as_array().into_iter().flatten() {
            spans.push(span_data(sp, i as u32)?);
        }
    }
    let mut buf = Vec::new();
    Encoder::new().encode(&mut buf, &resource, &scopes, &spans);
    Ok(PyBytes::new(py, &buf))
}

static HAMMER_STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static HAMMERS: std::sync::Mutex<Vec<std::thread::JoinHandle<u64>>> = std::sync::Mutex::new(Vec::new());

/// Starts `threads` Rust threads (no GIL) that alternate spans between two pipelines, so every
/// span start and end takes `sdk/rust`'s pipeline-registry lock (its first-use path), and one
/// more that holds that lock for `hold_us` microseconds at a time, half the time (a slow
/// first use), so that a fork at any instant is likely to find it held.
#[pyfunction]
fn start_registry_hammer(threads: usize, hold_us: u64) {
    use opentelemetry::trace::TracerProvider as _;
    HAMMER_STOP.store(false, std::sync::atomic::Ordering::SeqCst);
    let mut hs = HAMMERS.lock().unwrap_or_else(|p| p.into_inner());
    if hold_us > 0 {
        hs.push(std::thread::spawn(move || {
            let mut n = 0;
            while !HAMMER_STOP.load(std::sync::atomic::Ordering::Relaxed) {
                weft_sdk::export::prepare_fork();
                std::thread::sleep(Duration::from_micros(hold_us));
                weft_sdk::export::after_fork();
                std::thread::sleep(Duration::from_micros(hold_us));
                n += 1;
            }
            n
        }));
    }
    for _ in 0..threads {
        hs.push(std::thread::spawn(|| {
            let a = weft_sdk::TracerProvider::builder()
                .with_exporter(weft_sdk::export::NoopExporter)
                .build();
            let b = weft_sdk::TracerProvider::builder()
                .with_exporter(weft_sdk::export::NoopExporter)
                .build();
            let (ta, tb) = (a.tracer("hammer-a"), b.tracer("hammer-b"));
            let mut n = 0u64;
            while !HAMMER_STOP.load(std::sync::atomic::Ordering::Relaxed) {
                for t in [&ta, &tb] {
                    drop(t.start_with_options("x", SpanKind::Internal, None, Vec::new(), Vec::new(), None));
                    n += 1;
                }
            }
            n
        }));
    }
}

/// Stops the threads of `start_registry_hammer`; returns how many spans they made.
#[pyfunction]
fn stop_registry_hammer(py: Python<'_>) -> u64 {
    HAMMER_STOP.store(true, std::sync::atomic::Ordering::SeqCst);
    let hs = std::mem::take(&mut *HAMMERS.lock().unwrap_or_else(|p| p.into_inner()));
    py.allow_threads(|| hs.into_iter().map(|h| h.join().unwrap_or(0)).sum())
}

pub(crate) fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "testing")?;
    m.add_function(wrap_pyfunction!(hex_encode, &m)?)?;
    m.add_function(wrap_pyfunction!(parse_trace_id, &m)?)?;
    m.add_function(wrap_pyfunction!(parse_span_id, &m)?)?;
    m.add_function(wrap_pyfunction!(id_from_draws, &m)?)?;
    m.add_function(wrap_pyfunction!(xray_trace_id_from_draws, &m)?)?;
    m.add_function(wrap_pyfunction!(new_span_flags, &m)?)?;
    m.add_function(wrap_pyfunction!(wyrand, &m)?)?;
    m.add_function(wrap_pyfunction!(ratio_bound_py, &m)?)?;
    m.add_function(wrap_pyfunction!(threshold_py, &m)?)?;
    m.add_function(wrap_pyfunction!(rate_limit_sequence, &m)?)?;
    m.add_function(wrap_pyfunction!(jaeger_resolve, &m)?)?;
    m.add_function(wrap_pyfunction!(classify_http, &m)?)?;
    m.add_function(wrap_pyfunction!(classify_grpc, &m)?)?;
    m.add_function(wrap_pyfunction!(backoff_range_ms, &m)?)?;
    m.add_function(wrap_pyfunction!(parse_retry_after, &m)?)?;
    m.add_function(wrap_pyfunction!(decode_response, &m)?)?;
    m.add_function(wrap_pyfunction!(encode_request, &m)?)?;
    m.add_function(wrap_pyfunction!(crate::propagate::remote_span, &m)?)?;
    m.add_function(wrap_pyfunction!(crate::propagate::span_extras, &m)?)?;
    m.add_function(wrap_pyfunction!(crate::logbridge::warn_from_native_thread, &m)?)?;
    m.add_function(wrap_pyfunction!(start_registry_hammer, &m)?)?;
    m.add_function(wrap_pyfunction!(stop_registry_hammer, &m)?)?;
    parent.add_submodule(&m)?;
    Ok(())
}
