//! The OTLP trace wire format as weft uses it.
//!
//! - [`pb`]: message types generated from the vendored protos in `proto/` (pinned tag in
//!   `proto/README.md`). Used on slow paths: JSON transcoding, query responses, tests.
//! - [`request`]: the ingest hot path. Validates a request and extracts routing facts without
//!   building a message tree.
//! - [`wire`]: the protobuf varint/tag reader and writer under both.
//! - [`json`]: OTLP/JSON in both directions.

#[cfg(feature = "grpc")]
pub mod grpc;
pub mod json;
pub mod request;
pub mod wire;

/// Generated OTLP messages, with short aliases for the packages.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/otlp.rs"));
    pub use opentelemetry::proto::collector::trace::v1 as collector;
    pub use opentelemetry::proto::common::v1 as common;
    pub use opentelemetry::proto::resource::v1 as resource;
    pub use opentelemetry::proto::trace::v1 as trace;
}

/// The gRPC method path of OTLP trace export.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
