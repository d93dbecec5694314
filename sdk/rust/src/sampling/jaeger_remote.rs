//! Jaeger remote sampling: strategies polled as JSON over HTTP, with per-operation samplers.

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};

use super::{Decision, RateLimitingSampler, Sampler, SamplingParams, SamplingResult, TraceIdRatioSampler, consistent};
use crate::log::RateLimited;

/// A parsed `SamplingStrategyResponse`.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// `probabilisticSampling.samplingRate`, clamped to `[0, 1]`.
    Probabilistic(f64),
    /// `rateLimitingSampling.maxTracesPerSecond`.
    RateLimiting(f64),
    /// `operationSampling`.
    PerOperation {
        /// `defaultSamplingProbability`, clamped.
        default_probability: f64,
        /// `defaultLowerBoundTracesPerSecond`.
        lower_bound: f64,
        /// `(operation, samplingRate)` in order; the first entry for a name wins.
        operations: Vec<(String, f64)>,
    },
}

/// Why a strategy body was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrategyError(pub String);

impl fmt::Display for StrategyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid sampling strategy: {}", self.0)
    }
}

impl std::error::Error for StrategyError {}

/// The sampler a strategy gives an operation (what the vectors compare).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResolvedSampler {
    /// `TraceIdRatioBased(ratio)`.
    TraceIdRatio(f64),
    /// `RateLimiting(spans_per_second)`.
    RateLimiting(f64),
    /// Ratio sampling with a per-operation rate-limited lower bound.
    GuaranteedThroughput {
        /// The ratio.
        ratio: f64,
        /// The lower bound in spans per second.
        lower_bound: f64,
    },
}

fn err(s: &str) -> StrategyError {
    StrategyError(s.to_owned())
}

/// Reads an optional member: absent or `null` is `None`.
fn member<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn number(obj: &Map<String, Value>, key: &str) -> Result<f64, StrategyError> {
    match member(obj, key) {
        None => Ok(0.0),
        Some(v) => v.as_f64().ok_or_else(|| err(&format!("{key} is not a number"))),
    }
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, StrategyError> {
    v.as_object().ok_or_else(|| err(&format!("{what} is not an object")))
}

fn clamp01(v: f64) -> f64 {
    if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) }
}

impl Strategy {
    /// Parses a strategy body. The sampler is chosen by which members are present
    /// (`operationSampling`, then `probabilisticSampling`, then `rateLimitingSampling`).
    pub fn parse(body: &str) -> Result<Strategy, StrategyError> {
        let v: Value = serde_json::from_str(body).map_err(|e| err(&format!("not JSON: {e}")))?;
        let obj = object(&v, "response")?;
        if let Some(op) = member(obj, "operationSampling") {
            let op = object(op, "operationSampling")?;
            let default_probability = clamp01(number(op, "defaultSamplingProbability")?);
            let lower_bound = number(op, "defaultLowerBoundTracesPerSecond")?;
            let mut operations = Vec::new();
            if let Some(list) = member(op, "perOperationStrategies") {
                let list = list
                    .as_array()
                    .ok_or_else(|| err("perOperationStrategies is not an array"))?;
                for entry in list {
                    let entry = object(entry, "per-operation strategy")?;
                    let name = match member(entry, "operation") {
                        Some(Value::String(s)) => s.clone(),
                        Some(_) => return Err(err("operation is not a string")),
                        None => continue,
                    };
                    let rate = match member(entry, "probabilisticSampling") {
                        Some(p) => clamp01(number(object(p, "probabilisticSampling")?, "samplingRate")?),
                        None => default_probability,
                    };
                    operations.push((name, rate));
                }
            }
            return Ok(Strategy::PerOperation {
                default_probability,
                lower_bound,
                operations,
            });
        }
        if let Some(p) = member(obj, "probabilisticSampling") {
            return Ok(Strategy::Probabilistic(clamp01(number(
                object(p, "probabilisticSampling")?,
                "samplingRate",
            )?)));
        }
        if let Some(r) = member(obj, "rateLimitingSampling") {
            return Ok(Strategy::RateLimiting(number(
                object(r, "rateLimitingSampling")?,
                "maxTracesPerSecond",
            )?));
        }
        Err(err(
            "no probabilisticSampling, rateLimitingSampling or operationSampling",
        ))
    }

