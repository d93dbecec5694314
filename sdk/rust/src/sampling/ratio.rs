//! TraceIdRatioBased: the OpenTelemetry low-64-bit rule.

use super::{Sampler, SamplingParams, SamplingResult};

/// Returns the sampling bound for `ratio`: `None` means "sample everything" (`ratio >= 1`);
/// otherwise `trunc(ratio × 2^63)`, with 0 for `ratio <= 0` or NaN.
pub fn ratio_bound(ratio: f64) -> Option<u64> {
    if ratio >= 1.0 {
        None
    } else if ratio > 0.0 {
        Some((ratio * 9_223_372_036_854_775_808.0) as u64)
    } else {
        Some(0)
    }
}

/// Samples when `(low64(trace_id) >> 1) < trunc(ratio × 2^63)`; ignores the parent's flag and
/// erases the `th` sub-key of a sampled span.
#[derive(Clone, Debug)]
pub struct TraceIdRatioSampler {
    ratio: f64,
    bound: Option<u64>,
}

impl TraceIdRatioSampler {
    /// Returns a sampler for `ratio`.
    pub fn new(ratio: f64) -> Self {
        TraceIdRatioSampler {
            ratio,
            bound: ratio_bound(ratio),
        }
    }

    /// Returns the configured ratio.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Returns whether a trace ID falls under the bound.
    #[inline]
    pub fn samples(&self, trace_id: crate::id::TraceId) -> bool {
        match self.bound {
            None => true,
            Some(b) => {
                let t = trace_id.to_bytes();
                let low = u64::from_be_bytes([t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15]]);
                (low >> 1) < b
            }
        }
    }
}

impl Sampler for TraceIdRatioSampler {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        SamplingResult::sample_or_drop(self.samples(params.trace_id), params)
    }

    fn description(&self) -> String {
        format!("TraceIdRatioBased{{{}}}", self.ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::TraceId;

    #[test]
    fn bounds() {
        assert_eq!(ratio_bound(0.5), Some(1 << 62));
        assert_eq!(ratio_bound(f64::NAN), Some(0));
        assert_eq!(ratio_bound(1.5), None);
        let s = TraceIdRatioSampler::new(0.5);
        assert!(s.samples(TraceId::from(0x7fff_ffff_ffff_ffffu128)));
        assert!(!s.samples(TraceId::from(0x8000_0000_0000_0000u128)));
    }
}
