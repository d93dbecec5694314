//! Consistent probability sampling (OTEP 235): `th` and `rv` in the `ot` tracestate member.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Decision, Sampler, SamplingParams, SamplingResult};
use crate::id::TraceId;
use crate::tracestate::TraceState;

/// The largest 56-bit value plus one.
const MAX_THRESHOLD: u64 = 1 << 56;

/// The sub-keys of the `ot` tracestate member that weft reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtMember {
    /// The rejection threshold from a valid `th`.
    pub threshold: Option<u64>,
    /// The randomness from a valid `rv`.
    pub randomness: Option<u64>,
}

fn parse_hex_any(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 14 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

impl OtMember {
    /// Reads `th` and `rv` from a tracestate (the first occurrence of each counts; invalid values
    /// are absent).
    pub fn read(ts: &TraceState) -> OtMember {
        let Some(ot) = ts.get("ot") else {
            return OtMember::default();
        };
        let mut th = None;
        let mut rv = None;
        for piece in ot.split(';') {
            if th.is_none()
                && let Some(v) = piece.strip_prefix("th:")
            {
                th = Some(v);
            } else if rv.is_none()
                && let Some(v) = piece.strip_prefix("rv:")
            {
                rv = Some(v);
            }
        }
        OtMember {
            // `th` digits are the most significant ones: pad on the right to 14 digits.
            threshold: th.and_then(|v| parse_hex_any(v).map(|t| t << (4 * (14 - v.len())))),
            randomness: rv.filter(|v| v.len() == 14).and_then(parse_hex_any),
        }
    }
}

/// Returns the 56-bit randomness: a valid `rv`, else the low 56 bits of the trace ID.
fn randomness(ts: &TraceState, trace_id: TraceId) -> (u64, bool) {
    match OtMember::read(ts).randomness {
        Some(r) => (r, true),
        None => {
            let t = trace_id.to_bytes();
            (
                u64::from_be_bytes([0, t[9], t[10], t[11], t[12], t[13], t[14], t[15]]),
                false,
            )
        }
    }
}

/// Replaces the `ot` member with `new_ot` (or removes it for `None`), moving it to the front.
/// `None` if nothing changes (same value, or a new value longer than 256 characters).
fn rewrite_ot(ts: &TraceState, old: Option<&str>, new_ot: Option<&str>) -> Option<TraceState> {
    if old == new_ot {
        return None;
    }
    match new_ot {
        Some(v) if v.len() > 256 => None,
        Some(v) => ts.without("ot").with_front("ot", v),
        None => Some(ts.without("ot")),
    }
}

/// Returns the tracestate with every `th:` piece removed from `ot` (the member removed when
/// empty), or `None` if there is nothing to erase.
pub(crate) fn erase_th(ts: &TraceState) -> Option<TraceState> {
    let old = ts.get("ot")?;
    if !old.split(';').any(|p| p.starts_with("th:")) {
        return None;
    }
    let rest: Vec<&str> = old.split(';').filter(|p| !p.starts_with("th:")).collect();
    let new = rest.join(";");
    rewrite_ot(ts, Some(old), if new.is_empty() { None } else { Some(&new) })
}

/// Returns the tracestate with `th:{th}` first in `ot`, or `None` if that changes nothing.
pub(crate) fn set_th(ts: &TraceState, th: &str) -> Option<TraceState> {
    let old = ts.get("ot");
    let mut new = format!("th:{th}");
    for p in old
        .into_iter()
        .flat_map(|o| o.split(';'))
        .filter(|p| !p.starts_with("th:"))
    {
        new.push(';');
        new.push_str(p);
    }
    rewrite_ot(ts, old, Some(&new))
}

/// The ParentBased consistency check: erases `th` when the randomness is below it.
pub(crate) fn erase_inconsistent_threshold(ts: &TraceState, trace_id: TraceId) -> Option<TraceState> {
    let t = OtMember::read(ts).threshold?;
    let (r, _) = randomness(ts, trace_id);
    if r < t { erase_th(ts) } else { None }
}

/// Converts a probability to its `th` encoding with precision 4 (spec/sampling.md), e.g.
/// `0.1 → "e666"`. `p >= 1` gives `"0"`; callers handle `p <= 0`.
pub fn threshold_for_probability(p: f64) -> String {
    if p >= 1.0 {
        return "0".into();
    }
    let bits = p.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    // frexp exponent: p = m × 2^e with 0.5 ≤ m < 1; subnormals only need "very negative".
    let e = if biased == 0 { -1022 } else { biased - 1022 };
    let precision = (4 + (-e) / 4).clamp(1, 12) as usize;
    let mut q = 2.0 - p;
    q += f64::powi(2.0, -4 * precision as i32 - 1);
    let digits = if q >= 2.0 {
        "fffffffffffff".to_string()
    } else {
        format!("{:013x}", q.to_bits() & ((1u64 << 52) - 1))
    };
    let th = digits[..precision].trim_end_matches('0');
    if th.is_empty() { "0".into() } else { th.to_owned() }
}

/// Parses a `th` encoding into a 56-bit threshold.
pub(crate) fn threshold_value(th: &str) -> u64 {
    parse_hex_any(th).map(|t| t << (4 * (14 - th.len()))).unwrap_or(0)
}

static PRESUMED_RANDOM_WARNED: AtomicBool = AtomicBool::new(false);

/// Samples when the randomness `R >= T`, and records `th` in the tracestate of sampled spans.
#[derive(Clone, Debug)]
pub struct ConsistentProbabilitySampler {
    probability: f64,
    /// `None` samples nothing.
    threshold: Option<(u64, String)>,
}

impl ConsistentProbabilitySampler {
    /// Returns a sampler for probability `p` (`p > 1` is 1; `p <= 0` or NaN samples nothing).
    pub fn new(p: f64) -> Self {
        if !(0.0..=1.0).contains(&p) {
            crate::log::warn(format_args!("consistent probability {p} is outside [0, 1], clamping"));
        }
        let threshold = if p.is_nan() || p <= 0.0 {
            None
        } else {
            let th = threshold_for_probability(p.min(1.0));
            Some((threshold_value(&th), th))
        };
        ConsistentProbabilitySampler {
            probability: p,
            threshold,
        }
    }

    /// Returns the `th` value written on sampled spans, if any.
    pub fn th(&self) -> Option<&str> {
        self.threshold.as_ref().map(|(_, s)| s.as_str())
    }
}

impl Sampler for ConsistentProbabilitySampler {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        let Some((t, th)) = &self.threshold else {
            return SamplingResult::unchanged(Decision::Drop);
        };
        debug_assert!(*t < MAX_THRESHOLD);
        let parent_ts = params.parent_trace_state();
        let (r, from_rv) = randomness(parent_ts, params.trace_id);
        if !from_rv
            && params
                .parent
                .is_some_and(|p| p.context.is_valid() && !p.context.is_random())
            && !PRESUMED_RANDOM_WARNED.swap(true, Ordering::Relaxed)
        {
            crate::log::warn(format_args!(
                "consistent probability sampling presumes trace id randomness for a parent without the random flag"
            ));
        }
        if r >= *t {
            SamplingResult {
                decision: Decision::RecordAndSample,
                trace_state: set_th(parent_ts, th),
            }
        } else {
            SamplingResult::unchanged(Decision::Drop)
        }
    }

    fn description(&self) -> String {
        format!("ConsistentProbabilityBased{{{}}}", self.probability)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table() {
        for (p, th) in [
            (1.0, "0"),
            (0.5, "8"),
            (1.0 / 3.0, "aaab"),
            (0.25, "c"),
            (0.2, "cccd"),
            (0.125, "e"),
            (0.1, "e666"),
            (0.0625, "f"),
            (0.01, "fd70a"),
            (0.001, "ffbe77"),
            (0.0001, "fff9724"),
        ] {
            assert_eq!(threshold_for_probability(p), th, "p={p}");
        }
        assert_eq!(threshold_value("8"), 0x80000000000000);
    }

    #[test]
    fn ot_rewrites() {
        let ts = TraceState::parse_str("congo=t61,ot=foo:bar;th:c").unwrap();
        assert_eq!(set_th(&ts, "8").unwrap().as_str(), "ot=th:8;foo:bar,congo=t61");
        assert_eq!(erase_th(&ts).unwrap().as_str(), "ot=foo:bar,congo=t61");
        let only = TraceState::parse_str("a=1,ot=th:8").unwrap();
        assert_eq!(erase_th(&only).unwrap().as_str(), "a=1");
        assert!(set_th(&only, "8").is_none());
        assert_eq!(
            OtMember::read(&TraceState::parse_str("ot=rv:C0000000000000;th:C").unwrap()).randomness,
            Some(0xc0000000000000)
        );
    }
}
