//! Zipkin: v2 JSON and proto3, v1 JSON and thrift in ([`decode`]); v2 JSON out ([`out`]).
//!
//! Every input format is read into the v2 model ([`Span`]), v1 through Zipkin's own v1→v2
//! rules ([`v1`]), then written as OTLP by [`to_otlp`], following the OpenTelemetry
//! Collector's Zipkin translator except where `spec/formats/zipkin.md` says otherwise (and why).

pub mod fastjson;
pub mod json;
pub mod out;
pub mod proto3;
pub mod query;
pub mod thrift;
pub mod v1;

use std::borrow::Cow;

use crate::TranslateError;
use crate::otlp::{RequestWriter, Value, kind, status};

/// Zipkin's span kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Client,
    Server,
    Producer,
    Consumer,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "CLIENT" => Some(Kind::Client),
            "SERVER" => Some(Kind::Server),
            "PRODUCER" => Some(Kind::Producer),
            "CONSUMER" => Some(Kind::Consumer),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Client => "CLIENT",
            Kind::Server => "SERVER",
            Kind::Producer => "PRODUCER",
            Kind::Consumer => "CONSUMER",
        }
    }
}

/// A network endpoint of a span.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Endpoint<'a> {
    pub service_name: Option<Cow<'a, str>>,
    pub ipv4: Option<std::net::Ipv4Addr>,
    pub ipv6: Option<std::net::Ipv6Addr>,
    pub port: u16,
}

impl Endpoint<'_> {
    pub fn is_empty(&self) -> bool {
        self.service_name.is_none() && self.ipv4.is_none() && self.ipv6.is_none() && self.port == 0
    }

    fn service(&self) -> Option<&str> {
        self.service_name.as_deref()
    }
}

/// A timestamped annotation (microseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation<'a> {
    pub timestamp_us: u64,
    pub value: Cow<'a, str>,
}

/// A Zipkin v2 span. Strings borrow from the payload where it holds them unescaped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Span<'a> {
    pub trace_id: [u8; 16],
    pub id: [u8; 8],
    pub parent_id: Option<[u8; 8]>,
    pub kind: Option<Kind>,
    pub name: Option<Cow<'a, str>>,
    /// Microseconds since the epoch; 0 when absent.
    pub timestamp_us: u64,
    /// Microseconds; 0 when absent.
    pub duration_us: u64,
    pub local: Option<Endpoint<'a>>,
    pub remote: Option<Endpoint<'a>>,
    pub annotations: Vec<Annotation<'a>>,
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub debug: bool,
    pub shared: bool,
}

/// The encodings a Zipkin receiver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `POST /api/v2/spans`, `application/json`.
    JsonV2,
    /// `POST /api/v2/spans`, `application/x-protobuf`.
    Proto3,
    /// `POST /api/v1/spans`, `application/json`.
    JsonV1,
    /// `POST /api/v1/spans`, `application/x-thrift`.
    ThriftV1,
}

/// Decodes a Zipkin payload into v2 spans.
pub fn decode(enc: Encoding, body: &[u8]) -> Result<Vec<Span<'_>>, TranslateError> {
    match enc {
        Encoding::JsonV2 => fastjson::decode_v2(body),
        Encoding::Proto3 => proto3::decode(body),
        Encoding::JsonV1 => Ok(v1::to_v2(json::decode_v1(body)?)),
        Encoding::ThriftV1 => Ok(v1::to_v2(thrift::decode(body)?)),
    }
}

/// Decodes a Zipkin payload and writes it as an OTLP `ExportTraceServiceRequest`. Returns
/// the request and its span count.
pub fn to_otlp_request(enc: Encoding, body: &[u8]) -> Result<(Vec<u8>, usize), TranslateError> {
    let spans = decode(enc, body)?;
    Ok((to_otlp(&spans), spans.len()))
}

