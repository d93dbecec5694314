//! What the query APIs of foreign formats (Zipkin's, Jaeger's) share: running on the query
//! runtime with the request's tenant, TraceQL literals, distinct values of a field, and their
//! searches ([`ForeignSearch`]: the newest traces each API's rules match, on every core and
//! split over queriers as Tempo's search is).

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use weft_block::row::SpanRow;
use weft_engine::newest::{Matcher, Newest, Order};
use weft_engine::prefilter::Prefilter;
use weft_querier::scan::{ScanStats, Window};
use weft_translate::jaeger::ui::Query as JaegerQuery;
use weft_translate::jaeger::v3::FindQuery;
use weft_translate::zipkin::query::QueryRequest;

use crate::app::AppState;
use crate::query::jobs::{self, SearchJob};
use crate::query::{distinct_values, parse_query, run_scan, tag_field};
use crate::tempo::json as tempo;
use weft_engine::tags::ColumnTagValues;

/// How far back value lists look (Zipkin's QUERY_NAMES_MAX_AGE default, 24 h; Jaeger's
/// services and operations likewise).
const NAMES_LOOKBACK_MS: u64 = 86_400_000;
/// Most distinct values a list reads.
const MAX_NAMES: usize = 10_000;

fn text(status: StatusCode, msg: String) -> Response {
    (status, msg).into_response()
}

fn bad(msg: impl Into<String>) -> Response {
    text(StatusCode::BAD_REQUEST, msg.into())
}

/// A TraceQL string literal.
pub(crate) fn quote(s: &str) -> String {
    weft_traceql::string_literal(s)
}

/// Runs `f` on the query runtime (lower priority than ingest), as the Tempo API's port does.
/// Dropping the returned future (the client went away) aborts `f` at its next await, as
/// dropping a handler on the query port does: a spawned task would otherwise read on to the
/// end of a search nobody waits for.
async fn on_query_runtime<F>(st: &Arc<AppState>, f: F) -> Response
where
    F: std::future::Future<Output = Response> + Send + 'static,
{
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = st.background.spawn(f);
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(r) => r,
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("query failed: {e}")),
    }
}

/// Runs `f` with the request's tenant on the query runtime; a request without a valid tenant
/// gets `unauthorized(message)`.
pub(crate) async fn query_with_tenant<F, Fut>(
    st: Arc<AppState>,
    headers: HeaderMap,
    unauthorized: fn(String) -> Response,
    f: F,
) -> Response
where
    F: FnOnce(Arc<AppState>, Arc<str>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Response> + Send + 'static,
{
    let s = st.clone();
    on_query_runtime(&st, async move {
        match s.tenants.resolve(&headers) {
            Ok(t) => f(s, t).await,
            Err(e) => unauthorized(e.0),
        }
    })
    .await
}

/// The distinct values of `field` over spans matching `filter` in the last 24 h, as stored.
pub(crate) async fn values(st: &AppState, tenant: &str, filter: &str, field: &str) -> Result<Vec<String>, Response> {
    let query = parse_query(filter).map_err(bad)?;
    let field = tag_field(field, true).map_err(bad)?;
    let end = weft_core::now_ns();
    let window = (end.saturating_sub(NAMES_LOOKBACK_MS * 1_000_000), end);
    let values = distinct_values(st, tenant, &query, field, Some(window), MAX_NAMES)
        .await?
        .list;
    Ok(values.iter().map(tempo::value_text).collect())
}

/// The service names each block holds, by tenant and block ID: blocks never change, so each
/// is read once. Zipkin's searches need the stored spellings of the service they name (its
/// names are case-insensitive), and reading every block's service column for them was most
/// of a search (0.3 s of 0.4 at 10 M spans, 2026-12-04).
#[derive(Default)]
pub struct BlockServiceNames(parking_lot::Mutex<HashMap<TenantBlock, Arc<[String]>>>);

/// A tenant and one of its blocks' IDs.
type TenantBlock = (Arc<str>, String);

/// The service names stored in the last 24 h, and maybe some older ones: every spelling the
/// recent spans and the blocks overlapping that time hold, each block's read once
/// ([`BlockServiceNames`]). A superset of [`values`] of `resource.service.name`, for callers
/// that only narrow it down (to the spellings of one name). With live stores, [`values`].
pub(crate) async fn service_names(st: &AppState, tenant: &str) -> Result<Vec<String>, Response> {
    if st.live.is_some() {
        return values(st, tenant, "{ }", "resource.service.name").await;
    }
    let field = tag_field("resource.service.name", true).map_err(bad)?;
    let all = parse_query("{ }").map_err(bad)?;
    let end = weft_core::now_ns();
    let window = (end.saturating_sub(NAMES_LOOKBACK_MS * 1_000_000), end);
    let q = st.querier();
    let scan = |part: weft_querier::scan::ScanPart, window: Option<Window>| {
        let (all, field) = (&all, &field);
        async move {
            let mut sink = ColumnTagValues::new(all, field, window, MAX_NAMES).expect("a field with a column");
            q.scan_columns_part(tenant, window, &part, &mut sink)
                .await
                .map_err(crate::query::scan_failed)?;
            Ok::<_, Response>(sink.finish().iter().map(tempo::value_text).collect::<Vec<_>>())
        }
    };
    // The recent spans first, then the blocks listed after: a cut between the two is in the
    // list.
    let mut names: std::collections::BTreeSet<String> = scan(weft_querier::scan::ScanPart::head_only(), Some(window))
        .await?
        .into_iter()
        .collect();
    let blocks = q.blocks(tenant);
    let tenant_key: Arc<str> = Arc::from(tenant);
    for b in blocks.iter().filter(|b| b.meta.max_end_unix_nano >= window.0) {
        let key = (tenant_key.clone(), b.meta.block_id.clone());
        let cached = st.service_names.0.lock().get(&key).cloned();
        let of_block = match cached {
            Some(n) => n,
            None => {
                let part = weft_querier::scan::ScanPart::of_blocks([b.meta.block_id.clone()]);
                let n: Arc<[String]> = scan(part, None).await?.into();
                st.service_names.0.lock().insert(key, n.clone());
                n
            }
        };
        names.extend(of_block.iter().cloned());
    }
    // Blocks compacted or deleted since are forgotten.
    let listed: std::collections::HashSet<&str> = blocks.iter().map(|b| b.meta.block_id.as_str()).collect();
    st.service_names
        .0
        .lock()
        .retain(|(t, id), _| &**t != tenant || listed.contains(id.as_str()));
    Ok(names.into_iter().collect())
}

/// The services Jaeger's and Zipkin's service lists show: [`service_names`], at most
/// 10,000 of them (as [`values`] lists).
pub(crate) async fn service_list(st: &AppState, tenant: &str) -> Result<Vec<String>, Response> {
    let mut names = service_names(st, tenant).await?;
    names.truncate(MAX_NAMES);
    Ok(names)
}

/// A search of Jaeger's or Zipkin's query API, as the frontend parsed it: what a search job
/// carries to the queriers instead of Tempo's parameters (`spec/jobs.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignSearch {
    /// The TraceQL query a trace must be able to match to be read (the prefilter).
    pub filter: String,
    /// How many of the newest matches the search keeps.
    pub limit: usize,
    #[serde(flatten)]
    pub query: ForeignQuery,
}

