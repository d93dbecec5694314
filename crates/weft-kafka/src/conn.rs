//! One TCP connection to one broker, pipelined: requests are written in order and their
//! responses, which Kafka returns in the same order, are matched to waiting callers by a FIFO
//! of correlation ids. A failed read or write closes the connection and fails every caller
//! waiting on it; the client opens a new one on the next request. A connection may be TLS and
//! is authenticated before its first request when SASL is configured (security.rs).

use crate::Error;
use crate::security::{self, Security};
use crate::wire::{Get, Put};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The largest response this client accepts (a fetch is asked for far less).
const MAX_RESPONSE: usize = 256 << 20;

type Waiter = (i32, oneshot::Sender<Result<Bytes, Error>>);
type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

pub(crate) struct Conn {
    pub addr: String,
    writer: tokio::sync::Mutex<Writer>,
    waiting: Arc<Mutex<VecDeque<Waiter>>>,
    dead: Arc<AtomicBool>,
    /// Why the reader stopped, for requests that find the connection closed.
    why: Arc<Mutex<Option<String>>>,
    next_id: AtomicI32,
    client_id: String,
    /// When the authenticated session ends soon enough that new requests go to a new
    /// connection (the broker's session lifetime, or the token's expiry).
    renew_at: Option<Instant>,
    /// The task reading responses: stopped when the connection is dropped (nobody can be
    /// waiting then), so a retired connection does not linger until the broker closes it.
    reader: parking_lot::Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(r) = self.reader.lock().take() {
            r.abort();
        }
    }
}

impl Conn {
    pub async fn open(addr: &str, client_id: &str, timeout: Duration, security: &Security) -> Result<Arc<Conn>, Error> {
        tokio::time::timeout(timeout, Conn::connect(addr, client_id, security))
            .await
            .map_err(|_| Error::Io(format!("connecting to Kafka broker {addr} timed out")))?
    }

    async fn connect(addr: &str, client_id: &str, security: &Security) -> Result<Arc<Conn>, Error> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| Error::Io(format!("connecting to Kafka broker {addr}: {e}")))?;
        stream.set_nodelay(true).ok();
        let (read, write, session): (Reader, Writer, _) = match &security.tls {
            None => {
                let mut stream = stream;
                let session = match &security.sasl {
                    Some(sasl) => Some(security::authenticate(&mut stream, sasl, addr, client_id).await?),
                    None => None,
                };
                let (r, w) = stream.into_split();
                (Box::new(r), Box::new(w), session)
            }
            Some(tls) => {
                let mut stream = tls.connect(addr, stream).await?;
                let session = match &security.sasl {
                    Some(sasl) => Some(security::authenticate(&mut stream, sasl, addr, client_id).await?),
                    None => None,
                };
                let (r, w) = tokio::io::split(stream);
                (Box::new(r), Box::new(w), session)
            }
        };
        let conn = Arc::new(Conn {
            addr: addr.to_string(),
            writer: tokio::sync::Mutex::new(write),
            waiting: Arc::new(Mutex::new(VecDeque::new())),
            dead: Arc::new(AtomicBool::new(false)),
            why: Arc::new(Mutex::new(None)),
            next_id: AtomicI32::new(1),
            client_id: client_id.to_string(),
            renew_at: session.and_then(|s| s.renew_after).map(|d| Instant::now() + d),
            reader: parking_lot::Mutex::new(None),
        });
        let task = tokio::spawn(read_loop(
            read,
            conn.waiting.clone(),
            conn.dead.clone(),
            conn.why.clone(),
            addr.to_string(),
        ));
        *conn.reader.lock() = Some(task.abort_handle());
        Ok(conn)
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Whether new requests should go here: alive, and its session not about to end.
    pub fn usable(&self) -> bool {
        !self.is_dead() && self.renew_at.is_none_or(|at| Instant::now() < at)
    }

    /// Sends one request and waits for its response body (after the correlation id).
    pub async fn call(&self, api_key: i16, version: i16, body: &[u8], timeout: Duration) -> Result<Bytes, Error> {
        self.call_with(api_key, version, body, timeout, |_| {}).await
    }

    /// As [`Conn::call`], running `before_write` while holding the connection's write order:
    /// whatever it assigns (a producer sequence, say) reaches the broker in the order assigned.
    pub async fn call_with(
        &self,
        api_key: i16,
        version: i16,
        body: &[u8],
        timeout: Duration,
        before_write: impl FnOnce(&mut [u8]),
    ) -> Result<Bytes, Error> {
        let mut frame = self.frame(api_key, version, body.len());
        frame.extend_from_slice(body);
        self.send_frame(frame, timeout, before_write).await
    }

    /// A request frame with its header written (size and correlation id filled in when it is
    /// sent). Append the body and pass it to [`Conn::send_frame`]: a large body is then
    /// written once, in place, instead of being copied into a frame.
    pub fn frame(&self, api_key: i16, version: i16, body_capacity: usize) -> Vec<u8> {
        let mut frame = Vec::with_capacity(body_capacity + 14 + self.client_id.len());
        frame.i32(0); // size
        frame.i16(api_key);
        frame.i16(version);
        frame.i32(0); // correlation id
        frame.string(&self.client_id);
        frame
    }

    /// Sends a frame made by [`Conn::frame`]; `before_write` gets the body (after the header)
    /// while the connection's write order is held.
    pub async fn send_frame(
        &self,
        mut frame: Vec<u8>,
        timeout: Duration,
        before_write: impl FnOnce(&mut [u8]),
    ) -> Result<Bytes, Error> {
        if self.is_dead() {
            let why = self.why.lock().clone();
            return Err(Error::Io(
                why.unwrap_or_else(|| format!("connection to {} is closed", self.addr)),
            ));
        }
        let body_at = 14 + self.client_id.len();
        let (tx, rx) = oneshot::channel();
        {
            let mut w = self.writer.lock().await;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            frame[8..12].copy_from_slice(&id.to_be_bytes());
            before_write(&mut frame[body_at..]);
            let len = (frame.len() - 4) as i32;
            frame[..4].copy_from_slice(&len.to_be_bytes());
            self.waiting.lock().push_back((id, tx));
            let written = tokio::time::timeout(timeout, w.write_all(&frame)).await;
            let failed = match written {
                Ok(Ok(())) => None,
                // A TLS 1.3 broker refuses a client certificate after the handshake: its alert
                // can come back on the first write as well as on a read.
                Ok(Err(e)) => Some(format!(
                    "writing to Kafka broker {}: {e}{}",
                    self.addr,
                    security::alert_hint(&e).unwrap_or("")
                )),
                Err(_) => Some(format!("writing to Kafka broker {} timed out", self.addr)),
            };
            if let Some(msg) = failed {
                self.dead.store(true, Ordering::Release);
                let _ = w.shutdown().await;
                fail_all(&self.waiting, &msg);
                return Err(Error::Io(msg));
            }
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Error::Io(format!("connection to {} closed", self.addr))),
            Err(_) => {
                // The response may still come; the stream is no longer in a known state for us.
                self.dead.store(true, Ordering::Release);
                Err(Error::Io(format!(
                    "Kafka broker {} did not answer in {timeout:?}",
                    self.addr
                )))
            }
        }
    }
}

