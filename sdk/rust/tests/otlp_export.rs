//! Exports through the SDK to real OTLP receivers (a tonic gRPC server and a hyper HTTP server
//! running in this test) and checks, with the official `opentelemetry-proto` types, that what
//! arrives decodes field for field to the spans the SDK recorded.

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue as ProtoKeyValue, any_value};
use prost::Message;
use weft_sdk::export::{
    BatchConfig, ExportBatch, ExportContext, ExportResult, InMemoryExporter, OtlpConfig, OtlpExporter, SpanExporter,
};
use weft_sdk::trace::SpanData;

/// A scripted HTTP response.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

fn ok() -> Reply {
    Reply {
        status: 200,
        headers: vec![],
        body: vec![],
    }
}

#[derive(Default)]
struct Received {
    http: Vec<(http::HeaderMap, Vec<u8>)>,
    grpc: Vec<(tonic::metadata::MetadataMap, ExportTraceServiceRequest)>,
    script: VecDeque<Reply>,
    grpc_partial: Option<ExportTracePartialSuccess>,
}

type Shared = Arc<Mutex<Received>>;

struct Grpc(Shared);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let (meta, _, req) = request.into_parts();
        let mut r = self.0.lock().unwrap();
        r.grpc.push((meta, req));
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: r.grpc_partial.clone(),
        }))
    }
}

/// Runs both receivers on a background runtime; returns (gRPC address, HTTP address).
fn start_receivers(shared: Shared) -> (tokio::runtime::Runtime, SocketAddr, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (grpc_addr, http_addr) = rt.block_on(async {
        let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_addr = grpc_listener.local_addr().unwrap();
        let svc = TraceServiceServer::new(Grpc(shared.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
            .send_compressed(tonic::codec::CompressionEncoding::Gzip);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc_listener)),
        );
        let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_addr = http_listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = http_listener.accept().await else {
                    return;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let shared = shared.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.map(|c| c.to_bytes().to_vec()).unwrap_or_default();
                            let reply = {
                                let mut r = shared.lock().unwrap();
                                r.http.push((parts.headers, body));
                                r.script.pop_front().unwrap_or_else(ok)
                            };
                            let mut resp = http::Response::builder().status(reply.status);
                            for (k, v) in reply.headers {
                                resp = resp.header(k, v);
                            }
                            Ok::<_, std::convert::Infallible>(resp.body(Full::new(Bytes::from(reply.body))).unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (grpc_addr, http_addr)
    });
    (rt, grpc_addr, http_addr)
}

/// Records every batch in memory and forwards it to the OTLP exporter.
struct Tee(InMemoryExporter, OtlpExporter);

impl SpanExporter for Tee {
    fn export(&mut self, batch: ExportBatch<'_>, cx: &ExportContext<'_>) -> ExportResult {
        self.0.export(batch, cx);
        self.1.export(batch, cx)
    }
}

fn provider(config: OtlpConfig, memory: &InMemoryExporter) -> weft_sdk::TracerProvider {
    weft_sdk::TracerProvider::builder()
        .with_resource(weft_sdk::Resource::new("otlp-test").with_attribute(KeyValue::new("host.cpu.count", 2)))
        .with_sampler(weft_sdk::sampling::AlwaysOn)
        .with_exporter(Tee(memory.clone(), OtlpExporter::new(config).unwrap()))
        .build()
}

/// Records a varied set of spans: every attribute type, an event, a link, statuses, kinds and a
/// remote parent with tracestate.
fn record_spans(provider: &weft_sdk::TracerProvider) {
    let tracer = provider.tracer_with_scope(
        opentelemetry::InstrumentationScope::builder("io.weft.test")
            .with_version("1.2.3")
            .with_attributes([KeyValue::new("scope.attr", "x")])
            .build(),
    );
    let remote = opentelemetry::trace::SpanContext::new(
        0x4bf92f3577b34da6a3ce929d0e0e4736u128.into(),
        0x00f067aa0ba902b7u64.into(),
        opentelemetry::trace::TraceFlags::SAMPLED,
        true,
        opentelemetry::trace::TraceState::from_key_value([("congo", "t61rcWkgMzE")]).unwrap(),
    );
    let cx = opentelemetry::Context::new().with_remote_span_context(remote.clone());
    let mut server = tracer
        .span_builder("POST /checkout")
        .with_kind(SpanKind::Server)
        .start_with_context(&tracer, &cx);
    server.set_attribute(KeyValue::new("http.request.method", "POST"));
    server.set_attribute(KeyValue::new("http.response.status_code", 500));
    server.set_attribute(KeyValue::new("retry.delta", -3));
    server.set_attribute(KeyValue::new("server.load", 0.75));
    server.set_attribute(KeyValue::new("cache.hit", true));
    server.set_attribute(KeyValue::new("empty", ""));
    server.set_attribute(KeyValue::new("unicode", "grüße, 世界"));
    server.set_attribute(KeyValue::new(
        "accept",
        Value::Array(Array::String(vec!["a".into(), "b".into()])),
    ));
    server.set_attribute(KeyValue::new("ints", Value::Array(Array::I64(vec![1, -2, 300]))));
    server.set_attribute(KeyValue::new("floats", Value::Array(Array::F64(vec![0.5]))));
    server.set_attribute(KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))));
    server.add_event("exception", vec![KeyValue::new("exception.type", "PaymentDeclined")]);
    server.add_link(remote, vec![KeyValue::new("link.attr", 7)]);
    server.set_status(Status::error("payment failed"));
    let server_cx = cx.with_span(server);
    let mut client = tracer
        .span_builder("SELECT")
        .with_kind(SpanKind::Client)
        .start_with_context(&tracer, &server_cx);
    client.set_status(Status::Ok);
    client.end();
    server_cx.span().end();
    let other = provider.weft_tracer("other.scope");
    for kind in [SpanKind::Internal, SpanKind::Producer, SpanKind::Consumer] {
        let mut s = other.span_builder("root").with_kind(kind).start(&other);
        s.end();
    }
}

