//! The `opentelemetry` tracing API, implemented by weft.
//!
//! ```
//! use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
//! use weft_sdk::export::InMemoryExporter;
//! use weft_sdk::trace::TracerProvider;
//!
//! let exporter = InMemoryExporter::new();
//! let provider = TracerProvider::builder().with_exporter(exporter.clone()).build();
//! let tracer = provider.tracer("example");
//! let mut span = tracer.start("work");
//! span.end();
//! provider.force_flush(std::time::Duration::from_secs(5)).unwrap();
//! assert_eq!(exporter.spans().len(), 1);
//! ```

mod data;
mod provider;
mod span;
mod tracer;

pub use self::data::{EventData, LinkData, SpanData, SpanLimits, limit_attributes, truncate_value};
pub use self::provider::{IdGeneration, TracerProvider, TracerProviderBuilder};
pub use self::span::Span;
pub use self::tracer::{ContextExt, Tracer};

#[cfg(test)]
mod tests;
