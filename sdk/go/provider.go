package weft

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/exporters/otlp"
	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/sampling"
)

// Limits bound what one span records. As in the OpenTelemetry Go SDK's SpanLimits (with
// WithRawSpanLimits): a negative limit means unlimited and 0 means none is kept (0 attributes,
// events or links), so a hand-built Limits{} records nothing: start from DefaultLimits and
// change the fields you need.
type Limits struct {
	AttributeCount, AttributeValueLength int
	EventCount, LinkCount                int
	EventAttributeCount                  int
	LinkAttributeCount                   int
}

// DefaultLimits are the OpenTelemetry defaults.
func DefaultLimits() Limits {
	return Limits{AttributeCount: 128, AttributeValueLength: -1, EventCount: 128, LinkCount: 128,
		EventAttributeCount: 128, LinkAttributeCount: 128}
}

// TracerProvider is weft's trace.TracerProvider.
type TracerProvider struct {
	embedded.TracerProvider

	sampler  sampling.Sampler
	ids      id.Generator
	limits   Limits
	resource *export.Resource
	pipe     *pipeline
	closers  []func(context.Context) error

	mu      sync.Mutex
	tracers map[string]*tracer
	byName  sync.Map // name -> *tracer, for Tracer(name) without options

	// base is what every span of this provider embeds (see spanBase).
	base *spanBase
}

var _ trace.TracerProvider = (*TracerProvider)(nil)

type options struct {
	sampler       sampling.Sampler
	ids           id.Generator
	limits        Limits
	resource      []attribute.KeyValue
	serviceName   string
	exporter      export.Exporter
	otlp          *otlp.Config
	queueSize     int
	batchSize     int
	scheduleDelay time.Duration
	exportTimeout time.Duration
	env           bool
	envErr        error
	closers       []func(context.Context) error // run by Shutdown (the Jaeger remote sampler's polling)
	lazy          []*lazySampler                // samplers to build once the service name is known
}

// Option configures a TracerProvider.
type Option func(*options)

// WithSampler sets the sampler (default ParentBased(AlwaysOn)).
func WithSampler(s sampling.Sampler) Option {
	return func(o *options) { o.sampler, o.lazy = s, nil }
}

// WithIDGenerator sets the ID generator (default id.Random; id.Xray for AWS X-Ray).
func WithIDGenerator(g id.Generator) Option { return func(o *options) { o.ids = g } }

// WithLimits sets the span limits, used as they are (see Limits: build them from DefaultLimits).
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithServiceName sets the service.name resource attribute.
func WithServiceName(name string) Option { return func(o *options) { o.serviceName = name } }

// WithResourceAttributes adds resource attributes.
func WithResourceAttributes(kv ...attribute.KeyValue) Option {
	return func(o *options) { o.resource = append(o.resource, kv...) }
}

// WithExporter sets the exporter (replacing any OTLP configuration).
func WithExporter(e export.Exporter) Option { return func(o *options) { o.exporter, o.otlp = e, nil } }

// WithOTLP exports over OTLP with cfg.
func WithOTLP(cfg otlp.Config) Option { return func(o *options) { o.otlp, o.exporter = &cfg, nil } }

// WithBatching sets the queue capacity, the batch size, the schedule delay and the export
// timeout (zero values keep the defaults 2048, 512, 5 s, 30 s).
func WithBatching(queueSize, batchSize int, delay, timeout time.Duration) Option {
	return func(o *options) {
		if queueSize > 0 {
			o.queueSize = queueSize
		}
		if batchSize > 0 {
			o.batchSize = batchSize
		}
		if delay > 0 {
			o.scheduleDelay = delay
		}
		if timeout > 0 {
			o.exportTimeout = timeout
		}
	}
}

// WithEnv reads the standard OTEL_* variables (see env.go); options after it override them.
func WithEnv() Option { return func(o *options) { o.env = true; applyEnv(o) } }

