//! Zipkin receiver: `POST /api/v2/spans` (JSON, proto3) and `POST /api/v1/spans` (JSON,
//! thrift), gzip allowed, on the Zipkin port. Each request is converted once into an OTLP
//! request ([`weft_translate::zipkin`]) and pushed like an OTLP one; the client gets
//! `202 Accepted` once the spans are durable, as Zipkin answers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use weft_admission::metrics::RefuseReason;
use weft_translate::zipkin::Encoding;

use crate::app::AppState;
use crate::budget::Held;
use crate::receivers::body::BodyError;
use crate::receivers::plain as text;

/// `POST /api/v2/spans`. As in Zipkin, a body that is not declared protobuf is read as JSON.
pub async fn spans_v2(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let enc = match mime(&headers).as_str() {
        "application/x-protobuf" | "application/protobuf" => Encoding::Proto3,
        _ => Encoding::JsonV2,
    };
    receive(&st, &headers, body, enc).await
}

/// `POST /api/v1/spans`. As in Zipkin, a body that is not declared thrift is read as JSON.
pub async fn spans_v1(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let enc = match mime(&headers).as_str() {
        "application/x-thrift" | "application/vnd.apache.thrift.binary" => Encoding::ThriftV1,
        _ => Encoding::JsonV1,
    };
    receive(&st, &headers, body, enc).await
}

fn mime(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Working memory of the conversion per byte of payload (the OTLP output is about the size of
/// the Zipkin JSON, and a little larger than proto3 or thrift).
const WORK_FACTOR: u64 = 2;

async fn receive(st: &AppState, headers: &HeaderMap, body: Body, enc: Encoding) -> Response {
    let receiver = st.receiver();
    let tenant = match receiver.tenant(headers) {
        Ok(t) => t,
        Err(r) => return BodyError::from(r).into_response(),
    };
    let held = Held::default();
    let data: Bytes = match crate::receivers::body::read(st, headers, body, &tenant, &held).await {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = st.budget.acquire(WORK_FACTOR * data.len() as u64, &held).await {
        return crate::receivers::body::busy(st, &tenant, e).into_response();
    }
    let (otlp, count) = match weft_translate::zipkin::to_otlp_request(enc, &data) {
        Ok(r) => r,
        Err(e) => {
            receiver.refused(&tenant, RefuseReason::Invalid);
            return text(StatusCode::BAD_REQUEST, None, e.to_string());
        }
    };
    drop(data);
    if count == 0 {
        return StatusCode::ACCEPTED.into_response();
    }
    let result = receiver.push_converted(&tenant, Bytes::from(otlp), None).await;
    drop(held);
    match result {
        Ok(resp) => match resp.partial_success {
            // Zipkin has no partial success: a request whose every span was refused is a 400
            // naming why; with some accepted it is a 202 whose body says what was refused.
            Some(p) if p.rejected_spans as usize >= count => text(StatusCode::BAD_REQUEST, None, p.error_message),
            Some(p) => text(
                StatusCode::ACCEPTED,
                None,
                format!("{} of {count} spans refused: {}", p.rejected_spans, p.error_message),
            ),
            None => StatusCode::ACCEPTED.into_response(),
        },
        Err(r) => BodyError::from(r).into_response(),
    }
}
