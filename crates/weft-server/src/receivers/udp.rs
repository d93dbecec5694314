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
use weft_admission::metrics::RefuseReason;
use weft_translate::TranslateError;

use crate::app::AppState;

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
/// datagrams (docs/benchmarks/receivers-zipkin-jaeger-xray.md, "X-Ray: the UDP socket read off
/// the runtime"). The thread reads up to [`BURST`] datagrams per system call (`recvmmsg`; the
/// same file, "UDP datagrams read sixteen at a time"). Batches are pushed on the runtime.
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

/// Datagrams read together: one `recvmmsg` call takes up to this many from the socket, where
/// a `recv` each cost a system call per datagram (X-Ray's are about 1.5 KB, five spans).
const BURST: usize = 16;

/// The largest UDP payload is 65,507 bytes; a slot this large never truncates one.
const SLOT: usize = 65_536;

/// Up to [`BURST`] datagrams read by one system call, taken one at a time.
struct Burst {
    /// `BURST` slots of `SLOT` bytes. One zeroed allocation: its pages are mapped on first
    /// use, so slots that small datagrams never reach cost no memory.
    buf: Vec<u8>,
    lens: [usize; BURST],
    /// Datagrams read, and the next to take.
    read: usize,
    next: usize,
}

impl Burst {
    fn new() -> Self {
        Burst {
            buf: vec![0u8; BURST * SLOT],
            lens: [0; BURST],
            read: 0,
            next: 0,
        }
    }

    /// The next datagram read and not yet taken.
    fn pop(&mut self) -> Option<&[u8]> {
        if self.next == self.read {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some(&self.buf[i * SLOT..i * SLOT + self.lens[i]])
    }

    /// Reads the datagrams queued on the socket, at most [`BURST`]; once everything read has
    /// been taken. `wait`: block until the first arrives (or the socket's read timeout ends),
    /// then take those queued with it; otherwise return at once. The count read, 0 if none.
    fn fill(&mut self, socket: &std::net::UdpSocket, wait: bool) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        debug_assert_eq!(self.next, self.read, "datagrams left untaken");
        let base = self.buf.as_mut_ptr();
        let mut iov: [libc::iovec; BURST] = std::array::from_fn(|i| libc::iovec {
            // In bounds: slot i of BURST slots of SLOT bytes.
            iov_base: base.wrapping_add(i * SLOT).cast(),
            iov_len: SLOT,
        });
        // SAFETY: an all-zero mmsghdr is valid (null name and control, no flags).
        #[allow(unsafe_code)]
        let mut msgs: [libc::mmsghdr; BURST] = unsafe { std::mem::zeroed() };
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
        // SAFETY: each of the BURST headers points at one iovec of SLOT writable bytes inside
        // `self.buf`, which outlives the call; the kernel writes at most that much per slot,
        // and sets `msg_len` and `msg_flags` of the headers it fills.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BURST as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        self.read = 0;
        self.next = 0;
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock if !wait => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for (len, m) in self.lens.iter_mut().zip(&msgs[..n]) {
            *len = m.msg_len as usize;
        }
        self.read = n;
        Ok(n)
    }
}

/// The datagrams of one push: their OTLP requests concatenated, their spans, and how many
/// held spans.
struct Batch {
    otlp: Vec<u8>,
    spans: usize,
    datagrams: usize,
}

/// Makes batches of the datagrams read from one socket.
struct Batcher {
    burst: Burst,
    /// Datagrams with spans in a batch at most: [`BATCH_DATAGRAMS`], but in tests.
    max_datagrams: usize,
    /// The size of the last batch: the next one starts with room for as much, not growing
    /// (and copying) its way there.
    last_len: usize,
}

impl Batcher {
    fn new() -> Self {
        Batcher {
            burst: Burst::new(),
            max_datagrams: BATCH_DATAGRAMS,
            last_len: 0,
        }
    }

