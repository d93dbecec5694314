//! What every handler shares ([`AppState`]), and how the ports of a process are built and
//! served ([`Server`]).
//!
//! After the modules of the target are initialised, each API folder (`crate::apis`) looks at
//! which run and binds its own ports through [`Server`]: it names each port (the `port` label
//! of its metrics), says on which runtime it is served, and adds its routes to the HTTP port
//! when it serves there. [`Server::run`] then serves them all until SIGTERM or SIGINT and
//! drains them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use parking_lot::Mutex;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

use crate::budget::RequestBudget;
use crate::config::Config;
use crate::listen::{self, Limits, ListenStats};
use crate::modules::{Module, Modules};
use crate::ops::Histogram;
use crate::receivers::udp::UdpStats;
use crate::tempo::streaming::{HttpPort, StreamingQuerier};
use crate::tenant::Tenants;
use weft_querier::fair::FairSlots;

/// What every handler shares.
pub struct AppState {
    pub cfg: Arc<Config>,
    pub tenants: Arc<Tenants>,
    pub modules: Modules,
    pub trace_latency: Histogram,
    pub search_latency: Histogram,
    pub metrics_latency: Histogram,
    pub graph_latency: Histogram,
    pub started: Instant,
    /// Request bytes held by requests being received, over every port.
    pub budget: Arc<RequestBudget>,
    /// Queries (search, tags, metrics, service graph, trace by ID) running at once, shared
    /// fairly between tenants; a tenant running none is lent one beyond the total.
    pub queries: Arc<FairSlots>,
    /// Counters of every port this process serves, by name.
    pub ports: PortStats,
    /// The query runtime (lower priority than ingest), for query handlers served on a port
    /// that also receives spans (Zipkin's).
    pub background: tokio::runtime::Handle,
    /// The queriers this process sends search jobs to, when it is a frontend
    /// (`--query-peers`); none, but present, with `--live-stores` alone.
    pub peers: Option<Arc<crate::query::jobs::Peers>>,
    /// The live stores this process asks for every query's recent spans (`--live-stores`).
    pub live: Option<Arc<crate::query::jobs::Peers>>,
    /// Search jobs sent and answered.
    pub jobs: crate::query::jobs::JobStats,
    /// Jobs (parts of other queriers' queries) running here at once: twice the query slots,
    /// shared between tenants as the query slots are. Apart from the query slots, which the
    /// frontends' own queries hold while they wait.
    pub job_slots: Arc<FairSlots>,
    /// Jaeger remote sampling's strategies, once its API is built (where receivers run).
    pub sampling: std::sync::OnceLock<Arc<crate::sampling::Sampling>>,
    /// The service names of each block, read once (Zipkin's service spellings).
    pub service_names: crate::query::foreign::BlockServiceNames,
}

impl AppState {
    pub fn new(cfg: Arc<Config>, tenants: Arc<Tenants>, modules: Modules, background: tokio::runtime::Handle) -> Self {
        let timeout = Duration::from_secs_f64(cfg.query.query_job_timeout);
        let live = (!cfg.query.live_stores.is_empty())
            .then(|| crate::query::jobs::Peers::of(cfg.query.live_stores.clone(), timeout));
        // With live stores every query is split (their head parts, then the blocks), even
        // over no other querier: the blocks' jobs then run here.
        let peers = crate::query::jobs::Peers::new(cfg.query.query_peers.clone(), timeout).or_else(|| {
            live.as_ref()
                .map(|_| crate::query::jobs::Peers::of(Vec::new(), timeout))
        });
        let slots = cfg.query.max_concurrent_queries.max(1);
        AppState {
            peers,
            live,
            jobs: Default::default(),
            job_slots: FairSlots::lending(2 * slots, 2 * slots),
            sampling: Default::default(),
            service_names: Default::default(),
            budget: Arc::new(RequestBudget::new(cfg.receivers.max_inflight_request_bytes)),
            queries: FairSlots::lending(slots, slots),
            cfg,
            tenants,
            modules,
            trace_latency: Histogram::latency(),
            search_latency: Histogram::latency(),
            metrics_latency: Histogram::latency(),
            graph_latency: Histogram::latency(),
            started: Instant::now(),
            ports: PortStats::default(),
            background,
        }
    }