    /// Returns the sampler for operation `op` when `tracked` operations are tracked already and
    /// at most `max_operations` may be.
    pub fn resolve(&self, op: &str, tracked: usize, max_operations: usize) -> ResolvedSampler {
        match self {
            Strategy::Probabilistic(r) => ResolvedSampler::TraceIdRatio(*r),
            Strategy::RateLimiting(r) => ResolvedSampler::RateLimiting(*r),
            Strategy::PerOperation {
                default_probability,
                lower_bound,
                operations,
            } => {
                if let Some((_, r)) = operations.iter().find(|(n, _)| n == op) {
                    ResolvedSampler::GuaranteedThroughput {
                        ratio: *r,
                        lower_bound: *lower_bound,
                    }
                } else if tracked < max_operations {
                    ResolvedSampler::GuaranteedThroughput {
                        ratio: *default_probability,
                        lower_bound: *lower_bound,
                    }
                } else {
                    ResolvedSampler::TraceIdRatio(*default_probability)
                }
            }
        }
    }
}

/// Configuration of [`JaegerRemoteSampler`].
#[derive(Debug)]
pub struct JaegerRemoteConfig {
    /// Sampling endpoint (`http://localhost:5778/sampling`).
    pub endpoint: String,
    /// Poll interval (60 s).
    pub polling_interval: Duration,
    /// Used until the first successful fetch (`TraceIdRatioBased(0.001)`).
    pub initial_sampler: Box<dyn Sampler>,
    /// Sent as `?service=`.
    pub service_name: String,
    /// Most operations tracked with their own sampler (2000).
    pub max_operations: usize,
}

impl Default for JaegerRemoteConfig {
    fn default() -> Self {
        JaegerRemoteConfig {
            endpoint: "http://localhost:5778/sampling".into(),
            polling_interval: Duration::from_secs(60),
            initial_sampler: Box::new(TraceIdRatioSampler::new(0.001)),
            service_name: "unknown_service".into(),
            max_operations: 2000,
        }
    }
}

impl JaegerRemoteConfig {
    /// Applies an `OTEL_TRACES_SAMPLER_ARG` list: `endpoint=…,pollingIntervalMs=…,initialSamplingRate=…`.
    pub fn apply_arg(&mut self, arg: &str) {
        for kv in arg.split(',') {
            let Some((k, v)) = kv.split_once('=') else { continue };
            let v = v.trim();
            match k.trim() {
                "endpoint" => self.endpoint = v.to_owned(),
                "pollingIntervalMs" => {
                    if let Ok(ms) = v.parse::<u64>() {
                        self.polling_interval = Duration::from_millis(ms.max(1));
                    }
                }
                "initialSamplingRate" => {
                    if let Ok(r) = v.parse::<f64>() {
                        self.initial_sampler = Box::new(TraceIdRatioSampler::new(r));
                    }
                }
                other => crate::log::warn(format_args!(
                    "ignoring unknown jaeger remote sampler argument {other:?}"
                )),
            }
        }
    }
}

#[derive(Debug)]
struct GuaranteedThroughput {
    ratio: TraceIdRatioSampler,
    limiter: RateLimitingSampler,
    params: (f64, f64),
}

impl GuaranteedThroughput {
    fn new(ratio: f64, lower_bound: f64) -> Self {
        GuaranteedThroughput {
            ratio: TraceIdRatioSampler::new(ratio),
            limiter: RateLimitingSampler::new(lower_bound),
            params: (ratio, lower_bound),
        }
    }

    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        let sampled = if self.ratio.samples(params.trace_id) {
            let _ = self.limiter.try_acquire();
            true
        } else {
            self.limiter.try_acquire()
        };
        if sampled {
            SamplingResult {
                decision: Decision::RecordAndSample,
                trace_state: consistent::erase_th(params.parent_trace_state()),
            }
        } else {
            SamplingResult::unchanged(Decision::Drop)
        }
    }
}

#[derive(Debug)]
struct PerOperation {
    strategy: Strategy,
    default: TraceIdRatioSampler,
    samplers: RwLock<HashMap<String, Arc<GuaranteedThroughput>>>,
}

#[derive(Debug)]
enum Active {
    Initial,
    Probabilistic(TraceIdRatioSampler),
    RateLimiting(Arc<RateLimitingSampler>, f64),
    PerOperation(PerOperation),
}

#[derive(Debug)]
struct Shared {
    active: RwLock<Active>,
    initial: Box<dyn Sampler>,
    max_operations: usize,
}

