//! Zipkin's query semantics over stored spans: which traces `GET /api/v2/traces` returns
//! (Zipkin's `QueryRequest.test`) and the service links of `GET /api/v2/dependencies`
//! (Zipkin's `DependencyLinker`), over spans converted by [`super::out`].

use std::collections::HashMap;

use weft_otlp::pb::trace::TracesData;

use super::Kind;
use super::out::{OutEndpoint, OutSpan, from_otlp};

/// A stored span as Zipkin shows it, with its stored IDs (which differ from Zipkin's for a
/// shared server span: stored, it is a child of its client span).
#[derive(Debug, Clone)]
pub struct TraceSpan {
    pub id: Vec<u8>,
    pub parent: Vec<u8>,
    pub span: OutSpan,
}

/// Every span of a trace (or of several), converted.
pub fn convert(data: &TracesData) -> Vec<TraceSpan> {
    let mut out = Vec::new();
    crate::for_each_span(data, |res, sc, s| {
        out.push(TraceSpan {
            id: s.span_id.to_vec(),
            parent: s.parent_span_id.to_vec(),
            span: from_otlp(res, sc, s),
        });
    });
    out
}

/// The parameters of `GET /api/v2/traces`, normalised as Zipkin normalises them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueryRequest {
    pub service_name: Option<String>,
    pub remote_service_name: Option<String>,
    pub span_name: Option<String>,
    /// `key` → `value` (a tag) or `""` (an annotation or a tag key); in query order.
    pub annotation_query: Vec<(String, String)>,
    /// Microseconds.
    pub min_duration: Option<u64>,
    pub max_duration: Option<u64>,
    /// Milliseconds since the epoch.
    pub end_ts: u64,
    /// Milliseconds.
    pub lookback: u64,
    pub limit: usize,
}

/// Parses `error and http.method=GET` as Zipkin does: terms split on ` and `; `k=v` is a tag
/// (the last one wins), a bare term an annotation or tag key (the first one wins).
pub fn parse_annotation_query(q: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    if q.is_empty() {
        return out;
    }
    for term in q.split(" and ") {
        match term.find('=') {
            None => {
                let t = term.trim().to_owned();
                if !out.iter().any(|(k, _)| *k == t) {
                    out.push((t, String::new()));
                }
            }
            Some(i) => {
                let (k, v) = (term[..i].trim().to_owned(), term[i + 1..].trim().to_owned());
                match out.iter_mut().find(|(ok, _)| *ok == k) {
                    Some(e) => e.1 = v,
                    None => out.push((k, v)),
                }
            }
        }
    }
    out
}

impl QueryRequest {
    /// Checks and normalises the request as Zipkin's `QueryRequest.Builder.build` does: names
    /// lower-cased, `""` and span name `all` mean any.
    pub fn normalise(mut self) -> Result<QueryRequest, String> {
        let norm = |s: Option<String>| s.map(|s| s.to_lowercase()).filter(|s| !s.is_empty());
        self.service_name = norm(self.service_name);
        self.remote_service_name = norm(self.remote_service_name);
        self.span_name = norm(self.span_name).filter(|s| s != "all");
        if self.end_ts == 0 {
            return Err("endTs <= 0".into());
        }
        if self.limit == 0 {
            return Err("limit <= 0".into());
        }
        if self.lookback == 0 {
            return Err("lookback <= 0".into());
        }
        match (self.min_duration, self.max_duration) {
            (Some(0), _) => return Err("minDuration <= 0".into()),
            (Some(min), Some(max)) if max < min => return Err("maxDuration < minDuration".into()),
            (None, Some(_)) => return Err("maxDuration is only valid with minDuration".into()),
            _ => {}
        }
        Ok(self)
    }

    /// The window of span start times (nanoseconds) a matching trace's root can have.
    pub fn window_ns(&self) -> (u64, u64) {
        let end = self.end_ts.saturating_mul(1_000_000);
        (
            end.saturating_sub(self.lookback.saturating_mul(1_000_000)),
            end.saturating_add(999_999),
        )
    }

