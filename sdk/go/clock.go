package weft

import (
	"sync/atomic"
	"time"
)

// Timestamps are integer Unix nanoseconds. A span reads the monotonic clock at start and end,
// so its duration never depends on wall-clock steps; the wall time is an anchor (wall and
// monotonic read together) refreshed at most once a second.

var monoBase = time.Now()

type anchor struct{ wall, mono int64 }

var currentAnchor atomic.Pointer[anchor]

func monoNow() int64 { return int64(time.Since(monoBase)) }

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