fn proto_value(v: &AnyValue) -> Value {
    match v.value.as_ref().expect("AnyValue has a value") {
        any_value::Value::StringValue(s) => Value::from(s.clone()),
        any_value::Value::BoolValue(b) => Value::Bool(*b),
        any_value::Value::IntValue(i) => Value::I64(*i),
        any_value::Value::DoubleValue(d) => Value::F64(*d),
        any_value::Value::ArrayValue(a) => {
            let items: Vec<Value> = a.values.iter().map(proto_value).collect();
            match items.first() {
                Some(Value::String(_)) | None => Value::Array(Array::String(
                    items.into_iter().map(|v| v.as_str().into_owned().into()).collect(),
                )),
                Some(Value::I64(_)) => Value::Array(Array::I64(
                    items
                        .into_iter()
                        .map(|v| if let Value::I64(i) = v { i } else { panic!("mixed") })
                        .collect(),
                )),
                Some(Value::F64(_)) => Value::Array(Array::F64(
                    items
                        .into_iter()
                        .map(|v| if let Value::F64(i) = v { i } else { panic!("mixed") })
                        .collect(),
                )),
                Some(Value::Bool(_)) => Value::Array(Array::Bool(
                    items
                        .into_iter()
                        .map(|v| if let Value::Bool(i) = v { i } else { panic!("mixed") })
                        .collect(),
                )),
                Some(other) => panic!("unexpected array element {other:?}"),
            }
        }
        other => panic!("unexpected value {other:?}"),
    }
}

fn proto_attrs(kvs: &[ProtoKeyValue]) -> Vec<KeyValue> {
    kvs.iter()
        .map(|kv| KeyValue::new(kv.key.clone(), proto_value(kv.value.as_ref().unwrap())))
        .collect()
}

