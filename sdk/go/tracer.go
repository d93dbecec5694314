package weft

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/propagation"
	"weft.dev/sdk/go/sampling"
)

type tracer struct {
	embedded.Tracer
	provider *TracerProvider
	scope    *export.Scope
}

var _ trace.Tracer = (*tracer)(nil)

// Start starts a span. The returned context is the span itself (see Span).
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	s := t.start(ctx, name, opts)
	return s, s
}

func (t *tracer) start(ctx context.Context, name string, opts []trace.SpanStartOption) *Span {
	p := t.provider
	cfg := trace.NewSpanStartConfig(opts...)

	var psc trace.SpanContext
	var pext *spanExtras
	if !cfg.NewRoot() {
		ps := trace.SpanFromContext(ctx)
		psc = ps.SpanContext()
		switch h := ps.(type) {
		case *Span:
			pext = h.ext
		case propagation.ExtrasHolder:
			if e := h.WeftExtras(); e != (propagation.Extras{}) {
				pext = &spanExtras{Extras: e, ts: psc.TraceState()}
			}
		default:
			if psc.TraceState().Len() > 0 {
				pext = &spanExtras{Extras: propagation.Extras{Tracestate: psc.TraceState().String()}, ts: psc.TraceState()}
			}
		}
	}
	hasParent := psc.IsValid()
	var tid trace.TraceID
	var sid trace.SpanID
	if hasParent {
		tid = psc.TraceID()
		sid = p.ids.NewSpanID()
	} else {
		// Both IDs in one draw from the generator: the sampler does not use the PRNG, so
		// drawing the span ID before ShouldSample gives the same IDs as after it.
		if g, ok := p.ids.(interface {
			NewIDs() (trace.TraceID, trace.SpanID)
		}); ok {
			tid, sid = g.NewIDs()
		} else {
			tid, sid = p.ids.NewTraceID(), p.ids.NewSpanID()
		}
		pext = nil
	}
	var parentTS string
	if pext != nil {
		parentTS = pext.Tracestate
	}
	res := p.sampler.ShouldSample(sampling.Params{
		Parent: psc, ParentTracestate: parentTS, TraceID: tid, Name: name,
		Kind: cfg.SpanKind(), Attributes: cfg.Attributes(), Links: cfg.Links(),
	})
	sampled := res.Decision == sampling.RecordAndSample
	flags := id.NewTraceFlags(psc.TraceFlags(), hasParent, sampled)
	ext := pext
	if res.Tracestate != parentTS {
		// The sampler changed the tracestate (e.g. the consistent-probability th).
		e := &spanExtras{Extras: propagation.Extras{Tracestate: res.Tracestate}}
		if pext != nil {
			e.B3Debug, e.JaegerDebug, e.XrayLineage = pext.B3Debug, pext.JaegerDebug, pext.XrayLineage
		}
		if res.Tracestate != "" {
			if ts, err := trace.ParseTraceState(res.Tracestate); err == nil {
				e.ts = ts
			}
		}
		ext = e
	}
	s := &Span{parent: ctx, tracer: t, tid: tid, sid: sid, flags: flags, sampled: sampled, ext: ext}
	if !sampled {
		return s
	}
	var start int64
	s.startMono = monoNow()
	if ts := cfg.Timestamp(); !ts.IsZero() {
		start = ts.UnixNano()
	} else {
		start = wallAt(s.startMono)
	}
	r := p.pipe.getRecord()
	r.Scope = t.scope
	r.TraceID, r.SpanID, r.TraceFlags = tid, sid, flags
	if hasParent {
		r.ParentSpanID, r.ParentIsRemote = psc.SpanID(), psc.IsRemote()
	}
	r.Tracestate = res.Tracestate
	r.Name = name
	r.Kind = cfg.SpanKind()
	if r.Kind == trace.SpanKindUnspecified {
		r.Kind = trace.SpanKindInternal
	}
	r.StartUnixNano = uint64(start)
	if attrs := cfg.Attributes(); len(attrs) > 0 {
		r.Attributes, r.DroppedAttributes = setAttrs(r.Attributes, 0, attrs, p.limits.AttributeCount, p.limits.AttributeValueLength)
	}
	for _, l := range cfg.Links() {
		if l.SpanContext.IsValid() {
			addLink(r, l, &p.limits)
		}
	}
	s.rec = r
	return s
}