fn fail_all(waiting: &Mutex<VecDeque<Waiter>>, msg: &str) {
    for (_, tx) in waiting.lock().drain(..) {
        let _ = tx.send(Err(Error::Io(msg.to_string())));
    }
}

async fn read_loop(
    mut read: Reader,
    waiting: Arc<Mutex<VecDeque<Waiter>>>,
    dead: Arc<AtomicBool>,
    why: Arc<Mutex<Option<String>>>,
    addr: String,
) {
    let msg = loop {
        let mut len = [0u8; 4];
        if let Err(e) = read.read_exact(&mut len).await {
            let hint = security::alert_hint(&e).unwrap_or("");
            break format!("reading from Kafka broker {addr}: {e}{hint}");
        }
        let len = i32::from_be_bytes(len);
        if len < 4 || len as usize > MAX_RESPONSE {
            break format!("Kafka broker {addr} sent a response of {len} bytes");
        }
        // Read into spare capacity: a fetch answer is megabytes, and zeroing it first (or
        // faulting in fresh zeroed pages) was a measured share of a block builder's CPU.
        let mut buf = BytesMut::with_capacity(len as usize);
        let mut failed = None;
        while buf.len() < len as usize {
            let mut limited = (&mut read).take((len as usize - buf.len()) as u64);
            match limited.read_buf(&mut buf).await {
                Ok(0) => {
                    failed = Some(format!("Kafka broker {addr} closed the connection inside a response"));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    failed = Some(format!("reading from Kafka broker {addr}: {e}"));
                    break;
                }
            }
        }
        if let Some(msg) = failed {
            break msg;
        }
        let buf = buf.freeze();
        let id = Get::new(&buf).i32().unwrap_or(0);
        let Some((want, tx)) = waiting.lock().pop_front() else {
            break format!("Kafka broker {addr} sent a response nobody asked for");
        };
        if want != id {
            break format!("Kafka broker {addr} answered request {id} where {want} was next");
        }
        let _ = tx.send(Ok(buf.slice(4..)));
        if dead.load(Ordering::Acquire) && waiting.lock().is_empty() {
            return;
        }
    };
    *why.lock() = Some(msg.clone());
    dead.store(true, Ordering::Release);
    fail_all(&waiting, &msg);
}
