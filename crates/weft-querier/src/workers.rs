//! The query workers: the CPU a querier's queries share (`--query-parallelism`).
//!
//! A scan cuts its work into pieces (a row group's decode and filter) and runs up to
//! `parallelism` of them at once, each holding one of the querier's `parallelism` permits
//! while it runs on a blocking thread of the query runtime (niced below ingest, ADR 0005).
//! A query asks for one permit at a time per runner, and gives it back after each piece.
//! Permits are shared between tenants ([`FairSlots`]): a freed permit goes to the waiting
//! tenant holding the fewest, and within a tenant to the piece that waited longest. So a
//! tenant's light query takes the next free core, however many heavy queries another tenant
//! runs (it shares the cores with them half and half, not one part in as many queries as
//! they run), and a query never waits for more than one piece of each other running query
//! of its own tenant.
//!
//! Results stay deterministic: a scan consumes its pieces' results in the order it planned
//! them, whichever thread finished first.

use std::sync::Arc;

use weft_block::BlockError;

use crate::QueryError;
use crate::fair::FairSlots;

/// The permits of one querier's query workers.
#[derive(Clone)]
pub struct Workers {
    permits: Arc<FairSlots>,
    parallelism: usize,
}

impl Workers {
    /// `parallelism` pieces of query work at once over all queries (at least 1).
    pub fn new(parallelism: usize) -> Workers {
        let parallelism = parallelism.max(1);
        Workers {
            permits: FairSlots::new(parallelism),
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
    /// Starts the runners of one query of `tenant`. Each job pushed to the returned
    /// [`Pipeline`] is `fetch`ed, then given to `work`; results come back in push order.
    /// `local_reads`: the fetch is CPU work and holds the permit too (see [`Pipeline`]). Both
    /// run on a blocking thread and may drive futures with
    /// `tokio::runtime::Handle::current().block_on`.
    pub fn pipeline<J, F, R, Fe, W>(&self, tenant: &str, local_reads: bool, fetch: Fe, work: W) -> Pipeline<J, R>
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
        let tenant: Arc<str> = Arc::from(tenant);
        let runners = if local_reads {
            self.parallelism
        } else {
            self.lookahead()
        };
        for _ in 0..runners {
            let (shared, fetch, work) = (shared.clone(), fetch.clone(), work.clone());
            let (permits, handle, tenant) = (self.permits.clone(), handle.clone(), tenant.clone());
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
                    // The scan stopped while this was fetched: nobody takes the work.
                    let out = run_job(&handle, (&permits, &tenant), local_reads, job, &*fetch, &*work, || {
                        !tx.is_closed()
                    });
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

/// What a [`Workers::fold`] consumer wants after taking a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the next unit.
    Go,
    /// Stop: no unit not started yet starts, and results not taken yet are dropped.
    Stop,
}

/// What [`Workers::fold`] does with each unit: `start` it (under the fold's lock, with the
/// state the results before it left), `fetch` and `work` its job (as in
/// [`Workers::pipeline`]), and `take` its result into the state (under the lock, in unit
/// order).
pub struct FoldSteps<St, Fe, W, T> {
    pub start: St,
    pub fetch: Fe,
    pub work: W,
    pub take: T,
}

/// The shared state of one [`Workers::fold`].
struct Fold<U, S, R> {
    units: Vec<U>,
    inner: std::sync::Mutex<FoldInner<S, R>>,
    /// Signalled when a result is taken, for a runner waiting for room in the window.
    room: std::sync::Condvar,
    /// How many units may be started and not yet taken.
    window: usize,
}

struct FoldInner<S, R> {
    /// `None` once the fold finished and its caller took it back.
    state: Option<S>,
    /// The next unit to start, and the next whose result is taken.
    next_start: usize,
    next_take: usize,
    /// Results finished before those of earlier units, by unit index minus `next_take`.
    ready: std::collections::VecDeque<Option<Result<R, QueryError>>>,
    /// Set once every result was taken, a consumer stopped, a consumer panicked or the caller
    /// went away: runners leave.
    finished: bool,
    /// Why the fold failed, if it did (a consumer panicked).
    failure: Option<QueryError>,
    /// Told once when `finished` is set.
    done: Option<tokio::sync::oneshot::Sender<()>>,
    /// Runners still running.
    runners: usize,
}

impl<S, R> FoldInner<S, R> {
    fn finish(&mut self) {
        self.finished = true;
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

impl Workers {
    /// Runs `units` on one query's runners and folds their results into `state` in unit order,
    /// whichever runner finished first: `start` (called when a unit starts, with the state as
    /// the results before it left it, e.g. to ask which columns a row group needs) makes its
    /// job, which is `fetch`ed and given to `work` as in [`Workers::pipeline`], and `take`
    /// adds each result to the state in unit order. Returns the state once every result was
    /// taken or `take` said [`Flow::Stop`].
    ///
    /// Unlike [`Workers::pipeline`], the query's own task is not woken per unit: the runner
    /// that finishes the oldest unit not taken takes its result (and any later ones waiting)
    /// itself, under the fold's lock, then starts the next unit. A column scan of 1,230 row
    /// groups so costs no wake-up per row group, which at parallelism 1 had kept the second
    /// core busy with the query runtime's scheduler (docs/benchmarks/query-parallelism.md).
    /// At most [`Workers::lookahead`] units are started and not taken, so a slow unit holds
    /// back the others' results, not unbounded memory. `start` and `take` run under the lock:
    /// keep them short (merging a fork, not decoding).
    ///
    /// A panic in `work` is an `Err` result of that unit, as in [`Workers::pipeline`]; one in
    /// `start` or `take` fails the fold. Dropping the returned future stops the runners after
    /// their current unit.
    pub async fn fold<U, S, J, F, R, St, Fe, W, T>(
        &self,
        tenant: &str,
        local_reads: bool,
        units: Vec<U>,
        state: S,
        steps: FoldSteps<St, Fe, W, T>,
    ) -> Result<S, QueryError>
    where
        U: Send + Sync + 'static,
        S: Send + 'static,
        J: Send + 'static,
        R: Send + 'static,
        St: Fn(&mut S, &U) -> J + Send + Sync + 'static,
        Fe: Fn(J) -> Result<F, QueryError> + Send + Sync + 'static,
        W: Fn(F) -> Result<R, QueryError> + Send + Sync + 'static,
        T: Fn(&mut S, &U, Result<R, QueryError>) -> Flow + Send + Sync + 'static,
    {
        if units.is_empty() {
            return Ok(state);
        }
        let FoldSteps {
            start,
            fetch,
            work,
            take,
        } = steps;
        let runners = if local_reads {
            self.parallelism
        } else {
            self.lookahead()
        }
        .min(units.len());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let fold = Arc::new(Fold {
            units,
            inner: std::sync::Mutex::new(FoldInner {
                state: Some(state),
                next_start: 0,
                next_take: 0,
                ready: Default::default(),
                finished: false,
                failure: None,
                done: Some(done_tx),
                runners,
            }),
            room: std::sync::Condvar::new(),
            window: self.lookahead(),
        });
        let (start, fetch, work, take) = (Arc::new(start), Arc::new(fetch), Arc::new(work), Arc::new(take));
        let handle = tokio::runtime::Handle::current();
        let tenant: Arc<str> = Arc::from(tenant);
        for _ in 0..runners {
            let (fold, start, fetch, work, take) =
                (fold.clone(), start.clone(), fetch.clone(), work.clone(), take.clone());
            let (permits, handle, tenant) = (self.permits.clone(), handle.clone(), tenant.clone());
            tokio::task::spawn_blocking(move || {
                // However the runner leaves, the fold must not wait for it.
                struct Leave<'a, U, S, R>(&'a Fold<U, S, R>);
                impl<U, S, R> Drop for Leave<'_, U, S, R> {
                    fn drop(&mut self) {
                        let mut g = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
                        g.runners -= 1;
                        if g.runners == 0 && !g.finished {
                            g.failure
                                .get_or_insert_with(|| BlockError::Corrupt("a query worker stopped".into()).into());
                            g.finish();
                        }
                        drop(g);
                        self.0.room.notify_all();
                    }
                }
                let _leave = Leave(&fold);
                let lock = || fold.inner.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    // Start the next unit, when there is one and room for it.
                    let (at, job) = {
                        let mut g = lock();
                        loop {
                            if g.finished || g.next_start == fold.units.len() {
                                return;
                            }
                            if g.next_start < g.next_take + fold.window {
                                break;
                            }
                            g = fold.room.wait(g).unwrap_or_else(|e| e.into_inner());
                        }
                        let at = g.next_start;
                        g.next_start += 1;
                        let state = g.state.as_mut().expect("a running fold has its state");
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| start(state, &fold.units[at]))) {
                            Ok(job) => (at, job),
                            Err(_) => {
                                g.failure = Some(BlockError::Corrupt("a query worker failed".into()).into());
                                g.finish();
                                return;
                            }
                        }
                    };
                    let out = run_job(&handle, (&permits, &tenant), local_reads, job, &*fetch, &*work, || true);
                    // Take this result and the later ones waiting, in unit order.
                    let mut g = lock();
                    if g.finished {
                        return;
                    }
                    let slot = at - g.next_take;
                    if g.ready.len() <= slot {
                        g.ready.resize_with(slot + 1, || None);
                    }
                    g.ready[slot] = Some(out);
                    let mut took = false;
                    while let Some(Some(_)) = g.ready.front() {
                        let result = g.ready.pop_front().flatten().expect("checked above");
                        let unit = &fold.units[g.next_take];
                        g.next_take += 1;
                        took = true;
                        let state = g.state.as_mut().expect("a running fold has its state");
                        let flow = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| take(state, unit, result)));
                        match flow {
                            Ok(Flow::Go) if g.next_take < fold.units.len() => {}
                            Ok(_) => {
                                g.finish();
                                break;
                            }
                            Err(_) => {
                                g.failure = Some(BlockError::Corrupt("a query worker failed".into()).into());
                                g.finish();
                                break;
                            }
                        }
                    }
                    drop(g);
                    if took {
                        fold.room.notify_all();
                    }
                }
            });
        }
        // Dropped before the fold finished (the query went away): the runners stop.
        struct Abandon<U, S, R>(Arc<Fold<U, S, R>>);
        impl<U, S, R> Drop for Abandon<U, S, R> {
            fn drop(&mut self) {
                let mut g = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
                if !g.finished {
                    g.finish();
                }
                drop(g);
                self.0.room.notify_all();
            }
        }
        let abandon = Abandon(fold);
        let _ = done_rx.await;
        let mut g = abandon.0.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = g.failure.take() {
            return Err(e);
        }
        Ok(g.state.take().expect("the fold's state is taken once"))
    }
}

