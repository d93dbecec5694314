//! The `weft` binary. With no subcommand it runs the roles `--target` names ([`modules`]);
//! by default every role in one process: OTLP receivers, the WAL and head, block building,
//! compaction, and the query API.
//!
//! Here: arguments, logs, the two runtimes and the process's memory habits. The modules of
//! the target are initialised by [`modules::Modules::init`], and the ports they serve are
//! built by the API folders ([`apis`]) and served by [`app::Server`].

mod apis;
mod app;
mod budget;
mod config;
mod jaeger;
mod listen;
mod modules;
mod ops;
mod otlp;
mod query;
mod receivers;
mod sampling;
mod tempo;
mod tenant;
mod ui;
mod xray;
mod zipkin;

use app::AppState;

use clap::Parser;
use config::{Cli, Command, Config, LogFormat};
use std::sync::Arc;
use std::time::Duration;

fn main() {
    tune_malloc();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Loadgen(args)) => weft_loadgen::main(args),
        None => Config::load(std::env::args_os()).and_then(serve),
    };
    if let Err(e) = result {
        eprintln!("weft: {e:#}");
        std::process::exit(1);
    }
}

fn init_logging(cfg: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.server.log_level));
    // Colour only on a terminal (a file or a pipe gets plain text), and never with NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match cfg.server.log_format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

fn serve(cfg: Config) -> anyhow::Result<()> {
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

/// Initialises the target's modules, builds every API's ports, and serves them until
/// SIGTERM or SIGINT.
async fn run(cfg: Config, background: tokio::runtime::Handle) -> anyhow::Result<()> {
    let cfg = Arc::new(cfg);
    let tenants = Arc::new(tenant::Tenants::new(&cfg.tenants));
    let modules = modules::Modules::init(&cfg, tenants.clone(), lower_priority).await?;
    tokio::spawn(return_freed_memory());
    let state = Arc::new(AppState::new(cfg.clone(), tenants, modules, background));
    let mut server = app::Server::new(state);
    cfg.apis.build(&mut server).await?;
    server.run().await
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

/// Fixes the size from which an allocation is its own mapping at 4 MiB. glibc's default
/// starts at 128 KiB and rises to the largest mapped block freed (up to 32 MiB), after which
/// large request buffers (a gRPC message grows by doubling) come from the arenas and fragment
/// them: 100 concurrent 15 MiB gRPC messages, whose bytes the request budget holds to 256 MiB,
/// peaked at 411–531 MiB over four runs; with the size fixed, 353–378 MiB.
///
/// Fixing that size also stops glibc from raising the free space an arena keeps at its top
/// (the trim threshold) with it, which then stays at 128 KiB: a query's workers gave memory
/// back and took it again about 1,700 times per metrics query (`brk` and `madvise`), each
/// a page-table change that interrupts the other core running a worker of the same process.
/// At parallelism 2 that cost 13 % of `{ status = error } | rate()`'s time. The threshold is
/// set to twice the mapping size, what glibc's own rule would have given; the periodic
/// `malloc_trim` still returns the rest.
///
/// The number of arenas is left at glibc's default (eight per core). It was capped at one
/// per core to bound fragmentation, before the mapping size was fixed; with the cap, two
/// query workers shared an arena about half the time (threads take arenas in turn), and
/// each allocation that missed the thread's cache waited on the other's lock: 20–40 % more
/// CPU per whole-trace query at parallelism 2, in about half the runs. With the default, the
/// memory-bound tests peak where they did with the cap (477–482 MiB for six fetches of a
/// 200,000-span trace, 334–356 MiB for 100 15 MiB gRPC messages; bound 512 MiB), and
/// `GLIBC_TUNABLES=glibc.malloc.arena_max` still sets it. Must run before any thread starts.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 4 << 20;
        const TRIM_THRESHOLD: libc::c_int = 2 * MMAP_THRESHOLD;
        // SAFETY: mallopt only sets allocator parameters; called before other threads exist.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
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
