//! Tempo's query API on the HTTP port: trace by ID ([`trace`]), search and tags ([`search`]),
//! metrics and the service graph ([`metrics`]) in Tempo's JSON shapes ([`json`]), and its gRPC
//! streaming API ([`streaming`], [`pb`]). Everything is answered by the shared query service
//! ([`crate::query`]).

pub mod json;
pub mod metrics;
pub mod pb;
pub mod search;
pub mod streaming;
pub mod trace;

use axum::Router;
use axum::routing::get;
use clap::Args;

use crate::apis::Api;
use crate::app::Server;
use crate::modules::Module;

/// Tempo's API has no options of its own: it is served on `--http-port`, within the limits of
/// the query service ([`crate::query::QueryOptions`]).
#[derive(Debug, Clone, Args)]
pub struct TempoOptions {}

impl Api for TempoOptions {
    async fn build(&self, s: &mut Server) -> anyhow::Result<()> {
        // A live store serves Tempo's routes too: its jobs, and what it holds for a look.
        if !s.runs(Module::QueryApi) && !s.runs(Module::LiveStore) {
            return Ok(());
        }
        let st = s.state.clone();
        let routes = Router::new()
            .route("/api/traces/{id}", get(trace::trace_v1))
            .route("/api/v2/traces/{id}", get(trace::trace_v2))
            .route("/api/search", get(search::search))
            .route("/api/search/tags", get(search::tags_v1))
            .route("/api/v2/search/tags", get(search::tags_v2))
            .route("/api/search/tag/{tag}/values", get(search::tag_values_v1))
            .route("/api/v2/search/tag/{tag}/values", get(search::tag_values_v2))
            .route("/api/metrics/query_range", get(metrics::query_range))
            .route("/api/metrics/query", get(metrics::query_instant))
            .route("/api/service-graph", get(metrics::service_graph));
        // A job names every block of its listing: tens of thousands for a large tenant, more
        // than the default 2 MiB body.
        let jobs = Router::new()
            .route(
                crate::query::jobs::SEARCH_JOB_PATH,
                axum::routing::post(crate::query::jobs::search_job),
            )
            .route(
                crate::query::jobs::metrics::METRICS_JOB_PATH,
                axum::routing::post(crate::query::jobs::metrics::metrics_job),
            )
            .route(
                crate::query::jobs::tags::TAG_VALUES_JOB_PATH,
                axum::routing::post(crate::query::jobs::tags::tag_values_job),
            )
            .route(
                crate::query::jobs::graph::GRAPH_JOB_PATH,
                axum::routing::post(crate::query::jobs::graph::graph_job),
            )
            .route(
                crate::query::jobs::tags::TAG_NAMES_JOB_PATH,
                axum::routing::post(crate::query::jobs::tags::tag_names_job),
            )
            .route(
                crate::query::jobs::live::RECENT_TRACES_PATH,
                axum::routing::post(crate::query::jobs::live::recent_traces_job),
            )
            .route(
                crate::query::jobs::trace::TRACE_JOB_PATH,
                axum::routing::post(crate::query::jobs::trace::trace_job),
            )
            .layer(axum::extract::DefaultBodyLimit::max(crate::query::jobs::MAX_JOB_BYTES));
        let routes = routes.merge(jobs).layer(axum::middleware::from_fn_with_state(
            st.clone(),
            crate::query::admit_query,
        ));
        s.http_routes(routes);
        s.http_grpc(streaming::StreamingQuerier::new(st));
        Ok(())
    }
}
