//! The Tempo-compatible HTTP API on :3200: trace by ID, echo, ready, build info, metrics.

use crate::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use weft_core::prom::{Exposition, Kind};

/// A latency histogram with fixed buckets, rendered in Prometheus format.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn latency() -> Self {
        const B: &[f64] = &[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        Histogram {
            bounds: B,
            counts: (0..B.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, secs: f64) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if secs <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    /// Writes the buckets, sum and count of the series with label `route`.
    fn render(&self, out: &mut Exposition, name: &str, route: &str) {
        let bucket = format!("{name}_bucket");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let le = b.to_string();
            out.sample(
                &bucket,
                &[("route", route), ("le", &le)],
                c.load(Ordering::Relaxed) as f64,
            );
        }
        let n = self.count.load(Ordering::Relaxed) as f64;
        out.sample(&bucket, &[("route", route), ("le", "+Inf")], n);
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        out.sample(&format!("{name}_sum"), &[("route", route)], sum);
        out.sample(&format!("{name}_count"), &[("route", route)], n);
    }
}

/// The WAL's counters.
fn render_wal(w: &weft_wal::WalStats, out: &mut Exposition) {
    let n = |v: &AtomicU64| v.load(Ordering::Relaxed) as f64;
    let wal: [(&str, Kind, &str, f64); 15] = [
        (
            "weft_wal_bytes_written_total",
            Kind::Counter,
            "Bytes appended to the WAL.",
            n(&w.bytes_written),
        ),
        (
            "weft_wal_records_written_total",
            Kind::Counter,
            "Records appended to the WAL.",
            n(&w.records_written),
        ),
        (
            "weft_wal_fsyncs_total",
            Kind::Counter,
            "WAL fsyncs (each covers a group of requests).",
            n(&w.syncs),
        ),
        (
            "weft_wal_fsync_seconds_total",
            Kind::Counter,
            "Time spent in WAL fsync.",
            n(&w.sync_nanos_total) / 1e9,
        ),
        (
            "weft_wal_size_bytes",
            Kind::Gauge,
            "Bytes in WAL segments on disk.",
            n(&w.size_bytes),
        ),
        (
            "weft_wal_write_errors_total",
            Kind::Counter,
            "WAL writes or fsyncs that failed (the group was refused and rolled back).",
            n(&w.write_errors),
        ),
        (
            "weft_wal_unavailable_refusals_total",
            Kind::Counter,
            "Appends refused because no WAL segment could be written (disk full).",
            n(&w.unavailable_refusals),
        ),
        (
            "weft_wal_unwritable",
            Kind::Gauge,
            "1 while the WAL cannot be written and ingest is refused (read-only mode), else 0.",
            n(&w.unwritable),
        ),
        (
            "weft_wal_direct_io",
            Kind::Gauge,
            "1 while the WAL is written with direct I/O (O_DIRECT | O_DSYNC, no separate fsync), else 0.",
            n(&w.direct_io),
        ),
        (
            "weft_wal_reused_segments_total",
            Kind::Counter,
            "WAL segments started in the file of an older segment whose records are all in blocks (no new file, no file growth).",
            n(&w.reused_segments),
        ),
        (
            "weft_wal_fenced_segments_total",
            Kind::Counter,
            "WAL segments closed for writing because a failed write could not be rolled back.",
            n(&w.fenced_segments),
        ),
        (
            "weft_wal_replay_torn_bytes",
            Kind::Gauge,
            "Bytes of torn (never acknowledged) tails dropped by the last WAL replay.",
            n(&w.replay_torn_bytes),
        ),
        (
            "weft_wal_replay_damaged_bytes",
            Kind::Gauge,
            "Damaged bytes skipped inside WAL segments by the last replay (records lost to corruption).",
            n(&w.replay_damaged_bytes),
        ),
        (
            "weft_wal_replay_damaged_ranges",
            Kind::Gauge,
            "Damaged ranges skipped by the last WAL replay.",
            n(&w.replay_damaged_ranges),
        ),
        (
            "weft_wal_replay_removed_segments",
            Kind::Gauge,
            "WAL segments without a complete header removed by the last replay.",
            n(&w.replay_removed_segments),
        ),
    ];
    for (name, kind, help, v) in wal {
        out.single(name, kind, help, v);
    }
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg.into() + "\n",
    )
        .into_response()
}

