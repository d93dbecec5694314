//! gRPC receivers: OTLP's `opentelemetry.proto.collector.trace.v1.TraceService/Export`, and
//! Jaeger's `jaeger.api_v2.CollectorService/PostSpans` (port 14250), on the same machinery.
//!
//! Hand-written instead of generated so the request stays bytes: the codec below hands the
//! encoded message to the ingest path without decoding it (marshal once). A Jaeger request is
//! converted once, here, into OTLP bytes ([`weft_translate::jaeger::proto`]).

use crate::app::AppState;
use crate::budget::{BudgetedBody, Exhausted, Held};
use bytes::Bytes;
use http_body_util::BodyExt;
use prost::Message;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codec::{CompressionEncoding, EnabledCompressionEncodings};
use tonic::{Code, Status};
use weft_admission::metrics::RefuseReason;
use weft_otlp::grpc::RawCodec;

/// Which gRPC service a port serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP's `TraceService/Export`: the message is pushed as it came.
    Otlp,
    /// Jaeger's `CollectorService/PostSpans`: the message is converted to OTLP first.
    Jaeger,
}

impl Protocol {
    fn path(self) -> &'static str {
        match self {
            Protocol::Otlp => weft_otlp::EXPORT_PATH,
            Protocol::Jaeger => weft_translate::jaeger::proto::POST_SPANS_PATH,
        }
    }
}

/// A gRPC trace-ingest server (OTLP's `TraceService` or Jaeger's `CollectorService`).
#[derive(Clone)]
pub struct TraceService {
    state: Arc<AppState>,
    protocol: Protocol,
}

impl TraceService {
    pub fn new(state: Arc<AppState>) -> Self {
        TraceService {
            state,
            protocol: Protocol::Otlp,
        }
    }

    pub fn jaeger(state: Arc<AppState>) -> Self {
        TraceService {
            state,
            protocol: Protocol::Jaeger,
        }
    }
}

struct Export(Arc<AppState>, Protocol);

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = Bytes;
    type Future = BoxFut<Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let (state, protocol) = (self.0.clone(), self.1);
        Box::pin(async move {
            let receiver = state.receiver();
            let (metadata, extensions, mut body) = req.into_parts();
            let headers: &http::HeaderMap = metadata.as_ref();
            let tenant = receiver.tenant(headers).map_err(|r| r.grpc_status())?;
            // The client's deadline (grpc-timeout) bounds how long the push waits for room.
            let deadline = headers
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(grpc_timeout)
                .map(|d| tokio::time::Instant::now() + d);
            let held = extensions.get::<Held>().cloned().unwrap_or_default();
            // tonic inflated a gzip message past what the wire frames took: take the
            // difference too, so later requests wait while this one is held.
            let extra = (body.len() as u64).saturating_sub(held.bytes());
            if extra > 0 {
                state
                    .budget
                    .acquire(extra, &held)
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?;
            }
            let mut spans = 0;
            if protocol == Protocol::Jaeger {
                // The conversion's working memory (the OTLP written is about the message's size).
                state
                    .budget
                    .acquire(body.len() as u64, &held)
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?;
                match weft_translate::jaeger::proto::decode_post_spans(&body) {
                    Ok(b) if b.spans.is_empty() => return Ok(tonic::Response::new(Bytes::new())),
                    Ok(b) => {
                        spans = b.spans.len();
                        body = Bytes::from(weft_translate::jaeger::to_otlp_grouped(&b));
                    }
                    Err(e) => {
                        receiver.refused(&tenant, RefuseReason::Invalid);
                        return Err(Status::invalid_argument(e.to_string()));
                    }
                }
            }
            let result = match protocol {
                Protocol::Otlp => receiver.push(&tenant, body, deadline).await,
                Protocol::Jaeger => receiver.push_converted(&tenant, body, deadline).await,
            };
            drop(held);
            match (result, protocol) {
                (Ok(resp), Protocol::Otlp) => Ok(tonic::Response::new(Bytes::from(resp.encode_to_vec()))),
                // Jaeger has no partial success: a batch is refused only when no span was kept.
                (Ok(resp), Protocol::Jaeger) => match resp.partial_success {
                    Some(p) if p.rejected_spans as usize >= spans => Err(Status::invalid_argument(p.error_message)),
                    _ => Ok(tonic::Response::new(Bytes::new())),
                },
                (Err(r), _) => Err(r.grpc_status()),
            }
        })
    }
}

