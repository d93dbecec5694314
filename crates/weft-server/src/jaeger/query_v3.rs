//! Jaeger v2's `api/v3` query routes on the Jaeger query port: services, operations, a trace
//! and trace search, in OTLP JSON adjusted as Jaeger v2 adjusts traces
//! ([`weft_translate::jaeger::v3`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prost::Message;
use serde_json::{Value as Json, json};
use weft_block::row::SpanRow;
use weft_engine::newest::Matcher;
use weft_otlp::pb::trace::TracesData;

use super::query::*;
use crate::app::AppState;
use crate::query::foreign::{ForeignQuery, ForeignSearch, query_with_tenant, quote, values};
use crate::query::{mark_partial, read_failed};
use weft_translate::jaeger::v3::FindQuery;

/// `query.num_traces` when absent (Jaeger v2 refuses a search without it; weft answers with
/// Jaeger UI's default page).
const DEFAULT_V3_LIMIT: usize = 20;

/// An error as Jaeger v2's HTTP gateway writes it: `{"error": {"httpCode", "message"}}`.
fn v3_error(status: StatusCode, msg: impl Into<String>) -> Response {
    let body = json!({"error": {"httpCode": status.as_u16(), "message": msg.into()}});
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn v3_json(v: Json) -> Response {
    let mut r = v.to_string().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn v3_unauthorized(msg: String) -> Response {
    v3_error(StatusCode::UNAUTHORIZED, msg)
}

/// Go's `strconv.ParseBool`, which the gateway reads `raw_traces` with.
fn go_bool(name: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!(
            "malformed parameter {name}: strconv.ParseBool: parsing {v:?}: invalid syntax"
        )),
    }
}

/// An RFC 3339 time parameter, in Unix nanoseconds.
fn v3_time(name: &str, v: &str) -> Result<u64, String> {
    crate::query::parse_rfc3339(v).ok_or_else(|| format!("malformed parameter {name}: {v:?} is not an RFC 3339 time"))
}

fn rows_to_data(rows: &[SpanRow]) -> TracesData {
    TracesData::decode(&weft_block::row::encode_traces_data(&crate::query::reply::shown(rows))[..]).unwrap_or_default()
}

/// `{"result": {"resourceSpans": [...]}}` of traces, adjusted unless `raw`.
fn v3_traces(traces: Vec<TracesData>, raw: bool) -> Response {
    if traces.is_empty() {
        return v3_error(StatusCode::NOT_FOUND, "No traces found");
    }
    let mut all = Vec::new();
    for mut td in traces {
        if !raw {
            weft_translate::jaeger::v3::adjust(&mut td);
        }
        all.extend(td.resource_spans);
    }
    v3_json(json!({"result": {"resourceSpans": weft_otlp::json::resource_spans_to_json(&all)}}))
}

/// `GET /api/v3/services`.
pub async fn v3_services(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        match values(&s, &tenant, "{ }", "resource.service.name").await {
            Ok(v) => v3_json(json!({"services": sorted(v)})),
            Err(r) => r,
        }
    })
    .await
}

/// `GET /api/v3/operations?service=&span_kind=`.
pub async fn v3_operations(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        let service = p.get("service").map(String::as_str).unwrap_or("");
        let kind = p.get("span_kind").map(String::as_str).filter(|k| !k.is_empty());
        let known = kind.is_none_or(is_kind);
        // Jaeger answers an unknown service or kind with no operations.
        if service.is_empty() || !known {
            return v3_json(json!({"operations": []}));
        }
        match operations_of(&s, &tenant, service, kind).await {
            Ok(ops) => v3_json(json!({ "operations": ops_json(&ops) })),
            Err(r) => r,
        }
    })
    .await
}

