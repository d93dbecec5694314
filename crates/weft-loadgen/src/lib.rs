//! `weft loadgen`: a load generator cheap enough to saturate weft.
//!
//! It encodes a few realistic OTLP requests once, then replays them with fresh trace and span
//! IDs patched in place at known offsets, so each span costs a few nanoseconds to produce. It
//! can also measure trace-by-ID latency for IDs it wrote (`--query-ids`).
//!
//! `--realistic` instead generates every span afresh with production-like cardinality (many
//! services, hosts and operations, high-cardinality attributes, real trace trees, log-normal
//! durations, start times spread over a time range) and encodes it straight to protobuf, for
//! search benchmarks where replayed templates would be unrealistically easy to index.

use bytes::Bytes;
use clap::Args;
use prost::Message;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_otlp::grpc::RawCodec;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, InstrumentationScope, KeyValue, any_value::Value as V};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, Status};
use weft_otlp::wire::Reader;

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// OTLP/gRPC endpoint (host:port) to send to.
    #[arg(long, default_value = "127.0.0.1:4317")]
    pub endpoint: String,
    /// How long to send, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Stop after this many spans (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_spans: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// HTTP/2 connections the requests are spread over.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Requests per second over all workers (0: as fast as the server answers). Request n is
    /// sent no earlier than n / rate seconds after the start, as clients that export on a
    /// timer do; a slow answer holds up only the worker waiting for it.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 512)]
    pub spans_per_request: usize,
    /// Spans per trace of the replayed templates (ignored with --realistic).
    #[arg(long, default_value_t = 10)]
    pub spans_per_trace: usize,
    /// Tenant to send as X-Scope-OrgID.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Write one trace ID (hex) of every N-th acknowledged request to this file.
    #[arg(long)]
    pub ids_out: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 16)]
    pub ids_every: u64,
    /// Instead of sending, fetch the trace IDs in this file from `--query-http` and report
    /// latency percentiles.
    #[arg(long)]
    pub query_ids: Option<std::path::PathBuf>,
    #[arg(long, default_value = "127.0.0.1:3200")]
    pub query_http: String,
    #[arg(long, default_value_t = 2000)]
    pub queries: usize,
    /// Instead of sending, run the server's CPU stages in this process on `--max-spans` spans
    /// (default 200,000) of the same requests, single-threaded, best of 5 rounds, and report
    /// nanoseconds per span for each: validation scan, head build, block encode. No network,
    /// no fsync: a low-noise measure of the per-span work the server does.
    #[arg(long)]
    pub stages: bool,
    /// Generate every span afresh with realistic cardinality instead of replaying templates:
    /// 20 services (resource service.name, service.version, host.name from 50 hosts, and two
    /// more), 200 span names (10 per service), 15 attributes per span (http.method, http.route,
    /// http.status_code, high-cardinality http.url with an ID, user.id over 1,000,000 users,
    /// db.system, net.peer.name, rpc.service, region, tenant.tier, feature.flag, retry.count,
    /// payload.size, cache.hit, queue.wait_ms), traces of 1 to 30 spans (about 10) forming a
    /// parent/child tree under a server root, log-normal durations (median 20 ms, ~0.7% over
    /// 1 s) cut short so that a child ends by its parent's end (~0.1% of spans over 1 s), 2%
    /// error spans, random IDs, and start times spread over --time-range-secs. Every
    /// request holds exactly --spans-per-request spans. Also works with --stages.
    #[arg(long)]
    pub realistic: bool,
    /// With --realistic: span start times cover this many seconds ending when loadgen starts,
    /// advancing with progress through --max-spans (or --duration without it), so blocks cut one
    /// after another hold consecutive slices of time, as when spans arrive in real time.
    #[arg(long, default_value_t = 3600)]
    pub time_range_secs: u64,
    /// With --realistic: plant needles, rare values of a non-dedicated attribute: span number
    /// k*N (k = 1, 2, ...; counted from 1 over the whole run) gets user.id = "needle-<k>"
    /// instead of "user-<n>". 0: no needles.
    #[arg(long, default_value_t = 1_000_000)]
    pub needle_every: u64,
    /// With --realistic: write every acknowledged needle to this file, one JSON object a line:
    /// {"value": "needle-<k>", "trace_id": hex, "span_id": hex, "start_unix_nano": n}.
    #[arg(long)]
    pub needles_out: Option<std::path::PathBuf>,
    /// With --realistic: seed of the generated content, IDs included (default: from the clock).
    /// The same seed and --spans-per-request give the same requests.
    #[arg(long)]
    pub seed: Option<u64>,
}

