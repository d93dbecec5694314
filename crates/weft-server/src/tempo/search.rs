//! Tempo's search and tag endpoints: `/api/search`, `/api/search/tags`,
//! `/api/v2/search/tags`, `/api/search/tag/{tag}/values`, `/api/v2/search/tag/{tag}/values`.

use crate::app::AppState;
use crate::query::jobs::{SearchJob, SearchJobReply, SearchSink};
use crate::query::*;
use crate::tempo::json::{self as tempo, Inspected};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;
use weft_engine::search::{Hit, ScanProgress, Search, SearchParams, TagNames, TagScope, TraceSink};
use weft_engine::tags::ColumnTagNames;
use weft_querier::scan::{ScanStats, Window};
use weft_traceql::Query as TraceQl;
use weft_traceql::ast::Stage;

/// `GET /api/search`.
pub async fn search(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    let started = Instant::now();
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let (hits, stats, progress) = match run_search(&st, &tenant, &p).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    st.search_latency.observe(started.elapsed().as_secs_f64());
    let m = inspected(&stats, &st, &tenant).with_jobs(progress);
    json_text_scanned(tempo::search_response_body(hits, &m), &stats)
}

/// A search's answer: its hits, what it inspected, and its scan's last progress report (for
/// the job counts of Tempo's metrics).
pub(crate) type Searched = (Vec<Hit>, ScanStats, Option<ScanProgress>);

/// A search with Tempo's parameters (`q` or `tags`, `limit`, `spss`, `minDuration`,
/// `maxDuration`, `start`, `end`), or the error reply.
pub(crate) async fn run_search(st: &AppState, tenant: &str, p: &HashMap<String, String>) -> Result<Searched, Response> {
    run_search_progress(st, tenant, p, Arc::default()).await
}

/// What a running search has published for a streamed reply ([`run_search_progress`]).
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// The hits so far (at most 100 ms old).
    pub hits: Vec<Hit>,
    /// The scan's last progress report, if it told one yet.
    pub progress: Option<ScanProgress>,
}

/// [`run_search`], publishing into `progress` the hits found so far (at most every 100 ms)
/// and how far the scan has got, for progressive results.
pub(crate) async fn run_search_progress(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
    progress: Arc<parking_lot::Mutex<Published>>,
) -> Result<Searched, Response> {
    let (sink, window) = search_request(p).map_err(|r| *r)?;
    let mut sink = Progress {
        inner: sink,
        out: progress,
        last: Instant::now(),
        progress: None,
    };
    if let Some(peers) = &st.peers {
        let request = SearchJob::of(p.clone(), None);
        match crate::query::jobs::search(st, peers, tenant, &request, window, &mut sink).await? {
            Some(stats) => return Ok((sink.inner.finish(), stats, sink.progress)),
            // The queriers' block lists and this one's differ: read it all here.
            None => {
                sink.inner = search_request(p).map_err(|r| *r)?.0;
                sink.progress = None;
                sink.out.lock().progress = None;
            }
        }
    }
    let stats = run_scan(st, tenant, window, &mut sink).await?;
    Ok((sink.inner.finish(), stats, sink.progress))
}

