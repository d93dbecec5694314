//! UDP receivers (the Jaeger agent's ports, the X-Ray daemon's): one datagram, one payload,
//! converted once into OTLP. The datagrams that arrive within [`BATCH_WINDOW`] of a first one
//! are pushed together, their OTLP requests concatenated (a concatenation of encoded
//! `ExportTraceServiceRequest`s is one request holding all their resource spans): one push and
//! one write-ahead-log record instead of one each, since the cost per push, not the JSON or
//! thrift, is what a datagram of a few spans otherwise pays. Nobody waits for the window: UDP
//! senders get no answer.
//!
//! UDP carries no acknowledgement: a datagram is accepted or dropped, and every drop is counted
//! in `/metrics` (`weft_udp_datagrams_refused_total{port,reason}`) with reasons `parse` (not a
//! payload of the port's protocol), `overloaded` (more batches being made durable than
//! [`UDP_IN_FLIGHT`]) and `refused` (the ingester refused the spans: limits, back-pressure).
//! Datagrams go to the tenant `--udp-tenant`, since UDP has no headers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use weft_ingest::metrics::RefuseReason;
use weft_translate::TranslateError;

use crate::AppState;

/// Batches being pushed at once per UDP port (at most 32 MiB of OTLP); the datagrams of one
/// more are dropped (and counted), since UDP cannot push back. Pushes in flight share the
/// WAL's group commit.
pub const UDP_IN_FLIGHT: usize = 32;

/// At most this many datagrams, or [`BATCH_BYTES`] of OTLP, or the datagrams of this long
/// after the first, go into one push.
const BATCH_DATAGRAMS: usize = 256;
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(20);
const BATCH_BYTES: usize = 1 << 20;

/// Within a batch's window the socket is drained, then looked at again after this gap rather
/// than waited on: datagrams that senders spread out would otherwise cost a wake-up each. The
/// socket's buffer holds a gap's datagrams: at 30,000 datagrams a second, about 60.
const POLL_GAP: std::time::Duration = std::time::Duration::from_millis(2);

/// The socket's receive buffer: room for bursts while a batch is converted (the kernel's
/// default, about 208 KiB, holds about a hundred X-Ray datagrams). The kernel caps it at
/// `net.core.rmem_max`.
const RECV_BUFFER_BYTES: libc::c_int = 4 << 20;

/// Asks for a larger receive buffer; the kernel may grant less, which only means more drops
/// in a burst (each counted by the kernel, not by weft).
fn grow_recv_buffer(socket: &tokio::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = RECV_BUFFER_BYTES;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid pointer to `v`.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "SO_RCVBUF not raised");
    }
}

/// Counters of one UDP port.
#[derive(Default)]
pub struct UdpStats {
    pub received: AtomicU64,
    pub spans: AtomicU64,
    pub refused_parse: AtomicU64,
    pub refused_overloaded: AtomicU64,
    pub refused_refused: AtomicU64,
}

/// Serves one UDP port until `stop` fires: `decode` turns a datagram into an OTLP request and
/// its span count.
///
/// The socket is read by a thread of its own, in blocking calls, and not through the async
/// runtime: a socket registered with the runtime's epoll wakes a worker for every datagram
/// that arrives, even while nobody reads it, and senders spread their datagrams out. Measured
/// with X-Ray datagrams at 27,000 a second, those wake-ups cost more than converting the
/// datagrams (BENCHMARKS.md). Batches are pushed on the runtime.
pub async fn serve(
    st: Arc<AppState>,
    socket: tokio::net::UdpSocket,
    decode: impl Fn(&[u8]) -> Result<(Vec<u8>, usize), TranslateError> + Send + 'static,
    stats: Arc<UdpStats>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    grow_recv_buffer(&socket);
    let name = socket
        .local_addr()
        .map_or_else(|_| "udp".to_string(), |a| format!("udp-{}", a.port()));
    let socket = match socket.into_std().and_then(|s| {
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(STOP_CHECK))?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "UDP socket cannot be read in blocking mode; the port is closed");
            return;
        }
    };
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The thread stops when this task ends, also when it is dropped without a stop signal.
    struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let _stop_on_drop = StopOnDrop(stopping.clone());
    let rt = tokio::runtime::Handle::current();
    let thread = {
        let stopping = stopping.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || receive(st, socket, decode, stats, stopping, rt))
    };
    let thread = match thread {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the UDP receiving thread; the port is closed");
            return;
        }
    };
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    stopping.store(true, Ordering::Release);
    // The thread sees the flag within STOP_CHECK; it starts the push of the batch it holds
    // (UDP carries no acknowledgement: a push the shutdown overtakes is counted as refused).
    if let Ok(Err(_)) = tokio::task::spawn_blocking(move || thread.join()).await {
        tracing::error!("the UDP receiving thread panicked");
    }
}