    /// The next batch: the datagrams a full batch left, or else the next to arrive (waiting
    /// up to the socket's read timeout: `None` if none came), then those queued within
    /// [`BATCH_WINDOW`] of them, up to `max_datagrams` or [`BATCH_BYTES`]. A datagram that
    /// does not decode is counted and passed to `refused`.
    fn next(
        &mut self,
        socket: &std::net::UdpSocket,
        decode: &impl Fn(&[u8]) -> Result<(Vec<u8>, usize), TranslateError>,
        stats: &UdpStats,
        stopping: &std::sync::atomic::AtomicBool,
        refused: &mut impl FnMut(&TranslateError),
    ) -> std::io::Result<Option<Batch>> {
        let burst = &mut self.burst;
        if burst.next == burst.read {
            match burst.fill(socket, true) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        let deadline = std::time::Instant::now() + BATCH_WINDOW;
        let mut b = Batch {
            otlp: Vec::with_capacity(self.last_len),
            spans: 0,
            datagrams: 0,
        };
        loop {
            while let Some(d) = burst.pop() {
                stats.received.fetch_add(1, Ordering::Relaxed);
                match decode(d) {
                    Ok((one, c)) if c > 0 => {
                        b.otlp.extend_from_slice(&one);
                        b.spans += c;
                        b.datagrams += 1;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        stats.refused_parse.fetch_add(1, Ordering::Relaxed);
                        refused(&e);
                    }
                }
                if b.datagrams >= self.max_datagrams || b.otlp.len() >= BATCH_BYTES {
                    self.last_len = b.otlp.len();
                    // Datagrams left in the burst start the next batch.
                    return Ok(Some(b));
                }
            }
            // The next queued datagrams; when none are, look again every POLL_GAP until the
            // window ends.
            loop {
                if matches!(burst.fill(socket, false), Ok(n) if n > 0) {
                    break;
                }
                let now = std::time::Instant::now();
                if now >= deadline || stopping.load(Ordering::Acquire) {
                    self.last_len = b.otlp.len();
                    return Ok(Some(b));
                }
                std::thread::sleep(POLL_GAP.min(deadline - now));
            }
        }
    }
}

/// The receiving thread: batches of datagrams ([`Batcher::next`]), each pushed on the runtime.
fn receive(
    st: Arc<AppState>,
    socket: std::net::UdpSocket,
    decode: impl Fn(&[u8]) -> Result<(Vec<u8>, usize), TranslateError>,
    stats: Arc<UdpStats>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    rt: tokio::runtime::Handle,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(UDP_IN_FLIGHT));
    let tenant: Arc<str> = st.cfg.tenants.udp_tenant.as_str().into();
    let mut batcher = Batcher::new();
    let mut refused = |e: &TranslateError| {
        st.receiver().refused(&tenant, RefuseReason::Invalid);
        tracing::debug!(error = %e, "UDP datagram refused");
    };
    while !stopping.load(Ordering::Acquire) {
        let batch = match batcher.next(&socket, &decode, &stats, &stopping, &mut refused) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "UDP receive failed");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let Batch {
            otlp,
            spans: count,
            datagrams,
        } = batch;
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
            match st2.receiver().push_converted(&tenant2, Bytes::from(otlp), None).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (std::net::UdpSocket, std::net::UdpSocket) {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (rx, tx)
    }

    /// Every datagram comes out whole and in order, the largest UDP payload too, whatever
    /// bursts the reads take them in; nothing queued reads as 0 without waiting, and a wait
    /// ends at the socket's read timeout.
    #[test]
    fn a_burst_reads_datagrams_whole_and_in_order() {
        let (rx, tx) = pair();
        let mut burst = Burst::new();
        assert_eq!(burst.fill(&rx, false).unwrap(), 0);
        let e = burst.fill(&rx, true).unwrap_err();
        assert!(
            matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            "{e}"
        );
        let sent: Vec<Vec<u8>> = (0..40usize)
            .map(|i| match i {
                7 => vec![0xab; 65_507],
                _ => (0..(i * 97) % 1500 + 1).map(|j| (i * 31 + j) as u8).collect(),
            })
            .collect();
        for d in &sent {
            tx.send(d).unwrap();
        }
        let mut got = Vec::new();
        let mut reads = 0;
        while got.len() < sent.len() {
            let n = burst.fill(&rx, reads == 0).unwrap();
            assert!(n <= BURST);
            reads += 1;
            assert!(reads < 100, "datagrams lost: {} of {}", got.len(), sent.len());
            while let Some(d) = burst.pop() {
                got.push(d.to_vec());
            }
        }
        assert!(got == sent, "datagrams differ");
        assert!(reads < sent.len(), "{reads} reads for {} datagrams", sent.len());
    }

    /// A batch stops at its limit of datagrams; the datagrams of its last burst that did not
    /// fit start the next batch, so none is lost or reordered. A datagram that does not decode is
    /// counted and reported, and the others go on.
    #[test]
    fn datagrams_left_by_a_full_batch_start_the_next() {
        let (rx, tx) = pair();
        // 20 a batch: the first ends in the second burst of 16, with 12 left in it.
        let (max, total) = (20, 45);
        for i in 0..total as u32 {
            tx.send(&i.to_le_bytes()).unwrap();
        }
        tx.send(b"bad").unwrap();
        let decode = |d: &[u8]| {
            if d.len() == 4 {
                Ok((d.to_vec(), 2))
            } else {
                Err(TranslateError::new("not four bytes".to_string()))
            }
        };
        let (stats, stopping) = (UdpStats::default(), std::sync::atomic::AtomicBool::new(false));
        let mut batcher = Batcher::new();
        batcher.max_datagrams = max;
        let mut errors = Vec::new();
        let mut refused = |e: &TranslateError| errors.push(e.to_string());
        let mut batches = Vec::new();
        while let Some(b) = batcher.next(&rx, &decode, &stats, &stopping, &mut refused).unwrap() {
            batches.push(b);
        }
        let sizes: Vec<usize> = batches.iter().map(|b| b.datagrams).collect();
        assert_eq!(sizes, vec![20, 20, 5]);
        assert_eq!(batches.iter().map(|b| b.spans).sum::<usize>(), 2 * total);
        let all: Vec<u8> = batches.iter().flat_map(|b| b.otlp.iter().copied()).collect();
        let want: Vec<u8> = (0..total as u32).flat_map(|i| i.to_le_bytes()).collect();
        assert!(all == want, "datagrams lost or reordered between batches");
        assert_eq!(errors, vec!["not four bytes".to_string()]);
        assert_eq!(stats.received.load(Ordering::Relaxed), total as u64 + 1);
        assert_eq!(stats.refused_parse.load(Ordering::Relaxed), 1);
    }
}
