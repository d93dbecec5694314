//! Receivers: transports and formats in, [`TraceConsumer`] out.
//!
//! Each receiver owns a listener and a wire format, converts what it receives into an encoded
//! OTLP `ExportTraceServiceRequest` once, and pushes it into the process's [`TraceConsumer`]
//! (the ingester today, a distributor with Kafka later). What every receiver does the same way
//! lives here: finding the tenant, counting refusals, and answering in OTLP's terms (partial
//! success; the status a refusal maps to, and whether and when to retry).
//!
//! Each receiver lives in the folder of its API (`crate::otlp`, `crate::zipkin`,
//! `crate::jaeger`, `crate::xray`), with a translator to OTLP in `weft-translate` (tested both
//! ways, with vectors under `spec/`), and pushes through [`Receiver::push`]. Here: what they
//! share, request bodies within size, time and memory bounds ([`body`]), and UDP ports
//! ([`udp`]).

pub mod body;
pub mod udp;

use std::sync::Arc;

use axum::http::HeaderMap;
use weft_admission::metrics::RefuseReason;
use weft_admission::{PushError, PushOutcome, TraceConsumer};
use weft_otlp::pb::collector::{ExportTracePartialSuccess, ExportTraceServiceResponse};

use crate::tenant::Tenants;

/// Bounds on what receivers accept, over every receiver port.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Receivers")]
pub struct ReceiverOptions {
    /// Largest accepted request body, before decompression.
    #[arg(long, env = "WEFT_MAX_REQUEST_BYTES", default_value_t = 16 << 20)]
    pub max_request_bytes: usize,
    /// Largest accepted request after decompression.
    #[arg(long, env = "WEFT_MAX_DECOMPRESSED_BYTES", default_value_t = 64 << 20)]
    pub max_decompressed_bytes: usize,
    /// Request bytes (as received plus decompressed) held by all requests at once, over every
    /// port; a request that would pass it waits briefly, then gets 503 / UNAVAILABLE before its
    /// body is read.
    #[arg(long, env = "WEFT_MAX_INFLIGHT_REQUEST_BYTES", default_value_t = 256 << 20)]
    pub max_inflight_request_bytes: u64,
    /// Seconds a client may take to send a request's body.
    #[arg(long, env = "WEFT_BODY_TIMEOUT", default_value_t = 60.0)]
    pub body_timeout: f64,
}

impl ReceiverOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.max_request_bytes > 0, "max_request_bytes must be positive");
        anyhow::ensure!(
            self.max_decompressed_bytes >= self.max_request_bytes,
            "max_decompressed_bytes ({}) must be at least max_request_bytes ({})",
            self.max_decompressed_bytes,
            self.max_request_bytes
        );
        anyhow::ensure!(
            self.body_timeout > 0.0 && self.body_timeout.is_finite(),
            "body_timeout must be a positive number of seconds"
        );
        Ok(())
    }
}

/// What receivers share: the tenant resolver and the consumer they push into.
#[derive(Clone)]
pub struct Receiver {
    pub tenants: Arc<Tenants>,
    pub consumer: Arc<dyn TraceConsumer>,
}

/// A request refused before it was pushed, or by the consumer.
#[derive(Debug)]
pub enum Refusal {
    /// No valid tenant or token: 401 / UNAUTHENTICATED.
    Unauthenticated(String),
    /// Over a size cap: 413 / RESOURCE_EXHAUSTED.
    TooLarge(String),
    /// Refused by the consumer (or by the request budget, as overloaded).
    Push(PushError),
}

impl From<PushError> for Refusal {
    fn from(e: PushError) -> Self {
        Refusal::Push(e)
    }
}

impl Receiver {
    /// The tenant of a request, from `X-Scope-OrgID` or its bearer token. A failure is counted
    /// (tenant "unknown", reason `unauthorized`).
    pub fn tenant(&self, headers: &HeaderMap) -> Result<Arc<str>, Refusal> {
        self.tenants.resolve(headers).map_err(|e| {
            self.consumer.refused("unknown", RefuseReason::Unauthorized, 1);
            Refusal::Unauthenticated(e.0)
        })
    }

