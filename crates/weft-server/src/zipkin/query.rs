//! Zipkin's v2 query API on the Zipkin port, answered from the same querier as the Tempo API:
//! `/api/v2/services`, `/spans`, `/remoteServices`, `/traces`, `/trace/{id}`, `/traceMany`,
//! `/dependencies`, `/autocompleteKeys`, `/autocompleteValues`. Spans are shown as Zipkin
//! shows them ([`weft_translate::zipkin::out`]); which traces match, and the dependency
//! links, follow Zipkin's own rules ([`weft_translate::zipkin::query`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prost::Message;
use serde_json::Value as Json;
use weft_block::row::SpanRow;
use weft_engine::newest::Matcher;
use weft_engine::prefilter::Prefilter;
use weft_engine::search::TraceSink;
use weft_otlp::pb::trace::TracesData;
use weft_translate::zipkin::query::{DependencyLinker, QueryRequest, TraceSpan, convert, parse_annotation_query};

use crate::app::AppState;
use crate::query::foreign::{ForeignQuery, ForeignSearch, query_with_tenant, quote, values};
use crate::query::read_failed;
use crate::query::reply::mark_scanned;
use crate::query::{parse_query, run_scan};

type Params = Query<HashMap<String, String>>;

/// Zipkin's QUERY_LOOKBACK default: 24 h.
const DEFAULT_LOOKBACK_MS: u64 = 86_400_000;
/// Zipkin's default `limit` of `/api/v2/traces`.
const DEFAULT_LIMIT: usize = 10;
/// Most traces one `/api/v2/traces` answers.
const MAX_LIMIT: usize = 10_000;

fn bad(msg: impl Into<String>) -> Response {
    text(StatusCode::BAD_REQUEST, msg.into())
}

fn text(status: StatusCode, msg: String) -> Response {
    let mut r = (status, msg).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json(v: Json) -> Response {
    let mut r = v.to_string().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn param<'a>(p: &'a HashMap<String, String>, k: &str) -> Option<&'a str> {
    p.get(k).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// A numeric parameter; the error is the 400's message.
fn num<T: std::str::FromStr>(p: &HashMap<String, String>, k: &str) -> Result<Option<T>, String> {
    match param(p, k) {
        None => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("invalid {k} {s:?}: expected a number")),
    }
}

fn now_ms() -> u64 {
    weft_core::now_ns() / 1_000_000
}

fn unauthorized(msg: String) -> Response {
    text(StatusCode::UNAUTHORIZED, msg)
}

/// Lower-cased, distinct, sorted, as Zipkin lists names.
fn names(v: Vec<String>) -> Json {
    let set: BTreeSet<String> = v
        .into_iter()
        .map(|s| s.to_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    Json::from(set.into_iter().collect::<Vec<_>>())
}

/// The stored spellings of a service whose lower-cased name is `lower` (Zipkin names are
/// case-insensitive; weft keeps the case that was sent).
async fn service_spellings(st: &AppState, tenant: &str, lower: &str) -> Result<Vec<String>, Response> {
    let all = crate::query::foreign::service_names(st, tenant).await?;
    Ok(all.into_iter().filter(|s| s.to_lowercase() == lower).collect())
}

/// `{ resource.service.name = "A" || … }` for the spellings of a service.
fn service_filter(spellings: &[String]) -> String {
    format!("{{ {} }}", service_terms(spellings))
}

/// `resource.service.name = "A" || …`.
fn service_terms(spellings: &[String]) -> String {
    let terms: Vec<String> = spellings
        .iter()
        .map(|s| format!("resource.service.name = {}", quote(s)))
        .collect();
    terms.join(" || ")
}

/// `GET /api/v2/services`.
pub async fn services(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        match crate::query::foreign::service_list(&s, &tenant).await {
            Ok(v) => json(names(v)),
            Err(r) => r,
        }
    })
    .await
}

/// `GET /api/v2/spans?serviceName=` (span names) and `/api/v2/remoteServices?serviceName=`
/// (`peer.service` values).
async fn names_of_service(
    st: Arc<AppState>,
    headers: HeaderMap,
    p: HashMap<String, String>,
    field: &'static str,
    also: Option<&'static str>,
) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        // As Zipkin: a missing parameter is refused, an empty one names no service (Lens asks
        // with `serviceName=` when its service filter is removed).
        if !p.contains_key("serviceName") {
            return bad("serviceName is required");
        }
        let Some(service) = param(&p, "serviceName").map(str::to_lowercase) else {
            return json(Json::Array(vec![]));
        };
        let spellings = match service_spellings(&s, &tenant, &service).await {
            Ok(v) => v,
            Err(r) => return r,
        };
        if spellings.is_empty() {
            return json(Json::Array(vec![]));
        }
        let filter = match also {
            Some(also) => format!("{{ ({}) && {also} }}", service_terms(&spellings)),
            None => service_filter(&spellings),
        };
        match values(&s, &tenant, &filter, field).await {
            Ok(v) => json(names(v)),
            Err(r) => r,
        }
    })
    .await
}

