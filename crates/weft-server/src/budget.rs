//! The in-flight request-bytes budget, shared by every receiver (OTLP/HTTP and OTLP/gRPC).
//!
//! Every byte a request holds in memory on its way in is taken from one budget of
//! `--max-inflight-request-bytes`: the body as it arrives (all of it at once, before reading,
//! when the client declares `Content-Length`; otherwise frame by frame), its decompressed
//! form, and the working memory of converting OTLP/JSON. The bytes return to the budget when
//! the request is answered. A request that would pass the budget waits up to [`WAIT`], while
//! the body stays unread in the socket (TCP back-pressure), then is refused with 503 /
//! UNAVAILABLE and `Retry-After`. So the memory of requests being received is bounded no
//! matter how many clients send at once or how slowly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a request waits for budget before it is refused.
pub const WAIT: Duration = Duration::from_secs(5);

/// The shared budget.
#[derive(Debug)]
pub struct RequestBudget {
    sem: Arc<Semaphore>,
    total: u64,
    /// Requests refused because the budget stayed exhausted.
    pub refusals: AtomicU64,
}

/// The request could not get budget within [`WAIT`].
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "server is busy: requests in flight hold the whole request budget of {total} bytes (--max-inflight-request-bytes); retry later"
)]
pub struct Exhausted {
    pub total: u64,
}

/// Budget held by one request; returned when the last clone is dropped.
#[derive(Debug, Clone, Default)]
pub struct Held(Arc<Mutex<Vec<OwnedSemaphorePermit>>>);

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.0.lock().iter().map(|p| p.num_permits() as u64).sum()
    }
}

impl RequestBudget {
    pub fn new(total: u64) -> Self {
        let total = total.min(Semaphore::MAX_PERMITS as u64);
        RequestBudget {
            sem: Arc::new(Semaphore::new(total as usize)),
            total,
            refusals: AtomicU64::new(0),
        }
    }

    /// Bytes currently taken.
    pub fn in_use(&self) -> u64 {
        self.total - self.sem.available_permits() as u64
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Takes `bytes` for the request holding `held`, waiting up to [`WAIT`].
    pub async fn acquire(&self, bytes: u64, held: &Held) -> Result<(), Exhausted> {
        if let Some(p) = self.try_take(bytes) {
            held.0.lock().push(p);
            return Ok(());
        }
        let n = self.clamp(bytes);
        match tokio::time::timeout(WAIT, self.sem.clone().acquire_many_owned(n)).await {
            Ok(Ok(p)) => {
                held.0.lock().push(p);
                Ok(())
            }
            _ => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                Err(Exhausted { total: self.total })
            }
        }
    }

    fn clamp(&self, bytes: u64) -> u32 {
        // A single request never needs more than the whole budget (configuration ensures the
        // budget is at least the largest request); asking for more could never succeed.
        bytes.min(self.total).min(u32::MAX as u64) as u32
    }

    /// Takes `bytes` now if they are free.
    fn try_take(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        self.sem.clone().try_acquire_many_owned(self.clamp(bytes)).ok()
    }
}

/// Waiting for budget.
type Wait = Pin<Box<dyn Future<Output = Result<(), Exhausted>> + Send>>;

/// A request body that takes each data frame's bytes from the budget before handing the
/// frame on; while it waits, it reads no further, so the rest stays in the client's socket.
pub struct BudgetedBody<B> {
    inner: B,
    budget: Arc<RequestBudget>,
    held: Held,
    waiting: Option<(Frame<Bytes>, Wait)>,
}

impl<B> BudgetedBody<B> {
    pub fn new(inner: B, budget: Arc<RequestBudget>, held: Held) -> Self {
        BudgetedBody {
            inner,
            budget,
            held,
            waiting: None,
        }
    }
}

impl<B> Body for BudgetedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Some((_, wait)) = this.waiting.as_mut() {
            let r = ready!(wait.as_mut().poll(cx));
            let (frame, _) = this.waiting.take().expect("just polled");
            return Poll::Ready(Some(r.map(|()| frame).map_err(Into::into)));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            Some(Ok(f)) => f,
        };
        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
        if n == 0 {
            return Poll::Ready(Some(Ok(frame)));
        }
        match this.budget.try_take(n) {
            Some(p) => {
                this.held.0.lock().push(p);
                Poll::Ready(Some(Ok(frame)))
            }
            None => {
                let budget = this.budget.clone();
                let held = this.held.clone();
                let mut wait: Wait = Box::pin(async move { budget.acquire(n, &held).await });
                match wait.as_mut().poll(cx) {
                    Poll::Ready(r) => Poll::Ready(Some(r.map(|()| frame).map_err(Into::into))),
                    Poll::Pending => {
                        this.waiting = Some((frame, wait));
                        Poll::Pending
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
