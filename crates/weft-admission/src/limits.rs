//! Per-tenant limits: ingestion rate (token bucket, bytes) and live trace size.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_block::hash::FastMap;

/// A token bucket refilled at `rate` bytes per second up to `burst`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Rate limiting per tenant. A rate of 0 disables the limit.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Arc<str>, Bucket>>,
}

impl RateLimiter {
    pub fn new(rate_bytes: u64, burst_bytes: u64) -> Self {
        let burst = if burst_bytes == 0 {
            rate_bytes.saturating_mul(2)
        } else {
            burst_bytes
        };
        RateLimiter {
            rate: rate_bytes as f64,
            burst: burst as f64,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the tenant's bucket is empty, without taking anything: a receiver asks before
    /// reading and decoding a request, so a tenant over its rate costs no decoding. Returns
    /// how long until the bucket holds a byte again.
    pub fn check(&self, tenant: &Arc<str>) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let map = self.buckets.lock();
        let Some(b) = map.get(tenant) else { return Ok(()) };
        let tokens = (b.tokens + b.last.elapsed().as_secs_f64() * self.rate).min(self.burst);
        if tokens >= 1.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - tokens) / self.rate))
        }
    }

    /// [`RateLimiter::check`] as the refusal a receiver returns.
    pub fn check_or_refuse(&self, tenant: &Arc<str>) -> Result<(), crate::PushError> {
        self.check(tenant).map_err(|wait| crate::PushError::RateLimited {
            message: format!(
                "tenant {tenant} exceeded its ingestion rate limit of {} bytes/s",
                self.rate as u64
            ),
            retry_after: wait,
        })
    }

    /// [`RateLimiter::try_take`] as the refusal a receiver returns: over the rate, or a request
    /// larger than the burst (retry after a minute: it will never pass as it is).
    pub fn take_or_refuse(&self, tenant: &Arc<str>, bytes: usize) -> Result<(), crate::PushError> {
        self.try_take(tenant, bytes).map_err(|wait| {
            if wait == Duration::MAX {
                crate::PushError::RateLimited {
                    message: format!(
                        "request of {bytes} bytes exceeds tenant {tenant}'s ingestion burst of {} bytes",
                        self.burst as u64
                    ),
                    retry_after: Duration::from_secs(60),
                }
            } else {
                crate::PushError::RateLimited {
                    message: format!(
                        "tenant {tenant} exceeded its ingestion rate limit of {} bytes/s",
                        self.rate as u64
                    ),
                    retry_after: wait,
                }
            }
        })
    }

    /// Takes `bytes` from the tenant's bucket, or returns how long until they would be there.
    /// A request larger than the burst can never pass and waits `Duration::MAX`.
    pub fn try_take(&self, tenant: &Arc<str>, bytes: usize) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut map = self.buckets.lock();
        let b = map.entry(tenant.clone()).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * self.rate).min(self.burst);
        b.last = now;
        let need = bytes as f64;
        if need > self.burst {
            return Err(Duration::MAX);
        }
        if b.tokens >= need {
            b.tokens -= need;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((need - b.tokens) / self.rate))
        }
    }
}

/// Bytes seen per live trace, per tenant, to enforce the maximum trace size.
///
/// A trace is live for between one and two windows after its last span; then its count is
/// forgotten (as in Tempo, where the limit applies to traces still in the ingester).
#[derive(Debug)]
pub struct TraceSizes {
    window: Duration,
    inner: Mutex<TraceSizesInner>,
}

#[derive(Debug)]
struct TraceSizesInner {
    rotated: Instant,
    current: HashMap<Arc<str>, FastMap<[u8; 16], u64>>,
    previous: HashMap<Arc<str>, FastMap<[u8; 16], u64>>,
}

impl TraceSizes {
    pub fn new(window: Duration) -> Self {
        TraceSizes {
            window,
            inner: Mutex::new(TraceSizesInner {
                rotated: Instant::now(),
                current: HashMap::new(),
                previous: HashMap::new(),
            }),
        }
    }