/// Compares every field of every exported span with the SDK's records.
fn assert_request_matches(req: &ExportTraceServiceRequest, sent: &[SpanData], provider: &weft_sdk::TracerProvider) {
    assert_eq!(req.resource_spans.len(), 1);
    let rs = &req.resource_spans[0];
    let resource = rs.resource.as_ref().unwrap();
    assert_eq!(proto_attrs(&resource.attributes), provider.resource().attributes);
    let mut got = Vec::new();
    for ss in &rs.scope_spans {
        let scope = ss.scope.as_ref().unwrap();
        for s in &ss.spans {
            got.push((
                scope.name.clone(),
                scope.version.clone(),
                proto_attrs(&scope.attributes),
                s.clone(),
            ));
        }
    }
    assert_eq!(got.len(), sent.len());
    for d in sent {
        let (scope_name, scope_version, scope_attrs, s) = got
            .iter()
            .find(|(_, _, _, s)| s.span_id == d.span_id.to_bytes())
            .expect("every recorded span was received");
        if d.name == "root" {
            assert_eq!(scope_name, "other.scope");
        } else {
            assert_eq!((scope_name.as_str(), scope_version.as_str()), ("io.weft.test", "1.2.3"));
            assert_eq!(scope_attrs, &vec![KeyValue::new("scope.attr", "x")]);
        }
        assert_eq!(s.trace_id, d.trace_id.to_bytes());
        let parent: Vec<u8> = if d.parent_span_id == weft_sdk::id::SpanId::INVALID {
            vec![]
        } else {
            d.parent_span_id.to_bytes().to_vec()
        };
        assert_eq!(s.parent_span_id, parent);
        assert_eq!(s.trace_state, d.trace_state.as_str());
        assert_eq!(s.name, d.name);
        let kind = match d.kind {
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        };
        assert_eq!(s.kind, kind);
        assert_eq!(s.start_time_unix_nano, d.start_time_unix_nano);
        assert_eq!(s.end_time_unix_nano, d.end_time_unix_nano);
        assert_eq!(proto_attrs(&s.attributes), d.attributes);
        assert_eq!(s.dropped_attributes_count, d.dropped_attributes_count);
        assert_eq!(s.events.len(), d.events.len());
        for (pe, de) in s.events.iter().zip(&d.events) {
            assert_eq!(
                (pe.time_unix_nano, pe.name.as_str()),
                (de.time_unix_nano, de.name.as_ref())
            );
            assert_eq!(proto_attrs(&pe.attributes), de.attributes);
        }
        assert_eq!(s.links.len(), d.links.len());
        for (pl, dl) in s.links.iter().zip(&d.links) {
            assert_eq!(pl.trace_id, dl.context.trace_id.to_bytes());
            assert_eq!(pl.span_id, dl.context.span_id.to_bytes());
            assert_eq!(pl.trace_state, dl.trace_state.as_str());
            assert_eq!(proto_attrs(&pl.attributes), dl.attributes);
            assert_eq!(pl.flags, 0x301, "sampled, remote link");
        }
        let (code, message) = match &d.status {
            Status::Unset => (0, ""),
            Status::Ok => (1, ""),
            Status::Error { description } => (2, description.as_ref()),
        };
        match &s.status {
            None => assert_eq!(code, 0),
            Some(st) => assert_eq!((st.code, st.message.as_str()), (code, message)),
        }
        let remote = if d.parent_is_remote { 0x200 } else { 0 };
        assert_eq!(s.flags, d.trace_flags as u32 | 0x100 | remote);
    }
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .expect("body is gzip");
    out
}

#[test]
fn http_protobuf_gzip_decodes_field_for_field() {
    let shared: Shared = Default::default();
    let (_rt, _, http) = start_receivers(shared.clone());
    let memory = InMemoryExporter::new();
    let p = provider(OtlpConfig::http(format!("http://{http}/v1/traces")), &memory);
    record_spans(&p);
    p.force_flush(Duration::from_secs(10)).unwrap();
    let r = shared.lock().unwrap();
    assert_eq!(r.http.len(), 1, "one batch");
    let (headers, body) = &r.http[0];
    assert_eq!(headers["content-type"], "application/x-protobuf");
    assert_eq!(headers["content-encoding"], "gzip");
    assert!(headers["user-agent"].to_str().unwrap().starts_with("weft-sdk-rust/"));
    let req = ExportTraceServiceRequest::decode(gunzip(body).as_slice()).unwrap();
    assert_request_matches(&req, &memory.spans(), &p);
    assert_eq!(p.stats().exported, 5);
}

#[test]
fn grpc_gzip_decodes_field_for_field() {
    let shared: Shared = Default::default();
    let (_rt, grpc, _) = start_receivers(shared.clone());
    let memory = InMemoryExporter::new();
    let p = provider(OtlpConfig::grpc(format!("http://{grpc}")), &memory);
    record_spans(&p);
    p.force_flush(Duration::from_secs(10)).unwrap();
    let r = shared.lock().unwrap();
    assert_eq!(r.grpc.len(), 1);
    let (meta, req) = &r.grpc[0];
    assert_eq!(meta.get("grpc-encoding").map(|v| v.to_str().unwrap()), Some("gzip"));
    assert_request_matches(req, &memory.spans(), &p);
    assert_eq!(p.stats().exported, 5);
}

