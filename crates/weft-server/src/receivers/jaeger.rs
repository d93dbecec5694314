//! Jaeger receivers: the collector's `POST /api/traces` (thrift binary `Batch`, port 14268) and
//! the agent's UDP ports (6831: compact thrift, 6832: binary thrift; `emitBatch` and
//! `emitZipkinBatch`). Each payload is converted once into an OTLP request
//! ([`weft_translate::jaeger`]) and pushed like an OTLP one.
//!
//! UDP carries no acknowledgement: a datagram is accepted or dropped, and every drop is counted
//! in `/metrics` (`weft_udp_datagrams_refused_total{port,reason}`), with reasons `parse` (not a
//! Jaeger call), `overloaded` (more datagrams in flight than `UDP_IN_FLIGHT`) and `refused` (the
//! ingester refused the spans: limits, back-pressure). UDP datagrams go to the tenant
//! `--udp-tenant`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use weft_ingest::metrics::RefuseReason;
use weft_translate::jaeger::{AgentPayload, decode_agent, decode_http};
use weft_translate::thrift::Protocol;

use super::body::BodyError;
use crate::AppState;
use crate::budget::Held;

fn text(status: StatusCode, msg: String) -> Response {
    let mut r = (status, msg).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `POST /api/traces` (`?format=jaeger.thrift`, the only format Jaeger's clients send).
pub async fn traces(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let receiver = st.receiver();
    let tenant = match receiver.tenant(&headers) {
        Ok(t) => t,
        Err(r) => return BodyError::from(r).into_response(),
    };
    let held = Held::default();
    let data: Bytes = match super::body::read(&st, &headers, body, &tenant, &held).await {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    let otlp = match decode_http(&data) {
        Ok(b) if b.spans.is_empty() => return StatusCode::ACCEPTED.into_response(),
        Ok(b) => (weft_translate::jaeger::to_otlp(&b), b.spans.len()),
        Err(e) => {
            receiver.refused(&tenant, RefuseReason::Invalid);
            return text(StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    drop(data);
    match receiver.push(&tenant, Bytes::from(otlp.0), None).await {
        Ok(resp) => match resp.partial_success {
            Some(p) if p.rejected_spans as usize >= otlp.1 => text(StatusCode::BAD_REQUEST, p.error_message),
            _ => StatusCode::ACCEPTED.into_response(),
        },
        Err(r) => BodyError::from(r).into_response(),
    }
}

/// Datagrams being pushed at once per UDP port; more are dropped (and counted), since UDP
/// cannot push back. Pushes in flight share the WAL's group commit.
pub const UDP_IN_FLIGHT: usize = 256;

/// Counters of one UDP port.
#[derive(Default)]
pub struct UdpStats {
    pub received: AtomicU64,
    pub spans: AtomicU64,
    pub refused_parse: AtomicU64,
    pub refused_overloaded: AtomicU64,
    pub refused_refused: AtomicU64,
}

/// Serves one agent port until `stop` fires.
pub async fn serve_udp(
    st: Arc<AppState>,
    socket: tokio::net::UdpSocket,
    proto: Protocol,
    stats: Arc<UdpStats>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let socket = Arc::new(socket);
    let slots = Arc::new(tokio::sync::Semaphore::new(UDP_IN_FLIGHT));
    let tenant: Arc<str> = st.cfg.udp_tenant.as_str().into();
    // The largest UDP payload is 65,507 bytes; a bigger buffer never truncates one.
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, _)) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "UDP receive failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        stats.received.fetch_add(1, Ordering::Relaxed);
        let (otlp, count) = match decode_agent(&buf[..n], proto) {
            Ok(AgentPayload::Jaeger(b)) => (weft_translate::jaeger::to_otlp(&b), b.spans.len()),
            Ok(AgentPayload::Zipkin(spans)) => (weft_translate::zipkin::to_otlp(&spans), spans.len()),
            Err(e) => {
                stats.refused_parse.fetch_add(1, Ordering::Relaxed);
                st.receiver().refused(&tenant, RefuseReason::Invalid);
                tracing::debug!(error = %e, "UDP datagram refused");
                continue;
            }
        };
        if count == 0 {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.refused_overloaded.fetch_add(1, Ordering::Relaxed);
            st.receiver().refused(&tenant, RefuseReason::Overloaded);
            continue;
        };
        let (st2, stats2, tenant2) = (st.clone(), stats.clone(), tenant.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match st2.receiver().push(&tenant2, Bytes::from(otlp), None).await {
                Ok(r)
                    if r.partial_success
                        .as_ref()
                        .is_some_and(|p| p.rejected_spans as usize >= count) =>
                {
                    stats2.refused_refused.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {
                    stats2.spans.fetch_add(count as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    stats2.refused_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}
