//! The contract every receiver pushes into.
//!
//! A receiver (OTLP over gRPC or HTTP today; Zipkin, Jaeger and X-Ray next) owns its transport
//! and its wire format. It converts what it received into an encoded OTLP
//! `ExportTraceServiceRequest` exactly once, then hands the bytes to a [`TraceConsumer`], which
//! admits, stores and acknowledges them. Nothing downstream knows which receiver a span came
//! through. This is the OpenTelemetry Collector's `consumer.Traces` and Tempo's distributor
//! `PushTraces`, with the request kept as bytes (marshal once).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::metrics::RefuseReason;

/// A push that was accepted, wholly or in part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    pub accepted_spans: u32,
    /// Spans of valid data the server would not keep (a trace over its size limit). Receivers
    /// answer them with OTLP's partial success, also when every span was rejected: the client
    /// did nothing wrong and must not retry them.
    pub rejected_spans: u32,
    /// Why spans were rejected; empty when none were.
    pub message: String,
}

impl PushOutcome {
    /// The answer to a request without spans: accepted, nothing stored.
    pub fn empty() -> PushOutcome {
        PushOutcome {
            accepted_spans: 0,
            rejected_spans: 0,
            message: String::new(),
        }
    }
}

/// Why a push was refused: nothing of it was stored. Each maps to one HTTP status and one
/// gRPC code ([`PushError::retryable`] says which side of OTLP's retry rules it is on).
#[derive(Debug, Clone, thiserror::Error)]
pub enum PushError {
    /// The request is malformed (OTLP "bad data"): 400 / INVALID_ARGUMENT, not retryable.
    #[error("{0}")]
    Invalid(String),
    /// The tenant is over its ingestion rate: 429 / RESOURCE_EXHAUSTED, retry after the wait.
    #[error("{message}")]
    RateLimited { message: String, retry_after: Duration },
    /// The server is behind or cannot write (disk full): 503 / UNAVAILABLE, retryable.
    #[error("{0}")]
    Overloaded(String),
    /// The server failed: 503 / UNAVAILABLE, retryable.
    #[error("{0}")]
    Internal(String),
}

impl PushError {
    /// Whether an OTLP client should send the same request again later.
    pub fn retryable(&self) -> bool {
        !matches!(self, PushError::Invalid(_))
    }

    /// How long the client should wait before retrying, if the server knows.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PushError::Invalid(_) => None,
            PushError::RateLimited { retry_after, .. } => Some(*retry_after),
            PushError::Overloaded(_) | PushError::Internal(_) => Some(Duration::from_secs(1)),
        }
    }
}

/// What receivers push into.
///
/// **Contract.** [`TraceConsumer::push`] returns `Ok` only once every accepted span is durable
/// (it survives `kill -9`) and readable; rejected spans were not stored. On `Err` nothing of the
/// request was stored, and the refusal has already been counted. Dropping the future before it
/// completes may or may not store the request (like a lost reply); the client retries, and
/// readers de-duplicate. Calling it twice with the same request stores the spans twice, and
/// readers de-duplicate them.
#[async_trait::async_trait]
pub trait TraceConsumer: Send + Sync {
    /// Refuses at once if `tenant` may not send now (over its ingestion rate), before a
    /// receiver reads or decodes a request. Takes nothing from the tenant's allowance.
    fn check_rate(&self, tenant: &Arc<str>) -> Result<(), PushError>;

    /// Validates, admits and durably stores one encoded OTLP `ExportTraceServiceRequest` of
    /// `tenant`. Waiting for room ends at `deadline`, if given.
    async fn push(
        &self,
        tenant: &Arc<str>,
        otlp: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError>;

    /// [`push`](Self::push) for a request weft encoded itself, converting a foreign format
    /// (Zipkin, Jaeger, X-Ray) at its receiver. Such a request is valid by construction, so
    /// it is summarized for routing and limits without being validated again. The default
    /// validates it like any other.
    async fn push_converted(
        &self,
        tenant: &Arc<str>,
        otlp: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError> {
        self.push(tenant, otlp, deadline).await
    }

    /// Counts spans a receiver refused before pushing (unauthenticated, too large, unreadable),
    /// in `weft_spans_refused_total`. A request whose spans could not be counted counts as 1.
    fn refused(&self, tenant: &str, reason: RefuseReason, spans: u64);

    /// From now on, tells `sink` of the root spans of every request admitted. Refused when
    /// a sink was set already.
    fn watch_roots(&self, sink: Arc<dyn crate::RootSink>) -> Result<(), &'static str>;
}
