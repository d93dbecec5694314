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
use crate::query::foreign::{ForeignQuery, ForeignSearch, query_with_tenant, quote};
use crate::query::read_failed;
use weft_translate::jaeger::v3::FindQuery;

/// `query.searchDepth` when absent: Jaeger's default.
const DEFAULT_V3_LIMIT: usize = 100;

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

/// Go's `strconv.ParseBool`, which the gateway reads `rawTraces` with.
fn go_bool(name: &str, v: &str) -> Result<bool, String> {
    weft_translate::jaeger::v3::go_parse_bool(v)
        .ok_or_else(|| format!("malformed parameter {name}: strconv.ParseBool: parsing {v:?}: invalid syntax"))
}

/// An RFC 3339 time parameter, in Unix nanoseconds.
fn v3_time(name: &str, v: &str) -> Result<u64, String> {
    crate::query::parse_rfc3339(v)
        .ok_or_else(|| format!("malformed parameter {name}: {v:?} is not an RFC 3339 time from 1970 to 2554"))
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
        match crate::query::foreign::service_list(&s, &tenant).await {
            Ok(v) => v3_json(json!({"services": sorted(v)})),
            Err(r) => r,
        }
    })
    .await
}

/// `GET /api/v3/operations?service=&spanKind=` (or `span_kind=`).
pub async fn v3_operations(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        let service = p.get("service").map(String::as_str).unwrap_or("");
        let kind = param(&p, "spanKind", "span_kind").map(|(k, _)| k);
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

/// `GET /api/v3/traces/{trace_id}?startTime=&endTime=&rawTraces=` (or the snake_case names).
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
        let start = match param(&p, "startTime", "start_time")
            .map(|(v, k)| v3_time(k, v))
            .transpose()
        {
            Ok(v) => v,
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let end = match param(&p, "endTime", "end_time").map(|(v, k)| v3_time(k, v)).transpose() {
            Ok(v) => v,
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let raw = match param(&p, "rawTraces", "raw_traces")
            .map(|(v, k)| go_bool(k, v))
            .transpose()
        {
            Ok(v) => v.unwrap_or(false),
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let range = (start.is_some() || end.is_some()).then(|| (start.unwrap_or(0), end.unwrap_or(u64::MAX)));
        let found =
            match crate::query::jobs::trace::find_trace(&s, &tenant, &tid, range, s.cfg.query.max_trace_response_bytes)
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
        crate::query::reply::mark_scanned(v3_traces(traces, raw), &found.stats())
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

/// A parameter by its canonical lowerCamelCase name or the snake_case one Jaeger still reads;
/// the value (never empty) and the name it came under.
fn param<'a>(p: &'a HashMap<String, String>, canonical: &'a str, snake: &'a str) -> Option<(&'a str, &'a str)> {
    [canonical, snake]
        .into_iter()
        .find_map(|k| p.get(k).map(|v| (v.as_str(), k)).filter(|(v, _)| !v.is_empty()))
}

/// The `query.*` parameters of `FindTraces` and `FindTraceSummaries`, as Jaeger's HTTP
/// gateway reads them: a search (its prefilter, limit and Jaeger's rules) and `rawTraces`.
fn parse_find(p: &HashMap<String, String>) -> Result<(ForeignSearch, bool), String> {
    let (Some((min, min_name)), Some((max, max_name))) = (
        param(p, "query.startTimeMin", "query.start_time_min"),
        param(p, "query.startTimeMax", "query.start_time_max"),
    ) else {
        return Err("query.startTimeMin and query.startTimeMax are required".into());
    };
    let (min, max) = (v3_time(min_name, min)?, v3_time(max_name, max)?);
    if min >= max {
        return Err("query.startTimeMin must be before query.startTimeMax".into());
    }
    let limit = match param(p, "query.searchDepth", "query.search_depth")
        .or_else(|| param(p, "query.num_traces", "query.num_traces"))
    {
        None => DEFAULT_V3_LIMIT,
        Some((n, name)) => match n.parse::<i64>() {
            Ok(n) if n > 0 => (n as usize).min(MAX_LIMIT),
            // Jaeger's storage reads a depth of 0 or less as no results wanted; weft refuses it.
            Ok(_) => return Err(format!("malformed parameter {name}: expected a positive number")),
            Err(_) => return Err(format!("malformed parameter {name}: {n:?} is not a number")),
        },
    };
    let dur = |canonical, snake| {
        param(p, canonical, snake)
            .map(|(v, k)| crate::query::parse_duration(v).map_err(|e| format!("malformed parameter {k}: {e}")))
            .transpose()
    };
    let dmin = dur("query.durationMin", "query.duration_min")?;
    let dmax = dur("query.durationMax", "query.duration_max")?;
    let raw = match param(p, "query.rawTraces", "query.raw_traces") {
        Some((v, k)) => go_bool(k, v)?,
        None => false,
    };
    let mut attributes: Vec<(String, String)> = match p.get("query.attributes").filter(|v| !v.is_empty()) {
        Some(v) => serde_json::from_str::<HashMap<String, String>>(v)
            .map_err(|e| format!("malformed parameter query.attributes: {e} (expected a JSON object of strings)"))?
            .into_iter()
            .collect(),
        None => Vec::new(),
    };
    attributes.sort();
    if p.get("query.filter").is_some_and(|v| !v.is_empty()) {
        return Err(
            "query.filter (structured filters, experimental in Jaeger) is not supported: use \
                    query.serviceName, query.operationName, query.attributes and the durations, or TraceQL at \
                    /api/search"
                .into(),
        );
    }
    let service = param(p, "query.serviceName", "query.service_name").map_or("", |(v, _)| v);
    let search = ForeignSearch {
        filter: if service.is_empty() {
            "{ }".to_owned()
        } else {
            format!("{{ resource.service.name = {} }}", quote(service))
        },
        limit,
        query: ForeignQuery::JaegerV3(FindQuery {
            service: service.to_owned(),
            operation: param(p, "query.operationName", "query.operation_name").map(|(v, _)| v.to_owned()),
            start_min_ns: min,
            start_max_ns: max,
            duration_min_ns: dmin,
            duration_max_ns: dmax,
            attributes,
        }),
    };
    Ok((search, raw))
}

/// `GET /api/v3/traces?query.serviceName=&query.operationName=&query.attributes=&
/// query.startTimeMin=&query.startTimeMax=&query.durationMin=&query.durationMax=&
/// query.searchDepth=&query.rawTraces=` (and the snake_case names).
pub async fn v3_find(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        let (search, raw) = match parse_find(&p) {
            Ok(x) => x,
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
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

/// `GET /api/v3/trace-summaries` with `FindTraces`' parameters: `{"summaries": [...]}`, one
/// [`weft_translate::jaeger::v3::summary`] per matching trace, newest first (what Jaeger UI
/// 2.19 and later searches with). No match is `{}`, as Jaeger writes an empty list; a
/// summary is always of the adjusted trace (`rawTraces` has no effect).
pub async fn v3_summaries(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, v3_unauthorized, move |s, tenant| async move {
        let (search, _) = match parse_find(&p) {
            Ok(x) => x,
            Err(e) => return v3_error(StatusCode::BAD_REQUEST, e),
        };
        let (traces, stats) = match crate::query::foreign::search(&s, &tenant, &search).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let summaries: Vec<Json> = traces
            .iter()
            .map(|rows| {
                let mut td = rows_to_data(rows);
                weft_translate::jaeger::v3::adjust(&mut td);
                weft_translate::jaeger::v3::summary(&td)
            })
            .collect();
        let body = if summaries.is_empty() {
            json!({})
        } else {
            json!({ "summaries": summaries })
        };
        crate::query::reply::mark_scanned(v3_json(body), &stats)
    })
    .await
}
