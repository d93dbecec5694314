package weft_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/exporters/otlp"
)

// A link whose span context is invalid is kept when it carries attributes or a tracestate, and a
// link's OTLP flags carry all eight W3C flag bits of the linked context.
func TestLinksKeptAndTheirFlagsWhole(t *testing.T) {
	rec := &receiver{}
	srv := httpReceiver(t, rec, nil)
	tp, _, _ := interopProvider(t, otlp.Config{Endpoint: srv.URL + "/v1/traces", Compression: "none"})
	ts, _ := trace.ParseTraceState("k=v")
	valid := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: 0x83, Remote: true})
	_, s := tp.Tracer("t").Start(context.Background(), "s", trace.WithLinks(
		trace.Link{SpanContext: trace.SpanContext{}, Attributes: []attribute.KeyValue{attribute.String("a", "b")}},
		trace.Link{SpanContext: trace.SpanContext{}}, // nothing to keep
	))
	s.AddLink(trace.Link{SpanContext: trace.SpanContext{}.WithTraceState(ts)})
	s.AddLink(trace.Link{SpanContext: trace.SpanContext{}}) // nothing to keep
	s.AddLink(trace.Link{SpanContext: valid})
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, spans := rec.spans()
	links := spans[0].Links
	if len(links) != 3 {
		t.Fatalf("%d links, want 3", len(links))
	}
	if len(links[0].Attributes) != 1 || links[1].TraceState != "k=v" {
		t.Fatalf("links %v", links)
	}
	if got, want := links[2].Flags, uint32(0x383); got != want {
		t.Fatalf("link flags %#x, want %#x", got, want)
	}
}
