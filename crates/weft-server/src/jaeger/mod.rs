//! Jaeger's ports: the collector (thrift over HTTP, [`receiver`]; gRPC `PostSpans`, served by
//! the OTLP gRPC machinery, [`crate::otlp::grpc`]), the agent's UDP ports ([`receiver`]), and
//! the query API Jaeger UI calls ([`query`]) and Jaeger v2's `api/v3` ([`query_v3`]), on its own port.

pub mod query;
pub mod query_v3;
pub mod receiver;
pub mod spm;

use axum::Router;
use axum::routing::{get, post};
use clap::Args;
use weft_translate::thrift::Protocol;

use crate::apis::Api;
use crate::app::{Runtime, Server};
use crate::modules::Module;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Jaeger")]
pub struct JaegerOptions {
    /// Jaeger query API port (the routes Jaeger UI calls); 0 turns it off.
    #[arg(long, env = "WEFT_JAEGER_QUERY_PORT", default_value_t = 16686)]
    pub jaeger_query_port: u16,
    /// Jaeger collector port: `POST /api/traces` (thrift); 0 turns it off.
    #[arg(long, env = "WEFT_JAEGER_HTTP_PORT", default_value_t = 14268)]
    pub jaeger_http_port: u16,
    /// Jaeger collector gRPC port: `jaeger.api_v2.CollectorService/PostSpans`; 0 turns it off.
    #[arg(long, env = "WEFT_JAEGER_GRPC_PORT", default_value_t = 14250)]
    pub jaeger_grpc_port: u16,
    /// Jaeger agent UDP port, compact thrift; 0 turns it off.
    #[arg(long, env = "WEFT_JAEGER_COMPACT_PORT", default_value_t = 6831)]
    pub jaeger_compact_port: u16,
    /// Jaeger agent UDP port, binary thrift; 0 turns it off.
    #[arg(long, env = "WEFT_JAEGER_BINARY_PORT", default_value_t = 6832)]
    pub jaeger_binary_port: u16,
}

impl Api for JaegerOptions {
    async fn build(&self, s: &mut Server) -> anyhow::Result<()> {
        if s.runs(Module::QueryApi) {
            self.build_query(s).await?;
        }
        if s.runs(Module::Receivers) {
            self.build_receivers(s).await?;
        }
        Ok(())
    }
}

impl JaegerOptions {
    /// The query API: its own port, on the query runtime like the Tempo API's.
    async fn build_query(&self, s: &mut Server) -> anyhow::Result<()> {
        let what = "the Jaeger query API";
        let Some(l) = s.bind_optional("jaeger_query", self.jaeger_query_port, what).await? else {
            return Ok(());
        };
        let st = s.state.clone();
        let r = Router::new()
            .route("/api/services", get(query::services))
            .route("/api/services/{service}/operations", get(query::service_operations))
            .route("/api/operations", get(query::operations))
            .route("/api/traces", get(query::traces))
            .route("/api/traces/{id}", get(query::trace))
            .route("/api/dependencies", get(query::dependencies))
            .route("/api/metrics/calls", get(spm::calls))
            .route("/api/metrics/errors", get(spm::errors))
            .route("/api/metrics/latencies", get(spm::latencies))
            .route("/api/v3/services", get(query_v3::v3_services))
            .route("/api/v3/operations", get(query_v3::v3_operations))
            .route("/api/v3/traces", get(query_v3::v3_find))
            .route("/api/v3/traces/{id}", get(query_v3::v3_trace))
            .route("/api/v3/trace-summaries", get(query_v3::v3_summaries))
            .layer(axum::middleware::from_fn_with_state(
                st.clone(),
                crate::query::admit_query,
            ))
            .fallback(crate::ops::not_found)
            .with_state(st);
        s.serve("jaeger_query", l, r, Runtime::Query, None);
        Ok(())
    }

    /// The collector's ports (HTTP and gRPC) and the agent's (UDP).
    async fn build_receivers(&self, s: &mut Server) -> anyhow::Result<()> {
        let http = s
            .bind_optional("jaeger_http", self.jaeger_http_port, "Jaeger thrift over HTTP")
            .await?;
        let grpc = s
            .bind_optional("jaeger_grpc", self.jaeger_grpc_port, "the Jaeger collector (gRPC)")
            .await?;
        let agents = [
            (
                "jaeger_compact",
                self.jaeger_compact_port,
                Protocol::Compact,
                "the Jaeger agent (compact thrift)",
            ),
            (
                "jaeger_binary",
                self.jaeger_binary_port,
                Protocol::Binary,
                "the Jaeger agent (binary thrift)",
            ),
        ];
        for (name, port, proto, what) in agents {
            if let Some((sock, stats)) = s.bind_udp(name, port, what).await? {
                let serve = receiver::serve_udp(s.state.clone(), sock, proto, stats, s.stop_signal());
                tokio::spawn(serve);
            }
        }
        if let Some(l) = http {
            let r = Router::new()
                .route("/api/traces", post(receiver::traces))
                .fallback(crate::ops::not_found)
                .layer(axum::extract::DefaultBodyLimit::disable())
                .with_state(s.state.clone());
            s.serve("jaeger_http", l, r, Runtime::Ingest, None);
        }
        if let Some(l) = grpc {
            let svc = crate::otlp::grpc::TraceService::jaeger(s.state.clone());
            s.serve(
                "jaeger_grpc",
                l,
                svc,
                Runtime::Ingest,
                Some(crate::otlp::GRPC_FRAME_BYTES),
            );
        }
        Ok(())
    }
}