impl Shared {
    fn update(&self, strategy: Strategy) {
        let Ok(mut active) = self.active.write() else { return };
        let next = match (&strategy, &*active) {
            (Strategy::Probabilistic(r), _) => Active::Probabilistic(TraceIdRatioSampler::new(*r)),
            (Strategy::RateLimiting(r), Active::RateLimiting(old, old_r)) if old_r == r => {
                Active::RateLimiting(old.clone(), *r)
            }
            (Strategy::RateLimiting(r), _) => Active::RateLimiting(Arc::new(RateLimitingSampler::new(*r)), *r),
            (
                Strategy::PerOperation {
                    default_probability, ..
                },
                old,
            ) => {
                let mut kept = HashMap::new();
                if let Active::PerOperation(old) = old
                    && let Ok(samplers) = old.samplers.read()
                {
                    for (name, s) in samplers.iter() {
                        if let ResolvedSampler::GuaranteedThroughput { ratio, lower_bound } =
                            strategy.resolve(name, 0, usize::MAX)
                            && s.params == (ratio, lower_bound)
                        {
                            kept.insert(name.clone(), s.clone());
                        }
                    }
                }
                Active::PerOperation(PerOperation {
                    default: TraceIdRatioSampler::new(*default_probability),
                    strategy: strategy.clone(),
                    samplers: RwLock::new(kept),
                })
            }
        };
        *active = next;
    }

    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        let Ok(active) = self.active.read() else {
            return self.initial.should_sample(params);
        };
        match &*active {
            Active::Initial => self.initial.should_sample(params),
            Active::Probabilistic(s) => s.should_sample(params),
            Active::RateLimiting(s, _) => s.should_sample(params),
            Active::PerOperation(p) => {
                if let Some(s) = p.samplers.read().ok().and_then(|m| m.get(params.name).cloned()) {
                    return s.should_sample(params);
                }
                let Ok(mut map) = p.samplers.write() else {
                    return p.default.should_sample(params);
                };
                let s = match map.get(params.name) {
                    Some(s) => s.clone(),
                    None => match p.strategy.resolve(params.name, map.len(), self.max_operations) {
                        ResolvedSampler::GuaranteedThroughput { ratio, lower_bound } => {
                            let s = Arc::new(GuaranteedThroughput::new(ratio, lower_bound));
                            map.insert(params.name.to_owned(), s.clone());
                            s
                        }
                        _ => {
                            drop(map);
                            return p.default.should_sample(params);
                        }
                    },
                };
                drop(map);
                s.should_sample(params)
            }
        }
    }
}

/// A sampler whose strategy is fetched periodically from a Jaeger-compatible endpoint.
///
/// Until the first successful fetch, decisions come from the initial sampler; a failed fetch
/// keeps the current strategy and is logged (rate-limited). Dropping the sampler stops polling.
pub struct JaegerRemoteSampler {
    shared: Arc<Shared>,
    _stop: Option<mpsc::Sender<()>>,
    description: String,
}

impl fmt::Debug for JaegerRemoteSampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JaegerRemoteSampler")
            .field("description", &self.description)
            .finish()
    }
}

static FETCH_ERRORS: RateLimited = RateLimited::new(Duration::from_secs(60));

