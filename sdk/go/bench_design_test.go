package weft_test

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkHandleShape is the evidence against generation-checked span handles (BENCHMARKS.md,
// "What stands in the way of 0 allocations"): Tracer.Start returns a trace.Span and a
// context.Context, both interfaces, and Go stores a value in an interface without allocating
// only when the value is pointer-shaped. A handle of a pointer and a generation is two words,
// so returning it allocates 16 bytes every time, more than the 1/42 of a slab a weft span
// costs; a pointer (the current handle) allocates nothing.
func BenchmarkHandleShape(b *testing.B) {
	b.Run("pointer", func(b *testing.B) {
		h := &pointerHandle{}
		b.ReportAllocs()
		for b.Loop() {
			sinkSpanIface = h
		}
	})
	b.Run("pointer+generation", func(b *testing.B) {
		h := &pointerHandle{}
		b.ReportAllocs()
		var gen uint64
		for b.Loop() {
			gen++
			sinkSpanIface = genHandle{h, gen}
		}
	})
}

var sinkSpanIface trace.Span

type pointerHandle struct{ noop.Span }

// genHandle is what a generation-checked handle would be: the slot and the generation it was
// handed out at; a method would compare gen with the slot's current generation.
type genHandle struct {
	*pointerHandle
	gen uint64
}
