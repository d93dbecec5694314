package weft

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/propagation"
	"weft.dev/sdk/go/sampling"
)

// slabSpans is how many span handles are allocated together. Handles are never reused (see
// Span); allocating them in slabs makes one heap allocation per slabSpans spans instead of one
// per span (BenchmarkSpanStartEnd reports the 1/42 as 0 allocs/op; B/op still counts the
// 96 bytes of each handle). 42 × 96 = 4,032 bytes fills the 4 KiB size class. A slab stays
// in memory while any of its spans is referenced, so a span the application keeps for long
// keeps 4 KiB alive, and, because a span holds its parent context (it is a context and answers
// Value/Deadline/Done through it, after End too), its ancestors' slabs as well (README, slab
// retention).
const slabSpans = 42

// perP is what a goroutine takes from perPCache for one Start: a wyrand state (seeded from
// crypto/rand when the cache creates it) and the current slab of span handles.
type perP struct {
	rng  *id.Wyrand
	slab *[slabSpans]Span
	next int
}

var perPCache = sync.Pool{New: func() any { return &perP{rng: id.NewSeededWyrand()} }}

// newSpan returns a zeroed span handle that nothing else has ever used.
func (pc *perP) newSpan() *Span {
	if pc.slab == nil || pc.next == slabSpans {
		pc.slab, pc.next = new([slabSpans]Span), 0
	}
	s := &pc.slab[pc.next]
	pc.next++
	return s
}

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
	// One visit to the per-P cache gives the IDs (default generator) and the span's memory.
	// The IDs are drawn before ShouldSample: the sampler does not use the PRNG, so this gives
	// the same IDs as the trace ID, ShouldSample, span ID order.
	pc := perPCache.Get().(*perP)
	_, def := p.ids.(id.Random)
	var tid trace.TraceID
	var sid trace.SpanID
	switch {
	case hasParent && def:
		tid, sid = psc.TraceID(), id.SpanIDFrom(pc.rng)
	case hasParent:
		tid, sid = psc.TraceID(), p.ids.NewSpanID()
	case def:
		tid, sid = id.TraceIDFrom(pc.rng), id.SpanIDFrom(pc.rng)
	default:
		tid, sid = p.ids.NewTraceID(), p.ids.NewSpanID()
	}
	s := pc.newSpan()
	perPCache.Put(pc)
	if !hasParent {
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
	// RecordOnly: the span records (IsRecording, a record) but is not sampled (flag unset) and
	// End does not export it.
	recording := sampled || res.Decision == sampling.RecordOnly
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
	s.parent, s.spanBase, s.tid, s.sid, s.flags, s.recording, s.ext = ctx, p.base, tid, sid, flags, recording, ext
	if !recording {
		return s
	}
	var start int64
	if ts := cfg.Timestamp(); !ts.IsZero() {
		start, s.startMono = ts.UnixNano(), explicitStart
	} else {
		s.startMono = monoNow()
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
	if r.Kind < trace.SpanKindInternal || r.Kind > trace.SpanKindConsumer {
		r.Kind = trace.SpanKindInternal // unspecified or not a kind (as the OTel API's ValidateSpanKind)
	}
	r.StartUnixNano = uint64(start)
	if attrs := cfg.Attributes(); len(attrs) > 0 {
		r.Attributes, r.DroppedAttributes = setAttrs(r.Attributes, 0, attrs, p.limits.AttributeCount, p.limits.AttributeValueLength)
	}
	for _, l := range cfg.Links() {
		if keepLink(l) {
			addLink(r, l, &p.limits)
		}
	}
	s.rec = r
	return s
}
