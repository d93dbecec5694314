//go:build unix

package weft_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system), every goroutine's: the
// benchmark's, the export goroutine's and the GC's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
