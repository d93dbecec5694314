//! Zipkin v1 spans and their conversion to v2, by Zipkin's own rules (`V1SpanConverter`):
//! the core annotations `cs`/`sr`/`ss`/`cr` (and `ms`/`mr`/`ws`/`wr`) give the kind, timestamp
//! and duration; a span that holds both the client and the server side becomes two spans, the
//! server one `shared`; the address annotations `ca`/`sa`/`ma` give the remote endpoint; string
//! binary annotations become tags of the span of their endpoint's service.

use std::borrow::Cow;

use super::{Annotation, Endpoint, Kind, Span};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Annotation<'a> {
    pub timestamp_us: u64,
    pub value: Cow<'a, str>,
    pub endpoint: Option<Endpoint<'a>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1BinaryAnnotation<'a> {
    pub key: Cow<'a, str>,
    /// A string value (numbers arrive as their text).
    pub string_value: Option<Cow<'a, str>>,
    /// A boolean value: `true` on `ca`/`sa`/`ma` marks an address.
    pub bool_value: Option<bool>,
    pub endpoint: Option<Endpoint<'a>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V1Span<'a> {
    pub trace_id: [u8; 16],
    pub id: [u8; 8],
    pub parent_id: Option<[u8; 8]>,
    pub name: Option<Cow<'a, str>>,
    /// Microseconds; 0 when absent.
    pub timestamp_us: u64,
    /// Microseconds; 0 when absent.
    pub duration_us: u64,
    pub debug: bool,
    pub annotations: Vec<V1Annotation<'a>>,
    pub binary_annotations: Vec<V1BinaryAnnotation<'a>>,
}

/// Converts v1 spans to v2 spans (one or two each).
pub fn to_v2(spans: Vec<V1Span<'_>>) -> Vec<Span<'_>> {
    let mut out = Vec::with_capacity(spans.len());
    for s in spans {
        Converter::new(&s).convert(&s, &mut out);
    }
    out
}

fn same_service(a: &Endpoint<'_>, b: &Endpoint<'_>) -> bool {
    a.service_name == b.service_name
}

struct Core<'a> {
    ts: u64,
    value: Cow<'a, str>,
    endpoint: Option<Endpoint<'a>>,
}

impl<'a> Core<'a> {
    fn of(a: &V1Annotation<'a>) -> Core<'a> {
        Core {
            ts: a.timestamp_us,
            value: a.value.clone(),
            endpoint: a.endpoint.clone(),
        }
    }
}

struct Converter<'a> {
    /// `spans[0]` is the first span; the others are forked per endpoint.
    spans: Vec<Span<'a>>,
    /// Whether `spans[i]` has had its local endpoint assigned.
    cs: Option<Core<'a>>,
    sr: Option<Core<'a>>,
    ss: Option<Core<'a>>,
    cr: Option<Core<'a>>,
    ms: Option<Core<'a>>,
    mr: Option<Core<'a>>,
    ws: Option<Core<'a>>,
    wr: Option<Core<'a>>,
}

impl<'a> Converter<'a> {
    fn new(src: &V1Span<'a>) -> Self {
        Converter {
            spans: vec![base(src)],
            cs: None,
            sr: None,
            ss: None,
            cr: None,
            ms: None,
            mr: None,
            ws: None,
            wr: None,
        }
    }

    /// The span of endpoint `e`: the first span for no endpoint, else the first span whose
    /// local endpoint is unset (which takes `e`) or has `e`'s service name, else a new one.
    fn for_endpoint(&mut self, src: &V1Span<'a>, e: Option<&Endpoint<'a>>) -> usize {
        let Some(e) = e else { return 0 };
        for (i, s) in self.spans.iter_mut().enumerate() {
            match &s.local {
                None => {
                    s.local = Some(e.clone());
                    return i;
                }
                Some(l) if same_service(l, e) => return i,
                Some(_) => {}
            }
        }
        self.new_span(src, e)
    }

    fn new_span(&mut self, src: &V1Span<'a>, e: &Endpoint<'a>) -> usize {
        let mut s = base(src);
        s.local = Some(e.clone());
        self.spans.push(s);
        self.spans.len() - 1
    }

    fn annotate(&mut self, i: usize, ts: u64, value: Cow<'a, str>) {
        self.spans[i].annotations.push(Annotation {
            timestamp_us: ts,
            value,
        });
    }

    fn convert(mut self, src: &V1Span<'a>, out: &mut Vec<Span<'a>>) {
        self.process_annotations(src);
        self.process_binary_annotations(src);
        for mut s in self.spans {
            s.annotations
                .sort_by(|a, b| (a.timestamp_us, &a.value).cmp(&(b.timestamp_us, &b.value)));
            s.annotations.dedup();
            s.tags.sort();
            s.tags.dedup_by(|a, b| a.0 == b.0);
            out.push(s);
        }
    }

    fn process_annotations(&mut self, src: &V1Span<'a>) {
        self.read_annotations(src);
        self.infer_missing_starts(src);
        self.process_rpc(src);
        self.process_messaging(src);
    }

    /// Takes the core annotations (`cs`, `sr`, ...) of endpoints aside, setting the kind of the
    /// endpoint's span; every other annotation goes to its endpoint's span.
    fn read_annotations(&mut self, src: &V1Span<'a>) {
        for a in &src.annotations {
            let i = self.for_endpoint(src, a.endpoint.as_ref());
            // Core annotations need an endpoint; without one they are plain annotations.
            if a.value.len() == 2 && a.endpoint.is_some() {
                let core = Some(Core::of(a));
                match a.value.as_ref() {
                    "cs" => {
                        self.spans[i].kind = Some(Kind::Client);
                        self.cs = core;
                    }
                    "sr" => {
                        self.spans[i].kind = Some(Kind::Server);
                        self.sr = core;
                    }
                    "ss" => {
                        self.spans[i].kind = Some(Kind::Server);
                        self.ss = core;
                    }
                    "cr" => {
                        self.spans[i].kind = Some(Kind::Client);
                        self.cr = core;
                    }
                    "ms" => {
                        self.spans[i].kind = Some(Kind::Producer);
                        self.ms = core;
                    }
                    "mr" => {
                        self.spans[i].kind = Some(Kind::Consumer);
                        self.mr = core;
                    }
                    "ws" => self.ws = core,
                    "wr" => self.wr = core,
                    _ => self.annotate(i, a.timestamp_us, a.value.clone()),
                }
            } else {
                self.annotate(i, a.timestamp_us, a.value.clone());
            }
        }
    }

    /// Bridged from an event model, a span can miss its start annotation: a `cr` (`ss`) at the
    /// span's end gives it a `cs` (`sr`) at its start.
    fn infer_missing_starts(&mut self, src: &V1Span<'a>) {
        let reflects = |end: &Option<Core<'a>>| {
            end.as_ref().is_some_and(|e| {
                src.timestamp_us != 0
                    && src.duration_us != 0
                    && src.timestamp_us.checked_add(src.duration_us) == Some(e.ts)
            })
        };
        if self.cs.is_none() && reflects(&self.cr) {
            let cr = self.cr.as_ref().expect("checked");
            self.cs = Some(Core {
                ts: src.timestamp_us,
                value: Cow::Borrowed("cs"),
                endpoint: cr.endpoint.clone(),
            });
        }
        if self.sr.is_none() && reflects(&self.ss) {
            let ss = self.ss.as_ref().expect("checked");
            self.sr = Some(Core {
                ts: src.timestamp_us,
                value: Cow::Borrowed("sr"),
                endpoint: ss.endpoint.clone(),
            });
        }
    }

    /// The RPC core annotations: a client and a server side (one span each, the server's
    /// shared), one side, or an incomplete RPC.
    fn process_rpc(&mut self, src: &V1Span<'a>) {
        if let (Some(cs), Some(sr)) = (self.cs.as_ref().map(clone_core), self.sr.as_ref().map(clone_core)) {
            // In a shared span the client owns the span's timestamp and duration.
            let cr = self.cr.as_ref().map(clone_core);
            self.maybe_timestamp_duration(src, &cs, cr.as_ref());
            let client = self.for_endpoint(src, cs.endpoint.as_ref());
            let server = if cs
                .endpoint
                .as_ref()
                .zip(sr.endpoint.as_ref())
                .is_some_and(|(c, s)| same_service(c, s))
            {
                self.spans[client].kind = Some(Kind::Client);
                let e = sr.endpoint.clone().expect("core annotations have endpoints");
                let i = self.new_span(src, &e);
                self.spans[i].kind = Some(Kind::Server);
                i
            } else {
                self.for_endpoint(src, sr.endpoint.as_ref())
            };
            self.spans[server].shared = true;
            self.spans[server].timestamp_us = sr.ts;
            if let Some(ss) = &self.ss {
                self.spans[server].duration_us = ss.ts.saturating_sub(sr.ts);
            }
            if self.cr.is_none() && src.duration_us == 0 {
                self.spans[client].duration_us = 0;
            }
        } else if let (Some(cs), Some(cr)) = (self.cs.as_ref().map(clone_core), self.cr.as_ref().map(clone_core)) {
            self.maybe_timestamp_duration(src, &cs, Some(&cr));
        } else if let (Some(sr), Some(ss)) = (self.sr.as_ref().map(clone_core), self.ss.as_ref().map(clone_core)) {
            self.maybe_timestamp_duration(src, &sr, Some(&ss));
        } else {
            self.handle_incomplete_rpc(src);
        }

        // v1 had no shared flag: a server side without the span's timestamp was shared.
        if self.cs.is_none()
            && let Some(sr) = &self.sr
            && (src.timestamp_us == 0 || (self.ss.is_some() && src.duration_us == 0))
        {
            let e = sr.endpoint.clone();
            let i = self.for_endpoint(src, e.as_ref());
            self.spans[i].shared = true;
        }
    }

    /// The messaging core annotations: a producer and a consumer side (one span each, the
    /// consumer's shared), one side, or `ws`/`wr` alone as plain annotations.
    fn process_messaging(&mut self, src: &V1Span<'a>) {
        match (self.ms.as_ref().map(clone_core), self.mr.as_ref().map(clone_core)) {
            (Some(ms), Some(mr)) => {
                let producer = self.for_endpoint(src, ms.endpoint.as_ref());
                let consumer = if ms
                    .endpoint
                    .as_ref()
                    .zip(mr.endpoint.as_ref())
                    .is_some_and(|(a, b)| same_service(a, b))
                {
                    self.spans[producer].kind = Some(Kind::Producer);
                    let e = mr.endpoint.clone().expect("core annotations have endpoints");
                    let i = self.new_span(src, &e);
                    self.spans[i].kind = Some(Kind::Consumer);
                    i
                } else {
                    self.for_endpoint(src, mr.endpoint.as_ref())
                };
                self.spans[consumer].shared = true;
                if let Some(wr) = &self.wr {
                    self.spans[consumer].timestamp_us = wr.ts;
                    self.spans[consumer].duration_us = mr.ts.saturating_sub(wr.ts);
                } else {
                    self.spans[consumer].timestamp_us = mr.ts;
                }
                self.spans[producer].timestamp_us = ms.ts;
                self.spans[producer].duration_us = self.ws.as_ref().map_or(0, |ws| ws.ts.saturating_sub(ms.ts));
            }
            (Some(ms), None) => {
                let ws = self.ws.as_ref().map(clone_core);
                self.maybe_timestamp_duration(src, &ms, ws.as_ref());
            }
            (None, Some(mr)) => match self.wr.as_ref().map(clone_core) {
                Some(wr) => self.maybe_timestamp_duration(src, &wr, Some(&mr)),
                None => self.maybe_timestamp_duration(src, &mr, None),
            },
            (None, None) => {
                for w in [self.ws.as_ref().map(clone_core), self.wr.as_ref().map(clone_core)]
                    .into_iter()
                    .flatten()
                {
                    let i = self.for_endpoint(src, w.endpoint.as_ref());
                    self.annotate(i, w.ts, w.value.clone());
                }
            }
        }
    }

    fn handle_incomplete_rpc(&mut self, src: &V1Span<'a>) {
        for i in 0..self.spans.len() {
            match self.spans[i].kind {
                Some(Kind::Client) => {
                    if let Some(cs) = &self.cs {
                        self.spans[i].timestamp_us = cs.ts;
                    }
                    if let Some(cr) = self.cr.as_ref().map(clone_core) {
                        self.annotate(i, cr.ts, cr.value);
                    }
                }
                Some(Kind::Server) => {
                    if let Some(sr) = &self.sr {
                        self.spans[i].timestamp_us = sr.ts;
                    }
                    if let Some(ss) = self.ss.as_ref().map(clone_core) {
                        self.annotate(i, ss.ts, ss.value);
                    }
                }
                _ => {}
            }
        }
        if src.timestamp_us != 0 {
            self.spans[0].timestamp_us = src.timestamp_us;
            self.spans[0].duration_us = src.duration_us;
        }
    }

    fn maybe_timestamp_duration(&mut self, src: &V1Span<'a>, begin: &Core<'a>, end: Option<&Core<'a>>) {
        let i = self.for_endpoint(src, begin.endpoint.as_ref());
        if src.timestamp_us != 0 && src.duration_us != 0 {
            self.spans[i].timestamp_us = src.timestamp_us;
            self.spans[i].duration_us = src.duration_us;
        } else {
            self.spans[i].timestamp_us = begin.ts;
            if let Some(end) = end {
                self.spans[i].duration_us = end.ts.saturating_sub(begin.ts);
            }
        }
    }

    fn process_binary_annotations(&mut self, src: &V1Span<'a>) {
        let (mut ca, mut sa, mut ma) = (None, None, None);
        for b in &src.binary_annotations {
            let value = match (&b.string_value, b.bool_value) {
                (Some(v), _) => v.clone(),
                (None, Some(true)) if matches!(b.key.as_ref(), "ca" | "sa" | "ma") => {
                    match b.key.as_ref() {
                        "ca" => ca = b.endpoint.clone(),
                        "sa" => sa = b.endpoint.clone(),
                        _ => ma = b.endpoint.clone(),
                    }
                    continue;
                }
                (None, Some(v)) => Cow::Borrowed(if v { "true" } else { "false" }),
                (None, None) => continue,
            };
            let i = self.for_endpoint(src, b.endpoint.as_ref());
            // "lc" with an empty value only marks a local span.
            if b.key == "lc" && value.is_empty() {
                continue;
            }
            self.spans[i].tags.push((b.key.clone(), value));
        }

        let no_core = self.cs.is_none() && self.cr.is_none() && self.ss.is_none() && self.sr.is_none();
        if no_core && (ca.is_some() || sa.is_some()) {
            match (ca, sa) {
                (Some(ca), Some(sa)) => {
                    let i = self.for_endpoint(src, Some(&ca));
                    self.spans[i].remote = Some(sa);
                }
                (None, Some(sa)) => {
                    // "sa" alone is a remote address; it does not make a client span.
                    self.spans[0].remote = Some(sa);
                }
                (Some(ca), None) => {
                    self.spans[0].kind = Some(Kind::Server);
                    self.spans[0].remote = Some(ca);
                }
                (None, None) => {}
            }
            return;
        }

        let server = self.sr.as_ref().or(self.ss.as_ref()).map(clone_core);
        if let (Some(mut ca), Some(server)) = (ca, server)
            && server.endpoint.as_ref() != Some(&ca)
        {
            // Finagle adds "ca" on server spans with the server's own service name.
            if server.endpoint.as_ref().is_some_and(|e| same_service(&ca, e)) {
                ca.service_name = None;
            }
            let i = self.for_endpoint(src, server.endpoint.as_ref());
            self.spans[i].remote = Some(ca);
        }
        if let Some(sa) = sa {
            let client = self.cs.as_ref().or(self.cr.as_ref()).map(|c| c.endpoint.clone());
            if let Some(e) = client {
                let i = self.for_endpoint(src, e.as_ref());
                self.spans[i].remote = Some(sa);
            }
        }
        if let Some(ma) = ma {
            for e in [
                self.ms.as_ref().map(|c| c.endpoint.clone()),
                self.mr.as_ref().map(|c| c.endpoint.clone()),
            ]
            .into_iter()
            .flatten()
            {
                let i = self.for_endpoint(src, e.as_ref());
                self.spans[i].remote = Some(ma.clone());
            }
        }
    }
}

fn clone_core<'a>(c: &Core<'a>) -> Core<'a> {
    Core {
        ts: c.ts,
        value: c.value.clone(),
        endpoint: c.endpoint.clone(),
    }
}

fn base<'a>(src: &V1Span<'a>) -> Span<'a> {
    Span {
        trace_id: src.trace_id,
        id: src.id,
        parent_id: src.parent_id,
        name: src.name.clone(),
        debug: src.debug,
        ..Span::default()
    }
}
