//! The query side of weft: turning stored spans into what the TraceQL evaluator reads.
//!
//! [`decode`] turns a [`SpanRow`](weft_block::row::SpanRow) (a block row or a head row, whose
//! nested lists are still their protobuf bytes) into a [`weft_traceql::Span`]. Search over the
//! head and the blocks, with predicate pushdown, builds on it (issue 4).

pub mod decode;