    /// The receivers' context. Receivers are served only when the module runs.
    pub fn receiver(&self) -> &crate::receivers::Receiver {
        self.modules
            .receiver
            .as_ref()
            .expect("receivers are served only with the Receivers module")
    }

    /// The querier. Query routes are served only when the module runs.
    pub fn querier(&self) -> &weft_querier::Querier {
        self.modules
            .querier
            .as_deref()
            .expect("query routes are served only with the Querier module")
    }
}

/// The counters of each port a process serves, registered as its APIs bind them.
#[derive(Default)]
pub struct PortStats {
    tcp: Mutex<Vec<(&'static str, Arc<ListenStats>)>>,
    udp: Mutex<Vec<(&'static str, Arc<UdpStats>)>>,
}

impl PortStats {
    /// Every TCP port's counters, by name.
    pub fn tcp(&self) -> Vec<(&'static str, Arc<ListenStats>)> {
        self.tcp.lock().clone()
    }

    /// Every UDP port's counters, by name.
    pub fn udp(&self) -> Vec<(&'static str, Arc<UdpStats>)> {
        self.udp.lock().clone()
    }
}

/// Which runtime serves a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// The ingest runtime: receivers.
    Ingest,
    /// The query runtime, at a lower priority: query APIs.
    Query,
}

type ServeFn = Box<dyn FnOnce(Limits, watch::Receiver<bool>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A bound TCP port waiting to be served.
struct Pending {
    runtime: Runtime,
    serve: ServeFn,
}

/// The ports of a process, built by its APIs and then served.
pub struct Server {
    pub state: Arc<AppState>,
    shutdown: watch::Sender<bool>,
    pending: Vec<Pending>,
    /// Routes of the HTTP port, from every API that serves there.
    http: Router<Arc<AppState>>,
    /// What the HTTP port answers when no route matches.
    http_fallback: Option<Router<Arc<AppState>>>,
    http_grpc: Option<StreamingQuerier>,
    /// Where each port listens, for the log line at start.
    bound: Vec<String>,
}

impl Server {
    pub fn new(state: Arc<AppState>) -> Self {
        Server {
            state,
            shutdown: watch::channel(false).0,
            pending: Vec::new(),
            http: crate::ops::routes(),
            http_fallback: None,
            http_grpc: None,
            bound: Vec::new(),
        }
    }

    pub fn cfg(&self) -> &Config {
        &self.state.cfg
    }

    /// Whether this process runs `m`.
    pub fn runs(&self, m: Module) -> bool {
        self.state.modules.runs(m)
    }

    /// Fires when the process shuts down: loops that are not TCP servers (UDP ports) stop on it.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Binds TCP `port` on the listen address for `what` (named in the error).
    pub async fn bind(&mut self, name: &'static str, port: u16, what: &str) -> anyhow::Result<TcpListener> {
        let addr = format!("{}:{port}", self.cfg().server.listen_host);
        let l = TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr} for {what}"))?;
        self.bound.push(format!("{name}={addr}"));
        Ok(l)
    }

    /// [`Server::bind`], or `None` when `port` is 0 (the port is off).
    pub async fn bind_optional(
        &mut self,
        name: &'static str,
        port: u16,
        what: &str,
    ) -> anyhow::Result<Option<TcpListener>> {
        if port == 0 {
            return Ok(None);
        }
        self.bind(name, port, what).await.map(Some)
    }

    /// Binds UDP `port` for `what`, with counters named `name`; `None` when `port` is 0.
    pub async fn bind_udp(
        &mut self,
        name: &'static str,
        port: u16,
        what: &str,
    ) -> anyhow::Result<Option<(UdpSocket, Arc<UdpStats>)>> {
        if port == 0 {
            return Ok(None);
        }
        let addr = format!("{}:{port}", self.cfg().server.listen_host);
        let sock = UdpSocket::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}/udp for {what}"))?;
        self.bound.push(format!("{name}={addr}/udp"));
        let stats = Arc::new(UdpStats::default());
        self.state.ports.udp.lock().push((name, stats.clone()));
        Ok(Some((sock, stats)))
    }

