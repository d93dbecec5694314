//! Runs every shared vector in `spec/vectors/*.json` (spec/README.md#vector-files).
//!
//! One test per file; each collects every failing vector by name and fails with the full list.
//! No vector is skipped: `SKIPPED` is empty and must name a reason for any entry added to it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use weft_sdk::baggage::Baggage;
use weft_sdk::context::{FullSpanContext, SpanContext};
use weft_sdk::id::{self, SpanId, TraceId, WyRand};
use weft_sdk::otlp::retry::{self, Outcome};
use weft_sdk::otlp::{AnyKeyValue, AnyValue, Encoder};
use weft_sdk::propagation::{
    B3Encoding, B3Propagator, BaggagePropagator, CompositePropagator, HeaderVec, JaegerPropagator, PropagatedContext,
    Propagator, TraceContextPropagator, XrayPropagator,
};
use weft_sdk::sampling::{
    AlwaysOff, AlwaysOn, ConsistentProbabilitySampler, Decision, ParentBased, ParentRef, RateLimiter,
    RateLimitingSampler, ResolvedSampler, Sampler, SamplingParams, Strategy, TraceIdRatioSampler, ratio_bound,
    threshold_for_probability,
};
use weft_sdk::trace::{EventData, LinkData, SpanData};
use weft_sdk::tracestate::TraceState;

/// Vectors deliberately not run, with the reason. Empty: weft runs every vector.
const SKIPPED: &[(&str, &str)] = &[];

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

fn load(file: &str) -> Vec<Value> {
    let path = vectors_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    assert_eq!(doc["version"], 1, "{file}: unknown vector format version");
    doc["vectors"].as_array().expect("vectors array").clone()
}

/// Runs `check` on every vector of `file`, and fails listing every vector that failed.
fn run(file: &str, check: impl Fn(&Value) -> Result<(), String>) {
    let vectors = load(file);
    assert!(!vectors.is_empty(), "{file} has no vectors");
    let mut failures = Vec::new();
    let mut ran = 0;
    for v in &vectors {
        let name = v["name"].as_str().unwrap_or("?");
        if SKIPPED.iter().any(|(n, _)| *n == name) {
            continue;
        }
        ran += 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(v))).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(format!("panicked: {}", msg.unwrap_or_default()))
        });
        if let Err(e) = r {
            failures.push(format!("{name}: {e}"));
        }
    }
    println!("{file}: {ran} vectors run, {} failed", failures.len());
    assert!(
        failures.is_empty(),
        "{file}: {} of {ran} vectors failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn hex_u128(v: &Value) -> u128 {
    u128::from_str_radix(s(v), 16).expect("hex")
}

fn hex_u64(v: &Value) -> u64 {
    u64::from_str_radix(s(v), 16).expect("hex")
}

fn u64_str(v: &Value) -> u64 {
    s(v).parse().expect("decimal string")
}

fn headers(v: &Value) -> HeaderVec {
    let mut h = HeaderVec::new();
    if let Some(map) = v.as_object() {
        for (name, values) in map {
            for value in values.as_array().expect("header values are lists") {
                h.append(name.clone(), s(value));
            }
        }
    }
    h
}

fn header_map(h: &HeaderVec) -> BTreeMap<String, String> {
    h.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn expected_headers(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), s(v).to_owned())).collect())
        .unwrap_or_default()
}

fn propagator(input: &Value) -> Box<dyn Propagator> {
    if let Some(names) = input["propagators"].as_array() {
        let (p, unknown) = CompositePropagator::from_names(names.iter().map(s));
        assert!(unknown.is_empty(), "unknown propagators {unknown:?}");
        return Box::new(p);
    }
    let p = &input["propagator"];
    match s(&p["name"]) {
        "tracecontext" => Box::new(TraceContextPropagator::new()),
        "baggage" => Box::new(BaggagePropagator::new()),
        "b3" => Box::new(B3Propagator::new(match s(&p["inject_encoding"]) {
            "multi" => B3Encoding::Multi,
            _ => B3Encoding::Single,
        })),
        "b3multi" => Box::new(B3Propagator::new(B3Encoding::Multi)),
        "xray" => Box::new(XrayPropagator::new()),
        "jaeger" => Box::new(JaegerPropagator::new()),
        other => panic!("unknown propagator {other}"),
    }
}

fn baggage(v: &Value) -> Baggage {
    let mut b = Baggage::new();
    for e in v.as_array().into_iter().flatten() {
        b.insert(s(&e["key"]), s(&e["value"]), s(&e["metadata"]));
    }
    b
}