/// The search Tempo's `/api/search` parameters ask for (`q` or `tags`, `limit`, `spss`,
/// `minDuration`, `maxDuration`) and its window (`start`, `end`), or the 400 reply.
pub(crate) fn search_request(p: &HashMap<String, String>) -> Result<(Search, Option<Window>), Box<Response>> {
    let q = match (param(p, "q"), param(p, "tags")) {
        (Some(q), _) => q.to_owned(),
        (None, Some(tags)) => match logfmt_to_traceql(tags) {
            Ok(q) => q,
            Err(e) => return Err(Box::new(bad(e))),
        },
        (None, None) => "{ }".to_owned(),
    };
    let query = match parse_query(&q) {
        Ok(q) => q,
        Err(e) => return Err(Box::new(bad(e))),
    };
    // `zero`: what 0 means (Tempo: `spss=0` is unlimited, `limit=0` an error).
    let num = |k: &str, default: usize, max: usize, zero: Option<usize>| -> Result<usize, String> {
        match param(p, k) {
            None => Ok(default),
            Some(s) => match (s.parse::<usize>(), zero) {
                (Ok(0), Some(z)) => Ok(z),
                (Ok(n), _) if n > 0 => Ok(n.min(max)),
                _ => Err(format!("invalid {k} {s:?}: expected a positive integer")),
            },
        }
    };
    let dur = |k: &str| param(p, k).map(parse_duration).transpose();
    let params = match (
        num("limit", 20, MAX_LIMIT, None),
        num("spss", 3, MAX_SPSS, Some(MAX_SPSS)),
        dur("minDuration"),
        dur("maxDuration"),
    ) {
        (Ok(limit), Ok(spss), Ok(min), Ok(max)) => SearchParams {
            limit,
            spans_per_spanset: spss,
            min_duration_ns: min,
            max_duration_ns: max,
        },
        (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => return Err(Box::new(bad(e))),
    };
    if let (Some(min), Some(max)) = (params.min_duration_ns, params.max_duration_ns)
        && min > max
    {
        return Err(Box::new(bad(
            "invalid duration range: minDuration is greater than maxDuration",
        )));
    }
    let window = match search_window(p) {
        Ok(w) => w,
        Err(e) => return Err(Box::new(bad(e))),
    };
    match Search::new(&query, params) {
        Ok(s) => Ok((s, window)),
        Err(e) => Err(Box::new(eval_error(e))),
    }
}

/// A search sink that publishes its hits so far now and then, and its scan's progress.
pub(crate) struct Progress {
    inner: Search,
    out: Arc<parking_lot::Mutex<Published>>,
    last: Instant,
    progress: Option<ScanProgress>,
}

impl TraceSink for Progress {
    fn prefilter(&self) -> &weft_engine::prefilter::Prefilter {
        self.inner.prefilter()
    }

    fn start_floor(&self) -> Option<u64> {
        self.inner.start_floor()
    }

    fn offer(&mut self, rows: &[weft_block::row::SpanRow]) {
        self.inner.offer(rows);
        self.publish();
    }

    fn done(&self) -> bool {
        self.inner.done()
    }

    fn fork(&self) -> Option<Box<dyn weft_engine::search::TracePart>> {
        TraceSink::fork(&self.inner)
    }

    fn merge(&mut self, part: Box<dyn weft_engine::search::TracePart>) {
        TraceSink::merge(&mut self.inner, part);
        self.publish();
    }

    fn progress(&mut self, p: ScanProgress) {
        self.progress = Some(p);
        if self.streamed() {
            self.out.lock().progress = Some(p);
        }
    }
}

/// As [`Search`]'s, publishing the merged hits.
impl SearchSink for Progress {
    type Hit = Hit;
    type Local = Search;

    fn hit_id(h: &Hit) -> [u8; 16] {
        h.trace_id
    }

    fn merge_hits(&mut self, hits: Vec<Hit>) {
        self.inner.merge_hits(hits);
        self.publish();
    }

    fn template(&self) -> Search {
        SearchSink::template(&self.inner)
    }

    fn local(template: &Search, floor: u64) -> Search {
        <Search as SearchSink>::local(template, floor)
    }

    fn local_hits(local: Search) -> Vec<Hit> {
        <Search as SearchSink>::local_hits(local)
    }

    fn reply_hits(r: &mut SearchJobReply) -> Result<Vec<Hit>, String> {
        <Search as SearchSink>::reply_hits(r)
    }
}

impl Progress {
    /// Publishes the hits so far, at most every 100 ms, when a streaming reply is waiting.
    fn publish(&mut self) {
        if self.last.elapsed() >= std::time::Duration::from_millis(100) && self.streamed() {
            self.out.lock().hits = self.inner.hits_so_far();
            self.last = Instant::now();
        }
    }

    /// Whether a streamed reply reads what this search publishes.
    fn streamed(&self) -> bool {
        Arc::strong_count(&self.out) > 1
    }
}

/// The intrinsics listed under the `intrinsic` scope of `/api/v2/search/tags`: Tempo's list.
pub(crate) const INTRINSICS: &[&str] = &[
    "duration",
    "event:name",
    "event:timeSinceStart",
    "instrumentation:name",
    "instrumentation:version",
    "kind",
    "name",
    "rootName",
    "rootServiceName",
    "span:duration",
    "span:kind",
    "span:name",
    "span:status",
    "span:statusMessage",
    "status",
    "statusMessage",
    "trace:duration",
    "trace:rootName",
    "trace:rootService",
    "traceDuration",
];

/// A filter query from `q`, for the tag endpoints. Grafana sends the query being typed, which
/// is often incomplete; an unparseable `q` filters nothing rather than failing autocomplete.
pub(crate) fn filter_query(p: &HashMap<String, String>) -> TraceQl {
    param(p, "q")
        .and_then(|q| parse_query(q).ok())
        .filter(|q| !q.pipeline.stages.iter().any(|s| matches!(s, Stage::Metrics(_))))
        .unwrap_or_else(|| weft_traceql::parse("{ }").expect("valid"))
}

/// Attribute keys per scope of the spans matching `q` in the window. Without a filter they are
/// read from columns (`weft_engine::tags`), otherwise from whole traces.
pub(crate) async fn collect_tags(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
) -> Result<Found<BTreeMap<TagScope, BTreeSet<String>>>, Response> {
    let window = search_window(p).map_err(bad)?;
    let query = filter_query(p);
    let split = match &st.peers {
        Some(peers) => crate::query::jobs::tags::tag_names(st, peers, tenant, &query, window, MAX_TAGS).await?,
        None => None,
    };
    let mut found = if let Some(found) = split {
        found
    } else if let Some(mut sink) = ColumnTagNames::new(&query, window, MAX_TAGS) {
        let stats = run_column_scan(st, tenant, window, &mut sink).await?;
        Found::keys(sink.keys, stats, sink.jobs)
    } else {
        let mut sink = TagNames::new(&query, MAX_TAGS).map_err(eval_error)?;
        let stats = run_scan(st, tenant, window, &mut sink).await?;
        Found::keys(sink.keys, stats, sink.jobs)
    };
    // weft's note for the Zipkin API is no attribute of the span's to offer (api::shown).
    if let Some(span) = found.list.get_mut(&TagScope::Span) {
        span.remove(weft_translate::zipkin::keys::ORIGINAL);
    }
    Ok(found)
}

/// What the tag-name lookups answer, over HTTP and the streaming gRPC API alike: per scope,
/// its keys (v1 answers them as one list), and what was read; `None` for v1's intrinsics,
/// which it answers with empty metrics.
pub(crate) struct TagNamesAnswer {
    pub scopes: Vec<(String, Vec<String>)>,
    pub metrics: Option<Inspected>,
    pub stats: ScanStats,
}

impl TagNamesAnswer {
    /// The keys of every scope as v1 answers them: one list, sorted, without repeats.
    pub fn one_list(&self) -> Vec<String> {
        let all: BTreeSet<&String> = self.scopes.iter().flat_map(|(_, keys)| keys).collect();
        all.into_iter().cloned().collect()
    }
}

/// The scopes a tag-name lookup asks for (`scope`): v2 names `intrinsic` as a scope of its
/// own, v1 answers it alone. An error names the scope that is not one.
pub(crate) fn tag_name_scopes(p: &HashMap<String, String>, v2: bool) -> Result<Vec<&'static str>, String> {
    const V2: [&str; 6] = ["resource", "span", "event", "link", "instrumentation", "intrinsic"];
    match param(p, "scope") {
        None | Some("all") if v2 => Ok(V2.to_vec()),
        None | Some("all") => Ok(TagScope::ALL.iter().map(|s| s.name()).collect()),
        Some("intrinsic") => Ok(vec!["intrinsic"]),
        Some(s) => match TagScope::parse(s) {
            Some(scope) => Ok(vec![scope.name()]),
            None if v2 => Err(format!(
                "invalid scope {s:?}: expected resource, span, event, link, instrumentation, intrinsic or all"
            )),
            None => Err(format!("invalid scope: {s}")),
        },
    }
}

