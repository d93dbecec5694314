//! Retry classification and back-off (spec/otlp.md#retry).

use std::time::{Duration, SystemTime};

/// At most this many attempts per batch (the first and 4 retries).
pub const MAX_ATTEMPTS: u32 = 5;

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered.
    Success,
    /// Try again, after the server-requested delay if there is one.
    Retryable(Option<Duration>),
    /// Drop the batch.
    Permanent,
}

/// Classifies an HTTP status. `retry_after` is honoured on 429 and 503 only.
pub fn classify_http(status: u16, retry_after: Option<&str>, now: SystemTime) -> Outcome {
    match status {
        200..=299 => Outcome::Success,
        429 | 503 => Outcome::Retryable(retry_after.and_then(|v| parse_retry_after(v, now))),
        502 | 504 => Outcome::Retryable(None),
        _ => Outcome::Permanent,
    }
}

/// gRPC status codes by number.
pub mod grpc_code {
    /// OK.
    pub const OK: u32 = 0;
    /// CANCELLED.
    pub const CANCELLED: u32 = 1;
    /// UNKNOWN.
    pub const UNKNOWN: u32 = 2;
    /// INVALID_ARGUMENT.
    pub const INVALID_ARGUMENT: u32 = 3;
    /// DEADLINE_EXCEEDED.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// NOT_FOUND.
    pub const NOT_FOUND: u32 = 5;
    /// ALREADY_EXISTS.
    pub const ALREADY_EXISTS: u32 = 6;
    /// PERMISSION_DENIED.
    pub const PERMISSION_DENIED: u32 = 7;
    /// RESOURCE_EXHAUSTED.
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    /// FAILED_PRECONDITION.
    pub const FAILED_PRECONDITION: u32 = 9;
    /// ABORTED.
    pub const ABORTED: u32 = 10;
    /// OUT_OF_RANGE.
    pub const OUT_OF_RANGE: u32 = 11;
    /// UNIMPLEMENTED.
    pub const UNIMPLEMENTED: u32 = 12;
    /// INTERNAL.
    pub const INTERNAL: u32 = 13;
    /// UNAVAILABLE.
    pub const UNAVAILABLE: u32 = 14;
    /// DATA_LOSS.
    pub const DATA_LOSS: u32 = 15;
    /// UNAUTHENTICATED.
    pub const UNAUTHENTICATED: u32 = 16;

    /// Returns the code for a name such as `"UNAVAILABLE"`.
    pub fn from_name(name: &str) -> Option<u32> {
        const NAMES: [&str; 17] = [
            "OK",
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
        ];
        NAMES.iter().position(|n| *n == name).map(|i| i as u32)
    }
}

/// Classifies a gRPC status; `retry_info` is the `RetryInfo.retry_delay` from the status
/// details, if any. `RESOURCE_EXHAUSTED` is retryable only with `RetryInfo`.
pub fn classify_grpc(code: u32, retry_info: Option<Duration>) -> Outcome {
    use grpc_code::*;
    match code {
        OK => Outcome::Success,
        CANCELLED | DEADLINE_EXCEEDED | ABORTED | OUT_OF_RANGE | UNAVAILABLE | DATA_LOSS => {
            Outcome::Retryable(retry_info)
        }
        RESOURCE_EXHAUSTED if retry_info.is_some() => Outcome::Retryable(retry_info),
        _ => Outcome::Permanent,
    }
}

/// Parses `Retry-After`: a non-negative integer of seconds, or an HTTP-date (0 if past).
/// `None` for anything else.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The back-off range before retry `k` (1-based): `[c/2, c]` with `c = min(5 s, 1 s × 1.5^(k−1))`.
/// `None` when no retry `k` is allowed.
pub fn backoff_range(k: u32) -> Option<(Duration, Duration)> {
    if k == 0 || k >= MAX_ATTEMPTS {
        return None;
    }
    let c = (1.5f64.powi(k as i32 - 1)).min(5.0);
    Some((Duration::from_secs_f64(c / 2.0), Duration::from_secs_f64(c)))
}

/// Draws a back-off for retry `k` uniformly from [`backoff_range`].
pub fn backoff(k: u32) -> Option<Duration> {
    let (lo, hi) = backoff_range(k)?;
    Some(lo + (hi - lo).mul_f64(crate::id::next_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_grpc_tables() {
        let now = SystemTime::UNIX_EPOCH;
        assert_eq!(
            classify_http(429, Some("3"), now),
            Outcome::Retryable(Some(Duration::from_secs(3)))
        );
        assert_eq!(classify_http(400, Some("1"), now), Outcome::Permanent);
        assert_eq!(classify_grpc(grpc_code::RESOURCE_EXHAUSTED, None), Outcome::Permanent);
        assert_eq!(grpc_code::from_name("DATA_LOSS"), Some(15));
    }

    #[test]
    fn backoff_bounds() {
        assert_eq!(
            backoff_range(4),
            Some((Duration::from_secs_f64(1.6875), Duration::from_secs_f64(3.375)))
        );
        assert_eq!(backoff_range(5), None);
        for k in 1..5 {
            let (lo, hi) = backoff_range(k).unwrap();
            let d = backoff(k).unwrap();
            assert!(d >= lo && d <= hi);
        }
        assert_eq!(parse_retry_after("-5", SystemTime::UNIX_EPOCH), None);
    }
}
