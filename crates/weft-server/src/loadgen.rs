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

use crate::grpc::RawCodec;
use bytes::Bytes;
use clap::Args;
use prost::Message;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
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

/// Byte offsets of one span's IDs in an encoded template.
#[derive(Debug, Clone, Copy)]
struct IdSlots {
    trace: usize,
    span: usize,
    parent: Option<usize>,
    trace_index: u32,
    span_index: u32,
    parent_index: u32,
}

struct Template {
    bytes: Vec<u8>,
    slots: Vec<IdSlots>,
    traces: u32,
}

fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

const SERVICES: &[&str] = &[
    "frontend",
    "checkout",
    "cart",
    "payment",
    "shipping",
    "currency",
    "email",
    "recommendation",
    "ad",
    "catalog",
];
const ROUTES: &[&str] = &[
    "/api/cart",
    "/api/checkout",
    "/api/products/{id}",
    "/api/recommendations",
    "/api/currency/convert",
    "/api/shipping/quote",
];

/// Builds one request of `spans` spans in traces of `per_trace`, one resource per service.
fn build_template(seed: usize, spans: usize, per_trace: usize) -> Template {
    let traces = spans.div_ceil(per_trace);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let svc = SERVICES[seed % SERVICES.len()];
    let mut out = Vec::with_capacity(spans);
    let mut n = 0;
    for t in 0..traces {
        let base = now + (t as u64) * 1_000_000;
        for i in 0..per_trace.min(spans - n) {
            let route = ROUTES[(seed + t + i) % ROUTES.len()];
            let mut tid = vec![0u8; 16];
            tid[0..4].copy_from_slice(&(t as u32 + 1).to_be_bytes());
            let mut sid = vec![0u8; 8];
            sid[0..4].copy_from_slice(&(i as u32 + 1).to_be_bytes());
            let parent = if i == 0 {
                vec![]
            } else {
                ((if i <= 3 { 0 } else { 1 + (i % 3) }) as u32 + 1)
                    .to_be_bytes()
                    .iter()
                    .copied()
                    .chain([0u8; 4])
                    .collect()
            };
            let dur = 200_000 + ((t * 7919 + i * 104729) % 5_000_000) as u64;
            out.push(Span {
                trace_id: tid.into(),
                span_id: sid.into(),
                parent_span_id: parent.into(),
                flags: 0x101,
                name: if i == 0 {
                    format!("GET {route}")
                } else {
                    format!("{} {}", ["SELECT", "grpc.Call", "cache.get", "HTTP POST"][i % 4], route)
                },
                kind: if i == 0 { 2 } else { [3, 1, 3, 1][i % 4] },
                start_time_unix_nano: base + (i as u64) * 10_000,
                end_time_unix_nano: base + (i as u64) * 10_000 + dur,
                attributes: vec![
                    kv("http.request.method", V::StringValue("GET".into())),
                    kv("url.path", V::StringValue(route.into())),
                    kv(
                        "http.response.status_code",
                        V::IntValue(if (t + i) % 50 == 0 { 500 } else { 200 }),
                    ),
                    kv("server.address", V::StringValue(format!("{svc}.svc.cluster.local"))),
                    kv("network.peer.port", V::IntValue(8080)),
                ],
                status: ((t + i) % 50 == 0).then(|| Status {
                    message: "internal error".into(),
                    code: 2,
                }),
                ..Default::default()
            });
            n += 1;
        }
    }
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", V::StringValue(svc.into())),
                    kv("service.version", V::StringValue("1.4.2".into())),
                    kv("host.name", V::StringValue(format!("node-{}", seed % 4))),
                    kv("telemetry.sdk.language", V::StringValue("go".into())),
                ],
                dropped_attributes_count: 0,
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "weft-loadgen".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans: out,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    let bytes = req.encode_to_vec();
    let slots = find_slots(&bytes);
    Template {
        bytes,
        slots,
        traces: traces as u32,
    }
}

