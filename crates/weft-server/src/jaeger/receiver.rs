//! Jaeger receivers: the collector's `POST /api/traces` (thrift binary `Batch`, port 14268) and
//! the agent's UDP ports (6831: compact thrift, 6832: binary thrift; `emitBatch` and
//! `emitZipkinBatch`). Each payload is converted once into an OTLP request
//! ([`weft_translate::jaeger`]) and pushed like an OTLP one.
//!
//! UDP carries no acknowledgement: see [`crate::receivers::udp`] for how datagrams are accepted, dropped
//! and counted.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use weft_admission::metrics::RefuseReason;
use weft_translate::jaeger::{AgentPayload, decode_agent, decode_http};
use weft_translate::thrift::Protocol;

use crate::app::AppState;
use crate::budget::Held;
use crate::receivers::body::BodyError;
use crate::receivers::plain as text;

/// `POST /api/traces` (`?format=jaeger.thrift`, the only format Jaeger's clients send).
pub async fn traces(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let receiver = st.receiver();
    let tenant = match receiver.tenant(&headers) {
        Ok(t) => t,
        Err(r) => return BodyError::from(r).into_response(),
    };
    let held = Held::default();
    let data: Bytes = match crate::receivers::body::read(&st, &headers, body, &tenant, &held).await {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    // The conversion's working memory (the OTLP written is about the size of the thrift).
    if let Err(e) = st.budget.acquire(2 * data.len() as u64, &held).await {
        return crate::receivers::body::busy(&st, &tenant, e).into_response();
    }
    let otlp = match decode_http(&data) {
        Ok(b) if b.spans.is_empty() => return StatusCode::ACCEPTED.into_response(),
        Ok(b) => (weft_translate::jaeger::to_otlp(&b), b.spans.len()),
        Err(e) => {
            receiver.refused(&tenant, RefuseReason::Invalid);
            return text(StatusCode::BAD_REQUEST, None, e.to_string());
        }
    };
    drop(data);
    match receiver.push_converted(&tenant, Bytes::from(otlp.0), None).await {
        Ok(resp) => match resp.partial_success {
            Some(p) if p.rejected_spans as usize >= otlp.1 => text(StatusCode::BAD_REQUEST, None, p.error_message),
            _ => StatusCode::ACCEPTED.into_response(),
        },
        Err(r) => BodyError::from(r).into_response(),
    }
}

/// Serves one agent port until `stop` fires ([`crate::receivers::udp::serve`]).
pub async fn serve_udp(
    st: Arc<AppState>,
    socket: tokio::net::UdpSocket,
    proto: Protocol,
    stats: Arc<crate::receivers::udp::UdpStats>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let decode = move |d: &[u8]| match decode_agent(d, proto)? {
        AgentPayload::Jaeger(b) => Ok((weft_translate::jaeger::to_otlp(&b), b.spans.len())),
        AgentPayload::Zipkin(spans) => Ok((weft_translate::zipkin::to_otlp(&spans), spans.len())),
    };
    crate::receivers::udp::serve(st, socket, decode, stats, stop).await;
}
