//! Tempo's search, tag and metrics endpoints on :3200.
//!
//! Parameters follow Tempo's HTTP API: `start`/`end` in Unix seconds (metrics also take
//! nanoseconds or RFC 3339), durations as Go/Prometheus duration strings (`100ms`, `1m30s`).
//! Bad parameters and invalid or unsupported TraceQL get a 400 whose text names the problem.

use crate::AppState;
use crate::tempo::{self, Inspected};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;
use weft_querier::scan::{ScanStats, Window};
use weft_query::graph::ServiceGraph;
use weft_query::search::{Metrics, Search, SearchParams, TagNames, TagScope, TagValues, TraceSink};
use weft_query::span_metrics::{ColumnSink, SpanMetrics};
use weft_query::tags::{ColumnTagNames, ColumnTagValues};
use weft_traceql::ast::{FieldExpr, SpansetExpr, Stage};
use weft_traceql::{EvalError, Query as TraceQl};

type Params = Query<HashMap<String, String>>;

/// Most spans per spanset a request may ask for (also what `spss=0`, "unlimited" in Tempo,
/// means), and most traces.
const MAX_SPSS: usize = 1000;
const MAX_LIMIT: usize = 10_000;
/// Most distinct tag names per scope and tag values returned.
const MAX_TAGS: usize = 5000;
const MAX_TAG_VALUES: usize = 1000;

fn bad(msg: impl Into<String>) -> Response {
    text(StatusCode::BAD_REQUEST, msg)
}

/// The message of an error reply, kept for callers that answer in another protocol (gRPC).
#[derive(Debug, Clone)]
pub(crate) struct ErrorText(pub String);

fn text(status: StatusCode, msg: impl Into<String>) -> Response {
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

fn json(v: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// [`json`], marked partial when the scan skipped damaged blocks (a header, so Tempo's reply
/// shapes stay exact).
fn json_scanned(v: serde_json::Value, stats: &ScanStats) -> Response {
    json_text_scanned(v.to_string(), stats)
}

/// [`json_scanned`] for a reply already written as JSON text.
fn json_text_scanned(body: String, stats: &ScanStats) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
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
            .insert(crate::api::PARTIAL_HEADER, stats.damaged_blocks.into());
    }
    if stats.truncated_traces > 0 {
        // Traces larger than --max-trace-response-bytes were evaluated on their earliest
        // spans only: a match in their later spans may be missing.
        r.headers_mut()
            .insert(TRUNCATED_TRACES_HEADER, stats.truncated_traces.into());
    }
    r
}

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
    parse_rfc3339(s).ok_or_else(|| format!("invalid {name} {s:?}: expected Unix seconds or an RFC 3339 time"))
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to Unix nanoseconds.
pub(crate) fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut nanos = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos = digits.parse().ok()?;
    }
    let offset = match &s[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let oh: i64 = o[1..3].parse().ok()?;
            let om: i64 = o[4..6].parse().ok()?;
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
    u64::try_from(secs).ok().map(|s| s * 1_000_000_000 + nanos as u64)
}

fn param<'a>(p: &'a HashMap<String, String>, k: &str) -> Option<&'a str> {
    p.get(k).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// `start`/`end` in Unix seconds as an inclusive window of nanoseconds; `end` is the end of
/// its second.
fn search_window(p: &HashMap<String, String>) -> Result<Option<Window>, String> {
    let start = param(p, "start").map(|s| parse_time("start", s)).transpose()?;
    let end = param(p, "end").map(|s| parse_time("end", s)).transpose()?;
    if let (Some(s), Some(e)) = (start, end)
        && s > e
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

fn eval_error(e: EvalError) -> Response {
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
        format!("{{ {} }}", conds.join(" && "))
    })
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
    }
}

pub(crate) async fn run_scan(
    st: &AppState,
    tenant: &str,
    window: Option<Window>,
    sink: &mut (dyn TraceSink + Send),
) -> Result<ScanStats, Response> {
    st.querier().scan(tenant, window, sink).await.map_err(scan_failed)
}

/// Runs a column scan ([`Querier::scan_columns`](weft_querier::Querier::scan_columns)) as
/// [`run_scan`] runs a trace scan.
async fn run_column_scan(
    st: &AppState,
    tenant: &str,
    window: Option<Window>,
    sink: &mut (impl ColumnSink + Send),
) -> Result<ScanStats, Response> {
    st.querier()
        .scan_columns(tenant, window, sink)
        .await
        .map_err(scan_failed)
}

