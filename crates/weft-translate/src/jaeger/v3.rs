//! Jaeger v2's `api/v3` view of a trace: OTLP itself, adjusted as Jaeger v2's query service
//! adjusts it before answering (its `StandardAdjusters`), and matched as its storage matches a
//! `FindTraces` query. The adjusters weft applies, in Jaeger's order:
//!
//! - **SortCollections:** attributes of resources, scopes, spans, events and links by key;
//!   events by name (stable).
//! - **DeduplicateSpans:** a span identical to another in the same resource and scope (the same
//!   span received twice) is shown once.
//! - **CorrectClockSkew**, with Jaeger v2's default maximum adjustment of zero: no time is
//!   changed, but a span whose host differs from its parent's and that does not fit inside its
//!   parent gets the warning Jaeger gives (`clock skew adjustment disabled; not applying
//!   calculated delta of -100µs`), as do the spans below it on its host; so do a span whose
//!   parent is not in the trace and a second span with an ID already seen. Warnings are the
//!   `@jaeger@warnings` string-array attribute, as Jaeger v2 writes them.
//! - **NormalizeIPAttributes:** an integer `ip` or `peer.ipv4` attribute becomes dotted text.
//! - **MoveLibraryAttributes:** `telemetry.sdk.*` and `telemetry.distro.*` span attributes move
//!   to the resource unless it has the key with another value.
//! - **RemoveEmptySpanLinks:** links with neither a trace ID nor a span ID are dropped.
//!
//! Not applied (spec/formats/jaeger.md): the renaming of a server span that shares its ID with
//! its client span, which weft's Zipkin receiver already does at ingest.

use std::collections::{HashMap, HashSet};

use prost::Message;
use weft_otlp::pb::common::any_value::Value as V;
use weft_otlp::pb::common::{AnyValue, ArrayValue, KeyValue};
use weft_otlp::pb::trace::TracesData;

/// A `FindTraces` query (`query.*` parameters), times in Unix nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FindQuery {
    /// Empty matches every service.
    pub service: String,
    pub operation: Option<String>,
    pub start_min_ns: u64,
    pub start_max_ns: u64,
    pub duration_min_ns: Option<u64>,
    pub duration_max_ns: Option<u64>,
    /// `query.attributes`: every pair must hold on the span ([`FindQuery::matches`]). Left out of
    /// a job when empty, so jobs without it read as before (`spec/jobs.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<(String, String)>,
}

impl FindQuery {
    /// Whether one span meets every condition at once: its resource's service, its name, its
    /// start within the range, its duration within bounds and every attribute pair (Jaeger
    /// v2's `validTrace`).
    ///
    /// Attribute pairs are compared as text (pdata's `AsString`). Keys with a meaning of their
    /// own, as Jaeger's storage reads them: `error` (`true`: the span's status is ERROR;
    /// `false`: it is not; anything else matches nothing), `span.status` (OK, ERROR, else
    /// UNSET), `span.kind`, `scope.name`, `scope.version`, and `resource.<key>` (that resource
    /// attribute). Any other key matches an attribute of the span, its scope, its resource, or
    /// one of its events or links.
    pub fn matches(&self, td: &TracesData) -> bool {
        td.resource_spans.iter().any(|rs| {
            let res: &[KeyValue] = rs.resource.as_ref().map_or(&[], |r| &r.attributes);
            let svc = res
                .iter()
                .find(|a| a.key == "service.name")
                .and_then(|a| match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(V::StringValue(s)) => Some(s.as_str()),
                    _ => None,
                })
                .unwrap_or("");
            (self.service.is_empty() || self.service == svc)
                && rs.scope_spans.iter().any(|ss| {
                    ss.spans.iter().any(|s| {
                        let d = s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano);
                        self.operation.as_ref().is_none_or(|o| *o == s.name)
                            && s.start_time_unix_nano >= self.start_min_ns
                            && s.start_time_unix_nano <= self.start_max_ns
                            && self.duration_min_ns.is_none_or(|m| d >= m)
                            && self.duration_max_ns.is_none_or(|m| d <= m)
                            && self
                                .attributes
                                .iter()
                                .all(|(k, v)| attribute_holds(k, v, res, ss.scope.as_ref(), s))
                    })
                })
        })
    }
}