/// Parses a trace ID the way Tempo does: 1 to 32 hex digits, left-padded with zeros.
pub fn parse_trace_id(s: &str) -> Result<[u8; 16], String> {
    let s = s.trim();
    if s.is_empty() || s.len() > 32 {
        return Err(format!("invalid trace id {s:?}: expected 1 to 32 hex characters"));
    }
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("invalid trace id {s:?}: not hexadecimal"));
    }
    let padded = format!("{s:0>32}");
    let mut id = [0u8; 16];
    hex::decode_to_slice(&padded, &mut id).map_err(|e| format!("invalid trace id {s:?}: {e}"))?;
    Ok(id)
}

#[derive(Debug, Deserialize)]
pub struct TraceParams {
    start: Option<String>,
    end: Option<String>,
}

fn parse_secs(name: &str, v: &Option<String>) -> Result<Option<u64>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("invalid {name} {s:?}: expected Unix seconds")),
    }
}

/// A response header naming how many damaged blocks a query skipped; present only when it
/// skipped some, so the answer may be missing spans.
pub const PARTIAL_HEADER: &str = "x-weft-partial-damaged-blocks";

/// Marks a reply partial ([`PARTIAL_HEADER`]) when `damaged_blocks` were left out.
pub(crate) fn mark_partial(mut r: Response, damaged_blocks: u64) -> Response {
    if damaged_blocks > 0 {
        r.headers_mut().insert(PARTIAL_HEADER, damaged_blocks.into());
    }
    r
}

/// Seconds a client is asked to wait before retrying a read that storage could not serve.
pub const RETRY_AFTER_SECS: u64 = 5;

/// The reply to a read that failed: 503 with `Retry-After` when storage could not be reached
/// (the same query may succeed later; no block is blamed), 500 for anything else. `render`
/// builds the reply in the API's own error shape from the status and the message.
pub(crate) fn read_failed(
    e: &weft_querier::QueryError,
    what: &str,
    render: impl FnOnce(StatusCode, String) -> Response,
) -> Response {
    if e.is_transient() {
        tracing::warn!(error = %e, "{what} failed: storage unavailable");
        let mut r = render(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} failed: storage is unavailable, try again later: {e}"),
        );
        r.headers_mut().insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
        r
    } else {
        tracing::error!(error = %e, "{what} failed");
        render(StatusCode::INTERNAL_SERVER_ERROR, format!("{what} failed: {e}"))
    }
}

/// The message of an answer that skipped `n` damaged blocks.
pub fn damaged_message(n: u64) -> String {
    format!(
        "{n} damaged block{} skipped: the answer may be missing spans (the blocks are quarantined; see weft_block_quarantined in /metrics)",
        if n == 1 { " was" } else { "s were" }
    )
}

/// Takes `zipkin.original` out of spans, in place: weft's note of what an OpenTelemetry Zipkin
/// exporter's span said that OTLP cannot hold, which only the Zipkin API reads back; every
/// other API shows spans without it (spec/formats/zipkin.md).
pub(crate) fn hide_zipkin_original(rows: &mut [weft_block::row::SpanRow]) {
    for r in rows {
        if let Some(a) = weft_translate::zipkin::without_original(&r.attributes) {
            r.attributes = a.into();
        }
    }
}

/// Borrowed spans as every API but Zipkin's shows them ([`hide_zipkin_original`]); copied
/// only when one has the note, as nearly none do.
pub(crate) fn shown(rows: &[weft_block::row::SpanRow]) -> std::borrow::Cow<'_, [weft_block::row::SpanRow]> {
    if !rows
        .iter()
        .any(|r| weft_translate::zipkin::may_have_original(&r.attributes))
    {
        return std::borrow::Cow::Borrowed(rows);
    }
    let mut out = rows.to_vec();
    hide_zipkin_original(&mut out);
    std::borrow::Cow::Owned(out)
}

