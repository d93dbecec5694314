//go:build !(linux && amd64)

package weft

func rdtsc() uint64 { return 0 }

// tscUsable: the time-stamp counter is used only on Linux on amd64 (clock_tsc_linux_amd64.go).
func tscUsable() bool { return false }