/// Looks up the tag names `p` asks for (`scope`, `q`, `start`, `end`).
pub(crate) async fn tag_names_answer(
    st: &AppState,
    tenant: &str,
    p: &HashMap<String, String>,
    v2: bool,
) -> Result<TagNamesAnswer, Response> {
    if !v2 {
        // v1 names a bad window before a bad scope, and checks it for the intrinsics too.
        search_window(p).map_err(bad)?;
    }
    let wanted = tag_name_scopes(p, v2).map_err(bad)?;
    let (names, stats, jobs) = if wanted.iter().any(|s| *s != "intrinsic") {
        let found = collect_tags(st, tenant, p).await?;
        (Some(found.list), found.stats, found.jobs)
    } else {
        (None, ScanStats::default(), None)
    };
    let scopes = wanted
        .iter()
        .map(|&s| {
            let tags: Vec<String> = match TagScope::parse(s) {
                Some(scope) => names
                    .as_ref()
                    .and_then(|n| n.get(&scope))
                    .map(|k| k.iter().cloned().collect())
                    .unwrap_or_default(),
                None => INTRINSICS.iter().map(|s| s.to_string()).collect(),
            };
            (s.to_owned(), tags)
        })
        .collect();
    // v1 answers the intrinsics alone with empty metrics; v2 always gives them.
    let metrics = (names.is_some() || v2).then(|| inspected(&stats, st, tenant).with_jobs(jobs));
    Ok(TagNamesAnswer { scopes, metrics, stats })
}

/// `GET /api/search/tags`: span and resource attribute keys.
pub async fn tags_v1(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    tag_names(st, headers, p, false).await
}

/// `GET /api/v2/search/tags?scope=`: keys per scope, plus the intrinsics.
pub async fn tags_v2(State(st): State<Arc<AppState>>, headers: HeaderMap, Query(p): Params) -> Response {
    tag_names(st, headers, p, true).await
}