/// The query of one foreign API, with its times resolved (no "now" left to evaluate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "api", content = "query", rename_all = "snake_case")]
pub enum ForeignQuery {
    /// Jaeger's `GET /api/traces` search.
    Jaeger(JaegerQuery),
    /// Jaeger's `GET /api/v3/traces` (`FindTraces`).
    JaegerV3(FindQuery),
    /// Zipkin's `GET /api/v2/traces`.
    Zipkin(QueryRequest),
}

impl ForeignSearch {
    /// The time window the search reads (inclusive, Unix ns).
    pub(crate) fn window(&self) -> Window {
        match &self.query {
            ForeignQuery::Jaeger(q) => (
                q.start_min_us.saturating_mul(1000),
                q.start_max_us.saturating_mul(1000).saturating_add(999),
            ),
            ForeignQuery::JaegerV3(q) => (q.start_min_ns, q.start_max_ns),
            ForeignQuery::Zipkin(q) => q.window_ns(),
        }
    }

    /// The search, nothing offered yet.
    pub(crate) fn newest(&self) -> Result<Newest, String> {
        let filter = parse_query(&self.filter)?;
        let (matcher, order): (Arc<dyn Matcher>, Order) = match &self.query {
            ForeignQuery::Jaeger(q) => (Arc::new(crate::jaeger::query::JaegerMatch(q.clone())), Order::Start),
            ForeignQuery::JaegerV3(q) => (Arc::new(crate::jaeger::query_v3::V3Match(q.clone())), Order::Start),
            ForeignQuery::Zipkin(q) => (
                Arc::new(crate::zipkin::query::ZipkinMatch(q.clone())),
                Order::SpanStartMicros,
            ),
        };
        Ok(Newest::new(Prefilter::new(&filter), matcher, order, self.limit))
    }
}

/// Runs a foreign API's search: split over the queriers of `--query-peers` when there are
/// any, else here. The matching traces' spans, newest first, and what the search read.
pub(crate) async fn search(
    st: &AppState,
    tenant: &str,
    f: &ForeignSearch,
) -> Result<(Vec<Vec<SpanRow>>, ScanStats), Response> {
    let window = Some(f.window());
    let mut sink = f.newest().map_err(bad)?;
    if let Some(peers) = &st.peers {
        let request = SearchJob::of(HashMap::new(), Some(f.clone()));
        match jobs::search(st, peers, tenant, &request, window, &mut sink).await? {
            Some(stats) => return Ok((sink.into_traces(), stats)),
            // The queriers' block lists and this one's differ: read it all here.
            None => sink = f.newest().map_err(bad)?,
        }
    }
    let stats = run_scan(st, tenant, window, &mut sink).await?;
    Ok((sink.into_traces(), stats))
}
