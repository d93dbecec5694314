//! `--realistic`: spans with production-like cardinality, encoded directly as protobuf.

use super::*;

// ---------------------------------------------------------------------------------------------
// `--realistic`: spans with production-like cardinality, encoded directly as protobuf.
// ---------------------------------------------------------------------------------------------

/// A fast, seedable random sequence (SplitMix64).
pub(super) struct Rng(u64);

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

pub(super) const R_SERVICES: &[&str] = &[
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
pub(super) const R_LANGUAGES: &[&str] = &["go", "java", "python", "nodejs", "rust", "dotnet"];
pub(super) const R_DB: &[&str] = &["postgresql", "mysql", "mongodb", "cassandra"];
pub(super) const R_REGIONS: &[&str] = &[
    "us-east-1",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-northeast-1",
];
pub(super) const R_HOSTS: u64 = 50;
pub(super) const R_HOSTS_PER_SERVICE: usize = 5;
pub(super) const R_USERS: u64 = 1_000_000;
/// Attributes on every span.
pub(super) const R_SPAN_ATTRS: usize = 15;
/// Log-normal span durations: median 20 ms and sigma 1.6 put ~90% of spans in 1–200 ms and
/// ~0.7% over 1 s.
pub(super) const R_DUR_MEDIAN_NS: f64 = 20e6;
pub(super) const R_DUR_SIGMA: f64 = 1.6;
pub(super) const R_ERROR_RATE: f64 = 0.02;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Http,
    Rpc,
    Db,
    Cache,
}

pub(super) struct Op {
    name: String,
    route: String,
    method: &'static str,
    kind: OpKind,
}

pub(super) struct Service {
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
pub(super) struct World {
    services: Vec<Service>,
}

impl World {
    pub(super) fn new() -> World {
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
pub(super) struct SpanRec {
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
pub(super) struct Needle {
    pub(super) k: u64,
    pub(super) trace_id: [u8; 16],
    pub(super) span_id: [u8; 8],
    pub(super) start_unix_nano: u64,
}

/// Settings of the realistic generator.
pub(super) struct Realistic {
    pub(super) world: World,
    pub(super) spans_per_request: usize,
    /// Start times run from `end_ns - range_ns` (progress 0) to `end_ns` (progress 1).
    pub(super) end_ns: u64,
    pub(super) range_ns: u64,
    pub(super) needle_every: u64,
    pub(super) seed: u64,
}

/// One request ready to send.
pub(super) struct Built {
    pub(super) body: Bytes,
    pub(super) first_trace: [u8; 16],
    pub(super) needles: Vec<Needle>,
    pub(super) spans: u64,
}

#[inline]
pub(super) fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

#[inline]
pub(super) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
pub(super) fn tag(b: &mut Vec<u8>, field: u32, wire: u32) {
    varint(b, u64::from(field << 3 | wire));
}

#[inline]
pub(super) fn put_bytes(b: &mut Vec<u8>, field: u32, v: &[u8]) {
    tag(b, field, 2);
    varint(b, v.len() as u64);
    b.extend_from_slice(v);
}

/// Writes a length-delimited field whose body `f` writes, then inserts its length.
pub(super) fn nested(b: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
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
pub(super) fn kv_head(b: &mut Vec<u8>, field: u32, key: &str, any: usize) {
    let len = 1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any as u64) + any;
    tag(b, field, 2);
    varint(b, len as u64);
    put_bytes(b, 1, key.as_bytes());
    tag(b, 2, 2);
    varint(b, any as u64);
}

#[inline]
pub(super) fn kv_str(b: &mut Vec<u8>, field: u32, key: &str, v: &str) {
    kv_head(b, field, key, 1 + varint_len(v.len() as u64) + v.len());
    put_bytes(b, 1, v.as_bytes());
}

#[inline]
pub(super) fn kv_int(b: &mut Vec<u8>, field: u32, key: &str, v: u64) {
    kv_head(b, field, key, 1 + varint_len(v));
    tag(b, 3, 0);
    varint(b, v);
}

#[inline]
pub(super) fn kv_bool(b: &mut Vec<u8>, field: u32, key: &str, v: bool) {
    kv_head(b, field, key, 2);
    tag(b, 2, 0);
    b.push(u8::from(v));
}

#[inline]
pub(super) fn kv_f64(b: &mut Vec<u8>, field: u32, key: &str, v: f64) {
    kv_head(b, field, key, 9);
    tag(b, 4, 1);
    b.extend_from_slice(&v.to_le_bytes());
}

/// Spans in a trace: log-normal around 8, 1 to 30 (mean about 10).
pub(super) fn trace_len(rng: &mut Rng) -> usize {
    (8.0 * (0.6 * rng.normal()).exp()).round().clamp(1.0, 30.0) as usize
}

pub(super) fn duration_ns(rng: &mut Rng) -> u64 {
    (R_DUR_MEDIAN_NS * (R_DUR_SIGMA * rng.normal()).exp()).clamp(1_000.0, 600e9) as u64
}

impl Realistic {
    pub(super) fn new(args: &LoadgenArgs, salt: u64) -> Realistic {
        let now = weft_core::now_ns();
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
    pub(super) fn build(&self, n: u64, progress: f64) -> Built {
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
pub(super) fn check_realistic(body: &[u8], spans: u64) -> anyhow::Result<()> {
    use std::collections::{HashMap, HashSet};
    let req = ExportTraceServiceRequest::decode(body)?;
    let mut summary = weft_otlp::request::RequestSummary::default();
    weft_otlp::request::validate_request(body, &mut summary).map_err(|e| anyhow::anyhow!("weft rejects it: {e}"))?;
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
