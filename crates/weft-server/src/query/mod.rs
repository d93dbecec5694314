//! The query service every query API calls: Tempo's, Jaeger's, Zipkin's and the UI's.
//!
//! Parameters follow Tempo's HTTP API: `start`/`end` in Unix seconds (metrics also take
//! nanoseconds or RFC 3339), durations as Go/Prometheus duration strings (`100ms`, `1m30s`).
//! Bad parameters and invalid or unsupported TraceQL get a 400 whose text names the problem.
//! Here: parsing those parameters, running scans on the querier, the headers that say what a
//! query read, and the replies to reads that failed or skipped damaged blocks ([`reply`]).
//! Each API's folder turns these into its own reply shapes.

pub mod foreign;
pub mod jobs;
pub mod reply;

pub(crate) use reply::read_failed;

/// The limits of the query service, which every query API shares.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Queries")]
pub struct QueryOptions {
    /// Most bytes of one trace a query reads and returns; a larger trace comes back truncated
    /// and marked so (v2: "status": "partial").
    #[arg(long, env = "WEFT_MAX_TRACE_RESPONSE_BYTES", default_value_t = 32 << 20)]
    pub max_trace_response_bytes: u64,
    /// Most series a metrics query may return (Tempo's max_response_series); more is a 400.
    #[arg(long, env = "WEFT_MAX_METRICS_SERIES", default_value_t = 1000)]
    pub max_metrics_series: usize,
    /// Most points (series times steps) a metrics query may hold; more is a 400 naming the
    /// limit.
    #[arg(long, env = "WEFT_MAX_METRICS_POINTS", default_value_t = 2_000_000)]
    pub max_metrics_points: u64,
    /// Queries that read storage (search, tags, metrics, service graph, trace by ID) run at
    /// once; more wait up to 30 s for a slot, then get 429. Waiting queries queue per tenant:
    /// a freed slot goes to the waiting tenant running the fewest, and a tenant running none
    /// starts at once, beyond this limit, up to twice it ([`weft_querier::fair`]).
    #[arg(long, env = "WEFT_MAX_CONCURRENT_QUERIES", default_value_t = 8)]
    pub max_concurrent_queries: usize,
    /// Pieces of query work (a row group's decode and filter) run at once over all queries,
    /// on threads below ingest's priority; one query uses up to this many cores, and queries
    /// running together take turns piece by piece. Default: the machine's cores.
    #[arg(long, env = "WEFT_QUERY_PARALLELISM")]
    pub query_parallelism: Option<usize>,
    /// Queriers (`host:port` of their HTTP port, comma-separated) this process splits each
    /// search into jobs for, acting as its frontend; a name that resolves to several addresses
    /// is several queriers (re-resolved every 5 s). Empty: searches run here alone.
    #[arg(long, env = "WEFT_QUERY_PEERS", value_delimiter = ',')]
    pub query_peers: Vec<String>,
    /// With --kafka-brokers, a querier tails the topic for the spans not yet in a block.
    /// `false`: it reads blocks only, as the queriers behind a query-frontend (which reads
    /// the recent spans itself) may.
    #[arg(long, env = "WEFT_QUERIER_LIVE_STORE", default_value_t = true, action = clap::ArgAction::Set)]
    pub querier_live_store: bool,
    /// Live stores (`host:port` of their HTTP port, comma-separated; a name may resolve to
    /// several) that hold the spans not yet in a block: each query's recent part is asked of
    /// them all, and this process tails no Kafka partition. A live store that does not answer
    /// makes the answer partial (`x-weft-partial-live-stores`).
    #[arg(long, env = "WEFT_LIVE_STORES", value_delimiter = ',')]
    pub live_stores: Vec<String>,
    /// Seconds a querier has to answer one job before the job goes to another querier.
    #[arg(long, env = "WEFT_QUERY_JOB_TIMEOUT", default_value_t = 30.0)]
    pub query_job_timeout: f64,
    /// Seconds a query that reads storage may run once it has its slot, until its reply
    /// begins: past that its work stops and it is answered 504 (gRPC: DEADLINE_EXCEEDED),
    /// naming this limit. 0: none. (Writing a large reply out is bounded apart: a client that
    /// takes nothing for 30 s is given up.)
    #[arg(long, env = "WEFT_QUERY_TIMEOUT", default_value_t = 300.0)]
    pub query_timeout: f64,
}

