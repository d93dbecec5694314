package weft

import (
	"testing"
	"time"
)

// TestMonoClock checks monoNow against the runtime's monotonic clock: never negative, never
// behind itself within a goroutine, and measuring a sleep within 0.1 % plus 50 µs (in one of
// three tries), whether it reads the time-stamp counter (useTSC) or the runtime's clock.
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
	// A reading of both clocks: monoNow between two runtime readings, the tightest pair of
	// five. The goroutine can be preempted between two reads (under -race on a loaded 2-core
	// machine, by 88 µs once), which says nothing about either clock.
	pair := func() (m, r int64) {
		best := int64(-1)
		for i := 0; i < 5; i++ {
			ra := runtimeMono()
			mm := monoNow()
			rb := runtimeMono()
			if best < 0 || rb-ra < best {
				best, m, r = rb-ra, mm, ra+(rb-ra)/2
			}
		}
		return m, r
	}
	for _, d := range []time.Duration{3 * time.Millisecond, 30 * time.Millisecond, 1100 * time.Millisecond} {
		var got, want int64
		ok := false
		// A sleep measured three times: a clock that is off is off every time.
		for try := 0; try < 3 && !ok; try++ {
			m0, r0 := pair()
			time.Sleep(d)
			m1, r1 := pair()
			got, want = m1-m0, r1-r0
			diff := got - want
			ok = diff <= want/1000+50000 && -diff <= want/1000+50000
		}
		if !ok {
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
