package weft

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/internal/ctxkey"
	"weft.dev/sdk/go/propagation"
)

// Span is weft's trace.Span. It is also the context.Context that Start returns (the parent
// context with this span as the current span), so a span is one 96-byte object, carved out of
// a slab of 42 (see slabSpans).
//
// # The reuse rule
//
// A span's record (name, attributes, events, links, status) is reused: Start takes a record
// from the pipeline's free list and End hands it to the export pipeline, which returns it to
// the free list after the batch is encoded. End detaches the record from the span under the span's lock, so after End:
//
//   - SpanContext, TracerProvider, the context methods and Traceparent keep working and keep
//     returning this span's values (the span handle itself is never reused);
//   - IsRecording returns false, and SetAttributes, AddEvent, AddLink, SetName, SetStatus,
//     RecordError and a second End do nothing; they never reach the record, which by then may
//     belong to another span.
//
// Any goroutine may call any method at any time; TestEndedSpansStayTheirOwn and
// TestKeptSpansKeepTheirIdentity (provider_test.go) check this under the race detector.
type Span struct {
	*spanBase // the provider's; it also gives Span the otel API's embedded.Span marker

	parent    context.Context
	tid       trace.TraceID
	sid       trace.SpanID
	flags     trace.TraceFlags
	recording bool // RecordAndSample or RecordOnly: the span has a record until End
	// ext is the tracestate and format state; nil when empty. It is immutable and shared with
	// children whose sampler left the tracestate unchanged, so they allocate nothing for it.
	ext  *spanExtras
	strs atomic.Pointer[string] // the traceparent, built at most once; hex IDs are its slices

	startMono int64 // explicitStart when Start was given a timestamp
	mu        sync.Mutex
	rec       *export.SpanData // nil once ended, and for dropped (non-recording) spans
}

// spanBase is the part of a span that all spans of a provider share. A span embeds a pointer to
// it rather than embedded.Span itself: embedded.Span is an interface, 16 bytes in every span,
// and through the pointer the marker method still reaches Span's method set (nothing calls it).
// With the provider pointer folded in, a span handle is 96 bytes, not 112
// (BenchmarkSpanStartEnd's B/op).
type spanBase struct {
	embedded.Span
	provider *TracerProvider
}

// spanExtras is a span's propagation.Extras with the otel form of its tracestate (empty when
// the otel TraceState grammar rejects it, e.g. Level 2 keys such as foo@@bar).
type spanExtras struct {
	propagation.Extras
	ts trace.TraceState
}

// explicitStart marks a span whose start time was given (trace.WithTimestamp); monoNow is never
// negative.
const explicitStart = -1

var _ trace.Span = (*Span)(nil)
var _ context.Context = (*Span)(nil)

// Deadline is the parent context's.
func (s *Span) Deadline() (time.Time, bool) { return s.parent.Deadline() }

// Done is the parent context's.
func (s *Span) Done() <-chan struct{} { return s.parent.Done() }

// Err is the parent context's.
func (s *Span) Err() error { return s.parent.Err() }

// Value returns the span for the otel current-span key and defers to the parent otherwise.
func (s *Span) Value(key any) any {
	if key == ctxkey.Span {
		return s
	}
	return s.parent.Value(key)
}

// SpanContext returns the span's context.
func (s *Span) SpanContext() trace.SpanContext {
	cfg := trace.SpanContextConfig{TraceID: s.tid, SpanID: s.sid, TraceFlags: s.flags}
	if s.ext != nil {
		cfg.TraceState = s.ext.ts
	}
	return trace.NewSpanContext(cfg)
}

// WeftExtras returns the span's tracestate and format-specific state.
func (s *Span) WeftExtras() propagation.Extras {
	if s.ext == nil {
		return propagation.Extras{}
	}
	return s.ext.Extras
}

// HexIDs returns the hex trace and span IDs, computed on the first call only (they are slices
// of the traceparent string).
func (s *Span) HexIDs() (traceID, spanID string) {
	tp := s.Traceparent()
	return tp[3:35], tp[36:52]
}

// Traceparent returns the span's traceparent header value, computed on the first call only.
func (s *Span) Traceparent() string {
	if p := s.strs.Load(); p != nil {
		return *p
	}
	var buf [propagation.TraceparentLen]byte
	v := string(propagation.AppendTraceparent(buf[:0], s.SpanContext()))
	s.strs.CompareAndSwap(nil, &v)
	return *s.strs.Load()
}

// TracerProvider returns the provider that created the span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.provider }

