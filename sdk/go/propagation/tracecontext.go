package propagation

import (
	"context"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/id"
)

// TraceparentLen is the length of a version-00 traceparent.
const TraceparentLen = 55

// ParseTraceparent parses one trimmed traceparent value (spec/propagation.md "traceparent
// extract"). It allocates nothing.
func ParseTraceparent(v string) (trace.SpanContext, bool) {
	if len(v) < TraceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	if !id.ParseHex(ver[:], v[:2]) || ver[0] == 0xff {
		return trace.SpanContext{}, false
	}
	if ver[0] == 0 && len(v) != TraceparentLen || ver[0] != 0 && len(v) > TraceparentLen && v[55] != '-' {
		return trace.SpanContext{}, false
	}
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !id.ParseHex(cfg.TraceID[:], v[3:35]) || !id.ParseHex(cfg.SpanID[:], v[36:52]) ||
		!id.ParseHex(flags[:], v[53:55]) || !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		return trace.SpanContext{}, false
	}
	if ver[0] == 0 {
		cfg.TraceFlags = trace.TraceFlags(flags[0] & 0x03)
	} else {
		cfg.TraceFlags = trace.TraceFlags(flags[0] & 0x01)
	}
	cfg.Remote = true
	return trace.NewSpanContext(cfg), true
}

// AppendTraceparent appends the version-00 traceparent of sc to dst.
func AppendTraceparent(dst []byte, sc trace.SpanContext) []byte {
	t, s := sc.TraceID(), sc.SpanID()
	dst = append(dst, '0', '0', '-')
	dst = id.AppendHex(dst, t[:])
	dst = append(dst, '-')
	dst = id.AppendHex(dst, s[:])
	dst = append(dst, '-')
	return id.AppendHex(dst, []byte{byte(sc.TraceFlags() & 0x03)})
}

// TraceparentHolder is implemented by spans that cache their traceparent string, so that
// inject allocates it at most once per span.
type TraceparentHolder interface {
	Traceparent() string
}

// TraceContext is the W3C traceparent/tracestate propagator.
type TraceContext struct{}

var _ otelprop.TextMapPropagator = TraceContext{}

// Extract reads traceparent and tracestate. Invalid input leaves ctx unchanged.
func (TraceContext) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	sc, ok := ExtractTraceparent(c)
	if !ok {
		return ctx
	}
	ts, ok := ParseTracestate(values(c, "tracestate"))
	if !ok {
		ts = ""
	}
	return ContextWithRemote(ctx, sc, Extras{Tracestate: ts})
}

// ExtractTraceparent reads the traceparent header alone; it allocates nothing with a carrier
// whose Get allocates nothing.
func ExtractTraceparent(c otelprop.TextMapCarrier) (trace.SpanContext, bool) {
	var v string
	if vg, ok := c.(otelprop.ValuesGetter); ok {
		vs := vg.Values("traceparent")
		if len(vs) != 1 {
			return trace.SpanContext{}, false
		}
		v = vs[0]
	} else {
		v = c.Get("traceparent")
	}
	return ParseTraceparent(trimOWS(v))
}

// Inject writes traceparent, and tracestate when not empty.
func (TraceContext) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	s := trace.SpanFromContext(ctx)
	sc := s.SpanContext()
	if !sc.IsValid() {
		return
	}
	if h, ok := s.(TraceparentHolder); ok {
		c.Set("traceparent", h.Traceparent())
	} else {
		var buf [TraceparentLen]byte
		c.Set("traceparent", string(AppendTraceparent(buf[:0], sc)))
	}
	var ts string
	if h, ok := s.(ExtrasHolder); ok {
		ts = h.WeftExtras().Tracestate
	} else if sc.TraceState().Len() > 0 {
		ts = sc.TraceState().String()
	}
	if ts != "" {
		c.Set("tracestate", TruncateTracestate(ts))
	}
}

// Fields returns the headers the propagator sets.
func (TraceContext) Fields() []string { return []string{"traceparent", "tracestate"} }
