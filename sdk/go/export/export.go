// Package export defines the span records a weft provider hands to exporters, and the
// Exporter interface.
//
// Records are pooled: an exporter may read a batch only during Export, and must copy anything
// it keeps (the OTLP exporter encodes the batch into its own buffer before Export returns).
package export

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Resource describes the entity producing spans.
type Resource struct {
	Attributes        []attribute.KeyValue
	DroppedAttributes uint32
	SchemaURL         string
}

// Scope is an instrumentation scope. A provider gives every tracer with equal scope fields the
// same *Scope, so exporters may group spans by pointer.
type Scope struct {
	Name, Version, SchemaURL string
	Attributes               []attribute.KeyValue
}

// Event is a span event.
type Event struct {
	Name              string
	TimeUnixNano      uint64
	Attributes        []attribute.KeyValue
	DroppedAttributes uint32
}

// Link is a span link.
type Link struct {
	SpanContext       trace.SpanContext
	Tracestate        string
	Attributes        []attribute.KeyValue
	DroppedAttributes uint32
}

// SpanData is an ended span.
type SpanData struct {
	Scope          *Scope
	TraceID        trace.TraceID
	SpanID         trace.SpanID
	ParentSpanID   trace.SpanID // zero for a root
	TraceFlags     trace.TraceFlags
	ParentIsRemote bool
	Tracestate     string
	Name           string
	Kind           trace.SpanKind
	StartUnixNano  uint64
	EndUnixNano    uint64

	Attributes        []attribute.KeyValue
	DroppedAttributes uint32
	Events            []Event
	DroppedEvents     uint32
	Links             []Link
	DroppedLinks      uint32

	StatusCode    codes.Code
	StatusMessage string
}

// Exporter sends batches of ended spans somewhere.
type Exporter interface {
	// Export sends one batch. It is called from one goroutine at a time. The records belong to
	// the caller again when Export returns; ctx carries the export deadline.
	Export(ctx context.Context, res *Resource, batch []*SpanData) error
	// Shutdown releases the exporter's resources. Later Export calls fail.
	Shutdown(ctx context.Context) error
}
