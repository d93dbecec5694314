//! Replayed request templates: one encoded request per worker, with fresh IDs written into
//! it for every send.

use super::*;

/// Byte offsets of one span's IDs in an encoded template.
#[derive(Debug, Clone, Copy)]
pub(super) struct IdSlots {
    pub(super) trace: usize,
    pub(super) span: usize,
    pub(super) parent: Option<usize>,
    pub(super) trace_index: u32,
    pub(super) span_index: u32,
    pub(super) parent_index: u32,
}

pub(super) struct Template {
    pub(super) bytes: Vec<u8>,
    pub(super) slots: Vec<IdSlots>,
    pub(super) traces: u32,
}

pub(super) fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

pub(super) const SERVICES: &[&str] = &[
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
pub(super) const ROUTES: &[&str] = &[
    "/api/cart",
    "/api/checkout",
    "/api/products/{id}",
    "/api/recommendations",
    "/api/currency/convert",
    "/api/shipping/quote",
];

/// Builds one request of `spans` spans in traces of `per_trace`, one resource per service.
pub(super) fn build_template(seed: usize, spans: usize, per_trace: usize) -> Template {
    let traces = spans.div_ceil(per_trace);
    let now = weft_core::now_ns();
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
pub(super) fn find_slots(buf: &[u8]) -> Vec<IdSlots> {
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
pub(super) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Copies a template and writes fresh IDs for request number `seq`. Returns the request and
/// its first trace ID.
pub(super) fn instantiate(t: &Template, seq: u64, salt: u64) -> (Bytes, [u8; 16]) {
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
pub(super) enum Source {
    Templates(Vec<Template>, u64),
    Realistic(Box<Realistic>),
}

impl Source {
    pub(super) fn new(args: &LoadgenArgs, salt: u64) -> anyhow::Result<Source> {
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

    pub(super) fn spans_per_request(&self) -> u64 {
        match self {
            Source::Templates(t, _) => t[0].slots.len() as u64,
            Source::Realistic(r) => r.spans_per_request as u64,
        }
    }

    /// Request number `n`; `progress` (0 to 1) is how far through the run it is.
    pub(super) fn build(&self, n: u64, progress: f64) -> Built {
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
