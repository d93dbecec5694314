//! OTLP's receivers: `TraceService/Export` over gRPC ([`grpc`]) and `POST /v1/traces` over
//! HTTP, protobuf or JSON ([`http`]).

pub mod grpc;
pub mod http;

use axum::Router;
use axum::routing::post;
use clap::Args;

use crate::apis::Api;
use crate::app::{Runtime, Server};
use crate::modules::Module;

/// HTTP/2 frames of up to 1 MiB instead of 16 KiB on gRPC ports: an OTLP batch of 512 spans
/// (~130 KiB) then arrives in one DATA frame instead of nine, with fewer wake-ups and buffer
/// copies. Flow-control windows stay at hyper's 1 MiB: larger ones let clients park more
/// unread data in server memory (peak RSS rose toward the 150 MB budget with 16 MiB windows).
pub const GRPC_FRAME_BYTES: u32 = 1 << 20;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "OTLP")]
pub struct OtlpOptions {
    /// OTLP gRPC port.
    #[arg(long, env = "WEFT_OTLP_GRPC_PORT", default_value_t = 4317)]
    pub otlp_grpc_port: u16,
    /// OTLP HTTP port.
    #[arg(long, env = "WEFT_OTLP_HTTP_PORT", default_value_t = 4318)]
    pub otlp_http_port: u16,
}

impl Api for OtlpOptions {
    async fn build(&self, s: &mut Server) -> anyhow::Result<()> {
        if !s.runs(Module::Receivers) {
            return Ok(());
        }
        let grpc_l = s.bind("otlp_grpc", self.otlp_grpc_port, "OTLP/gRPC").await?;
        let http_l = s.bind("otlp_http", self.otlp_http_port, "OTLP/HTTP").await?;
        let svc = grpc::TraceService::new(s.state.clone());
        s.serve("otlp_grpc", grpc_l, svc, Runtime::Ingest, Some(GRPC_FRAME_BYTES));
        let r = Router::new()
            .route("/v1/traces", post(http::export))
            .fallback(crate::ops::not_found)
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(s.state.clone());
        s.serve("otlp_http", http_l, r, Runtime::Ingest, None);
        Ok(())
    }
}