pub async fn spans(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    names_of_service(st, headers, p, "name", None).await
}

/// The `peer.service` of spans with a remote endpoint: not of a Zipkin span that sent it as a
/// tag alone (its `zipkin.original` has no `remoteService` member; the `{` or `,` before the
/// key tells a member from the same text inside a tag's value, where its quote is escaped).
const HAS_REMOTE_ENDPOINT: &str =
    r#"(span.zipkin.original = nil || span.zipkin.original =~ ".*[{,]\"remoteService\":.*")"#;

pub async fn remote_services(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    names_of_service(st, headers, p, "span.peer.service", Some(HAS_REMOTE_ENDPOINT)).await
}

/// Every stored span of a trace, converted.
fn rows_to_spans(rows: &[SpanRow]) -> Vec<TraceSpan> {
    let data = weft_block::row::encode_traces_data(rows);
    match TracesData::decode(&data[..]) {
        Ok(d) => convert(&d),
        Err(_) => Vec::new(),
    }
}

fn trace_json(spans: &[TraceSpan]) -> Json {
    Json::Array(spans.iter().map(|s| s.span.to_json()).collect())
}

/// Zipkin's search rules ([`QueryRequest::test`]), newest first by the trace's timestamp
/// (its root span's, else its earliest span's).
pub(crate) struct ZipkinMatch(pub QueryRequest);

impl Matcher for ZipkinMatch {
    fn key(&self, rows: &[SpanRow]) -> Option<u64> {
        let spans = rows_to_spans(rows);
        let refs: Vec<_> = spans.iter().map(|s| &s.span).collect();
        self.0.test(&refs)
    }
}

/// The query of `/api/v2/traces`; the error is the 400's message.
fn query_request(p: &HashMap<String, String>) -> Result<QueryRequest, String> {
    let end_ts = num::<u64>(p, "endTs")?.unwrap_or_else(now_ms);
    let req = QueryRequest {
        service_name: param(p, "serviceName").map(Into::into),
        remote_service_name: param(p, "remoteServiceName").map(Into::into),
        span_name: param(p, "spanName").map(Into::into),
        annotation_query: parse_annotation_query(param(p, "annotationQuery").unwrap_or("")),
        min_duration: num(p, "minDuration")?,
        max_duration: num(p, "maxDuration")?,
        end_ts,
        lookback: num(p, "lookback")?.unwrap_or(DEFAULT_LOOKBACK_MS),
        limit: num::<usize>(p, "limit")?.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT),
    };
    req.normalise()
}

/// `GET /api/v2/traces`.
pub async fn traces(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let req = match query_request(&p) {
            Ok(r) => r,
            Err(e) => return bad(e),
        };
        let filter = match &req.service_name {
            None => "{ }".to_owned(),
            Some(svc) => match service_spellings(&s, &tenant, svc).await {
                Ok(sp) if sp.is_empty() => return json(Json::Array(vec![])),
                Ok(sp) => service_filter(&sp),
                Err(r) => return r,
            },
        };
        let search = ForeignSearch {
            filter,
            limit: req.limit,
            query: ForeignQuery::Zipkin(req),
        };
        let (traces, stats) = match crate::query::foreign::search(&s, &tenant, &search).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        // Written a trace at a time as the client takes it, as Jaeger's search is.
        let items = traces.into_iter().map(|rows| trace_json(&rows_to_spans(&rows)));
        let mut r = crate::query::reply::streamed_json_items("[".to_owned(), items, "]".to_owned()).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        mark_scanned(r, &stats)
    })
    .await
}

/// Zipkin's trace ID check: 1 to 32 hex characters; the error is the 400's message.
fn trace_id(s: &str) -> Result<[u8; 16], String> {
    weft_translate::parse_hex_id::<16>(s.trim())
        .ok_or_else(|| format!("invalid trace ID {s:?}: expected 1 to 32 hex characters"))
}