// NewTracerProvider builds a provider. Without WithExporter, WithOTLP or WithEnv, spans are
// recorded and dropped (no exporter).
func NewTracerProvider(opts ...Option) (*TracerProvider, error) {
	o := &options{limits: DefaultLimits(), queueSize: 2048, batchSize: 512,
		scheduleDelay: 5 * time.Second, exportTimeout: 30 * time.Second}
	for _, opt := range opts {
		opt(o)
	}
	if o.envErr != nil {
		return nil, o.envErr
	}
	if o.sampler == nil {
		o.sampler = sampling.ParentBased(sampling.AlwaysOn(), sampling.ParentBasedConfig{})
	}
	if o.ids == nil {
		o.ids = id.Random{}
	}
	if o.batchSize > o.queueSize {
		// As the OpenTelemetry Go SDK does: the default batch size, or the queue size if smaller.
		o.batchSize = min(512, o.queueSize)
	}
	exp := o.exporter
	if exp == nil && o.otlp != nil {
		e, err := otlp.New(*o.otlp)
		if err != nil {
			return nil, err
		}
		exp = e
	}
	res := &export.Resource{}
	name := o.serviceName
	for _, kv := range o.resource {
		if kv.Key == "service.name" && name == "" {
			name = kv.Value.AsString()
		}
	}
	if name == "" {
		name = "unknown_service:go"
	}
	for _, l := range o.lazy {
		var closer func(context.Context) error
		l.s, closer = l.start(name)
		o.closers = append(o.closers, closer)
	}
	res.Attributes = append(res.Attributes, attribute.String("service.name", name))
	for _, kv := range o.resource {
		if kv.Key != "service.name" {
			res.Attributes = append(res.Attributes, kv)
		}
	}
	res.Attributes = append(res.Attributes,
		attribute.String("telemetry.sdk.name", "weft"),
		attribute.String("telemetry.sdk.language", "go"),
		attribute.String("telemetry.sdk.version", otlp.Version))
	tp := &TracerProvider{sampler: o.sampler, ids: o.ids, limits: o.limits, resource: res,
		tracers: map[string]*tracer{}, closers: o.closers}
	tp.pipe = newPipeline(exp, res, o)
	tp.base = &spanBase{provider: tp}
	return tp, nil
}

// Tracer returns the tracer of an instrumentation scope; equal scopes share one tracer.
func (tp *TracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if len(opts) == 0 {
		// Instrumentation often asks for its tracer on every request: no allocation then.
		if t, ok := tp.byName.Load(name); ok {
			return t.(*tracer)
		}
		t := tp.tracer(name, nil)
		tp.byName.Store(name, t)
		return t
	}
	return tp.tracer(name, opts)
}

func (tp *TracerProvider) tracer(name string, opts []trace.TracerOption) *tracer {
	cfg := trace.NewTracerConfig(opts...)
	attrs := cfg.InstrumentationAttributes()
	key := name + "\x00" + cfg.InstrumentationVersion() + "\x00" + cfg.SchemaURL() + "\x00" + attrs.Encoded(attribute.DefaultEncoder())
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if t, ok := tp.tracers[key]; ok {
		return t
	}
	t := &tracer{provider: tp, scope: &export.Scope{Name: name, Version: cfg.InstrumentationVersion(),
		SchemaURL: cfg.SchemaURL(), Attributes: attrs.ToSlice()}}
	tp.tracers[key] = t
	return t
}

// ForceFlush exports every span ended before the call, or returns ctx's error.
func (tp *TracerProvider) ForceFlush(ctx context.Context) error { return tp.pipe.flush(ctx) }

// Shutdown exports what is queued and stops the exporter. If ctx ends first, the batch in
// flight is dropped and ctx's error returned. Spans ended after Shutdown are dropped (and
// counted). Only the first call shuts down; concurrent and later calls wait for it and return
// its result.
func (tp *TracerProvider) Shutdown(ctx context.Context) error {
	err := tp.pipe.shutdown(ctx)
	tp.mu.Lock()
	closers := tp.closers
	tp.closers = nil
	tp.mu.Unlock()
	for _, c := range closers {
		if cerr := c(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

// Stats counts spans through the pipeline.
type Stats struct {
	// Queued spans were accepted by the export queue.
	Queued int64
	// Dropped spans did not fit in the queue.
	Dropped int64
	// Failed spans were in batches the exporter reported as failed.
	Failed int64
}

// Stats returns the pipeline's counters.
func (tp *TracerProvider) Stats() Stats {
	return Stats{Queued: tp.pipe.queued.Load(), Dropped: tp.pipe.dropped.Load(), Failed: tp.pipe.failed.Load()}
}

// String describes the provider.
func (tp *TracerProvider) String() string {
	return fmt.Sprintf("weft.TracerProvider{sampler: %s, resource: %s}", tp.sampler.Description(), strings.TrimSpace(fmt.Sprint(tp.resource.Attributes)))
}
