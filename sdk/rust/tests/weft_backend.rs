//! End to end against the real `weft` backend: export through the SDK (OTLP HTTP and gRPC), then
//! read the traces back through `GET /api/traces/<id>`.
//!
//! Runs only when `WEFT_BIN` names the `weft` binary (`cargo build -p weft-server` at the
//! repository root builds `target/debug/weft`):
//!
//! ```text
//! WEFT_BIN=$PWD/../../target/debug/weft cargo test --test weft_backend -- --nocapture
//! ```
//!
//! Without `WEFT_BIN` the test says so on stderr and passes without doing anything.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry_proto::tonic::trace::v1::TracesData;
use prost::Message;
use weft_sdk::export::{InMemoryExporter, OtlpConfig, OtlpExporter};

struct Weft {
    child: Child,
    dir: PathBuf,
}

impl Drop for Weft {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GETs `path` on `127.0.0.1:port`; returns (status, body).
fn get(rt: &tokio::runtime::Runtime, port: u16, path: &str, accept: &str) -> Result<(u16, Vec<u8>), String> {
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = http::Request::get(path)
            .header("host", "127.0.0.1")
            .header("accept", accept)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes()
            .to_vec();
        Ok((status, body))
    })
}

fn start_weft(bin: &str) -> (Weft, u16, u16, u16) {
    start_weft_with(bin, &[])
}

/// Starts `bin` with every port the tests do not use off, then `env` (which may turn some on).
fn start_weft_with(bin: &str, env: &[(&str, String)]) -> (Weft, u16, u16, u16) {
    let (http, grpc, otlp_http) = (free_port(), free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("weft-sdk-e2e-{}-{}", std::process::id(), http));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(bin)
        .arg("--data-dir")
        .arg(&dir)
        .args(["--http-port", &http.to_string()])
        .args(["--otlp-grpc-port", &grpc.to_string()])
        .args(["--otlp-http-port", &otlp_http.to_string()])
        .env("WEFT_ZIPKIN_PORT", "0")
        .env("WEFT_JAEGER_HTTP_PORT", "0")
        .env("WEFT_JAEGER_GRPC_PORT", "0")
        .env("WEFT_JAEGER_QUERY_PORT", "0")
        .env("WEFT_XRAY_PORT", "0")
        .env("WEFT_JAEGER_COMPACT_PORT", "0")
        .env("WEFT_JAEGER_BINARY_PORT", "0")
        .env("WEFT_SAMPLING_HTTP_PORT", "0")
        .env("WEFT_SAMPLING_GRPC_PORT", "0")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    (Weft { child, dir }, http, grpc, otlp_http)
}

fn provider(config: OtlpConfig, memory: &InMemoryExporter) -> weft_sdk::TracerProvider {
    struct Tee(InMemoryExporter, OtlpExporter);
    impl weft_sdk::export::SpanExporter for Tee {
        fn export(
            &mut self,
            batch: weft_sdk::export::ExportBatch<'_>,
            cx: &weft_sdk::export::ExportContext<'_>,
        ) -> weft_sdk::export::ExportResult {
            self.0.export(batch, cx);
            self.1.export(batch, cx)
        }
    }
    weft_sdk::TracerProvider::builder()
        .with_resource(weft_sdk::Resource::new("weft-sdk-e2e"))
        .with_sampler(weft_sdk::sampling::AlwaysOn)
        .with_exporter(Tee(memory.clone(), OtlpExporter::new(config).unwrap()))
        .build()
}

/// Records a three-span trace and returns its hex trace ID.
fn record_trace(p: &weft_sdk::TracerProvider, label: &str) -> String {
    let tracer = p.tracer("e2e");
    let root = tracer
        .span_builder(format!("{label} root"))
        .with_kind(SpanKind::Server)
        .start(&tracer);
    let id = weft_sdk::id::trace_id_hex(root.span_context().trace_id());
    let cx = opentelemetry::Context::new().with_span(root);
    for i in 0..2 {
        let mut child = tracer.start_with_context(format!("{label} child {i}"), &cx);
        child.set_attribute(KeyValue::new("child.index", i as i64));
        child.set_attribute(KeyValue::new("label", label.to_owned()));
        child.add_event("work", vec![KeyValue::new("ok", true)]);
        child.set_status(Status::Ok);
        child.end();
    }
    cx.span().end();
    id
}

