//! Reading a request body the way every HTTP receiver does: size caps before and while reading
//! (413, with the rest drained so the client reads the answer), the shared request budget
//! (503 when exhausted), the body timeout (408), a tenant over its rate refused before the body
//! is read (429), and gzip inflated in budgeted steps up to the decompressed cap.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use std::io::Read;
use std::time::Duration;
use weft_admission::metrics::RefuseReason;

use super::Refusal;
use super::code::{INVALID_ARGUMENT, UNAVAILABLE};
use crate::app::AppState;
use crate::budget::{BudgetedBody, Exhausted, Held};

/// Why a body was not read: the HTTP status, `google.rpc.Code`, message and `Retry-After`.
#[derive(Debug)]
pub struct BodyError {
    pub status: StatusCode,
    pub code: i32,
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl BodyError {
    pub fn new(status: StatusCode, code: i32, message: impl Into<String>) -> Self {
        BodyError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl From<Refusal> for BodyError {
    fn from(r: Refusal) -> Self {
        let (status, code, message, retry_after) = r.parts();
        BodyError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            message,
            retry_after,
        }
    }
}

/// Reads and inflates a request body for `tenant`. The bytes stay accounted in `held` until
/// it is dropped.
pub async fn read(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
    tenant: &str,
    held: &Held,
) -> Result<Bytes, BodyError> {
    let receiver = st.receiver();
    let max = st.cfg.receivers.max_request_bytes;
    let too_large = |what: String| {
        receiver.refused(tenant, RefuseReason::RequestTooLarge);
        BodyError::from(Refusal::TooLarge(what))
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
            let _ = tokio::time::timeout(body_timeout(st), read_limited(body, 0, drain_cap, 0)).await;
        }
        return Err(too_large(format!(
            "request body of {len} bytes exceeds the maximum request size of {max} bytes"
        )));
    }
    // A tenant already over its rate gets 429 before its body is read or decoded.
    let tenant_arc: std::sync::Arc<str> = tenant.into();
    receiver.check_rate(&tenant_arc)?;
    // The body's bytes come out of the shared request budget: all at once before reading
    // when the length is declared, else frame by frame ([`crate::budget`]).
    let body = match declared {
        Some(len) => {
            st.budget.acquire(len, held).await.map_err(|e| busy(st, tenant, e))?;
            Body::new(body)
        }
        None => Body::new(BudgetedBody::new(body, st.budget.clone(), held.clone())),
    };
    let expect = declared.map_or(0, |n| (n as usize).min(max));
    let raw = match tokio::time::timeout(body_timeout(st), read_limited(body, max, drain_cap, expect)).await {
        Ok(Ok(Some(raw))) => raw,
        Ok(Ok(None)) => {
            return Err(too_large(format!(
                "request body exceeds the maximum request size of {max} bytes"
            )));
        }
        Ok(Err(e)) => {
            if let Some(ex) = find_cause::<Exhausted>(&e) {
                return Err(busy(st, tenant, ex.clone()));
            }
            receiver.refused(tenant, RefuseReason::Invalid);
            return Err(BodyError::new(
                StatusCode::BAD_REQUEST,
                INVALID_ARGUMENT,
                format!("reading the request body failed: {e}"),
            ));
        }
        Err(_) => {
            receiver.refused(tenant, RefuseReason::Invalid);
            return Err(BodyError::new(
                StatusCode::REQUEST_TIMEOUT,
                INVALID_ARGUMENT,
                format!(
                    "the request body did not arrive within {}s (--body-timeout)",
                    st.cfg.receivers.body_timeout
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
    match encoding.as_str() {
        "" | "identity" => Ok(raw),
        "gzip" | "x-gzip" => {
            let cap = st.cfg.receivers.max_decompressed_bytes;
            // Inflated in steps, each taken from the budget before it is written.
            const STEP: usize = 1 << 20;
            let mut out: Vec<u8> = Vec::new();
            let mut dec = flate2::read::MultiGzDecoder::new(&raw[..]);
            loop {
                st.budget
                    .acquire(STEP as u64, held)
                    .await
                    .map_err(|e| busy(st, tenant, e))?;
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
                        receiver.refused(tenant, RefuseReason::Invalid);
                        return Err(BodyError::new(
                            StatusCode::BAD_REQUEST,
                            INVALID_ARGUMENT,
                            format!("invalid gzip body: {e}"),
                        ));
                    }
                }
            }
            drop(raw);
            Ok(Bytes::from(out))
        }
        other => Err(BodyError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            INVALID_ARGUMENT,
            format!("unsupported content encoding {other:?}: use gzip or none"),
        )),
    }
}

fn body_timeout(st: &AppState) -> Duration {
    Duration::from_secs_f64(st.cfg.receivers.body_timeout)
}

/// The 503 of a request that found the budget exhausted.
pub fn busy(st: &AppState, tenant: &str, e: Exhausted) -> BodyError {
    st.receiver().refused(tenant, RefuseReason::Overloaded);
    BodyError {
        retry_after: Some(Duration::from_secs(1)),
        ..BodyError::new(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, e.to_string())
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

/// Reads a body of at most `max` bytes. A longer body yields `Ok(None)` after the rest is read
/// and discarded, up to `drain` bytes in all (then reading stops and the connection closes).
/// A body that arrives in one frame is returned without copying; one in several is gathered
/// into room for `expect` bytes (its declared length), not grown and copied frame by frame.
async fn read_limited(mut body: Body, max: usize, drain: usize, expect: usize) -> Result<Option<Bytes>, axum::Error> {
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
                rest.reserve(expect.max(f.len() + data.len()));
                rest.extend_from_slice(&f);
            }
            rest.extend_from_slice(&data);
        }
    }
    Ok((seen <= max).then(|| first.unwrap_or_else(|| rest.freeze())))
}