// IsRecording reports whether the span is recording (RecordAndSample or RecordOnly, not ended).
func (s *Span) IsRecording() bool {
	s.mu.Lock()
	r := s.rec != nil
	s.mu.Unlock()
	return r
}

// End ends the span and queues it for export; later calls do nothing. Deferred during a panic
// (defer span.End()), it records the panic as an "exception" event (with the stack when
// trace.WithStackTrace(true) is given) and lets the panic go on, as the OTel Go SDK does.
func (s *Span) End(options ...trace.SpanEndOption) {
	if !s.recording { // a dropped span has no record: nothing to lock
		return
	}
	if p := recover(); p != nil { // only a deferred End sees a panic; cheap otherwise
		defer panic(p)
		attrs := []attribute.KeyValue{
			attribute.String("exception.type", typeName(p)),
			attribute.String("exception.message", fmt.Sprint(p)),
		}
		if cfg := trace.NewSpanEndConfig(options...); cfg.StackTrace() {
			attrs = append(attrs, attribute.String("exception.stacktrace", string(debug.Stack())))
		}
		s.addEvent("exception", time.Time{}, attrs)
	}
	endMono := monoNow()
	s.mu.Lock()
	r := s.rec
	s.rec = nil
	s.mu.Unlock()
	if r == nil {
		return
	}
	if len(options) > 0 {
		cfg := trace.NewSpanEndConfig(options...)
		if ts := cfg.Timestamp(); !ts.IsZero() {
			r.EndUnixNano = uint64(ts.UnixNano())
		}
	}
	if r.EndUnixNano == 0 {
		if s.startMono == explicitStart {
			// The start time was given: the end is the current wall time (as the OTel Go SDK).
			r.EndUnixNano = uint64(wallAt(endMono))
		} else {
			r.EndUnixNano = r.StartUnixNano
			if d := endMono - s.startMono; d > 0 { // a counter clock read on two cores may step back a few ns
				r.EndUnixNano += uint64(d)
			}
		}
	}
	if !s.flags.IsSampled() { // RecordOnly: recorded, not exported
		s.provider.pipe.putRecord(r)
		return
	}
	s.provider.pipe.enqueue(r)
}

// SetAttributes sets attributes; a repeated key keeps its first position with its last value.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	if len(kv) == 0 {
		return
	}
	s.mu.Lock()
	if r := s.rec; r != nil {
		lim := &s.provider.limits
		r.Attributes, r.DroppedAttributes = setAttrs(r.Attributes, r.DroppedAttributes, kv, lim.AttributeCount, lim.AttributeValueLength)
	}
	s.mu.Unlock()
}

// setAttrs merges kv into attrs under a count limit and a value length limit (< 0: none for
// either).
func setAttrs(attrs []attribute.KeyValue, dropped uint32, kv []attribute.KeyValue, count, length int) ([]attribute.KeyValue, uint32) {
next:
	for _, a := range kv {
		if !a.Valid() {
			dropped++
			continue
		}
		if length >= 0 {
			a = truncate(a, length)
		}
		for i := range attrs {
			if attrs[i].Key == a.Key {
				attrs[i].Value = a.Value
				continue next
			}
		}
		if count >= 0 && len(attrs) >= count {
			dropped++
			continue
		}
		attrs = append(attrs, a)
	}
	return attrs, dropped
}

// truncateString keeps the first n characters (runes) of s, as the OTel Go SDK's attribute
// value length limit; a byte that is not UTF-8 counts as one character.
func truncateString(s string, n int) string {
	if len(s) <= n { // never more characters than bytes
		return s
	}
	count := 0
	for i := range s {
		if count == n {
			return s[:i]
		}
		count++
	}
	return s
}

// truncate applies the value length limit n (>= 0) as the OTel Go SDK does: strings and the
// strings of string slices to n characters, byte slices to n bytes, and the same inside slices
// and maps, recursively. It allocates only when something is cut.
func truncate(a attribute.KeyValue, n int) attribute.KeyValue {
	if v, changed := truncateValue(a.Value, n); changed {
		a.Value = v
	}
	return a
}

