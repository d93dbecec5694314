//! Samplers (spec/sampling.md).
//!
//! A [`Sampler`] is asked once per new span, after the trace ID is chosen and before the span ID
//! is generated. It returns a [`Decision`] and, only when it changes it, the new span's
//! tracestate (so the common "parent tracestate unchanged" case costs nothing).

mod consistent;
pub mod jaeger_remote;
mod rate;
mod ratio;

use std::fmt;

use opentelemetry::KeyValue;
use opentelemetry::trace::{Link, SpanKind};

pub use self::consistent::{ConsistentProbabilitySampler, OtMember, threshold_for_probability};
pub use self::jaeger_remote::{JaegerRemoteConfig, JaegerRemoteSampler, ResolvedSampler, Strategy, StrategyError};
pub use self::rate::{RateLimiter, RateLimitingSampler};
pub use self::ratio::{TraceIdRatioSampler, ratio_bound};

use crate::context::SpanContext;
use crate::id::TraceId;
use crate::tracestate::TraceState;

/// A sampling decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Not recorded, not sampled.
    Drop,
    /// Recorded but not exported (no built-in sampler returns it).
    RecordOnly,
    /// Recorded and exported.
    RecordAndSample,
}

impl Decision {
    /// Returns whether the span records data.
    #[inline]
    pub fn is_recording(self) -> bool {
        !matches!(self, Decision::Drop)
    }
    /// Returns whether the span is sampled.
    #[inline]
    pub fn is_sampled(self) -> bool {
        matches!(self, Decision::RecordAndSample)
    }
}

/// The parent of the span being sampled.
#[derive(Clone, Copy, Debug)]
pub struct ParentRef<'a> {
    /// The parent's span context (possibly invalid).
    pub context: SpanContext,
    /// The parent's tracestate.
    pub trace_state: &'a TraceState,
}

/// What a sampler is told about a new span.
#[derive(Clone, Copy, Debug)]
pub struct SamplingParams<'a> {
    /// The parent, if the span has one (it may be invalid, which ParentBased treats as a root).
    pub parent: Option<ParentRef<'a>>,
    /// The new span's trace ID.
    pub trace_id: TraceId,
    /// The span name.
    pub name: &'a str,
    /// The span kind.
    pub kind: &'a SpanKind,
    /// The attributes given at creation.
    pub attributes: &'a [KeyValue],
    /// The links given at creation.
    pub links: &'a [Link],
}

impl<'a> SamplingParams<'a> {
    /// Returns parameters for a root span with no attributes or links.
    pub fn root(trace_id: TraceId, name: &'a str) -> Self {
        SamplingParams {
            parent: None,
            trace_id,
            name,
            kind: &SpanKind::Internal,
            attributes: &[],
            links: &[],
        }
    }

    /// Returns the parent tracestate (empty for a root).
    pub fn parent_trace_state(&self) -> &'a TraceState {
        match self.parent {
            Some(p) => p.trace_state,
            None => &TraceState::EMPTY,
        }
    }
}

/// A decision and the tracestate change that comes with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplingResult {
    /// The decision.
    pub decision: Decision,
    /// The new span's tracestate; `None` means "the parent tracestate, unchanged".
    pub trace_state: Option<TraceState>,
}

impl SamplingResult {
    /// A decision that leaves the parent tracestate unchanged.
    #[inline]
    pub const fn unchanged(decision: Decision) -> Self {
        SamplingResult {
            decision,
            trace_state: None,
        }
    }

    /// Samples (erasing a stale OTEP 235 `th` from the parent's tracestate, which no longer
    /// describes this decision) or drops, leaving the tracestate unchanged. The decision of
    /// every sampler that is not itself threshold-based.
    pub(crate) fn sample_or_drop(sample: bool, params: &SamplingParams<'_>) -> Self {
        if sample {
            SamplingResult {
                decision: Decision::RecordAndSample,
                trace_state: consistent::erase_th(params.parent_trace_state()),
            }
        } else {
            SamplingResult::unchanged(Decision::Drop)
        }
    }

    /// Returns the resulting tracestate given the parameters the sampler saw.
    pub fn resolved_trace_state(&self, params: &SamplingParams<'_>) -> TraceState {
        match &self.trace_state {
            Some(ts) => ts.clone(),
            None => params.parent_trace_state().clone(),
        }
    }
}

