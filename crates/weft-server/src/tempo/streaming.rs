//! Tempo's gRPC streaming query API, `tempopb.StreamingQuerier`, on the HTTP port (as Tempo
//! serves it with `stream_over_http_enabled`), so Grafana's Tempo data source works with its
//! streaming options on.
//!
//! A gRPC request (`content-type: application/grpc`) on the HTTP port comes here; anything else
//! goes to the HTTP router. Each call runs the same query as its HTTP endpoint, through the same
//! parameter checks ([`query::run_search`], [`crate::tempo::metrics::run_metrics`]), and answers with
//! a stream of replies. Search streams its results progressively: every [`PROGRESS_EVERY`] while
//! the scan runs it sends the hits found so far that it has not sent yet, then the complete
//! result (in messages of at most 4 MiB, [`MAX_SEARCH_MESSAGE`]). Metrics queries send, as
//! often, the whole series counted so far when the scan got further, then the complete result
//! ([`metrics`]). Tempo's clients (Grafana) merge a search stream by trace ID, draw each
//! metrics message in place of the one before, and keep the last `metrics`.
//!
//! Every method is served: `Search`, `MetricsQueryRange`, `MetricsQueryInstant` (what Grafana
//! calls) progressively; the tag lookups (`SearchTags`, `SearchTagsV2`, `SearchTagValues`,
//! `SearchTagValuesV2`, which tempo-cli calls with `--use-grpc`) in one message each
//! ([`tags`]).

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tonic::Status;
use tonic::codec::{CompressionEncoding, EnabledCompressionEncodings};

use crate::app::AppState;
use crate::query;
use crate::tempo::json::Inspected;
use crate::tempo::metrics::Form;
use crate::tempo::pb;
use crate::tempo::search::Published;
use weft_engine::search::ScanProgress;
use weft_otlp::grpc::RawCodec;
use weft_querier::scan::ScanStats;

/// The gRPC service name.
pub const SERVICE: &str = "tempopb.StreamingQuerier";

/// The methods of `tempopb.StreamingQuerier`.
const METHODS: [&str; 7] = [
    "Search",
    "SearchTags",
    "SearchTagsV2",
    "SearchTagValues",
    "SearchTagValuesV2",
    "MetricsQueryRange",
    "MetricsQueryInstant",
];