    /// Whether a trace matches; `Some(its timestamp)` (the root's, else the earliest) if so.
    /// Every condition may be met by a different span of the service.
    pub fn test(&self, spans: &[&OutSpan]) -> Option<u64> {
        let ts = trace_timestamp(spans)?;
        if ts < self.end_ts.saturating_sub(self.lookback).saturating_mul(1000) || ts > self.end_ts.saturating_mul(1000)
        {
            return None;
        }
        let mut tested_duration = self.min_duration.is_none() && self.max_duration.is_none();
        let mut service_found = self.service_name.is_none();
        let mut remote_found = self.remote_service_name.is_none();
        let mut name_found = self.span_name.is_none();
        let mut remaining: Vec<&(String, String)> = self.annotation_query.iter().collect();
        for s in spans {
            if let Some(svc) = &self.service_name
                && s.local_service() != Some(svc.as_str())
            {
                continue;
            }
            service_found = true;
            remaining.retain(|(k, v)| {
                let by_annotation = v.is_empty() && s.annotations.iter().any(|(_, a)| a == k);
                let by_tag = s.tags.get(k).is_some_and(|tv| v.is_empty() || tv == v);
                !(by_annotation || by_tag)
            });
            if !remote_found && self.remote_service_name.as_deref() == s.remote_service() {
                remote_found = true;
            }
            if !name_found && self.span_name.as_deref() == s.name.as_deref() {
                name_found = true;
            }
            if !tested_duration {
                tested_duration = match (self.min_duration, self.max_duration) {
                    (Some(min), Some(max)) => s.duration >= min && s.duration <= max,
                    (Some(min), None) => s.duration >= min,
                    _ => true,
                };
            }
        }
        (service_found && remote_found && name_found && remaining.is_empty() && tested_duration).then_some(ts)
    }
}

/// The root span's timestamp, else the earliest timestamp; `None` when no span has one.
pub fn trace_timestamp(spans: &[&OutSpan]) -> Option<u64> {
    let mut ts = 0u64;
    for s in spans {
        if s.timestamp == 0 {
            continue;
        }
        if s.parent_id.is_none() {
            return Some(s.timestamp);
        }
        if ts == 0 || ts > s.timestamp {
            ts = s.timestamp;
        }
    }
    (ts != 0).then_some(ts)
}

/// A link of `GET /api/v2/dependencies`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub parent: String,
    pub child: String,
    pub call_count: u64,
    pub error_count: u64,
}

impl Link {
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({"parent": self.parent, "child": self.child, "callCount": self.call_count});
        if self.error_count > 0 {
            v["errorCount"] = self.error_count.into();
        }
        v
    }
}

/// Counts service links over traces, as Zipkin's `DependencyLinker`: links between server
/// spans, plus client spans without children (uninstrumented services), spans of no kind with
/// both endpoints as clients, and messaging spans with both sides.
#[derive(Debug, Default)]
pub struct DependencyLinker {
    order: Vec<(String, String)>,
    counts: HashMap<(String, String), (u64, u64)>,
}

struct Node<'s> {
    span: &'s OutSpan,
    parent: Option<usize>,
    children: usize,
}