/// `GET /api/traces/{id}` (v1 shape) and `GET /api/v2/traces/{id}` (v2 shape).
pub async fn trace_by_id(st: &AppState, headers: &HeaderMap, id: &str, params: &TraceParams, v2: bool) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(headers) {
        Ok(t) => t,
        Err(e) => return error(StatusCode::UNAUTHORIZED, e.0),
    };
    let id = match parse_trace_id(id) {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let range = match (parse_secs("start", &params.start), parse_secs("end", &params.end)) {
        (Ok(Some(s)), Ok(Some(e))) if s > e => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid range: start {s} is after end {e}"),
            );
        }
        (Ok(s), Ok(e)) if s.is_some() || e.is_some() => Some((s.unwrap_or(0), e.unwrap_or(u64::MAX))),
        (Ok(_), Ok(_)) => None,
        (Err(m), _) | (_, Err(m)) => return error(StatusCode::BAD_REQUEST, m),
    };
    let mut found = match st
        .querier()
        .find_trace_capped(&tenant, &id, range, st.cfg.max_trace_response_bytes)
        .await
    {
        Ok(r) => r,
        Err(e) => return read_failed(&e, "reading trace", error),
    };
    st.trace_latency.observe(started.elapsed().as_secs_f64());
    let mut rows = std::mem::take(&mut found.rows);
    hide_zipkin_original(&mut rows);
    if rows.is_empty() {
        // Not found in what could be read; a damaged block that may have held it says so.
        let msg = match found.damaged_blocks {
            0 => format!("trace not found: {}", weft_core::hex(&id)),
            n => format!("trace not found: {}; {}", weft_core::hex(&id), damaged_message(n)),
        };
        return mark_partial(error(StatusCode::NOT_FOUND, msg), found.damaged_blocks);
    }
    // A trace over the read cap: the earliest spans, marked as Tempo marks partial results
    // (v2 `status: PARTIAL` with a message) and, for every shape, a response header.
    let mut partial = Vec::new();
    if found.truncated {
        partial.push(format!(
            "trace {} is larger than the response cap of {} bytes (--max-trace-response-bytes); only its first {} spans are returned",
            weft_core::hex(&id),
            st.cfg.max_trace_response_bytes,
            rows.len()
        ));
    }
    if found.damaged_blocks > 0 {
        partial.push(damaged_message(found.damaged_blocks));
    }
    let mut resp_headers = HeaderMap::new();
    resp_headers.insert("x-weft-blocks-read", found.blocks_read.into());
    if found.truncated {
        resp_headers.insert("x-weft-trace-truncated", axum::http::HeaderValue::from_static("true"));
    }
    if found.damaged_blocks > 0 {
        resp_headers.insert(PARTIAL_HEADER, found.damaged_blocks.into());
    }
    let truncated = (!partial.is_empty()).then(|| partial.join("; "));
    let wants_proto = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/protobuf") || a.contains("application/x-protobuf"));
    if wants_proto {
        let data = weft_block::row::encode_traces_data(&rows);
        drop(rows);
        let body = if v2 {
            // TraceByIDResponse { Trace trace = 1; ...; PartialStatus status = 3; string message = 4; }
            let mut out = Vec::with_capacity(data.len() + 6);
            weft_otlp::wire::put_bytes(&mut out, 1, &data);
            if let Some(msg) = &truncated {
                weft_otlp::wire::put_varint_field(&mut out, 3, 1);
                weft_otlp::wire::put_bytes(&mut out, 4, msg.as_bytes());
            }
            out
        } else {
            data
        };
        return (resp_headers, [(header::CONTENT_TYPE, "application/protobuf")], body).into_response();
    }
    let body = stream_trace_json(rows, found.large_read, v2, truncated);
    (resp_headers, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Spans per piece of a JSON trace. Each piece is rendered on its own (its spans grouped by
/// resource and scope into batches) and sent as soon as enough text is ready, so a large trace
/// costs one piece's JSON tree and a few chunks of text at a time, not a tree of the whole
/// trace (which took 1.5–2.8 GiB for 200,000 spans). A resource whose spans span several
/// pieces appears in several batches, as OTLP allows.
const JSON_PIECE_SPANS: usize = 256;
/// Text sent per chunk, and chunks buffered ahead of a slow client.
const JSON_CHUNK_BYTES: usize = 64 << 10;
const JSON_CHUNKS_AHEAD: usize = 4;

/// The v1 (`{"batches": [...]}`) or v2 (`{"trace": {"resourceSpans": [...]}}`) JSON of a
/// trace, written piece by piece on a blocking thread and streamed to the client.
fn stream_trace_json(
    rows: Vec<weft_block::row::SpanRow>,
    large_read: Option<tokio::sync::OwnedSemaphorePermit>,
    v2: bool,
    partial: Option<String>,
) -> axum::body::Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(JSON_CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        // Held until the trace is written, so large traces in memory at once stay few.
        let _large_read = large_read;
        let mut buf: Vec<u8> = Vec::with_capacity(JSON_CHUNK_BYTES + (JSON_CHUNK_BYTES >> 2));
        buf.extend_from_slice(if v2 {
            br#"{"trace":{"resourceSpans":["#
        } else {
            br#"{"batches":["#
        });
        let mut first = true;
        for piece in rows.chunks(JSON_PIECE_SPANS) {
            let data = weft_block::row::encode_traces_data(piece);
            // Straight from protobuf to JSON text: no message tree, no JSON tree (a span with
            // 1.4M attributes took 2.2 GiB through both).
            if let Err(e) = weft_otlp::json::write_resource_spans_json(&data, &mut first, &mut buf) {
                tracing::error!(error = %e, "stored trace does not decode; response cut short");
                let _ = tx.blocking_send(Err(std::io::Error::other(format!("stored trace does not decode: {e}"))));
                return;
            }
            if buf.len() >= JSON_CHUNK_BYTES
                && tx
                    .blocking_send(Ok(bytes::Bytes::from(std::mem::take(&mut buf))))
                    .is_err()
            {
                return; // the client went away
            }
        }
        buf.push(b']');
        if v2 {
            buf.push(b'}');
        }
        // v1 (`tempopb.Trace`) has no field for it: the x-weft-* headers say so.
        if let (Some(msg), true) = (&partial, v2) {
            buf.extend_from_slice(br#","status":"PARTIAL","message":"#);
            serde_json::to_writer(&mut buf, msg).expect("writing to memory");
        }
        buf.push(b'}');
        let _ = tx.blocking_send(Ok(bytes::Bytes::from(buf)));
    });
    axum::body::Body::new(ChannelBody(rx))
}

/// A response body fed by a channel of chunks.
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>);