/// Decides whether a new span is recorded and sampled. Called on application threads: it must
/// not block and should not allocate on the common path.
pub trait Sampler: Send + Sync + fmt::Debug {
    /// Returns the decision for the span described by `params`.
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult;
    /// Returns a human-readable description, e.g. `TraceIdRatioBased{0.5}`.
    fn description(&self) -> String;
}

impl<S: Sampler + ?Sized> Sampler for Box<S> {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        (**self).should_sample(params)
    }
    fn description(&self) -> String {
        (**self).description()
    }
}

impl<S: Sampler + ?Sized> Sampler for std::sync::Arc<S> {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        (**self).should_sample(params)
    }
    fn description(&self) -> String {
        (**self).description()
    }
}

/// Samples everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysOn;

impl Sampler for AlwaysOn {
    #[inline]
    fn should_sample(&self, _: &SamplingParams<'_>) -> SamplingResult {
        SamplingResult::unchanged(Decision::RecordAndSample)
    }
    fn description(&self) -> String {
        "AlwaysOnSampler".into()
    }
}

/// Samples nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysOff;

impl Sampler for AlwaysOff {
    #[inline]
    fn should_sample(&self, _: &SamplingParams<'_>) -> SamplingResult {
        SamplingResult::unchanged(Decision::Drop)
    }
    fn description(&self) -> String {
        "AlwaysOffSampler".into()
    }
}

/// Delegates on the parent: `root` for a root span, otherwise one of four slots by the parent's
/// remoteness and sampled flag, then applies the threshold consistency check.
#[derive(Debug)]
pub struct ParentBased {
    root: Box<dyn Sampler>,
    remote_parent_sampled: Box<dyn Sampler>,
    remote_parent_not_sampled: Box<dyn Sampler>,
    local_parent_sampled: Box<dyn Sampler>,
    local_parent_not_sampled: Box<dyn Sampler>,
}

impl ParentBased {
    /// Returns a ParentBased sampler with the default parent slots (AlwaysOn when the parent is
    /// sampled, AlwaysOff otherwise).
    pub fn new(root: impl Sampler + 'static) -> Self {
        ParentBased {
            root: Box::new(root),
            remote_parent_sampled: Box::new(AlwaysOn),
            remote_parent_not_sampled: Box::new(AlwaysOff),
            local_parent_sampled: Box::new(AlwaysOn),
            local_parent_not_sampled: Box::new(AlwaysOff),
        }
    }
    /// Sets the delegate for sampled remote parents.
    pub fn with_remote_parent_sampled(mut self, s: impl Sampler + 'static) -> Self {
        self.remote_parent_sampled = Box::new(s);
        self
    }
    /// Sets the delegate for not-sampled remote parents.
    pub fn with_remote_parent_not_sampled(mut self, s: impl Sampler + 'static) -> Self {
        self.remote_parent_not_sampled = Box::new(s);
        self
    }
    /// Sets the delegate for sampled local parents.
    pub fn with_local_parent_sampled(mut self, s: impl Sampler + 'static) -> Self {
        self.local_parent_sampled = Box::new(s);
        self
    }
    /// Sets the delegate for not-sampled local parents.
    pub fn with_local_parent_not_sampled(mut self, s: impl Sampler + 'static) -> Self {
        self.local_parent_not_sampled = Box::new(s);
        self
    }
}

impl Sampler for ParentBased {
    fn should_sample(&self, params: &SamplingParams<'_>) -> SamplingResult {
        let delegate = match params.parent {
            Some(p) if p.context.is_valid() => match (p.context.is_remote, p.context.is_sampled()) {
                (true, true) => &self.remote_parent_sampled,
                (true, false) => &self.remote_parent_not_sampled,
                (false, true) => &self.local_parent_sampled,
                (false, false) => &self.local_parent_not_sampled,
            },
            _ => &self.root,
        };
        let mut result = delegate.should_sample(params);
        if result.decision == Decision::RecordAndSample {
            let ts = result.trace_state.as_ref().unwrap_or(params.parent_trace_state());
            if let Some(erased) = consistent::erase_inconsistent_threshold(ts, params.trace_id) {
                result.trace_state = Some(erased);
            }
        }
        result
    }