async fn tag_names(st: Arc<AppState>, headers: HeaderMap, p: HashMap<String, String>, v2: bool) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    let a = match tag_names_answer(&st, &tenant, &p, v2).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let metrics = a
        .metrics
        .as_ref()
        .map_or_else(|| serde_json::json!({}), tempo::metadata_metrics);
    if v2 {
        let scopes: Vec<serde_json::Value> = a
            .scopes
            .iter()
            .map(|(name, tags)| serde_json::json!({ "name": name, "tags": tags }))
            .collect();
        json_scanned(serde_json::json!({ "scopes": scopes, "metrics": metrics }), &a.stats)
    } else if a.metrics.is_none() {
        json(serde_json::json!({ "tagNames": a.one_list(), "metrics": metrics }))
    } else {
        json_scanned(
            serde_json::json!({ "tagNames": a.one_list(), "metrics": metrics }),
            &a.stats,
        )
    }
}

/// What the tag-value lookups answer, over HTTP and the streaming gRPC API alike: each value's
/// type and text (v2 in the order found; v1 sorted, without repeats), whether more were left
/// out, and what was read; `None` for the tags whose values are fixed (Tempo answers them with
/// empty metrics, without reading storage).
pub(crate) struct TagValuesAnswer {
    pub values: Vec<(&'static str, String)>,
    pub truncated: bool,
    pub metrics: Option<Inspected>,
    pub stats: ScanStats,
}

/// Looks up the values of `tag` that `p` asks for (`q`, `start`, `end`).
pub(crate) async fn tag_values_answer(
    st: &AppState,
    tenant: &str,
    tag: &str,
    p: &HashMap<String, String>,
    v2: bool,
) -> Result<TagValuesAnswer, Response> {
    if let Some(fixed) = virtual_values(tag, v2) {
        let ty = if v2 { "keyword" } else { "string" };
        return Ok(TagValuesAnswer {
            values: fixed.iter().map(|v| (ty, v.to_string())).collect(),
            truncated: false,
            metrics: None,
            stats: ScanStats::default(),
        });
    }
    let field = tag_field(tag, v2).map_err(bad)?;
    let window = search_window(p).map_err(bad)?;
    let found = distinct_values(st, tenant, &filter_query(p), field, window, MAX_TAG_VALUES).await?;
    let values = if v2 {
        found.list.iter().map(tempo::typed).collect()
    } else {
        let texts: BTreeSet<String> = found.list.iter().map(tempo::value_text).collect();
        texts.into_iter().map(|t| ("string", t)).collect()
    };
    let metrics = Some(inspected(&found.stats, st, tenant).with_jobs(found.jobs));
    Ok(TagValuesAnswer {
        values,
        truncated: found.truncated,
        metrics,
        stats: found.stats,
    })
}

pub(crate) async fn tag_values(
    st: Arc<AppState>,
    headers: HeaderMap,
    tag: String,
    p: HashMap<String, String>,
    v2: bool,
) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::UNAUTHORIZED, e.0),
    };
    // Grafana encodes the tag twice; axum decoded it once.
    let tag = if tag.contains('%') { percent_decode(&tag) } else { tag };
    let a = match tag_values_answer(&st, &tenant, &tag, &p, v2).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let vals: Vec<serde_json::Value> = if v2 {
        a.values
            .iter()
            .map(|(ty, v)| serde_json::json!({ "type": ty, "value": v }))
            .collect()
    } else {
        a.values.iter().map(|(_, v)| serde_json::json!(v)).collect()
    };
    let Some(m) = &a.metrics else {
        return json(serde_json::json!({ "tagValues": vals, "metrics": {} }));
    };
    let mut r = json_scanned(
        serde_json::json!({ "tagValues": vals, "metrics": tempo::metadata_metrics(m) }),
        &a.stats,
    );
    if a.truncated {
        r.headers_mut()
            .insert(TRUNCATED_VALUES_HEADER, axum::http::HeaderValue::from_static("true"));
    }
    r
}

/// Tags whose values are fixed, answered without reading storage, as Tempo does: v2 gives
/// them as keywords.
pub(crate) fn virtual_values(tag: &str, v2: bool) -> Option<&'static [&'static str]> {
    match (tag, v2) {
        ("status" | "span:status", true) => Some(&["ok", "error", "unset"]),
        ("kind" | "span:kind", true) => Some(&["client", "server", "producer", "consumer", "internal", "unspecified"]),
        ("status.code", false) => Some(&["unset", "ok", "error"]),
        _ => None,
    }
}

/// Decodes `%XX` escapes; invalid escapes are kept as written.
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3).filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /api/search/tag/{tag}/values`.
pub async fn tag_values_v1(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(tag): Path<String>,
    Query(p): Params,
) -> Response {
    tag_values(st, headers, tag, p, false).await
}

/// `GET /api/v2/search/tag/{tag}/values`.
pub async fn tag_values_v2(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(tag): Path<String>,
    Query(p): Params,
) -> Response {
    tag_values(st, headers, tag, p, true).await
}