/// How often a search stream sends the hits found so far.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Whether a request on the HTTP port is gRPC.
pub fn is_grpc<B>(req: &http::Request<B>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// Serves `tempopb.StreamingQuerier` calls.
#[derive(Clone)]
pub struct StreamingQuerier {
    state: Arc<AppState>,
}

impl StreamingQuerier {
    pub fn new(state: Arc<AppState>) -> Self {
        StreamingQuerier { state }
    }
}

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type ReplyStream = tokio_stream::wrappers::ReceiverStream<Result<Bytes, Status>>;

/// One server-streaming method; `run` sends the replies into the channel.
struct Method {
    state: Arc<AppState>,
    name: &'static str,
}

impl tonic::server::ServerStreamingService<Bytes> for Method {
    type Response = Bytes;
    type ResponseStream = ReplyStream;
    type Future = BoxFut<Result<tonic::Response<ReplyStream>, Status>>;

    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let state = self.state.clone();
        let name = self.name;
        Box::pin(async move {
            let headers = req.metadata().clone().into_headers();
            let tenant = state
                .tenants
                .resolve(&headers)
                .map_err(|e| Status::unauthenticated(e.0))?;
            let body = req.into_inner();
            // The same slots as the HTTP query API (--max-concurrent-queries).
            let slot = tokio::time::timeout(Duration::from_secs(30), state.queries.acquire(tenant.clone()))
                .await
                .ok()
                .ok_or_else(|| {
                    Status::resource_exhausted(format!(
                        "too many queries: {} are running and others waited 30s for a slot (--max-concurrent-queries); retry later",
                        state.cfg.query.max_concurrent_queries
                    ))
                })?;
            let (tx, rx) = tokio::sync::mpsc::channel(8);
            // Parameters are checked before the stream starts, so a bad query is a status,
            // not a stream that ends in an error.
            match name {
                "Search" => {
                    let r = pb::SearchRequest::decode(body).map_err(bad_message)?;
                    let params = search_params(&r);
                    tokio::spawn(async move {
                        search(state, tenant, params, tx).await;
                        drop(slot);
                    });
                }
                "MetricsQueryRange" => {
                    let r = pb::QueryRangeRequest::decode(body).map_err(bad_message)?;
                    let mut p = HashMap::from([
                        ("q".to_owned(), r.query),
                        ("start".to_owned(), r.start.to_string()),
                        ("end".to_owned(), r.end.to_string()),
                    ]);
                    if r.step > 0 {
                        p.insert("step".to_owned(), format!("{}ns", r.step));
                    }
                    p.insert("exemplars".to_owned(), r.exemplars.to_string());
                    crate::tempo::metrics::metrics_request(&p, Form::Range).map_err(|r| status_of(*r))?;
                    tokio::spawn(async move {
                        metrics(state, tenant, p, false, tx).await;
                        drop(slot);
                    });
                }
                "MetricsQueryInstant" => {
                    let r = pb::QueryInstantRequest::decode(body).map_err(bad_message)?;
                    let p = HashMap::from([
                        ("q".to_owned(), r.query),
                        ("start".to_owned(), r.start.to_string()),
                        ("end".to_owned(), r.end.to_string()),
                    ]);
                    crate::tempo::metrics::metrics_request(&p, Form::Instant).map_err(|r| status_of(*r))?;
                    tokio::spawn(async move {
                        metrics(state, tenant, p, true, tx).await;
                        drop(slot);
                    });
                }
                "SearchTags" | "SearchTagsV2" => {
                    let r = pb::SearchTagsRequest::decode(body).map_err(bad_message)?;
                    let v2 = name == "SearchTagsV2";
                    let p = tag_params(&r.scope, &r.query, r.start, r.end)?;
                    crate::tempo::search::tag_name_scopes(&p, v2).map_err(Status::invalid_argument)?;
                    tokio::spawn(async move {
                        tags(state, tenant, TagLookup::Names { p, v2 }, tx).await;
                        drop(slot);
                    });
                }
                "SearchTagValues" | "SearchTagValuesV2" => {
                    let r = pb::SearchTagValuesRequest::decode(body).map_err(bad_message)?;
                    let v2 = name == "SearchTagValuesV2";
                    if crate::tempo::search::virtual_values(&r.tag_name, v2).is_none() {
                        query::tag_field(&r.tag_name, v2).map_err(Status::invalid_argument)?;
                    }
                    let p = tag_params("", &r.query, r.start, r.end)?;
                    tokio::spawn(async move {
                        tags(state, tenant, TagLookup::Values { tag: r.tag_name, p, v2 }, tx).await;
                        drop(slot);
                    });
                }
                other => return Err(Status::unimplemented(format!("{SERVICE}/{other} is not a method"))),
            }
            Ok(tonic::Response::new(ReplyStream::new(rx)))
        })
    }
}

fn bad_message(e: prost::DecodeError) -> Status {
    Status::invalid_argument(format!("undecodable request message: {e}"))
}

/// The HTTP parameters of a gRPC search request (Tempo's `SearchRequest` carries the same
/// fields; 0 means "not set", as in Tempo).
fn search_params(r: &pb::SearchRequest) -> HashMap<String, String> {
    let mut p = HashMap::new();
    if !r.query.is_empty() {
        p.insert("q".to_owned(), r.query.clone());
    } else if !r.tags.is_empty() {
        let mut tags: Vec<_> = r.tags.iter().collect();
        tags.sort();
        let logfmt: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        p.insert("tags".to_owned(), logfmt.join(" "));
    }
    if r.limit > 0 {
        p.insert("limit".to_owned(), r.limit.to_string());
    }
    // Grafana always sends spss; 0 is unlimited, as on the HTTP API.
    p.insert("spss".to_owned(), r.spans_per_span_set.to_string());
    for (k, v) in [("minDuration", r.min_duration_ms), ("maxDuration", r.max_duration_ms)] {
        if v > 0 {
            p.insert(k.to_owned(), format!("{v}ms"));
        }
    }
    if r.start > 0 || r.end > 0 {
        p.insert("start".to_owned(), r.start.to_string());
        p.insert("end".to_owned(), r.end.to_string());
    }
    p
}

