package weft_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/sampling"
)

// A span started with an explicit timestamp and ended without one ends at the current time.
func TestExplicitStartEndsNow(t *testing.T) {
	tp, m := newMemoryProvider(t)
	start := time.Now().Add(-10 * time.Second)
	_, s := tp.Tracer("t").Start(context.Background(), "s", trace.WithTimestamp(start))
	before := time.Now()
	s.End()
	after := time.Now()
	flush(t, tp)
	r := m.all()[0]
	if r.StartUnixNano != uint64(start.UnixNano()) {
		t.Fatalf("start %d, want %d", r.StartUnixNano, start.UnixNano())
	}
	end := time.Unix(0, int64(r.EndUnixNano))
	if end.Before(before.Add(-5*time.Millisecond)) || end.After(after.Add(5*time.Millisecond)) {
		t.Fatalf("end %v, want between %v and %v (duration %v)", end, before, after, end.Sub(start))
	}
}

// Negative limits are unlimited (OTel spec and Go SDK); 0 keeps none.
func TestNegativeLimitsAreUnlimited(t *testing.T) {
	l := weft.DefaultLimits()
	l.AttributeCount, l.EventCount, l.LinkCount, l.EventAttributeCount, l.LinkAttributeCount = -1, -1, -1, -1, -1
	tp, m := newMemoryProvider(t, weft.WithLimits(l))
	link := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	_, s := tp.Tracer("t").Start(context.Background(), "s")
	for i := range 200 {
		k := attribute.Int(fmt.Sprint("k", i), i)
		s.SetAttributes(k)
		s.AddEvent("e", trace.WithAttributes(k, attribute.Int("x", i)))
		s.AddLink(trace.Link{SpanContext: link, Attributes: []attribute.KeyValue{k, attribute.Int("x", i)}})
	}
	s.End()
	flush(t, tp)
	r := m.all()[0]
	if len(r.Attributes) != 200 || len(r.Events) != 200 || len(r.Links) != 200 ||
		len(r.Events[0].Attributes) != 2 || len(r.Links[0].Attributes) != 2 ||
		r.DroppedAttributes+r.DroppedEvents+r.DroppedLinks != 0 {
		t.Fatalf("%d attributes, %d events, %d links; dropped %d, %d, %d",
			len(r.Attributes), len(r.Events), len(r.Links), r.DroppedAttributes, r.DroppedEvents, r.DroppedLinks)
	}

	tp0, m0 := newMemoryProvider(t, weft.WithLimits(weft.Limits{AttributeValueLength: -1}))
	_, s = tp0.Tracer("t").Start(context.Background(), "s")
	s.SetAttributes(attribute.Int("a", 1))
	s.AddEvent("e")
	s.End()
	flush(t, tp0)
	if r := m0.all()[0]; len(r.Attributes) != 0 || len(r.Events) != 0 || r.DroppedAttributes != 1 || r.DroppedEvents != 1 {
		t.Fatalf("zero limits: %d attributes, %d events", len(r.Attributes), len(r.Events))
	}
}

type recordOnly struct{}

func (recordOnly) ShouldSample(p sampling.Params) sampling.Result {
	return sampling.Result{Decision: sampling.RecordOnly, Tracestate: p.ParentTracestate}
}
func (recordOnly) Description() string { return "RecordOnly" }

