//! The `weft` binary. With no subcommand it runs the roles `--target` names ([`modules`]);
//! by default every role in one process: OTLP receivers, the WAL and head, block building,
//! compaction, and the query API.

mod api;
mod budget;
mod config;
mod foreign_api;
mod jaeger_api;
mod listen;
mod loadgen;
mod modules;
mod receivers;
mod search_api;
mod streaming;
mod tempo;
mod tenant;
mod ui;
mod zipkin_api;

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};
use clap::Parser;
use config::{Cli, Command, Config, LogFormat};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What every handler shares.
pub struct AppState {
    pub cfg: Arc<Config>,
    pub tenants: Arc<tenant::Tenants>,
    pub modules: modules::Modules,
    pub trace_latency: api::Histogram,
    pub search_latency: api::Histogram,
    pub metrics_latency: api::Histogram,
    pub graph_latency: api::Histogram,
    pub started: Instant,
    /// Request bytes held by requests being received, over every port.
    pub budget: Arc<budget::RequestBudget>,
    /// Queries (search, tags, metrics, service graph, trace by ID) running at once.
    pub queries: Arc<tokio::sync::Semaphore>,
    /// Connections of each port: OTLP/gRPC, OTLP/HTTP, query API, Zipkin, Jaeger HTTP, Jaeger
    /// gRPC, Jaeger query, X-Ray sampling.
    pub listeners: [(&'static str, Arc<listen::ListenStats>); 8],
    /// Datagrams of the Jaeger agent's UDP ports (compact, binary).
    pub udp: [(&'static str, Arc<receivers::udp::UdpStats>); 3],
    /// The query runtime (lower priority than ingest), for query handlers served on a port
    /// that also receives spans (Zipkin's).
    pub background: tokio::runtime::Handle,
}

impl AppState {
    /// The receivers' context. Receivers are served only when the module runs.
    pub fn receiver(&self) -> &receivers::Receiver {
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

fn main() {
    limit_malloc_arenas();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Loadgen(args)) => loadgen::main(args),
        None => serve(&cli.server),
    };
    if let Err(e) = result {
        eprintln!("weft: {e:#}");
        std::process::exit(1);
    }
}

fn init_logging(cfg: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log_level));
    // Colour only on a terminal (a file or a pipe gets plain text), and never with NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match cfg.log_format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

fn serve(flags: &config::ServerFlags) -> anyhow::Result<()> {
    let cfg = Config::load(flags)?;
    init_logging(&cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weft")
        .build()?;
    // Queries run on their own threads at a lower scheduling priority (compaction too, on a
    // thread of its own), so a burst of heavy queries slows the queries, not ingest.
    let background = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weft-query")
        .on_thread_start(lower_priority)
        .build()?;
    let result = rt.block_on(run(cfg, background.handle().clone()));
    background.shutdown_timeout(Duration::from_secs(1));
    result
}

/// How much lower than ingest the query and compaction threads run (a `nice` increment:
/// under contention the scheduler gives them about a tenth of the CPU ingest threads get).
const BACKGROUND_NICE: libc::c_int = 10;

fn lower_priority() {
    // SAFETY: gettid and setpriority only read and change the calling thread's priority.
    #[allow(unsafe_code)]
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE);
    }
}

/// How long a query waits for one of `--max-concurrent-queries` slots before it gets 429.
const QUERY_QUEUE_WAIT: Duration = Duration::from_secs(30);

/// Admits a query that reads storage (everything under `/api/` but the echo, build info and
/// weft's own cheap endpoints) into one of the concurrent query slots, so a flood of heavy
/// queries waits in line instead of taking every core and all memory at once.
async fn admit_query(
    axum::extract::State(st): axum::extract::State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = req.uri().path();
    let reads_storage = path.starts_with("/api/")
        && !matches!(path, "/api/echo" | "/api/status/buildinfo")
        && !path.starts_with("/api/status/");
    if !reads_storage {
        return next.run(req).await;
    }
    match tokio::time::timeout(QUERY_QUEUE_WAIT, st.queries.clone().acquire_owned()).await {
        Ok(Ok(_slot)) => next.run(req).await,
        _ => {
            use axum::response::IntoResponse;
            (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [(axum::http::header::RETRY_AFTER, "5")],
                format!(
                    "too many queries: {} are running and others waited {}s for a slot (--max-concurrent-queries); retry later",
                    st.cfg.max_concurrent_queries,
                    QUERY_QUEUE_WAIT.as_secs()
                ),
            )
                .into_response()
        }
    }
}

/// Caps glibc's malloc arenas at one per core (its default is eight per core). Every arena
/// keeps the free memory of the threads that used it, fragmented, so after a burst of large
/// requests (six concurrent fetches of a 200,000-span trace) 16 arenas held about 150 MB that
/// `malloc_trim` could not return, and the burst itself peaked at 230 MB instead of 80 MB.
/// Threads keep their own small-allocation caches (tcache), so fewer arenas costs little
/// contention. Must run before any thread starts.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores as libc::c_int);
        }
    }
}