    /// For each trace `(trace_id, bytes)`, adds the bytes if the trace stays within `max`, and
    /// reports whether it was admitted. Give each trace of a request once, with the bytes of all
    /// its spans, so that they are admitted or refused together.
    pub fn admit(&self, tenant: &Arc<str>, runs: &[([u8; 16], u64)], max: u64, admitted: &mut Vec<bool>) {
        admitted.clear();
        let mut g = self.inner.lock();
        if g.rotated.elapsed() >= self.window {
            // Each tenant's new map starts at the size the last window reached, so it does not
            // grow (rehashing every entry) several times per window under steady load. A tenant
            // that sent nothing in the last window is forgotten.
            let next = g
                .current
                .iter()
                .filter(|(_, m)| !m.is_empty())
                .map(|(t, m)| {
                    (
                        t.clone(),
                        FastMap::with_capacity_and_hasher(m.len(), Default::default()),
                    )
                })
                .collect();
            g.previous = std::mem::replace(&mut g.current, next);
            g.rotated = Instant::now();
        }
        let g = &mut *g;
        let prev = g.previous.get(tenant);
        let cur_map = match g.current.get_mut(tenant) {
            Some(m) => m,
            None => g.current.entry(tenant.clone()).or_default(),
        };
        for (id, bytes) in runs {
            let before = prev.and_then(|m| m.get(id)).copied().unwrap_or(0);
            let cur = cur_map.entry(*id).or_insert(0);
            if before + *cur + bytes > max {
                admitted.push(false);
            } else {
                *cur += bytes;
                admitted.push(true);
            }
        }
    }
}

/// Tenant IDs follow the Cortex/Tempo rules: 1–150 characters from `[A-Za-z0-9!-_.*'()]`,
/// and not `.` or `..`.
pub fn validate_tenant(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > 150 {
        return Err(format!("tenant id must be 1 to 150 characters, got {}", t.len()));
    }
    if t == "." || t == ".." {
        return Err(format!("tenant id {t:?} is not allowed"));
    }
    if let Some(c) = t
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "!-_.*'()".contains(*c)))
    {
        return Err(format!("tenant id contains unsupported character {c:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_refuses_past_burst_and_refills() {
        let rl = RateLimiter::new(1000, 2000);
        let t: Arc<str> = Arc::from("a");
        assert!(rl.try_take(&t, 1500).is_ok());
        let wait = rl.try_take(&t, 1500).unwrap_err();
        assert!(wait > Duration::from_millis(500) && wait <= Duration::from_secs(1));
        assert_eq!(rl.try_take(&t, 5000), Err(Duration::MAX));
        assert!(
            rl.try_take(&Arc::from("b"), 1500).is_ok(),
            "tenants have separate buckets"
        );
        assert!(RateLimiter::new(0, 0).try_take(&t, usize::MAX).is_ok());
    }

    #[test]
    fn trace_sizes_admit_until_the_limit() {
        let ts = TraceSizes::new(Duration::from_secs(60));
        let t: Arc<str> = Arc::from("a");
        let mut adm = Vec::new();
        ts.admit(&t, &[([1; 16], 60), ([2; 16], 10)], 100, &mut adm);
        assert_eq!(adm, vec![true, true]);
        ts.admit(&t, &[([1; 16], 50), ([2; 16], 50)], 100, &mut adm);
        assert_eq!(adm, vec![false, true]);
        ts.admit(&Arc::from("b"), &[([1; 16], 100)], 100, &mut adm);
        assert_eq!(adm, vec![true]);
    }

    /// A trace's bytes count for one to two windows after its last span, then are forgotten,
    /// and so is a tenant that sent nothing for a window.
    #[test]
    fn trace_sizes_forget_after_two_windows() {
        let window = Duration::from_millis(30);
        let ts = TraceSizes::new(window);
        let t: Arc<str> = Arc::from("a");
        let mut adm = Vec::new();
        ts.admit(&t, &[([1; 16], 60)], 100, &mut adm);
        std::thread::sleep(window + Duration::from_millis(5));
        // Rotated once: still counted from the previous window.
        ts.admit(&t, &[([1; 16], 50), ([2; 16], 1)], 100, &mut adm);
        assert_eq!(adm, vec![false, true]);
        std::thread::sleep(window + Duration::from_millis(5));
        ts.admit(&Arc::from("b"), &[([3; 16], 1)], 100, &mut adm);
        std::thread::sleep(window + Duration::from_millis(5));
        ts.admit(&Arc::from("b"), &[([3; 16], 1)], 100, &mut adm);
        let g = ts.inner.lock();
        assert!(!g.current.contains_key(&t), "tenant a is not carried into a new window");
        assert!(g.previous.get(&t).is_none_or(|m| m.is_empty()));
        drop(g);
        ts.admit(&t, &[([1; 16], 100)], 100, &mut adm);
        assert_eq!(adm, vec![true], "trace 1's bytes are forgotten");
    }

    #[test]
    fn tenant_rules() {
        assert!(validate_tenant("team-a_1.prod").is_ok());
        assert!(validate_tenant("").is_err());
        assert!(validate_tenant("..").is_err());
        assert!(validate_tenant("a/b").is_err());
        assert!(validate_tenant(&"x".repeat(151)).is_err());
    }
}
