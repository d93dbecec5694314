package id

import (
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// HexCache computes the hex form of a span context's IDs at most once and caches it. The zero
// value is ready to use; it is safe for concurrent readers: racing first calls compute the same
// string, and one of them is published with an atomic store.
type HexCache struct {
	p atomic.Pointer[hexIDs]
}

type hexIDs struct{ traceID, spanID string }

// Get returns the hex trace and span IDs of sc, computing them on the first call only.
func (h *HexCache) Get(sc trace.SpanContext) (traceID, spanID string) {
	if v := h.p.Load(); v != nil {
		return v.traceID, v.spanID
	}
	var buf [48]byte
	t, s := sc.TraceID(), sc.SpanID()
	b := AppendHex(AppendHex(buf[:0], t[:]), s[:])
	str := string(b)
	v := &hexIDs{traceID: str[:32], spanID: str[32:]}
	h.p.CompareAndSwap(nil, v)
	v = h.p.Load()
	return v.traceID, v.spanID
}

// Reset forgets the cached strings (for a recycled owner).
func (h *HexCache) Reset() { h.p.Store(nil) }
