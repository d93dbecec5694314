//! RateLimiting: a token bucket (the Jaeger rate limiter).

use std::sync::Mutex;
use std::time::Instant;

use super::{Sampler, SamplingParams, SamplingResult};

/// A token bucket with an explicit clock, in integer nanoseconds.
///
/// `max_balance = max(1, rate)`. Each call credits `elapsed_s × rate` (capped) when time moved
/// forward, then takes one token if at least one is there.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    rate: f64,
    max_balance: f64,
    balance: f64,
    last_ns: u64,
}

impl RateLimiter {
    /// Returns a full bucket created at `now_ns`. A negative or NaN rate is treated as 0.
    pub fn new(rate: f64, now_ns: u64) -> Self {
        let rate = if rate.is_nan() || rate < 0.0 { 0.0 } else { rate };
        let max_balance = rate.max(1.0);
        RateLimiter {
            rate,
            max_balance,
            balance: max_balance,
            last_ns: now_ns,
        }
    }

    /// Returns the configured rate (spans per second).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Tries to take one token at `now_ns`.
    pub fn try_acquire(&mut self, now_ns: u64) -> bool {
        if self.rate == 0.0 {
            return false;
        }
        if now_ns > self.last_ns {
            let elapsed = (now_ns - self.last_ns) as f64 / 1e9;
            self.balance = (self.balance + elapsed * self.rate).min(self.max_balance);
            self.last_ns = now_ns;
        }
        if self.balance >= 1.0 {
            self.balance -= 1.0;
            true
        } else {
            false
        }
    }
}

fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Samples at most `rate` new spans per second on average (bursts up to `max(1, rate)`); the
/// bucket is shared by all threads behind one short critical section. Erases `th` on sample.
#[derive(Debug)]
pub struct RateLimitingSampler {
    limiter: Mutex<RateLimiter>,
}

impl RateLimitingSampler {
    /// Returns a sampler allowing `rate` spans per second.
    pub fn new(rate: f64) -> Self {
        RateLimitingSampler {
            limiter: Mutex::new(RateLimiter::new(rate, monotonic_ns())),
        }
    }

    /// Returns the configured rate.
    pub fn rate(&self) -> f64 {
        self.limiter.lock().map(|l| l.rate()).unwrap_or(0.0)
    }

    /// Takes a token now.
    pub fn try_acquire(&self) -> bool {
        let now = monotonic_ns();
        match self.limiter.lock() {
            Ok(mut l) => l.try_acquire(now),
            Err(p) => p.into_inner().try_acquire(now),
        }
    }
}

impl Sampler for RateLimitingSampler {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        SamplingResult::sample_or_drop(self.try_acquire(), params)
    }

    fn description(&self) -> String {
        format!("RateLimitingSampler{{{}}}", self.rate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills() {
        let mut l = RateLimiter::new(2.0, 0);
        assert!(l.try_acquire(0) && l.try_acquire(0) && !l.try_acquire(0));
        assert!(!l.try_acquire(250_000_000));
        assert!(l.try_acquire(500_000_000));
        assert!(!RateLimiter::new(f64::NAN, 0).try_acquire(10));
    }
}