fn scan_failed(e: weft_querier::QueryError) -> Response {
    crate::api::read_failed(&e, "reading blocks", text)
}

/// `GET /api/search`.
pub async fn search(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let (hits, stats) = match run_search(&st, &tenant, &p).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    st.search_latency.observe(started.elapsed().as_secs_f64());
    json_scanned(tempo::search_response(&hits, &inspected(&stats, &st, &tenant)), &stats)
}

/// A search with Tempo's parameters (`q` or `tags`, `limit`, `spss`, `minDuration`,
/// `maxDuration`, `start`, `end`): its hits and what it inspected, or the error reply.
pub(crate) async fn run_search(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
) -> Result<(Vec<weft_query::search::Hit>, ScanStats), Response> {
    run_search_progress(st, tenant, p, Arc::default()).await
}

/// [`run_search`], publishing the hits found so far into `progress` as the scan goes (at most
/// every 100 ms), for progressive results.
pub(crate) async fn run_search_progress(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
    progress: Arc<parking_lot::Mutex<Vec<weft_query::search::Hit>>>,
) -> Result<(Vec<weft_query::search::Hit>, ScanStats), Response> {
    let q = match (param(p, "q"), param(p, "tags")) {
        (Some(q), _) => q.to_owned(),
        (None, Some(tags)) => match logfmt_to_traceql(tags) {
            Ok(q) => q,
            Err(e) => return Err(bad(e)),
        },
        (None, None) => "{ }".to_owned(),
    };
    let query = match parse_query(&q) {
        Ok(q) => q,
        Err(e) => return Err(bad(e)),
    };
    // `zero`: what 0 means (Tempo: `spss=0` is unlimited, `limit=0` an error).
    let num = |k: &str, default: usize, max: usize, zero: Option<usize>| -> Result<usize, String> {
        match param(p, k) {
            None => Ok(default),
            Some(s) => match (s.parse::<usize>(), zero) {
                (Ok(0), Some(z)) => Ok(z),
                (Ok(n), _) if n > 0 => Ok(n.min(max)),
                _ => Err(format!("invalid {k} {s:?}: expected a positive integer")),
            },
        }
    };
    let dur = |k: &str| param(p, k).map(parse_duration).transpose();
    let params = match (
        num("limit", 20, MAX_LIMIT, None),
        num("spss", 3, MAX_SPSS, Some(MAX_SPSS)),
        dur("minDuration"),
        dur("maxDuration"),
    ) {
        (Ok(limit), Ok(spss), Ok(min), Ok(max)) => SearchParams {
            limit,
            spans_per_spanset: spss,
            min_duration_ns: min,
            max_duration_ns: max,
        },
        (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => return Err(bad(e)),
    };
    if let (Some(min), Some(max)) = (params.min_duration_ns, params.max_duration_ns)
        && min > max
    {
        return Err(bad("invalid duration range: minDuration is greater than maxDuration"));
    }
    let window = match search_window(p) {
        Ok(w) => w,
        Err(e) => return Err(bad(e)),
    };
    let sink = match Search::new(&query, params) {
        Ok(s) => s,
        Err(e) => return Err(eval_error(e)),
    };
    let mut sink = Progress {
        inner: sink,
        out: progress,
        last: Instant::now(),
    };
    let stats = run_scan(st, tenant, window, &mut sink).await?;
    Ok((sink.inner.finish(), stats))
}

/// A search sink that publishes its hits so far now and then.
struct Progress {
    inner: Search,
    out: Arc<parking_lot::Mutex<Vec<weft_query::search::Hit>>>,
    last: Instant,
}

impl TraceSink for Progress {
    fn prefilter(&self) -> &weft_query::prefilter::Prefilter {
        self.inner.prefilter()
    }

    fn wants_start(&self, start: u64) -> bool {
        self.inner.wants_start(start)
    }

    fn offer(&mut self, rows: &[weft_block::row::SpanRow]) {
        self.inner.offer(rows);
        if self.last.elapsed() >= std::time::Duration::from_millis(100) && Arc::strong_count(&self.out) > 1 {
            *self.out.lock() = self.inner.hits_so_far();
            self.last = Instant::now();
        }
    }

    fn done(&self) -> bool {
        self.inner.done()
    }
}

/// The intrinsics listed under the `intrinsic` scope of `/api/v2/search/tags`: Tempo's list.
const INTRINSICS: &[&str] = &[
    "duration",
    "event:name",
    "event:timeSinceStart",
    "instrumentation:name",
    "instrumentation:version",
    "kind",
    "name",
    "rootName",
    "rootServiceName",
    "span:duration",
    "span:kind",
    "span:name",
    "span:status",
    "span:statusMessage",
    "status",
    "statusMessage",
    "trace:duration",
    "trace:rootName",
    "trace:rootService",
    "traceDuration",
];

/// A filter query from `q`, for the tag endpoints. Grafana sends the query being typed, which
/// is often incomplete; an unparseable `q` filters nothing rather than failing autocomplete.
fn filter_query(p: &HashMap<String, String>) -> TraceQl {
    param(p, "q")
        .and_then(|q| parse_query(q).ok())
        .filter(|q| !q.pipeline.stages.iter().any(|s| matches!(s, Stage::Metrics(_))))
        .unwrap_or_else(|| weft_traceql::parse("{ }").expect("valid"))
}

/// Attribute keys per scope of the spans matching `q` in the window. Without a filter they are
/// read from columns (`weft_query::tags`), otherwise from whole traces.
async fn collect_tags(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
) -> Result<(BTreeMap<TagScope, BTreeSet<String>>, ScanStats), Response> {
    let window = search_window(p).map_err(bad)?;
    let query = filter_query(p);
    let (mut keys, stats) = if let Some(mut sink) = ColumnTagNames::new(&query, window, MAX_TAGS) {
        let stats = run_column_scan(st, tenant, window, &mut sink).await?;
        (sink.keys, stats)
    } else {
        let mut sink = TagNames::new(&query, MAX_TAGS).map_err(eval_error)?;
        let stats = run_scan(st, tenant, window, &mut sink).await?;
        (sink.keys, stats)
    };
    // weft's note for the Zipkin API is no attribute of the span's to offer (api::shown).
    if let Some(span) = keys.get_mut(&TagScope::Span) {
        span.remove(weft_translate::zipkin::keys::ORIGINAL);
    }
    Ok((keys, stats))
}

/// `GET /api/search/tags`: span and resource attribute keys.
pub async fn tags_v1(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let (names, stats) = match collect_tags(&st, &tenant, &p).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let scopes: Vec<TagScope> = match param(&p, "scope") {
        None | Some("all") => TagScope::ALL.to_vec(),
        Some("intrinsic") => {
            return json(serde_json::json!({ "tagNames": INTRINSICS, "metrics": {} }));
        }
        Some(s) => match TagScope::parse(s) {
            Some(scope) => vec![scope],
            None => return bad(format!("invalid scope: {s}")),
        },
    };
    let mut all = BTreeSet::new();
    for scope in scopes {
        all.extend(names.get(&scope).into_iter().flatten().cloned());
    }
    json_scanned(
        serde_json::json!({ "tagNames": all, "metrics": tempo::metadata_metrics(&inspected(&stats, &st, &tenant)) }),
        &stats,
    )
}

/// `GET /api/v2/search/tags?scope=`: keys per scope, plus the intrinsics.
pub async fn tags_v2(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let wanted: Vec<&str> = match param(&p, "scope") {
        None | Some("all") => vec!["resource", "span", "event", "link", "instrumentation", "intrinsic"],
        Some(s) if s == "intrinsic" || TagScope::parse(s).is_some() => vec![s],
        Some(s) => {
            return bad(format!(
                "invalid scope {s:?}: expected resource, span, event, link, instrumentation, intrinsic or all"
            ));
        }
    };
    let needs_scan = wanted.iter().any(|s| *s != "intrinsic");
    let (names, stats) = if needs_scan {
        match collect_tags(&st, &tenant, &p).await {
            Ok((n, s)) => (Some(n), s),
            Err(r) => return r,
        }
    } else {
        (None, ScanStats::default())
    };
    let scopes: Vec<serde_json::Value> = wanted
        .iter()
        .map(|&s| {
            let tags: Vec<String> = match TagScope::parse(s) {
                Some(scope) => names
                    .as_ref()
                    .and_then(|n| n.get(&scope))
                    .map(|k| k.iter().cloned().collect())
                    .unwrap_or_default(),
                None => INTRINSICS.iter().map(|s| s.to_string()).collect(),
            };
            serde_json::json!({ "name": s, "tags": tags })
        })
        .collect();
    json_scanned(
        serde_json::json!({ "scopes": scopes, "metrics": tempo::metadata_metrics(&inspected(&stats, &st, &tenant)) }),
        &stats,
    )
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

async fn tag_values(
    st: Arc<AppState>,
    headers: HeaderMap,
    tag: String,
    p: HashMap<String, String>,
    v2: bool,
) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    // Grafana encodes the tag twice; axum decoded it once.
    let tag = if tag.contains('%') { percent_decode(&tag) } else { tag };
    if let Some(values) = virtual_values(&tag, v2) {
        return json(values);
    }
    let field = match tag_field(&tag, v2) {
        Ok(f) => f,
        Err(e) => return bad(e),
    };
    let window = match search_window(&p) {
        Ok(w) => w,
        Err(e) => return bad(e),
    };
    let (values, truncated, stats) =
        match distinct_values(&st, &tenant, &filter_query(&p), field, window, MAX_TAG_VALUES).await {
            Ok(r) => r,
            Err(r) => return r,
        };
    let metrics = tempo::metadata_metrics(&inspected(&stats, &st, &tenant));
    let mut r = if v2 {
        let vals: Vec<_> = values.iter().map(tempo::typed_value).collect();
        json_scanned(serde_json::json!({ "tagValues": vals, "metrics": metrics }), &stats)
    } else {
        let vals: BTreeSet<String> = values.iter().map(tempo::value_text).collect();
        json_scanned(serde_json::json!({ "tagValues": vals, "metrics": metrics }), &stats)
    };
    if truncated {
        r.headers_mut()
            .insert(TRUNCATED_VALUES_HEADER, axum::http::HeaderValue::from_static("true"));
    }
    r
}

/// The distinct values of `field` over the spans matching `query` in `window`, at most `cap`
/// (in the order first seen), whether more were left out, and what the scan read. Without a
/// filter they are read from columns (`weft_query::tags`), otherwise from whole traces.
pub(crate) async fn distinct_values(
    st: &AppState,
    tenant: &str,
    query: &TraceQl,
    field: FieldExpr,
    window: Option<Window>,
    cap: usize,
) -> Result<(Vec<weft_traceql::Value>, bool, ScanStats), Response> {
    if let Some(mut sink) = ColumnTagValues::new(query, &field, window, cap) {
        let stats = run_column_scan(st, tenant, window, &mut sink).await?;
        let truncated = sink.truncated();
        return Ok((sink.finish(), truncated, stats));
    }
    let mut sink = TagValues::new(query, field, cap).map_err(eval_error)?;
    let stats = run_scan(st, tenant, window, &mut sink).await?;
    let truncated = sink.truncated();
    Ok((sink.finish(), truncated, stats))
}

/// Tags whose values are fixed, answered without reading storage, as Tempo does.
fn virtual_values(tag: &str, v2: bool) -> Option<serde_json::Value> {
    let keywords = |vs: &[&str]| {
        let vals: Vec<_> = vs
            .iter()
            .map(|v| serde_json::json!({ "type": "keyword", "value": v }))
            .collect();
        serde_json::json!({ "tagValues": vals, "metrics": {} })
    };
    match (tag, v2) {
        ("status" | "span:status", true) => Some(keywords(&["ok", "error", "unset"])),
        ("kind" | "span:kind", true) => Some(keywords(&[
            "client",
            "server",
            "producer",
            "consumer",
            "internal",
            "unspecified",
        ])),
        ("status.code", false) => Some(serde_json::json!({ "tagValues": ["unset", "ok", "error"], "metrics": {} })),
        _ => None,
    }
}

/// Decodes `%XX` escapes; invalid escapes are kept as written.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /api/search/tag/{tag}/values`.
pub async fn tag_values_v1(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(tag): Path<String>,
    Query(p): Params,
) -> Response {
    tag_values(st, headers, tag, p, false).await
}

/// `GET /api/v2/search/tag/{tag}/values`.
pub async fn tag_values_v2(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(tag): Path<String>,
    Query(p): Params,
) -> Response {
    tag_values(st, headers, tag, p, true).await
}

use weft_core::now_ns;

async fn metrics_query(st: Arc<AppState>, headers: HeaderMap, p: HashMap<String, String>, instant: bool) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let (series, start, step, stats) = match run_metrics(&st, &tenant, &p, instant).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    st.metrics_latency.observe(started.elapsed().as_secs_f64());
    let m = inspected(&stats, &st, &tenant);
    if instant {
        json_scanned(tempo::query_instant_response(&series, &m), &stats)
    } else {
        json_text_scanned(tempo::query_range_response(&series, start, step, &m), &stats)
    }
}

