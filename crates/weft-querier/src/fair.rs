//! Slots shared fairly between tenants: the query slots a process admits queries into
//! (`--max-concurrent-queries`, and a querier's job slots) and the permits of the query
//! workers, the cores one piece of query work at a time holds ([`crate::workers`]).
//!
//! A holder keeps a slot while it runs. When every slot is taken, the waiting queue is one
//! queue per tenant, and a freed slot goes to the waiting tenant holding the fewest (ties: the
//! one whose request has waited longest), as Tempo's query-frontend serves its per-tenant
//! queues. So a tenant that sends many heavy queries at once takes turns with the others
//! instead of filling the line ahead of them.
//!
//! Slots that admit whole queries may also *lend* ([`FairSlots::lending`]): a tenant holding
//! none starts at once even when every slot is taken, up to that many beyond the total. A
//! tenant's first query then never waits for another tenant's heavy queries to end, and the
//! cores are shared at the workers, piece by piece, by the same rule.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// Slots shared between tenants.
pub struct FairSlots {
    total: usize,
    /// Slots beyond `total` a tenant holding none may take.
    lend: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: usize,
    /// Slots held, by tenant (tenants holding none are removed).
    running: HashMap<Arc<str>, usize>,
    /// Requests waiting, by tenant, oldest first: their arrival number and where to send the
    /// slot.
    waiting: HashMap<Arc<str>, VecDeque<(u64, oneshot::Sender<Slot>)>>,
    arrivals: u64,
}

