package weft

import (
	"sync/atomic"
	"time"
)

// Timestamps are integer Unix nanoseconds. A span reads the monotonic clock at start and end,
// so its duration never depends on wall-clock steps; the wall time is an anchor (wall and
// monotonic read together) refreshed at most once a second.
//
// The monotonic clock is nanoseconds since monoBase. Where the CPU's time-stamp counter is what
// the kernel itself uses as its clock (Linux on amd64 with the "tsc" clocksource and an
// invariant TSC, see tscUsable), monoNow reads the counter (RDTSC, about 13 ns on the
// benchmark machine) and converts it with a rate calibrated against the runtime's monotonic
// clock (about 37 ns a read there, through the vDSO); elsewhere it reads the runtime's clock.

var monoBase = time.Now()

type anchor struct{ wall, mono int64 }

var currentAnchor atomic.Pointer[anchor]

// runtimeMono is the runtime's monotonic clock, in nanoseconds since monoBase.
func runtimeMono() int64 { return int64(time.Since(monoBase)) }

// monoNow returns the monotonic clock in nanoseconds since monoBase; never negative.
func monoNow() int64 {
	if useTSC.Load() {
		if m, ok := tscMono(); ok {
			return m
		}
	}
	return runtimeMono()
}

// wallAt converts a monotonic reading to Unix nanoseconds.
func wallAt(mono int64) int64 {
	a := currentAnchor.Load()
	if a == nil || mono-a.mono > int64(time.Second) {
		now := time.Now()
		a = &anchor{wall: now.UnixNano(), mono: int64(now.Sub(monoBase))}
		currentAnchor.Store(a)
	}
	return a.wall + (mono - a.mono)
}

// useTSC is set before any span starts when the time-stamp counter can be the clock, and
// cleared if a recalibration finds it unsound.
var useTSC = func() (b atomic.Bool) { b.Store(tscUsable()); return }()

// tscCal converts counter readings to monoNow nanoseconds: mono + (tsc - c.tsc) * nsPerTick.
// It is replaced, never changed, by recalibrate.
type tscCal struct {
	tsc       int64   // counter at the calibration point
	mono      int64   // runtimeMono at the same point
	nsPerTick float64 // measured over the last calibration window (0: not measured yet)
	refresh   int64   // recalibrate once the counter has passed tsc + refresh
}

var currentCal atomic.Pointer[tscCal]

// tscCalWindow is how long a calibration window lasts once the rate is known; the first window
// is tscFirstWindow, and until it has passed monoNow reads the runtime's clock (then windows grow
// tenfold up to tscCalWindow, see recalibrate).
const (
	tscCalWindow   = time.Second
	tscFirstWindow = 2 * time.Millisecond
)

// tscMaxError is how far, relative to the window, the counter's extrapolation may land from the
// runtime's clock at a recalibration before the counter is given up (e.g. a virtual machine
// moved to a host whose counter runs at another rate): 1 ms per second. The runtime's monotonic
// clock is slewed by NTP by at most 0.05 %, so a sound counter never comes near it.
const tscMaxError = 1e-3

// tscMono returns monoNow from the counter, or false while the rate is not yet known (the
// first tscFirstWindow after the first call) or once the counter was given up.
func tscMono() (int64, bool) {
	t := int64(rdtsc())
	c := currentCal.Load()
	if c == nil || t-c.tsc > c.refresh {
		c = recalibrate(c)
		if c == nil {
			return 0, false
		}
	}
	if c.nsPerTick == 0 {
		return 0, false
	}
	m := c.mono + int64(float64(t-c.tsc)*c.nsPerTick)
	if m < 0 { // a counter a few ticks behind on another core, right after monoBase
		m = 0
	}
	return m, true
}

// recalibrate starts a new calibration window (the caller's reading is past old's window) and
// returns its calibration, or nil once the counter is given up. Concurrent callers race to store
// theirs; any of them is as good.
func recalibrate(old *tscCal) *tscCal {
	if !useTSC.Load() {
		return nil
	}
	t, mono := tscPair()
	c := &tscCal{tsc: t, mono: mono}
	switch {
	case old == nil:
		// The first point: the rate is measured at the end of the first window.
	case mono-old.mono < int64(tscFirstWindow) || t <= old.tsc:
		// Too early to measure the first rate (the first window is counted in ticks, assuming
		// at most one tick per nanosecond), or a reading from another core behind old's:
		// keep old.
		return old
	default:
		rate := float64(mono-old.mono) / float64(t-old.tsc)
		if old.nsPerTick != 0 {
			predicted := old.mono + int64(float64(t-old.tsc)*old.nsPerTick)
			if d := float64(predicted - mono); d > tscMaxError*float64(mono-old.mono) || -d > tscMaxError*float64(mono-old.mono) {
				useTSC.Store(false) // from now on, monoNow reads the runtime's clock
				return nil
			}
		}
		c.nsPerTick = rate
	}
	if c.nsPerTick == 0 {
		c.refresh = int64(tscFirstWindow)
	} else {
		// Each window is at most 10 times the one that measured its rate (2 ms, 20 ms, 200 ms,
		// then 1 s), so the step at a recalibration (the rate's error times the window) stays
		// under a microsecond instead of the first 2 ms rate's error over a whole second.
		window := min(tscCalWindow, 10*time.Duration(mono-old.mono))
		c.refresh = int64(float64(window) / c.nsPerTick)
	}
	currentCal.Store(c)
	return c
}

// tscPair reads the counter and the runtime's clock together: of 3 tries, the one with the
// fewest ticks between the counter readings around the clock read, the counter taken at their
// middle. A goroutine preempted between the two reads would otherwise pair a counter value with
// a clock reading taken milliseconds later, and a rate measured from such a pair over the 2 ms
// first window is off by a factor (TestMonoClock caught it under -race).
func tscPair() (tsc, mono int64) {
	best := int64(-1)
	for range 3 {
		t1 := int64(rdtsc())
		m := runtimeMono()
		t2 := int64(rdtsc())
		if d := t2 - t1; d >= 0 && (best < 0 || d < best) {
			best, tsc, mono = d, t1+d/2, m
		}
	}
	if best < 0 { // the readings went backwards on every try (another core): take the last
		tsc, mono = int64(rdtsc()), runtimeMono()
	}
	return tsc, mono
}