fn baggage_json(b: &Baggage) -> Value {
    Value::Array(
        b.entries()
            .iter()
            .map(|e| serde_json::json!({"key": e.key, "value": e.value, "metadata": e.metadata}))
            .collect(),
    )
}

fn context(v: &Value) -> FullSpanContext {
    FullSpanContext {
        context: SpanContext::new(
            TraceId::from(hex_u128(&v["trace_id"])),
            SpanId::from(hex_u64(&v["span_id"])),
            u8::from_str_radix(s(&v["trace_flags"]), 16).expect("flags"),
            v["is_remote"].as_bool().unwrap_or(false),
        ),
        trace_state: TraceState::parse_str(s(&v["tracestate"])).expect("vector tracestate is valid"),
        b3_debug: v["b3_debug"].as_bool().unwrap_or(false),
        jaeger_debug: v["jaeger_debug"].as_bool().unwrap_or(false),
        xray_lineage: v["xray_lineage"].as_str().map(str::to_owned),
    }
}

fn check_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn propagation_vector(v: &Value) -> Result<(), String> {
    let input = &v["input"];
    let expected = &v["expected"];
    let p = propagator(input);
    match s(&v["operation"]) {
        "extract" => {
            let mut cx = PropagatedContext::default();
            p.extract(&headers(&input["headers"]), &mut cx);
            let valid = expected["valid"].as_bool().expect("valid");
            check_eq("valid", cx.span.is_some(), valid)?;
            if let Some(span) = &cx.span {
                let c = &span.context;
                check_eq(
                    "trace_id",
                    id::trace_id_hex(c.trace_id),
                    s(&expected["trace_id"]).to_owned(),
                )?;
                check_eq(
                    "span_id",
                    id::span_id_hex(c.span_id),
                    s(&expected["span_id"]).to_owned(),
                )?;
                check_eq(
                    "trace_flags",
                    format!("{:02x}", c.trace_flags),
                    s(&expected["trace_flags"]).to_owned(),
                )?;
                check_eq(
                    "is_remote",
                    c.is_remote,
                    expected["is_remote"].as_bool().unwrap_or(true),
                )?;
                check_eq("tracestate", span.trace_state.as_str(), s(&expected["tracestate"]))?;
                if let Some(d) = expected["b3_debug"].as_bool() {
                    check_eq("b3_debug", span.b3_debug, d)?;
                }
                if let Some(d) = expected["jaeger_debug"].as_bool() {
                    check_eq("jaeger_debug", span.jaeger_debug, d)?;
                }
                let want_lineage = expected["xray_lineage"].as_str();
                check_eq("xray_lineage", span.xray_lineage.as_deref(), want_lineage)?;
            }
            if !expected["baggage"].is_null() {
                check_eq("baggage", baggage_json(&cx.baggage), expected["baggage"].clone())?;
            }
            if let Some(re) = expected.get("reinject") {
                let mut out = HeaderVec::new();
                p.inject(&cx, &mut out);
                check_eq("reinject", header_map(&out), expected_headers(re))?;
            }
            Ok(())
        }
        "inject" => {
            let span = (!input["context"].is_null())
                .then(|| context(&input["context"]))
                .filter(|c| c.context.is_valid());
            let cx = PropagatedContext {
                span,
                baggage: baggage(&input["baggage"]),
            };
            let mut out = HeaderVec::new();
            p.inject(&cx, &mut out);
            check_eq("headers", header_map(&out), expected_headers(&expected["headers"]))
        }
        op => Err(format!("unknown operation {op}")),
    }
}

#[test]
fn traceparent_vectors() {
    run("traceparent.json", propagation_vector);
}

#[test]
fn tracestate_vectors() {
    run("tracestate.json", propagation_vector);
}

#[test]
fn baggage_vectors() {
    run("baggage.json", propagation_vector);
}

#[test]
fn b3_vectors() {
    run("b3.json", propagation_vector);
}

#[test]
fn xray_vectors() {
    run("xray.json", propagation_vector);
}

#[test]
fn jaeger_vectors() {
    run("jaeger.json", propagation_vector);
}

#[test]
fn composite_vectors() {
    run("composite.json", propagation_vector);
}

fn draws(v: &Value) -> Vec<u64> {
    v.as_array().expect("draws").iter().map(hex_u64).collect()
}