/// The gRPC status of an HTTP error reply: 400 is INVALID_ARGUMENT, 401 UNAUTHENTICATED, 429
/// RESOURCE_EXHAUSTED, 503 UNAVAILABLE, others INTERNAL; the message is the reply's text.
fn status_of(r: axum::response::Response) -> Status {
    let code = match r.status().as_u16() {
        400 => tonic::Code::InvalidArgument,
        401 => tonic::Code::Unauthenticated,
        404 => tonic::Code::NotFound,
        429 => tonic::Code::ResourceExhausted,
        503 => tonic::Code::Unavailable,
        504 => tonic::Code::DeadlineExceeded,
        _ => tonic::Code::Internal,
    };
    let message = r
        .extensions()
        .get::<query::ErrorText>()
        .map(|t| t.0.clone())
        .unwrap_or_else(|| format!("query failed with HTTP status {}", r.status()));
    Status::new(code, message)
}

/// The HTTP parameters of a tag request (`SearchTagsRequest`, `SearchTagValuesRequest`): the
/// scope and filter when given, and the window when given (Unix seconds, 0 for none). A window
/// that is not one is refused before the stream starts.
fn tag_params(scope: &str, q: &str, start: u32, end: u32) -> Result<HashMap<String, String>, Status> {
    let mut p = HashMap::new();
    for (k, v) in [("scope", scope), ("q", q)] {
        if !v.is_empty() {
            p.insert(k.to_owned(), v.to_owned());
        }
    }
    for (k, v) in [("start", start), ("end", end)] {
        if v > 0 {
            p.insert(k.to_owned(), v.to_string());
        }
    }
    query::search_window(&p).map_err(Status::invalid_argument)?;
    Ok(p)
}

/// A tag lookup of the streaming API.
enum TagLookup {
    Names {
        p: HashMap<String, String>,
        v2: bool,
    },
    Values {
        tag: String,
        p: HashMap<String, String>,
        v2: bool,
    },
}

/// Answers a tag lookup as its HTTP twin does, in one message (a list of names or values is
/// small, and until its last job it is only a part of the answer), then the call's status:
/// OK, saying what was partial, and `x-weft-tag-values-truncated` when values were left out.
async fn tags(
    state: Arc<AppState>,
    tenant: Arc<str>,
    lookup: TagLookup,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, Status>>,
) {
    use crate::tempo::search::{tag_names_answer, tag_values_answer};
    let metrics = |m: &Option<Inspected>| m.as_ref().map(pb::metadata_metrics);
    let answer = async {
        match &lookup {
            TagLookup::Names { p, v2 } => {
                let a = tag_names_answer(&state, &tenant, p, *v2).await?;
                let reply = if *v2 {
                    let scopes = a
                        .scopes
                        .iter()
                        .map(|(name, tags)| pb::SearchTagsV2Scope {
                            name: name.clone(),
                            tags: tags.clone(),
                        })
                        .collect();
                    pb::SearchTagsV2Response {
                        scopes,
                        metrics: metrics(&a.metrics),
                    }
                    .encode_to_vec()
                } else {
                    pb::SearchTagsResponse {
                        tag_names: a.one_list(),
                        metrics: metrics(&a.metrics),
                    }
                    .encode_to_vec()
                };
                Ok((reply, a.stats, false))
            }
            TagLookup::Values { tag, p, v2 } => {
                let a = tag_values_answer(&state, &tenant, tag, p, *v2).await?;
                let reply = if *v2 {
                    let tag_values = a
                        .values
                        .into_iter()
                        .map(|(ty, value)| pb::TagValue {
                            r#type: ty.to_owned(),
                            value,
                        })
                        .collect();
                    pb::SearchTagValuesV2Response {
                        tag_values,
                        metrics: metrics(&a.metrics),
                    }
                    .encode_to_vec()
                } else {
                    pb::SearchTagValuesResponse {
                        tag_values: a.values.into_iter().map(|(_, v)| v).collect(),
                        metrics: metrics(&a.metrics),
                    }
                    .encode_to_vec()
                };
                Ok::<_, axum::response::Response>((reply, a.stats, a.truncated))
            }
        }
    };
    let deadline = deadline(&state);
    let result = tokio::select! {
        r = answer => r,
        _ = deadline => {
            let _ = send(&tx, Err(Status::deadline_exceeded(state.cfg.query.timeout_message()))).await;
            return;
        }
        _ = tx.closed() => return,
    };
    match result {
        Ok((reply, stats, truncated)) => {
            if send(&tx, Ok(Bytes::from(reply))).await.is_ok() {
                let mut end = end_of(&stats);
                if truncated {
                    end.metadata_mut().insert(
                        query::TRUNCATED_VALUES_HEADER,
                        tonic::metadata::MetadataValue::from_static("true"),
                    );
                }
                let _ = send(&tx, Err(end)).await;
            }
        }
        Err(r) => {
            let _ = send(&tx, Err(status_of(r))).await;
        }
    }
}