/// A slot held; dropping it frees the slot for the next waiting request.
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
    /// `total` slots (at least 1), none lent.
    pub fn new(total: usize) -> Arc<FairSlots> {
        FairSlots::lending(total, 0)
    }

    /// `total` slots (at least 1), and up to `lend` more for tenants holding none.
    pub fn lending(total: usize, lend: usize) -> Arc<FairSlots> {
        Arc::new(FairSlots {
            total: total.max(1),
            lend,
            state: Mutex::new(State::default()),
        })
    }

    /// Waits for a slot for `tenant`. Cancel safe: a slot granted to a request that stopped
    /// waiting goes to the next one.
    pub async fn acquire(self: &Arc<Self>, tenant: Arc<str>) -> Slot {
        let rx = {
            let mut st = self.state.lock();
            if self.may_take(&st, &tenant) {
                st.take(&tenant);
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
        rx.await
            .expect("a waiting request's sender is kept until it gets a slot")
    }

    /// Slots held and requests waiting now, by tenant (tenants with neither are left out),
    /// sorted by tenant: for `/metrics`.
    pub fn by_tenant(&self) -> Vec<(Arc<str>, usize, usize)> {
        let st = self.state.lock();
        // A request that stopped waiting stays queued until a slot is handed on.
        let waiting = |t: &Arc<str>| {
            st.waiting
                .get(t)
                .map_or(0, |q| q.iter().filter(|(_, tx)| !tx.is_closed()).count())
        };
        let mut out: Vec<(Arc<str>, usize, usize)> =
            st.running.iter().map(|(t, &n)| (t.clone(), n, waiting(t))).collect();
        for t in st.waiting.keys() {
            if !st.running.contains_key(t) && waiting(t) > 0 {
                out.push((t.clone(), 0, waiting(t)));
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Whether `tenant` may take a slot now: one is free, or it holds none and one may be lent.
    fn may_take(&self, st: &State, tenant: &Arc<str>) -> bool {
        st.used < self.total || (st.used < self.total + self.lend && !st.running.contains_key(tenant))
    }

    /// Slots held now, by tenant.
    #[cfg(test)]
    fn running(&self, tenant: &str) -> usize {
        self.state.lock().running.get(tenant).copied().unwrap_or(0)
    }

    fn release(self: &Arc<Self>, tenant: Arc<str>) {
        let mut st = self.state.lock();
        st.give_back(&tenant);
        // Hand slots on while the next waiter may take one (a lent slot given back frees none).
        while let Some(next) = st.next_tenant() {
            if !self.may_take(&st, &next) {
                return;
            }
            let q = st.waiting.get_mut(&next).expect("next_tenant found it");
            let (_, tx) = q.pop_front().expect("non-empty");
            if q.is_empty() {
                st.waiting.remove(&next);
            }
            if tx.is_closed() {
                continue; // it stopped waiting
            }
            st.take(&next);
            let slot = Slot {
                slots: self.clone(),
                tenant: next.clone(),
            };
            match tx.send(slot) {
                Ok(()) => return,
                // It stopped waiting meanwhile: undo, here rather than in Drop (which would
                // take the lock again).
                Err(slot) => {
                    std::mem::forget(slot);
                    st.give_back(&next);
                }
            }
        }
    }
}

impl State {
    fn take(&mut self, tenant: &Arc<str>) {
        self.used += 1;
        *self.running.entry(tenant.clone()).or_default() += 1;
    }

    fn give_back(&mut self, tenant: &Arc<str>) {
        self.used -= 1;
        if let Some(n) = self.running.get_mut(tenant) {
            *n -= 1;
            if *n == 0 {
                self.running.remove(tenant);
            }
        }
    }

    /// The tenant whose oldest waiting request is next: the one holding the fewest slots,
    /// then the longest waiting.
    fn next_tenant(&self) -> Option<Arc<str>> {
        self.waiting
            .iter()
            .filter_map(|(t, q)| {
                q.front()
                    .map(|(n, _)| (self.running.get(t).copied().unwrap_or(0), *n, t))
            })
            .min()
            .map(|(_, _, t)| t.clone())
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
    async fn by_tenant_counts_held_and_still_waiting() {
        let slots = FairSlots::new(1);
        let a1 = slots.acquire(t("a")).await;
        let mut a2 = Box::pin(slots.acquire(t("a")));
        let mut b1 = Box::pin(slots.acquire(t("b")));
        assert!(now(&mut a2).await.is_none() && now(&mut b1).await.is_none());
        assert_eq!(slots.by_tenant(), vec![(t("a"), 1, 1), (t("b"), 0, 1)]);
        drop(b1);
        assert_eq!(slots.by_tenant(), vec![(t("a"), 1, 1)], "b stopped waiting");
        drop(a1);
        let _a2 = now(&mut a2).await.expect("a's next gets the slot");
        assert_eq!(slots.by_tenant(), vec![(t("a"), 1, 0)]);
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
    async fn a_tenant_holding_none_is_lent_a_slot_beyond_the_total() {
        let slots = FairSlots::lending(2, 2);
        let (a1, _a2) = (slots.acquire(t("a")).await, slots.acquire(t("a")).await);
        let mut a3 = Box::pin(slots.acquire(t("a")));
        assert!(now(&mut a3).await.is_none(), "a holds every slot of the total");
        let b1 = now(&mut Box::pin(slots.acquire(t("b"))))
            .await
            .expect("b holds none: lent one");
        let mut b2 = Box::pin(slots.acquire(t("b")));
        assert!(now(&mut b2).await.is_none(), "b holds one: it waits");
        let _c1 = now(&mut Box::pin(slots.acquire(t("c"))))
            .await
            .expect("c holds none: lent one");
        let mut d1 = Box::pin(slots.acquire(t("d")));
        assert!(now(&mut d1).await.is_none(), "both slots to lend are lent");
        drop(a1);
        // Four were held, three are: d, holding none, is lent the freed one.
        let _d1 = now(&mut d1).await.expect("d holds none");
        assert!(now(&mut a3).await.is_none() && now(&mut b2).await.is_none());
        drop(b1);
        // b holds none again: its waiting query is lent the slot; a, holding one, waits on.
        let _b2 = now(&mut b2).await.expect("b holds none");
        assert!(now(&mut a3).await.is_none());
        assert_eq!(slots.state.lock().used, 4);
    }

    #[tokio::test]
    async fn a_lent_slot_given_back_hands_nothing_on_while_the_total_is_held() {
        let slots = FairSlots::lending(1, 1);
        let _a1 = slots.acquire(t("a")).await;
        let b1 = now(&mut Box::pin(slots.acquire(t("b")))).await.expect("lent");
        let mut a2 = Box::pin(slots.acquire(t("a")));
        drop(b1);
        assert!(now(&mut a2).await.is_none(), "a holds the one slot there is");
        assert_eq!((slots.running("a"), slots.running("b")), (1, 0));
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