/// One `query.attributes` pair on one span (see [`FindQuery::matches`]).
fn attribute_holds(
    key: &str,
    want: &str,
    res: &[KeyValue],
    scope: Option<&weft_otlp::pb::common::InstrumentationScope>,
    s: &weft_otlp::pb::trace::Span,
) -> bool {
    let has = |attrs: &[KeyValue]| {
        attrs
            .iter()
            .find(|a| a.key == key)
            .is_some_and(|a| crate::zipkin::out::value_text(a.value.as_ref()) == want)
    };
    let code = s.status.as_ref().map_or(0, |st| st.code);
    match key {
        "error" => match go_parse_bool(want) {
            Some(true) => code == 2,
            Some(false) => code != 2,
            None => false,
        },
        "span.status" => {
            let want = match want.to_ascii_uppercase().as_str() {
                "OK" => 1,
                "ERROR" => 2,
                _ => 0,
            };
            code == want
        }
        "span.kind" => {
            let want = match want.to_ascii_uppercase().as_str() {
                "INTERNAL" => 1,
                "SERVER" => 2,
                "CLIENT" => 3,
                "PRODUCER" => 4,
                "CONSUMER" => 5,
                _ => 0,
            };
            s.kind == want
        }
        "scope.name" => scope.map_or("", |sc| sc.name.as_str()) == want,
        "scope.version" => scope.map_or("", |sc| sc.version.as_str()) == want,
        _ => match key.strip_prefix("resource.") {
            Some(k) => res
                .iter()
                .find(|a| a.key == k)
                .is_some_and(|a| crate::zipkin::out::value_text(a.value.as_ref()) == want),
            None => {
                has(&s.attributes)
                    || scope.is_some_and(|sc| has(&sc.attributes))
                    || has(res)
                    || s.events.iter().any(|e| has(&e.attributes))
                    || s.links.iter().any(|l| has(&l.attributes))
            }
        },
    }
}

/// Go's `strconv.ParseBool`.
pub fn go_parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

fn sort_attrs(a: &mut [KeyValue]) {
    a.sort_by(|x, y| x.key.cmp(&y.key));
}

fn is_library_key(k: &str) -> bool {
    matches!(
        k,
        "telemetry.sdk.language"
            | "telemetry.sdk.name"
            | "telemetry.sdk.version"
            | "telemetry.distro.name"
            | "telemetry.distro.version"
    )
}

fn normalize_ip(attrs: &mut [KeyValue]) {
    for a in attrs.iter_mut().filter(|a| a.key == "ip" || a.key == "peer.ipv4") {
        if let Some(v) = a.value.as_mut()
            && let Some(V::IntValue(n)) = v.value
        {
            let ip = std::net::Ipv4Addr::from((n as u64 & 0xffff_ffff) as u32);
            v.value = Some(V::StringValue(ip.to_string()));
        }
    }
}

/// The attribute Jaeger v2 keeps a span's warnings in.
pub const WARNINGS_KEY: &str = "@jaeger@warnings";

/// Appends a warning to a span's `@jaeger@warnings` (Jaeger's `jptrace.AddWarnings`).
fn add_warning(attrs: &mut Vec<KeyValue>, w: String) {
    let w = AnyValue {
        value: Some(V::StringValue(w)),
    };
    if let Some(kv) = attrs.iter_mut().find(|a| a.key == WARNINGS_KEY)
        && let Some(AnyValue {
            value: Some(V::ArrayValue(arr)),
        }) = kv.value.as_mut()
    {
        arr.values.push(w);
        return;
    }
    attrs.push(KeyValue {
        key: WARNINGS_KEY.into(),
        value: Some(AnyValue {
            value: Some(V::ArrayValue(ArrayValue { values: vec![w] })),
        }),
    });
}