/// `GET /api/v3/traces/{trace_id}?start_time=&end_time=&raw_traces=`.
pub async fn v3_trace(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        let Some(tid) = weft_translate::parse_hex_id::<16>(id.trim()) else {
            return v3_error(
                StatusCode::BAD_REQUEST,
                format!("malformed parameter trace_id: {id:?} is not 1 to 32 hex digits"),
            );
        };
        let get = |k: &str| p.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let start = match get("start_time").map(|v| v3_time("start_time", v)).transpose() {
            Ok(v) => v,
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let end = match get("end_time").map(|v| v3_time("end_time", v)).transpose() {
            Ok(v) => v,
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let raw = match get("raw_traces").map(|v| go_bool("raw_traces", v)).transpose() {
            Ok(v) => v.unwrap_or(false),
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let range = (start.is_some() || end.is_some()).then(|| (start.unwrap_or(0), end.unwrap_or(u64::MAX)));
        let found = match s
            .querier()
            .find_trace_capped(&tenant, &tid, range, s.cfg.query.max_trace_response_bytes)
            .await
        {
            Ok(f) => f,
            Err(e) => return read_failed(&e, "reading trace", v3_error),
        };
        let traces = if found.rows.is_empty() {
            Vec::new()
        } else {
            vec![rows_to_data(&found.rows)]
        };
        mark_partial(v3_traces(traces, raw), found.damaged_blocks)
    })
    .await
}

/// Jaeger v2's `FindTraces` rules ([`FindQuery::matches`]), newest first by trace start.
pub(crate) struct V3Match(pub FindQuery);

impl Matcher for V3Match {
    fn key(&self, rows: &[SpanRow]) -> Option<u64> {
        let start = rows.iter().map(|r| r.start_unix_nano).min()?;
        self.0.matches(&rows_to_data(rows)).then_some(start)
    }
}

/// `GET /api/v3/traces?query.service_name=&query.operation_name=&query.start_time_min=&
/// query.start_time_max=&query.duration_min=&query.duration_max=&query.num_traces=&
/// query.raw_traces=`.
pub async fn v3_find(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        let get = |k: &str| p.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let (Some(min), Some(max)) = (get("query.start_time_min"), get("query.start_time_max")) else {
            return v3_error(
                StatusCode::BAD_REQUEST,
                "query.start_time_min and query.start_time_max are required",
            );
        };
        let (min, max) = match (
            v3_time("query.start_time_min", min),
            v3_time("query.start_time_max", max),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let limit = match get("query.num_traces").map(str::parse::<usize>) {
            None => DEFAULT_V3_LIMIT,
            Some(Ok(n)) if n > 0 => n.min(MAX_LIMIT),
            Some(_) => {
                return v3_error(
                    StatusCode::BAD_REQUEST,
                    "malformed parameter query.num_traces: expected a positive number",
                );
            }
        };
        let dur = |k: &str| {
            get(k)
                .map(|v| crate::query::parse_duration(v).map_err(|e| format!("malformed parameter {k}: {e}")))
                .transpose()
        };
        let (dmin, dmax) = match (dur("query.duration_min"), dur("query.duration_max")) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let raw = match get("query.raw_traces")
            .map(|v| go_bool("query.raw_traces", v))
            .transpose()
        {
            Ok(v) => v.unwrap_or(false),
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let service = get("query.service_name").unwrap_or("");
        let search = ForeignSearch {
            filter: if service.is_empty() {
                "{ }".to_owned()
            } else {
                format!("{{ resource.service.name = {} }}", quote(service))
            },
            limit,
            query: ForeignQuery::JaegerV3(FindQuery {
                service: service.to_owned(),
                operation: get("query.operation_name").map(str::to_owned),
                start_min_ns: min,
                start_max_ns: max,
                duration_min_ns: dmin,
                duration_max_ns: dmax,
            }),
        };
        let (traces, stats) = match crate::query::foreign::search(&s, &tenant, &search).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let traces = traces.iter().map(|rows| rows_to_data(rows)).collect();
        crate::query::reply::mark_scanned(v3_traces(traces, raw), &stats)
    })
    .await
}
