//! OTLP/HTTP receiver: `POST /v1/traces`, protobuf or JSON, optionally gzip.

use crate::AppState;
use crate::budget::{BudgetedBody, Exhausted, Held};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use prost::Message;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;
use weft_ingest::metrics::RefuseReason;

use super::Refusal;
use super::code::{INVALID_ARGUMENT, UNAVAILABLE};

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
    let max = st.cfg.max_request_bytes;
    let too_large = |what: String| {
        receiver.refused(&tenant, RefuseReason::RequestTooLarge);
        OtlpError::from(Refusal::TooLarge(what))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    // Past the limit the rest of the body is read and discarded (up to `drain_cap`), so the
    // client reads the 413 instead of a connection reset while it is still sending.
    let drain_cap = max.saturating_mul(4);
    if let Some(len) = declared
        && len > max as u64
    {
        if len <= drain_cap as u64 {
            let _ = tokio::time::timeout(body_timeout(st), read_limited(body, 0, drain_cap)).await;
        }
        return Err(too_large(format!(
            "request body of {len} bytes exceeds the maximum request size of {max} bytes"
        )));
    }
    // A tenant already over its rate gets 429 before its body is read or decoded.
    receiver.check_rate(&tenant)?;
    // The body's bytes come out of the shared request budget: all at once before reading
    // when the length is declared, else frame by frame ([`crate::budget`]).
    let held = Held::default();
    let body = match declared {
        Some(len) => {
            st.budget.acquire(len, &held).await.map_err(|e| busy(st, &tenant, e))?;
            axum::body::Body::new(body)
        }
        None => axum::body::Body::new(BudgetedBody::new(body, st.budget.clone(), held.clone())),
    };
    let raw = match tokio::time::timeout(body_timeout(st), read_limited(body, max, drain_cap)).await {
        Ok(Ok(Some(raw))) => raw,
        Ok(Ok(None)) => {
            return Err(too_large(format!(
                "request body exceeds the maximum request size of {max} bytes"
            )));
        }
        Ok(Err(e)) => {
            if let Some(ex) = find_cause::<Exhausted>(&e) {
                return Err(busy(st, &tenant, ex.clone()));
            }
            receiver.refused(&tenant, RefuseReason::Invalid);
            return Err(OtlpError::new(
                StatusCode::BAD_REQUEST,
                INVALID_ARGUMENT,
                format!("reading the request body failed: {e}"),
            ));
        }
        Err(_) => {
            receiver.refused(&tenant, RefuseReason::Invalid);
            return Err(OtlpError::new(
                StatusCode::REQUEST_TIMEOUT,
                INVALID_ARGUMENT,
                format!(
                    "the request body did not arrive within {}s (--body-timeout)",
                    st.cfg.body_timeout
                ),
            ));
        }
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    let data = match encoding.as_str() {
        "" | "identity" => raw,
        "gzip" | "x-gzip" => {
            let cap = st.cfg.max_decompressed_bytes;
            // Inflated in steps, each taken from the budget before it is written.
            const STEP: usize = 1 << 20;
            let mut out: Vec<u8> = Vec::new();
            let mut dec = flate2::read::MultiGzDecoder::new(&raw[..]);
            loop {
                st.budget
                    .acquire(STEP as u64, &held)
                    .await
                    .map_err(|e| busy(st, &tenant, e))?;
                out.reserve_exact(STEP);
                let before = out.len();
                match (&mut dec).take(STEP as u64).read_to_end(&mut out) {
                    Ok(_) if out.len() > cap => {
                        return Err(too_large(format!(
                            "request decompresses to more than the maximum of {cap} bytes"
                        )));
                    }
                    Ok(_) if out.len() - before < STEP => break,
                    Ok(_) => {}
                    Err(e) => {
                        receiver.refused(&tenant, RefuseReason::Invalid);
                        return Err(OtlpError::new(
                            StatusCode::BAD_REQUEST,
                            INVALID_ARGUMENT,
                            format!("invalid gzip body: {e}"),
                        ));
                    }
                }
            }
            drop(raw);
            Bytes::from(out)
        }
        other => {
            return Err(OtlpError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_ARGUMENT,
                format!("unsupported content encoding {other:?}: use gzip or none"),
            ));
        }
    };
    let pb = match fmt {
        Format::Protobuf => data,
        Format::Json => {
            // The conversion's working memory, taken before the work.
            st.budget
                .acquire(JSON_WORK_FACTOR * data.len() as u64, &held)
                .await
                .map_err(|e| busy(st, &tenant, e))?;
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

fn body_timeout(st: &AppState) -> Duration {
    Duration::from_secs_f64(st.cfg.body_timeout)
}

/// The 503 of a request that found the budget exhausted.
fn busy(st: &AppState, tenant: &str, e: Exhausted) -> OtlpError {
    st.receiver().refused(tenant, RefuseReason::Overloaded);
    OtlpError {
        retry_after: Some(Duration::from_secs(1)),
        ..OtlpError::new(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, e.to_string())
    }
}

/// The first error of type `T` in `e`'s chain of sources.
fn find_cause<'a, T: std::error::Error + 'static>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<T>() {
            return Some(t);
        }
        cur = err.source();
    }
    None
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

/// Reads a body of at most `max` bytes. A longer body yields `Ok(None)` after the rest is read
/// and discarded, up to `drain` bytes in all (then reading stops and the connection closes).
/// A body that arrives in one frame is returned without copying.
async fn read_limited(mut body: Body, max: usize, drain: usize) -> Result<Option<Bytes>, axum::Error> {
    use http_body_util::BodyExt;
    let mut first: Option<Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen > drain {
            return Ok(None);
        }
        if seen > max {
            first = None;
            rest = bytes::BytesMut::new();
        } else if first.is_none() && rest.is_empty() {
            first = Some(data);
        } else {
            if let Some(f) = first.take() {
                rest.reserve(f.len() + data.len());
                rest.extend_from_slice(&f);
            }
            rest.extend_from_slice(&data);
        }
    }
    Ok((seen <= max).then(|| first.unwrap_or_else(|| rest.freeze())))
}
