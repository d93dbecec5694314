//! Jaeger's remote-sampling API, served by weft: the agent's HTTP form on its own port
//! (`GET /sampling?service=…`, and the older `/api/sampling` and `/`), and gRPC
//! `jaeger.api_v2.SamplingManager/GetSamplingStrategy` on another ([`grpc`]). Strategies come
//! from a strategies file in Jaeger's format, reloaded when it changes, or, without one, from
//! adaptive sampling over the root spans this process's ingest admits (`weft_sampling`).
//! `GET /api/sampling/operations` on the HTTP port shows each operation's rate, probability
//! and sampled traces a second, as `/metrics` does.

mod grpc;
pub(crate) mod share;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use parking_lot::RwLock;
use serde_json::json;
use weft_core::prom::{Exposition, Kind};
use weft_sampling::{Adaptive, AdaptiveConfig, Strategies, Strategy};

use crate::apis::Api;
use crate::app::{AppState, Runtime, Server};
use crate::modules::Module;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Sampling (Jaeger remote sampling)")]
pub struct SamplingOptions {
    /// Jaeger remote sampling over HTTP (`GET /sampling?service=…`, as Jaeger's agent serves
    /// it); 0 turns it off.
    #[arg(long, env = "WEFT_SAMPLING_HTTP_PORT", default_value_t = 5778)]
    pub sampling_http_port: u16,
    /// Jaeger remote sampling over gRPC (`jaeger.api_v2.SamplingManager`); 0 turns it off.
    #[arg(long, env = "WEFT_SAMPLING_GRPC_PORT", default_value_t = 5779)]
    pub sampling_grpc_port: u16,
    /// A strategies file in Jaeger's format (`service_strategies`, `default_strategy`), served
    /// as it is and read again when it changes [default: adaptive sampling].
    #[arg(long, env = "WEFT_SAMPLING_STRATEGIES_FILE")]
    pub sampling_strategies_file: Option<PathBuf>,
    /// How often the strategies file is checked for changes, in seconds.
    #[arg(long, env = "WEFT_SAMPLING_STRATEGIES_RELOAD", default_value_t = 5.0)]
    pub sampling_strategies_reload: f64,
    /// Adaptive sampling: seconds between calculations of the probabilities. Keep it at least
    /// the SDKs' polling interval (60 s by default).
    #[arg(long, env = "WEFT_SAMPLING_INTERVAL", default_value_t = 60.0)]
    pub sampling_interval: f64,
    /// Adaptive sampling: traces a second each operation is sampled at.
    #[arg(long, env = "WEFT_SAMPLING_TARGET_TPS", default_value_t = 1.0)]
    pub sampling_target_tps: f64,
    /// Adaptive sampling: the probability of operations not seen yet.
    #[arg(long, env = "WEFT_SAMPLING_INITIAL_PROBABILITY", default_value_t = 0.001)]
    pub sampling_initial_probability: f64,
    /// Adaptive sampling: no operation's probability goes below this.
    #[arg(long, env = "WEFT_SAMPLING_MIN_PROBABILITY", default_value_t = 1e-5)]
    pub sampling_min_probability: f64,
    /// Adaptive sampling: every operation is sampled at least this often (traces a second),
    /// by the SDKs' lower bound.
    #[arg(long, env = "WEFT_SAMPLING_LOWER_BOUND_TPS", default_value_t = 1.0 / 60.0)]
    pub sampling_lower_bound_tps: f64,
}

impl SamplingOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        let positive = |v: f64, flag: &str| {
            anyhow::ensure!(v.is_finite() && v > 0.0, "--{flag} must be a positive number, got {v}");
            Ok(())
        };
        positive(self.sampling_strategies_reload, "sampling-strategies-reload")?;
        positive(self.sampling_interval, "sampling-interval")?;
        positive(self.sampling_target_tps, "sampling-target-tps")?;
        let probability = |v: f64, flag: &str| {
            anyhow::ensure!(v > 0.0 && v <= 1.0, "--{flag} must be above 0 and at most 1, got {v}");
            Ok(())
        };
        probability(self.sampling_initial_probability, "sampling-initial-probability")?;
        probability(self.sampling_min_probability, "sampling-min-probability")?;
        anyhow::ensure!(
            self.sampling_lower_bound_tps.is_finite() && self.sampling_lower_bound_tps >= 0.0,
            "--sampling-lower-bound-tps must be 0 or more, got {}",
            self.sampling_lower_bound_tps
        );
        Ok(())
    }

    fn adaptive(&self) -> AdaptiveConfig {
        AdaptiveConfig {
            target_tps: self.sampling_target_tps,
            initial_probability: self.sampling_initial_probability,
            min_probability: self.sampling_min_probability,
            lower_bound_tps: self.sampling_lower_bound_tps,
            ..AdaptiveConfig::default()
        }
    }
}