impl http_body::Body for ChannelBody {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx).map(|c| c.map(|r| r.map(http_body::Frame::data)))
    }
}

pub async fn trace_v1(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(p): Query<TraceParams>,
) -> Response {
    trace_by_id(&st, &headers, &id, &p, false).await
}

pub async fn trace_v2(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(p): Query<TraceParams>,
) -> Response {
    trace_by_id(&st, &headers, &id, &p, true).await
}

pub async fn echo() -> &'static str {
    "echo"
}

pub async fn ready() -> &'static str {
    "ready"
}

pub async fn buildinfo() -> Response {
    let body = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "revision": option_env!("WEFT_GIT_REVISION").unwrap_or("unknown"),
        "branch": option_env!("WEFT_GIT_BRANCH").unwrap_or("unknown"),
        "buildUser": "",
        "buildDate": option_env!("WEFT_BUILD_DATE").unwrap_or(""),
        "goVersion": "",
    });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn proc_stats() -> (f64, u64, u64) {
    // utime+stime (fields 14, 15) in clock ticks; RSS from statm (pages).
    let ticks = 100.0; // sysconf(_SC_CLK_TCK) is 100 on Linux
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / ticks)
        })
        .unwrap_or(0.0);
    let page = 4096;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        * page;
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0)
        * 1024;
    (cpu, rss, hwm)
}