fn fetch(rt: &tokio::runtime::Runtime, url: &str) -> Result<Strategy, String> {
    let uri = crate::http_client::parse_endpoint(url).map_err(|e| e.to_string())?;
    let mut client = crate::http_client::Client::new(&uri, false);
    let req = http::Request::get(uri.clone())
        .header(
            http::header::HOST,
            uri.authority().map(|a| a.as_str()).unwrap_or("localhost"),
        )
        .header(http::header::USER_AGENT, crate::USER_AGENT)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = rt
        .block_on(client.send(req, Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    if !resp.head.status.is_success() {
        return Err(format!("status {}", resp.head.status.as_u16()));
    }
    let body = std::str::from_utf8(&resp.body).map_err(|_| "body is not UTF-8".to_string())?;
    Strategy::parse(body).map_err(|e| e.to_string())
}

fn percent_encode_query(s: &str) -> String {
    let mut out = String::new();
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl JaegerRemoteSampler {
    /// Returns a sampler that does not poll; feed it with [`JaegerRemoteSampler::update`].
    pub fn without_polling(config: JaegerRemoteConfig) -> Self {
        let description = format!("JaegerRemoteSampler{{{}}}", config.endpoint);
        JaegerRemoteSampler {
            shared: Arc::new(Shared {
                active: RwLock::new(Active::Initial),
                initial: config.initial_sampler,
                max_operations: config.max_operations,
            }),
            _stop: None,
            description,
        }
    }

    /// Returns a sampler that polls `config.endpoint` now and then every `polling_interval`
    /// from a background thread.
    pub fn start(config: JaegerRemoteConfig) -> Self {
        let sep = if config.endpoint.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{}service={}",
            config.endpoint,
            sep,
            percent_encode_query(&config.service_name)
        );
        let interval = config.polling_interval;
        let mut s = Self::without_polling(config);
        let (tx, rx) = mpsc::channel::<()>();
        let shared = s.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("weft-jaeger-sampler".into())
            .spawn(move || {
                let rt = match crate::http_client::runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        crate::log::warn(format_args!("jaeger remote sampler cannot start: {e}"));
                        return;
                    }
                };
                loop {
                    match fetch(&rt, &url) {
                        Ok(strategy) => shared.update(strategy),
                        Err(e) => FETCH_ERRORS.warn(format_args!("fetching sampling strategy from {url} failed: {e}")),
                    }
                    match rx.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        _ => return,
                    }
                }
            });
        if spawned.is_ok() {
            s._stop = Some(tx);
        }
        s
    }

    /// Replaces the strategy; samplers whose parameters did not change keep their state.
    pub fn update(&self, strategy: Strategy) {
        self.shared.update(strategy);
    }
}

impl Sampler for JaegerRemoteSampler {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        self.shared.should_sample(params)
    }
    fn description(&self) -> String {
        self.description.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::TraceId;

    #[test]
    fn per_operation_tracking_and_limit() {
        let cfg = JaegerRemoteConfig {
            max_operations: 1,
            initial_sampler: Box::new(super::super::AlwaysOff),
            ..Default::default()
        };
        let s = JaegerRemoteSampler::without_polling(cfg);
        let p = SamplingParams::root(TraceId::from(u128::MAX), "a");
        assert_eq!(s.should_sample(&p).decision, Decision::Drop);
        s.update(
            Strategy::parse(
                r#"{"operationSampling":{"defaultSamplingProbability":0,"defaultLowerBoundTracesPerSecond":1}}"#,
            )
            .unwrap(),
        );
        // The lower bound lets the first span of each tracked operation through.
        assert_eq!(s.should_sample(&p).decision, Decision::RecordAndSample);
        let q = SamplingParams::root(TraceId::from(u128::MAX), "b");
        assert_eq!(s.should_sample(&q).decision, Decision::Drop, "b is past max_operations");
    }

    #[test]
    fn polls_the_endpoint_and_switches_strategy() {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let body = r#"{"strategyType":"PROBABILISTIC","probabilisticSampling":{"samplingRate":1.0}}"#;
            for stream in listener.incoming().take(3) {
                let Ok(mut stream) = stream else { return };
                let mut line = String::new();
                let _ = BufReader::new(stream.try_clone().unwrap()).read_line(&mut line);
                let _ = tx.send(line);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        let cfg = JaegerRemoteConfig {
            endpoint: format!("http://127.0.0.1:{port}/sampling"),
            polling_interval: Duration::from_millis(50),
            initial_sampler: Box::new(super::super::AlwaysOff),
            service_name: "my svc".into(),
            max_operations: 10,
        };
        let s = JaegerRemoteSampler::start(cfg);
        let request = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            request.starts_with("GET /sampling?service=my%20svc HTTP/1.1"),
            "{request}"
        );
        let p = SamplingParams::root(TraceId::from(u128::MAX), "op");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.should_sample(&p).decision != Decision::RecordAndSample {
            assert!(std::time::Instant::now() < deadline, "strategy never applied");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn failed_fetch_keeps_initial_sampler() {
        let cfg = JaegerRemoteConfig {
            endpoint: "http://127.0.0.1:1/sampling".into(),
            initial_sampler: Box::new(super::super::AlwaysOn),
            polling_interval: Duration::from_millis(20),
            ..Default::default()
        };
        let s = JaegerRemoteSampler::start(cfg);
        std::thread::sleep(Duration::from_millis(60));
        let p = SamplingParams::root(TraceId::from(1u128), "a");
        assert_eq!(s.should_sample(&p).decision, Decision::RecordAndSample);
    }
}
