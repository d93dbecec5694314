//! OTLP/HTTP receiver: `POST /v1/traces`, protobuf or JSON, optionally gzip.

use crate::app::AppState;
use crate::budget::Held;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use weft_admission::metrics::RefuseReason;

use crate::receivers::Refusal;
use crate::receivers::code::INVALID_ARGUMENT;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Protobuf,
    Json,
}

/// An OTLP/HTTP error: status, `google.rpc.Status` code and message, optional `Retry-After`.
struct OtlpError {
    status: StatusCode,
    code: i32,
    message: String,
    retry_after: Option<Duration>,
}

impl OtlpError {
    fn new(status: StatusCode, code: i32, message: impl Into<String>) -> Self {
        OtlpError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn into_response(self, fmt: Format) -> Response {
        let body = match fmt {
            Format::Json => serde_json::json!({ "code": self.code, "message": self.message })
                .to_string()
                .into_bytes(),
            Format::Protobuf => {
                // google.rpc.Status { int32 code = 1; string message = 2; }
                let mut out = Vec::new();
                weft_otlp::wire::put_varint_field(&mut out, 1, self.code as u32 as u64);
                weft_otlp::wire::put_bytes(&mut out, 2, self.message.as_bytes());
                out
            }
        };
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, content_type(fmt));
        if let Some(d) = self.retry_after {
            let secs = d.as_secs_f64().ceil().max(1.0) as u64;
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        r
    }
}

fn content_type(fmt: Format) -> HeaderValue {
    HeaderValue::from_static(match fmt {
        Format::Json => "application/json",
        Format::Protobuf => "application/x-protobuf",
    })
}

/// `POST /v1/traces`.
pub async fn export(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ctype.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let fmt = match mime.as_str() {
        "application/x-protobuf" | "application/protobuf" => Format::Protobuf,
        "application/json" => Format::Json,
        _ => {
            return OtlpError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_ARGUMENT,
                format!("unsupported content type {ctype:?}: use application/x-protobuf or application/json"),
            )
            .into_response(Format::Json);
        }
    };
    match handle(&st, &headers, body, fmt).await {
        Ok(r) => r,
        Err(e) => e.into_response(fmt),
    }
}

async fn handle(st: &AppState, headers: &HeaderMap, body: Body, fmt: Format) -> Result<Response, OtlpError> {
    let receiver = st.receiver();
    let tenant = receiver.tenant(headers)?;
    let held = Held::default();
    let data = crate::receivers::body::read(st, headers, body, &tenant, &held).await?;
    let pb = match fmt {
        Format::Protobuf => data,
        Format::Json => {
            // The conversion's working memory, taken before the work.
            st.budget
                .acquire(JSON_WORK_FACTOR * data.len() as u64, &held)
                .await
                .map_err(|e| OtlpError::from(crate::receivers::body::busy(st, &tenant, e)))?;
            match weft_otlp::json::request_json_to_protobuf(&data) {
                Ok(pb) => Bytes::from(pb),
                Err(e) => {
                    receiver.refused(&tenant, RefuseReason::Invalid);
                    return Err(OtlpError::new(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, e.to_string()));
                }
            }
        }
    };
    let result = receiver.push(&tenant, pb, None).await;
    drop(held);
    match result {
        Ok(resp) => {
            let body = match fmt {
                Format::Protobuf => resp.encode_to_vec(),
                Format::Json => weft_otlp::json::response_to_json(&resp).to_string().into_bytes(),
            };
            let mut r = (StatusCode::OK, body).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, content_type(fmt));
            Ok(r)
        }
        Err(r) => Err(r.into()),
    }
}

/// Working memory of converting OTLP/JSON to protobuf, per byte of JSON, taken from the
/// budget before the conversion runs: the streaming converter's output buffer, which is
/// reserved at the JSON's size (measured peak: 1.0x; `weft-otlp/tests/json_memory.rs`).
const JSON_WORK_FACTOR: u64 = 1;

impl From<crate::receivers::body::BodyError> for OtlpError {
    fn from(e: crate::receivers::body::BodyError) -> Self {
        OtlpError {
            status: e.status,
            code: e.code,
            message: e.message,
            retry_after: e.retry_after,
        }
    }
}

impl From<Refusal> for OtlpError {
    fn from(r: Refusal) -> Self {
        let (status, code, message, retry_after) = r.parts();
        OtlpError {
            retry_after,
            ..OtlpError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                code,
                message,
            )
        }
    }
}