/// Hands memory freed by large requests back to the OS every few seconds. glibc's allocator
/// keeps freed memory in its arenas, so after a burst of large requests the resident size
/// would otherwise stay at its peak.
async fn return_freed_memory() {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        tokio::task::spawn_blocking(|| {
            // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps and in
            // its arenas; it touches no live allocation.
            #[allow(unsafe_code)]
            unsafe {
                libc::malloc_trim(0);
            }
        })
        .await
        .ok();
    }
}

async fn bind(host: &str, port: u16, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let addr = format!("{host}:{port}");
    tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for {what}"))
}

async fn shutdown_signal(tx: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM; shutting down"),
        _ = int.recv() => tracing::info!("received SIGINT; shutting down"),
    }
    let _ = tx.send(true);
}

async fn run(cfg: Config, background: tokio::runtime::Handle) -> anyhow::Result<()> {
    let cfg = Arc::new(cfg);
    let tenants = Arc::new(tenant::Tenants::new(&cfg));
    let modules = modules::Modules::init(&cfg, tenants.clone(), lower_priority).await?;
    tokio::spawn(return_freed_memory());
    let state = Arc::new(AppState {
        cfg: cfg.clone(),
        tenants,
        modules,
        trace_latency: api::Histogram::latency(),
        search_latency: api::Histogram::latency(),
        metrics_latency: api::Histogram::latency(),
        graph_latency: api::Histogram::latency(),
        started: Instant::now(),
        budget: Arc::new(budget::RequestBudget::new(cfg.max_inflight_request_bytes)),
        queries: Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrent_queries)),
        listeners: [
            ("otlp_grpc", Default::default()),
            ("otlp_http", Default::default()),
            ("query", Default::default()),
            ("zipkin", Default::default()),
            ("jaeger_http", Default::default()),
            ("jaeger_grpc", Default::default()),
            ("jaeger_query", Default::default()),
            ("xray", Default::default()),
        ],
        udp: [
            ("jaeger_compact", Default::default()),
            ("jaeger_binary", Default::default()),
            ("xray", Default::default()),
        ],
        background: background.clone(),
    });
    let m = &state.modules;
    let receives = m.runs(modules::Module::Receivers);
    let queries = m.runs(modules::Module::QueryApi);

    let api_l = bind(&cfg.listen_host, cfg.http_port, "the HTTP API").await?;
    let jaeger_query_l = if queries && cfg.jaeger_query_port != 0 {
        Some(bind(&cfg.listen_host, cfg.jaeger_query_port, "the Jaeger query API").await?)
    } else {
        None
    };
    let jaeger_l = if receives && cfg.jaeger_http_port != 0 {
        Some(bind(&cfg.listen_host, cfg.jaeger_http_port, "Jaeger thrift over HTTP").await?)
    } else {
        None
    };
    let jaeger_grpc_l = if receives && cfg.jaeger_grpc_port != 0 {
        Some(bind(&cfg.listen_host, cfg.jaeger_grpc_port, "the Jaeger collector (gRPC)").await?)
    } else {
        None
    };
    let mut udp_sockets = Vec::new();
    if receives {
        for (port, proto, what) in [
            (
                cfg.jaeger_compact_port,
                weft_translate::thrift::Protocol::Compact,
                "the Jaeger agent (compact thrift)",
            ),
            (
                cfg.jaeger_binary_port,
                weft_translate::thrift::Protocol::Binary,
                "the Jaeger agent (binary thrift)",
            ),
        ] {
            if port != 0 {
                let addr = format!("{}:{port}", cfg.listen_host);
                let sock = tokio::net::UdpSocket::bind(&addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}/udp for {what}"))?;
                udp_sockets.push((sock, proto));
            }
        }
    }
    // The X-Ray daemon's port: segments over UDP, sampling over TCP.
    let xray = if receives && cfg.xray_port != 0 {
        let rules = receivers::xray::SamplingRules::load(cfg.xray_sampling_rules.as_deref())?;
        let addr = format!("{}:{}", cfg.listen_host, cfg.xray_port);
        let sock = tokio::net::UdpSocket::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}/udp for the X-Ray daemon protocol"))?;
        Some((
            sock,
            bind(&cfg.listen_host, cfg.xray_port, "X-Ray sampling (TCP)").await?,
            Arc::new(rules),
        ))
    } else {
        None
    };
    let zipkin_l = if (receives || queries) && cfg.zipkin_port != 0 {
        Some(bind(&cfg.listen_host, cfg.zipkin_port, "Zipkin").await?)
    } else {
        None
    };
    let otlp = if receives {
        let grpc_l = bind(&cfg.listen_host, cfg.otlp_grpc_port, "OTLP/gRPC").await?;
        let http_l = bind(&cfg.listen_host, cfg.otlp_http_port, "OTLP/HTTP").await?;
        Some((grpc_l, http_l))
    } else {
        None
    };

    // Every target: operations endpoints. The query API and the UI with a querier.
    let mut api = Router::new()
        .route("/api/echo", get(api::echo))
        .route("/ready", get(api::ready))
        .route("/api/status/buildinfo", get(api::buildinfo))
        .route("/metrics", get(api::metrics));
    if queries {
        api = api
            .route("/api/traces/{id}", get(api::trace_v1))
            .route("/api/v2/traces/{id}", get(api::trace_v2))
            .route("/api/search", get(search_api::search))
            .route("/api/search/tags", get(search_api::tags_v1))
            .route("/api/v2/search/tags", get(search_api::tags_v2))
            .route("/api/search/tag/{tag}/values", get(search_api::tag_values_v1))
            .route("/api/v2/search/tag/{tag}/values", get(search_api::tag_values_v2))
            .route("/api/metrics/query_range", get(search_api::query_range))
            .route("/api/metrics/query", get(search_api::query_instant))
            .route("/api/service-graph", get(search_api::service_graph))
            .route("/", get(ui::page))
            .route("/search", get(ui::page))
            .route("/graph", get(ui::page))
            .route("/trace/{id}", get(ui::trace_page))
            .route("/assets/{file}", get(ui::asset))
            .fallback(ui::fallback)
            .layer(axum::middleware::from_fn_with_state(state.clone(), admit_query));
    } else {
        api = api.fallback(api::not_found);
    }
    let api = streaming::HttpPort {
        router: api.with_state(state.clone()),
        grpc: queries.then(|| streaming::StreamingQuerier::new(state.clone())),
    };

    let (tx, rx) = watch::channel(false);
    tokio::spawn(shutdown_signal(tx));
    tracing::info!(
        target_roles = ?cfg.target,
        modules = ?state.modules.running,
        data_dir = %cfg.data_dir.display(),
        http = %format!("http://{}:{}", cfg.listen_host, cfg.http_port),
        otlp_grpc = %if receives { format!("{}:{}", cfg.listen_host, cfg.otlp_grpc_port) } else { "off".into() },
        otlp_http = %if receives { format!("http://{}:{}/v1/traces", cfg.listen_host, cfg.otlp_http_port) } else { "off".into() },
        zipkin = %if zipkin_l.is_some() { format!("http://{}:{}", cfg.listen_host, cfg.zipkin_port) } else { "off".into() },
        jaeger_http = %if jaeger_l.is_some() { format!("http://{}:{}/api/traces", cfg.listen_host, cfg.jaeger_http_port) } else { "off".into() },
        jaeger_grpc = %if jaeger_grpc_l.is_some() { format!("{}:{}", cfg.listen_host, cfg.jaeger_grpc_port) } else { "off".into() },
        fsync = ?cfg.fsync,
        multitenancy = cfg.multitenancy,
        "weft is ready"
    );
    let max_connections = cfg.max_connections.min(listen::fd_connection_cap(8));
    if max_connections < cfg.max_connections {
        tracing::warn!(
            configured = cfg.max_connections,
            used = max_connections,
            "max_connections lowered to fit the file-descriptor limit"
        );
    }
    let limits = listen::Limits {
        max_connections,
        header_timeout: Duration::from_secs_f64(cfg.header_timeout),
        idle_timeout: Duration::from_secs_f64(cfg.idle_timeout),
        h2_max_frame_size: None,
    };
    // HTTP/2 frames of up to 1 MiB instead of 16 KiB: an OTLP batch of 512 spans (~130 KiB)
    // then arrives in one DATA frame instead of nine, with fewer wake-ups and buffer copies.
    // Flow-control windows stay at hyper's 1 MiB: larger ones let clients park more unread
    // data in server memory (peak RSS rose toward the 150 MB budget with 16 MiB windows).
    let grpc_limits = listen::Limits {
        h2_max_frame_size: Some(1 << 20),
        ..limits
    };
    let [
        (_, grpc_stats),
        (_, http_stats),
        (_, api_stats),
        (_, zipkin_stats),
        (_, jaeger_stats),
        (_, jaeger_grpc_stats),
        (_, jaeger_query_stats),
        (_, xray_stats),
    ] = state.listeners.clone();
    if let Some((sock, l, rules)) = xray {
        tokio::spawn(receivers::xray::serve_udp(
            state.clone(),
            sock,
            state.udp[2].1.clone(),
            rx.clone(),
        ));
        let r = Router::new()
            .route("/GetSamplingRules", post(receivers::xray::sampling_rules))
            .route("/SamplingTargets", post(receivers::xray::sampling_targets))
            .layer(axum::Extension(rules))
            .fallback(api::not_found)
            .with_state(state.clone());
        tokio::spawn(listen::serve(l, r, limits, xray_stats, rx.clone(), "xray"));
    }
    // Jaeger's query API: its own port, on the query runtime like the Tempo API's.
    if let Some(l) = jaeger_query_l {
        let r = Router::new()
            .route("/api/services", get(jaeger_api::services))
            .route(
                "/api/services/{service}/operations",
                get(jaeger_api::service_operations),
            )
            .route("/api/operations", get(jaeger_api::operations))
            .route("/api/traces", get(jaeger_api::traces))
            .route("/api/traces/{id}", get(jaeger_api::trace))
            .route("/api/dependencies", get(jaeger_api::dependencies))
            .route("/api/v3/services", get(jaeger_api::v3_services))
            .route("/api/v3/operations", get(jaeger_api::v3_operations))
            .route("/api/v3/traces", get(jaeger_api::v3_find))
            .route("/api/v3/traces/{id}", get(jaeger_api::v3_trace))
            .layer(axum::middleware::from_fn_with_state(state.clone(), admit_query))
            .fallback(api::not_found)
            .with_state(state.clone());
        background.spawn(listen::serve(
            l,
            r,
            limits,
            jaeger_query_stats,
            rx.clone(),
            "jaeger_query",
        ));
    }
    for (sock, proto) in udp_sockets {
        let stats = match proto {
            weft_translate::thrift::Protocol::Compact => state.udp[0].1.clone(),
            weft_translate::thrift::Protocol::Binary => state.udp[1].1.clone(),
        };
        tokio::spawn(receivers::jaeger::serve_udp(
            state.clone(),
            sock,
            proto,
            stats,
            rx.clone(),
        ));
    }
    let jaeger = async {
        let http = async {
            let Some(l) = jaeger_l else { return };
            let r = Router::new()
                .route("/api/traces", post(receivers::jaeger::traces))
                .fallback(api::not_found)
                .layer(axum::extract::DefaultBodyLimit::disable())
                .with_state(state.clone());
            listen::serve(l, r, limits, jaeger_stats, rx.clone(), "jaeger_http").await;
        };
        let grpc = async {
            let Some(l) = jaeger_grpc_l else { return };
            let svc = receivers::otlp_grpc::TraceService::jaeger(state.clone());
            listen::serve(l, svc, grpc_limits, jaeger_grpc_stats, rx.clone(), "jaeger_grpc").await;
        };
        tokio::join!(http, grpc);
    };
    // The HTTP port is served from the background runtime: query handlers, and the blocking
    // work they hand off, run on the low-priority threads.
    let api_srv = background.spawn(listen::serve(api_l, api, limits, api_stats, rx.clone(), "query"));
    let receivers = async {
        let Some((grpc_l, http_l)) = otlp else { return };
        let otlp_http = Router::new()
            .route("/v1/traces", post(receivers::otlp_http::export))
            .fallback(api::not_found)
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(state.clone());
        tokio::join!(
            listen::serve(
                grpc_l,
                receivers::otlp_grpc::TraceService::new(state.clone()),
                grpc_limits,
                grpc_stats,
                rx.clone(),
                "otlp_grpc"
            ),
            listen::serve(http_l, otlp_http, limits, http_stats, rx.clone(), "otlp_http"),
        );
    };
    // Zipkin's port serves its receiver and its query API together, as Zipkin does. It runs on
    // the ingest runtime; query handlers move their work to the query runtime.
    let zipkin = async {
        let Some(l) = zipkin_l else { return };
        let mut r = Router::new();
        if queries {
            r = r
                .route("/api/v2/services", get(zipkin_api::services))
                .route("/api/v2/spans", get(zipkin_api::spans))
                .route("/api/v2/remoteServices", get(zipkin_api::remote_services))
                .route("/api/v2/traces", get(zipkin_api::traces))
                .route("/api/v2/trace/{id}", get(zipkin_api::trace))
                .route("/api/v2/traceMany", get(zipkin_api::trace_many))
                .route("/api/v2/dependencies", get(zipkin_api::dependencies))
                .route("/api/v2/autocompleteKeys", get(zipkin_api::autocomplete_keys))
                .route("/api/v2/autocompleteValues", get(zipkin_api::autocomplete_values))
                .layer(axum::middleware::from_fn_with_state(state.clone(), admit_query));
        }
        if receives {
            let ingest = Router::new()
                .route("/api/v2/spans", post(receivers::zipkin::spans_v2))
                .route("/api/v1/spans", post(receivers::zipkin::spans_v1))
                .layer(axum::extract::DefaultBodyLimit::disable());
            r = r.merge(ingest);
        }
        let r = r
            .route("/health", get(api::ready))
            .fallback(api::not_found)
            .with_state(state.clone());
        listen::serve(l, r, limits, zipkin_stats, rx.clone(), "zipkin").await;
    };
    let (_, api_done, _, _) = tokio::join!(receivers, api_srv, zipkin, jaeger);
    api_done.context("HTTP API server")?;
    state.modules.stop().await;
    tracing::info!("weft stopped cleanly");
    Ok(())
}
