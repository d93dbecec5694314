//! Samplers, configured from Python by spec tuples (`weft_sdk.sampling` builds them) and run in
//! Rust on every span start.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use weft_sdk::id::{SpanId, TraceId};
use weft_sdk::sampling::{
    AlwaysOff, AlwaysOn, ConsistentProbabilitySampler, Decision, JaegerRemoteConfig, JaegerRemoteSampler, ParentBased,
    ParentRef, RateLimitingSampler, Sampler as WeftSampler, SamplingParams, TraceIdRatioSampler,
};
use weft_sdk::{SpanContext, TraceState};

/// A sampler configuration, kept so that a forked child can build its own (the Jaeger remote
/// sampler polls from a thread, which the child does not inherit).
#[derive(Clone, Debug)]
pub(crate) enum SamplerSpec {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    Consistent(f64),
    RateLimiting(f64),
    ParentBased {
        root: Box<SamplerSpec>,
        slots: [Option<Box<SamplerSpec>>; 4],
    },
    JaegerRemote {
        endpoint: String,
        polling_interval_ms: u64,
        initial: Box<SamplerSpec>,
        service: String,
    },
    /// `OTEL_TRACES_SAMPLER` / `_ARG` values, as `sdk/rust` reads them.
    Env {
        name: Option<String>,
        arg: Option<String>,
        service: String,
    },
}

fn bad(spec: &Bound<'_, PyAny>, why: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("invalid sampler spec {spec}: {why}"))
}

impl SamplerSpec {
    pub(crate) fn from_py(spec: &Bound<'_, PyAny>) -> PyResult<Self> {
        let t = spec
            .downcast::<PyTuple>()
            .map_err(|_| bad(spec, "use a weft_sdk.sampling sampler"))?;
        if t.is_empty() {
            return Err(bad(spec, "empty"));
        }
        let tag: String = t.get_item(0)?.extract()?;
        let f = |i: usize| -> PyResult<f64> { t.get_item(i)?.extract::<f64>() };
        Ok(match tag.as_str() {
            "always_on" => SamplerSpec::AlwaysOn,
            "always_off" => SamplerSpec::AlwaysOff,
            "trace_id_ratio" => SamplerSpec::Ratio(f(1)?),
            "consistent_probability" => SamplerSpec::Consistent(f(1)?),
            "rate_limiting" => SamplerSpec::RateLimiting(f(1)?),
            "parent_based" => {
                let mut slots: [Option<Box<SamplerSpec>>; 4] = Default::default();
                for (i, slot) in slots.iter_mut().enumerate() {
                    let v = t.get_item(2 + i)?;
                    if !v.is_none() {
                        *slot = Some(Box::new(SamplerSpec::from_py(&v)?));
                    }
                }
                SamplerSpec::ParentBased {
                    root: Box::new(SamplerSpec::from_py(&t.get_item(1)?)?),
                    slots,
                }
            }
            "jaeger_remote" => SamplerSpec::JaegerRemote {
                endpoint: t.get_item(1)?.extract()?,
                polling_interval_ms: t.get_item(2)?.extract()?,
                initial: Box::new(SamplerSpec::from_py(&t.get_item(3)?)?),
                service: t.get_item(4)?.extract()?,
            },
            "env" => SamplerSpec::Env {
                name: t.get_item(1)?.extract()?,
                arg: t.get_item(2)?.extract()?,
                service: t.get_item(3)?.extract()?,
            },
            _ => return Err(bad(spec, "unknown sampler")),
        })
    }

