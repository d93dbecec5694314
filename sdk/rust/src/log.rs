//! Internal diagnostics: one line per message on stderr (or to the sink an embedding SDK sets
//! with [`set_sink`]), lowercase, no trailing period, and rate-limited where a message can repeat
//! on every batch or span.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::sync::OnceLock;

fn epoch() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

static SINK: OnceLock<fn(&str)> = OnceLock::new();

/// Sends every later warning to `sink` instead of stderr (`WEFT_SDK_QUIET` then no longer
/// applies). The first call wins; returns whether this one did. The sink runs on the thread
/// that warns, the export thread included, so it must not block or take locks another thread
/// may hold (the Python SDK queues the message and logs it from a later call into the SDK).
pub fn set_sink(sink: fn(&str)) -> bool {
    SINK.set(sink).is_ok()
}

/// Writes a warning line (`weft-sdk: warn: …`), or hands it to the sink.
pub fn warn(args: fmt::Arguments<'_>) {
    if let Some(sink) = SINK.get() {
        sink(&args.to_string());
        return;
    }
    if std::env::var_os("WEFT_SDK_QUIET").is_none() {
        eprintln!("weft-sdk: warn: {args}");
    }
}

/// A message that is written at most once per interval; suppressed repeats are counted and
/// reported with the next line.
#[derive(Debug)]
pub struct RateLimited {
    interval: Duration,
    /// Milliseconds since `epoch()` of the last line, plus one (0 = never).
    last_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimited {
    /// Returns a limiter allowing one line per `interval`.
    pub const fn new(interval: Duration) -> Self {
        RateLimited {
            interval,
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Writes the warning unless one was written less than `interval` ago.
    pub fn warn(&self, args: fmt::Arguments<'_>) {
        let now = epoch().elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.interval.as_millis() as u64 {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let n = self.suppressed.swap(0, Ordering::Relaxed);
        if n > 0 {
            warn(format_args!("{args} ({n} similar messages suppressed)"));
        } else {
            warn(args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_message_within_interval_is_suppressed() {
        let r = RateLimited::new(Duration::from_secs(60));
        r.warn(format_args!("first"));
        r.warn(format_args!("second"));
        assert_eq!(r.suppressed.load(Ordering::Relaxed), 1);
    }
}