impl DependencyLinker {
    /// Adds one trace's spans.
    pub fn put_trace(&mut self, spans: &[TraceSpan]) {
        if spans.is_empty() {
            return;
        }
        // The tree, by stored IDs; spans whose parent is missing hang under the root.
        let mut by_id: HashMap<&[u8], usize> = HashMap::with_capacity(spans.len());
        for (i, s) in spans.iter().enumerate() {
            by_id.entry(s.id.as_slice()).or_insert(i);
        }
        let mut nodes: Vec<Node<'_>> = spans
            .iter()
            .map(|s| Node {
                span: &s.span,
                parent: None,
                children: 0,
            })
            .collect();
        let roots: Vec<usize> = (0..spans.len())
            .filter(|&i| {
                let p = &spans[i].parent;
                p.is_empty() || p.iter().all(|b| *b == 0) || !by_id.contains_key(p.as_slice())
            })
            .collect();
        // A single span without a parent is the tree's root; otherwise the root is synthetic
        // and every parentless span hangs under it.
        let real_root = (roots.len() == 1
            && (spans[roots[0]].parent.is_empty() || spans[roots[0]].parent.iter().all(|b| *b == 0)))
        .then(|| roots[0]);
        // A span naming a shared span ID as its parent, with the server side's local endpoint
        // (service, address and port alike), is the server side's child, as Zipkin's span tree
        // places it; any other is the client's. (weft stores the server side under its own ID,
        // as the client's child.)
        let shared: HashMap<(&[u8], Option<&OutEndpoint>), usize> = spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.span.shared && s.span.kind == Some(Kind::Server))
            .map(|(i, s)| ((s.parent.as_slice(), s.span.local.as_ref()), i))
            .collect();
        for i in 0..spans.len() {
            let server = shared.get(&(spans[i].parent.as_slice(), spans[i].span.local.as_ref()));
            if let Some(&p) = server
                .filter(|&&p| p != i)
                .or_else(|| by_id.get(spans[i].parent.as_slice()))
                && p != i
            {
                nodes[i].parent = Some(p);
                nodes[p].children += 1;
            } else if let Some(r) = real_root
                && r != i
            {
                nodes[i].parent = Some(r);
                nodes[r].children += 1;
            }
        }
        // Breadth-first, as Zipkin traverses (the order only changes the links' order).
        let mut order: Vec<usize> = Vec::with_capacity(nodes.len());
        let mut depth = vec![usize::MAX; nodes.len()];
        for i in 0..nodes.len() {
            let mut d = 0;
            let mut cur = nodes[i].parent;
            while let Some(p) = cur {
                d += 1;
                if d > nodes.len() {
                    break;
                }
                cur = nodes[p].parent;
            }
            depth[i] = d;
            order.push(i);
        }
        order.sort_by_key(|&i| (depth[i], nodes[i].span.timestamp));

