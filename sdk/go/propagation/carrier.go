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
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace/embedded"

	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/internal/ctxkey"

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

// RemoteSpan is the non-recording span an extract puts into the context when the context
// carries a tracestate or other Extras (without them it is a smaller plainRemote). It is also
// the context that holds it, so an extract allocates one object.
type RemoteSpan struct {
	embedded.Span
	parent context.Context
	sc     trace.SpanContext
	extras Extras
	tp     atomic.Pointer[string] // the traceparent, built at most once
}

// remoteSlab hands out RemoteSpans 28 at a time (28 × 144 bytes fill a 4 KiB size class).
// They are never reused; a slab stays alive while any of its spans is referenced.
type remoteSlab struct {
	spans [28]RemoteSpan
	next  int
}

var remoteSlabs = sync.Pool{New: func() any { return new(remoteSlab) }}

func newRemoteSpan() *RemoteSpan {
	sl := remoteSlabs.Get().(*remoteSlab)
	if sl.next == len(sl.spans) {
		sl = new(remoteSlab)
	}
	r := &sl.spans[sl.next]
	sl.next++
	remoteSlabs.Put(sl)
	return r
}

// Traceparent returns the context's traceparent value, computed on the first call only.
func (r *RemoteSpan) Traceparent() string {
	if p := r.tp.Load(); p != nil {
		return *p
	}
	var buf [TraceparentLen]byte
	v := string(AppendTraceparent(buf[:0], r.sc))
	r.tp.CompareAndSwap(nil, &v)
	return *r.tp.Load()
}

// HexIDs returns the hex trace and span IDs (slices of the cached traceparent).
func (r *RemoteSpan) HexIDs() (traceID, spanID string) {
	tp := r.Traceparent()
	return tp[3:35], tp[36:52]
}

var _ trace.Span = (*RemoteSpan)(nil)

// SpanContext returns the extracted span context.
func (r *RemoteSpan) SpanContext() trace.SpanContext { return r.sc }

// WeftExtras returns the format-specific state extracted with the span context.
func (r *RemoteSpan) WeftExtras() Extras { return r.extras }

// End does nothing: a remote span is not recorded here.
func (r *RemoteSpan) End(...trace.SpanEndOption) {}

// AddEvent does nothing.
func (r *RemoteSpan) AddEvent(string, ...trace.EventOption) {}

// AddLink does nothing.
func (r *RemoteSpan) AddLink(trace.Link) {}

// IsRecording returns false.
func (r *RemoteSpan) IsRecording() bool { return false }

// RecordError does nothing.
func (r *RemoteSpan) RecordError(error, ...trace.EventOption) {}

// SetStatus does nothing.
func (r *RemoteSpan) SetStatus(codes.Code, string) {}

// SetName does nothing.
func (r *RemoteSpan) SetName(string) {}

// SetAttributes does nothing.
func (r *RemoteSpan) SetAttributes(...attribute.KeyValue) {}

// TracerProvider returns the global provider, as the otel API's non-recording span does.
func (r *RemoteSpan) TracerProvider() trace.TracerProvider { return otel.GetTracerProvider() }

// Deadline is the parent context's.
func (r *RemoteSpan) Deadline() (time.Time, bool) { return r.parent.Deadline() }

// Done is the parent context's.
func (r *RemoteSpan) Done() <-chan struct{} { return r.parent.Done() }

// Err is the parent context's.
func (r *RemoteSpan) Err() error { return r.parent.Err() }

// Value returns the span for the otel current-span key and defers to the parent otherwise.
func (r *RemoteSpan) Value(key any) any {
	if key == ctxkey.Span {
		return r
	}
	return r.parent.Value(key)
}

// ContextWithRemote returns ctx holding a remote span context and its extras.
func ContextWithRemote(ctx context.Context, sc trace.SpanContext, e Extras) context.Context {
	if e.Tracestate != "" && sc.TraceState().Len() == 0 {
		// Keep the otel TraceState in step where its (Level 1) grammar allows it.
		if ts, err := trace.ParseTraceState(e.Tracestate); err == nil {
			sc = sc.WithTraceState(ts)
		}
	}
	if e == (Extras{}) && sc.TraceState().Len() == 0 {
		p := newPlainRemote()
		p.remoteBase, p.parent, p.tid, p.sid, p.flags, p.remote = theRemoteBase, ctx, sc.TraceID(), sc.SpanID(), sc.TraceFlags(), sc.IsRemote()
		return p
	}
	r := newRemoteSpan()
	r.parent, r.sc, r.extras = ctx, sc, e
	return r
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

// HexHolder is implemented by spans that cache the hex form of their IDs.
type HexHolder interface {
	HexIDs() (traceID, spanID string)
}

// hexIDs returns the hex IDs of the span in ctx, from its cache when it has one.
func hexIDs(ctx context.Context, sc trace.SpanContext) (string, string) {
	if h, ok := trace.SpanFromContext(ctx).(HexHolder); ok {
		return h.HexIDs()
	}
	t, s := sc.TraceID(), sc.SpanID()
	b := id.AppendHex(id.AppendHex(make([]byte, 0, 48), t[:]), s[:])
	str := string(b)
	return str[:32], str[32:]
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
