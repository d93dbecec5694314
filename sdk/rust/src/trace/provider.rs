//! The tracer provider: sampler, ID generation, limits and the export pipeline.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::InstrumentationScope;

use super::{SpanLimits, Tracer};
use crate::export::{BatchConfig, OtlpConfig, OtlpExporter, Pipeline, PipelineError, PipelineStats, SpanExporter};
use crate::id::{IdGenerator, SpanId, TraceId, next_u64, span_id_from_draws, trace_id_from_draws};
use crate::resource::Resource;
use crate::sampling::{AlwaysOn, ParentBased, Sampler};

/// How IDs are generated.
#[derive(Debug)]
pub enum IdGeneration {
    /// The thread-local PRNG (the default). Sets the W3C random flag on new traces.
    Random,
    /// X-Ray compatible trace IDs (epoch seconds first). Sets the random flag.
    Xray,
    /// A custom generator. The random flag is not set on new traces, since weft cannot vouch
    /// for the generator's randomness.
    Custom(Box<dyn IdGenerator>),
}

impl IdGeneration {
    #[inline]
    pub(crate) fn trace_id(&self) -> TraceId {
        match self {
            IdGeneration::Random => trace_id_from_draws(next_u64),
            IdGeneration::Xray => crate::id::XrayIdGenerator.new_trace_id(),
            IdGeneration::Custom(g) => g.new_trace_id(),
        }
    }
    #[inline]
    pub(crate) fn span_id(&self) -> SpanId {
        match self {
            IdGeneration::Custom(g) => g.new_span_id(),
            _ => span_id_from_draws(next_u64),
        }
    }
    #[inline]
    pub(crate) fn sets_random_flag(&self) -> bool {
        !matches!(self, IdGeneration::Custom(_))
    }
}

pub(crate) struct ProviderInner {
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) sampler: Box<dyn Sampler>,
    pub(crate) ids: IdGeneration,
    pub(crate) limits: SpanLimits,
}

impl Drop for ProviderInner {
    fn drop(&mut self) {
        let _ = self.pipeline.shutdown(Duration::from_secs(5));
    }
}

/// The weft tracer provider. Cheap to clone; the pipeline shuts down (exporting what is
/// queued, for up to 5 s) when the last clone and the last tracer are dropped, or on
/// [`TracerProvider::shutdown`].
#[derive(Clone)]
pub struct TracerProvider {
    pub(crate) inner: Arc<ProviderInner>,
}

impl fmt::Debug for TracerProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TracerProvider")
            .field("sampler", &self.inner.sampler.description())
            .field("pipeline", &self.inner.pipeline)
            .finish()
    }
}

impl Default for TracerProvider {
    /// A provider with the default sampler and no exporter.
    fn default() -> Self {
        TracerProvider::builder().build()
    }
}

impl TracerProvider {
    /// Returns a builder.
    pub fn builder() -> TracerProviderBuilder {
        TracerProviderBuilder::default()
    }

    /// Exports every span queued now; waits at most `timeout`.
    pub fn force_flush(&self, timeout: Duration) -> Result<(), PipelineError> {
        self.inner.pipeline.force_flush(timeout)
    }

    /// Stops accepting spans, exports what is queued (within `timeout`) and stops the export
    /// thread. Spans ended afterwards are dropped and counted. A second call returns
    /// `AlreadyShutdown`.
    pub fn shutdown(&self, timeout: Duration) -> Result<(), PipelineError> {
        self.inner.pipeline.shutdown(timeout)
    }

    /// Returns the pipeline's counters.
    pub fn stats(&self) -> PipelineStats {
        self.inner.pipeline.stats()
    }

    /// Returns the resource.
    pub fn resource(&self) -> &Resource {
        self.inner.pipeline.resource()
    }

    /// Returns a tracer for an instrumentation scope given by name only.
    pub fn weft_tracer(&self, name: impl Into<Cow<'static, str>>) -> Tracer {
        opentelemetry::trace::TracerProvider::tracer_with_scope(self, InstrumentationScope::builder(name).build())
    }
}

