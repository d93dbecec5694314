package weft

import (
	"testing"
	"time"
)

// TestMonoClock checks monoNow against the runtime's monotonic clock: never negative, never
// behind itself within a goroutine, and measuring a sleep within 0.1 % plus 50 µs, whether it
// reads the time-stamp counter (useTSC) or the runtime's clock.
func TestMonoClock(t *testing.T) {
	t.Logf("time-stamp counter in use: %v", useTSC.Load())
	prev := monoNow()
	for i := 0; i < 100000; i++ {
		m := monoNow()
		if m < 0 || m < prev-10000 { // a recalibration may step back a little
			t.Fatalf("monoNow went from %d to %d", prev, m)
		}
		prev = m
	}
	for _, d := range []time.Duration{3 * time.Millisecond, 30 * time.Millisecond, 1100 * time.Millisecond} {
		m0, r0 := monoNow(), runtimeMono()
		time.Sleep(d)
		m1, r1 := monoNow(), runtimeMono()
		got, want := m1-m0, r1-r0
		if diff := got - want; diff > want/1000+50000 || -diff > want/1000+50000 {
			t.Errorf("slept %v: monoNow measured %d ns, the runtime's clock %d ns", d, got, want)
		}
	}
	if tscUsable() && !useTSC.Load() {
		t.Errorf("the counter was given up on a machine whose kernel keeps time with it")
	}
}

var sinkMono int64

// BenchmarkMonoNow: one reading of the span clock, and of the runtime's monotonic clock it
// replaces where the time-stamp counter is used.
func BenchmarkMonoNow(b *testing.B) {
	b.Run("monoNow", func(b *testing.B) {
		for b.Loop() {
			sinkMono += monoNow()
		}
	})
	b.Run("runtime", func(b *testing.B) {
		for b.Loop() {
			sinkMono += runtimeMono()
		}
	})
}