impl QueryOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_trace_response_bytes > 0,
            "max_trace_response_bytes must be positive"
        );
        anyhow::ensure!(self.max_metrics_series > 0, "max_metrics_series must be positive");
        anyhow::ensure!(self.max_metrics_points > 0, "max_metrics_points must be positive");
        anyhow::ensure!(
            self.max_concurrent_queries > 0,
            "max_concurrent_queries must be positive"
        );
        anyhow::ensure!(self.query_parallelism != Some(0), "query_parallelism must be positive");
        anyhow::ensure!(
            self.query_job_timeout.is_finite() && self.query_job_timeout > 0.0,
            "query_job_timeout must be a positive number of seconds"
        );
        anyhow::ensure!(
            self.query_timeout.is_finite() && self.query_timeout >= 0.0,
            "query_timeout must be a number of seconds, 0 for none"
        );
        Ok(())
    }

    /// `--query-timeout`, `None` for no limit.
    pub(crate) fn timeout(&self) -> Option<std::time::Duration> {
        (self.query_timeout > 0.0).then(|| std::time::Duration::from_secs_f64(self.query_timeout))
    }

    /// The message of a query stopped by `--query-timeout`.
    pub(crate) fn timeout_message(&self) -> String {
        format!(
            "the query ran longer than {}s (--query-timeout) and was stopped; narrow its time range or its filter",
            self.query_timeout
        )
    }
}

/// How long a query waits for one of `--max-concurrent-queries` slots before it gets 429.
pub(crate) const QUERY_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Admits a query that reads storage (everything under `/api/` but the echo, build info and
/// weft's own cheap endpoints) into one of the concurrent query slots, so a flood of heavy
/// queries waits in line instead of taking every core and all memory at once. Every query
/// API's routes are layered with it.
pub async fn admit_query(
    State(st): State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    let reads_storage = path.starts_with("/api/")
        && !matches!(path, "/api/echo" | "/api/status/buildinfo")
        && !path.starts_with("/api/status/");
    if !reads_storage {
        return next.run(req).await;
    }
    // Requests without a valid tenant wait as one more tenant; their handler answers 401.
    let tenant = st.tenants.resolve(req.headers()).unwrap_or_else(|_| Arc::from(""));
    match tokio::time::timeout(QUERY_QUEUE_WAIT, st.queries.acquire(tenant)).await {
        // The slot is held until the reply's body is written out (or its client went away, or
        // `REPLY_STALL` passed): a large reply is converted as it is sent
        // ([`reply::streamed`]), and that work and the spans it holds count against the
        // limit as the read does.
        Ok(slot) => {
            let run = next.run(req);
            let reply = match st.cfg.query.timeout() {
                None => run.await,
                // Dropping the handler stops its work, as when its client goes away.
                Some(t) => match tokio::time::timeout(t, run).await {
                    Ok(r) => r,
                    Err(_) => text(StatusCode::GATEWAY_TIMEOUT, st.cfg.query.timeout_message()),
                },
            };
            reply.map(|body| axum::body::Body::new(HoldingSlot::new(body, slot)))
        }
        _ => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "5")],
            format!(
                "too many queries: {} are running and others waited {}s for a slot (--max-concurrent-queries); retry later",
                st.cfg.query.max_concurrent_queries,
                QUERY_QUEUE_WAIT.as_secs()
            ),
        )
            .into_response(),
    }
}

/// A reply's body, and the query slot its query holds until the body is done or
/// [`reply::REPLY_STALL`] has passed since the reply began (a client that stopped reading
/// must not keep a slot for ever; the slot bounds the work, which is done by then).
struct HoldingSlot {
    body: axum::body::Body,
    _done: tokio::sync::oneshot::Sender<()>,
}

impl HoldingSlot {
    fn new(body: axum::body::Body, slot: weft_querier::fair::Slot) -> HoldingSlot {
        let (done, body_dropped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = tokio::time::timeout(reply::REPLY_STALL, body_dropped).await;
        });
        HoldingSlot { body, _done: done }
    }
}