    /// Serves HTTP (1.1 and 2, so gRPC too) on `listener` with `service`, on `runtime`, once
    /// the server runs. `frames` sets the HTTP/2 frame size (`None`: hyper's 16 KiB).
    pub fn serve<S, B>(
        &mut self,
        name: &'static str,
        listener: TcpListener,
        service: S,
        runtime: Runtime,
        frames: Option<u32>,
    ) where
        S: tower::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let stats = Arc::new(ListenStats::default());
        self.state.ports.tcp.lock().push((name, stats.clone()));
        self.pending.push(Pending {
            runtime,
            serve: Box::new(move |limits, stop| {
                let limits = Limits {
                    h2_max_frame_size: frames,
                    ..limits
                };
                Box::pin(listen::serve(listener, service, limits, stats, stop, name))
            }),
        });
    }

    /// Adds routes to the HTTP port (`--http-port`, served on the query runtime).
    pub fn http_routes(&mut self, routes: Router<Arc<AppState>>) {
        self.http = std::mem::take(&mut self.http).merge(routes);
    }

    /// What the HTTP port answers when no route matches; without one, the plain 404.
    pub fn http_fallback(&mut self, fallback: Router<Arc<AppState>>) {
        self.http_fallback = Some(fallback);
    }

    /// Serves Tempo's gRPC streaming API on the HTTP port beside its routes.
    pub fn http_grpc(&mut self, grpc: StreamingQuerier) {
        self.http_grpc = Some(grpc);
    }

    /// Binds the HTTP port, serves every port until SIGTERM or SIGINT, then drains them.
    pub async fn run(mut self) -> anyhow::Result<()> {
        let cfg = self.state.cfg.clone();
        let http_l = self.bind("query", cfg.server.http_port, "the HTTP API").await?;
        let fallback = self
            .http_fallback
            .take()
            .unwrap_or_else(|| Router::new().fallback(crate::ops::not_found));
        let router = std::mem::take(&mut self.http).merge(fallback);
        let port = HttpPort {
            router: router.with_state(self.state.clone()),
            grpc: self.http_grpc.take(),
        };
        self.serve("query", http_l, port, Runtime::Query, None);

        let ports = self.pending.len();
        let max_connections = cfg.server.max_connections.min(listen::fd_connection_cap(ports));
        if max_connections < cfg.server.max_connections {
            tracing::warn!(
                configured = cfg.server.max_connections,
                used = max_connections,
                "max_connections lowered to fit the file-descriptor limit"
            );
        }
        let limits = Limits {
            max_connections,
            header_timeout: Duration::from_secs_f64(cfg.server.header_timeout),
            idle_timeout: Duration::from_secs_f64(cfg.server.idle_timeout),
            h2_max_frame_size: None,
        };
        tokio::spawn(shutdown_signal(self.shutdown.clone()));
        // What this process keeps where: only roles with a WAL fsync, and only local storage
        // or a WAL uses the data directory.
        let m = &self.state.modules;
        let wal = m.runs(Module::Ingester);
        let local = m.runs(Module::Storage) && cfg.storage.storage == crate::modules::storage::StorageKind::Local;
        let data_dir = if wal || local {
            cfg.server.data_dir.display().to_string()
        } else {
            "none".to_owned()
        };
        let fsync = if wal {
            format!("{:?}", cfg.ingester.fsync)
        } else {
            "none".to_owned()
        };
        tracing::info!(
            target_roles = ?cfg.server.target,
            modules = ?m.running,
            data_dir = %data_dir,
            ports = %self.bound.join(" "),
            fsync = %fsync,
            multitenancy = cfg.tenants.multitenancy,
            "weft is ready"
        );
        let mut servers = Vec::with_capacity(ports);
        for p in self.pending.drain(..) {
            let fut = (p.serve)(limits, self.shutdown.subscribe());
            servers.push(match p.runtime {
                Runtime::Ingest => tokio::spawn(fut),
                Runtime::Query => self.state.background.spawn(fut),
            });
        }
        for s in servers {
            s.await.context("serving a port")?;
        }
        self.state.modules.stop().await;
        tracing::info!("weft stopped cleanly");
        Ok(())
    }
}

async fn shutdown_signal(tx: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM; shutting down"),
        _ = int.recv() => tracing::info!("received SIGINT; shutting down"),
    }
    tx.send_replace(true);
}
