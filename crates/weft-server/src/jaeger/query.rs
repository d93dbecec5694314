//! Jaeger's query API on its own port (default 16686): the HTTP JSON routes Jaeger UI calls,
//! in Jaeger's `{"data", "total", "limit", "offset", "errors"}` envelope, answered from the same
//! querier as the Tempo API. Spans are shown as Jaeger shows them and searches match as Jaeger's
//! storage matches ([`weft_translate::jaeger::ui`]). Jaeger v2's `api/v3` routes are
//! [`super::query_v3`]'s.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prost::Message;
use serde_json::{Value as Json, json};
use weft_block::row::SpanRow;
use weft_engine::newest::Matcher;
use weft_engine::prefilter::Prefilter;
use weft_engine::search::TraceSink;
use weft_otlp::pb::trace::TracesData;
use weft_translate::jaeger::ui::{Dependencies, Query as JQuery, UiTrace, convert};

use crate::app::AppState;
use crate::query::foreign::{ForeignQuery, ForeignSearch, query_with_tenant, quote, values};
use crate::query::read_failed;
use crate::query::reply::{mark_scanned, streamed_json_items};
use crate::query::{parse_query, run_scan};

/// Jaeger's default `limit` of a trace search.
pub(super) const DEFAULT_LIMIT: usize = 100;
pub(super) const MAX_LIMIT: usize = 10_000;

pub(super) fn envelope(data: Json, total: usize) -> Response {
    // (`envelope_each` writes the same keys in the same order.)
    let body = json!({"data": data, "total": total, "limit": 0, "offset": 0, "errors": null});
    let mut r = body.to_string().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// [`envelope`] of `items` (`total` of them), each converted and written out as the client
/// takes the text before it ([`streamed_json_items`]): a search of 10,000 traces built every
/// trace's JSON tree before writing any, 4 GB for a 156 MB reply, and converted them all
/// even when the client had gone away.
pub(super) fn envelope_each(items: impl Iterator<Item = Json> + Send + 'static, total: usize) -> Response {
    // The keys in the order `envelope`'s map writes them.
    let body = streamed_json_items(
        "{\"data\":[".to_owned(),
        items,
        format!("],\"errors\":null,\"limit\":0,\"offset\":0,\"total\":{total}}}"),
    );
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// An error in Jaeger's envelope.
pub(super) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    let body = json!({"data": null, "total": 0, "limit": 0, "offset": 0,
                      "errors": [{"code": status.as_u16(), "msg": msg.into()}]});
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(super) fn unauthorized(msg: String) -> Response {
    error(StatusCode::UNAUTHORIZED, msg)
}

pub(super) fn sorted(v: Vec<String>) -> Vec<String> {
    let set: BTreeSet<String> = v.into_iter().filter(|s| !s.is_empty()).collect();
    set.into_iter().collect()
}

/// `GET /api/services`.
pub async fn services(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        match crate::query::foreign::service_list(&s, &tenant).await {
            Ok(v) => {
                let v = sorted(v);
                let n = v.len();
                envelope(json!(v), n)
            }
            Err(r) => r,
        }
    })
    .await
}

/// The span names of a service, with their kinds.
pub(super) async fn operations_of(
    st: &AppState,
    tenant: &str,
    service: &str,
    kind: Option<&str>,
) -> Result<Vec<(String, String)>, Response> {
    let mut out = Vec::new();
    let kinds: &[&str] = match kind {
        Some(k) => &[k][..],
        None => &["server", "client", "producer", "consumer", "internal", "unspecified"],
    };
    for k in kinds {
        let filter = format!("{{ resource.service.name = {} && kind = {k} }}", quote(service));
        for name in values(st, tenant, &filter, "name").await? {
            let shown = if *k == "unspecified" { "" } else { k };
            out.push((name, shown.to_owned()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `GET /api/services/{service}/operations`: the names alone.
pub async fn service_operations(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(service): Path<String>,
) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        // The names alone: one scan (the kinds need one per kind).
        let filter = format!("{{ resource.service.name = {} }}", quote(&service));
        match values(&s, &tenant, &filter, "name").await {
            Ok(v) => {
                let names = sorted(v);
                let n = names.len();
                envelope(json!(names), n)
            }
            Err(r) => r,
        }
    })
    .await
}

/// A span kind as Jaeger names it in operation queries.
pub(super) fn is_kind(k: &str) -> bool {
    matches!(k, "server" | "client" | "producer" | "consumer" | "internal")
}

/// Operations as both APIs write them: `[{"name", "spanKind"}]`.
pub(super) fn ops_json(ops: &[(String, String)]) -> Json {
    Json::Array(ops.iter().map(|(n, k)| json!({"name": n, "spanKind": k})).collect())
}

/// `GET /api/operations?service=&spanKind=`: `[{"name", "spanKind"}]`.
pub async fn operations(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let Some(service) = p.get("service").filter(|s| !s.is_empty()) else {
            return error(StatusCode::BAD_REQUEST, "parameter 'service' is required");
        };
        let kind = p.get("spanKind").map(String::as_str).filter(|k| !k.is_empty());
        if let Some(k) = kind
            && !is_kind(k)
        {
            return error(StatusCode::BAD_REQUEST, format!("unsupported span kind: '{k}'"));
        }
        match operations_of(&s, &tenant, service, kind).await {
            Ok(ops) => envelope(ops_json(&ops), ops.len()),
            Err(r) => r,
        }
    })
    .await
}