#[test]
fn spans_exported_by_the_sdk_are_read_back_from_weft() {
    let Ok(bin) = std::env::var("WEFT_BIN") else {
        eprintln!("weft_backend: WEFT_BIN is not set; not running the end-to-end test against the weft binary");
        return;
    };
    let (_weft, http, grpc, otlp_http) = start_weft(&bin);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&rt, http, "/ready", "*/*").map(|(s, _)| s) != Ok(200) {
        assert!(Instant::now() < deadline, "weft did not become ready on port {http}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let mut traces = Vec::new();
    for (label, config) in [
        (
            "http",
            OtlpConfig::http(format!("http://127.0.0.1:{otlp_http}/v1/traces")),
        ),
        ("grpc", OtlpConfig::grpc(format!("http://127.0.0.1:{grpc}"))),
    ] {
        let memory = InMemoryExporter::new();
        let p = provider(config, &memory);
        let id = record_trace(&p, label);
        p.force_flush(Duration::from_secs(20)).unwrap();
        let stats = p.stats();
        assert_eq!((stats.exported, stats.dropped()), (3, 0), "{label}: {stats:?}");
        traces.push((label, id, memory.spans()));
    }

    for (label, id, sent) in traces {
        let deadline = Instant::now() + Duration::from_secs(30);
        let body = loop {
            match get(&rt, http, &format!("/api/traces/{id}"), "application/protobuf") {
                Ok((200, body)) => {
                    let data = TracesData::decode(body.as_slice()).expect("trace decodes as TracesData");
                    let n: usize = data
                        .resource_spans
                        .iter()
                        .flat_map(|r| &r.scope_spans)
                        .map(|s| s.spans.len())
                        .sum();
                    if n >= sent.len() {
                        break data;
                    }
                }
                Ok((404, _)) => {}
                other => panic!("{label}: GET /api/traces/{id}: {other:?}"),
            }
            assert!(
                Instant::now() < deadline,
                "{label}: trace {id} not readable within 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let spans: Vec<_> = body
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .collect();
        assert_eq!(spans.len(), sent.len(), "{label}");
        for d in &sent {
            let s = spans
                .iter()
                .find(|s| s.span_id == d.span_id.to_bytes())
                .expect("span read back");
            assert_eq!(s.trace_id, d.trace_id.to_bytes());
            assert_eq!(s.name, d.name);
            assert_eq!(s.start_time_unix_nano, d.start_time_unix_nano);
            assert_eq!(s.end_time_unix_nano, d.end_time_unix_nano);
            assert_eq!(s.attributes.len(), d.attributes.len(), "{label}: {}", d.name);
            assert_eq!(s.events.len(), d.events.len());
        }
        let (status, json) = get(&rt, http, &format!("/api/traces/{id}"), "application/json").unwrap();
        assert_eq!(status, 200);
        let json = String::from_utf8(json).unwrap();
        for d in &sent {
            assert!(
                json.contains(&weft_sdk::id::span_id_hex(d.span_id)),
                "{label}: JSON names every span"
            );
        }
        eprintln!("weft_backend: {label}: trace {id} read back with {} spans", sent.len());
    }
}

/// The Jaeger remote sampler polls the weft binary's own `/sampling` (Jaeger remote sampling
/// served by weft) and samples by the strategies file weft serves.
#[test]
fn the_jaeger_remote_sampler_follows_the_strategies_weft_serves() {
    use weft_sdk::sampling::{
        Decision, JaegerRemoteConfig, JaegerRemoteSampler, Sampler, SamplingParams, TraceIdRatioSampler,
    };
    let Ok(bin) = std::env::var("WEFT_BIN") else {
        eprintln!("weft_backend: WEFT_BIN is not set; not running the end-to-end test against the weft binary");
        return;
    };
    let file = std::env::temp_dir().join(format!("weft-sdk-strategies-{}.json", std::process::id()));
    std::fs::write(
        &file,
        r#"{"service_strategies": [{"service": "checkout", "type": "probabilistic", "param": 1.0,
            "operation_strategies": [{"operation": "GET /health", "type": "probabilistic", "param": 0}]}]}"#,
    )
    .unwrap();
    let port = free_port();
    let _weft = start_weft_with(
        &bin,
        &[
            ("WEFT_SAMPLING_HTTP_PORT", port.to_string()),
            ("WEFT_SAMPLING_STRATEGIES_FILE", file.display().to_string()),
        ],
    );
    let sampler = JaegerRemoteSampler::start(JaegerRemoteConfig {
        endpoint: format!("http://127.0.0.1:{port}/sampling"),
        polling_interval: Duration::from_millis(100),
        initial_sampler: Box::new(TraceIdRatioSampler::new(0.5)),
        service_name: "checkout".into(),
        ..Default::default()
    });
    let mut x: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
    let mut decide = |name: &str| {
        x = x
            .wrapping_mul(0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645)
            .wrapping_add(1);
        let id = weft_sdk::id::TraceId::from(x);
        sampler.should_sample(&SamplingParams::root(id, name)).decision == Decision::RecordAndSample
    };
    // Until the first fetch the initial sampler keeps half; the strategy keeps no health check.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut dropped = 0;
    while dropped < 200 {
        if decide("GET /health") {
            dropped = 0;
            assert!(
                Instant::now() < deadline,
                "the sampler did not take weft's strategy within 15 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        } else {
            dropped += 1;
        }
    }
    for i in 0..1000 {
        assert!(
            !decide("GET /health") && decide("POST /pay"),
            "decision {i} does not follow weft's strategy (health 0, everything else 1)"
        );
    }
    let _ = std::fs::remove_file(&file);
}