#[test]
fn id_vectors() {
    run("ids.json", |v| {
        let input = &v["input"];
        let expected = &v["expected"];
        match s(&v["operation"]) {
            "hex_encode" => {
                let bytes: Vec<u8> = input["bytes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_u64().unwrap() as u8)
                    .collect();
                let mut out = vec![0u8; bytes.len() * 2];
                id::encode_hex(&bytes, &mut out);
                check_eq("hex", String::from_utf8(out).unwrap(), s(&expected["hex"]).to_owned())
            }
            "validate" => {
                let hex = s(&input["hex"]).as_bytes();
                let valid = match s(&input["kind"]) {
                    "trace_id" => id::parse_trace_id(hex).is_some(),
                    _ => id::parse_span_id(hex).is_some(),
                };
                check_eq("valid", valid, expected["valid"].as_bool().unwrap())
            }
            "generate" => {
                if s(&input["kind"]) == "trace_flags" {
                    let parent = input["parent_trace_flags"]
                        .as_str()
                        .map(|f| u8::from_str_radix(f, 16).unwrap());
                    let flags = id::new_span_flags(parent, input["sampled"].as_bool().unwrap(), true);
                    return check_eq(
                        "trace_flags",
                        format!("{flags:02x}"),
                        s(&expected["trace_flags"]).to_owned(),
                    );
                }
                let d = draws(&input["draws"]);
                let mut used = 0;
                let next = || {
                    used += 1;
                    d[used - 1]
                };
                let got = match s(&input["kind"]) {
                    "trace_id" => id::trace_id_hex(id::trace_id_from_draws(next)),
                    _ => id::span_id_hex(id::span_id_from_draws(next)),
                };
                check_eq("id", got, s(&expected["id"]).to_owned())?;
                check_eq("draws_used", used as u64, expected["draws_used"].as_u64().unwrap())
            }
            "generate_xray" => {
                let d = draws(&input["draws"]);
                let mut i = 0;
                let t = id::xray_trace_id_from_draws(u64_str(&input["unix_nanos"]), || {
                    i += 1;
                    d[i - 1]
                });
                let hex = id::trace_id_hex(t);
                check_eq("trace_id", hex.clone(), s(&expected["trace_id"]).to_owned())?;
                check_eq(
                    "xray_root",
                    format!("1-{}-{}", &hex[..8], &hex[8..]),
                    s(&expected["xray_root"]).to_owned(),
                )
            }
            "prng_wyrand" => {
                let mut r = WyRand::new(hex_u64(&input["seed"]));
                let n = input["count"].as_u64().unwrap();
                let got: Vec<String> = (0..n).map(|_| format!("{:016x}", r.next_u64())).collect();
                let want: Vec<String> = expected["outputs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| s(x).to_owned())
                    .collect();
                check_eq("outputs", got, want)
            }
            op => Err(format!("unknown operation {op}")),
        }
    });
}

fn sampler(v: &Value) -> Box<dyn Sampler> {
    match s(&v["type"]) {
        "always_on" => Box::new(AlwaysOn),
        "always_off" => Box::new(AlwaysOff),
        "trace_id_ratio" => Box::new(TraceIdRatioSampler::new(v["ratio"].as_f64().unwrap())),
        "consistent_probability" => Box::new(ConsistentProbabilitySampler::new(v["probability"].as_f64().unwrap())),
        "rate_limiting" => Box::new(RateLimitingSampler::new(v["spans_per_second"].as_f64().unwrap())),
        "parent_based" => {
            let mut p = ParentBased::new(sampler(&v["root"]));
            for slot in [
                "remote_parent_sampled",
                "remote_parent_not_sampled",
                "local_parent_sampled",
                "local_parent_not_sampled",
            ] {
                if v[slot].is_null() {
                    continue;
                }
                let d = sampler(&v[slot]);
                p = match slot {
                    "remote_parent_sampled" => p.with_remote_parent_sampled(d),
                    "remote_parent_not_sampled" => p.with_remote_parent_not_sampled(d),
                    "local_parent_sampled" => p.with_local_parent_sampled(d),
                    _ => p.with_local_parent_not_sampled(d),
                };
            }
            Box::new(p)
        }
        other => panic!("unknown sampler {other}"),
    }
}

fn resolved_json(r: ResolvedSampler) -> Value {
    match r {
        ResolvedSampler::TraceIdRatio(ratio) => serde_json::json!({"type": "trace_id_ratio", "ratio": ratio}),
        ResolvedSampler::RateLimiting(rate) => serde_json::json!({"type": "rate_limiting", "spans_per_second": rate}),
        ResolvedSampler::GuaranteedThroughput { ratio, lower_bound } => {
            serde_json::json!({"type": "guaranteed_throughput", "ratio": ratio, "lower_bound": lower_bound})
        }
    }
}

fn numbers_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| numbers_equal(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn sampling_vectors() {
    run("sampling.json", |v| {
        let input = &v["input"];
        let expected = &v["expected"];
        match s(&v["operation"]) {
            "trace_id_ratio_bound" => match ratio_bound(input["ratio"].as_f64().unwrap()) {
                None => check_eq("sample_all", true, expected["sample_all"].as_bool().unwrap_or(false)),
                Some(b) => check_eq("bound", format!("{b:016x}"), s(&expected["bound"]).to_owned()),
            },
            "threshold_encode" => {
                let th = threshold_for_probability(input["probability"].as_f64().unwrap());
                check_eq("th", th.clone(), s(&expected["th"]).to_owned())?;
                check_eq("threshold", format!("{th:0<14}"), s(&expected["threshold"]).to_owned())
            }
            "should_sample" => {
                let sampler = sampler(&input["sampler"]);
                let parent = (!input["parent"].is_null()).then(|| context(&input["parent"]));
                let params = SamplingParams {
                    parent: parent.as_ref().map(|p| ParentRef {
                        context: p.context,
                        trace_state: &p.trace_state,
                    }),
                    ..SamplingParams::root(TraceId::from(hex_u128(&input["trace_id"])), s(&input["name"]))
                };
                let r = sampler.should_sample(&params);
                let decision = match r.decision {
                    Decision::Drop => "DROP",
                    Decision::RecordOnly => "RECORD_ONLY",
                    Decision::RecordAndSample => "RECORD_AND_SAMPLE",
                };
                check_eq("decision", decision, s(&expected["decision"]))?;
                check_eq(
                    "tracestate",
                    r.resolved_trace_state(&params).as_str().to_owned(),
                    s(&expected["tracestate"]).to_owned(),
                )
            }
            "rate_limit_sequence" => {
                let mut l = RateLimiter::new(
                    input["spans_per_second"].as_f64().unwrap(),
                    u64_str(&input["created_ns"]),
                );
                let got: Vec<bool> = input["calls_ns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| l.try_acquire(u64_str(t)))
                    .collect();
                let want: Vec<bool> = expected["sampled"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_bool().unwrap())
                    .collect();
                check_eq("sampled", got, want)
            }
            "jaeger_remote_resolve" => match Strategy::parse(s(&input["body"])) {
                Err(e) => {
                    check_eq("valid", false, expected["valid"].as_bool().unwrap()).map_err(|m| format!("{m} ({e})"))
                }
                Ok(strategy) => {
                    check_eq("valid", true, expected["valid"].as_bool().unwrap())?;
                    let mut tracked = 0;
                    let mut got = serde_json::Map::new();
                    for op in input["operations"].as_array().unwrap() {
                        let r = strategy.resolve(s(op), tracked, 2000);
                        if matches!(r, ResolvedSampler::GuaranteedThroughput { .. }) {
                            tracked += 1;
                        }
                        got.insert(s(op).to_owned(), resolved_json(r));
                    }
                    let got = Value::Object(got);
                    if numbers_equal(&got, &expected["samplers"]) {
                        Ok(())
                    } else {
                        Err(format!("samplers: got {got}, want {}", expected["samplers"]))
                    }
                }
            },
            op => Err(format!("unknown operation {op}")),
        }
    });
}

fn any_value(v: &Value) -> AnyValue {
    let (k, x) = v
        .as_object()
        .and_then(|m| m.iter().next())
        .expect("one-member value object");
    match k.as_str() {
        "string" => AnyValue::String(s(x).to_owned()),
        "int" => AnyValue::Int(s(x).parse().expect("int as decimal string")),
        "double" => AnyValue::Double(x.as_f64().expect("double")),
        "bool" => AnyValue::Bool(x.as_bool().expect("bool")),
        "array" => AnyValue::Array(x.as_array().unwrap().iter().map(any_value).collect()),
        "kvlist" => AnyValue::KvList(any_attrs(x)),
        "bytes" => AnyValue::Bytes(
            (0..s(x).len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s(x)[i..i + 2], 16).unwrap())
                .collect(),
        ),
        other => panic!("unknown value type {other}"),
    }
}

fn any_attrs(v: &Value) -> Vec<AnyKeyValue> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|kv| AnyKeyValue {
            key: s(&kv["key"]).to_owned(),
            value: any_value(&kv["value"]),
        })
        .collect()
}

fn api_attrs(v: &Value) -> Vec<opentelemetry::KeyValue> {
    any_attrs(v)
        .into_iter()
        .map(|kv| {
            let value: opentelemetry::Value = match kv.value {
                AnyValue::String(s) => s.into(),
                AnyValue::Int(i) => i.into(),
                AnyValue::Double(d) => d.into(),
                AnyValue::Bool(b) => b.into(),
                other => panic!("resource/scope attribute {other:?} is not expressible in the API"),
            };
            opentelemetry::KeyValue::new(kv.key, value)
        })
        .collect()
}

fn u32_of(v: &Value) -> u32 {
    v.as_u64().unwrap_or(0) as u32
}

fn kind(v: &Value) -> opentelemetry::trace::SpanKind {
    use opentelemetry::trace::SpanKind::*;
    match s(v) {
        "SERVER" => Server,
        "CLIENT" => Client,
        "PRODUCER" => Producer,
        "CONSUMER" => Consumer,
        _ => Internal,
    }
}

fn span_data(v: &Value, scope: u32) -> SpanData<AnyKeyValue> {
    let mut d = SpanData::new(
        TraceId::from(hex_u128(&v["trace_id"])),
        SpanId::from(hex_u64(&v["span_id"])),
        s(&v["name"]).to_owned(),
    );
    d.trace_state = TraceState::parse_str(s(&v["trace_state"])).unwrap();
    if !v["parent_span_id"].is_null() {
        d.parent_span_id = SpanId::from(hex_u64(&v["parent_span_id"]));
    }
    d.kind = kind(&v["kind"]);
    d.start_time_unix_nano = u64_str(&v["start_time_unix_nano"]);
    d.end_time_unix_nano = u64_str(&v["end_time_unix_nano"]);
    d.trace_flags = u8::from_str_radix(s(&v["trace_flags"]), 16).unwrap();
    d.parent_is_remote = v["parent_is_remote"].as_bool().unwrap_or(false);
    d.attributes = any_attrs(&v["attributes"]);
    d.dropped_attributes_count = u32_of(&v["dropped_attributes_count"]);
    d.events = v["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| EventData {
            name: s(&e["name"]).to_owned().into(),
            time_unix_nano: u64_str(&e["time_unix_nano"]),
            attributes: any_attrs(&e["attributes"]),
            dropped_attributes_count: u32_of(&e["dropped_attributes_count"]),
        })
        .collect();
    d.dropped_events_count = u32_of(&v["dropped_events_count"]);
    d.links = v["links"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| LinkData {
            context: SpanContext::new(
                TraceId::from(hex_u128(&l["trace_id"])),
                SpanId::from(hex_u64(&l["span_id"])),
                u8::from_str_radix(s(&l["trace_flags"]), 16).unwrap(),
                l["is_remote"].as_bool().unwrap_or(false),
            ),
            trace_state: TraceState::parse_str(s(&l["trace_state"])).unwrap(),
            attributes: any_attrs(&l["attributes"]),
            dropped_attributes_count: u32_of(&l["dropped_attributes_count"]),
        })
        .collect();
    d.dropped_links_count = u32_of(&v["dropped_links_count"]);
    d.status = match s(&v["status"]["code"]) {
        "OK" => opentelemetry::trace::Status::Ok,
        "ERROR" => opentelemetry::trace::Status::error(s(&v["status"]["message"]).to_owned()),
        _ => opentelemetry::trace::Status::Unset,
    };
    d.scope = scope;
    d
}

