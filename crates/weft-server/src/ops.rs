//! What every target serves on its HTTP port: `/metrics`, `/ready`, `/api/echo`,
//! `/api/status/buildinfo`, and the plain 404 of every port.

use crate::app::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use weft_core::prom::{Exposition, Kind};

/// The routes every target serves on its HTTP port.
pub fn routes() -> axum::Router<Arc<AppState>> {
    use axum::routing::get;
    axum::Router::new()
        .route("/api/echo", get(echo))
        .route("/ready", get(ready))
        .route("/api/status/buildinfo", get(buildinfo))
        .route("/metrics", get(metrics))
}

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

/// The counters of every port: datagrams of the UDP ports, connections of the TCP ones.
fn render_ports(out: &mut Exposition, ports: &crate::app::PortStats) {
    let (tcp, udp) = (ports.tcp(), ports.udp());
    out.family(
        "weft_udp_datagrams_total",
        Kind::Counter,
        "Datagrams received on the UDP ports (Jaeger agent), accepted or not. UDP carries no acknowledgement.",
    );
    for (port, u) in &udp {
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
    for (port, u) in &udp {
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
    for (port, u) in &udp {
        out.sample(
            "weft_udp_spans_accepted_total",
            &[("port", port)],
            u.spans.load(Ordering::Relaxed) as f64,
        );
    }
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
        for (port, l) in &tcp {
            out.sample(name, &[("port", port)], get(l).load(Ordering::Relaxed) as f64);
        }
    }
}

/// `GET /metrics`: every module's counters, the ports', the process's.
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
    if let Some(l) = &m.live_store {
        l.render_metrics(&mut out);
    }
    if let Some(db) = &m.db {
        db.metrics.render(&mut out);
    }
    if let Some(sm) = &m.storage_metrics {
        sm.render(&mut out);
    }
    render_ports(&mut out, &st.ports);
    if let Some(s) = st.sampling.get() {
        s.render_metrics(&mut out, only_tenant.as_deref());
    }
    if m.querier.is_some() {
        st.jobs.render(&mut out);
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
    let slots = st.queries.by_tenant();
    for (name, help, pick) in [
        (
            "weft_queries_running",
            "Queries holding a query slot (--max-concurrent-queries), by tenant.",
            (|&(_, n, _)| n) as fn(&(Arc<str>, usize, usize)) -> usize,
        ),
        (
            "weft_queries_waiting",
            "Queries waiting for a query slot, by tenant.",
            |&(_, _, n)| n,
        ),
    ] {
        out.family(name, Kind::Gauge, help);
        for t in &slots {
            out.sample(name, &[("tenant", &t.0)], pick(t) as f64);
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