/// A duration as Go's `time.Duration.String` writes it (`1.5ms`, `-100µs`, `1h0m2s`).
pub fn go_duration(d: i64) -> String {
    fn frac(v: u64, unit: u64, width: usize) -> String {
        let (int, rem) = (v / unit, v % unit);
        if rem == 0 {
            return int.to_string();
        }
        let digits = format!("{rem:0width$}");
        format!("{int}.{}", digits.trim_end_matches('0'))
    }
    if d == 0 {
        return "0s".into();
    }
    let u = d.unsigned_abs();
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 1_000, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 1_000_000, 6))
    } else {
        let (h, m) = (u / 3_600_000_000_000, (u / 60_000_000_000) % 60);
        let mut out = String::new();
        if h > 0 {
            out.push_str(&format!("{h}h"));
        }
        if h > 0 || m > 0 {
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{}s", frac(u % 60_000_000_000, 1_000_000_000, 9)));
        out
    };
    if d < 0 { format!("-{body}") } else { body }
}

/// Jaeger's host key of a resource: `host.id`, else `host.ip` (text, or the first of a list),
/// else `host.name`.
fn host_key(attrs: &[KeyValue]) -> String {
    let get = |k: &str| {
        attrs
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.as_ref()?.value.as_ref())
    };
    let text = |v: &V| match v {
        V::StringValue(s) => s.clone(),
        V::IntValue(i) => i.to_string(),
        V::DoubleValue(d) => d.to_string(),
        V::BoolValue(b) => b.to_string(),
        _ => String::new(),
    };
    match (get("host.id"), get("host.ip"), get("host.name")) {
        (Some(V::StringValue(s)), _, _) => s.clone(),
        (_, Some(V::StringValue(s)), _) => s.clone(),
        (_, Some(V::ArrayValue(a)), _) if !a.values.is_empty() => {
            a.values[0].value.as_ref().map(text).unwrap_or_default()
        }
        (_, _, Some(V::StringValue(s))) => s.clone(),
        _ => String::new(),
    }
}