fn http_date(v: &Value) -> SystemTime {
    v.as_str().map(httpdate_parse).unwrap_or_else(SystemTime::now)
}

fn httpdate_parse(d: &str) -> SystemTime {
    // Parsing through the SDK keeps the test free of a date dependency: "0 seconds after `d`".
    let base = SystemTime::UNIX_EPOCH;
    let delay = retry::parse_retry_after(d, base).expect("vector date parses");
    base + delay
}

#[test]
fn otlp_vectors() {
    run("otlp.json", |v| {
        let input = &v["input"];
        let expected = &v["expected"];
        match s(&v["operation"]) {
            "encode_request" => {
                let r = &input["resource"];
                let resource = weft_sdk::Resource {
                    attributes: api_attrs(&r["attributes"]),
                    schema_url: r["schema_url"].as_str().map(str::to_owned),
                    dropped_attributes_count: u32_of(&r["dropped_attributes_count"]),
                };
                let mut scopes = Vec::new();
                let mut spans = Vec::new();
                for (i, ss) in input["scope_spans"].as_array().unwrap().iter().enumerate() {
                    let sc = &ss["scope"];
                    let mut b = opentelemetry::InstrumentationScope::builder(s(&sc["name"]).to_owned())
                        .with_attributes(api_attrs(&sc["attributes"]));
                    if let Some(ver) = sc["version"].as_str() {
                        b = b.with_version(ver.to_owned());
                    }
                    if let Some(url) = ss["schema_url"].as_str() {
                        b = b.with_schema_url(url.to_owned());
                    }
                    scopes.push(b.build());
                    for sp in ss["spans"].as_array().into_iter().flatten() {
                        spans.push(span_data(sp, i as u32));
                    }
                }
                let mut buf = Vec::new();
                Encoder::new().encode(&mut buf, &resource, &scopes, &spans);
                let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
                check_eq("length", buf.len() as u64, expected["length"].as_u64().unwrap())?;
                check_eq("hex", hex, s(&expected["hex"]).to_owned())
            }
            "decode_response" => {
                let h = s(&input["hex"]);
                let bytes: Vec<u8> = (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                    .collect();
                let p = weft_sdk::otlp::decode_export_response(&bytes).map_err(|e| e.to_string())?;
                check_eq(
                    "rejected_spans",
                    p.rejected_spans,
                    expected["rejected_spans"].as_i64().unwrap(),
                )?;
                check_eq("error_message", p.error_message.as_str(), s(&expected["error_message"]))?;
                check_eq("partial", p.is_partial(), expected["partial"].as_bool().unwrap())
            }
            "classify_response" => {
                let outcome = match s(&input["transport"]) {
                    "http" if !input["error"].is_null() => Outcome::Retryable(None),
                    "http" => {
                        let h = headers(&input["headers"]);
                        retry::classify_http(
                            input["status"].as_u64().unwrap() as u16,
                            h.get("retry-after"),
                            http_date(&input["now"]),
                        )
                    }
                    _ => retry::classify_grpc(
                        retry::grpc_code::from_name(s(&input["code"])).expect("grpc code name"),
                        input["retry_info_delay_ms"].as_u64().map(Duration::from_millis),
                    ),
                };
                let (name, delay) = match outcome {
                    Outcome::Success => ("success", None),
                    Outcome::Permanent => ("permanent", None),
                    Outcome::Retryable(d) => ("retryable", d),
                };
                check_eq("outcome", name, s(&expected["outcome"]))?;
                check_eq(
                    "delay_ms",
                    delay.map(|d| d.as_millis() as u64),
                    expected["delay_ms"].as_u64(),
                )
            }
            "backoff" => {
                let k = input["retry"].as_u64().unwrap() as u32;
                match retry::backoff_range(k) {
                    None => check_eq("give_up", true, expected["give_up"].as_bool().unwrap_or(false)),
                    Some((lo, hi)) => {
                        check_eq(
                            "min_ms",
                            lo.as_secs_f64() * 1000.0,
                            expected["min_ms"].as_f64().unwrap(),
                        )?;
                        check_eq(
                            "max_ms",
                            hi.as_secs_f64() * 1000.0,
                            expected["max_ms"].as_f64().unwrap(),
                        )
                    }
                }
            }
            "parse_retry_after" => {
                let d = retry::parse_retry_after(s(&input["value"]), http_date(&input["now"]));
                check_eq(
                    "delay_ms",
                    d.map(|d| d.as_millis() as u64),
                    expected["delay_ms"].as_u64(),
                )
            }
            op => Err(format!("unknown operation {op}")),
        }
    });
}

#[test]
fn every_vector_file_has_a_runner() {
    let mut files: Vec<String> = std::fs::read_dir(vectors_dir())
        .expect("spec/vectors exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    let covered = [
        "b3.json",
        "baggage.json",
        "composite.json",
        "ids.json",
        "jaeger.json",
        "otlp.json",
        "sampling.json",
        "traceparent.json",
        "tracestate.json",
        "xray.json",
    ];
    for f in &files {
        assert!(
            covered.contains(&f.as_str()),
            "spec/vectors/{f} has no runner in tests/vectors.rs"
        );
    }
}
