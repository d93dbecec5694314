//! What the query APIs of foreign formats (Zipkin's, Jaeger's) share: running on the query
//! runtime with the request's tenant, TraceQL literals, and distinct values of a field.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::query::{distinct_values, parse_query, tag_field};
use crate::tempo::json as tempo;

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
async fn on_query_runtime<F>(st: &Arc<AppState>, f: F) -> Response
where
    F: std::future::Future<Output = Response> + Send + 'static,
{
    match st.background.spawn(f).await {
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
    let (values, _, _) = distinct_values(st, tenant, &query, field, Some(window), MAX_NAMES).await?;
    Ok(values.iter().map(tempo::value_text).collect())
}