/// Runs a search, sending the hits found so far every [`PROGRESS_EVERY`], then the final
/// complete result.
async fn search(
    state: Arc<AppState>,
    tenant: Arc<str>,
    p: HashMap<String, String>,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, Status>>,
) {
    let progress = Arc::new(parking_lot::Mutex::new(Published::default()));
    let run = crate::tempo::search::run_search_progress(&state, &tenant, &p, progress.clone());
    tokio::pin!(run);
    let mut sent: HashSet<[u8; 16]> = HashSet::new();
    // The listing's totals, as the final metrics give them, for the progress messages.
    let listing = listing(&state, &tenant);
    let mut told: Option<ScanProgress> = None;
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    let deadline = deadline(&state);
    tokio::pin!(deadline);
    let result = loop {
        tokio::select! {
            r = &mut run => break r,
            _ = &mut deadline => {
                let _ = send(&tx, Err(Status::deadline_exceeded(state.cfg.query.timeout_message()))).await;
                return;
            }
            // The client cancelled the call: stop reading (a search that finds nothing new
            // would otherwise only notice at its end).
            _ = tx.closed() => return,
            _ = tick.tick() => {
                let (fresh, now) = {
                    let published = progress.lock();
                    let fresh: Vec<pb::TraceSearchMetadata> =
                        published.hits.iter().filter(|h| sent.insert(h.trace_id)).map(pb::hit).collect();
                    (fresh, published.progress)
                };
                // A message when there are new hits or the scan got further, as Tempo's
                // frontend sends one as jobs complete: Grafana shows the last one's
                // `completedJobs` of `totalJobs` as the search's progress.
                if fresh.is_empty() && (now.is_none() || now == told) {
                    continue;
                }
                told = now;
                let metrics = now.map_or_else(pb::SearchMetrics::default, |p| pb::metrics(&progress_figures(&listing, p)));
                if send_hits(&tx, fresh, metrics).await.is_err() {
                    return; // the client went away
                }
            }
        }
    };
    match result {
        Ok((hits, stats, progress)) => {
            let m = query::inspected(&stats, &state, &tenant).with_jobs(progress);
            let traces = hits.iter().map(pb::hit).collect();
            if send_hits(&tx, traces, pb::metrics(&m)).await.is_ok() {
                let _ = send(&tx, Err(end_of(&stats))).await;
            }
        }
        Err(r) => {
            let _ = send(&tx, Err(status_of(r))).await;
        }
    }
}