impl http_body::Body for HoldingSlot {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

use crate::app::AppState;
use crate::tempo::json::Inspected;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;
use weft_engine::search::{TagValues, TraceSink};
use weft_engine::span_metrics::ColumnSink;
use weft_engine::tags::ColumnTagValues;
use weft_querier::scan::{ScanStats, Window};
use weft_traceql::ast::{FieldExpr, SpansetExpr, Stage};
use weft_traceql::{EvalError, Query as TraceQl};

pub(crate) type Params = Query<HashMap<String, String>>;

/// Most spans per spanset a request may ask for (also what `spss=0`, "unlimited" in Tempo,
/// means), and most traces.
pub(crate) const MAX_SPSS: usize = 1000;
pub(crate) const MAX_LIMIT: usize = 10_000;
/// Most distinct tag names per scope and tag values returned.
pub(crate) const MAX_TAGS: usize = 5000;
pub(crate) const MAX_TAG_VALUES: usize = 1000;

pub(crate) fn bad(msg: impl Into<String>) -> Response {
    text(StatusCode::BAD_REQUEST, msg)
}

/// The message of an error reply, kept for callers that answer in another protocol (gRPC).
#[derive(Debug, Clone)]
pub(crate) struct ErrorText(pub String);

pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let msg = msg.into();
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{msg}\n"),
    )
        .into_response();
    r.extensions_mut().insert(ErrorText(msg));
    r
}

pub(crate) fn json(v: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// [`json`], marked partial when the scan skipped damaged blocks (a header, so Tempo's reply
/// shapes stay exact).
pub(crate) fn json_scanned(v: serde_json::Value, stats: &ScanStats) -> Response {
    json_text_scanned(v.to_string(), stats)
}

/// [`json_scanned`] for a reply already written as JSON text, or streamed.
pub(crate) fn json_text_scanned(body: impl Into<axum::body::Body>, stats: &ScanStats) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "application/json")], body.into()).into_response();
    // What weft can say beyond Tempo's reply messages, which clients decode strictly.
    let h = r.headers_mut();
    h.insert(INSPECTED_BLOCKS_HEADER, stats.inspected_blocks.into());
    h.insert(SKIPPED_BLOCKS_HEADER, stats.skipped_blocks.into());
    h.insert(SKIPPED_ROW_GROUPS_HEADER, stats.skipped_row_groups.into());
    h.insert(INSPECTED_SPANS_HEADER, stats.inspected_spans.into());
    h.insert(INSPECTED_TRACES_HEADER, stats.inspected_traces.into());
    h.insert(SPLIT_TRACES_HEADER, stats.split_traces.into());
    h.insert(SPLIT_TRACES_RULED_OUT_HEADER, stats.split_traces_ruled_out.into());
    if stats.damaged_blocks > 0 {
        r.headers_mut()
            .insert(reply::PARTIAL_HEADER, stats.damaged_blocks.into());
    }
    if stats.unanswered_live_stores > 0 {
        // Live stores did not answer: their partitions' spans not yet in a block are missing.
        r.headers_mut()
            .insert(LIVE_STORES_PARTIAL_HEADER, stats.unanswered_live_stores.into());
    }
    if stats.truncated_traces > 0 {
        // Traces larger than --max-trace-response-bytes were evaluated on their earliest
        // spans only: a match in their later spans may be missing.
        r.headers_mut()
            .insert(TRUNCATED_TRACES_HEADER, stats.truncated_traces.into());
    }
    r
}

/// A response header naming how many live stores did not answer a query's recent part: the
/// answer lacks the spans of their partitions not yet in a block.
pub const LIVE_STORES_PARTIAL_HEADER: &str = "x-weft-partial-live-stores";
/// A response header naming how many traces larger than the read cap a scan evaluated on
/// their earliest spans only.
pub const TRUNCATED_TRACES_HEADER: &str = "x-weft-partial-truncated-traces";
/// Blocks a query read at least one row group of.
pub const INSPECTED_BLOCKS_HEADER: &str = "x-weft-inspected-blocks";
/// Blocks a query skipped by their time range or statistics.
pub const SKIPPED_BLOCKS_HEADER: &str = "x-weft-skipped-blocks";
/// Row groups skipped by their statistics or value blooms.
pub const SKIPPED_ROW_GROUPS_HEADER: &str = "x-weft-skipped-row-groups";
/// Spans and trace pieces a query examined (tag replies have no field for them).
pub const INSPECTED_SPANS_HEADER: &str = "x-weft-inspected-spans";
pub const INSPECTED_TRACES_HEADER: &str = "x-weft-inspected-traces";
/// Traces stored in more than one piece (head and blocks) that a query fetched whole, and
/// those whose pieces' filter columns ruled them out without a fetch.
pub const SPLIT_TRACES_HEADER: &str = "x-weft-split-traces";
pub const SPLIT_TRACES_RULED_OUT_HEADER: &str = "x-weft-split-traces-ruled-out";
/// Set to `true` when a tag-values reply stopped at its limit of distinct values.
pub const TRUNCATED_VALUES_HEADER: &str = "x-weft-tag-values-truncated";

