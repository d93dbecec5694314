//! The service the W3C trace-context test suite (`w3c/trace-context`, `test/test.py`) drives.
//!
//! Usage: `tracecontext-service [PORT]` (default 5000; the W3C harness itself listens on 7777). It
//! listens on 127.0.0.1:PORT (port 0 picks a free one) and says where on stderr, then accepts
//! `POST /test` (any path) with a JSON array of `{"url": …, "arguments": …}`. For each element it
//! POSTs `arguments` (as JSON) to `url`, propagating the W3C context: `traceparent`/`tracestate`
//! are extracted from the incoming request and a server span is started under them (or a new
//! trace when they are absent or invalid); then every outgoing request gets its own client span,
//! a child of the server span, whose context (so its own span ID) is injected into that request.
//! See README.md for running the suite.
//!
//! Spans are exported with OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is
//! set, and discarded otherwise.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status};
use weft_sdk::propagation::{PropagatedContext, Propagator, TraceContextPropagator};

fn provider() -> weft_sdk::TracerProvider {
    let exporting = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    if exporting {
        match weft_sdk::trace::TracerProviderBuilder::from_env() {
            Ok(b) => return b.build(),
            Err(e) => eprintln!("tracecontext-service: otlp export disabled: {e}"),
        }
    }
    weft_sdk::TracerProvider::builder()
        .with_resource(weft_sdk::Resource::new("tracecontext-service"))
        .build()
}

/// Sends `body` to `url` with `headers`; the response is read and ignored.
async fn post(url: &str, headers: &http::HeaderMap, body: Vec<u8>) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("bad url {url:?}: {e}"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| format!("url {url:?} has no host"))?
        .clone();
    let port = uri.port_u16().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((authority.host(), port))
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = Request::post(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    for (k, v) in headers {
        req.headers_mut().insert(k.clone(), v.clone());
    }
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let _ = resp.into_body().collect().await;
    Ok(())
}

async fn handle(
    req: Request<Incoming>,
    tracer: weft_sdk::Tracer,
    propagator: TraceContextPropagator,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let mut parent = PropagatedContext::default();
    propagator.extract(&parts.headers, &mut parent);
    let mut span = tracer.start_with_parent(
        "tracecontext-service",
        SpanKind::Server,
        parent.span.as_ref(),
        Vec::new(),
    );

    let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    let calls: Vec<serde_json::Value> = match serde_json::from_slice(&body) {
        Ok(serde_json::Value::Array(a)) => a,
        _ => {
            span.end();
            let mut resp = Response::new(Full::new(Bytes::from_static(b"expected a JSON array\n")));
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(resp);
        }
    };
    let server = span.full_context();
    for call in calls {
        let Some(url) = call.get("url").and_then(|u| u.as_str()) else {
            continue;
        };
        let args = serde_json::to_vec(call.get("arguments").unwrap_or(&serde_json::Value::Null)).unwrap_or_default();
        // One client span per outgoing request: each callee sees its own parent-id (W3C
        // trace-context AdvancedTest.test_multiple_requests_*).
        let mut client = tracer.start_with_parent(
            "POST",
            SpanKind::Client,
            Some(&server),
            vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("url.full", url.to_owned()),
            ],
        );
        let outgoing = PropagatedContext {
            span: Some(client.full_context()),
            baggage: Default::default(),
        };
        let mut headers = http::HeaderMap::new();
        propagator.inject(&outgoing, &mut headers);
        if let Err(e) = post(url, &headers, args).await {
            eprintln!("tracecontext-service: calling {url} failed: {e}");
            client.set_status(Status::error(e));
        }
        client.end();
    }
    span.end();
    Ok(Response::new(Full::new(Bytes::new())))
}

fn main() {
    let port: u16 = match std::env::args().nth(1).map(|p| p.parse()) {
        None => 5000,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("usage: tracecontext-service [PORT]: {e}");
            std::process::exit(2);
        }
    };
    let provider = provider();
    let tracer = provider.weft_tracer("tracecontext-service");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| {
                eprintln!("tracecontext-service: cannot listen on 127.0.0.1:{port}: {e}");
                std::process::exit(1);
            });
        // The bound port, not the asked one: with port 0 this line is how a caller finds it.
        let port = listener.local_addr().map_or(port, |a| a.port());
        eprintln!("tracecontext-service: listening on http://127.0.0.1:{port}/test");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let tracer = tracer.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req| handle(req, tracer.clone(), TraceContextPropagator::new()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let _ = provider.shutdown(Duration::from_secs(5));
}