pub(super) fn rows_to_trace(rows: &[SpanRow]) -> UiTrace {
    let data = weft_block::row::encode_traces_data(&crate::query::reply::shown(rows));
    TracesData::decode(&data[..]).map(|d| convert(&d)).unwrap_or_default()
}

/// A trace, with what the read left out (damaged blocks that may hold it, live stores that
/// did not answer).
pub(super) async fn read_trace(
    st: &AppState,
    tenant: &str,
    id: &[u8; 16],
) -> Result<(UiTrace, weft_querier::scan::ScanStats), Response> {
    let found = crate::query::jobs::trace::find_trace(st, tenant, id, None, st.cfg.query.max_trace_response_bytes)
        .await
        .map_err(|e| read_failed(&e, "reading trace", error))?;
    Ok((rows_to_trace(&found.rows), found.stats()))
}

/// `GET /api/traces/{id}`.
pub async fn trace(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let Some(tid) = weft_translate::parse_hex_id::<16>(id.trim()) else {
            return error(
                StatusCode::BAD_REQUEST,
                format!("cannot parse traceID param: {id:?} is not 1 to 32 hex digits"),
            );
        };
        match read_trace(&s, &tenant, &tid).await {
            Ok((t, left_out)) if t.spans.is_empty() => {
                mark_scanned(error(StatusCode::NOT_FOUND, "trace not found"), &left_out)
            }
            Ok((t, left_out)) => mark_scanned(envelope(json!([t.to_json()]), 1), &left_out),
            Err(r) => r,
        }
    })
    .await
}

/// Jaeger's search rules ([`JQuery::matches`]), newest first by trace start.
pub(crate) struct JaegerMatch(pub JQuery);

impl Matcher for JaegerMatch {
    fn key(&self, rows: &[SpanRow]) -> Option<u64> {
        let start = rows.iter().map(|r| r.start_unix_nano).min()?;
        self.0.matches(&rows_to_trace(rows)).then_some(start)
    }
}

/// A Jaeger duration parameter (`100ms`, `1.5s`, `250us`) in microseconds.
pub(super) fn duration_us(name: &str, s: &str) -> Result<u64, String> {
    crate::query::parse_duration(s)
        .map(|ns| ns / 1000)
        .map_err(|e| format!("cannot parse {name}: {e}"))
}

/// A query string's pairs, decoded, in order, repeated keys kept.
pub(super) fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.map(|q| {
        q.split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (decode(k), decode(v))
            })
            .collect()
    })
    .unwrap_or_default()
}