/// Runs a metrics query (range, or `instant`), sending at most every [`PROGRESS_EVERY`] while it
/// runs the series counted so far, then the complete result. As Tempo's
/// frontend does, each message holds whole series, not increments: Grafana draws each message
/// in place of the one before, so a chart fills in as blocks are read, newest first.
async fn metrics(
    state: Arc<AppState>,
    tenant: Arc<str>,
    p: HashMap<String, String>,
    instant: bool,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, Status>>,
) {
    let (start, step) = match crate::tempo::metrics::metrics_request(&p, Form::tempo(instant)) {
        Ok(r) => (r.start, r.step),
        Err(r) => {
            let _ = send(&tx, Err(status_of(*r))).await;
            return;
        }
    };
    // The latest progress told (the final message's jobs), and snapshots of the series so far,
    // at most one per PROGRESS_EVERY, sent as soon as taken.
    let latest = Arc::new(parking_lot::Mutex::new(None::<ScanProgress>));
    let (snap_tx, mut snaps) = tokio::sync::mpsc::channel::<(weft_traceql::MetricsRun, ScanProgress)>(1);
    let watch = {
        let latest = latest.clone();
        let taken = parking_lot::Mutex::new(std::time::Instant::now());
        // Told after every row group or job merged, under the scan's lock: a copy of the run is
        // taken there only when one is due and the last one was sent, and finished here.
        weft_engine::search::Watch::new(move |run, progress| {
            *latest.lock() = Some(progress);
            let mut taken = taken.lock();
            // Not once every unit is done: the answer follows at once.
            let last = progress.completed_jobs >= progress.total_jobs;
            if last || taken.elapsed() < PROGRESS_EVERY || snap_tx.capacity() == 0 {
                return;
            }
            *taken = std::time::Instant::now();
            let _ = snap_tx.try_send((run.clone(), progress));
        })
    };
    let run = crate::tempo::metrics::run_metrics(&state, &tenant, &p, Form::tempo(instant), Some(watch));
    tokio::pin!(run);
    let listing = listing(&state, &tenant);
    let encode = |series: &[weft_traceql::Series], m: &Inspected| -> Bytes {
        if instant {
            Bytes::from(pb::query_instant(series, m).encode_to_vec())
        } else {
            Bytes::from(pb::query_range(series, start, step, m).encode_to_vec())
        }
    };
    let deadline = deadline(&state);
    tokio::pin!(deadline);
    let result = loop {
        tokio::select! {
            r = &mut run => break r,
            _ = &mut deadline => {
                let _ = send(&tx, Err(Status::deadline_exceeded(state.cfg.query.timeout_message()))).await;
                return;
            }
            _ = tx.closed() => return,
            Some((copy, progress)) = snaps.recv() => {
                // Over a limit (the answer will say so) or nothing counted yet: nothing to draw.
                let Ok(series) = copy.finish_within_limits() else { continue };
                if series.is_empty() {
                    continue;
                }
                if send(&tx, Ok(encode(&series, &progress_figures(&listing, progress)))).await.is_err() {
                    return; // the client went away
                }
            }
        }
    };
    match result {
        Ok((series, _, _, stats)) => {
            let m = query::inspected(&stats, &state, &tenant).with_jobs(*latest.lock());
            let reply = match query::reply::partial_message(&stats) {
                // A partial answer says so in the message's status, as Tempo's metrics replies do.
                Some(msg) if instant => {
                    let mut r = pb::query_instant(&series, &m);
                    r.status = pb::PARTIAL;
                    r.message = msg;
                    Bytes::from(r.encode_to_vec())
                }
                Some(msg) => {
                    let mut r = pb::query_range(&series, start, step, &m);
                    r.status = pb::PARTIAL;
                    r.message = msg;
                    Bytes::from(r.encode_to_vec())
                }
                None => encode(&series, &m),
            };
            if send(&tx, Ok(reply)).await.is_ok() {
                let _ = send(&tx, Err(end_of(&stats))).await;
            }
        }
        Err(r) => {
            let _ = send(&tx, Err(status_of(r))).await;
        }
    }
}

