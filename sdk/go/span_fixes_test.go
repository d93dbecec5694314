package weft_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// A span started with an explicit timestamp and ended without one ends at the current time.
func TestExplicitStartEndsNow(t *testing.T) {
	tp, m := newMemoryProvider(t)
	start := time.Now().Add(-10 * time.Second)
	_, s := tp.Tracer("t").Start(context.Background(), "s", trace.WithTimestamp(start))
	before := time.Now()
	s.End()
	after := time.Now()
	flush(t, tp)
	r := m.all()[0]
	if r.StartUnixNano != uint64(start.UnixNano()) {
		t.Fatalf("start %d, want %d", r.StartUnixNano, start.UnixNano())
	}
	end := time.Unix(0, int64(r.EndUnixNano))
	if end.Before(before.Add(-5*time.Millisecond)) || end.After(after.Add(5*time.Millisecond)) {
		t.Fatalf("end %v, want between %v and %v (duration %v)", end, before, after, end.Sub(start))
	}
}
