//! The query slots (`--max-concurrent-queries`), shared fairly between tenants.
//!
//! A query holds a slot while it runs. When every slot is taken, queries wait in one queue
//! per tenant, and a freed slot goes to the waiting tenant running the fewest queries (ties: the
//! one whose query has waited longest). So a tenant that sends many heavy queries at once
//! takes turns with the others instead of filling the line ahead of them, as Tempo's
//! query-frontend does with its per-tenant queues.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// Query slots shared between tenants.
pub struct FairSlots {
    total: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: usize,
    /// Slots held, by tenant (tenants holding none are removed).
    running: HashMap<Arc<str>, usize>,
    /// Queries waiting, by tenant, oldest first: their arrival number and where to send the slot.
    waiting: HashMap<Arc<str>, VecDeque<(u64, oneshot::Sender<Slot>)>>,
    arrivals: u64,
}

/// A slot held; dropping it frees the slot for the next waiting query.
pub struct Slot {
    slots: Arc<FairSlots>,
    tenant: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(self.tenant.clone());
    }
}

impl FairSlots {
    pub fn new(total: usize) -> Arc<FairSlots> {
        Arc::new(FairSlots {
            total: total.max(1),
            state: Mutex::new(State::default()),
        })
    }

    /// Waits for a slot for a query of `tenant`. Cancel safe: a slot granted to a query that
    /// stopped waiting goes to the next one.
    pub async fn acquire(self: &Arc<Self>, tenant: Arc<str>) -> Slot {
        let rx = {
            let mut st = self.state.lock();
            if st.used < self.total {
                st.used += 1;
                *st.running.entry(tenant.clone()).or_default() += 1;
                return Slot {
                    slots: self.clone(),
                    tenant,
                };
            }
            let (tx, rx) = oneshot::channel();
            st.arrivals += 1;
            let n = st.arrivals;
            st.waiting.entry(tenant).or_default().push_back((n, tx));
            rx
        };
        // The sender is only dropped with a slot sent or by `release`, which sends first.
        rx.await.expect("a waiting query's sender is kept until it gets a slot")
    }

    /// Slots held now, by tenant.
    #[cfg(test)]
    fn running(&self, tenant: &str) -> usize {
        self.state.lock().running.get(tenant).copied().unwrap_or(0)
    }

    fn release(self: &Arc<Self>, mut tenant: Arc<str>) {
        loop {
            let (next, tx) = {
                let mut st = self.state.lock();
                st.used -= 1;
                if let Some(n) = st.running.get_mut(&tenant) {
                    *n -= 1;
                    if *n == 0 {
                        st.running.remove(&tenant);
                    }
                }
                match st.next_waiter() {
                    None => return,
                    Some((t, tx)) => {
                        st.used += 1;
                        *st.running.entry(t.clone()).or_default() += 1;
                        (t, tx)
                    }
                }
            };
            let slot = Slot {
                slots: self.clone(),
                tenant: next.clone(),
            };
            match tx.send(slot) {
                Ok(()) => return,
                // It stopped waiting meanwhile: free the slot again, here rather than in Drop
                // (which would recurse).
                Err(slot) => {
                    std::mem::forget(slot);
                    tenant = next;
                }
            }
        }
    }
}

impl State {
    /// The oldest waiting query of the tenant running the fewest, skipping queries that
    /// stopped waiting.
    fn next_waiter(&mut self) -> Option<(Arc<str>, oneshot::Sender<Slot>)> {
        loop {
            let running = &self.running;
            let t = self
                .waiting
                .iter()
                .filter_map(|(t, q)| q.front().map(|(n, _)| (running.get(t).copied().unwrap_or(0), *n, t)))
                .min()
                .map(|(_, _, t)| t.clone())?;
            let q = self.waiting.get_mut(&t).expect("found above");
            let (_, tx) = q.pop_front().expect("non-empty");
            if q.is_empty() {
                self.waiting.remove(&t);
            }
            if !tx.is_closed() {
                return Some((t, tx));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    /// Polls `f` once: `Some` when it is ready.
    async fn now<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(20), f).await.ok()
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_tenant_running_fewest() {
        let slots = FairSlots::new(2);
        let a1 = slots.acquire(t("a")).await;
        let a2 = slots.acquire(t("a")).await;
        // Tenant a queues three more, then b one.
        let mut a3 = Box::pin(slots.acquire(t("a")));
        let mut a4 = Box::pin(slots.acquire(t("a")));
        let mut a5 = Box::pin(slots.acquire(t("a")));
        assert!(now(&mut a3).await.is_none() && now(&mut a4).await.is_none() && now(&mut a5).await.is_none());
        let mut b1 = Box::pin(slots.acquire(t("b")));
        assert!(now(&mut b1).await.is_none(), "every slot is taken");
        drop(a1);
        let b1 = now(&mut b1)
            .await
            .expect("b runs none, a two: b's query is next though a's waited longer");
        assert!(now(&mut a3).await.is_none());
        assert_eq!((slots.running("a"), slots.running("b")), (1, 1));
        drop(b1);
        // Only a waits now: its oldest first.
        let a3 = now(&mut a3).await.expect("a's oldest waiting query");
        assert!(now(&mut a4).await.is_none());
        drop((a2, a3));
        assert!(now(&mut a4).await.is_some() && now(&mut a5).await.is_some());
    }

    #[tokio::test]
    async fn a_query_that_stops_waiting_hands_its_slot_on() {
        let slots = FairSlots::new(1);
        let held = slots.acquire(t("a")).await;
        let gave_up = slots.acquire(t("b"));
        // Timed out: the future is dropped while queued.
        assert!(tokio::time::timeout(Duration::from_millis(10), gave_up).await.is_err());
        let mut next = Box::pin(slots.acquire(t("c")));
        drop(held);
        let c = now(&mut next).await.expect("the slot skips the query that gave up");
        assert_eq!(slots.running("b"), 0);
        drop(c);
        assert_eq!(slots.state.lock().used, 0, "every slot is free again");
    }

    #[tokio::test]
    async fn slots_are_never_over_given() {
        let slots = FairSlots::new(3);
        let mut tasks = Vec::new();
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for i in 0..40 {
            let (slots, peak) = (slots.clone(), peak.clone());
            tasks.push(tokio::spawn(async move {
                let tenant = t(["a", "b", "c"][i % 3]);
                let s = tokio::time::timeout(Duration::from_millis(5 + (i as u64 % 7)), slots.acquire(tenant)).await;
                if let Ok(_slot) = s {
                    let used = slots.state.lock().used;
                    peak.fetch_max(used, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert!(peak.load(std::sync::atomic::Ordering::Relaxed) <= 3);
        assert_eq!(slots.state.lock().used, 0);
        assert!(slots.state.lock().running.is_empty());
    }
}
