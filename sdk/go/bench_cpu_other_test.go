//go:build !unix

package weft_test

import "time"

// processCPU is not measured here; cpu-ns/op is then not reported.
func processCPU() time.Duration { return 0 }