pub fn main(args: LoadgenArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.query_ids {
        return query(&args, path);
    }
    if args.stages {
        return stages(&args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(send(args))
}

mod realistic;
mod template;

use realistic::*;
use template::*;

async fn send(args: LoadgenArgs) -> anyhow::Result<()> {
    let salt = mix(weft_core::now_ns());
    let source = Arc::new(Source::new(&args, salt)?);
    let spans_per_req = source.spans_per_request();
    let mut channels = Vec::new();
    for _ in 0..args.connections.max(1) {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", args.endpoint))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", args.endpoint))?;
        channels.push(ch);
    }
    let sent = Arc::new(AtomicU64::new(0));
    let spans = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let seq = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let ids = Arc::new(parking_lot::Mutex::new(Vec::<[u8; 16]>::new()));
    let needles = Arc::new(parking_lot::Mutex::new(Vec::<Needle>::new()));
    let last_error = Arc::new(parking_lot::Mutex::new(String::new()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.duration);
    let max_spans = if args.max_spans == 0 { u64::MAX } else { args.max_spans };
    let mut tasks = Vec::new();
    for w in 0..args.concurrency.max(1) {
        let mut grpc = tonic::client::Grpc::new(channels[w % channels.len()].clone());
        let (source, sent, spans, bytes, errors, seq, ids, needles, last_error) = (
            source.clone(),
            sent.clone(),
            spans.clone(),
            bytes.clone(),
            errors.clone(),
            seq.clone(),
            ids.clone(),
            needles.clone(),
            last_error.clone(),
        );
        let duration = args.duration;
        let rate = args.rate;
        let tenant = args.tenant.clone();
        let every = args.ids_every.max(1);
        let want_ids = args.ids_out.is_some();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                if n.saturating_mul(spans_per_req) >= max_spans {
                    break;
                }
                if rate > 0.0 {
                    let due = started + Duration::from_secs_f64(n as f64 / rate);
                    if due >= deadline {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                }
                let progress = if max_spans == u64::MAX {
                    started.elapsed().as_secs_f64() / duration
                } else {
                    (n * spans_per_req) as f64 / max_spans as f64
                };
                let built = source.build(n, progress);
                let len = built.body.len() as u64;
                let mut req = tonic::Request::new(built.body);
                if let Some(t) = &tenant {
                    req.metadata_mut()
                        .insert("x-scope-orgid", t.parse().expect("tenant is ascii"));
                }
                if grpc.ready().await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let path = http::uri::PathAndQuery::from_static(weft_otlp::EXPORT_PATH);
                match grpc.unary::<Bytes, Bytes, _>(req, path, RawCodec).await {
                    Ok(_) => {
                        sent.fetch_add(1, Ordering::Relaxed);
                        spans.fetch_add(built.spans, Ordering::Relaxed);
                        bytes.fetch_add(len, Ordering::Relaxed);
                        if want_ids && n % every == 0 {
                            ids.lock().push(built.first_trace);
                        }
                        if !built.needles.is_empty() {
                            needles.lock().extend(built.needles);
                        }
                    }
                    Err(s) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        *last_error.lock() = format!("{:?}: {}", s.code(), s.message());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(p) = &args.ids_out {
        let mut f = std::fs::File::create(p)?;
        for id in ids.lock().iter() {
            writeln!(f, "{}", weft_core::hex(id.as_slice()))?;
        }
    }
    let mut needles = std::mem::take(&mut *needles.lock());
    needles.sort_by_key(|n| n.k);
    if let Some(p) = &args.needles_out {
        let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
        for n in &needles {
            let line = serde_json::json!({
                "value": format!("needle-{}", n.k),
                "trace_id": weft_core::hex(&n.trace_id),
                "span_id": weft_core::hex(&n.span_id),
                "start_unix_nano": n.start_unix_nano,
            });
            writeln!(f, "{line}")?;
        }
        f.flush()?;
    }
    let s = spans.load(Ordering::Relaxed);
    let requests = sent.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "requests": requests,
            "spans": s,
            "mode": if args.realistic { "realistic" } else { "templates" },
            "needles": needles.len(),
            "errors": errors.load(Ordering::Relaxed),
            "last_error": *last_error.lock(),
            "elapsed_s": elapsed,
            "spans_per_s": s as f64 / elapsed,
            "request_bytes": bytes.load(Ordering::Relaxed) / requests.max(1),
            "bytes_per_span": (bytes.load(Ordering::Relaxed) as f64 / s.max(1) as f64 * 10.0).round() / 10.0,
        })
    );
    Ok(())
}

/// Fetches each ID over one keep-alive HTTP/1.1 connection and reports latency percentiles.
fn query(args: &LoadgenArgs, path: &std::path::Path) -> anyhow::Result<()> {
    let ids: Vec<String> = std::fs::read_to_string(path)?
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect();
    anyhow::ensure!(!ids.is_empty(), "no trace ids in {}", path.display());
    let mut conn = std::net::TcpStream::connect(&args.query_http)?;
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut lat = Vec::with_capacity(args.queries);
    let mut not_found = 0;
    let mut spans_seen = 0u64;
    for i in 0..args.queries {
        let id = &ids[(mix(i as u64) % ids.len() as u64) as usize];
        let t = Instant::now();
        let tenant = args
            .tenant
            .as_ref()
            .map(|t| format!("X-Scope-OrgID: {t}\r\n"))
            .unwrap_or_default();
        write!(
            conn,
            "GET /api/traces/{id} HTTP/1.1\r\nHost: weft\r\nAccept: application/protobuf\r\n{tenant}\r\n"
        )?;
        let mut status = String::new();
        reader.read_line(&mut status)?;
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            if h == "\r\n" || h.is_empty() {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse()?;
            }
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        if status.contains(" 200 ") {
            // The body is a `TracesData`, which has the wire shape of an export request.
            let mut summary = weft_otlp::request::RequestSummary::default();
            weft_otlp::request::validate_request(&body, &mut summary)
                .map_err(|e| anyhow::anyhow!("trace {id}: undecodable response: {e}"))?;
            spans_seen += u64::from(summary.spans);
        } else {
            not_found += 1;
        }
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{}",
        serde_json::json!({ "queries": lat.len(), "not_found": not_found, "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": pct(1.0), "spans_returned": spans_seen })
    );
    Ok(())
}

/// Times the server's per-span CPU stages on prepared requests (see `--stages`).
fn stages(args: &LoadgenArgs) -> anyhow::Result<()> {
    let spans = if args.max_spans == 0 {
        200_000
    } else {
        args.max_spans as usize
    };
    let source = Source::new(args, 0x5eed)?;
    let per_request = source.spans_per_request() as usize;
    let count = spans.div_ceil(per_request) as u64;
    let requests: Vec<Bytes> = (0..count)
        .map(|n| source.build(n, n as f64 / count as f64).body)
        .collect();
    let n = (requests.len() * per_request) as f64;
    let (mut scan, mut build, mut encode, mut walk) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    let mut encoded_bytes = 0;
    for _ in 0..5 {
        let mut summary = weft_otlp::request::RequestSummary::default();
        let t = Instant::now();
        for r in &requests {
            weft_otlp::request::validate_request(r, &mut summary)?;
        }
        scan = scan.min(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let mut k = 0u64;
        for r in &requests {
            weft_otlp::request::for_each_span(r, |_, _, _, v| k += v.kind as u64)?;
        }
        walk = walk.min(t.elapsed().as_secs_f64());
        std::hint::black_box(k);

        let t = Instant::now();
        let mut cols = weft_block::columns::SpanColumns::default();
        for r in &requests {
            cols.push_request(r)?;
        }
        cols.freeze();
        build = build.min(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let enc = weft_block::encode(
            &cols,
            &weft_block::WriteOptions::head_cut(weft_block::WriteOptions::default().row_group_rows),
        )?;
        encode = encode.min(t.elapsed().as_secs_f64());
        encoded_bytes = enc.data.len();
    }
    let ns = |s: f64| (s * 1e9 / n * 10.0).round() / 10.0;
    println!(
        "{}",
        serde_json::json!({
            "spans": n as u64,
            "scan_ns_per_span": ns(scan),
            "build_ns_per_span": ns(build),
            "walk_ns_per_span": ns(walk),
            "encode_ns_per_span": ns(encode),
            "total_ns_per_span": ns(scan + build + encode),
            "parquet_bytes_per_span": (encoded_bytes as f64 / n * 100.0).round() / 100.0,
        })
    );
    Ok(())
}
