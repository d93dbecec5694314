//! Leases: at most one process works on a thing at a time. Compactors lease tenants
//! (`compactor-leases/<tenant>`); block builders lease Kafka partitions
//! (`block-builder-leases/<topic>/<partition>`), so a second builder given a partition that a
//! live one builds refuses it, and a builder that lost its lease stops writing.
//!
//! Time is cut into periods of [`Leases::period`]. The lease of tenant `t` for period `n` is
//! the object `compactor-leases/<t>/<n>`, created with [`Storage::put_if_absent`] (S3's
//! `If-None-Match: *`): of all compactors that try, exactly one creates it, and it holds the
//! tenant until the period ends. The holder starts a merge only while enough of the period is
//! left ([`Lease::may_start`]) and writes the merged block's `meta.json` (the commit point)
//! only before the period ends ([`Lease::commit_before`]). So two compactors never merge the
//! same blocks, as long as their clocks differ by less than the margin (a tenth of a period).
//! Old lease objects are deleted by the next holder.

use bytes::Bytes;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_storage::{Storage, StorageError};

/// Where compactors' leases live in storage.
pub const LEASE_PREFIX: &str = "compactor-leases";

/// Where block builders' leases of Kafka partitions live in storage.
pub const BLOCK_BUILDER_LEASE_PREFIX: &str = "block-builder-leases";

/// Leases of one process.
#[derive(Debug, Clone)]
pub struct Leases {
    /// Who this process is (written into the lease objects it creates).
    pub owner: String,
    pub period: Duration,
    /// The folder of the lease objects ([`LEASE_PREFIX`] for compactors).
    pub prefix: &'static str,
}

/// A lease held for one period.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub ends: SystemTime,
    margin: Duration,
}

impl Lease {
    /// The time before which a merge's `meta.json` must be written.
    pub fn commit_before(&self) -> SystemTime {
        self.ends - self.margin
    }

    /// Whether a merge may start now: at least a third of a period is left before the commit
    /// deadline.
    pub fn may_start(&self, period: Duration) -> bool {
        SystemTime::now() + period / 3 < self.commit_before()
    }
}

impl Leases {
    /// A compactor's leases of tenants.
    pub fn new(owner: impl Into<String>, period: Duration) -> Leases {
        Leases::with_prefix(LEASE_PREFIX, owner, period)
    }

    pub fn with_prefix(prefix: &'static str, owner: impl Into<String>, period: Duration) -> Leases {
        Leases {
            owner: owner.into(),
            period,
            prefix,
        }
    }

    /// Who holds the current period's lease of `key`, if anyone.
    pub async fn holder(&self, storage: &dyn Storage, key: &str) -> Option<String> {
        let n = self.period_of(SystemTime::now());
        let b = storage.get(&format!("{}/{key}/{n:020}", self.prefix)).await.ok()?;
        Some(String::from_utf8_lossy(&b).into_owned())
    }

    /// Gives up `key`: deletes this process's lease objects of the current and next periods,
    /// so another process can take it at once (on a clean stop).
    pub async fn release(&self, storage: &dyn Storage, key: &str) {
        let n = self.period_of(SystemTime::now());
        for p in [n, n + 1] {
            let path = format!("{}/{key}/{p:020}", self.prefix);
            if storage.get(&path).await.is_ok_and(|b| b == self.owner.as_bytes()) {
                let _ = storage.delete(&path).await;
            }
        }
    }

    fn period_of(&self, t: SystemTime) -> u64 {
        let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        ms / (self.period.as_millis() as u64).max(1)
    }

    /// Takes (or confirms) this period's lease of `tenant`. `None` when another compactor
    /// holds it. A holder with less than half the period left also takes the next period's
    /// lease if it is free, so a live holder keeps the tenant without a gap (and can always
    /// start merges) while a holder that died frees it within two periods.
    pub async fn acquire(&self, storage: &dyn Storage, tenant: &str) -> Result<Option<Lease>, StorageError> {
        let now = SystemTime::now();
        let n = self.period_of(now);
        if !self.hold(storage, tenant, n).await? {
            return Ok(None);
        }
        let end_of = |p: u64| UNIX_EPOCH + Duration::from_millis((p + 1) * self.period.as_millis() as u64);
        let mut ends = end_of(n);
        if ends.duration_since(now).unwrap_or_default() < self.period / 2 && self.hold(storage, tenant, n + 1).await? {
            ends = end_of(n + 1);
        }
        Ok(Some(Lease {
            ends,
            margin: self.period / 10,
        }))
    }