/// Where strategies come from.
pub enum Sampling {
    File {
        path: PathBuf,
        strategies: RwLock<Arc<Strategies>>,
    },
    Adaptive {
        adaptive: Arc<Adaptive>,
        interval: f64,
    },
}

impl Sampling {
    /// What `service` of `tenant` is told.
    pub fn strategy(&self, tenant: &str, service: &str) -> Strategy {
        match self {
            Sampling::File { strategies, .. } => strategies.read().for_service(service).clone(),
            Sampling::Adaptive { adaptive, .. } => adaptive.strategy(tenant, service),
        }
    }

    /// Adaptive sampling's per-operation series (none from a file).
    pub fn render_metrics(&self, out: &mut Exposition, only_tenant: Option<&str>) {
        let Sampling::Adaptive { adaptive, .. } = self else {
            return;
        };
        let tenants = adaptive.tenants();
        let ops: Vec<_> = tenants
            .iter()
            .filter(|t| only_tenant.is_none_or(|o| o == &***t))
            .map(|t| (t.clone(), adaptive.operations(t)))
            .collect();
        type Value = fn(&weft_sampling::OperationState) -> f64;
        let families: [(&str, &str, Value); 3] = [
            (
                "weft_sampling_root_spans_per_second",
                "Adaptive sampling's estimate of an operation's root spans a second, sampled or not.",
                |o| o.root_spans_per_second,
            ),
            (
                "weft_sampling_probability",
                "The probability adaptive sampling serves for an operation.",
                |o| o.probability,
            ),
            (
                "weft_sampling_sampled_traces_per_second",
                "Sampled traces a second that arrived for an operation in the last interval.",
                |o| o.sampled_traces_per_second,
            ),
        ];
        for (name, help, value) in families {
            out.family(name, Kind::Gauge, help);
            for (tenant, list) in &ops {
                for o in list {
                    out.sample(
                        name,
                        &[("tenant", tenant), ("service", &o.service), ("operation", &o.operation)],
                        value(o),
                    );
                }
            }
        }
    }
}

impl Api for SamplingOptions {
    async fn build(&self, s: &mut Server) -> anyhow::Result<()> {
        if !s.runs(Module::Receivers) {
            return Ok(());
        }
        let sampling = match &self.sampling_strategies_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read --sampling-strategies-file {}: {e}", path.display()))?;
                let strategies = Strategies::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--sampling-strategies-file {}: {e}", path.display()))?;
                Sampling::File {
                    path: path.clone(),
                    strategies: RwLock::new(Arc::new(strategies)),
                }
            }
            None => {
                let adaptive = Arc::new(Adaptive::new(self.adaptive()));
                s.state
                    .receiver()
                    .consumer
                    .watch_roots(adaptive.clone())
                    .map_err(|e| anyhow::anyhow!(e))?;
                Sampling::Adaptive {
                    adaptive,
                    interval: self.sampling_interval,
                }
            }
        };
        let sampling = Arc::new(sampling);
        let _ = s.state.sampling.set(sampling.clone());
        let stop = s.stop_signal();
        match &*sampling {
            Sampling::File { .. } => {
                tokio::spawn(reload(sampling.clone(), self.sampling_strategies_reload, stop));
            }
            Sampling::Adaptive { adaptive, interval } if s.runs(Module::Distributor) => {
                let (adaptive, interval, kafka) = (adaptive.clone(), *interval, s.cfg().kafka.clone());
                let sampling = sampling.clone();
                tokio::spawn(async move {
                    if let Err(e) = share::run(adaptive, interval, kafka, stop.clone()).await {
                        tracing::error!(error = %e, "adaptive sampling cannot share counts: this distributor calculates alone");
                        calculate(sampling, stop).await;
                    }
                });
            }
            Sampling::Adaptive { .. } => {
                tokio::spawn(calculate(sampling.clone(), stop));
            }
        }
        s.http_routes(Router::new().route("/api/sampling/operations", get(operations)));
        if let Some(l) = s
            .bind_optional(
                "sampling_http",
                self.sampling_http_port,
                "Jaeger remote sampling (HTTP)",
            )
            .await?
        {
            let r = Router::new()
                .route("/sampling", get(strategy))
                .route("/api/sampling", get(strategy))
                .route("/", get(strategy))
                .fallback(crate::ops::not_found)
                .with_state(s.state.clone());
            s.serve("sampling_http", l, r, Runtime::Ingest, None);
        }
        if let Some(l) = s
            .bind_optional(
                "sampling_grpc",
                self.sampling_grpc_port,
                "Jaeger remote sampling (gRPC)",
            )
            .await?
        {
            s.serve(
                "sampling_grpc",
                l,
                grpc::SamplingManager::new(s.state.clone()),
                Runtime::Ingest,
                None,
            );
        }
        Ok(())
    }
}

