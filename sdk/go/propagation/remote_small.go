package propagation

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"weft.dev/sdk/go/internal/ctxkey"
)

// remoteBase holds the methods a remote span does nothing in. plainRemote embeds a pointer to
// the one remoteBase rather than embedded.Span itself, an interface that would cost it 16 bytes.
type remoteBase struct{ embedded.Span }

var theRemoteBase = &remoteBase{}

func (*remoteBase) End(...trace.SpanEndOption)              {}
func (*remoteBase) AddEvent(string, ...trace.EventOption)   {}
func (*remoteBase) AddLink(trace.Link)                      {}
func (*remoteBase) IsRecording() bool                       { return false }
func (*remoteBase) RecordError(error, ...trace.EventOption) {}
func (*remoteBase) SetStatus(codes.Code, string)            {}
func (*remoteBase) SetName(string)                          {}
func (*remoteBase) SetAttributes(...attribute.KeyValue)     {}
func (*remoteBase) TracerProvider() trace.TracerProvider    { return otel.GetTracerProvider() }

// plainRemote is the remote span of an extract that found only a traceparent (no tracestate,
// no B3 or Jaeger debug flag, no X-Ray lineage): the common case, in 64 bytes instead of
// RemoteSpan's 144, carved out of slabs of 63 (BenchmarkTraceparentExtract: one allocation per
// 63 extracts and 65 B/op, against one per 28 and 146 B/op). Like RemoteSpan it is
// immutable once made, and also the context that holds it.
type plainRemote struct {
	*remoteBase
	parent context.Context
	tid    trace.TraceID
	sid    trace.SpanID
	flags  trace.TraceFlags
	remote bool
	tp     atomic.Pointer[string] // the traceparent, built at most once
}

var _ trace.Span = (*plainRemote)(nil)
var _ context.Context = (*plainRemote)(nil)

type plainRemoteSlab struct {
	spans [63]plainRemote // 63 × 64 bytes and next fill a 4 KiB size class
	next  int
}

var plainRemoteSlabs = sync.Pool{New: func() any { return new(plainRemoteSlab) }}

func newPlainRemote() *plainRemote {
	sl := plainRemoteSlabs.Get().(*plainRemoteSlab)
	if sl.next == len(sl.spans) {
		sl = new(plainRemoteSlab)
	}
	r := &sl.spans[sl.next]
	sl.next++
	plainRemoteSlabs.Put(sl)
	return r
}

// SpanContext returns the extracted span context.
func (r *plainRemote) SpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.tid, SpanID: r.sid, TraceFlags: r.flags, Remote: r.remote})
}

// WeftExtras returns no extras: a plainRemote is made only when there are none.
func (r *plainRemote) WeftExtras() Extras { return Extras{} }

// Traceparent returns the context's traceparent value, computed on the first call only.
func (r *plainRemote) Traceparent() string {
	if p := r.tp.Load(); p != nil {
		return *p
	}
	var buf [TraceparentLen]byte
	v := string(AppendTraceparent(buf[:0], r.SpanContext()))
	r.tp.CompareAndSwap(nil, &v)
	return *r.tp.Load()
}

// HexIDs returns the hex trace and span IDs (slices of the cached traceparent).
func (r *plainRemote) HexIDs() (traceID, spanID string) {
	tp := r.Traceparent()
	return tp[3:35], tp[36:52]
}

// Deadline is the parent context's.
func (r *plainRemote) Deadline() (time.Time, bool) { return r.parent.Deadline() }

// Done is the parent context's.
func (r *plainRemote) Done() <-chan struct{} { return r.parent.Done() }

// Err is the parent context's.
func (r *plainRemote) Err() error { return r.parent.Err() }

// Value returns the span for the otel current-span key and defers to the parent otherwise.
func (r *plainRemote) Value(key any) any {
	if key == ctxkey.Span {
		return r
	}
	return r.parent.Value(key)
}