/// A metrics query with Tempo's parameters (`q`, `start`, `end`, `since`, `step`): its series,
/// start and step (nanoseconds) and what it inspected, or the error reply. An instant query is
/// one step over the whole range.
pub(crate) async fn run_metrics(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
    instant: bool,
) -> Result<(Vec<weft_traceql::Series>, u64, u64, ScanStats), Response> {
    let Some(q) = param(p, "q").or_else(|| param(p, "query")) else {
        return Err(bad("missing q: a TraceQL metrics query such as { } | rate()"));
    };
    let query = match parse_query(q) {
        Ok(q) => q,
        Err(e) => return Err(bad(e)),
    };
    let now = now_ns();
    let since = match param(p, "since").map(parse_duration).transpose() {
        Ok(s) => s.unwrap_or(3600 * 1_000_000_000),
        Err(e) => return Err(bad(e)),
    };
    let end = match param(p, "end").map(|s| parse_time("end", s)).transpose() {
        Ok(e) => e.unwrap_or(now),
        Err(e) => return Err(bad(e)),
    };
    let start = match param(p, "start").map(|s| parse_time("start", s)).transpose() {
        Ok(s) => s.unwrap_or(end.saturating_sub(since)),
        Err(e) => return Err(bad(e)),
    };
    if start >= end {
        return Err(bad(format!(
            "invalid range: start {start} is not before end {end} (nanoseconds)"
        )));
    }
    let step = if instant {
        end - start
    } else {
        match param(p, "step").map(parse_duration).transpose() {
            Ok(Some(0)) => return Err(bad("invalid step: must be positive")),
            Ok(Some(s)) => s,
            // Tempo's default: a 240th of the range, rounded down to 5s when above it, at least 1s.
            Ok(None) => {
                let s = (end - start) / 240;
                let five = 5_000_000_000;
                if s >= five { s - s % five } else { s.max(1_000_000_000) }
            }
            Err(e) => return Err(bad(e)),
        }
    };
    let exemplars = if instant {
        // Tempo's instant replies carry no exemplars.
        0
    } else {
        exemplar_limit(p, &query).map_err(bad)?
    };
    // Span-local queries over columns, one span at a time; the rest over whole traces.
    let window = Some((start, end - 1));
    let (max_series, max_points) = (st.cfg.max_metrics_series, st.cfg.max_metrics_points);
    let (series, stats) = match SpanMetrics::new(&query, start, end, step) {
        Err(e) => return Err(eval_error(e)),
        Ok(Some(mut m)) => {
            if let Err(e) = m.limit(max_series, max_points) {
                return Err(eval_error(e));
            }
            m.exemplars(exemplars);
            match st.querier().scan_columns(tenant, window, &mut m).await {
                Ok(stats) => (m.finish(), stats),
                Err(e) => return Err(scan_failed(e)),
            }
        }
        Ok(None) => {
            let mut sink = match Metrics::new(&query, start, end, step) {
                Ok(s) => s,
                Err(e) => return Err(eval_error(e)),
            };
            if let Err(e) = sink.limit(max_series, max_points) {
                return Err(eval_error(e));
            }
            sink.exemplars(exemplars);
            match run_scan(st, tenant, window, &mut sink).await {
                Ok(stats) => (sink.finish(), stats),
                Err(r) => return Err(r),
            }
        }
    };
    let series = match series {
        Ok(s) => s,
        Err(e) => return Err(eval_error(e)),
    };
    Ok((series, start, step, stats))
}