func truncateValue(v attribute.Value, n int) (attribute.Value, bool) {
	switch v.Type() {
	case attribute.STRING:
		if s := v.AsString(); len(s) > n {
			if t := truncateString(s, n); len(t) != len(s) {
				return attribute.StringValue(t), true
			}
		}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		changed := false
		for i, s := range ss {
			if t := truncateString(s, n); len(t) != len(s) {
				ss[i] = t
				changed = true
			}
		}
		if changed {
			return attribute.StringSliceValue(ss), true
		}
	case attribute.BYTESLICE:
		if b := v.AsByteSlice(); len(b) > n {
			return attribute.ByteSliceValue(b[:n]), true
		}
	case attribute.SLICE:
		vs := v.AsSlice()
		changed := false
		for i := range vs {
			if nv, ok := truncateValue(vs[i], n); ok {
				vs[i], changed = nv, true
			}
		}
		if changed {
			return attribute.SliceValue(vs...), true
		}
	case attribute.MAP:
		kvs := v.AsMap()
		changed := false
		for i := range kvs {
			if nv, ok := truncateValue(kvs[i].Value, n); ok {
				kvs[i].Value, changed = nv, true
			}
		}
		if changed {
			return attribute.MapValue(kvs...), true
		}
	}
	return v, false
}

// AddEvent records an event.
func (s *Span) AddEvent(name string, options ...trace.EventOption) {
	s.mu.Lock()
	r := s.rec
	s.mu.Unlock()
	if r == nil {
		return
	}
	cfg := trace.NewEventConfig(options...)
	s.addEvent(name, cfg.Timestamp(), cfg.Attributes())
}

func (s *Span) addEvent(name string, ts time.Time, attrs []attribute.KeyValue) {
	var t uint64
	if ts.IsZero() {
		t = uint64(wallAt(monoNow()))
	} else {
		t = uint64(ts.UnixNano())
	}
	lim := &s.provider.limits
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	if r == nil {
		return
	}
	if lim.EventCount >= 0 && len(r.Events) >= lim.EventCount {
		r.DroppedEvents++
		return
	}
	n := len(r.Events)
	if n < cap(r.Events) {
		r.Events = r.Events[:n+1] // reuse the pooled event and its attribute slice
	} else {
		r.Events = append(r.Events, export.Event{})
	}
	ev := &r.Events[n]
	ev.Name, ev.TimeUnixNano, ev.DroppedAttributes = name, t, 0
	ev.Attributes, ev.DroppedAttributes = setAttrs(ev.Attributes[:0], 0, attrs, lim.EventAttributeCount, lim.AttributeValueLength)
}

// AddLink records a link.
func (s *Span) AddLink(l trace.Link) {
	if !keepLink(l) {
		return
	}
	lim := &s.provider.limits
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	if r == nil {
		return
	}
	addLink(r, l, lim)
}

// keepLink reports whether a link is recorded: its span context is valid, or it carries
// attributes or a tracestate (as the OTel spec and Go SDK).
func keepLink(l trace.Link) bool {
	return l.SpanContext.IsValid() || len(l.Attributes) > 0 || l.SpanContext.TraceState().Len() > 0
}

func addLink(r *export.SpanData, l trace.Link, lim *Limits) {
	if lim.LinkCount >= 0 && len(r.Links) >= lim.LinkCount {
		r.DroppedLinks++
		return
	}
	n := len(r.Links)
	if n < cap(r.Links) {
		r.Links = r.Links[:n+1]
	} else {
		r.Links = append(r.Links, export.Link{})
	}
	lk := &r.Links[n]
	lk.SpanContext = l.SpanContext
	lk.Tracestate = ""
	if l.SpanContext.TraceState().Len() > 0 {
		lk.Tracestate = l.SpanContext.TraceState().String()
	}
	lk.Attributes, lk.DroppedAttributes = setAttrs(lk.Attributes[:0], 0, l.Attributes, lim.LinkAttributeCount, lim.AttributeValueLength)
}

// RecordError adds an "exception" event for err.
func (s *Span) RecordError(err error, options ...trace.EventOption) {
	if err == nil || !s.IsRecording() {
		return
	}
	cfg := trace.NewEventConfig(options...)
	attrs := append([]attribute.KeyValue{
		attribute.String("exception.type", typeName(err)),
		attribute.String("exception.message", err.Error()),
	}, cfg.Attributes()...)
	if cfg.StackTrace() {
		attrs = append(attrs, attribute.String("exception.stacktrace", string(debug.Stack())))
	}
	s.addEvent("exception", cfg.Timestamp(), attrs)
}

func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" { // unnamed or predeclared (a panic's string)
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// SetStatus sets the status: Ok is final, Error keeps its description, Unset is ignored.
func (s *Span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	if r == nil || code == codes.Unset || r.StatusCode == codes.Ok {
		return
	}
	r.StatusCode = code
	r.StatusMessage = ""
	if code == codes.Error {
		r.StatusMessage = description
	}
}

// SetName renames the span.
func (s *Span) SetName(name string) {
	s.mu.Lock()
	if s.rec != nil {
		s.rec.Name = name
	}
	s.mu.Unlock()
}