pub use crate::config::parse_duration;

/// Parses a time: Unix seconds (integer or fractional), Unix nanoseconds (integers above
/// 10^15), or RFC 3339. Returns Unix nanoseconds.
pub fn parse_time(name: &str, s: &str) -> Result<u64, String> {
    let s = s.trim();
    if let Ok(i) = s.parse::<u64>() {
        return Ok(if i > 1_000_000_000_000_000 {
            i
        } else {
            i.saturating_mul(1_000_000_000)
        });
    }
    if let Ok(f) = s.parse::<f64>()
        && f.is_finite()
        && f >= 0.0
    {
        return Ok((f * 1e9) as u64);
    }
    parse_rfc3339(s)
        .ok_or_else(|| format!("invalid {name} {s:?}: expected Unix seconds or an RFC 3339 time from 1970 to 2554"))
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to Unix nanoseconds: `None` for anything else, a
/// field out of its range (month 13, February 30, hour 24) included, and for a time before
/// 1970 or after 2554 (beyond 64-bit nanoseconds).
pub(crate) fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if !s.is_ascii() || b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse::<i64>().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    // A leap second (:60) reads as the second after :59, as most parsers take it.
    if !(1..=12).contains(&mo) || d < 1 || d > month_days[mo as usize - 1] || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None; // a '.' without digits
        }
        let frac = &s[start..i];
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos = digits.parse().ok()?;
    }
    let offset = match &s[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && o.as_bytes()[3] == b':' => {
            let digits = |t: &str| t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse::<i64>().ok())?;
            let (oh, om) = (digits(&o[1..3])?, digits(&o[4..6])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let v = (oh * 60 + om) * 60;
            if o.starts_with('-') { -v } else { v }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y2, m2) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos as u64)
}

pub(crate) fn param<'a>(p: &'a HashMap<String, String>, k: &str) -> Option<&'a str> {
    p.get(k).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// `start`/`end` in Unix seconds as an inclusive window of nanoseconds; `end` is the end of
/// its second.
pub(crate) fn search_window(p: &HashMap<String, String>) -> Result<Option<Window>, String> {
    let start = param(p, "start").map(|s| parse_time("start", s)).transpose()?;
    let end = param(p, "end").map(|s| parse_time("end", s)).transpose()?;
    // `end` names its whole second: a start inside it is before the end.
    if let (Some(s), Some(e)) = (start, end)
        && s > e.saturating_add(999_999_999)
    {
        return Err(format!(
            "invalid range: start {} is after end {}",
            s / 1_000_000_000,
            e / 1_000_000_000
        ));
    }
    Ok(match (start, end) {
        (None, None) => None,
        (s, e) => Some((
            s.unwrap_or(0),
            e.map(|e| e.saturating_add(999_999_999)).unwrap_or(u64::MAX),
        )),
    })
}

/// Parses, validates and checks support of a TraceQL query, as a 400 on failure.
pub(crate) fn parse_query(q: &str) -> Result<TraceQl, String> {
    let query = weft_traceql::parse(q).map_err(|e| format!("invalid TraceQL query: {e}"))?;
    weft_traceql::validate(&query).map_err(|e| e.to_string())?;
    weft_traceql::supported(&query).map_err(|e| e.to_string())?;
    Ok(query)
}

pub(crate) fn eval_error(e: EvalError) -> Response {
    bad(e.to_string())
}

