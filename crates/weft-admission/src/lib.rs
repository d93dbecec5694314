//! What every write path starts with, whatever it writes to (the ingester's WAL, the
//! distributor's Kafka topic): the contract receivers push into ([`push`]), the checks and
//! limits a request passes before it is kept ([`admit_request`], [`limits`]), and the counters
//! of what was accepted and refused ([`metrics`]).

pub mod limits;
pub mod metrics;
pub mod push;
pub mod roots;

pub use push::{PushError, PushOutcome, TraceConsumer};
pub use roots::{RootSink, RootWatch};

use std::sync::Arc;

use limits::RateLimiter;
use metrics::{IngestMetrics, RefuseReason};
use weft_otlp::request::{RequestSummary, summarize_converted, validate_request};

/// The admission every consumer of receivers starts with: validates `body` in place (filling
/// `summary` with its spans and trace runs) and takes its bytes from `tenant`'s ingestion rate,
/// counting refusals in `metrics`. Returns `false` for a valid request without spans, to be
/// answered as accepted with nothing stored. A request weft `converted` itself from a foreign
/// format is summarized without being validated again ([`summarize_converted`]). An admitted
/// request's root spans are told to `roots`.
pub fn admit_request(
    body: &[u8],
    tenant: &Arc<str>,
    rate: &RateLimiter,
    metrics: &IngestMetrics,
    roots: &RootWatch,
    summary: &mut RequestSummary,
    converted: bool,
) -> Result<bool, PushError> {
    let checked = if converted {
        summarize_converted(body, summary)
    } else {
        validate_request(body, summary)
    };
    if let Err(e) = checked {
        metrics.refused(tenant, RefuseReason::Invalid, 1);
        return Err(PushError::Invalid(e.to_string()));
    }
    if summary.spans == 0 {
        return Ok(false);
    }
    if let Err(e) = rate.take_or_refuse(tenant, body.len()) {
        metrics.refused(tenant, RefuseReason::RateLimited, u64::from(summary.spans));
        return Err(e);
    }
    roots.tell(tenant, body, &summary.roots);
    Ok(true)
}