/// A trace's spans, with what the read left out (damaged blocks that may hold it, live
/// stores that did not answer).
async fn read_trace(
    st: &AppState,
    tenant: &str,
    id: &[u8; 16],
) -> Result<(Vec<TraceSpan>, weft_querier::scan::ScanStats), Response> {
    let found = crate::query::jobs::trace::find_trace(st, tenant, id, None, st.cfg.query.max_trace_response_bytes)
        .await
        .map_err(|e| read_failed(&e, "reading trace", text))?;
    Ok((rows_to_spans(&found.rows), found.stats()))
}

/// `GET /api/v2/trace/{id}`.
pub async fn trace(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let tid = match trace_id(&id) {
            Ok(t) => t,
            Err(e) => return bad(e),
        };
        match read_trace(&s, &tenant, &tid).await {
            Ok((spans, left_out)) if spans.is_empty() => mark_scanned(
                text(
                    StatusCode::NOT_FOUND,
                    format!("trace {} not found", id.trim().to_lowercase()),
                ),
                &left_out,
            ),
            Ok((spans, left_out)) => mark_scanned(json(trace_json(&spans)), &left_out),
            Err(r) => r,
        }
    })
    .await
}

/// `GET /api/v2/traceMany?traceIds=a,b`.
pub async fn trace_many(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let Some(ids) = param(&p, "traceIds") else {
            return bad("traceIds parameter is empty");
        };
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        let mut left_out = weft_querier::scan::ScanStats::default();
        for id in ids.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let tid = match trace_id(id) {
                Ok(t) => t,
                Err(e) => return bad(e),
            };
            if !seen.insert(tid) {
                continue;
            }
            match read_trace(&s, &tenant, &tid).await {
                Ok((spans, d)) => {
                    left_out.damaged_blocks = left_out.damaged_blocks.max(d.damaged_blocks);
                    left_out.unanswered_live_stores = left_out.unanswered_live_stores.max(d.unanswered_live_stores);
                    if !spans.is_empty() {
                        out.push(trace_json(&spans));
                    }
                }
                Err(r) => return r,
            }
        }
        mark_scanned(json(Json::Array(out)), &left_out)
    })
    .await
}

/// Feeds every trace of the window to Zipkin's dependency linker.
struct Dependencies {
    prefilter: Prefilter,
    req: QueryRequest,
    linker: DependencyLinker,
}

impl TraceSink for Dependencies {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        let spans = rows_to_spans(rows);
        let refs: Vec<_> = spans.iter().map(|s| &s.span).collect();
        if self.req.test(&refs).is_some() {
            self.linker.put_trace(&spans);
        }
    }
}

/// `GET /api/v2/dependencies?endTs=&lookback=`.
pub async fn dependencies(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let end_ts = match num::<u64>(&p, "endTs") {
            Ok(Some(e)) => e,
            Ok(None) => return bad("endTs is required"),
            Err(e) => return bad(e),
        };
        let req = QueryRequest {
            end_ts,
            lookback: match num::<u64>(&p, "lookback") {
                Ok(l) => l.unwrap_or(end_ts),
                Err(e) => return bad(e),
            },
            limit: usize::MAX,
            ..QueryRequest::default()
        };
        let req = match req.normalise() {
            Ok(r) => r,
            Err(e) => return bad(e),
        };
        let query = parse_query("{ }").expect("valid");
        let window = req.window_ns();
        let mut sink = Dependencies {
            prefilter: Prefilter::new(&query),
            req,
            linker: DependencyLinker::default(),
        };
        let stats = match run_scan(&s, &tenant, Some(window), &mut sink).await {
            Ok(stats) => stats,
            Err(r) => return r,
        };
        let body = json(Json::Array(sink.linker.links().iter().map(|l| l.to_json()).collect()));
        mark_scanned(body, &stats)
    })
    .await
}

/// `GET /api/v2/autocompleteKeys`: the configured keys (Zipkin's AUTOCOMPLETE_KEYS).
pub async fn autocomplete_keys(State(st): State<Arc<AppState>>) -> Response {
    json(Json::from(st.cfg.apis.zipkin.zipkin_autocomplete_keys.clone()))
}

/// `GET /api/v2/autocompleteValues?key=`: values of a configured key; none for other keys.
pub async fn autocomplete_values(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let Some(key) = param(&p, "key") else {
            return bad("key is required");
        };
        if !s.cfg.apis.zipkin.zipkin_autocomplete_keys.iter().any(|k| k == key) {
            return json(Json::Array(vec![]));
        }
        match values(&s, &tenant, "{ }", &format!("span.{}", quote(key))).await {
            Ok(v) => {
                let set: BTreeSet<String> = v.into_iter().collect();
                json(Json::from(set.into_iter().collect::<Vec<_>>()))
            }
            Err(r) => r,
        }
    })
    .await
}