/// Finds every span's ID fields in an encoded request.
fn find_slots(buf: &[u8]) -> Vec<IdSlots> {
    let off = |s: &[u8]| s.as_ptr() as usize - buf.as_ptr() as usize;
    let mut slots = Vec::new();
    let mut r = Reader::new(buf);
    while let Ok(Some(rs)) = r.next() {
        let Ok(rs) = rs.value.bytes(1) else { continue };
        let mut rr = Reader::new(rs);
        while let Ok(Some(ss)) = rr.next() {
            if ss.number != 2 {
                continue;
            }
            let Ok(ss) = ss.value.bytes(2) else { continue };
            let mut sr = Reader::new(ss);
            while let Ok(Some(sp)) = sr.next() {
                if sp.number != 2 {
                    continue;
                }
                let Ok(sp) = sp.value.bytes(2) else { continue };
                let mut s = IdSlots {
                    trace: 0,
                    span: 0,
                    parent: None,
                    trace_index: 0,
                    span_index: 0,
                    parent_index: 0,
                };
                let mut f = Reader::new(sp);
                while let Ok(Some(x)) = f.next() {
                    let Ok(b) = x.value.bytes(x.number) else {
                        continue;
                    };
                    match x.number {
                        1 => {
                            s.trace = off(b);
                            s.trace_index = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
                        }
                        2 => {
                            s.span = off(b);
                            s.span_index = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
                        }
                        4 if b.len() == 8 => {
                            s.parent = Some(off(b));
                            s.parent_index = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
                        }
                        _ => {}
                    }
                }
                slots.push(s);
            }
        }
    }
    slots
}

/// SplitMix64: a fast, well-mixed sequence for IDs.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Copies a template and writes fresh IDs for request number `seq`. Returns the request and
/// its first trace ID.
fn instantiate(t: &Template, seq: u64, salt: u64) -> (Bytes, [u8; 16]) {
    let mut b = t.bytes.clone();
    let base = salt ^ seq.wrapping_mul(u64::from(t.traces) + 1);
    let trace_id = |ti: u32| -> [u8; 16] {
        let a = mix(base.wrapping_add(u64::from(ti)));
        let c = mix(a ^ 0x5151);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&a.to_be_bytes());
        id[8..].copy_from_slice(&c.to_be_bytes());
        id
    };
    let span_id = |tid: &[u8; 16], si: u32| -> [u8; 8] {
        let h = mix(u64::from_le_bytes(tid[8..].try_into().expect("8 bytes")) ^ u64::from(si));
        (h | 1).to_be_bytes()
    };
    let mut first = [0u8; 16];
    for (k, s) in t.slots.iter().enumerate() {
        let tid = trace_id(s.trace_index);
        if k == 0 {
            first = tid;
        }
        b[s.trace..s.trace + 16].copy_from_slice(&tid);
        b[s.span..s.span + 8].copy_from_slice(&span_id(&tid, s.span_index));
        if let Some(p) = s.parent {
            b[p..p + 8].copy_from_slice(&span_id(&tid, s.parent_index));
        }
    }
    (Bytes::from(b), first)
}

/// Where request bodies come from: replayed templates or the realistic generator.
enum Source {
    Templates(Vec<Template>, u64),
    Realistic(Box<Realistic>),
}

impl Source {
    fn new(args: &LoadgenArgs, salt: u64) -> anyhow::Result<Source> {
        Ok(if args.realistic {
            let r = Realistic::new(args, salt);
            let first = r.build(0, 0.0);
            check_realistic(&first.body, first.spans)
                .map_err(|e| anyhow::anyhow!("the realistic generator built a bad request: {e}"))?;
            Source::Realistic(Box::new(r))
        } else {
            Source::Templates(
                (0..8)
                    .map(|i| build_template(i, args.spans_per_request, args.spans_per_trace.max(1)))
                    .collect(),
                salt,
            )
        })
    }

    fn spans_per_request(&self) -> u64 {
        match self {
            Source::Templates(t, _) => t[0].slots.len() as u64,
            Source::Realistic(r) => r.spans_per_request as u64,
        }
    }

    /// Request number `n`; `progress` (0 to 1) is how far through the run it is.
    fn build(&self, n: u64, progress: f64) -> Built {
        match self {
            Source::Templates(t, salt) => {
                let t = &t[(n % t.len() as u64) as usize];
                let (body, first_trace) = instantiate(t, n, *salt);
                Built {
                    body,
                    first_trace,
                    needles: Vec::new(),
                    spans: t.slots.len() as u64,
                }
            }
            Source::Realistic(r) => r.build(n, progress),
        }
    }
}