/// Every `interval`, adaptive sampling's calculation over the roots counted since the last.
async fn calculate(sampling: Arc<Sampling>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Sampling::Adaptive { adaptive, interval } = &*sampling else {
        return;
    };
    let mut last = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(*interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        adaptive.calculate(now.duration_since(last).as_secs_f64());
        last = now;
    }
}

/// Reads the strategies file again when its size or modification time changed; a file that
/// no longer parses is logged and the strategies in force stay.
async fn reload(sampling: Arc<Sampling>, every: f64, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Sampling::File { path, strategies } = &*sampling else {
        return;
    };
    let stamp = |p: &PathBuf| std::fs::metadata(p).ok().map(|m| (m.len(), m.modified().ok()));
    let mut seen = stamp(path);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(every)) => {}
            _ = stop.changed() => return,
        }
        let now = stamp(path);
        if now == seen {
            continue;
        }
        seen = now;
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| Strategies::parse(&t))
        {
            Ok(s) => {
                *strategies.write() = Arc::new(s);
                tracing::info!(file = %path.display(), "sampling strategies reloaded");
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "sampling strategies not reloaded; the previous ones stay")
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct ServiceParam {
    service: Option<String>,
}

fn plain(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], msg).into_response()
}

/// `GET /sampling?service=…` (and `/api/sampling`, `/`): the service's strategy as JSON.
async fn strategy(State(st): State<Arc<AppState>>, headers: HeaderMap, q: Query<ServiceParam>) -> Response {
    let tenant = match st.receiver().tenant(&headers) {
        Ok(t) => t,
        Err(r) => return plain(StatusCode::UNAUTHORIZED, format!("{}\n", r.parts().2)),
    };
    let Some(service) = q.0.service.filter(|s| !s.is_empty()) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "'service' parameter must be provided: GET /sampling?service=<service name>\n".into(),
        );
    };
    let Some(sampling) = st.sampling.get() else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "sampling is not running here\n".into());
    };
    let body = sampling.strategy(&tenant, &service).to_json();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /api/sampling/operations`: adaptive sampling's view of the tenant's operations.
async fn operations(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let tenant = match st.tenants.resolve(&headers) {
        Ok(t) => t,
        Err(e) => return plain(StatusCode::UNAUTHORIZED, format!("{}\n", e.0)),
    };
    let Some(sampling) = st.sampling.get() else {
        return plain(StatusCode::NOT_FOUND, "sampling is not running here\n".into());
    };
    let body = match &**sampling {
        Sampling::File { path, .. } => json!({"mode": "file", "file": path.display().to_string(), "operations": []}),
        Sampling::Adaptive { adaptive, interval } => {
            let cfg = adaptive.config();
            let ops: Vec<_> = adaptive
                .operations(&tenant)
                .into_iter()
                .map(|o| {
                    json!({
                        "service": o.service,
                        "operation": o.operation,
                        "rootSpansPerSecond": o.root_spans_per_second,
                        "probability": o.probability,
                        "sampledTracesPerSecond": o.sampled_traces_per_second,
                    })
                })
                .collect();
            json!({
                "mode": "adaptive",
                "intervalSeconds": interval,
                "targetTracesPerSecond": cfg.target_tps,
                "initialProbability": cfg.initial_probability,
                "lowerBoundTracesPerSecond": cfg.lower_bound_tps,
                "operations": ops,
            })
        }
    };
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
