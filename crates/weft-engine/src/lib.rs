//! The query side of weft: turning stored spans into what the TraceQL evaluator reads, and the
//! consumers of whole traces behind the search, metrics and tag APIs.
//!
//! - [`decode`] turns a [`SpanRow`](weft_block::row::SpanRow) (a block row or a head row, whose
//!   nested lists are still their protobuf bytes) into a [`weft_traceql::Span`].
//! - [`prefilter`] derives cheap necessary conditions from a query, tested on stored spans and
//!   row-group statistics before anything is decoded (predicate pushdown).
//! - [`search`] holds the [`TraceSink`](search::TraceSink)s: `/api/search`, TraceQL metrics and
//!   the tag APIs, each fed whole traces by the scans of `weft-querier`.
//! - [`span_metrics`] evaluates span-local metrics queries one span at a time, from columns.
//! - [`tags`] answers the tag APIs without a filter one span at a time, from columns.
//! - [`newest`] is the search of the foreign query APIs: the newest traces a matcher accepts.
//! - [`graph`] aggregates calls between services from parent/child spans (the service graph).
//!
//! This crate does no I/O and knows nothing of where spans are stored; response shapes belong
//! to the API layer (`weft-server`).

pub mod decode;
pub mod graph;
pub mod newest;
pub mod prefilter;
pub mod search;
pub mod span_metrics;
pub mod tags;
