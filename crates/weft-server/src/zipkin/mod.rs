//! Zipkin's port (default 9411) serves its receiver ([`receiver`]) and its v2 query API
//! ([`query`]) together, as Zipkin does.

pub mod query;
pub mod receiver;

use axum::Router;
use axum::routing::{get, post};
use clap::Args;

use crate::apis::Api;
use crate::app::{Runtime, Server};
use crate::modules::Module;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Zipkin")]
pub struct ZipkinOptions {
    /// Zipkin port: the receiver (`POST /api/v1/spans`, `/api/v2/spans`) and Zipkin's v2 query
    /// API (`GET /api/v2/...`); 0 turns it off.
    #[arg(long, env = "WEFT_ZIPKIN_PORT", default_value_t = 9411)]
    pub zipkin_port: u16,
    /// Tag keys whose values Zipkin's `/api/v2/autocompleteValues` lists, comma-separated
    /// (Zipkin's AUTOCOMPLETE_KEYS) [default: none].
    #[arg(long, env = "WEFT_ZIPKIN_AUTOCOMPLETE_KEYS", value_delimiter = ',')]
    pub zipkin_autocomplete_keys: Vec<String>,
}

impl Api for ZipkinOptions {
    async fn build(&self, s: &mut Server) -> anyhow::Result<()> {
        let (receives, queries) = (s.runs(Module::Receivers), s.runs(Module::QueryApi));
        if !(receives || queries) {
            return Ok(());
        }
        let Some(l) = s.bind_optional("zipkin", self.zipkin_port, "Zipkin").await? else {
            return Ok(());
        };
        let st = s.state.clone();
        let mut r = Router::new();
        if queries {
            r = r
                .route("/api/v2/services", get(query::services))
                .route("/api/v2/spans", get(query::spans))
                .route("/api/v2/remoteServices", get(query::remote_services))
                .route("/api/v2/traces", get(query::traces))
                .route("/api/v2/trace/{id}", get(query::trace))
                .route("/api/v2/traceMany", get(query::trace_many))
                .route("/api/v2/dependencies", get(query::dependencies))
                .route("/api/v2/autocompleteKeys", get(query::autocomplete_keys))
                .route("/api/v2/autocompleteValues", get(query::autocomplete_values))
                .layer(axum::middleware::from_fn_with_state(
                    st.clone(),
                    crate::query::admit_query,
                ));
        }
        if receives {
            let ingest = Router::new()
                .route("/api/v2/spans", post(receiver::spans_v2))
                .route("/api/v1/spans", post(receiver::spans_v1))
                .layer(axum::extract::DefaultBodyLimit::disable());
            r = r.merge(ingest);
        }
        let r = r
            .route("/health", get(crate::ops::ready))
            .fallback(crate::ops::not_found)
            .with_state(st);
        // On the ingest runtime; query handlers move their work to the query runtime.
        s.serve("zipkin", l, r, Runtime::Ingest, None);
        Ok(())
    }
}