    /// Whether this compactor holds period `n`'s lease of `tenant`, taking it if it is free.
    async fn hold(&self, storage: &dyn Storage, tenant: &str, n: u64) -> Result<bool, StorageError> {
        let path = format!("{}/{tenant}/{n:020}", self.prefix);
        if storage.put_if_absent(&path, Bytes::from(self.owner.clone())).await? {
            // New holder: clean up what earlier periods left.
            self.delete_before(storage, tenant, n.saturating_sub(1)).await;
            return Ok(true);
        }
        Ok(storage.get(&path).await.is_ok_and(|b| b == self.owner.as_bytes()))
    }

    async fn delete_before(&self, storage: &dyn Storage, tenant: &str, keep_from: u64) {
        let prefix = format!("{}/{tenant}/", self.prefix);
        let Ok(objects) = storage.list(&prefix).await else {
            return;
        };
        for o in objects {
            let old = o.path[prefix.len()..].parse::<u64>().is_ok_and(|p| p < keep_from);
            if old {
                let _ = storage.delete(&o.path).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weft_storage::{LocalStorage, MemoryStorage};

    #[tokio::test]
    async fn one_holder_per_tenant_and_period() {
        let s = MemoryStorage::new();
        let a = Leases::new("a", Duration::from_secs(600));
        let b = Leases::new("b", Duration::from_secs(600));
        let la = a.acquire(&s, "t1").await.unwrap().expect("first taker holds it");
        assert!(
            b.acquire(&s, "t1").await.unwrap().is_none(),
            "a second compactor is refused"
        );
        assert!(a.acquire(&s, "t1").await.unwrap().is_some(), "the holder keeps it");
        assert!(b.acquire(&s, "t2").await.unwrap().is_some(), "other tenants are free");
        assert!(la.commit_before() < la.ends);
        assert!(la.ends > SystemTime::now());
    }

    /// Late in a period, the holder takes the next one too: it can always start merges, and
    /// another compactor does not get the tenant while the holder lives.
    #[tokio::test]
    async fn a_live_holder_keeps_the_tenant_across_periods() {
        let s = MemoryStorage::new();
        let period = Duration::from_millis(400);
        let a = Leases::new("a", period);
        let b = Leases::new("b", period);
        let start = SystemTime::now();
        while SystemTime::now().duration_since(start).unwrap() < Duration::from_millis(1300) {
            let l = a
                .acquire(&s, "t")
                .await
                .unwrap()
                .expect("the live holder keeps its tenant");
            assert!(l.may_start(period), "the holder can always start a merge");
            assert!(b.acquire(&s, "t").await.unwrap().is_none());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn holders_are_named_and_a_release_frees_the_key_at_once() {
        let s = MemoryStorage::new();
        let a = Leases::with_prefix(BLOCK_BUILDER_LEASE_PREFIX, "builder-a", Duration::from_secs(600));
        let b = Leases::with_prefix(BLOCK_BUILDER_LEASE_PREFIX, "builder-b", Duration::from_secs(600));
        assert!(a.acquire(&s, "weft-traces/3").await.unwrap().is_some());
        assert!(b.acquire(&s, "weft-traces/3").await.unwrap().is_none());
        assert_eq!(b.holder(&s, "weft-traces/3").await.as_deref(), Some("builder-a"));
        assert!(!s.list("block-builder-leases/weft-traces/3/").await.unwrap().is_empty());
        b.release(&s, "weft-traces/3").await;
        assert!(
            b.acquire(&s, "weft-traces/3").await.unwrap().is_none(),
            "only the holder releases"
        );
        a.release(&s, "weft-traces/3").await;
        assert!(
            b.acquire(&s, "weft-traces/3").await.unwrap().is_some(),
            "released: the next taker holds it"
        );
        assert!(a.acquire(&s, "weft-traces/3").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_new_period_may_change_hands_and_old_leases_are_deleted() {
        let s = MemoryStorage::new();
        let a = Leases::new("a", Duration::from_millis(200));
        let b = Leases::new("b", Duration::from_millis(200));
        a.acquire(&s, "t").await.unwrap().expect("a holds the first period");
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(220)).await;
            if b.acquire(&s, "t").await.unwrap().is_some() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(450)).await;
        b.acquire(&s, "t").await.unwrap();
        let left = s.list("compactor-leases/t/").await.unwrap();
        assert!(left.len() <= 2, "old periods' leases are deleted: {left:?}");
    }

    /// Many compactors in several threads race for the same lease on a shared directory:
    /// exactly one wins.
    #[test]
    fn racing_compactors_on_local_storage_get_one_lease() {
        let dir = tempfile::tempdir().unwrap();
        let s: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let wins: usize = rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..16 {
                let s = s.clone();
                tasks.push(tokio::spawn(async move {
                    Leases::new(format!("c{i}"), Duration::from_secs(600))
                        .acquire(&*s, "t")
                        .await
                        .unwrap()
                        .is_some()
                }));
            }
            let mut wins = 0;
            for t in tasks {
                wins += usize::from(t.await.unwrap());
            }
            wins
        });
        assert_eq!(wins, 1);
    }
}