async fn send(args: LoadgenArgs) -> anyhow::Result<()> {
    let salt = mix(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7));
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
        let tenant = args.tenant.clone();
        let every = args.ids_every.max(1);
        let want_ids = args.ids_out.is_some();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                if n.saturating_mul(spans_per_req) >= max_spans {
                    break;
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
            writeln!(f, "{}", hex::encode(id))?;
        }
    }
    let mut needles = std::mem::take(&mut *needles.lock());
    needles.sort_by_key(|n| n.k);
    if let Some(p) = &args.needles_out {
        let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
        for n in &needles {
            let line = serde_json::json!({
                "value": format!("needle-{}", n.k),
                "trace_id": hex::encode(n.trace_id),
                "span_id": hex::encode(n.span_id),
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
            let mut summary = weft_otlp::scan::RequestSummary::default();
            weft_otlp::scan::scan_request(&body, &mut summary)
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
        let mut summary = weft_otlp::scan::RequestSummary::default();
        let t = Instant::now();
        for r in &requests {
            weft_otlp::scan::scan_request(r, &mut summary)?;
        }
        scan = scan.min(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let mut k = 0u64;
        for r in &requests {
            weft_otlp::scan::for_each_span(r, |_, _, _, v| k += v.kind as u64)?;
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
        let enc = weft_block::v1::writer::encode(&cols, &weft_block::v1::writer::WriteOptions::default())?;
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

// ---------------------------------------------------------------------------------------------
// `--realistic`: spans with production-like cardinality, encoded directly as protobuf.
// ---------------------------------------------------------------------------------------------

/// A fast, seedable random sequence (SplitMix64).
struct Rng(u64);

impl Rng {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    /// Uniform in `0..n` (`n > 0`).
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
    /// Uniform in `[0, 1)`.
    #[inline]
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    #[inline]
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

const R_SERVICES: &[&str] = &[
    "frontend",
    "api-gateway",
    "auth",
    "users",
    "checkout",
    "cart",
    "payment",
    "shipping",
    "currency",
    "email",
    "recommendation",
    "ads",
    "catalog",
    "inventory",
    "search",
    "reviews",
    "notifications",
    "orders",
    "pricing",
    "fraud-detection",
];
const R_LANGUAGES: &[&str] = &["go", "java", "python", "nodejs", "rust", "dotnet"];
const R_DB: &[&str] = &["postgresql", "mysql", "mongodb", "cassandra"];
const R_REGIONS: &[&str] = &[
    "us-east-1",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-northeast-1",
];
const R_HOSTS: u64 = 50;
const R_HOSTS_PER_SERVICE: usize = 5;
const R_USERS: u64 = 1_000_000;
/// Attributes on every span.
const R_SPAN_ATTRS: usize = 15;
/// Log-normal span durations: median 20 ms and sigma 1.6 put ~90% of spans in 1–200 ms and
/// ~0.7% over 1 s.
const R_DUR_MEDIAN_NS: f64 = 20e6;
const R_DUR_SIGMA: f64 = 1.6;
const R_ERROR_RATE: f64 = 0.02;

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Http,
    Rpc,
    Db,
    Cache,
}

struct Op {
    name: String,
    route: String,
    method: &'static str,
    kind: OpKind,
}

struct Service {
    name: &'static str,
    version: String,
    language: &'static str,
    hosts: [String; R_HOSTS_PER_SERVICE],
    ops: Vec<Op>,
    downstream: [u8; 3],
    rpc_service: String,
    db: &'static str,
    peer: String,
}

/// The fixed shape of the simulated system: 20 services on 50 hosts, 10 operations each.
struct World {
    services: Vec<Service>,
}

impl World {
    fn new() -> World {
        let n = R_SERVICES.len();
        let services = R_SERVICES
            .iter()
            .enumerate()
            .map(|(s, &name)| {
                let camel: String = name
                    .split('-')
                    .map(|w| {
                        let mut c = w.chars();
                        c.next()
                            .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                            .unwrap_or_default()
                    })
                    .collect();
                let rpc = format!("shop.{}.v1.{camel}Service", name.replace('-', "_"));
                let table = ["items", "records", "events", "accounts", "entries"][s % 5];
                let db = R_DB[s % R_DB.len()];
                let api = format!("/api/v1/{name}");
                let op = |name: String, route: String, method: &'static str, kind: OpKind| Op {
                    name,
                    route,
                    method,
                    kind,
                };
                let ops = vec![
                    op(format!("GET {api}"), api.clone(), "GET", OpKind::Http),
                    op(format!("POST {api}"), api.clone(), "POST", OpKind::Http),
                    op(
                        format!("GET {api}/{{id}}"),
                        format!("{api}/{{id}}"),
                        "GET",
                        OpKind::Http,
                    ),
                    op(
                        format!("PUT {api}/{{id}}"),
                        format!("{api}/{{id}}"),
                        "PUT",
                        OpKind::Http,
                    ),
                    op(
                        format!("DELETE {api}/{{id}}"),
                        format!("{api}/{{id}}"),
                        "DELETE",
                        OpKind::Http,
                    ),
                    op(
                        format!("{rpc}/Get{camel}"),
                        format!("/{rpc}/Get{camel}"),
                        "POST",
                        OpKind::Rpc,
                    ),
                    op(
                        format!("{rpc}/List{camel}"),
                        format!("/{rpc}/List{camel}"),
                        "POST",
                        OpKind::Rpc,
                    ),
                    op(
                        format!("SELECT {}.{table}", name.replace('-', "_")),
                        api.clone(),
                        "GET",
                        OpKind::Db,
                    ),
                    op(
                        format!("INSERT {}.{table}", name.replace('-', "_")),
                        api.clone(),
                        "POST",
                        OpKind::Db,
                    ),
                    op(format!("cache.get {name}"), api.clone(), "GET", OpKind::Cache),
                ];
                Service {
                    name,
                    version: format!("1.{}.{}", s % 7, (s * 13) % 10),
                    language: R_LANGUAGES[s % R_LANGUAGES.len()],
                    hosts: std::array::from_fn(|j| {
                        let h = (s as u64 * 5 + j as u64 * 11) % R_HOSTS;
                        format!("ip-10-0-{}-{}.ec2.internal", h / 10, 10 + h)
                    }),
                    ops,
                    downstream: [
                        ((s + 1 + s % 3) % n) as u8,
                        ((s + 5 + s % 4) % n) as u8,
                        ((s * 7 + 3) % n) as u8,
                    ],
                    rpc_service: rpc,
                    db,
                    peer: format!("{name}.prod.svc.cluster.local"),
                }
            })
            .collect();
        World { services }
    }
}

/// One generated span, before encoding.
struct SpanRec {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    service: u8,
    op: u8,
    kind: u8,
    start: u64,
    end: u64,
    error: bool,
    user: u32,
    region: u8,
    tier: u8,
    /// `k` of `user.id = "needle-<k>"`, or 0.
    needle: u64,
}

/// A planted rare value: `user.id = "needle-<k>"` on one span.
#[derive(Debug, Clone)]
struct Needle {
    k: u64,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    start_unix_nano: u64,
}

/// Settings of the realistic generator.
struct Realistic {
    world: World,
    spans_per_request: usize,
    /// Start times run from `end_ns - range_ns` (progress 0) to `end_ns` (progress 1).
    end_ns: u64,
    range_ns: u64,
    needle_every: u64,
    seed: u64,
}

/// One request ready to send.
struct Built {
    body: Bytes,
    first_trace: [u8; 16],
    needles: Vec<Needle>,
    spans: u64,
}

#[inline]
fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

#[inline]
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn tag(b: &mut Vec<u8>, field: u32, wire: u32) {
    varint(b, u64::from(field << 3 | wire));
}

#[inline]
fn put_bytes(b: &mut Vec<u8>, field: u32, v: &[u8]) {
    tag(b, field, 2);
    varint(b, v.len() as u64);
    b.extend_from_slice(v);
}

/// Writes a length-delimited field whose body `f` writes, then inserts its length.
fn nested(b: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    tag(b, field, 2);
    let at = b.len();
    f(b);
    let len = (b.len() - at) as u64;
    let mut l = Vec::with_capacity(10);
    varint(&mut l, len);
    b.splice(at..at, l);
}

/// Writes a `KeyValue` (as field `field`) up to its `AnyValue` body, which is `any` bytes.
#[inline]
fn kv_head(b: &mut Vec<u8>, field: u32, key: &str, any: usize) {
    let len = 1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any as u64) + any;
    tag(b, field, 2);
    varint(b, len as u64);
    put_bytes(b, 1, key.as_bytes());
    tag(b, 2, 2);
    varint(b, any as u64);
}

#[inline]
fn kv_str(b: &mut Vec<u8>, field: u32, key: &str, v: &str) {
    kv_head(b, field, key, 1 + varint_len(v.len() as u64) + v.len());
    put_bytes(b, 1, v.as_bytes());
}

#[inline]
fn kv_int(b: &mut Vec<u8>, field: u32, key: &str, v: u64) {
    kv_head(b, field, key, 1 + varint_len(v));
    tag(b, 3, 0);
    varint(b, v);
}

#[inline]
fn kv_bool(b: &mut Vec<u8>, field: u32, key: &str, v: bool) {
    kv_head(b, field, key, 2);
    tag(b, 2, 0);
    b.push(u8::from(v));
}

#[inline]
fn kv_f64(b: &mut Vec<u8>, field: u32, key: &str, v: f64) {
    kv_head(b, field, key, 9);
    tag(b, 4, 1);
    b.extend_from_slice(&v.to_le_bytes());
}

/// Spans in a trace: log-normal around 8, 1 to 30 (mean about 10).
fn trace_len(rng: &mut Rng) -> usize {
    (8.0 * (0.6 * rng.normal()).exp()).round().clamp(1.0, 30.0) as usize
}

fn duration_ns(rng: &mut Rng) -> u64 {
    (R_DUR_MEDIAN_NS * (R_DUR_SIGMA * rng.normal()).exp()).clamp(1_000.0, 600e9) as u64
}

impl Realistic {
    fn new(args: &LoadgenArgs, salt: u64) -> Realistic {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let range_ns = args.time_range_secs.saturating_mul(1_000_000_000).min(now / 2);
        Realistic {
            world: World::new(),
            spans_per_request: args.spans_per_request.max(1),
            end_ns: now,
            range_ns,
            needle_every: args.needle_every,
            seed: args.seed.unwrap_or(salt),
        }
    }

    /// Builds request number `n`; `progress` (0 to 1) places its start times in the range.
    fn build(&self, n: u64, progress: f64) -> Built {
        let mut rng = Rng(mix(self.seed ^ n.wrapping_mul(0xa076_1d64_78bd_642f)));
        let spr = self.spans_per_request;
        let at = self.end_ns - self.range_ns + (progress.clamp(0.0, 1.0) * self.range_ns as f64) as u64;
        let mut spans: Vec<SpanRec> = Vec::with_capacity(spr);
        while spans.len() < spr {
            let len = trace_len(&mut rng).min(spr - spans.len());
            self.trace(&mut rng, len, at, &mut spans);
        }
        let mut needles = Vec::new();
        if self.needle_every > 0 {
            // Needle k is span number k * every - 1 of the run.
            let (lo, hi) = (n * spr as u64, (n + 1) * spr as u64);
            let mut k = (lo + 1).div_ceil(self.needle_every);
            while k * self.needle_every - 1 < hi {
                let s = &mut spans[(k * self.needle_every - 1 - lo) as usize];
                s.needle = k;
                needles.push(Needle {
                    k,
                    trace_id: s.trace_id,
                    span_id: s.span_id,
                    start_unix_nano: s.start,
                });
                k += 1;
            }
        }
        Built {
            first_trace: spans[0].trace_id,
            body: Bytes::from(self.encode(&mut rng, &spans)),
            needles,
            spans: spans.len() as u64,
        }
    }

    /// Appends one trace of `len` spans that starts up to 10 s before `at`.
    fn trace(&self, rng: &mut Rng, len: usize, at: u64, out: &mut Vec<SpanRec>) {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&rng.next().to_be_bytes());
        trace_id[8..].copy_from_slice(&(rng.next() | 1).to_be_bytes());
        let start = at.saturating_sub(rng.below(10_000_000_000));
        let user = rng.below(R_USERS) as u32;
        let region = rng.below(R_REGIONS.len() as u64) as u8;
        let tier = match rng.below(10) {
            0..=5 => 0,
            6..=8 => 1,
            _ => 2,
        };
        let base = out.len();
        let services = self.world.services.len() as u64;
        for i in 0..len {
            let span_id = (rng.next() | 1).to_be_bytes();
            let dur = duration_ns(rng);
            // `by`: a child ends by the time its parent does, as a caller waits for its callee.
            let (service, op, kind, start, parent, by) = if i == 0 {
                // Most traces enter through the frontend or the gateway.
                let service = if rng.chance(0.8) {
                    rng.below(2)
                } else {
                    rng.below(services)
                } as u8;
                (service, rng.below(5) as u8, 2u8, start, None, u64::MAX)
            } else {
                let p = &out[base + rng.below(i as u64) as usize];
                let offset = (rng.unit() * 0.5 * (p.end - p.start) as f64) as u64;
                if rng.chance(0.4) {
                    // Work inside the parent's service: RPC handlers internal, DB and cache calls client.
                    let op = 5 + rng.below(5) as u8;
                    (
                        p.service,
                        op,
                        if op >= 7 { 3 } else { 1 },
                        p.start + offset,
                        Some(p.span_id),
                        p.end,
                    )
                } else {
                    let callee = *rng.pick(&self.world.services[p.service as usize].downstream);
                    let kind = if rng.chance(0.5) { 2 } else { 3 };
                    let start = p.start + offset;
                    (callee, rng.below(7) as u8, kind, start, Some(p.span_id), p.end)
                }
            };
            out.push(SpanRec {
                trace_id,
                span_id,
                parent,
                service,
                op,
                kind,
                start,
                end: (start + dur).min(by),
                error: rng.chance(R_ERROR_RATE),
                user,
                region,
                tier,
                needle: 0,
            });
        }
    }

    /// Encodes the spans as an `ExportTraceServiceRequest`, one resource per service (on one
    /// of its hosts, chosen per request).
    fn encode(&self, rng: &mut Rng, spans: &[SpanRec]) -> Vec<u8> {
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_by_key(|&i| spans[i].service);
        let mut b = Vec::with_capacity(spans.len() * 720 + 4096);
        let mut scratch = String::with_capacity(128);
        let mut i = 0;
        while i < order.len() {
            let svc = spans[order[i]].service;
            let j = i + order[i..].iter().take_while(|&&k| spans[k].service == svc).count();
            let service = &self.world.services[svc as usize];
            let host = &service.hosts[rng.below(R_HOSTS_PER_SERVICE as u64) as usize];
            nested(&mut b, 1, |b| {
                nested(b, 1, |b| {
                    kv_str(b, 1, "service.name", service.name);
                    kv_str(b, 1, "service.version", &service.version);
                    kv_str(b, 1, "host.name", host);
                    kv_str(b, 1, "deployment.environment", "production");
                    kv_str(b, 1, "telemetry.sdk.language", service.language);
                });
                nested(b, 2, |b| {
                    nested(b, 1, |b| {
                        put_bytes(b, 1, b"weft-loadgen");
                        put_bytes(b, 2, env!("CARGO_PKG_VERSION").as_bytes());
                    });
                    for &k in &order[i..j] {
                        nested(b, 2, |b| self.encode_span(b, &spans[k], rng, &mut scratch));
                    }
                });
            });
            i = j;
        }
        b
    }

    fn encode_span(&self, b: &mut Vec<u8>, s: &SpanRec, rng: &mut Rng, scratch: &mut String) {
        use std::fmt::Write as _;
        let svc = &self.world.services[s.service as usize];
        let op = &svc.ops[s.op as usize];
        put_bytes(b, 1, &s.trace_id);
        put_bytes(b, 2, &s.span_id);
        if let Some(p) = &s.parent {
            put_bytes(b, 4, p);
        }
        put_bytes(b, 5, op.name.as_bytes());
        tag(b, 6, 0);
        varint(b, u64::from(s.kind));
        tag(b, 7, 1);
        b.extend_from_slice(&s.start.to_le_bytes());
        tag(b, 8, 1);
        b.extend_from_slice(&s.end.to_le_bytes());

        // The R_SPAN_ATTRS attributes.
        kv_str(b, 9, "http.method", op.method);
        kv_str(b, 9, "http.route", &op.route);
        let status = if s.error {
            if rng.chance(0.7) { 500 } else { 503 }
        } else {
            match rng.below(100) {
                0..=84 => 200,
                85..=89 => 201,
                90..=93 => 204,
                94..=95 => 301,
                96..=97 => 404,
                _ => 400,
            }
        };
        kv_int(b, 9, "http.status_code", status);
        scratch.clear();
        let _ = write!(
            scratch,
            "https://{}.shop.example.com{}/{:016x}?session={:08x}",
            svc.name,
            op.route.trim_end_matches("/{id}"),
            rng.next(),
            rng.next() as u32
        );
        kv_str(b, 9, "http.url", scratch);
        scratch.clear();
        let _ = if s.needle > 0 {
            write!(scratch, "needle-{}", s.needle)
        } else {
            write!(scratch, "user-{}", s.user)
        };
        kv_str(b, 9, "user.id", scratch);
        kv_str(
            b,
            9,
            "db.system",
            if op.kind == OpKind::Cache { "redis" } else { svc.db },
        );
        let peer = if s.kind == 3 {
            &self.world.services[*rng.pick(&svc.downstream) as usize].peer
        } else {
            &svc.peer
        };
        kv_str(b, 9, "net.peer.name", peer);
        kv_str(b, 9, "rpc.service", &svc.rpc_service);
        kv_str(b, 9, "region", R_REGIONS[s.region as usize]);
        kv_str(b, 9, "tenant.tier", ["free", "pro", "enterprise"][s.tier as usize]);
        kv_bool(b, 9, "feature.flag", rng.chance(0.3));
        let retries = if rng.chance(0.9) { 0 } else { 1 + rng.below(3) };
        kv_int(b, 9, "retry.count", retries);
        kv_int(b, 9, "payload.size", (rng.unit() * 20.0).exp2() as u64);
        kv_bool(
            b,
            9,
            "cache.hit",
            rng.chance(if op.kind == OpKind::Cache { 0.8 } else { 0.5 }),
        );
        let wait = -(1.0 - rng.unit()).ln() * 2.5;
        kv_f64(b, 9, "queue.wait_ms", (wait * 1000.0).round() / 1000.0);

        if s.error {
            let msg = *rng.pick(&[
                "internal error",
                "upstream timeout",
                "connection refused",
                "deadline exceeded",
            ]);
            nested(b, 15, |b| {
                put_bytes(b, 2, msg.as_bytes());
                tag(b, 3, 0);
                varint(b, 2);
            });
        }
        tag(b, 16, 5);
        b.extend_from_slice(&0x101u32.to_le_bytes());
    }
}

/// Decodes a generated request with prost and checks its shape, so an encoder bug fails
/// loudly before any load is sent.
fn check_realistic(body: &[u8], spans: u64) -> anyhow::Result<()> {
    use std::collections::{HashMap, HashSet};
    let req = ExportTraceServiceRequest::decode(body)?;
    let mut summary = weft_otlp::scan::RequestSummary::default();
    weft_otlp::scan::scan_request(body, &mut summary).map_err(|e| anyhow::anyhow!("weft rejects it: {e}"))?;
    let mut ids: HashMap<Bytes, HashSet<Bytes>> = HashMap::new();
    let mut times: HashMap<(Bytes, Bytes), (u64, u64)> = HashMap::new();
    let mut roots: HashMap<Bytes, usize> = HashMap::new();
    let mut n = 0;
    for rs in &req.resource_spans {
        let res = rs.resource.as_ref().map(|r| r.attributes.len()).unwrap_or(0);
        anyhow::ensure!(res >= 3, "resource without attributes");
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                n += 1;
                anyhow::ensure!(s.trace_id.len() == 16 && s.span_id.len() == 8, "bad ids");
                anyhow::ensure!(s.attributes.len() == R_SPAN_ATTRS, "{} attributes", s.attributes.len());
                anyhow::ensure!(s.end_time_unix_nano > s.start_time_unix_nano, "bad times");
                ids.entry(s.trace_id.clone()).or_default().insert(s.span_id.clone());
                times.insert(
                    (s.trace_id.clone(), s.span_id.clone()),
                    (s.start_time_unix_nano, s.end_time_unix_nano),
                );
            }
        }
    }
    anyhow::ensure!(n == spans, "{n} spans, expected {spans}");
    for rs in &req.resource_spans {
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                if s.parent_span_id.is_empty() {
                    anyhow::ensure!(s.kind == 2, "root span of kind {}", s.kind);
                    *roots.entry(s.trace_id.clone()).or_default() += 1;
                } else {
                    anyhow::ensure!(ids[&s.trace_id].contains(&s.parent_span_id), "dangling parent");
                    let (ps, pe) = times[&(s.trace_id.clone(), s.parent_span_id.clone())];
                    anyhow::ensure!(
                        ps <= s.start_time_unix_nano && s.end_time_unix_nano <= pe,
                        "a child outside its parent's time"
                    );
                }
            }
        }
    }
    anyhow::ensure!(
        roots.len() == ids.len() && roots.values().all(|&r| r == 1),
        "every trace needs exactly one root"
    );
    Ok(())
}
