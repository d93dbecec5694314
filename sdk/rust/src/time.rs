//! Integer-nanosecond timestamps.
//!
//! Span timestamps are `u64` Unix nanoseconds. On x86-64 Linux, when the kernel itself uses
//! the TSC as its clock source (so the TSC is invariant and synchronized across CPUs), they are
//! read from the TSC and scaled: `rdtsc` costs about 12 ns on the reference machine against
//! about 30 ns for `clock_gettime`, and a sampled span reads the clock twice (bench
//! `span_sampled_0_attrs`). The scale is calibrated against the wall clock on first use (about
//! 1 ms) and then re-anchored to the wall clock about once a second by whichever thread notices
//! first, so NTP adjustments are followed within a second and the frequency estimate improves
//! with the baseline. Elsewhere `SystemTime` is read directly. Times before 1970 map to 0.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Returns the current wall-clock time in Unix nanoseconds.
#[inline]
pub fn now_unix_nanos() -> u64 {
    match tsc::clock() {
        Some(c) => c.now(),
        None => to_unix_nanos(SystemTime::now()),
    }
}

/// Converts a `SystemTime` to Unix nanoseconds (0 before the epoch, saturating after 2554).
#[inline]
pub fn to_unix_nanos(t: SystemTime) -> u64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        Err(_) => 0,
    }
}

/// Converts Unix nanoseconds back to a `SystemTime`.
pub fn from_unix_nanos(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// Calibrates the fast clock now (it is otherwise calibrated on first use, which takes about
/// 1 ms). Called when a tracer provider is built.
pub fn init() {
    let _ = tsc::clock();
}

/// Returns whether timestamps come from the calibrated TSC.
pub fn uses_tsc() -> bool {
    tsc::clock().is_some()
}

mod tsc {
    use super::*;

    /// The scale from TSC ticks to nanoseconds, published with a sequence lock so readers see
    /// a consistent (base_tsc, base_ns, mult) triple without taking a lock.
    pub(super) struct TscClock {
        seq: AtomicU64,
        base_tsc: AtomicU64,
        base_ns: AtomicU64,
        /// Nanoseconds per tick, as a 32.32 fixed-point number.
        mult: AtomicU64,
        /// The first calibration point; frequencies are measured from it.
        origin_tsc: u64,
        origin_ns: u64,
        /// Ticks after `base_tsc` when the next re-anchoring is due.
        refresh_ticks: AtomicU64,
        refreshing: AtomicBool,
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    #[allow(unsafe_code)]
    fn rdtsc() -> u64 {
        // SAFETY: `rdtsc` has no memory effects and is available on every x86-64 CPU; it is
        // only used after `usable()` confirmed the kernel trusts the TSC as a clock source.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn rdtsc() -> u64 {
        0
    }

    fn usable() -> bool {
        cfg!(all(target_arch = "x86_64", target_os = "linux"))
            && std::env::var_os("WEFT_SDK_NO_TSC").is_none()
            && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                .is_ok_and(|s| s.trim() == "tsc")
    }

    /// A (tsc, ns) pair taken as close together as possible.
    fn sample() -> (u64, u64) {
        let mut best = (0, 0, u64::MAX);
        for _ in 0..5 {
            let a = rdtsc();
            let ns = to_unix_nanos(SystemTime::now());
            let b = rdtsc();
            if b.wrapping_sub(a) < best.2 {
                best = (a + (b - a) / 2, ns, b - a);
            }
        }
        (best.0, best.1)
    }

    fn mult_between(t0: u64, n0: u64, t1: u64, n1: u64) -> Option<u64> {
        let dt = t1.checked_sub(t0).filter(|d| *d > 0)?;
        let dn = n1.checked_sub(n0)?;
        Some(((dn as u128) << 32).checked_div(dt as u128)?.min(u64::MAX as u128) as u64)
    }

    pub(super) fn clock() -> Option<&'static TscClock> {
        static CLOCK: OnceLock<Option<TscClock>> = OnceLock::new();
        CLOCK.get_or_init(TscClock::calibrate).as_ref()
    }

    impl TscClock {
        fn calibrate() -> Option<TscClock> {
            if !usable() {
                return None;
            }
            let (t0, n0) = sample();
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
            let (t1, n1) = sample();
            let mult = mult_between(t0, n0, t1, n1)?;
            // Ticks per second, to schedule re-anchoring.
            let ticks_per_sec = ((1_000_000_000u128 << 32) / mult.max(1) as u128) as u64;
            Some(TscClock {
                seq: AtomicU64::new(0),
                base_tsc: AtomicU64::new(t1),
                base_ns: AtomicU64::new(n1),
                mult: AtomicU64::new(mult),
                origin_tsc: t0,
                origin_ns: n0,
                refresh_ticks: AtomicU64::new(ticks_per_sec),
                refreshing: AtomicBool::new(false),
            })
        }

        #[inline]
        pub(super) fn now(&self) -> u64 {
            let tsc = rdtsc();
            loop {
                let s1 = self.seq.load(Ordering::Acquire);
                let base_tsc = self.base_tsc.load(Ordering::Relaxed);
                let base_ns = self.base_ns.load(Ordering::Relaxed);
                let mult = self.mult.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if s1 & 1 == 1 || self.seq.load(Ordering::Relaxed) != s1 {
                    std::hint::spin_loop();
                    continue;
                }
                let delta = tsc.saturating_sub(base_tsc);
                if delta > self.refresh_ticks.load(Ordering::Relaxed) {
                    self.refresh();
                }
                return base_ns + ((delta as u128 * mult as u128) >> 32) as u64;
            }
        }

        #[cold]
        fn refresh(&self) {
            if self.refreshing.swap(true, Ordering::Acquire) {
                return;
            }
            let (t, n) = sample();
            if let Some(mult) = mult_between(self.origin_tsc, self.origin_ns, t, n) {
                let s = self.seq.fetch_add(1, Ordering::AcqRel);
                debug_assert!(s & 1 == 0);
                self.base_tsc.store(t, Ordering::Relaxed);
                self.base_ns.store(n, Ordering::Relaxed);
                self.mult.store(mult, Ordering::Relaxed);
                self.seq.fetch_add(1, Ordering::Release);
            }
            self.refreshing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_clamp() {
        assert_eq!(
            to_unix_nanos(from_unix_nanos(1_700_000_000_123_456_789)),
            1_700_000_000_123_456_789
        );
        assert_eq!(to_unix_nanos(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert!(now_unix_nanos() > 1_600_000_000_000_000_000);
    }

    #[test]
    fn fast_clock_tracks_the_wall_clock() {
        init();
        for _ in 0..5 {
            let wall = to_unix_nanos(SystemTime::now());
            let fast = now_unix_nanos();
            let diff = fast.abs_diff(wall);
            assert!(diff < 2_000_000, "fast clock off by {diff} ns (tsc: {})", uses_tsc());
            std::thread::sleep(Duration::from_millis(20));
        }
        let a = now_unix_nanos();
        let b = now_unix_nanos();
        assert!(b >= a);
    }
}