    pub(crate) fn build(&self) -> Box<dyn WeftSampler> {
        match self {
            SamplerSpec::AlwaysOn => Box::new(AlwaysOn),
            SamplerSpec::AlwaysOff => Box::new(AlwaysOff),
            SamplerSpec::Ratio(r) => Box::new(TraceIdRatioSampler::new(*r)),
            SamplerSpec::Consistent(p) => Box::new(ConsistentProbabilitySampler::new(*p)),
            SamplerSpec::RateLimiting(r) => Box::new(RateLimitingSampler::new(*r)),
            SamplerSpec::ParentBased { root, slots } => {
                let mut p = ParentBased::new(root.build());
                if let Some(s) = &slots[0] {
                    p = p.with_remote_parent_sampled(s.build());
                }
                if let Some(s) = &slots[1] {
                    p = p.with_remote_parent_not_sampled(s.build());
                }
                if let Some(s) = &slots[2] {
                    p = p.with_local_parent_sampled(s.build());
                }
                if let Some(s) = &slots[3] {
                    p = p.with_local_parent_not_sampled(s.build());
                }
                Box::new(p)
            }
            SamplerSpec::JaegerRemote {
                endpoint,
                polling_interval_ms,
                initial,
                service,
            } => Box::new(JaegerRemoteSampler::start(JaegerRemoteConfig {
                endpoint: endpoint.clone(),
                polling_interval: Duration::from_millis((*polling_interval_ms).max(1)),
                initial_sampler: initial.build(),
                service_name: service.clone(),
                ..Default::default()
            })),
            SamplerSpec::Env { name, arg, service } => {
                weft_sdk::sampling::from_config(name.as_deref(), arg.as_deref(), service)
            }
        }
    }

    /// A description that does not start a Jaeger poller.
    pub(crate) fn build_description(&self) -> String {
        match self {
            SamplerSpec::JaegerRemote { endpoint, .. } => format!("JaegerRemoteSampler{{{endpoint}}}"),
            SamplerSpec::Env { name, arg, .. }
                if name
                    .as_deref()
                    .map(str::trim)
                    .is_some_and(|n| n.ends_with("jaeger_remote")) =>
            {
                format!("JaegerRemoteSampler{{{}}}", arg.as_deref().unwrap_or(""))
            }
            SamplerSpec::ParentBased { root, .. } if matches!(**root, SamplerSpec::JaegerRemote { .. }) => {
                format!("ParentBased{{root:{}}}", root.build_description())
            }
            other => other.build().description(),
        }
    }
}

/// A sampler on its own, for tests and the shared vectors: `should_sample` runs exactly the code
/// a provider runs on span start.
#[pyclass(module = "weft_sdk._native", name = "Sampler", frozen)]
pub struct Sampler {
    inner: Box<dyn WeftSampler>,
}

#[pymethods]
impl Sampler {
    #[new]
    fn new(spec: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Sampler {
            inner: SamplerSpec::from_py(spec)?.build(),
        })
    }

    /// Returns `(decision, tracestate)`: decision is `"DROP"`, `"RECORD_ONLY"` or
    /// `"RECORD_AND_SAMPLE"`; tracestate is the new span's. `parent` is
    /// `(trace_id, span_id, trace_flags, is_remote, tracestate)` or `None`.
    #[pyo3(signature = (trace_id, name, parent=None))]
    fn should_sample(
        &self,
        trace_id: u128,
        name: &str,
        parent: Option<(u128, u64, u8, bool, String)>,
    ) -> PyResult<(&'static str, String)> {
        let parent = match parent {
            Some((t, s, f, r, ts)) => Some((
                SpanContext::new(TraceId::from(t), SpanId::from(s), f, r),
                TraceState::parse_str(&ts).map_err(|e| {
                    pyo3::exceptions::PyValueError::new_err(format!("invalid tracestate {ts:?}: {e:?}"))
                })?,
            )),
            None => None,
        };
        let params = SamplingParams {
            parent: parent.as_ref().map(|(c, ts)| ParentRef {
                context: *c,
                trace_state: ts,
            }),
            ..SamplingParams::root(TraceId::from(trace_id), name)
        };
        let r = self.inner.should_sample(&params);
        let d = match r.decision {
            Decision::Drop => "DROP",
            Decision::RecordOnly => "RECORD_ONLY",
            Decision::RecordAndSample => "RECORD_AND_SAMPLE",
        };
        Ok((d, r.resolved_trace_state(&params).as_str().to_owned()))
    }

    /// The sampler's description, e.g. `TraceIdRatioBased{0.5}`.
    fn description(&self) -> String {
        self.inner.description()
    }
}