/// One job on a runner: fetched (local-disk I/O inline) and given to `work`, holding one of
/// `permits` (as its tenant's) for both when reads are local, else for `work` only; `wanted`
/// is asked between the two (false: the result is dropped, so the work is skipped). A panic
/// is an error.
fn run_job<J, F, R>(
    handle: &tokio::runtime::Handle,
    (permits, tenant): (&Arc<FairSlots>, &Arc<str>),
    local_reads: bool,
    job: J,
    fetch: &dyn Fn(J) -> Result<F, QueryError>,
    work: &dyn Fn(F) -> Result<R, QueryError>,
    wanted: impl Fn() -> bool,
) -> Result<R, QueryError> {
    let permit = || handle.block_on(permits.acquire(tenant.clone()));
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let early = if local_reads { Some(permit()) } else { None };
        let fetched = weft_storage::with_io_inline(|| fetch(job))?;
        if !wanted() {
            return Err(BlockError::Corrupt("the scan stopped".into()).into());
        }
        let _permit = match early {
            Some(p) => p,
            None => permit(),
        };
        work(fetched)
    }))
    .unwrap_or_else(|_| Err(BlockError::Corrupt("a query worker failed".into()).into()))
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

    /// A pipeline of `tenant` whose jobs sleep `ms` and note themselves in `order`.
    fn sleeper(
        w: &Workers,
        tenant: &str,
        order: Arc<parking_lot::Mutex<Vec<&'static str>>>,
    ) -> Pipeline<(u64, &'static str), ()> {
        w.pipeline(tenant, true, Ok, move |(ms, name): (u64, &'static str)| {
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
            let mut p = w.pipeline("t", false, Ok, move |()| {
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
        let mut p = w.pipeline("t", true, Ok, |k: u64| {
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
        let mut q = w.pipeline("t", true, Ok, |k: u64| Ok(k + 1));
        q.push(1);
        let got = tokio::time::timeout(Duration::from_secs(5), q.next()).await.unwrap();
        assert_eq!(got.unwrap().unwrap(), 2);
        assert!(q.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_is_an_error_not_a_hang() {
        let w = Workers::new(1);
        let mut p = w.pipeline("t", true, Ok, |k: u64| if k == 1 { panic!("job {k}") } else { Ok(k) });
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
        let mut heavy = sleeper(&w, "t", order.clone());
        for _ in 0..20 {
            heavy.push((5, "heavy"));
        }
        tokio::time::sleep(Duration::from_millis(12)).await;
        // Counted from when the light job comes, not from the sleep, which a loaded machine
        // stretches: the heavy job running then finishes, and at most one more starts before
        // the push lands.
        let done = order.lock().len();
        let mut light = sleeper(&w, "t", order.clone());
        light.push((0, "light"));
        light.next().await.unwrap().unwrap();
        while let Some(r) = heavy.next().await {
            r.unwrap();
        }
        let order = order.lock();
        let at = order.iter().position(|s| *s == "light").unwrap();
        assert!(
            at <= done + 2 && done < 20,
            "the light job ran after {at} heavy jobs, {done} done when it came: {order:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenants_light_query_shares_the_cores_with_another_tenants_many_queries() {
        // Two permits; tenant a runs six queries of ten pieces each, two runners apiece, so
        // twelve wait for a permit at every moment. Tenant b then asks for four pieces.
        let w = Workers::new(2);
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut heavy: Vec<_> = (0..6).map(|_| sleeper(&w, "a", order.clone())).collect();
        for p in &mut heavy {
            for _ in 0..10 {
                p.push((5, "a"));
            }
        }
        tokio::time::sleep(Duration::from_millis(12)).await;
        let mut light = sleeper(&w, "b", order.clone());
        for _ in 0..4 {
            light.push((5, "b"));
        }
        while let Some(r) = light.next().await {
            r.unwrap();
        }
        for p in &mut heavy {
            while let Some(r) = p.next().await {
                r.unwrap();
            }
        }
        let order = order.lock();
        let last = order.iter().rposition(|s| *s == "b").unwrap();
        // b holds one of the two permits from its first free one on: its four pieces end
        // within about four of a's (first come, first served, they waited behind twelve
        // of a's pieces each: the last ended after about fifty).
        assert!(last <= 14, "b's last piece ended after {last} pieces: {order:?}");
    }

    /// A fold that notes, in unit order, each unit's result; unit `k` sleeps so that later
    /// units often finish first.
    #[allow(clippy::type_complexity)]
    fn noting(
        started: Arc<AtomicUsize>,
        stop_at: Option<u64>,
    ) -> FoldSteps<
        impl Fn(&mut Vec<u64>, &u64) -> u64 + Send + Sync + 'static,
        impl Fn(u64) -> Result<u64, QueryError> + Send + Sync + 'static,
        impl Fn(u64) -> Result<u64, QueryError> + Send + Sync + 'static,
        impl Fn(&mut Vec<u64>, &u64, Result<u64, QueryError>) -> Flow + Send + Sync + 'static,
    > {
        FoldSteps {
            start: move |_: &mut Vec<u64>, k: &u64| {
                started.fetch_add(1, Ordering::SeqCst);
                *k
            },
            fetch: Ok,
            work: |k: u64| {
                if k == 13 {
                    panic!("unit {k}");
                }
                std::thread::sleep(Duration::from_millis((5 - k % 5) * 2));
                Ok(k * 10)
            },
            take: move |seen: &mut Vec<u64>, k: &u64, r: Result<u64, QueryError>| {
                seen.push(r.unwrap_or(u64::MAX));
                if Some(*k) == stop_at { Flow::Stop } else { Flow::Go }
            },
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fold_takes_results_in_unit_order_whichever_finished_first() {
        for (parallelism, local) in [(1, true), (3, true), (2, false)] {
            let w = Workers::new(parallelism);
            let started = Arc::new(AtomicUsize::new(0));
            let seen = w
                .fold("t", local, (0..20).collect(), Vec::new(), noting(started.clone(), None))
                .await
                .unwrap();
            // Unit 13's work panicked: an error result in its place, not a hang.
            let want: Vec<u64> = (0..20).map(|k| if k == 13 { u64::MAX } else { k * 10 }).collect();
            assert_eq!(seen, want, "parallelism {parallelism}");
            assert_eq!(started.load(Ordering::SeqCst), 20);
        }
        let w = Workers::new(2);
        let none = w
            .fold("t", true, Vec::<u64>::new(), vec![7], noting(Arc::default(), None))
            .await
            .unwrap();
        assert_eq!(none, vec![7]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fold_that_stops_starts_no_more_than_its_window_past_the_stop() {
        let w = Workers::new(2);
        let started = Arc::new(AtomicUsize::new(0));
        let seen = w
            .fold(
                "t",
                true,
                (0..100).collect(),
                Vec::new(),
                noting(started.clone(), Some(4)),
            )
            .await
            .unwrap();
        assert_eq!(seen, vec![0, 10, 20, 30, 40]);
        let n = started.load(Ordering::SeqCst);
        assert!(
            n <= 5 + w.lookahead(),
            "{n} units started for a fold that stopped at the fifth"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fold_holds_at_most_parallelism_permits_and_a_dropped_fold_lets_go() {
        let w = Workers::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (r, m) = (running.clone(), most.clone());
        let steps = FoldSteps {
            start: |_: &mut (), _: &u64| (),
            fetch: Ok,
            work: move |()| {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            },
            take: |_: &mut (), _: &u64, r: Result<(), QueryError>| {
                r.unwrap();
                Flow::Go
            },
        };
        // Remote reads: twice the runners, still two computing at once; given up after 30 ms.
        let long = w.fold("t", false, (0..1000).collect(), (), steps);
        assert!(tokio::time::timeout(Duration::from_millis(30), long).await.is_err());
        assert_eq!(most.load(Ordering::SeqCst), 2);
        // The abandoned fold's runners leave after their unit: a new one runs at once.
        let quick = w.fold("t", true, vec![1u64], vec![], noting(Arc::default(), None));
        let got = tokio::time::timeout(Duration::from_secs(5), quick)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, vec![10]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(running.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_take_fails_the_fold() {
        let w = Workers::new(2);
        let steps = FoldSteps {
            start: |_: &mut (), k: &u64| *k,
            fetch: Ok,
            work: Ok,
            take: |_: &mut (), k: &u64, _: Result<u64, QueryError>| {
                assert!(*k != 3, "take of unit {k}");
                Flow::Go
            },
        };
        let r = tokio::time::timeout(Duration::from_secs(5), w.fold("t", true, (0..10).collect(), (), steps)).await;
        assert!(r.unwrap().is_err());
    }
}
