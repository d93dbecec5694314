//! `weft loadgen`: a load generator cheap enough to saturate weft.
//!
//! It encodes a few realistic OTLP requests once, then replays them with fresh trace and span
//! IDs patched in place at known offsets, so each span costs a few nanoseconds to produce. It
//! can also measure trace-by-ID latency for IDs it wrote (`--query-ids`).

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

async fn send(args: LoadgenArgs) -> anyhow::Result<()> {
    let templates: Arc<Vec<Template>> = Arc::new(
        (0..8)
            .map(|i| build_template(i, args.spans_per_request, args.spans_per_trace.max(1)))
            .collect(),
    );
    let spans_per_req = templates[0].slots.len() as u64;
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
    let ids = Arc::new(parking_lot::Mutex::new(Vec::<[u8; 16]>::new()));
    let last_error = Arc::new(parking_lot::Mutex::new(String::new()));
    let salt = mix(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.duration);
    let max_spans = if args.max_spans == 0 { u64::MAX } else { args.max_spans };
    let mut tasks = Vec::new();
    for w in 0..args.concurrency.max(1) {
        let mut grpc = tonic::client::Grpc::new(channels[w % channels.len()].clone());
        let (templates, sent, spans, errors, seq, ids, last_error) = (
            templates.clone(),
            sent.clone(),
            spans.clone(),
            errors.clone(),
            seq.clone(),
            ids.clone(),
            last_error.clone(),
        );
        let tenant = args.tenant.clone();
        let every = args.ids_every.max(1);
        let want_ids = args.ids_out.is_some();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                if n.saturating_mul(spans_per_req) >= max_spans {
                    break;
                }
                let (body, first) = instantiate(&templates[(n % templates.len() as u64) as usize], n, salt);
                let mut req = tonic::Request::new(body);
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
                        spans.fetch_add(spans_per_req, Ordering::Relaxed);
                        if want_ids && n % every == 0 {
                            ids.lock().push(first);
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
    let s = spans.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "requests": sent.load(Ordering::Relaxed),
            "spans": s,
            "errors": errors.load(Ordering::Relaxed),
            "last_error": *last_error.lock(),
            "elapsed_s": elapsed,
            "spans_per_s": s as f64 / elapsed,
            "request_bytes": templates[0].bytes.len(),
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
    let templates: Vec<Template> = (0..8)
        .map(|i| build_template(i, args.spans_per_request, args.spans_per_trace.max(1)))
        .collect();
    let per_request = templates[0].slots.len();
    let requests: Vec<Bytes> = (0..spans.div_ceil(per_request) as u64)
        .map(|n| instantiate(&templates[(n % 8) as usize], n, 0x5eed).0)
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