    fn description(&self) -> String {
        format!(
            "ParentBased{{root:{},remoteParentSampled:{},remoteParentNotSampled:{},localParentSampled:{},localParentNotSampled:{}}}",
            self.root.description(),
            self.remote_parent_sampled.description(),
            self.remote_parent_not_sampled.description(),
            self.local_parent_sampled.description(),
            self.local_parent_not_sampled.description()
        )
    }
}

/// Builds the sampler named by `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` values
/// (spec/sampling.md#configuration-names). `service_name` is used by Jaeger remote sampling.
/// Unknown names and bad arguments fall back to the default (`parentbased_always_on`) or the
/// argument's default, with a warning.
pub fn from_config(name: Option<&str>, arg: Option<&str>, service_name: &str) -> Box<dyn Sampler> {
    let name = name
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "parentbased_always_on".into());
    let float_arg = |default: f64| -> f64 {
        match arg.map(str::trim).filter(|a| !a.is_empty()) {
            None => default,
            Some(a) => a.parse::<f64>().unwrap_or_else(|_| {
                crate::log::warn(format_args!("invalid OTEL_TRACES_SAMPLER_ARG {a:?}, using {default}"));
                default
            }),
        }
    };
    let jaeger = || {
        let mut cfg = JaegerRemoteConfig {
            service_name: service_name.to_owned(),
            ..Default::default()
        };
        if let Some(a) = arg {
            cfg.apply_arg(a);
        }
        JaegerRemoteSampler::start(cfg)
    };
    match name.as_str() {
        "always_on" => Box::new(AlwaysOn),
        "always_off" => Box::new(AlwaysOff),
        "traceidratio" => Box::new(TraceIdRatioSampler::new(float_arg(1.0))),
        "parentbased_always_off" => Box::new(ParentBased::new(AlwaysOff)),
        "parentbased_traceidratio" => Box::new(ParentBased::new(TraceIdRatioSampler::new(float_arg(1.0)))),
        "consistent_probability" => Box::new(ConsistentProbabilitySampler::new(float_arg(1.0))),
        "parentbased_consistent_probability" => {
            Box::new(ParentBased::new(ConsistentProbabilitySampler::new(float_arg(1.0))))
        }
        "rate_limiting" => Box::new(RateLimitingSampler::new(float_arg(100.0))),
        "parentbased_rate_limiting" => Box::new(ParentBased::new(RateLimitingSampler::new(float_arg(100.0)))),
        "jaeger_remote" => Box::new(jaeger()),
        "parentbased_jaeger_remote" => Box::new(ParentBased::new(jaeger())),
        "parentbased_always_on" => Box::new(ParentBased::new(AlwaysOn)),
        other => {
            crate::log::warn(format_args!(
                "unknown OTEL_TRACES_SAMPLER {other:?}, using parentbased_always_on"
            ));
            Box::new(ParentBased::new(AlwaysOn))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::SpanId;

    #[test]
    fn parent_based_slots() {
        let s = ParentBased::new(AlwaysOff);
        let ts = TraceState::EMPTY;
        let mut p = SamplingParams::root(TraceId::from(5u128), "x");
        assert_eq!(s.should_sample(&p).decision, Decision::Drop);
        p.parent = Some(ParentRef {
            context: SpanContext::new(TraceId::from(5u128), SpanId::from(1), 1, true),
            trace_state: &ts,
        });
        assert_eq!(s.should_sample(&p).decision, Decision::RecordAndSample);
        assert!(s.description().starts_with("ParentBased{root:AlwaysOffSampler"));
    }

    #[test]
    fn config_names() {
        assert_eq!(
            from_config(Some("traceidratio"), Some("0.25"), "svc").description(),
            "TraceIdRatioBased{0.25}"
        );
        assert_eq!(
            from_config(Some("always_off"), None, "svc").description(),
            "AlwaysOffSampler"
        );
        assert!(
            from_config(None, None, "svc")
                .description()
                .starts_with("ParentBased{root:AlwaysOnSampler")
        );
    }
}
