// Package propagation implements the weft propagators (spec/propagation.md) as
// go.opentelemetry.io/otel/propagation TextMapPropagators: W3C trace context (Level 2) and
// baggage, B3 single and multi, AWS X-Ray, Jaeger, and a composite.
//
// Format-specific state that the OpenTelemetry span context cannot hold (a Level 2 tracestate
// the otel TraceState type rejects, B3 and Jaeger debug, the X-Ray lineage) travels in [Extras],
// carried by the span stored in the context. Baggage is weft's own ordered [Baggage].
package propagation

import (
	"context"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Extras is the state of a span context beyond what trace.SpanContext holds.
type Extras struct {
	// Tracestate is the W3C tracestate in canonical form ("" when empty).
	Tracestate  string
	B3Debug     bool
	JaegerDebug bool
	XrayLineage string
}

// ExtrasHolder is implemented by spans that carry Extras (weft spans and extracted remote
// contexts).
type ExtrasHolder interface {
	WeftExtras() Extras
}

// RemoteSpan is the non-recording span an extract puts into the context.
type RemoteSpan struct {
	trace.Span // a non-recording span with the same context; supplies the rest of the API
	sc         trace.SpanContext
	extras     Extras
}

// SpanContext returns the extracted span context.
func (r *RemoteSpan) SpanContext() trace.SpanContext { return r.sc }

// WeftExtras returns the format-specific state extracted with the span context.
func (r *RemoteSpan) WeftExtras() Extras { return r.extras }

// ContextWithRemote returns ctx holding a remote span context and its extras.
func ContextWithRemote(ctx context.Context, sc trace.SpanContext, e Extras) context.Context {
	if e.Tracestate != "" && sc.TraceState().Len() == 0 {
		// Keep the otel TraceState in step where its (Level 1) grammar allows it.
		if ts, err := trace.ParseTraceState(e.Tracestate); err == nil {
			sc = sc.WithTraceState(ts)
		}
	}
	base := trace.SpanFromContext(trace.ContextWithRemoteSpanContext(context.Background(), sc))
	return trace.ContextWithSpan(ctx, &RemoteSpan{Span: base, sc: sc, extras: e})
}

// FromContext returns the span context in ctx and its extras. For a span that does not hold
// extras, the tracestate comes from its otel TraceState.
func FromContext(ctx context.Context) (trace.SpanContext, Extras) {
	s := trace.SpanFromContext(ctx)
	sc := s.SpanContext()
	if h, ok := s.(ExtrasHolder); ok {
		return sc, h.WeftExtras()
	}
	var e Extras
	if sc.TraceState().Len() > 0 {
		e.Tracestate = sc.TraceState().String()
	}
	return sc, e
}

// values returns every value of header name in the carrier, in order.
func values(c otelprop.TextMapCarrier, name string) []string {
	if vg, ok := c.(otelprop.ValuesGetter); ok {
		return vg.Values(name)
	}
	if v := c.Get(name); v != "" {
		return []string{v}
	}
	return nil
}

// first returns the first value of a single-valued header, trimmed, and whether it is present
// (non-empty after trimming).
func first(c otelprop.TextMapCarrier, name string) (string, bool) {
	var v string
	if vg, ok := c.(otelprop.ValuesGetter); ok {
		vs := vg.Values(name)
		if len(vs) == 0 {
			return "", false
		}
		v = vs[0]
	} else {
		v = c.Get(name)
	}
	v = trimOWS(v)
	return v, v != ""
}

// trimOWS trims spaces and horizontal tabs, and nothing else.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

// HeaderCarrier is a case-insensitive multi-valued carrier (header names lowercased). Set
// replaces every value of a header.
type HeaderCarrier map[string][]string

// Get returns the first value of name.
func (h HeaderCarrier) Get(name string) string {
	if v := h[strings.ToLower(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of name.
func (h HeaderCarrier) Values(name string) []string { return h[strings.ToLower(name)] }

// Set replaces the values of name with value.
func (h HeaderCarrier) Set(name, value string) { h[strings.ToLower(name)] = []string{value} }

// Add appends a value to name.
func (h HeaderCarrier) Add(name, value string) {
	k := strings.ToLower(name)
	h[k] = append(h[k], value)
}

// Keys returns the header names.
func (h HeaderCarrier) Keys() []string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	return ks
}