#[test]
fn grpc_partial_success_counts_rejected_spans() {
    let shared: Shared = Default::default();
    shared.lock().unwrap().grpc_partial = Some(ExportTracePartialSuccess {
        rejected_spans: 2,
        error_message: "trace too large".into(),
    });
    let (_rt, grpc, _) = start_receivers(shared.clone());
    let memory = InMemoryExporter::new();
    let p = provider(OtlpConfig::grpc(format!("http://{grpc}")), &memory);
    record_spans(&p);
    p.force_flush(Duration::from_secs(10)).unwrap();
    let stats = p.stats();
    assert_eq!((stats.exported, stats.rejected), (3, 2), "{stats:?}");
    assert_eq!(shared.lock().unwrap().grpc.len(), 1, "a partial success is not retried");
}

#[test]
fn http_retry_after_is_honoured_then_succeeds() {
    let shared: Shared = Default::default();
    shared.lock().unwrap().script = VecDeque::from([
        Reply {
            status: 503,
            headers: vec![("retry-after", "0".into())],
            body: vec![],
        },
        Reply {
            status: 429,
            headers: vec![("retry-after", "0".into())],
            body: vec![],
        },
        ok(),
    ]);
    let (_rt, _, http) = start_receivers(shared.clone());
    let memory = InMemoryExporter::new();
    let p = provider(OtlpConfig::http(format!("http://{http}/v1/traces")), &memory);
    record_spans(&p);
    let start = Instant::now();
    p.force_flush(Duration::from_secs(10)).unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(400),
        "Retry-After: 0 replaces the back-off"
    );
    assert_eq!(shared.lock().unwrap().http.len(), 3);
    assert_eq!(p.stats().exported, 5);
}

#[test]
fn http_permanent_error_drops_the_batch_once() {
    let shared: Shared = Default::default();
    shared.lock().unwrap().script = VecDeque::from([Reply {
        status: 400,
        headers: vec![],
        body: b"bad trace id".to_vec(),
    }]);
    let (_rt, _, http) = start_receivers(shared.clone());
    let memory = InMemoryExporter::new();
    let p = provider(OtlpConfig::http(format!("http://{http}/v1/traces")), &memory);
    record_spans(&p);
    p.force_flush(Duration::from_secs(10)).unwrap();
    assert_eq!(shared.lock().unwrap().http.len(), 1);
    let stats = p.stats();
    assert_eq!((stats.exported, stats.dropped_permanent), (0, 5));
}

#[test]
fn backend_down_never_blocks_and_stays_bounded() {
    // A port with nothing listening: every attempt is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = OtlpConfig {
        timeout: Duration::from_millis(300),
        ..OtlpConfig::http(format!("http://127.0.0.1:{port}/v1/traces"))
    };
    let p = weft_sdk::TracerProvider::builder()
        .with_resource(weft_sdk::Resource::new("down"))
        .with_batch_config(BatchConfig {
            max_queue_size: 256,
            max_export_batch_size: 64,
            ..Default::default()
        })
        .with_exporter(OtlpExporter::new(config).unwrap())
        .build();
    let tracer = p.tracer("t");
    let start = Instant::now();
    for _ in 0..20_000 {
        let mut s = tracer.start("x");
        s.set_attribute(KeyValue::new("k", "v"));
        s.end();
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "span end never waits for the exporter"
    );
    let _ = p.force_flush(Duration::from_secs(30));
    let stats = p.stats();
    assert_eq!(stats.exported, 0);
    assert_eq!(stats.dropped(), 20_000, "every span is accounted for: {stats:?}");
    assert!(stats.dropped_queue_full > 0 && stats.dropped_deadline > 0, "{stats:?}");
}

#[test]
fn shutdown_interrupts_back_off() {
    let shared: Shared = Default::default();
    shared.lock().unwrap().script = VecDeque::from(vec![
        Reply {
            status: 503,
            headers: vec![],
            body: vec![]
        };
        10
    ]);
    let (_rt, _, http) = start_receivers(shared.clone());
    let memory = InMemoryExporter::new();
    let p = provider(OtlpConfig::http(format!("http://{http}/v1/traces")), &memory);
    record_spans(&p);
    let start = Instant::now();
    let _ = p.shutdown(Duration::from_millis(300));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        start.elapsed()
    );
    let stats = p.stats();
    assert_eq!(stats.exported, 0);
    assert_eq!(stats.dropped_deadline, 5, "{stats:?}");
}
