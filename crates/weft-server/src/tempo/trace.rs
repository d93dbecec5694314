//! Tempo's trace by ID: `GET /api/traces/{id}` (v1 shape) and `GET /api/v2/traces/{id}`.

use crate::app::AppState;
use crate::query::LIVE_STORES_PARTIAL_HEADER;
use crate::query::reply::{
    PARTIAL_HEADER, hide_zipkin_original, mark_scanned, parse_trace_id, read_failed, trace_partial_message,
};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg.into() + "\n",
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub struct TraceParams {
    start: Option<String>,
    end: Option<String>,
}

fn parse_secs(name: &str, v: &Option<String>) -> Result<Option<u64>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("invalid {name} {s:?}: expected Unix seconds")),
    }
}

/// A response header naming how many damaged blocks a query skipped; present only when it
/// `GET /api/traces/{id}` (v1 shape) and `GET /api/v2/traces/{id}` (v2 shape).
pub async fn trace_by_id(st: &AppState, headers: &HeaderMap, id: &str, params: &TraceParams, v2: bool) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(headers) {
        Ok(t) => t,
        Err(e) => return error(StatusCode::UNAUTHORIZED, e.0),
    };
    let id = match parse_trace_id(id) {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let range = match (parse_secs("start", &params.start), parse_secs("end", &params.end)) {
        (Ok(Some(s)), Ok(Some(e))) if s > e => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid range: start {s} is after end {e}"),
            );
        }
        (Ok(s), Ok(e)) if s.is_some() || e.is_some() => Some((s.unwrap_or(0), e.unwrap_or(u64::MAX))),
        (Ok(_), Ok(_)) => None,
        (Err(m), _) | (_, Err(m)) => return error(StatusCode::BAD_REQUEST, m),
    };
    let mut found =
        match crate::query::jobs::trace::find_trace(st, &tenant, &id, range, st.cfg.query.max_trace_response_bytes)
            .await
        {
            Ok(r) => r,
            Err(e) => return read_failed(&e, "reading trace", error),
        };
    st.trace_latency.observe(started.elapsed().as_secs_f64());
    let mut rows = std::mem::take(&mut found.rows);
    hide_zipkin_original(&mut rows);
    if rows.is_empty() {
        // Not found in what could be read; a damaged block that may have held it, or a live
        // store that did not answer, says so.
        let msg = match trace_partial_message(&found) {
            None => format!("trace not found: {}", weft_core::hex(&id)),
            Some(m) => format!("trace not found: {}; {m}", weft_core::hex(&id)),
        };
        return mark_scanned(error(StatusCode::NOT_FOUND, msg), &found.stats());
    }
    // A trace over the read cap: the earliest spans, marked as Tempo marks partial results
    // (v2 `status: PARTIAL` with a message) and, for every shape, a response header.
    let mut partial = Vec::new();
    if found.truncated {
        partial.push(format!(
            "trace {} is larger than the response cap of {} bytes (--max-trace-response-bytes); only its first {} spans are returned",
            weft_core::hex(&id),
            st.cfg.query.max_trace_response_bytes,
            rows.len()
        ));
    }
    partial.extend(trace_partial_message(&found));
    let mut resp_headers = HeaderMap::new();
    resp_headers.insert("x-weft-blocks-read", found.blocks_read.into());
    if found.truncated {
        resp_headers.insert("x-weft-trace-truncated", axum::http::HeaderValue::from_static("true"));
    }
    if found.damaged_blocks > 0 {
        resp_headers.insert(PARTIAL_HEADER, found.damaged_blocks.into());
    }
    if found.unanswered_live_stores > 0 {
        resp_headers.insert(LIVE_STORES_PARTIAL_HEADER, found.unanswered_live_stores.into());
    }
    let truncated = (!partial.is_empty()).then(|| partial.join("; "));
    let wants_proto = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/protobuf") || a.contains("application/x-protobuf"));
    if wants_proto {
        let data = weft_block::row::encode_traces_data(&rows);
        drop(rows);
        let body = if v2 {
            // TraceByIDResponse { Trace trace = 1; ...; PartialStatus status = 3; string message = 4; }
            let mut out = Vec::with_capacity(data.len() + 6);
            weft_otlp::wire::put_bytes(&mut out, 1, &data);
            if let Some(msg) = &truncated {
                weft_otlp::wire::put_varint_field(&mut out, 3, 1);
                weft_otlp::wire::put_bytes(&mut out, 4, msg.as_bytes());
            }
            out
        } else {
            data
        };
        return (resp_headers, [(header::CONTENT_TYPE, "application/protobuf")], body).into_response();
    }
    let body = stream_trace_json(rows, found.large_read, v2, truncated);
    (resp_headers, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Spans per piece of a JSON trace. Each piece is rendered on its own (its spans grouped by
/// resource and scope into batches) and sent as soon as enough text is ready, so a large trace
/// costs one piece's JSON tree and a few chunks of text at a time, not a tree of the whole
/// trace (which took 1.5–2.8 GiB for 200,000 spans). A resource whose spans span several
/// pieces appears in several batches, as OTLP allows.
const JSON_PIECE_SPANS: usize = 256;

/// The v1 (`{"batches": [...]}`) or v2 (`{"trace": {"resourceSpans": [...]}}`) JSON of a
/// trace, written piece by piece on a blocking thread and streamed to the client.
fn stream_trace_json(
    rows: Vec<weft_block::row::SpanRow>,
    large_read: Option<tokio::sync::OwnedSemaphorePermit>,
    v2: bool,
    partial: Option<String>,
) -> axum::body::Body {
    crate::query::reply::streamed(move |out| {
        // Held until the trace is written, so large traces in memory at once stay few.
        let _large_read = large_read;
        out.buf.extend_from_slice(if v2 {
            br#"{"trace":{"resourceSpans":["#
        } else {
            br#"{"batches":["#
        });
        let mut first = true;
        for piece in rows.chunks(JSON_PIECE_SPANS) {
            let data = weft_block::row::encode_traces_data(piece);
            // Straight from protobuf to JSON text: no message tree, no JSON tree (a span with
            // 1.4M attributes took 2.2 GiB through both).
            if let Err(e) = weft_otlp::json::write_resource_spans_json(&data, &mut first, &mut out.buf) {
                tracing::error!(error = %e, "stored trace does not decode; response cut short");
                return Err(out.fail(format!("stored trace does not decode: {e}")));
            }
            out.flush_if_full()?;
        }
        out.buf.push(b']');
        if v2 {
            out.buf.push(b'}');
        }
        // v1 (`tempopb.Trace`) has no field for it: the x-weft-* headers say so.
        if let (Some(msg), true) = (&partial, v2) {
            out.buf.extend_from_slice(br#","status":"PARTIAL","message":"#);
            serde_json::to_writer(&mut out.buf, msg).expect("writing to memory");
        }
        out.buf.push(b'}');
        Ok(())
    })
}

pub async fn trace_v1(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(p): Query<TraceParams>,
) -> Response {
    trace_by_id(&st, &headers, &id, &p, false).await
}

pub async fn trace_v2(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(p): Query<TraceParams>,
) -> Response {
    trace_by_id(&st, &headers, &id, &p, true).await
}