/// How often a receiving thread waiting for a first datagram looks at the stop flag.
const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// Reads a datagram if one is queued, without waiting.
fn try_recv(socket: &std::net::UdpSocket, buf: &mut [u8]) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: recv writes at most `buf.len()` bytes into `buf`, a valid, writable slice.
    #[allow(unsafe_code)]
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    (n >= 0).then_some(n as usize)
}

/// The receiving thread: a batch begins with a datagram that a blocking read waits for, then
/// takes those queued within [`BATCH_WINDOW`], and is pushed on the runtime.
fn receive(
    st: Arc<AppState>,
    socket: std::net::UdpSocket,
    decode: impl Fn(&[u8]) -> Result<(Vec<u8>, usize), TranslateError>,
    stats: Arc<UdpStats>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    rt: tokio::runtime::Handle,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(UDP_IN_FLIGHT));
    let tenant: Arc<str> = st.cfg.udp_tenant.as_str().into();
    // The largest UDP payload is 65,507 bytes; a bigger buffer never truncates one.
    let mut buf = vec![0u8; 65_536];
    // The size of the last batch: the next one starts with room for as much, not growing
    // (and copying) its way there.
    let mut last_len = 0;
    while !stopping.load(Ordering::Acquire) {
        let first = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "UDP receive failed");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        // This datagram and those of the next BATCH_WINDOW: one batch.
        let deadline = std::time::Instant::now() + BATCH_WINDOW;
        let (mut otlp, mut count, mut datagrams) = (Vec::with_capacity(last_len), 0usize, 0usize);
        let mut n = first;
        loop {
            stats.received.fetch_add(1, Ordering::Relaxed);
            match decode(&buf[..n]) {
                Ok((one, c)) if c > 0 => {
                    otlp.extend_from_slice(&one);
                    count += c;
                    datagrams += 1;
                }
                Ok(_) => {}
                Err(e) => {
                    stats.refused_parse.fetch_add(1, Ordering::Relaxed);
                    st.receiver().refused(&tenant, RefuseReason::Invalid);
                    tracing::debug!(error = %e, "UDP datagram refused");
                }
            }
            if datagrams >= BATCH_DATAGRAMS || otlp.len() >= BATCH_BYTES {
                break;
            }
            // The next queued datagram; when none is, look again every POLL_GAP until the
            // window ends.
            let next = loop {
                if let Some(m) = try_recv(&socket, &mut buf) {
                    break Some(m);
                }
                let now = std::time::Instant::now();
                if now >= deadline || stopping.load(Ordering::Acquire) {
                    break None;
                }
                std::thread::sleep(POLL_GAP.min(deadline - now));
            };
            let Some(m) = next else { break };
            n = m;
        }
        last_len = otlp.len();
        if count == 0 {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.refused_overloaded.fetch_add(datagrams as u64, Ordering::Relaxed);
            for _ in 0..datagrams {
                st.receiver().refused(&tenant, RefuseReason::Overloaded);
            }
            continue;
        };
        let (st2, stats2, tenant2) = (st.clone(), stats.clone(), tenant.clone());
        rt.spawn(async move {
            let _slot = slot;
            match st2.receiver().push(&tenant2, Bytes::from(otlp), None).await {
                Ok(r) => {
                    let rejected = r.partial_success.as_ref().map_or(0, |p| p.rejected_spans as usize);
                    if rejected >= count {
                        stats2.refused_refused.fetch_add(datagrams as u64, Ordering::Relaxed);
                    } else {
                        stats2.spans.fetch_add((count - rejected) as u64, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    stats2.refused_refused.fetch_add(datagrams as u64, Ordering::Relaxed);
                }
            }
        });
    }
}