    /// Refuses a tenant over its ingestion rate before its request is read (counted by the
    /// consumer).
    pub fn check_rate(&self, tenant: &Arc<str>) -> Result<(), Refusal> {
        Ok(self.consumer.check_rate(tenant)?)
    }

    /// Counts a refusal the receiver made itself (`spans` 1 when they could not be counted).
    pub fn refused(&self, tenant: &str, reason: RefuseReason) {
        self.consumer.refused(tenant, reason, 1);
    }

    /// Pushes one encoded OTLP request and returns the OTLP reply: a partial success names
    /// the rejected spans (also when every span was rejected, per OTLP: the data was valid,
    /// the client must not retry it).
    pub async fn push(
        &self,
        tenant: &Arc<str>,
        otlp: bytes::Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<ExportTraceServiceResponse, Refusal> {
        let out = self.consumer.push(tenant, otlp, deadline).await?;
        Ok(export_response(out))
    }

    /// [`Receiver::push`] for OTLP this receiver converted from a foreign format, exactly
    /// once: valid by construction, so it is summarized rather than validated again
    /// ([`TraceConsumer::push_converted`]).
    pub async fn push_converted(
        &self,
        tenant: &Arc<str>,
        otlp: bytes::Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<ExportTraceServiceResponse, Refusal> {
        let out = self.consumer.push_converted(tenant, otlp, deadline).await?;
        Ok(export_response(out))
    }
}

/// The OTLP reply to an accepted push.
fn export_response(out: PushOutcome) -> ExportTraceServiceResponse {
    ExportTraceServiceResponse {
        partial_success: (out.rejected_spans > 0).then(|| ExportTracePartialSuccess {
            rejected_spans: i64::from(out.rejected_spans),
            error_message: out.message,
        }),
    }
}

/// A plain-text reply (the Zipkin and Jaeger receivers' errors), with `Retry-After` when the
/// refusal is retryable.
pub fn plain(
    status: axum::http::StatusCode,
    retry_after: Option<std::time::Duration>,
    msg: String,
) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    use axum::response::IntoResponse;
    let mut r = (status, msg).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(d) = retry_after {
        let secs = d.as_secs_f64().ceil().max(1.0) as u64;
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

impl axum::response::IntoResponse for body::BodyError {
    fn into_response(self) -> axum::response::Response {
        plain(self.status, self.retry_after, self.message)
    }
}

/// google.rpc.Code values, shared by gRPC statuses and OTLP/HTTP error bodies.
pub mod code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const UNAVAILABLE: i32 = 14;
    pub const UNAUTHENTICATED: i32 = 16;
}

impl Refusal {
    /// The HTTP status, `google.rpc.Code` and message of the refusal, and how long to wait
    /// before retrying (`Retry-After`) when the refusal is retryable.
    pub fn parts(&self) -> (u16, i32, String, Option<std::time::Duration>) {
        match self {
            Refusal::Unauthenticated(m) => (401, code::UNAUTHENTICATED, m.clone(), None),
            Refusal::TooLarge(m) => (413, code::RESOURCE_EXHAUSTED, m.clone(), None),
            Refusal::Push(e) => {
                let (status, code) = match e {
                    PushError::Invalid(_) => (400, code::INVALID_ARGUMENT),
                    PushError::RateLimited { .. } => (429, code::RESOURCE_EXHAUSTED),
                    PushError::Overloaded(_) | PushError::Internal(_) => (503, code::UNAVAILABLE),
                };
                (status, code, e.to_string(), e.retry_after())
            }
        }
    }

    /// The gRPC status OTLP exporters expect (they retry UNAVAILABLE and RESOURCE_EXHAUSTED
    /// with a retry delay, never INVALID_ARGUMENT or UNAUTHENTICATED).
    pub fn grpc_status(&self) -> tonic::Status {
        let (_, code, message, _) = self.parts();
        tonic::Status::new(tonic::Code::from_i32(code), message)
    }
}
