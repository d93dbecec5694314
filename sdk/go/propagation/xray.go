package propagation

import (
	"context"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/id"
)

// Xray is the AWS X-Ray propagator (X-Amzn-Trace-Id).
type Xray struct{}

var _ otelprop.TextMapPropagator = Xray{}

// Extract reads X-Amzn-Trace-Id.
func (Xray) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	v, ok := first(c, "x-amzn-trace-id")
	if !ok {
		return ctx
	}
	if sc, e, ok := ParseXray(v); ok {
		return ContextWithRemote(ctx, sc, e)
	}
	return ctx
}

// ParseXray parses an X-Amzn-Trace-Id value.
func ParseXray(v string) (trace.SpanContext, Extras, bool) {
	var root, parent, sampled, lineage string
	var hasRoot, hasParent, hasSampled, hasLineage bool
	for _, part := range strings.Split(v, ";") {
		part = trimOWS(part)
		if part == "" {
			continue
		}
		eq := strings.IndexByte(part, '=')
		if eq < 0 {
			return trace.SpanContext{}, Extras{}, false
		}
		k, val := trimOWS(part[:eq]), trimOWS(part[eq+1:])
		switch k {
		case "Root":
			root, hasRoot = val, true
		case "Parent":
			parent, hasParent = val, true
		case "Sampled":
			sampled, hasSampled = val, true
		case "Lineage":
			lineage, hasLineage = val, true
		}
	}
	if !hasRoot || !hasParent {
		return trace.SpanContext{}, Extras{}, false
	}
	var cfg trace.SpanContextConfig
	f := strings.Split(root, "-")
	if len(f) != 3 || f[0] != "1" || len(f[1]) < 1 || len(f[1]) > 8 || len(f[2]) != 24 {
		return trace.SpanContext{}, Extras{}, false
	}
	if !id.ParseHex(cfg.TraceID[:], strings.Repeat("0", 8-len(f[1]))+f[1]+f[2]) ||
		!id.ParseHex(cfg.SpanID[:], parent) || !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		return trace.SpanContext{}, Extras{}, false
	}
	if hasSampled {
		switch sampled {
		case "1":
			cfg.TraceFlags = trace.FlagsSampled
		case "0", "?":
		default:
			return trace.SpanContext{}, Extras{}, false
		}
	}
	cfg.Remote = true
	var e Extras
	if hasLineage {
		e.XrayLineage = lineage
	}
	return trace.NewSpanContext(cfg), e, true
}

// Inject writes X-Amzn-Trace-Id.
func (Xray) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	sc, e := FromContext(ctx)
	if !sc.IsValid() {
		return
	}
	th, sh := hexIDs(ctx, sc)
	b := make([]byte, 0, 96)
	b = append(b, "Root=1-"...)
	b = append(b, th[:8]...)
	b = append(b, '-')
	b = append(b, th[8:]...)
	b = append(b, ";Parent="...)
	b = append(b, sh...)
	if sc.IsSampled() {
		b = append(b, ";Sampled=1"...)
	} else {
		b = append(b, ";Sampled=0"...)
	}
	if e.XrayLineage != "" {
		b = append(b, ";Lineage="...)
		b = append(b, e.XrayLineage...)
	}
	c.Set("x-amzn-trace-id", string(b))
}

// Fields returns the headers the propagator sets.
func (Xray) Fields() []string { return []string{"x-amzn-trace-id"} }