// A RecordOnly decision gives a recording span that is not sampled and not exported.
func TestRecordOnlyRecordsWithoutExporting(t *testing.T) {
	tp, m := newMemoryProvider(t, weft.WithSampler(recordOnly{}))
	_, s := tp.Tracer("t").Start(context.Background(), "s")
	if !s.IsRecording() || s.SpanContext().IsSampled() || !s.SpanContext().IsValid() {
		t.Fatalf("recording %v, sampled %v", s.IsRecording(), s.SpanContext().IsSampled())
	}
	s.SetAttributes(attribute.Int("a", 1))
	s.AddEvent("e")
	s.End()
	if s.IsRecording() {
		t.Fatal("still recording after End")
	}
	flush(t, tp)
	if n := len(m.all()); n != 0 {
		t.Fatalf("%d spans exported", n)
	}
	if st := tp.Stats(); st.Queued != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A span kind that is not one of the five becomes Internal.
func TestInvalidSpanKindIsInternal(t *testing.T) {
	tp, m := newMemoryProvider(t)
	for _, k := range []trace.SpanKind{trace.SpanKindUnspecified, 9, trace.SpanKindConsumer} {
		_, s := tp.Tracer("t").Start(context.Background(), "s", trace.WithSpanKind(k))
		s.End()
	}
	flush(t, tp)
	got := m.all()
	if len(got) != 3 || got[0].Kind != trace.SpanKindInternal || got[1].Kind != trace.SpanKindInternal || got[2].Kind != trace.SpanKindConsumer {
		t.Fatalf("kinds %v", got)
	}
}

// The value length limit counts characters, and reaches into byte slices, slices and maps.
func TestValueLengthLimitCountsCharactersEverywhere(t *testing.T) {
	l := weft.DefaultLimits()
	l.AttributeValueLength = 3
	tp, m := newMemoryProvider(t, weft.WithLimits(l))
	_, s := tp.Tracer("t").Start(context.Background(), "s")
	s.SetAttributes(
		attribute.String("s", "héllo"),
		attribute.StringSlice("ss", []string{"日本語です", "ab"}),
		attribute.ByteSlice("b", []byte("abcdef")),
		attribute.Slice("sl", attribute.StringValue("wörld"), attribute.IntValue(7)),
		attribute.Map("m", attribute.String("k", "ñandú"), attribute.Slice("in", attribute.StringValue("xyzw"))),
	)
	s.End()
	flush(t, tp)
	got := map[attribute.Key]attribute.Value{}
	for _, a := range m.all()[0].Attributes {
		got[a.Key] = a.Value
	}
	want := map[attribute.Key]attribute.Value{
		"s":  attribute.StringValue("hél"),
		"ss": attribute.StringSliceValue([]string{"日本語", "ab"}),
		"b":  attribute.ByteSliceValue([]byte("abc")),
		"sl": attribute.SliceValue(attribute.StringValue("wör"), attribute.IntValue(7)),
		"m":  attribute.MapValue(attribute.String("k", "ñan"), attribute.Slice("in", attribute.StringValue("xyz"))),
	}
	for k, w := range want {
		if g := got[k]; g.Emit() != w.Emit() || g.Type() != w.Type() {
			t.Errorf("%s = %s, want %s", k, g.Emit(), w.Emit())
		}
	}
}

// A deferred End records the panic under way as an exception event and lets it go on;
// WithStackTrace adds the stack, in End and in RecordError.
func TestEndRecordsPanicAndStackTraces(t *testing.T) {
	tp, m := newMemoryProvider(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic to go on", r)
			}
		}()
		_, s := tp.Tracer("t").Start(context.Background(), "panics")
		defer s.End(trace.WithStackTrace(true))
		panic("boom")
	}()
	_, s := tp.Tracer("t").Start(context.Background(), "errs")
	s.RecordError(fmt.Errorf("bad"), trace.WithStackTrace(true))
	s.RecordError(fmt.Errorf("no stack"))
	s.End()
	flush(t, tp)
	spans := m.all()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	attrs := func(e export.Event) map[attribute.Key]string {
		out := map[attribute.Key]string{}
		for _, a := range e.Attributes {
			out[a.Key] = a.Value.Emit()
		}
		return out
	}
	if len(spans[0].Events) != 1 || spans[0].Events[0].Name != "exception" {
		t.Fatalf("panic events %v", spans[0].Events)
	}
	a := attrs(spans[0].Events[0])
	if a["exception.type"] != "string" || a["exception.message"] != "boom" || !strings.Contains(a["exception.stacktrace"], "TestEndRecordsPanicAndStackTraces") {
		t.Fatalf("panic event %v", a)
	}
	if len(spans[1].Events) != 2 {
		t.Fatalf("error events %v", spans[1].Events)
	}
	if a := attrs(spans[1].Events[0]); !strings.Contains(a["exception.stacktrace"], "TestEndRecordsPanicAndStackTraces") {
		t.Fatalf("RecordError with WithStackTrace: %v", a)
	}
	if _, ok := attrs(spans[1].Events[1])["exception.stacktrace"]; ok {
		t.Fatal("a stack trace without WithStackTrace")
	}
}