/// The most exemplars a range query returns, as Tempo's default `max_exemplars`.
pub const MAX_EXEMPLARS: usize = 100;

/// How many exemplars a range query asks for, as Tempo reads it: the `with(exemplars=N)` hint
/// over the `exemplars` parameter; `with(exemplars=false)` is none; 0 or neither means the
/// most, [`MAX_EXEMPLARS`], which also caps any number asked.
fn exemplar_limit(p: &HashMap<String, String>, query: &TraceQl) -> Result<usize, String> {
    use weft_traceql::ast::Static;
    let mut n = match param(p, "exemplars") {
        None => 0,
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| format!("invalid exemplars {v:?}: expected a non-negative integer"))?,
    };
    if let Some(h) = query.hints.iter().find(|h| h.key == "exemplars") {
        match &h.value {
            Static::Bool(false) => return Ok(0),
            Static::Int(i) if *i >= 0 => n = *i as u64,
            _ => {}
        }
    }
    Ok(if n == 0 {
        MAX_EXEMPLARS
    } else {
        (n as usize).min(MAX_EXEMPLARS)
    })
}

/// `GET /api/metrics/query_range`.
pub async fn query_range(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    metrics_query(st, headers, p, false).await
}

/// `GET /api/metrics/query`.
pub async fn query_instant(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    metrics_query(st, headers, p, true).await
}

