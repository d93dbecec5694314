//! weft reference SDK for Rust.
//!
//! - [`trace`]: a `TracerProvider`/`Tracer`/`Span` implementing the `opentelemetry` crate's API
//!   traits, so existing instrumentation switches by building a different provider.
//! - [`layer`]: a `tracing_subscriber::Layer` recording `tracing` spans into the same pipeline.
//! - [`propagation`]: W3C trace context and baggage, B3, X-Ray, Jaeger and composite propagators,
//!   with zero-allocation fast paths.
//! - [`sampling`]: AlwaysOn/Off, TraceIdRatio, consistent probability (OTEP 235), ParentBased,
//!   rate limiting and Jaeger remote sampling.
//! - [`export`]: a bounded, sharded, lock-free span queue feeding a batching OTLP exporter
//!   (HTTP/protobuf with gzip, and gRPC).
//!
//! The normative behaviour is in `spec/` at the repository root; `tests/vectors.rs` runs every
//! shared vector against this crate.

pub mod baggage;
pub mod context;
pub mod export;
pub mod fuzz;
mod http_client;
pub mod id;
#[cfg(feature = "tracing")]
pub mod layer;
pub mod log;
pub mod otlp;
pub mod propagation;
pub mod resource;
pub mod sampling;
pub mod time;
#[cfg(feature = "tls")]
pub mod tls;
pub mod trace;
pub mod tracestate;

pub use context::{FullSpanContext, SpanContext};
pub use resource::Resource;
pub use trace::{Span, Tracer, TracerProvider};
pub use tracestate::TraceState;

/// `User-Agent` sent by the exporters and the Jaeger remote sampler.
pub const USER_AGENT: &str = concat!("weft-sdk-rust/", env!("CARGO_PKG_VERSION"));