/// Parses a `grpc-timeout` header value (`<digits><unit>`, unit one of H M S m u n).
fn grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

impl tower::Service<http::Request<hyper::body::Incoming>> for TraceService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let (state, protocol) = (self.state.clone(), self.protocol);
        Box::pin(async move {
            if req.uri().path() != protocol.path() {
                return Ok(Status::unimplemented(format!("unknown method {}", req.uri().path())).into_http());
            }
            // A tenant over its ingestion rate is refused before its message is read.
            let receiver = state.receiver();
            if let Ok(tenant) = state.tenants.resolve(req.headers())
                && let Err(r) = receiver.check_rate(&tenant)
            {
                return Ok(r.grpc_status().into_http());
            }
            // The message's bytes come out of the shared request budget as they arrive, and
            // stay taken until the export is answered ([`crate::budget`]).
            let held = Held::default();
            let budget = state.budget.clone();
            let (mut parts, body) = req.into_parts();
            parts.extensions.insert(held.clone());
            let req = http::Request::from_parts(parts, BudgetedBody::new(body, budget, held));
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            // Two caps, as on OTLP/HTTP: the bytes on the wire (`--max-request-bytes`, checked
            // while the body streams in) and the message after decompression
            // (`--max-decompressed-bytes`, tonic's message limit, which bounds the inflater).
            let wire_max = state.cfg.receivers.max_request_bytes;
            let counter = receiver.clone();
            let req = req.map(|body| {
                // 5 bytes of gRPC message framing ride on top of the message itself.
                let limited = http_body_util::Limited::new(body, wire_max + 5);
                tonic::body::Body::new(limited.map_err(move |e| match e.downcast::<Status>() {
                    Ok(status) => *status,
                    Err(e) if e.is::<Exhausted>() => Status::unavailable(e.to_string()),
                    Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                        counter.refused("unknown", RefuseReason::RequestTooLarge);
                        Status::resource_exhausted(format!(
                            "request body exceeds the maximum request size of {wire_max} bytes (--max-request-bytes)"
                        ))
                    }
                    Err(e) => Status::invalid_argument(format!("reading the request failed: {e}")),
                }))
            });
            let max = state.cfg.receivers.max_decompressed_bytes;
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .apply_compression_config(accept, EnabledCompressionEncodings::default())
                .apply_max_message_size_config(Some(max), Some(4 << 20));
            // A client that stalls mid-message is cut off after the body timeout.
            let body_timeout = Duration::from_secs_f64(state.cfg.receivers.body_timeout);
            let mut resp =
                match tokio::time::timeout(body_timeout, grpc.unary(Export(state.clone(), protocol), req)).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Ok(Status::deadline_exceeded(format!(
                            "the request was not received and answered within {}s (--body-timeout)",
                            body_timeout.as_secs_f64()
                        ))
                        .into_http());
                    }
                };
            // tonic reports an oversized message as OUT_OF_RANGE; gRPC servers conventionally
            // (and SPEC §2) answer RESOURCE_EXHAUSTED, which OTLP exporters do not retry blindly.
            let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
            let code = header("grpc-status").parse::<i32>().ok();
            // tonic's own message limit: the frame's declared length or the inflated size.
            let inflated_too_large = code == Some(Code::ResourceExhausted as i32)
                && header("grpc-message").starts_with("Error%20decompressing");
            // A call without a message is the client's mistake, not an internal error.
            if code == Some(Code::Internal as i32) && header("grpc-message").starts_with("Missing%20request%20message")
            {
                resp.headers_mut()
                    .insert("grpc-status", http::HeaderValue::from(Code::InvalidArgument as i32));
                resp.headers_mut().insert(
                    "grpc-message",
                    http::HeaderValue::from_static(match protocol {
                        Protocol::Otlp => {
                            "missing%20request%20message:%20the%20call%20carried%20no%20ExportTraceServiceRequest"
                        }
                        Protocol::Jaeger => {
                            "missing%20request%20message:%20the%20call%20carried%20no%20PostSpansRequest"
                        }
                    }),
                );
                return Ok(resp);
            }
            if code == Some(Code::OutOfRange as i32) || inflated_too_large {
                resp.headers_mut()
                    .insert("grpc-status", http::HeaderValue::from(Code::ResourceExhausted as i32));
                receiver.refused("unknown", RefuseReason::RequestTooLarge);
            }
            Ok(resp)
        })
    }
}