        for &i in &order {
            let span = nodes[i].span;
            let mut kind = span.kind;
            if kind == Some(Kind::Client) && nodes[i].children > 0 {
                continue;
            }
            let service = span.local_service();
            let remote = span.remote_service();
            if kind.is_none() {
                if service.is_some() && remote.is_some() {
                    kind = Some(Kind::Client);
                } else {
                    continue;
                }
            }
            let kind = kind.expect("set above");
            let (mut parent, child) = match kind {
                Kind::Server | Kind::Consumer => {
                    if Some(i) == real_root && remote.is_none() {
                        continue;
                    }
                    (remote, service)
                }
                Kind::Client | Kind::Producer => (service, remote),
            };
            let mut is_error = span.tags.contains_key("error");
            if matches!(kind, Kind::Producer | Kind::Consumer) {
                if let (Some(p), Some(c)) = (parent, child) {
                    self.add(p, c, is_error);
                }
                continue;
            }
            // Local spans may sit between this span and its remote parent.
            let mut anc = nodes[i].parent;
            let mut remote_ancestor = None;
            let mut guard = 0;
            while let Some(a) = anc {
                if nodes[a].span.kind.is_some() {
                    remote_ancestor = Some(nodes[a].span);
                    break;
                }
                anc = nodes[a].parent;
                guard += 1;
                if guard > nodes.len() {
                    break;
                }
            }
            if let Some(ra) = remote_ancestor
                && let Some(ra_name) = ra.local_service()
            {
                if kind == Kind::Client
                    && let Some(svc) = service
                    && ra_name != svc
                {
                    self.add(ra_name, svc, false);
                }
                if kind == Kind::Server || parent.is_none() {
                    parent = Some(ra_name);
                }
                if !is_error
                    && ra.kind == Some(Kind::Client)
                    && span.parent_id.is_some()
                    && span.parent_id.as_ref() == Some(&ra.id)
                {
                    is_error = ra.tags.contains_key("error");
                }
            }
            if let (Some(p), Some(c)) = (parent, child) {
                self.add(p, c, is_error);
            }
        }
    }

    fn add(&mut self, parent: &str, child: &str, error: bool) {
        let key = (parent.to_owned(), child.to_owned());
        let e = self.counts.entry(key.clone()).or_insert_with(|| {
            self.order.push(key);
            (0, 0)
        });
        e.0 += 1;
        if error {
            e.1 += 1;
        }
    }

    /// The links, in the order first seen.
    pub fn links(&self) -> Vec<Link> {
        self.order
            .iter()
            .map(|k| {
                let (calls, errors) = self.counts[k];
                Link {
                    parent: k.0.clone(),
                    child: k.1.clone(),
                    call_count: calls,
                    error_count: errors,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: Option<&str>, kind: Option<Kind>, svc: &str, remote: Option<&str>) -> TraceSpan {
        let s = OutSpan {
            trace_id: "1".into(),
            id: id.into(),
            parent_id: parent.map(Into::into),
            kind,
            name: Some("op".into()),
            timestamp: 10,
            duration: 5,
            local: Some(super::super::out::OutEndpoint {
                service_name: Some(svc.into()),
                ..Default::default()
            }),
            remote: remote.map(|r| super::super::out::OutEndpoint {
                service_name: Some(r.into()),
                ..Default::default()
            }),
            ..OutSpan::default()
        };
        TraceSpan {
            id: id.as_bytes().to_vec(),
            parent: parent.map(|p| p.as_bytes().to_vec()).unwrap_or_default(),
            span: s,
        }
    }

    #[test]
    fn links_server_spans_and_leaf_clients() {
        // web (server root) → client → api (server) → client to an uninstrumented db.
        let spans = vec![
            span("a", None, Some(Kind::Server), "web", None),
            span("b", Some("a"), Some(Kind::Client), "web", Some("api")),
            span("c", Some("b"), Some(Kind::Server), "api", Some("web")),
            span("d", Some("c"), Some(Kind::Client), "api", Some("db")),
        ];
        let mut l = DependencyLinker::default();
        l.put_trace(&spans);
        let mut links = l.links();
        links.sort_by(|a, b| (&a.parent, &a.child).cmp(&(&b.parent, &b.child)));
        let pairs: Vec<(&str, &str, u64)> = links
            .iter()
            .map(|l| (l.parent.as_str(), l.child.as_str(), l.call_count))
            .collect();
        assert_eq!(pairs, vec![("api", "db", 1), ("web", "api", 1)]);
    }

    #[test]
    fn a_shared_server_span_links_once_and_its_children_hang_under_it() {
        // web's server → web's client "b" → api's server that joined b's ID (stored as "s", the
        // client's child) → api's client to db, naming the shared ID "b" as its parent.
        let mut server = span("s", Some("b"), Some(Kind::Server), "api", None);
        server.span.shared = true;
        let spans = vec![
            span("a", None, Some(Kind::Server), "web", None),
            span("b", Some("a"), Some(Kind::Client), "web", Some("api")),
            server,
            span("d", Some("b"), Some(Kind::Client), "api", Some("db")),
        ];
        let mut l = DependencyLinker::default();
        l.put_trace(&spans);
        let mut pairs: Vec<(String, String, u64)> = l
            .links()
            .into_iter()
            .map(|l| (l.parent, l.child, l.call_count))
            .collect();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![("api".into(), "db".into(), 1), ("web".into(), "api".into(), 1)]
        );
    }

    #[test]
    fn annotation_query_and_test() {
        let q = parse_annotation_query("error and http.method=GET and error and x=1 and x=2");
        assert_eq!(
            q,
            vec![
                ("error".into(), "".into()),
                ("http.method".into(), "GET".into()),
                ("x".into(), "2".into())
            ]
        );
        let mut s = span("a", None, Some(Kind::Server), "web", None).span;
        s.tags.insert("http.method".into(), "GET".into());
        s.tags.insert("x".into(), "2".into());
        s.annotations.push((11, "error".into()));
        let req = QueryRequest {
            service_name: Some("WEB".into()),
            annotation_query: q,
            end_ts: 1,
            lookback: 1,
            limit: 10,
            min_duration: Some(5),
            ..QueryRequest::default()
        }
        .normalise()
        .unwrap();
        assert_eq!(req.test(&[&s]), Some(10));
        s.tags.insert("x".into(), "3".into());
        assert_eq!(req.test(&[&s]), None);
    }
}