/// Attribute keys of the OpenTelemetry semantic conventions that the Collector's Zipkin
/// translators use for endpoints.
pub mod keys {
    pub const NET_HOST_IP: &str = "net.host.ip";
    pub const NET_HOST_PORT: &str = "net.host.port";
    pub const NET_PEER_IP: &str = "net.peer.ip";
    pub const NET_PEER_PORT: &str = "net.peer.port";
    pub const PEER_SERVICE: &str = "peer.service";
    pub const SERVICE_NAME: &str = "service.name";
    pub const STATUS_CODE: &str = "otel.status_code";
    pub const STATUS_DESCRIPTION: &str = "otel.status_description";
    pub const SCOPE_NAME: &str = "otel.scope.name";
    pub const SCOPE_VERSION: &str = "otel.scope.version";
    pub const LIBRARY_NAME: &str = "otel.library.name";
    pub const LIBRARY_VERSION: &str = "otel.library.version";
    pub const TRACESTATE: &str = "w3c.tracestate";
    pub const SPAN_KIND: &str = "span.kind";
    pub const ERROR: &str = "error";
    /// On a server span that shared its span ID with its client (`"shared": true`): the span
    /// ID the client sent, which became the OTLP parent (see [`super::shared_span_id`]).
    pub const SHARED_ID: &str = "zipkin.shared";
    /// With [`SHARED_ID`]: the parent ID the shared span had, when it had one.
    pub const SHARED_PARENT: &str = "zipkin.shared_parent";
    /// Set when a Zipkin span had no timestamp (its OTLP start is then 0 + its duration).
    pub const START_ABSENT: &str = "otel.zipkin.absentField.startTime";
    /// What a Zipkin span said that its OTLP form cannot give back, so that the Zipkin API
    /// shows it as sent: JSON `{"tags":{…},"remoteService":"…","debug":true}`. Written only
    /// for spans with `debug`, `otel.library.*` tags, an empty scope tag, an `otel.status_code`
    /// other than `OK`, an empty `error` or a `peer.service` tag (as the OpenTelemetry Zipkin
    /// exporters send them); `tags` holds the span's scope, status, `error` and `peer.service`
    /// tags verbatim, `remoteService` the remote endpoint's service name.
    pub const ORIGINAL: &str = "zipkin.original";
    pub const LINK_PREFIX: &str = "otlp.link.";
}

/// Whether two short strings are equal, compared inline: `==` on `str` calls `memcmp`, whose
/// call cost more than the comparison on the tag keys and service names of every span (a
/// twelfth of the Zipkin receiver's CPU). Lengths first, then at most two 8-byte loads.
#[inline]
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    a == b
}

/// Tags the Collector moves to the resource: the resource semantic conventions' namespaces.
fn is_resource_tag(k: &str) -> bool {
    // This runs for every tag of every span: a byte loop for the dot and inline comparisons.
    let Some(dot) = k.bytes().position(|c| c == b'.') else {
        return false;
    };
    let ns = &k[..dot];
    if same(ns, "service") {
        return !same(k, keys::SERVICE_NAME);
    }
    if same(ns, "opencensus") {
        return same(k, "opencensus.exporterversion");
    }
    [
        "telemetry",
        "host",
        "os",
        "process",
        "container",
        "k8s",
        "cloud",
        "faas",
        "deployment",
        "device",
        "webengine",
    ]
    .iter()
    .any(|n| same(ns, n))
}

/// What a tag means to the conversion, decided once per tag.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TagRole {
    /// An ordinary span attribute.
    Attribute,
    Resource,
    Scope,
    TraceState,
    SpanKind,
    StatusCode,
    StatusDescription,
    Error,
    Link,
    /// `peer.service`: an attribute, and kept for the Zipkin API as a tag.
    PeerService,
}

fn tag_role(k: &str) -> TagRole {
    const SPECIAL: [(&str, TagRole); 10] = [
        (keys::SCOPE_NAME, TagRole::Scope),
        (keys::SCOPE_VERSION, TagRole::Scope),
        (keys::LIBRARY_NAME, TagRole::Scope),
        (keys::LIBRARY_VERSION, TagRole::Scope),
        (keys::TRACESTATE, TagRole::TraceState),
        (keys::SPAN_KIND, TagRole::SpanKind),
        (keys::STATUS_CODE, TagRole::StatusCode),
        (keys::STATUS_DESCRIPTION, TagRole::StatusDescription),
        (keys::ERROR, TagRole::Error),
        (keys::PEER_SERVICE, TagRole::PeerService),
    ];
    if let Some((_, r)) = SPECIAL.iter().find(|(s, _)| same(k, s)) {
        return *r;
    }
    let n = keys::LINK_PREFIX.len();
    if k.len() >= n && k.is_char_boundary(n) && same(&k[..n], keys::LINK_PREFIX) {
        return TagRole::Link;
    }
    if is_resource_tag(k) {
        TagRole::Resource
    } else {
        TagRole::Attribute
    }
}

