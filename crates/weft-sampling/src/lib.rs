//! Sampling steered by weft: what it answers Jaeger's remote samplers
//! (`jaeger.api_v2.SamplingManager`, the agent's `/sampling`), from a strategies file
//! ([`file`]) or computed from the root spans ingest admits ([`adaptive`]).
//!
//! Counting is the ingest path's part: [`adaptive::Adaptive`] is the
//! [`weft_admission::RootSink`] a consumer tells of each admitted request's roots, read as
//! slices of the request ([`roots`]). The server owns the ports and the calculation loop.

pub mod adaptive;
pub mod file;
pub mod roots;
pub mod strategy;

pub use adaptive::{Adaptive, AdaptiveConfig, Count, OperationState, Tally};
pub use file::Strategies;
pub use strategy::{Base, PerOperation, Strategy};