impl opentelemetry::trace::TracerProvider for TracerProvider {
    type Tracer = Tracer;

    fn tracer_with_scope(&self, scope: InstrumentationScope) -> Tracer {
        let index = self.inner.pipeline.scope_index(&scope);
        Tracer::new(self.inner.clone(), index)
    }
}

/// Builds a [`TracerProvider`].
pub struct TracerProviderBuilder {
    resource: Option<Resource>,
    sampler: Box<dyn Sampler>,
    ids: IdGeneration,
    limits: SpanLimits,
    batch: BatchConfig,
    exporter: Option<Box<dyn SpanExporter>>,
}

impl Default for TracerProviderBuilder {
    fn default() -> Self {
        TracerProviderBuilder {
            resource: None,
            sampler: Box::new(ParentBased::new(AlwaysOn)),
            ids: IdGeneration::Random,
            limits: SpanLimits::default(),
            batch: BatchConfig::default(),
            exporter: None,
        }
    }
}

impl TracerProviderBuilder {
    /// Configures everything from the standard `OTEL_*` environment variables: resource,
    /// sampler, span limits, batch settings and an OTLP exporter.
    pub fn from_env() -> Result<Self, String> {
        let resource = Resource::from_env();
        let service = resource.service_name().unwrap_or_default();
        let sampler = crate::sampling::from_config(
            std::env::var("OTEL_TRACES_SAMPLER").ok().as_deref(),
            std::env::var("OTEL_TRACES_SAMPLER_ARG").ok().as_deref(),
            &service,
        );
        let exporter = OtlpExporter::new(OtlpConfig::from_env())?;
        Ok(TracerProviderBuilder {
            resource: Some(resource),
            sampler,
            ids: IdGeneration::Random,
            limits: SpanLimits::from_env(),
            batch: BatchConfig::from_env(),
            exporter: Some(Box::new(exporter)),
        })
    }

    /// Sets the resource (default: [`Resource::from_env`]).
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.resource = Some(resource);
        self
    }
    /// Sets the sampler (default: `ParentBased(AlwaysOn)`).
    pub fn with_sampler(mut self, sampler: impl Sampler + 'static) -> Self {
        self.sampler = Box::new(sampler);
        self
    }
    /// Sets a boxed sampler.
    pub fn with_boxed_sampler(mut self, sampler: Box<dyn Sampler>) -> Self {
        self.sampler = sampler;
        self
    }
    /// Sets ID generation (default: [`IdGeneration::Random`]).
    pub fn with_id_generation(mut self, ids: IdGeneration) -> Self {
        self.ids = ids;
        self
    }
    /// Sets span limits.
    pub fn with_span_limits(mut self, limits: SpanLimits) -> Self {
        self.limits = limits;
        self
    }
    /// Sets the queue and batch settings.
    pub fn with_batch_config(mut self, batch: BatchConfig) -> Self {
        self.batch = batch;
        self
    }
    /// Sets the exporter. Without one, sampled spans are recorded and then discarded.
    pub fn with_exporter(mut self, exporter: impl SpanExporter) -> Self {
        self.exporter = Some(Box::new(exporter));
        self
    }
    /// Exports with OTLP using `config`.
    pub fn with_otlp(self, config: OtlpConfig) -> Result<Self, String> {
        Ok(self.with_exporter(OtlpExporter::new(config)?))
    }

    /// Builds the provider and starts its export thread (if there is an exporter).
    pub fn build(self) -> TracerProvider {
        crate::time::init();
        let resource = self.resource.unwrap_or_else(Resource::from_env);
        let pipeline = Pipeline::start(resource, self.batch, self.exporter);
        TracerProvider {
            inner: Arc::new(ProviderInner {
                pipeline,
                sampler: self.sampler,
                ids: self.ids,
                limits: self.limits,
            }),
        }
    }
}
