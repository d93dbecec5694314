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

    /// How many pieces one query keeps in flight: twice the permits, so that while a piece
    /// runs, the next ones are being fetched (a fetch holds no permit), and a core never waits
    /// for a fetch. Only [`Self::parallelism`] of them compute at once.
    pub fn lookahead(&self) -> usize {
        self.parallelism * 2
    }

    /// Runs `f` on a blocking thread once a permit is free, and returns its result.
    pub async fn run<T, F>(&self, f: F) -> Result<T, QueryError>
    where
        F: FnOnce() -> Result<T, QueryError> + Send + 'static,
        T: Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| BlockError::Corrupt("the query workers were shut down".into()))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await
        .map_err(|e| BlockError::Corrupt(format!("a query worker failed: {e}")))?
    }
}

/// Runs `f` as a task of its own on the current runtime, so it makes progress while its
/// caller is busy, and returns its result. A scan that stops early drops the handle; the task
/// then finishes its piece and its result is dropped.
pub fn spawn<T, F>(f: F) -> impl Future<Output = Result<T, QueryError>> + Send + 'static
where
    F: Future<Output = Result<T, QueryError>> + Send + 'static,
    T: Send + 'static,
{
    let task = tokio::spawn(f);
    async move {
        task.await
            .map_err(|e| BlockError::Corrupt(format!("a query task failed: {e}")))?
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_parallelism_pieces_run_at_once() {
        let w = Workers::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let runs = (0..8).map(|_| {
            let (running, most, w) = (running.clone(), most.clone(), w.clone());
            async move {
                w.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
            }
        });
        for r in futures::future::join_all(runs).await {
            r.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_light_query_waits_for_one_piece_not_for_a_heavy_query() {
        // One permit; a heavy query keeps asking for it, piece after piece.
        let w = Workers::new(1);
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let heavy = {
            let (w, order) = (w.clone(), order.clone());
            tokio::spawn(async move {
                for _ in 0..20 {
                    let order = order.clone();
                    w.run(move || {
                        std::thread::sleep(Duration::from_millis(5));
                        order.lock().push("heavy");
                        Ok(())
                    })
                    .await
                    .unwrap();
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(12)).await;
        let light_order = order.clone();
        w.run(move || {
            light_order.lock().push("light");
            Ok(())
        })
        .await
        .unwrap();
        heavy.await.unwrap();
        let order = order.lock();
        let at = order.iter().position(|s| *s == "light").unwrap();
        assert!(at <= 4, "the light piece ran after {at} heavy pieces: {order:?}");
    }
}