/// Most spans one service-graph request reads by default, and at most (`maxSpans`). Counting
/// every trace from columns costs about 0.1 s per million spans on one core (a filter, which
/// needs whole traces, about 3 s); a larger range is counted newest first and marked
/// incomplete rather than holding the request for minutes.
const GRAPH_DEFAULT_SPANS: u64 = 10_000_000;
const GRAPH_MAX_SPANS: u64 = 50_000_000;

/// `GET /api/service-graph`: calls between services in a time range, with request and error
/// counts and callee latency quantiles, from the parent/child spans of every trace in the
/// range (not a sample). `start`/`end` as in search (default: the last `since`, 1h); `q`
/// keeps only traces matching a spanset query; `maxSpans` bounds the work. When the budget
/// runs out first, `complete` is false and `countedFrom` says how far back the counts reach.
pub async fn service_graph(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let query = match parse_query(param(&p, "q").unwrap_or("{ }")) {
        Ok(q) => q,
        Err(e) => return bad(e),
    };
    let since = match param(&p, "since").map(parse_duration).transpose() {
        Ok(s) => s.unwrap_or(3600 * 1_000_000_000),
        Err(e) => return bad(e),
    };
    let window = match search_window(&p) {
        Ok(Some((s, e))) if param(&p, "start").is_none() => (e.saturating_sub(since).max(s), e),
        Ok(Some(w)) => w,
        Ok(None) => {
            let end = now_ns();
            (end.saturating_sub(since), end)
        }
        Err(e) => return bad(e),
    };
    let max_spans = match param(&p, "maxSpans") {
        None => GRAPH_DEFAULT_SPANS,
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n > 0 => n.min(GRAPH_MAX_SPANS),
            _ => return bad(format!("invalid maxSpans {s:?}: expected a positive integer")),
        },
    };
    let mut sink = match ServiceGraph::new(&query, Some(window), max_spans) {
        Ok(s) => s,
        Err(e) => return eval_error(e),
    };
    // Every trace: straight from columns. A filter needs whole traces.
    let stats = if sink.counts_every_trace() {
        match st.querier().scan_service_graph(&tenant, Some(window), &mut sink).await {
            Ok(s) => s,
            Err(e) => return scan_failed(e),
        }
    } else {
        match run_scan(&st, &tenant, Some(window), &mut sink).await {
            Ok(s) => s,
            Err(r) => return r,
        }
    };
    st.graph_latency.observe(started.elapsed().as_secs_f64());
    let edges: Vec<serde_json::Value> = sink
        .edges()
        .into_iter()
        .map(|(from, to, e)| {
            serde_json::json!({
                "parent": from, "child": to, "callCount": e.calls, "errorCount": e.errors,
                "latencyP50Nano": e.latency_quantile(0.5).to_string(),
                "latencyP90Nano": e.latency_quantile(0.9).to_string(),
                "latencyP99Nano": e.latency_quantile(0.99).to_string(),
            })
        })
        .collect();
    let services: Vec<serde_json::Value> = sink
        .services()
        .into_iter()
        .map(|(name, s)| serde_json::json!({ "name": name, "spanCount": s.spans, "errorCount": s.errors, "rootCount": s.roots }))
        .collect();
    let mut out = serde_json::json!({
        "services": services,
        "edges": edges,
        "start": (window.0 / 1_000_000_000).to_string(),
        "end": (window.1 / 1_000_000_000).to_string(),
        "complete": sink.complete(),
        "metrics": tempo::metrics(&inspected(&stats, &st, &tenant)),
    });
    if !sink.complete()
        && let Some(oldest) = sink.oldest_start
    {
        out["countedFrom"] = serde_json::Value::String(oldest.to_string());
    }
    if sink.unresolved_calls > 0 {
        out["unresolvedCalls"] = sink.unresolved_calls.into();
    }
    if stats.damaged_blocks > 0 {
        out["complete"] = false.into();
        out["damagedBlocks"] = stats.damaged_blocks.into();
    }
    json_scanned(out, &stats)
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