/// TraceQL for Tempo's `tags=` logfmt: `{ .k = "v" && ... }`. Numbers and booleans also match
/// attributes of that type; `name` is the span name and `status.code` the status.
pub fn logfmt_to_traceql(tags: &str) -> Result<String, String> {
    let mut conds = Vec::new();
    let mut rest = tags.trim();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("invalid tags {tags:?}: expected key=value pairs"))?;
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!("invalid tags {tags:?}: bad key {key:?}"));
        }
        rest = &rest[eq + 1..];
        let value;
        if let Some(r) = rest.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = r.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => out.push(c),
                }
            }
            let end = end.ok_or_else(|| format!("invalid tags {tags:?}: unterminated quote"))?;
            value = out;
            rest = r[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value = rest[..end].to_owned();
            rest = rest[end..].trim_start();
        }
        let quoted = format!("{value:?}");
        let cond = match key {
            "name" => format!("name = {quoted}"),
            "status.code" | "status" => match value.as_str() {
                "error" | "2" | "STATUS_CODE_ERROR" => "status = error".to_owned(),
                "ok" | "1" | "STATUS_CODE_OK" => "status = ok".to_owned(),
                "unset" | "0" | "STATUS_CODE_UNSET" => "status = unset".to_owned(),
                _ => return Err(format!("invalid tags {tags:?}: unknown status {value:?}")),
            },
            _ => {
                let field = if key.chars().all(|c| c.is_alphanumeric() || "._-:/".contains(c)) {
                    format!(".{key}")
                } else {
                    format!(".{key:?}")
                };
                if let Ok(i) = value.parse::<i64>() {
                    format!("({field} = {quoted} || {field} = {i})")
                } else if value == "true" || value == "false" {
                    format!("({field} = {quoted} || {field} = {value})")
                } else {
                    format!("{field} = {quoted}")
                }
            }
        };
        conds.push(cond);
    }
    Ok(if conds.is_empty() {
        "{ }".to_owned()
    } else {
        format!("{{ {} }}", all_of(&conds))
    })
}

/// `conds` joined by `&&`, in parenthesised groups of at most 32 when there are more: a flat
/// chain of more than 128 would pass TraceQL's nesting limit (each `&&` of a chain nests).
fn all_of(conds: &[String]) -> String {
    const GROUP: usize = 32;
    if conds.len() <= GROUP {
        return conds.join(" && ");
    }
    let per = conds.len().div_ceil(GROUP);
    let groups: Vec<String> = conds.chunks(per).map(|c| format!("({})", all_of(c))).collect();
    groups.join(" && ")
}

pub(crate) fn inspected(s: &ScanStats, st: &AppState, tenant: &str) -> Inspected {
    Inspected {
        bytes: s.inspected_bytes,
        traces: s.inspected_traces,
        spans: s.inspected_spans,
        blocks: s.inspected_blocks,
        skipped_blocks: s.skipped_blocks,
        total_blocks: s.total_blocks,
        total_block_bytes: st.querier().blocks(tenant).iter().map(|b| b.meta.size_bytes).sum(),
        completed_jobs: 1,
        total_jobs: 1,
    }
}

pub(crate) async fn run_scan(
    st: &AppState,
    tenant: &str,
    window: Option<Window>,
    sink: &mut (dyn TraceSink + Send),
) -> Result<ScanStats, Response> {
    let query = sink.prefilter().source().to_owned();
    let (q, partial) = local_querier(st, tenant, Some(&query)).await?;
    let mut stats = q.scan(tenant, window, sink).await.map_err(scan_failed)?;
    stats.add(&partial);
    Ok(stats)
}

/// The querier a query this process runs alone reads with: its own, or, with live stores
/// (`--live-stores`), one holding a copy of their recent spans of `tenant` (of the traces that
/// may match `query`, TraceQL, when given; [`jobs::live::materialized`]). With what the copy
/// adds to the query's statistics.
pub(crate) async fn local_querier<'a>(
    st: &'a AppState,
    tenant: &str,
    query: Option<&str>,
) -> Result<(std::borrow::Cow<'a, weft_querier::Querier>, ScanStats), Response> {
    Ok(match &st.live {
        None => (std::borrow::Cow::Borrowed(st.querier()), ScanStats::default()),
        Some(live) => {
            let (q, unanswered) = jobs::live::materialized(st, live, tenant, query).await?;
            let stats = ScanStats {
                unanswered_live_stores: unanswered,
                ..ScanStats::default()
            };
            (std::borrow::Cow::Owned(q), stats)
        }
    })
}

