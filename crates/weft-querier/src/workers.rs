//! The query workers: the CPU a querier's queries share (`--query-parallelism`).
//!
//! A scan cuts its work into pieces (a row group's decode and filter) and runs up to
//! `parallelism` of them at once, each holding one of the querier's `parallelism` permits
//! while it runs on a blocking thread of the query runtime (niced below ingest, ADR 0005).
//! Permits are handed out first come, first served, and a query asks for one piece at a
//! time per slot it fills: a heavy query that holds every permit gives one back after each
//! piece, and a light query waiting in line gets the next one. So a query never waits for
//! more than one piece of each other running query, however many pieces they have left.
//!
//! Results stay deterministic: a scan consumes its pieces' results in the order it planned
//! them, whichever thread finished first.

use std::sync::Arc;

use tokio::sync::Semaphore;
use weft_block::BlockError;

use crate::QueryError;

/// The permits of one querier's query workers.
#[derive(Debug, Clone)]
pub struct Workers {
    permits: Arc<Semaphore>,
    parallelism: usize,
}

impl Workers {
    /// `parallelism` pieces of query work at once over all queries (at least 1).
    pub fn new(parallelism: usize) -> Workers {
        let parallelism = parallelism.max(1);
        Workers {
            permits: Arc::new(Semaphore::new(parallelism)),
            parallelism,
        }
    }

    /// How many pieces run at once.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// How many pieces one query keeps in flight, and its runners: twice the permits, so that
    /// while a piece computes, the next ones are being fetched (a fetch holds no permit), and a
    /// core never waits for a fetch (object storage's latency). Only [`Self::parallelism`] of
    /// them compute at once.
    pub fn lookahead(&self) -> usize {
        self.parallelism * 2
    }
}

/// Jobs of one query run in order on its runners: [`Workers::pipeline`].
///
/// Each runner is a long-lived thread of the blocking pool. It takes the next job, fetches its
/// data (local-disk I/O inline, [`weft_storage::with_io_inline`]), computes, and hands the
/// result back, holding a permit (first come, first served across queries) while it works:
/// - reads that are CPU work (local disk, memory: `Storage::reads_are_local`): `parallelism`
///   runners, each holding a permit for the fetch and the compute;
/// - reads that wait on a remote store: [`Workers::lookahead`] runners, each fetching without
///   a permit, so that while `parallelism` of them compute, the others wait on the store.
///
/// A scan that keeps a few jobs queued so costs about one wake-up per job (its own, when a
/// result it awaits arrives) instead of a trip through the pool for each fetch and each
/// decode: at parallelism 2 that took `rate_by_service` from 1.5 cores busy to 1.9
/// (docs/benchmarks/query-parallelism.md).
pub struct Pipeline<J, R> {
    shared: Arc<PipeShared<J, R>>,
    results: std::collections::VecDeque<tokio::sync::oneshot::Receiver<Result<R, QueryError>>>,
}

type Sender<R> = tokio::sync::oneshot::Sender<Result<R, QueryError>>;

struct PipeShared<J, R> {
    state: std::sync::Mutex<PipeState<J, R>>,
    ready: std::sync::Condvar,
}

struct PipeState<J, R> {
    queue: std::collections::VecDeque<(J, Sender<R>)>,
    /// The pipeline was dropped: runners finish their job and leave.
    closed: bool,
}

impl Workers {
    /// Starts the runners of one query. Each job pushed to the returned [`Pipeline`] is
    /// `fetch`ed, then given to `work`; results come back in push order. `local_reads`: the
    /// fetch is CPU work and holds the permit too (see [`Pipeline`]). Both run on a blocking
    /// thread and may drive futures with `tokio::runtime::Handle::current().block_on`.
    pub fn pipeline<J, F, R, Fe, W>(&self, local_reads: bool, fetch: Fe, work: W) -> Pipeline<J, R>
    where
        J: Send + 'static,
        R: Send + 'static,
        Fe: Fn(J) -> Result<F, QueryError> + Send + Sync + 'static,
        W: Fn(F) -> Result<R, QueryError> + Send + Sync + 'static,
    {
        let shared = Arc::new(PipeShared {
            state: std::sync::Mutex::new(PipeState {
                queue: Default::default(),
                closed: false,
            }),
            ready: std::sync::Condvar::new(),
        });
        let (fetch, work) = (Arc::new(fetch), Arc::new(work));
        let handle = tokio::runtime::Handle::current();
        let runners = if local_reads {
            self.parallelism
        } else {
            self.lookahead()
        };
        for _ in 0..runners {
            let (shared, fetch, work) = (shared.clone(), fetch.clone(), work.clone());
            let (permits, handle) = (self.permits.clone(), handle.clone());
            tokio::task::spawn_blocking(move || {
                loop {
                    let (job, tx) = {
                        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if let Some(next) = st.queue.pop_front() {
                                break next;
                            }
                            if st.closed {
                                return;
                            }
                            st = shared.ready.wait(st).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    if tx.is_closed() {
                        continue;
                    }
                    let permit = || {
                        handle.block_on(permits.clone().acquire_owned()).map_err(|_| {
                            QueryError::from(BlockError::Corrupt("the query workers were shut down".into()))
                        })
                    };
                    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let early = if local_reads { Some(permit()?) } else { None };
                        let fetched = weft_storage::with_io_inline(|| fetch(job))?;
                        if tx.is_closed() {
                            // The scan stopped while this was fetched: nobody takes the work.
                            return Err(BlockError::Corrupt("the scan stopped".into()).into());
                        }
                        let _permit = match early {
                            Some(p) => p,
                            None => permit()?,
                        };
                        work(fetched)
                    }))
                    .unwrap_or_else(|_| Err(BlockError::Corrupt("a query worker failed".into()).into()));
                    let _ = tx.send(out);
                }
            });
        }
        Pipeline {
            shared,
            results: Default::default(),
        }
    }
}

