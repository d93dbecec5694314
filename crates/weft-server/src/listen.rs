//! The accept loop every port uses (OTLP/gRPC, OTLP/HTTP, the query API).
//!
//! One loop for all of them so that every port has the same protections:
//! - **a connection cap**: at most `max_connections` open connections per port; past it the
//!   loop stops accepting and further connections wait in the kernel's backlog (logged, and
//!   counted in `/metrics`), so the process never runs out of file descriptors;
//! - **a header timeout**: a client must send a request's headers within `header_timeout`
//!   (slowloris). hyper starts this timer whenever an HTTP/1.1 connection waits for a request,
//!   so it also closes keep-alive connections idle for that long;
//! - **an idle timeout**: a connection with no request in flight and no bytes either way for
//!   `idle_timeout` is closed;
//! - accept errors (EMFILE and the like) are logged, rate-limited, and retried after a pause
//!   instead of spinning or failing silently;
//! - on shutdown the loop stops accepting, asks every connection to finish its requests, and
//!   returns when they have, or after [`DRAIN`] (a stalled client cannot block the exit).
//!
//! Request bodies are bounded elsewhere: by size and by the shared in-flight budget
//! ([`crate::budget`]), and in time by each receiver's body timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// HTTP/2 frame size (the gRPC port uses 1 MiB frames; see `main.rs`).
    pub h2_max_frame_size: Option<u32>,
}

/// Counters of one listener, for `/metrics`.
#[derive(Debug, Default)]
pub struct ListenStats {
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    /// Times the loop stopped accepting because the cap was reached.
    pub at_cap: AtomicU64,
    pub idle_closed: AtomicU64,
    pub accept_errors: AtomicU64,
}

/// The largest connection cap the process's file-descriptor limit allows for `ports`
/// listeners, keeping 1024 descriptors for files (WAL, blocks) and the rest of the process.
/// Raises the soft limit to the hard one first.
pub fn fd_connection_cap(ports: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    #[allow(unsafe_code)]
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    (soft.min(1 << 24) as usize).saturating_sub(1024).max(64 * ports) / ports.max(1)
}

/// Serves `service` on `listener` until `shutdown` turns true, then drains connections.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    stats: Arc<ListenStats>,
    mut shutdown: watch::Receiver<bool>,
    name: &'static str,
) where
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut last_cap_log: Option<Instant> = None;
    let mut last_err_log: Option<Instant> = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                stats.at_cap.fetch_add(1, Ordering::Relaxed);
                if last_cap_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(
                        port = name,
                        max_connections = limits.max_connections,
                        "connection cap reached; new connections wait until one closes"
                    );
                    last_cap_log = Some(Instant::now());
                }
                tokio::select! {
                    s = slots.clone().acquire_owned() => s.expect("never closed"),
                    _ = shutdown.changed() => continue,
                }
            }
        };
        let (stream, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    if last_err_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::error!(port = name, error = %e, "accepting a connection failed; retrying");
                        last_err_log = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => continue,
        };
        let _ = stream.set_nodelay(true);
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
        });
        let svc = hyper_util::service::TowerToHyperService::new(InFlight {
            inner: service.clone(),
            activity: activity.clone(),
        });
        let mut shutdown = shutdown.clone();
        let stats = stats.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _done = done;
            let mut b = auto::Builder::new(TokioExecutor::new());
            b.http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            b.http2()
                .timer(TokioTimer::new())
                .max_frame_size(limits.h2_max_frame_size)
                .max_concurrent_streams(256);
            let conn = b.serve_connection_with_upgrades(io, svc);
            tokio::pin!(conn);
            let mut tick = tokio::time::interval(
                (limits.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)),
            );
            let mut closing = false;
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    _ = shutdown.changed(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    _ = tick.tick(), if !closing => {
                        if activity.idle_for() >= limits.idle_timeout {
                            stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                            closing = true;
                            conn.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    drop(done_tx);
    // Every connection task holds a sender; recv returns None once all have finished. A client
    // that stalls mid-request does not hold up the exit past the drain time.
    if tokio::time::timeout(DRAIN, done_rx.recv()).await.is_err() {
        tracing::warn!(
            port = name,
            open = stats.open.load(Ordering::Relaxed),
            "connections still open after the shutdown drain time; closing them"
        );
    }
}

/// How long shutdown waits for in-flight requests to finish.
const DRAIN: Duration = Duration::from_secs(5);

/// When a connection last moved bytes, and how many requests it has in flight.
struct Activity {
    born: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity {
            born: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        self.last_ms
            .store(self.born.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long the connection has been idle: zero while a request is in flight.
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(last)
    }
}

/// A stream that records when it last read or wrote.
struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Counts a connection's requests in flight (until the response head is sent).
#[derive(Clone)]
struct InFlight<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S, R> tower::Service<R> for InFlight<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.activity.in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = Done(self.activity.clone());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let _guard = guard;
            fut.await
        })
    }
}

struct Done(Arc<Activity>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}