/// Runs a column scan ([`Querier::scan_columns`](weft_querier::Querier::scan_columns)) as
/// [`run_scan`] runs a trace scan.
pub(crate) async fn run_column_scan(
    st: &AppState,
    tenant: &str,
    window: Option<Window>,
    sink: &mut (impl ColumnSink + Send + 'static),
) -> Result<ScanStats, Response> {
    let (q, partial) = local_querier(st, tenant, None).await?;
    let mut stats = q.scan_columns(tenant, window, sink).await.map_err(scan_failed)?;
    stats.add(&partial);
    Ok(stats)
}

pub(crate) fn scan_failed(e: weft_querier::QueryError) -> Response {
    reply::read_failed(&e, "reading blocks", text)
}

/// The field a tag names: a TraceQL attribute or intrinsic (`resource.service.name`, `.x`,
/// `name`), or for v1 a bare key (`service.name`), read as `.key`.
pub(crate) fn tag_field(tag: &str, v2: bool) -> Result<FieldExpr, String> {
    let try_parse = |t: &str| -> Option<FieldExpr> {
        let q = weft_traceql::parse(&format!("{{ {t} }}")).ok()?;
        match q.pipeline.stages.first()? {
            Stage::Spanset(SpansetExpr::Filter(f)) => f.expr.clone().filter(FieldExpr::is_field),
            _ => None,
        }
    };
    let bad_tag = || {
        format!(
            "invalid tag {tag:?}: expected an attribute such as resource.service.name or .http.method, or an intrinsic such as name"
        )
    };
    if v2 {
        return try_parse(tag).ok_or_else(bad_tag);
    }
    try_parse(&format!(".{tag}"))
        .or_else(|| try_parse(&format!(".{tag:?}")))
        .ok_or_else(bad_tag)
}

/// What a tag lookup found: its list, whether more were left out, what the scan read, and its
/// last progress report (the reply's jobs).
pub(crate) struct Found<T> {
    pub list: T,
    pub truncated: bool,
    pub stats: ScanStats,
    pub jobs: Option<weft_engine::search::ScanProgress>,
}

impl<T> Found<T> {
    /// A list of tag names, which is never cut (each scope keeps its cap).
    pub fn keys(list: T, stats: ScanStats, jobs: Option<weft_engine::search::ScanProgress>) -> Found<T> {
        Found {
            list,
            truncated: false,
            stats,
            jobs,
        }
    }
}

/// The distinct values of `field` over the spans matching `query` in `window`, at most `cap`
/// (in the order first seen). Without a filter they are read from columns
/// (`weft_engine::tags`), otherwise from whole traces.
pub(crate) async fn distinct_values(
    st: &AppState,
    tenant: &str,
    query: &TraceQl,
    field: FieldExpr,
    window: Option<Window>,
    cap: usize,
) -> Result<Found<Vec<weft_traceql::Value>>, Response> {
    if let Some(peers) = &st.peers
        && let Some(found) = jobs::tags::tag_values(st, peers, tenant, query, &field, window, cap).await?
    {
        return Ok(found);
    }
    if let Some(mut sink) = ColumnTagValues::new(query, &field, window, cap) {
        let stats = run_column_scan(st, tenant, window, &mut sink).await?;
        return Ok(Found {
            truncated: sink.truncated(),
            jobs: sink.jobs,
            list: sink.finish(),
            stats,
        });
    }
    let mut sink = TagValues::new(query, field, cap).map_err(eval_error)?;
    let stats = run_scan(st, tenant, window, &mut sink).await?;
    Ok(Found {
        truncated: sink.truncated(),
        jobs: sink.jobs,
        list: sink.finish(),
        stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("100ms"), Ok(100_000_000));
        assert_eq!(parse_duration("1m30s"), Ok(90_000_000_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("2"), Ok(2_000_000_000));
        assert_eq!(parse_duration("10µs"), Ok(10_000));
        assert!(parse_duration("10 parsecs").unwrap_err().contains("10 parsecs"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn times_parse_as_seconds_nanos_or_rfc3339() {
        assert_eq!(parse_time("start", "1700000000"), Ok(1_700_000_000_000_000_000));
        assert_eq!(
            parse_time("start", "1700000000000000000"),
            Ok(1_700_000_000_000_000_000)
        );
        assert_eq!(parse_time("start", "1700000000.5"), Ok(1_700_000_000_500_000_000));
        assert_eq!(
            parse_time("start", "2023-11-14T22:13:20Z"),
            Ok(1_700_000_000_000_000_000)
        );
        assert_eq!(
            parse_time("start", "2023-11-14T23:13:20.25+01:00"),
            Ok(1_700_000_000_250_000_000)
        );
        assert!(parse_time("start", "yesterday").unwrap_err().contains("start"));
        assert_eq!(
            parse_time("start", "2024-02-29T00:00:00Z"),
            Ok(1_709_164_800_000_000_000)
        );
        // Found by an audit: multi-byte characters panicked, fields out of range were
        // normalised, and years from 2555 wrapped to near 1970.
        for bad in [
            "2023-11-14T22:13:20+1\u{e9}12",
            "2023-11-14T22:13:\u{e9}0Z",
            "2023-13-45T99:99:99Z",
            "2023-02-29T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20.+01:00",
            "2023-11-14T22:13:20+24:00",
            "2023-11-14T22:13:2-Z",
            "2600-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert!(parse_time("start", bad).is_err(), "{bad}");
        }
        assert!(parse_time("start", "2554-07-21T23:34:33Z").is_ok());
    }

    proptest::proptest! {
        /// Times and tag names come from any client: no input panics.
        #[test]
        fn any_time_or_escaped_name_is_parsed_or_refused(
            s in "\\PC{0,40}",
            t in "[0-9T:Z.+\\-\u{e9}]{19,32}",
            tail in "[0-9:Z.+\\-\u{e9}]{0,8}",
        ) {
            let _ = parse_time("start", &s);
            let _ = parse_time("start", &t);
            let _ = parse_rfc3339(&format!("2023-11-14T22:13:20{tail}"));
            let _ = crate::tempo::search::percent_decode(&s);
        }
    }

    #[test]
    fn percent_escapes_decode_and_anything_else_stays() {
        assert_eq!(crate::tempo::search::percent_decode("a%2Eb"), "a.b");
        // A '%' before a multi-byte character panicked.
        assert_eq!(crate::tempo::search::percent_decode("%a\u{e9}x"), "%a\u{e9}x");
        assert_eq!(crate::tempo::search::percent_decode("%+1%"), "%+1%");
    }

    #[test]
    fn many_tags_stay_within_the_nesting_limit() {
        for n in [33, 130, 1_000, 5_000] {
            let tags: Vec<String> = (0..n).map(|i| format!("k{i}=v{i}")).collect();
            let q = logfmt_to_traceql(&tags.join(" ")).unwrap();
            let parsed = weft_traceql::parse(&q).unwrap_or_else(|e| panic!("{n} tags: {e}"));
            assert_eq!(q.matches(" = ").count(), n);
            assert!(weft_traceql::validate(&parsed).is_ok(), "{n} tags");
        }
    }

    #[test]
    fn logfmt_tags_become_traceql() {
        assert_eq!(
            logfmt_to_traceql(r#"service.name=api http.status_code=500 name="GET /x""#).unwrap(),
            r#"{ .service.name = "api" && (.http.status_code = "500" || .http.status_code = 500) && name = "GET /x" }"#
        );
        assert_eq!(logfmt_to_traceql("status.code=error").unwrap(), "{ status = error }");
        for t in [
            r#"service.name=api http.status_code=500 name="GET /x""#,
            "error=true",
            r#"k="a \"quoted\" value""#,
        ] {
            let q = logfmt_to_traceql(t).unwrap();
            parse_query(&q).unwrap_or_else(|e| panic!("{t} -> {q}: {e}"));
        }
        assert!(logfmt_to_traceql("novalue").is_err());
        assert!(logfmt_to_traceql(r#"k="open"#).is_err());
    }

    #[test]
    fn tags_name_fields() {
        assert!(tag_field("resource.service.name", true).is_ok());
        assert!(tag_field("name", true).is_ok());
        assert!(tag_field("service.name", false).is_ok());
        assert!(tag_field("not a tag {", true).is_err());
    }
}