/// `GET /api/traces`: by `traceID` (repeated), or a search.
pub async fn traces(State(st): State<Arc<AppState>>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let pairs = query_pairs(raw.as_deref());
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
        };
        let ids: Vec<&str> = pairs
            .iter()
            .filter(|(k, _)| k == "traceID")
            .map(|(_, v)| v.as_str())
            .collect();
        if !ids.is_empty() {
            let mut out = Vec::new();
            let mut left_out = weft_querier::scan::ScanStats::default();
            for id in ids {
                let Some(tid) = weft_translate::parse_hex_id::<16>(id.trim()) else {
                    return error(StatusCode::BAD_REQUEST, format!("cannot parse traceID param: {id:?}"));
                };
                match read_trace(&s, &tenant, &tid).await {
                    Ok((t, d)) => {
                        left_out.damaged_blocks = left_out.damaged_blocks.max(d.damaged_blocks);
                        left_out.unanswered_live_stores = left_out.unanswered_live_stores.max(d.unanswered_live_stores);
                        if !t.spans.is_empty() {
                            out.push(t.to_json());
                        }
                    }
                    Err(r) => return r,
                }
            }
            let n = out.len();
            return mark_scanned(envelope(Json::Array(out), n), &left_out);
        }
        let Some(service) = get("service") else {
            return error(StatusCode::BAD_REQUEST, "parameter 'service' is required");
        };
        let now_us = weft_core::now_ns() / 1000;
        let num = |k: &str| {
            get(k).map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("cannot parse {k}: {v:?} is not a number"))
            })
        };
        let end = match num("end") {
            Some(Ok(v)) => v,
            Some(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
            None => now_us,
        };
        let start = match (num("start"), get("lookback")) {
            (Some(Ok(v)), _) => v,
            (Some(Err(e)), _) => return error(StatusCode::BAD_REQUEST, e),
            (None, Some(lb)) if lb != "custom" => match duration_us("lookback", lb) {
                Ok(d) => end.saturating_sub(d),
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            },
            // Jaeger's default: the last 2 days... of data the UI asks with start; an API
            // call without either searches the last hour.
            _ => end.saturating_sub(3_600_000_000),
        };
        let dur = |k: &str| get(k).map(|v| duration_us(k, v)).transpose();
        let (dmin, dmax) = match (dur("minDuration"), dur("maxDuration")) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return error(StatusCode::BAD_REQUEST, e),
        };
        if let (Some(a), Some(b)) = (dmin, dmax)
            && b < a
        {
            return error(
                StatusCode::BAD_REQUEST,
                "'maxDuration' should be greater than 'minDuration'",
            );
        }
        let limit = match get("limit").map(str::parse::<usize>) {
            None | Some(Ok(0)) => DEFAULT_LIMIT,
            Some(Ok(n)) => n.min(MAX_LIMIT),
            Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "cannot parse limit"),
        };
        let mut tags: Vec<(String, String)> = Vec::new();
        for (k, v) in &pairs {
            if k == "tag" {
                match v.split_once(':') {
                    Some((a, b)) => tags.push((a.to_owned(), b.to_owned())),
                    None => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            format!("malformed 'tag' parameter, expecting key:value, received: {v}"),
                        );
                    }
                }
            } else if k == "tags" && !v.is_empty() {
                match serde_json::from_str::<HashMap<String, String>>(v) {
                    Ok(m) => tags.extend(m),
                    Err(e) => return error(StatusCode::BAD_REQUEST, format!("malformed 'tags' parameter: {e}")),
                }
            }
        }
        let q = JQuery {
            service: service.to_owned(),
            operation: get("operation").map(str::to_owned),
            tags,
            start_min_us: start,
            start_max_us: end,
            duration_min_us: dmin,
            duration_max_us: dmax,
        };
        let search = ForeignSearch {
            filter: format!("{{ resource.service.name = {} }}", quote(service)),
            limit,
            query: ForeignQuery::Jaeger(q),
        };
        let (traces, stats) = match crate::query::foreign::search(&s, &tenant, &search).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let n = traces.len();
        let reply = envelope_each(traces.into_iter().map(|rows| rows_to_trace(&rows).to_json()), n);
        mark_scanned(reply, &stats)
    })
    .await
}

/// Percent-decoding of a query component (`+` is a space).
pub(super) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Feeds every trace of the window to the dependency counter.
pub(super) struct DepSink {
    prefilter: Prefilter,
    deps: Dependencies,
}

impl TraceSink for DepSink {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        self.deps.add(&rows_to_trace(rows));
    }
}

/// `GET /api/dependencies?endTs=&lookback=` (milliseconds).
pub async fn dependencies(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<HashMap<String, String>>,
) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let parse = |k: &str| {
            p.get(k)
                .filter(|v| !v.is_empty())
                .map(|v| v.parse::<u64>().map_err(|_| format!("cannot parse {k}")))
        };
        let end = match parse("endTs") {
            Some(Ok(v)) => v,
            Some(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
            None => weft_core::now_ns() / 1_000_000,
        };
        let lookback = match parse("lookback") {
            Some(Ok(v)) => v,
            Some(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
            None => 86_400_000,
        };
        let query = parse_query("{ }").expect("valid");
        let mut sink = DepSink {
            prefilter: Prefilter::new(&query),
            deps: Dependencies::default(),
        };
        let window = (
            end.saturating_sub(lookback).saturating_mul(1_000_000),
            end.saturating_mul(1_000_000).saturating_add(999_999),
        );
        let stats = match run_scan(&s, &tenant, Some(window), &mut sink).await {
            Ok(stats) => stats,
            Err(r) => return r,
        };
        let data = sink.deps.to_json();
        let n = data.as_array().map_or(0, Vec::len);
        mark_scanned(envelope(data, n), &stats)
    })
    .await
}

// --- Jaeger v2's api/v3: OTLP JSON ----------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(r: Response) -> Vec<u8> {
        axum::body::to_bytes(r.into_body(), usize::MAX).await.unwrap().to_vec()
    }

    #[tokio::test]
    async fn an_envelope_written_item_by_item_is_the_same_bytes() {
        let items = vec![json!({"traceID": "a", "spans": [1, 2]}), json!({"traceID": "b\"c"})];
        let whole = body(envelope(Json::Array(items.clone()), 2)).await;
        assert_eq!(body(envelope_each(items.into_iter(), 2)).await, whole);
        // More than one chunk of the streamed body.
        let many: Vec<Json> = (0..3000)
            .map(|i| json!({"traceID": format!("{i:032x}"), "spans": [i]}))
            .collect();
        assert_eq!(
            body(envelope_each(many.clone().into_iter(), many.len())).await,
            body(envelope(Json::Array(many), 3000)).await
        );
        assert_eq!(
            body(envelope_each(std::iter::empty(), 0)).await,
            body(envelope(json!([]), 0)).await
        );
    }
}