pub async fn metrics(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // With tokens configured, /metrics needs one too, and shows only the token's own tenant
    // among the per-tenant series (tenant names and counts are not public).
    let only_tenant = if st.tenants.tokens_required() {
        match st.tenants.resolve(&headers) {
            Ok(t) => Some(t),
            Err(e) => return error(StatusCode::UNAUTHORIZED, e.0),
        }
    } else {
        None
    };
    let mut out = Exposition::new();
    let m = &st.modules;
    if let Some(ingest) = &m.ingest {
        ingest.metrics.render(&mut out);
        render_wal(&ingest.wal_stats, &mut out);
    }
    if let Some(d) = &m.distributor {
        d.render_metrics(&mut out);
    }
    if let Some(b) = &m.block_builder {
        b.render_metrics(&mut out);
    }
    if let Some(db) = &m.db {
        db.metrics.render(&mut out);
    }
    if let Some(sm) = &m.storage_metrics {
        sm.render(&mut out);
    }
    out.family(
        "weft_udp_datagrams_total",
        Kind::Counter,
        "Datagrams received on the UDP ports (Jaeger agent), accepted or not. UDP carries no acknowledgement.",
    );
    for (port, u) in &st.udp {
        out.sample(
            "weft_udp_datagrams_total",
            &[("port", port)],
            u.received.load(Ordering::Relaxed) as f64,
        );
    }
    out.family(
        "weft_udp_datagrams_refused_total",
        Kind::Counter,
        "Datagrams dropped on the UDP ports, by reason: parse (not a Jaeger agent call), overloaded (too many in flight), refused (the ingester refused the spans).",
    );
    for (port, u) in &st.udp {
        for (reason, c) in [
            ("parse", &u.refused_parse),
            ("overloaded", &u.refused_overloaded),
            ("refused", &u.refused_refused),
        ] {
            out.sample(
                "weft_udp_datagrams_refused_total",
                &[("port", port), ("reason", reason)],
                c.load(Ordering::Relaxed) as f64,
            );
        }
    }
    out.family(
        "weft_udp_spans_accepted_total",
        Kind::Counter,
        "Spans received over the UDP ports and made durable.",
    );
    for (port, u) in &st.udp {
        out.sample(
            "weft_udp_spans_accepted_total",
            &[("port", port)],
            u.spans.load(Ordering::Relaxed) as f64,
        );
    }
    let b = &st.budget;
    out.family(
        "weft_request_budget_bytes",
        Kind::Gauge,
        "Request bytes held by requests being received (budget: --max-inflight-request-bytes).",
    )
    .sample("weft_request_budget_bytes", &[("state", "in_use")], b.in_use() as f64)
    .sample("weft_request_budget_bytes", &[("state", "total")], b.total() as f64);
    out.single(
        "weft_request_budget_refusals_total",
        Kind::Counter,
        "Requests refused (503) because the request budget stayed exhausted.",
        b.refusals.load(Ordering::Relaxed) as f64,
    );
    for (name, help, kind, get) in [
        (
            "weft_connections_open",
            "Open connections, by port.",
            Kind::Gauge,
            (|l| &l.open) as fn(&crate::listen::ListenStats) -> &std::sync::atomic::AtomicU64,
        ),
        (
            "weft_connections_accepted_total",
            "Connections accepted, by port.",
            Kind::Counter,
            |l| &l.accepted,
        ),
        (
            "weft_connections_at_cap_total",
            "Times a port stopped accepting because it held --max-connections connections.",
            Kind::Counter,
            |l| &l.at_cap,
        ),
        (
            "weft_connections_idle_closed_total",
            "Connections closed after --idle-timeout without a request.",
            Kind::Counter,
            |l| &l.idle_closed,
        ),
        (
            "weft_connection_accept_errors_total",
            "Failed accepts (e.g. out of file descriptors), by port.",
            Kind::Counter,
            |l| &l.accept_errors,
        ),
    ] {
        out.family(name, kind, help);
        for (port, l) in &st.listeners {
            out.sample(name, &[("port", port)], get(l).load(Ordering::Relaxed) as f64);
        }
    }
    out.family(
        "weft_query_duration_seconds",
        Kind::Histogram,
        "Query latency by route.",
    );
    st.trace_latency
        .render(&mut out, "weft_query_duration_seconds", "trace_by_id");
    st.search_latency
        .render(&mut out, "weft_query_duration_seconds", "search");
    st.metrics_latency
        .render(&mut out, "weft_query_duration_seconds", "metrics");
    st.graph_latency
        .render(&mut out, "weft_query_duration_seconds", "service_graph");
    let (cpu, rss, hwm) = proc_stats();
    out.single(
        "process_cpu_seconds_total",
        Kind::Counter,
        "User and system CPU time.",
        cpu,
    );
    out.single(
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory.",
        rss as f64,
    );
    out.single(
        "process_resident_memory_peak_bytes",
        Kind::Gauge,
        "Peak resident memory (VmHWM).",
        hwm as f64,
    );
    out.single(
        "weft_uptime_seconds",
        Kind::Gauge,
        "Seconds since start.",
        st.started.elapsed().as_secs_f64(),
    );
    let mut out = out.into_string();
    if let Some(t) = only_tenant {
        let own = format!("tenant=\"{t}\"");
        out = out
            .lines()
            .filter(|l| l.starts_with('#') || !l.contains("tenant=\"") || l.contains(&own))
            .flat_map(|l| [l, "\n"])
            .collect();
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

pub async fn not_found(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no such endpoint: {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_parse_like_tempo() {
        assert_eq!(parse_trace_id("1").unwrap()[15], 1);
        assert_eq!(parse_trace_id("ABCDEF0123456789abcdef0123456789").unwrap()[0], 0xab);
        assert!(parse_trace_id("").is_err());
        assert!(parse_trace_id("xyz").is_err());
        assert!(parse_trace_id(&"a".repeat(33)).is_err());
        assert_eq!(parse_trace_id("0102").unwrap()[14..], [1, 2]);
    }
}