/// The span ID a shared server span gets in OTLP, where client and server are two spans of
/// one trace and need two IDs (Zipkin lets a server "join" its client's span ID). Derived from
/// the shared ID alone, so a span sent twice is still de-duplicated; never zero and never the
/// shared ID.
pub fn shared_span_id(id: &[u8; 8]) -> [u8; 8] {
    // splitmix64's finaliser: a bijection, so two shared IDs never collide.
    let mut z = u64::from_be_bytes(*id).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    if z == 0 || z.to_be_bytes() == *id {
        z = z.wrapping_add(1).max(1);
    }
    z.to_be_bytes()
}

/// What groups spans into one OTLP resource and scope.
struct Group<'s> {
    service: Option<&'s str>,
    resource_tags: Vec<(&'s str, &'s str)>,
    scope: (&'s str, &'s str),
}

impl Group<'_> {
    /// The same resource: service and resource tags.
    fn same_resource(&self, o: &Group<'_>) -> bool {
        let service = match (self.service, o.service) {
            (Some(a), Some(b)) => same(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        service
            && self.resource_tags.len() == o.resource_tags.len()
            && self
                .resource_tags
                .iter()
                .zip(&o.resource_tags)
                .all(|(a, b)| same(a.0, b.0) && same(a.1, b.1))
    }

    fn same_group(&self, o: &Group<'_>) -> bool {
        self.same_resource(o) && same(self.scope.0, o.scope.0) && same(self.scope.1, o.scope.1)
    }
}

fn group_of<'s>(s: &'s Span<'_>) -> Group<'s> {
    let mut resource_tags: Vec<(&str, &str)> = s
        .tags
        .iter()
        .filter(|(k, _)| is_resource_tag(k))
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    resource_tags.sort_unstable();
    let tag = |a: &str, b: &str| {
        if s.tags.is_empty() {
            return "";
        }
        s.tags
            .iter()
            .find(|(k, _)| k == a)
            .or_else(|| s.tags.iter().find(|(k, _)| k == b))
            .map_or("", |(_, v)| v.as_ref())
    };
    Group {
        service: s.local.as_ref().and_then(Endpoint::service),
        resource_tags,
        scope: (
            tag(keys::SCOPE_NAME, keys::LIBRARY_NAME),
            tag(keys::SCOPE_VERSION, keys::LIBRARY_VERSION),
        ),
    }
}

/// A cheap hash of a group (FNV-1a over its strings), so that finding a span's group compares
/// integers and compares strings only to confirm a match: comparing every span's strings with
/// each group's was a tenth of the receiver's CPU (the strings are cold in the request body).
fn group_hash(g: &Group<'_>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &c in b {
            h = (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    };
    eat(g.service.unwrap_or("\u{0}").as_bytes());
    for (k, v) in &g.resource_tags {
        eat(k.as_bytes());
        eat(v.as_bytes());
    }
    eat(g.scope.0.as_bytes());
    eat(g.scope.1.as_bytes());
    h
}

/// Writes Zipkin v2 spans as one OTLP request: one resource per local service (and resource
/// tags), one scope per instrumentation library, spans in the order received.
pub fn to_otlp(spans: &[Span<'_>]) -> Vec<u8> {
    let groups: Vec<Group<'_>> = spans.iter().map(group_of).collect();
    // Each span's group, by first appearance; spans then ordered by group, keeping each
    // group's spans in arrival order.
    let mut firsts: Vec<(u64, usize)> = Vec::new();
    let mut group_index = Vec::with_capacity(spans.len());
    for (i, g) in groups.iter().enumerate() {
        let h = group_hash(g);
        let gi = firsts
            .iter()
            .position(|&(fh, f)| fh == h && groups[f].same_group(g))
            .unwrap_or_else(|| {
                firsts.push((h, i));
                firsts.len() - 1
            });
        group_index.push(gi);
    }
    // A counting sort by group (there are few): each group's spans in arrival order.
    let mut next = vec![0usize; firsts.len() + 1];
    for &g in &group_index {
        next[g + 1] += 1;
    }
    for g in 1..next.len() {
        next[g] += next[g - 1];
    }
    let mut order = vec![0usize; spans.len()];
    for (i, &g) in group_index.iter().enumerate() {
        order[next[g]] = i;
        next[g] += 1;
    }

    let mut w = RequestWriter::with_capacity(spans.len() * 256 + 64);
    let mut prev: Option<usize> = None;
    for &i in &order {
        let g = &groups[i];
        if prev.is_none_or(|p| group_index[p] != group_index[i]) {
            // A new group: a new resource unless only the scope changed.
            let new_resource = prev.is_none_or(|p| !groups[p].same_resource(g));
            if new_resource {
                let svc = g.service.map(|s| Value::Str(Cow::Borrowed(s)));
                let vals: Vec<Value<'_>> = g
                    .resource_tags
                    .iter()
                    .map(|(_, v)| Value::Str(Cow::Borrowed(*v)))
                    .collect();
                let attrs = svc
                    .iter()
                    .map(|v| (keys::SERVICE_NAME, v))
                    .chain(g.resource_tags.iter().zip(&vals).map(|((k, _), v)| (*k, v)));
                w.resource(attrs);
            }
            w.scope(g.scope.0, g.scope.1);
        }
        prev = Some(i);
        write_span(&mut w, &spans[i]);
    }
    w.finish()
}

/// An endpoint's address as text (IPv4 first), formatted on the stack. IPv4 is written by
/// hand: `Display` through `fmt::write` cost a twentieth of the whole conversion.
fn ip_text<'b>(e: &Endpoint<'_>, buf: &'b mut IpText) -> Option<&'b str> {
    use std::fmt::Write;
    buf.len = 0;
    match (e.ipv4, e.ipv6) {
        (Some(a), _) => {
            for (i, o) in a.octets().into_iter().enumerate() {
                if i > 0 {
                    buf.push(b'.');
                }
                if o >= 100 {
                    buf.push(b'0' + o / 100);
                }
                if o >= 10 {
                    buf.push(b'0' + (o / 10) % 10);
                }
                buf.push(b'0' + o % 10);
            }
        }
        (None, Some(a)) => write!(buf, "{a}").ok()?,
        (None, None) => return None,
    }
    std::str::from_utf8(&buf.bytes[..buf.len]).ok()
}

/// A stack buffer long enough for any IP address's text (at most 45 bytes).
struct IpText {
    bytes: [u8; 48],
    len: usize,
}

impl IpText {
    fn new() -> Self {
        IpText { bytes: [0; 48], len: 0 }
    }

    fn push(&mut self, b: u8) {
        if self.len < self.bytes.len() {
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }
}

impl std::fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn write_span(w: &mut RequestWriter, s: &Span<'_>) {
    // Each tag's role, decided once (the conversion's hot loop: every tag of every span).
    let mut roles = [TagRole::Attribute; 16];
    let role_of = |i: usize, roles: &[TagRole; 16]| if i < 16 { roles[i] } else { tag_role(&s.tags[i].0) };
    let (mut tracestate, mut span_kind, mut status_code, mut status_desc, mut error_tag, mut has_links) =
        (None, None, None, None, None, false);
    // Whether the OTLP form loses something the Zipkin API must give back ([`keys::ORIGINAL`]).
    let mut lossy = s.debug;
    let remote_service = s.remote.as_ref().and_then(Endpoint::service);
    for (i, (k, v)) in s.tags.iter().enumerate() {
        let r = tag_role(k);
        if i < 16 {
            roles[i] = r;
        }
        match r {
            TagRole::TraceState => tracestate = Some(v.as_ref()),
            TagRole::SpanKind => span_kind = Some(v.as_ref()),
            TagRole::StatusCode => status_code = Some(v.as_ref()),
            TagRole::StatusDescription => status_desc = Some(v.as_ref()),
            TagRole::Error => error_tag = Some(v.as_ref()),
            TagRole::Link => has_links = true,
            _ => {}
        }
        // What the Zipkin API would not write back as it came: `otel.library.*` (it writes
        // `otel.scope.*`), an empty scope tag, a status tag other than `OK` (an error is the
        // `error` tag alone), an empty `error` (it writes `true`), a `peer.service` tag (it
        // writes the remote endpoint).
        lossy |= match r {
            TagRole::Scope => v.is_empty() || same(k, keys::LIBRARY_NAME) || same(k, keys::LIBRARY_VERSION),
            TagRole::StatusCode => v != "OK",
            TagRole::Error => v.is_empty(),
            TagRole::PeerService => true,
            _ => false,
        };
    }
    let mut sw = w.span();
    // A server that joined its client's span: its own ID, under the client span.
    let joined = s.shared && s.kind == Some(Kind::Server);
    let (id, parent) = if joined {
        (shared_span_id(&s.id), Some(s.id))
    } else {
        (s.id, s.parent_id.filter(|p| *p != s.id && *p != [0; 8]))
    };
    sw.ids(&s.trace_id, &id, parent.as_ref());
    if joined {
        sw.str_attr(keys::SHARED_ID, &weft_core::hex(&s.id));
        if let Some(p) = s.parent_id.filter(|p| *p != [0; 8]) {
            sw.str_attr(keys::SHARED_PARENT, &weft_core::hex(&p));
        }
    }
    if let Some(ts) = tracestate {
        sw.trace_state(ts);
    }
    sw.name(s.name.as_deref().unwrap_or(""));
    let internal = s.kind.is_none() && span_kind == Some("internal");
    let k = match s.kind {
        Some(Kind::Client) => kind::CLIENT,
        Some(Kind::Server) => kind::SERVER,
        Some(Kind::Producer) => kind::PRODUCER,
        Some(Kind::Consumer) => kind::CONSUMER,
        None if internal => kind::INTERNAL,
        None => kind::UNSPECIFIED,
    };
    sw.kind(k);
    let start = s.timestamp_us.saturating_mul(1000);
    sw.times(start, start.saturating_add(s.duration_us.saturating_mul(1000)));

    // Status: `otel.status_code` (with `otel.status_description`) when present; else the
    // `error` tag, whose value (unless "true" or empty) becomes the status message.
    let (mut code, mut message) = (status::UNSET, "");
    match status_code {
        Some("STATUS_CODE_OK" | "OK" | "Ok") => code = status::OK,
        Some("STATUS_CODE_ERROR" | "ERROR" | "Error") => {
            code = status::ERROR;
            message = status_desc.unwrap_or("");
        }
        _ => {}
    }
    if let Some(e) = error_tag
        && code != status::OK
    {
        code = status::ERROR;
        if message.is_empty() && e != "true" {
            message = e;
        }
    }
    let status_from_tags = status_code.is_some();

    for (i, (k, v)) in s.tags.iter().enumerate() {
        let keep = match role_of(i, &roles) {
            TagRole::Attribute => true,
            // The remote endpoint's name is the attribute when there is one.
            TagRole::PeerService => remote_service.is_none(),
            TagRole::SpanKind => !internal,
            TagRole::StatusCode | TagRole::StatusDescription => !status_from_tags,
            TagRole::Error => code != status::ERROR,
            TagRole::Resource | TagRole::Scope | TagRole::TraceState | TagRole::Link => false,
        };
        if keep {
            sw.str_attr(k, v);
        }
    }
    let mut ip = IpText::new();
    if let Some(l) = &s.local {
        if let Some(text) = ip_text(l, &mut ip) {
            sw.str_attr(keys::NET_HOST_IP, text);
        }
        if l.port > 0 {
            sw.attr(keys::NET_HOST_PORT, &Value::Int(i64::from(l.port)));
        }
    }
    if let Some(r) = &s.remote {
        if let Some(svc) = r.service() {
            sw.str_attr(keys::PEER_SERVICE, svc);
        }
        if let Some(text) = ip_text(r, &mut ip) {
            sw.str_attr(keys::NET_PEER_IP, text);
        }
        if r.port > 0 {
            sw.attr(keys::NET_PEER_PORT, &Value::Int(i64::from(r.port)));
        }
    }
    if s.timestamp_us == 0 {
        sw.attr(keys::START_ABSENT, &Value::Bool(true));
    }
    if lossy {
        sw.str_attr(keys::ORIGINAL, &original(s, remote_service));
    }
    for a in &s.annotations {
        write_annotation(&mut sw, a);
    }
    if has_links {
        let tag = |k: &str| s.tags.iter().find(|(tk, _)| tk == k).map(|(_, v)| v.as_ref());
        for i in 0..128 {
            let key = format!("{}{i}", keys::LINK_PREFIX);
            let Some(v) = tag(&key) else { break };
            write_link(&mut sw, v);
        }
    }
    sw.status(code, message);
}

/// The [`keys::ORIGINAL`] of a span: its scope, status, error and `peer.service` tags, its
/// remote service name and its debug flag. Rare (the OpenTelemetry Zipkin exporters' spans),
/// so plain JSON.
fn original(s: &Span<'_>, remote_service: Option<&str>) -> String {
    let mut tags = serde_json::Map::new();
    for (k, v) in &s.tags {
        if matches!(
            tag_role(k),
            TagRole::Scope | TagRole::StatusCode | TagRole::StatusDescription | TagRole::Error | TagRole::PeerService
        ) {
            tags.insert(k.to_string(), serde_json::Value::String(v.to_string()));
        }
    }
    let mut m = serde_json::Map::new();
    m.insert("tags".into(), serde_json::Value::Object(tags));
    if let Some(r) = remote_service {
        m.insert("remoteService".into(), serde_json::Value::String(r.to_owned()));
    }
    if s.debug {
        m.insert("debug".into(), serde_json::Value::Bool(true));
    }
    serde_json::Value::Object(m).to_string()
}

/// Whether a stored span's attribute fields may hold [`keys::ORIGINAL`]: its text appears in
/// them (a byte search; `false` means surely not).
pub fn may_have_original(attributes: &[u8]) -> bool {
    memchr::memmem::find(attributes, keys::ORIGINAL.as_bytes()).is_some()
}

/// A stored span's attribute fields (the span's field 9 entries, as `SpanRow::attributes`
/// holds them) without [`keys::ORIGINAL`], or `None` when they have none. That attribute is
/// weft's own note for the Zipkin API, which reads it back into the span as sent; every other
/// API (Tempo, Jaeger, OTLP) shows the span as the Collector's mapping left it, and leaves it
/// out. Bytes that do not parse are left as they are (`None`).
pub fn without_original(attributes: &[u8]) -> Option<Vec<u8>> {
    use weft_otlp::request::fields::{KV_KEY, SPAN_ATTRIBUTES};
    use weft_otlp::wire::next_field;
    // Nearly every span has no such attribute: one search, and no walk.
    if !may_have_original(attributes) {
        return None;
    }
    let mut out = Vec::with_capacity(attributes.len());
    let mut found = false;
    let mut pos = 0;
    while pos < attributes.len() {
        let start = pos;
        let (number, wire_type, value) = next_field(attributes, &mut pos).ok()?;
        if number == SPAN_ATTRIBUTES && wire_type == 2 {
            let kv = &attributes[value];
            let mut p = 0;
            let mut key = None;
            while p < kv.len() {
                let (n, t, v) = next_field(kv, &mut p).ok()?;
                if n == KV_KEY && t == 2 {
                    key = Some(&kv[v]);
                }
            }
            if key == Some(keys::ORIGINAL.as_bytes()) {
                found = true;
                continue;
            }
        }
        out.extend_from_slice(&attributes[start..pos]);
    }
    found.then_some(out)
}

/// An annotation as an event. `name|{json attributes}|dropped` (how the Collector's Zipkin
/// exporter writes events with attributes) is read back into the event's attributes.
fn write_annotation(sw: &mut crate::otlp::SpanWriter<'_>, a: &Annotation<'_>) {
    let t = a.timestamp_us.saturating_mul(1000);
    if let Some((name, attrs, dropped)) = split_encoded(&a.value) {
        let vals = json_attrs(attrs);
        if let Some(vals) = vals {
            sw.event(t, name, vals.iter().map(|(k, v)| (k.as_str(), v)), dropped);
            return;
        }
    }
    sw.event(t, &a.value, [], 0);
}

/// Splits `head|{json}|n`: the head, the JSON and n.
fn split_encoded(v: &str) -> Option<(&str, &str, u32)> {
    let first = v.find('|')?;
    let last = v.rfind('|')?;
    if last <= first {
        return None;
    }
    let dropped = v[last + 1..].parse().ok()?;
    Some((&v[..first], &v[first + 1..last], dropped))
}

fn json_attrs(s: &str) -> Option<Vec<(String, Value<'static>)>> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(s).ok()?;
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map {
        let v = match v {
            serde_json::Value::String(s) => Value::Str(Cow::Owned(s)),
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Double(n.as_f64().unwrap_or(0.0)),
            },
            _ => continue,
        };
        out.push((k, v));
    }
    Some(out)
}

/// `otlp.link.N` = `traceid|spanid|tracestate|{json attributes}|dropped`.
fn write_link(sw: &mut crate::otlp::SpanWriter<'_>, v: &str) {
    let mut parts = v.splitn(4, '|');
    let (Some(t), Some(s), Some(ts), Some(rest)) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let (Some(trace), Some(span)) = (crate::parse_hex_id::<16>(t), crate::parse_hex_id::<8>(s)) else {
        return;
    };
    let Some(bar) = rest.rfind('|') else { return };
    let dropped = rest[bar + 1..].parse().unwrap_or(0);
    let attrs = json_attrs(&rest[..bar]).unwrap_or_default();
    sw.link(&trace, &span, ts, attrs.iter().map(|(k, v)| (k.as_str(), v)), dropped);
}

#[cfg(test)]
mod tests;
