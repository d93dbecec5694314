// Package ctxkey learns the otel API's context key for the current span, so that weft's spans
// can be contexts themselves (one allocation for the span and the context that holds it).
package ctxkey

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// Span is the (unexported) key trace.SpanFromContext looks up, learned once by letting it look
// the key up in a probe context.
var Span = func() any {
	p := &probe{Context: context.Background()}
	trace.SpanFromContext(p)
	return p.key
}()

type probe struct {
	context.Context
	key any
}

func (p *probe) Value(k any) any { p.key = k; return nil }