/// When a streamed query passes `--query-timeout` (never without one).
fn deadline(state: &AppState) -> impl Future<Output = ()> + use<> {
    let limit = state.cfg.query.timeout();
    async move {
        match limit {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    }
}

/// The tenant's block listing as progress messages give it (`totalBlocks`, `totalBlockBytes`).
fn listing(state: &AppState, tenant: &str) -> Inspected {
    Inspected {
        total_blocks: state.querier().blocks(tenant).len() as u64,
        ..query::inspected(&ScanStats::default(), state, tenant)
    }
}

/// The metrics of a progress message: what the scan inspected so far and its jobs, with the
/// listing's totals.
fn progress_figures(listing: &Inspected, p: ScanProgress) -> Inspected {
    Inspected {
        bytes: p.inspected_bytes,
        traces: p.inspected_traces,
        spans: p.inspected_spans,
        completed_jobs: p.completed_jobs,
        total_jobs: p.total_jobs,
        ..*listing
    }
}

/// Sends one message of a search stream. `Err`: the client went away, or took nothing for
/// [`query::reply::REPLY_STALL`] (the search then gives up, and its slot is freed).
async fn send(tx: &tokio::sync::mpsc::Sender<Result<Bytes, Status>>, m: Result<Bytes, Status>) -> Result<(), ()> {
    match tokio::time::timeout(query::reply::REPLY_STALL, tx.send(m)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Most bytes of one search reply message: the receive limit gRPC clients have by default
/// (grpc-go's, so Grafana's, and grpcio's), which a reply of many traces with their spans
/// passes easily (1,000 traces of 100 selected spans).
const MAX_SEARCH_MESSAGE: usize = 4 << 20;

/// Sends `traces` as search replies of at most [`MAX_SEARCH_MESSAGE`] bytes each (a trace
/// larger than that alone), each with `metrics`: at least one message. Clients merge the
/// messages by trace ID, so several messages are one answer. `Err`: the client went away.
async fn send_hits(
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, Status>>,
    traces: Vec<pb::TraceSearchMetadata>,
    metrics: pb::SearchMetrics,
) -> Result<(), ()> {
    for reply in search_messages(traces, metrics) {
        send(tx, Ok(Bytes::from(reply.encode_to_vec()))).await?;
    }
    Ok(())
}

/// [`send_hits`]'s messages.
fn search_messages(traces: Vec<pb::TraceSearchMetadata>, metrics: pb::SearchMetrics) -> Vec<pb::SearchResponse> {
    let base = prost::encoding::message::encoded_len(2, &metrics);
    let mut out = Vec::new();
    let (mut batch, mut size) = (Vec::new(), base);
    for t in traces {
        let len = prost::encoding::message::encoded_len(1, &t);
        if !batch.is_empty() && size + len > MAX_SEARCH_MESSAGE {
            out.push(std::mem::take(&mut batch));
            size = base;
        }
        size += len;
        batch.push(t);
    }
    out.push(batch);
    out.into_iter()
        .map(|traces| pb::SearchResponse {
            traces,
            metrics: Some(metrics.clone()),
        })
        .collect()
}

/// The end of a stream that answered: status OK, and in the trailers the `x-weft-partial-*`
/// headers of what the answer left out, as the HTTP API sends them (Tempo's `SearchResponse`
/// has no partial status; its metrics replies also carry one, `status: PARTIAL`), with the
/// message as `grpc-message`.
fn end_of(stats: &weft_querier::scan::ScanStats) -> Status {
    let Some(msg) = query::reply::partial_message(stats) else {
        return Status::ok("");
    };
    let mut md = tonic::metadata::MetadataMap::new();
    for (name, n) in [
        (query::reply::PARTIAL_HEADER, stats.damaged_blocks),
        (query::LIVE_STORES_PARTIAL_HEADER, stats.unanswered_live_stores),
        (query::TRUNCATED_TRACES_HEADER, stats.truncated_traces),
    ] {
        if n > 0 {
            md.insert(name, n.into());
        }
    }
    Status::with_metadata(tonic::Code::Ok, msg, md)
}

impl tower::Service<http::Request<hyper::body::Incoming>> for StreamingQuerier {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let state = self.state.clone();
        Box::pin(async move {
            let path = req.uri().path().to_owned();
            let method = path.strip_prefix(&format!("/{SERVICE}/")).unwrap_or("");
            let Some(&name) = METHODS.iter().find(|m| **m == method) else {
                return Ok(Status::unimplemented(format!("unknown method {path}")).into_http());
            };
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .apply_compression_config(accept, EnabledCompressionEncodings::default())
                .apply_max_message_size_config(Some(4 << 20), Some(16 << 20));
            let req = req.map(tonic::body::Body::new);
            Ok(grpc.server_streaming(Method { state, name }, req).await)
        })
    }
}

/// The HTTP port: gRPC calls to [`StreamingQuerier`] (when the query API runs), everything else
/// to the HTTP router.
#[derive(Clone)]
pub struct HttpPort {
    pub router: axum::Router,
    pub grpc: Option<StreamingQuerier>,
}

impl tower::Service<http::Request<hyper::body::Incoming>> for HttpPort {
    type Response = http::Response<axum::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        if is_grpc(&req)
            && let Some(mut grpc) = self.grpc.clone()
        {
            return Box::pin(async move {
                let Ok(resp) = grpc.call(req).await;
                Ok(resp.map(axum::body::Body::new))
            });
        }
        let mut router = self.router.clone();
        Box::pin(async move {
            let Ok(resp) = router.call(req.map(axum::body::Body::new)).await;
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes a client sends as a request message decode or fail cleanly, and a decoded
        /// search request always becomes parameters the HTTP checks can judge.
        #[test]
        fn no_request_bytes_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(r) = pb::SearchRequest::decode(&bytes[..]) {
                let p = search_params(&r);
                prop_assert!(p.contains_key("spss"));
            }
            let _ = pb::QueryRangeRequest::decode(&bytes[..]);
            let _ = pb::QueryInstantRequest::decode(&bytes[..]);
            // Tag requests: their strings reach the scope, window and tag checks before the
            // stream starts.
            if let Ok(r) = pb::SearchTagsRequest::decode(&bytes[..])
                && let Ok(p) = tag_params(&r.scope, &r.query, r.start, r.end)
            {
                for v2 in [false, true] {
                    let _ = crate::tempo::search::tag_name_scopes(&p, v2);
                }
            }
            if let Ok(r) = pb::SearchTagValuesRequest::decode(&bytes[..]) {
                let _ = tag_params("", &r.query, r.start, r.end);
                for v2 in [false, true] {
                    let _ = query::tag_field(&r.tag_name, v2);
                }
            }
        }

        /// Any tag name and window a tag request carries is judged, never a panic; a window
        /// whose start is after its end is refused before the stream starts.
        #[test]
        fn tag_request_fields_are_judged(tag in ".{0,40}", scope in ".{0,12}", start in any::<u32>(), end in any::<u32>()) {
            for v2 in [false, true] {
                let _ = query::tag_field(&tag, v2);
            }
            match tag_params(&scope, "", start, end) {
                Ok(p) => {
                    let _ = crate::tempo::search::tag_name_scopes(&p, true);
                    prop_assert!(start == 0 || end == 0 || start <= end, "{start} > {end} accepted");
                }
                Err(s) => prop_assert_eq!(s.code(), tonic::Code::InvalidArgument),
            }
        }
    }

    #[test]
    fn a_large_result_goes_in_messages_clients_accept() {
        let trace = |i: usize, pad: usize| pb::TraceSearchMetadata {
            trace_id: format!("{i:032x}"),
            root_trace_name: "x".repeat(pad),
            ..Default::default()
        };
        let m = pb::SearchMetrics {
            inspected_traces: 7,
            ..Default::default()
        };
        // 10 MB of traces: three messages under the limit, in order, each with the metrics.
        let traces: Vec<_> = (0..1000).map(|i| trace(i, 10_000)).collect();
        let msgs = search_messages(traces.clone(), m.clone());
        assert_eq!(msgs.len(), 3);
        assert!(
            msgs.iter()
                .all(|r| r.encoded_len() <= MAX_SEARCH_MESSAGE && r.metrics == Some(m.clone()))
        );
        assert_eq!(msgs.into_iter().flat_map(|r| r.traces).collect::<Vec<_>>(), traces);
        // A trace over the limit goes alone; nothing at all is still one message.
        let msgs = search_messages(vec![trace(1, 10), trace(2, 5 << 20), trace(3, 10)], m.clone());
        assert_eq!(msgs.iter().map(|r| r.traces.len()).collect::<Vec<_>>(), [1, 1, 1]);
        assert_eq!(search_messages(vec![], m.clone()).len(), 1);
    }

    #[test]
    fn search_params_follow_tempo() {
        let r = pb::SearchRequest {
            tags: [("service.name".to_owned(), "a b".to_owned())].into(),
            min_duration_ms: 5,
            limit: 0,
            spans_per_span_set: 0,
            ..Default::default()
        };
        let p = search_params(&r);
        assert_eq!(p.get("tags").map(String::as_str), Some("service.name=\"a b\""));
        assert_eq!(p.get("minDuration").map(String::as_str), Some("5ms"));
        assert_eq!(p.get("spss").map(String::as_str), Some("0"), "0 is unlimited");
        assert!(
            !p.contains_key("limit") && !p.contains_key("start"),
            "0 is unset: {p:?}"
        );
    }
}
