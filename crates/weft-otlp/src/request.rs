//! Zero-copy validation and reading of `ExportTraceServiceRequest` bytes.
//!
//! [`validate_request`] is the receiver's only look at a request: it validates the structure (every
//! nested message well formed, IDs of the right length, strings valid UTF-8) and returns what
//! routing and limits need (span count and the size of each trace's run of spans). It allocates
//! nothing per span. The bytes then move to the WAL unchanged.
//!
//! [`for_each_span`] is used once more, when a block is built, to read each span's fields as
//! sub-slices of the request.

mod filter;
mod validate;
mod views;

use crate::wire::WireError;
use thiserror::Error;

pub use filter::{SplitRequest, filter_request, split_request};
pub use validate::{summarize_converted, validate_request};
pub use views::{Group, GroupKind, HeaderIds, SpanView, for_each_span};

/// Field numbers from the vendored protos (`proto/`), checked against the generated code by a
/// unit test.
pub mod fields {
    pub const REQ_RESOURCE_SPANS: u32 = 1;
    pub const RS_RESOURCE: u32 = 1;
    pub const RS_SCOPE_SPANS: u32 = 2;
    pub const RS_SCHEMA_URL: u32 = 3;
    pub const SS_SCOPE: u32 = 1;
    pub const SS_SPANS: u32 = 2;
    pub const SS_SCHEMA_URL: u32 = 3;
    pub const SPAN_TRACE_ID: u32 = 1;
    pub const SPAN_SPAN_ID: u32 = 2;
    pub const SPAN_TRACE_STATE: u32 = 3;
    pub const SPAN_PARENT_SPAN_ID: u32 = 4;
    pub const SPAN_NAME: u32 = 5;
    pub const SPAN_KIND: u32 = 6;
    pub const SPAN_START: u32 = 7;
    pub const SPAN_END: u32 = 8;
    pub const SPAN_ATTRIBUTES: u32 = 9;
    pub const SPAN_DROPPED_ATTRIBUTES: u32 = 10;
    pub const SPAN_EVENTS: u32 = 11;
    pub const SPAN_DROPPED_EVENTS: u32 = 12;
    pub const SPAN_LINKS: u32 = 13;
    pub const SPAN_DROPPED_LINKS: u32 = 14;
    pub const SPAN_STATUS: u32 = 15;
    pub const SPAN_FLAGS: u32 = 16;
    pub const STATUS_MESSAGE: u32 = 2;
    pub const STATUS_CODE: u32 = 3;
    pub const RESOURCE_ATTRIBUTES: u32 = 1;
    pub const KV_KEY: u32 = 1;
    pub const KV_VALUE: u32 = 2;
    pub const ANY_STRING: u32 = 1;
}

/// Why a request was rejected. The message names the span and the problem.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScanError {
    #[error("invalid protobuf at {path}: {source}")]
    Wire { path: String, source: WireError },
    #[error("invalid span at {path}: {problem}")]
    Invalid { path: String, problem: String },
    #[error("attribute nesting deeper than {MAX_DEPTH} at {path}")]
    TooDeep { path: String },
}

/// AnyValue nesting deeper than this is refused, so recursion is bounded.
pub const MAX_DEPTH: u32 = 16;

/// A run of consecutive spans of one trace within a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRun {
    pub trace_id: [u8; 16],
    pub spans: u32,
    /// Encoded size of those spans.
    pub bytes: u32,
}

/// A root span of a request (one without a parent): byte ranges into the request of the span
/// and of the `ResourceSpans` holding it, for what counts root spans (adaptive sampling) to
/// read without walking the request again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRef {
    pub resource_spans: std::ops::Range<u32>,
    pub span: std::ops::Range<u32>,
}

/// What the receiver learns from one request.
#[derive(Debug, Default, Clone)]
pub struct RequestSummary {
    pub spans: u32,
    /// Runs of consecutive spans sharing a trace ID, in request order.
    pub runs: Vec<TraceRun>,
    /// The root spans, in request order.
    pub roots: Vec<RootRef>,
}

impl RequestSummary {
    pub fn clear(&mut self) {
        self.spans = 0;
        self.runs.clear();
        self.roots.clear();
    }

    /// Counts the next span of the request: its trace ID and its encoded size (tag included).
    fn add_span(&mut self, trace_id: [u8; 16], bytes: u32) {
        self.spans += 1;
        match self.runs.last_mut() {
            Some(run) if run.trace_id == trace_id => {
                run.spans += 1;
                run.bytes += bytes;
            }
            _ => self.runs.push(TraceRun {
                trace_id,
                spans: 1,
                bytes,
            }),
        }
    }
}