/// CorrectClockSkew with a maximum adjustment of zero: the warnings it gives, nothing moved.
fn clock_skew_warnings(td: &mut TracesData) {
    // (resource, scope, span) of each span; the first span of each ID is its node.
    struct Node {
        at: (usize, usize, usize),
        host: String,
        start: i64,
        end: i64,
        children: Vec<usize>,
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut by_id: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut warnings: Vec<((usize, usize, usize), String)> = Vec::new();
    for (ri, rs) in td.resource_spans.iter().enumerate() {
        let host = host_key(rs.resource.as_ref().map_or(&[][..], |r| &r.attributes));
        for (si, ss) in rs.scope_spans.iter().enumerate() {
            for (pi, s) in ss.spans.iter().enumerate() {
                if by_id.contains_key(&s.span_id[..]) {
                    warnings.push((
                        (ri, si, pi),
                        "duplicate span IDs; skipping clock skew adjustment".into(),
                    ));
                    continue;
                }
                by_id.insert(s.span_id.to_vec(), nodes.len());
                nodes.push(Node {
                    at: (ri, si, pi),
                    host: host.clone(),
                    start: s.start_time_unix_nano as i64,
                    end: s.end_time_unix_nano as i64,
                    children: Vec::new(),
                });
            }
        }
    }
    let span = |td: &TracesData, at: (usize, usize, usize)| -> Vec<u8> {
        td.resource_spans[at.0].scope_spans[at.1].spans[at.2]
            .parent_span_id
            .to_vec()
    };
    let mut roots = Vec::new();
    for i in 0..nodes.len() {
        let parent = span(td, nodes[i].at);
        if parent.iter().all(|b| *b == 0) {
            roots.push(i);
        } else if let Some(&p) = by_id.get(&parent) {
            nodes[p].children.push(i);
        } else {
            warnings.push((
                nodes[i].at,
                format!(
                    "parent span ID={} is not in the trace; skipping clock skew adjustment",
                    parent.iter().map(|b| format!("{b:02x}")).collect::<String>()
                ),
            ));
            roots.push(i);
        }
    }
    let skew_of = |c: &Node, p: &Node| -> i64 {
        let (pd, cd) = (p.end - p.start, c.end - c.start);
        if cd > pd {
            return if c.start < p.start { p.start - c.start } else { 0 };
        }
        if c.start >= p.start && c.end <= p.end {
            return 0;
        }
        p.start + (pd - cd) / 2 - c.start
    };
    // Depth first without recursion: (node, parent, the skew's host, the skew).
    let mut stack: Vec<(usize, Option<usize>, String, i64)> =
        roots.iter().map(|&r| (r, None, nodes[r].host.clone(), 0)).collect();
    while let Some((n, parent, mut host, mut delta)) = stack.pop() {
        if let Some(p) = parent
            && (nodes[n].host != host || nodes[n].host.is_empty())
        {
            host = nodes[n].host.clone();
            delta = skew_of(&nodes[n], &nodes[p]);
        }
        if delta != 0 {
            warnings.push((
                nodes[n].at,
                format!(
                    "clock skew adjustment disabled; not applying calculated delta of {}",
                    go_duration(delta)
                ),
            ));
        }
        for &c in nodes[n].children.iter().rev() {
            stack.push((c, Some(n), host.clone(), delta));
        }
    }
    for ((ri, si, pi), w) in warnings {
        add_warning(&mut td.resource_spans[ri].scope_spans[si].spans[pi].attributes, w);
    }
}

/// Applies the adjusters above, in place.
pub fn adjust(td: &mut TracesData) {
    // SortCollections and DeduplicateSpans, then CorrectClockSkew (its warnings come after the
    // sorted attributes, as in Jaeger), then the rest.
    for rs in &mut td.resource_spans {
        for ss in &mut rs.scope_spans {
            // DeduplicateSpans: identical spans (same encoding) are one span.
            let mut seen = HashSet::new();
            ss.spans.retain(|s| seen.insert(s.encode_to_vec()));
            for s in &mut ss.spans {
                sort_attrs(&mut s.attributes);
            }
        }
    }
    clock_skew_warnings(td);
    for rs in &mut td.resource_spans {
        let res = rs.resource.get_or_insert_with(Default::default);
        for ss in &mut rs.scope_spans {
            for s in &mut ss.spans {
                normalize_ip(&mut s.attributes);
                // MoveLibraryAttributes.
                let mut i = 0;
                while i < s.attributes.len() {
                    let k = &s.attributes[i].key;
                    if is_library_key(k) {
                        match res.attributes.iter().find(|r| r.key == *k) {
                            Some(r) if r.value != s.attributes[i].value => i += 1,
                            Some(_) => {
                                s.attributes.remove(i);
                            }
                            None => res.attributes.push(s.attributes.remove(i)),
                        }
                    } else {
                        i += 1;
                    }
                }
                // RemoveEmptySpanLinks.
                s.links
                    .retain(|l| l.trace_id.iter().any(|b| *b != 0) || l.span_id.iter().any(|b| *b != 0));
                s.events.sort_by(|a, b| a.name.cmp(&b.name));
                for e in &mut s.events {
                    sort_attrs(&mut e.attributes);
                }
                for l in &mut s.links {
                    sort_attrs(&mut l.attributes);
                }
            }
            if let Some(sc) = ss.scope.as_mut() {
                sort_attrs(&mut sc.attributes);
            }
        }
        normalize_ip(&mut res.attributes);
        sort_attrs(&mut res.attributes);
    }
}

/// Jaeger's `TraceSummary` (`GET /api/v3/trace-summaries`) of one trace, computed as Jaeger
/// computes it from the adjusted trace: every span counted, per service too; an error is status
/// ERROR; the root is the earliest-starting span without a parent; an orphan is a span whose
/// parent is not in the trace. Written as gogo's `jsonpb` writes the message: lowerCamelCase
/// names, fixed64 times as decimal strings, and fields at their default value left out.
pub fn summary(td: &TracesData) -> serde_json::Value {
    use serde_json::{Map, Value as Json, json};
    let mut ids = HashSet::new();
    for s in td
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        ids.insert(&s.span_id[..]);
    }
    let mut trace_id: &[u8] = &[];
    let (mut spans, mut errors, mut orphans) = (0u64, 0u64, 0u64);
    let (mut min_start, mut max_end) = (None::<u64>, None::<u64>);
    let mut root: Option<(u64, &str, &str)> = None;
    let mut services: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for rs in &td.resource_spans {
        let svc = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .and_then(|a| match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(V::StringValue(s)) => Some(s.as_str()),
                _ => None,
            })
            .unwrap_or("");
        for s in rs.scope_spans.iter().flat_map(|ss| &ss.spans) {
            if trace_id.is_empty() {
                trace_id = &s.trace_id;
            }
            let entry = services.entry(svc).or_default();
            entry.0 += 1;
            spans += 1;
            if s.status.as_ref().is_some_and(|st| st.code == 2) {
                entry.1 += 1;
                errors += 1;
            }
            min_start = Some(min_start.map_or(s.start_time_unix_nano, |m| m.min(s.start_time_unix_nano)));
            max_end = Some(max_end.map_or(s.end_time_unix_nano, |m| m.max(s.end_time_unix_nano)));
            if s.parent_span_id.iter().all(|b| *b == 0) {
                if root.is_none_or(|(t, _, _)| s.start_time_unix_nano < t) {
                    root = Some((s.start_time_unix_nano, svc, s.name.as_str()));
                }
            } else if !ids.contains(&s.parent_span_id[..]) {
                orphans += 1;
            }
        }
    }
    let mut out = Map::new();
    out.insert("traceId".into(), json!(weft_core::hex(trace_id)));
    let mut put = |k: &str, v: Json, default: bool| {
        if !default {
            out.insert(k.into(), v);
        }
    };
    let (root_svc, root_op) = root.map_or(("", ""), |(_, s, o)| (s, o));
    put("rootServiceName", json!(root_svc), root_svc.is_empty());
    put("rootOperationName", json!(root_op), root_op.is_empty());
    let (min_start, max_end) = (min_start.unwrap_or(0), max_end.unwrap_or(0));
    put("minStartTimeUnixNano", json!(min_start.to_string()), min_start == 0);
    put("maxEndTimeUnixNano", json!(max_end.to_string()), max_end == 0);
    put("spanCount", json!(spans), spans == 0);
    put("errorSpanCount", json!(errors), errors == 0);
    put("orphanSpanCount", json!(orphans), orphans == 0);
    let services: Vec<Json> = services
        .into_iter()
        .map(|(name, (n, e))| {
            let mut m = Map::new();
            if !name.is_empty() {
                m.insert("name".into(), json!(name));
            }
            if n != 0 {
                m.insert("spanCount".into(), json!(n));
            }
            if e != 0 {
                m.insert("errorSpanCount".into(), json!(e));
            }
            Json::Object(m)
        })
        .collect();
    put("services", Json::Array(services.clone()), services.is_empty());
    Json::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_otlp::pb::common::AnyValue;
    use weft_otlp::pb::resource::Resource;
    use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, span};

    fn kv(k: &str, v: V) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
    }

    fn data() -> TracesData {
        let span = Span {
            trace_id: vec![1; 16].into(),
            span_id: vec![2; 8].into(),
            name: "GET /".into(),
            start_time_unix_nano: 1_000,
            end_time_unix_nano: 5_000,
            attributes: vec![
                kv("z", V::IntValue(1)),
                kv("telemetry.sdk.name", V::StringValue("opentelemetry".into())),
                kv("ip", V::IntValue(0x0a000001)),
                kv("a", V::BoolValue(true)),
            ],
            events: vec![
                span::Event {
                    name: "b".into(),
                    ..Default::default()
                },
                span::Event {
                    name: "a".into(),
                    ..Default::default()
                },
            ],
            links: vec![span::Link::default()],
            ..Default::default()
        };
        TracesData {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", V::StringValue("web".into()))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![span.clone(), span],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn adjusted_as_jaeger_v2_adjusts() {
        let mut td = data();
        adjust(&mut td);
        let rs = &td.resource_spans[0];
        let keys = |a: &[KeyValue]| a.iter().map(|k| k.key.clone()).collect::<Vec<_>>();
        assert_eq!(
            keys(&rs.resource.as_ref().unwrap().attributes),
            ["service.name", "telemetry.sdk.name"]
        );
        let spans = &rs.scope_spans[0].spans;
        assert_eq!(spans.len(), 1, "the duplicate is shown once");
        assert_eq!(keys(&spans[0].attributes), ["a", "ip", "z"]);
        let ip = spans[0].attributes[1].value.as_ref().unwrap().value.clone();
        assert_eq!(ip, Some(V::StringValue("10.0.0.1".into())));
        assert_eq!(
            spans[0].events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(spans[0].links.is_empty());
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        for (ns, text) in [
            (0, "0s"),
            (1, "1ns"),
            (-100_000, "-100µs"),
            (1_500, "1.5µs"),
            (2_500_000, "2.5ms"),
            (1_000_000_000, "1s"),
            (61_500_000_000, "1m1.5s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_602_000_000_001, "1h0m2.000000001s"),
        ] {
            assert_eq!(go_duration(ns), text);
        }
    }

    #[test]
    fn clock_skew_warns_without_moving() {
        let mut td = data();
        let rs = &mut td.resource_spans[0];
        let spans = &mut rs.scope_spans[0].spans;
        spans[1].span_id = vec![3; 8].into();
        spans[1].parent_span_id = vec![2; 8].into();
        // The child does not fit in its parent: [2000, 6000] centred in [1000, 5000] would
        // start at 1000 + (4000 - 4000) / 2, a delta of -1000 ns.
        spans[1].start_time_unix_nano = 2_000;
        spans[1].end_time_unix_nano = 6_000;
        let mut orphan = spans[1].clone();
        orphan.span_id = vec![4; 8].into();
        orphan.parent_span_id = vec![9; 8].into();
        spans.push(orphan);
        adjust(&mut td);
        let warn = |i: usize| {
            td.resource_spans[0].scope_spans[0].spans[i]
                .attributes
                .iter()
                .find(|a| a.key == WARNINGS_KEY)
                .map(|a| format!("{:?}", a.value))
        };
        assert_eq!(warn(0), None);
        assert!(
            warn(1).unwrap().contains("not applying calculated delta of -1µs"),
            "{:?}",
            warn(1)
        );
        assert!(
            warn(2)
                .unwrap()
                .contains("parent span ID=0909090909090909 is not in the trace")
        );
        assert_eq!(td.resource_spans[0].scope_spans[0].spans[1].start_time_unix_nano, 2_000);
    }

    #[test]
    fn find_matches_one_span_at_a_time() {
        let td = data();
        let q = FindQuery {
            service: "web".into(),
            start_max_ns: u64::MAX,
            ..Default::default()
        };
        assert!(q.matches(&td));
        assert!(
            FindQuery {
                service: String::new(),
                ..q.clone()
            }
            .matches(&td)
        );
        assert!(
            !FindQuery {
                service: "db".into(),
                ..q.clone()
            }
            .matches(&td)
        );
        assert!(
            !FindQuery {
                operation: Some("POST /".into()),
                ..q.clone()
            }
            .matches(&td)
        );
        assert!(
            FindQuery {
                duration_min_ns: Some(4_000),
                ..q.clone()
            }
            .matches(&td)
        );
        assert!(
            !FindQuery {
                duration_min_ns: Some(4_001),
                ..q.clone()
            }
            .matches(&td)
        );
        assert!(
            !FindQuery {
                start_min_ns: 1_001,
                ..q.clone()
            }
            .matches(&td)
        );
        assert!(!FindQuery { start_max_ns: 999, ..q }.matches(&td));
    }

    #[test]
    fn attributes_match_as_jaegers_storage_reads_them() {
        let mut td = data();
        let s = &mut td.resource_spans[0].scope_spans[0].spans[0];
        s.kind = 2;
        s.status = Some(weft_otlp::pb::trace::Status {
            code: 2,
            ..Default::default()
        });
        s.events[0].attributes.push(kv("retry", V::IntValue(3)));
        td.resource_spans[0].scope_spans[0].spans.truncate(1);
        td.resource_spans[0].scope_spans[0].scope = Some(weft_otlp::pb::common::InstrumentationScope {
            name: "lib".into(),
            version: "1.2".into(),
            ..Default::default()
        });
        let q = |pairs: &[(&str, &str)]| FindQuery {
            start_max_ns: u64::MAX,
            attributes: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        };
        for (pairs, want) in [
            (&[("z", "1")][..], true),
            (&[("z", "2")], false),
            (&[("a", "true")], true),
            (&[("service.name", "web")], true),
            (&[("resource.service.name", "web")], true),
            (&[("resource.z", "1")], false),
            (&[("retry", "3")], true),
            (&[("error", "true")], true),
            (&[("error", "t")], true),
            (&[("error", "false")], false),
            (&[("error", "maybe")], false),
            (&[("span.status", "error")], true),
            (&[("span.status", "OK")], false),
            (&[("span.kind", "server")], true),
            (&[("span.kind", "CLIENT")], false),
            (&[("scope.name", "lib")], true),
            (&[("scope.version", "1.3")], false),
            (&[("z", "1"), ("a", "true"), ("span.kind", "SERVER")], true),
            (&[("z", "1"), ("a", "false")], false),
            (&[("missing", "")], false),
        ] {
            assert_eq!(q(pairs).matches(&td), want, "{pairs:?}");
        }
    }

    #[test]
    fn a_summary_counts_as_jaeger_does_and_leaves_defaults_out() {
        let span = |id: u8, parent: u8, start: u64, end: u64, err: bool, name: &str| Span {
            trace_id: vec![0xab; 16].into(),
            span_id: vec![id; 8].into(),
            parent_span_id: if parent == 0 { Vec::new() } else { vec![parent; 8] }.into(),
            name: name.into(),
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            status: err.then(|| weft_otlp::pb::trace::Status {
                code: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let rs = |svc: &str, spans: Vec<Span>| ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", V::StringValue(svc.into()))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        };
        let td = TracesData {
            resource_spans: vec![
                rs(
                    "web",
                    vec![
                        span(2, 1, 150, 900, false, "render"),
                        span(1, 0, 100, 1_000, false, "GET /"),
                    ],
                ),
                rs(
                    "db",
                    vec![
                        span(3, 2, 200, 300, true, "SELECT"),
                        span(4, 9, 50, 2_000, true, "lost"),
                    ],
                ),
                // A second parentless span that starts later is not the root.
                rs("cron", vec![span(5, 0, 120, 130, false, "tick")]),
            ],
        };
        let got = summary(&td);
        assert_eq!(
            got,
            serde_json::json!({
                "traceId": "abababababababababababababababab",
                "rootServiceName": "web",
                "rootOperationName": "GET /",
                "minStartTimeUnixNano": "50",
                "maxEndTimeUnixNano": "2000",
                "spanCount": 5,
                "errorSpanCount": 2,
                "orphanSpanCount": 1,
                "services": [
                    {"name": "cron", "spanCount": 1},
                    {"name": "db", "spanCount": 2, "errorSpanCount": 2},
                    {"name": "web", "spanCount": 2},
                ],
            })
        );
    }
}
