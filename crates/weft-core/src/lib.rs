//! The small vocabulary every weft crate shares. Nothing here does I/O or knows a role; it
//! changes rarely, so every crate may depend on it.
//!
//! - [`WalPos`]: a position in the write-ahead log, as the WAL hands it out and as block metas
//!   record it;
//! - [`hex`]: lowercase hex of IDs, built once per use;
//! - [`now_ns`]: the wall clock in Unix nanoseconds;
//! - [`parse_duration`]: Go-style durations (`1h30m`, `250ms`), for flags, query parameters and
//!   TraceQL;
//! - [`prom`]: the Prometheus text exposition format, written in one place.

pub mod prom;

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// The position of a WAL record: segment sequence number and byte offset in that segment.
/// Positions only grow, so they order records across segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct WalPos {
    pub segment: u64,
    pub offset: u64,
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[(x >> 4) as usize] as char);
        s.push(DIGITS[(x & 15) as usize] as char);
    }
    s
}

/// The wall clock in Unix nanoseconds (0 if the clock is before 1970).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

const UNITS: &str = "units are ns, us, µs, ms, s, m and h";

/// Parses a Go-style duration (`1.5s`, `100ms`, `1h30m`, `10µs`) into nanoseconds, exactly
/// (fractions below a nanosecond are truncated). With `days`, `d` (24 h) is a unit too. Every
/// number needs a unit; the error says what was wrong.
pub fn parse_duration(text: &str, days: bool) -> Result<u64, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut total: u128 = 0;
    if chars.is_empty() {
        return Err("expected a number with a unit".to_string());
    }
    while i < chars.len() {
        let mut whole: u128 = 0;
        let mut digits = 0;
        while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u128::from(d)))
                .ok_or("value is out of range")?;
            digits += 1;
            i += 1;
        }
        let mut fraction: u128 = 0;
        let mut scale: u128 = 1;
        if chars.get(i) == Some(&'.') {
            i += 1;
            while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                // Digits past 1e-18 of a unit cannot change a nanosecond count.
                if scale < 1_000_000_000_000_000_000 {
                    fraction = fraction * 10 + u128::from(d);
                    scale *= 10;
                }
                digits += 1;
                i += 1;
            }
        }
        if digits == 0 {
            return Err(match chars.get(i) {
                Some(c) => format!("expected a number, found {c:?}"),
                None => "expected a number after the last unit".to_string(),
            });
        }
        let mut unit = String::new();
        while let Some(&c) = chars.get(i).filter(|c| c.is_alphabetic() || is_micro(**c)) {
            unit.push(c);
            i += 1;
        }
        let nanos_per_unit: u128 = match unit.as_str() {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" if days => 86_400_000_000_000,
            "" if days => return Err(format!("missing unit ({UNITS} and d)")),
            "" => return Err(format!("missing unit ({UNITS})")),
            other if days => return Err(format!("unknown unit '{other}' ({UNITS} and d)")),
            other => return Err(format!("unknown unit '{other}' ({UNITS})")),
        };
        let part = whole
            .checked_mul(nanos_per_unit)
            .and_then(|w| w.checked_add(fraction * nanos_per_unit / scale))
            .ok_or("value is out of range")?;
        total = total.checked_add(part).ok_or("value is out of range")?;
        if total > u64::MAX as u128 {
            return Err("value is out of range".to_string());
        }
    }
    Ok(total as u64)
}

/// The micro sign and the Greek mu, both used for microseconds.
pub fn is_micro(c: char) -> bool {
    c == 'µ' || c == 'μ'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_exactly() {
        assert_eq!(parse_duration("100ms", false), Ok(100_000_000));
        assert_eq!(parse_duration("1m30s", false), Ok(90_000_000_000));
        assert_eq!(parse_duration("1.5s", false), Ok(1_500_000_000));
        assert_eq!(parse_duration("10µs", false), Ok(10_000));
        assert_eq!(parse_duration("0.1s", false), Ok(100_000_000));
        assert_eq!(parse_duration("2d", true), Ok(172_800_000_000_000));
        assert!(parse_duration("2d", false).unwrap_err().contains("unknown unit 'd'"));
        assert!(parse_duration("5", false).unwrap_err().contains("missing unit"));
        assert!(parse_duration("", false).is_err());
        assert!(parse_duration("s", false).is_err());
        assert!(parse_duration("99999999999999999999h", false).is_err());
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
