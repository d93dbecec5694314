//go:build linux && amd64

package weft

import (
	"bytes"
	"os"
)

// rdtsc reads the CPU's time-stamp counter (clock_tsc_linux_amd64.s).
func rdtsc() uint64

// tscUsable reports whether the kernel itself keeps time with the time-stamp counter: Linux
// uses the "tsc" clocksource only when the counter is invariant (constant rate, running in
// deep sleep states) and synchronized across CPUs, and switches away from it when its watchdog
// finds it unstable. As in tikv/minstant, that choice is the test.
func tscUsable() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && bytes.Equal(bytes.TrimSpace(b), []byte("tsc"))
}