impl<J, R> Pipeline<J, R> {
    /// Queues a job; its result comes after those of the jobs pushed before it.
    pub fn push(&mut self, job: J) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queue
            .push_back((job, tx));
        self.shared.ready.notify_one();
        self.results.push_back(rx);
    }

    /// Jobs pushed whose results were not taken yet.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// Whether every result pushed was taken.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    /// The result of the oldest job not taken yet; `None` when none is left.
    pub async fn next(&mut self) -> Option<Result<R, QueryError>> {
        let rx = self.results.pop_front()?;
        Some(
            rx.await
                .unwrap_or_else(|_| Err(BlockError::Corrupt("a query worker stopped".into()).into())),
        )
    }
}

impl<J, R> Drop for Pipeline<J, R> {
    /// Drops the queued jobs (a scan that stopped early) and lets the runners go.
    fn drop(&mut self) {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.closed = true;
        st.queue.clear();
        drop(st);
        self.shared.ready.notify_all();
    }
}

/// The cores of this machine, the default parallelism.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A pipeline whose jobs sleep `ms` and note themselves in `order`.
    fn sleeper(w: &Workers, order: Arc<parking_lot::Mutex<Vec<&'static str>>>) -> Pipeline<(u64, &'static str), ()> {
        w.pipeline(true, Ok, move |(ms, name): (u64, &'static str)| {
            std::thread::sleep(Duration::from_millis(ms));
            order.lock().push(name);
            Ok(())
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_parallelism_jobs_run_at_once_over_all_queries() {
        let w = Workers::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let query = || {
            let (running, most) = (running.clone(), most.clone());
            // Remote reads: twice the runners, still two computing at once.
            let mut p = w.pipeline(false, Ok, move |()| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(10));
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            });
            for _ in 0..8 {
                p.push(());
            }
            p
        };
        let (mut a, mut b) = (query(), query());
        while let Some(r) = a.next().await {
            r.unwrap();
        }
        while let Some(r) = b.next().await {
            r.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn results_come_in_push_order_and_a_dropped_pipeline_lets_go() {
        let w = Workers::new(3);
        let mut p = w.pipeline(true, Ok, |k: u64| {
            std::thread::sleep(Duration::from_millis((7 - k % 7) * 2));
            Ok(k)
        });
        for k in 0..20 {
            p.push(k);
        }
        for k in 0..10 {
            assert_eq!(p.next().await.unwrap().unwrap(), k);
        }
        drop(p);
        // The permits are free again: a new query runs at once.
        let mut q = w.pipeline(true, Ok, |k: u64| Ok(k + 1));
        q.push(1);
        let got = tokio::time::timeout(Duration::from_secs(5), q.next()).await.unwrap();
        assert_eq!(got.unwrap().unwrap(), 2);
        assert!(q.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_is_an_error_not_a_hang() {
        let w = Workers::new(1);
        let mut p = w.pipeline(true, Ok, |k: u64| if k == 1 { panic!("job {k}") } else { Ok(k) });
        for k in 0..3 {
            p.push(k);
        }
        assert_eq!(p.next().await.unwrap().unwrap(), 0);
        assert!(p.next().await.unwrap().is_err());
        assert_eq!(p.next().await.unwrap().unwrap(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_light_query_waits_for_one_job_not_for_a_heavy_query() {
        // One permit; a heavy query has 20 jobs queued.
        let w = Workers::new(1);
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut heavy = sleeper(&w, order.clone());
        for _ in 0..20 {
            heavy.push((5, "heavy"));
        }
        tokio::time::sleep(Duration::from_millis(12)).await;
        let mut light = sleeper(&w, order.clone());
        light.push((0, "light"));
        light.next().await.unwrap().unwrap();
        while let Some(r) = heavy.next().await {
            r.unwrap();
        }
        let order = order.lock();
        let at = order.iter().position(|s| *s == "light").unwrap();
        assert!(at <= 4, "the light job ran after {at} heavy jobs: {order:?}");
    }
}
