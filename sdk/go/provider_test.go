package weft_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/propagation"
	"weft.dev/sdk/go/sampling"
)

// memory is an exporter that deep-copies every exported record.
type memory struct {
	mu    sync.Mutex
	spans []export.SpanData
}

func (m *memory) Export(_ context.Context, _ *export.Resource, batch []*export.SpanData) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range batch {
		c := *r
		c.Attributes = append([]attribute.KeyValue(nil), r.Attributes...)
		c.Events = nil
		for _, e := range r.Events {
			e.Attributes = append([]attribute.KeyValue(nil), e.Attributes...)
			c.Events = append(c.Events, e)
		}
		c.Links = nil
		for _, l := range r.Links {
			l.Attributes = append([]attribute.KeyValue(nil), l.Attributes...)
			c.Links = append(c.Links, l)
		}
		m.spans = append(m.spans, c)
	}
	return nil
}

func (m *memory) Shutdown(context.Context) error { return nil }

func (m *memory) all() []export.SpanData {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]export.SpanData(nil), m.spans...)
}

func newMemoryProvider(t testing.TB, opts ...weft.Option) (*weft.TracerProvider, *memory) {
	m := &memory{}
	tp, err := weft.NewTracerProvider(append([]weft.Option{weft.WithExporter(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, m
}

func newMemoryProviderB(t testing.TB, m *memory) (*weft.TracerProvider, error) {
	tp, err := weft.NewTracerProvider(weft.WithExporter(m), weft.WithSampler(sampling.AlwaysOn()))
	if err == nil {
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
	}
	return tp, err
}

func flush(t testing.TB, tp *weft.TracerProvider) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSpansRecordWhatTheAPIGives(t *testing.T) {
	tp, m := newMemoryProvider(t, weft.WithLimits(weft.Limits{AttributeCount: 3, AttributeValueLength: 4,
		EventCount: 1, LinkCount: 1, EventAttributeCount: 1, LinkAttributeCount: 1}))
	tr := tp.Tracer("test", trace.WithInstrumentationVersion("1.2"))
	before := time.Now().UnixNano()
	ctx, root := tr.Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("a", "abcdefgh")))
	_, child := tr.Start(ctx, "child")
	child.SetAttributes(attribute.Int("b", 1), attribute.Int("c", 2), attribute.Int("b", 3), attribute.Int("d", 4), attribute.Int("e", 5))
	child.AddEvent("e1", trace.WithAttributes(attribute.Int("x", 1), attribute.Int("y", 2)))
	child.AddEvent("e2")
	child.AddLink(trace.Link{SpanContext: root.SpanContext(), Attributes: []attribute.KeyValue{attribute.Int("l", 1)}})
	child.AddLink(trace.Link{SpanContext: root.SpanContext()})
	child.RecordError(errors.New("boom")) // dropped: event limit 1
	child.SetStatus(codes.Error, "bad")
	child.SetName("child renamed")
	child.End()
	root.SetStatus(codes.Ok, "ignored")
	root.SetStatus(codes.Error, "cannot override ok")
	root.End()
	after := time.Now().UnixNano()
	flush(t, tp)

	spans := m.all()
	if len(spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(spans))
	}
	c, r := spans[0], spans[1]
	if c.Name != "child renamed" || r.Name != "root" {
		t.Fatalf("names %q %q", c.Name, r.Name)
	}
	if c.TraceID != r.TraceID || c.ParentSpanID != r.SpanID || r.ParentSpanID.IsValid() || c.ParentIsRemote {
		t.Fatalf("parentage wrong: %+v / %+v", c, r)
	}
	if r.TraceFlags != 0x03 || c.TraceFlags != 0x03 {
		t.Fatalf("flags %02x %02x, want 03 (sampled, random)", r.TraceFlags, c.TraceFlags)
	}
	if len(r.Attributes) != 1 || r.Attributes[0].Value.AsString() != "abcd" {
		got := fmt.Sprint(r.Attributes)
		t.Fatalf("root attributes (value length limit 4): %s", got)
	}
	if len(c.Attributes) != 3 || c.Attributes[0].Value.AsInt64() != 3 || c.DroppedAttributes != 1 {
		t.Fatalf("child attributes %v dropped %d", c.Attributes, c.DroppedAttributes)
	}
	if len(c.Events) != 1 || c.Events[0].Name != "e1" || len(c.Events[0].Attributes) != 1 || c.Events[0].DroppedAttributes != 1 || c.DroppedEvents != 2 {
		t.Fatalf("events %+v dropped %d", c.Events, c.DroppedEvents)
	}
	if len(c.Links) != 1 || c.DroppedLinks != 1 || c.Links[0].SpanContext.SpanID() != r.SpanID {
		t.Fatalf("links %+v dropped %d", c.Links, c.DroppedLinks)
	}
	if c.StatusCode != codes.Error || c.StatusMessage != "bad" || r.StatusCode != codes.Ok || r.StatusMessage != "" {
		t.Fatalf("status %v %q / %v %q", c.StatusCode, c.StatusMessage, r.StatusCode, r.StatusMessage)
	}
	if r.Kind != trace.SpanKindServer || c.Kind != trace.SpanKindInternal {
		t.Fatalf("kinds %v %v", r.Kind, c.Kind)
	}
	if int64(r.StartUnixNano) < before-int64(time.Millisecond) || int64(r.EndUnixNano) > after+int64(time.Millisecond) ||
		r.StartUnixNano > c.StartUnixNano || c.EndUnixNano > r.EndUnixNano {
		t.Fatalf("timestamps out of order: root %d-%d child %d-%d (window %d-%d)", r.StartUnixNano, r.EndUnixNano, c.StartUnixNano, c.EndUnixNano, before, after)
	}
	if c.Scope != r.Scope || c.Scope.Name != "test" || c.Scope.Version != "1.2" {
		t.Fatalf("scope %+v", c.Scope)
	}
}

func TestRemoteParentAndUnsampledSpans(t *testing.T) {
	tp, m := newMemoryProvider(t)
	tr := tp.Tracer("test")
	h := propagation.HeaderCarrier{}
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("tracestate", "foo@@bar=1,congo=t61")
	ctx := propagation.TraceContext{}.Extract(context.Background(), h)
	_, s := tr.Start(ctx, "server")
	s.End()
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	ctx = propagation.TraceContext{}.Extract(context.Background(), h)
	ctx2, u := tr.Start(ctx, "unsampled")
	if u.IsRecording() || u.SpanContext().IsSampled() || u.SpanContext().SpanID() == trace.SpanContextFromContext(ctx).SpanID() {
		t.Fatal("a child of an unsampled remote parent must be a new, unrecorded span")
	}
	out := propagation.HeaderCarrier{}
	propagation.TraceContext{}.Inject(ctx2, out)
	if got := out.Get("traceparent"); got != u.(interface{ Traceparent() string }).Traceparent() || got[36:52] != u.SpanContext().SpanID().String() {
		t.Fatalf("inject %q", got)
	}
	if out.Get("tracestate") != "foo@@bar=1,congo=t61" {
		t.Fatalf("tracestate %q", out.Get("tracestate"))
	}
	u.End()
	flush(t, tp)
	spans := m.all()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	if !spans[0].ParentIsRemote || spans[0].TraceFlags != 0x01 || spans[0].Tracestate != "foo@@bar=1,congo=t61" {
		t.Fatalf("remote child %+v", spans[0])
	}
}

// TestEndedSpansStayTheirOwn checks the reuse rule under the race detector: goroutines keep
// using spans after End while new spans reuse the pooled records; nothing written to an ended
// span reaches an exported span, and an ended span keeps its own context.
func TestEndedSpansStayTheirOwn(t *testing.T) {
	tp, m := newMemoryProvider(t, weft.WithSampler(sampling.AlwaysOn()), weft.WithBatching(64, 16, time.Millisecond, 0))
	tr := tp.Tracer("race")
	const workers, perWorker = 4, 300
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var ended []trace.Span
			for i := 0; i < perWorker; i++ {
				ctx, s := tr.Start(context.Background(), "live")
				s.SetAttributes(attribute.Int("i", i))
				sc := s.SpanContext()
				s.End()
				// Keep using the ended span, and start a child from its context.
				s.SetAttributes(attribute.String("stale", "x"))
				s.AddEvent("stale")
				s.SetName("stale")
				s.SetStatus(codes.Error, "stale")
				s.End()
				if s.IsRecording() || !s.SpanContext().Equal(sc) || !trace.SpanFromContext(ctx).SpanContext().Equal(sc) {
					t.Errorf("ended span changed: %v vs %v", s.SpanContext(), sc)
					return
				}
				_, child := tr.Start(ctx, "child-of-ended")
				if child.SpanContext().TraceID() != sc.TraceID() {
					t.Errorf("child of an ended span got trace %v, want %v", child.SpanContext().TraceID(), sc.TraceID())
				}
				child.End()
				ended = append(ended, s)
				if len(ended) > 8 {
					go func(old []trace.Span) {
						for _, o := range old {
							o.SetAttributes(attribute.String("stale", "late"))
							o.AddEvent("stale")
						}
					}(ended)
					ended = nil
				}
			}
		}(w)
	}
	wg.Wait()
	flush(t, tp)
	spans := m.all()
	st := tp.Stats()
	if int64(len(spans))+st.Dropped != 2*workers*perWorker {
		t.Fatalf("%d exported + %d dropped, want %d", len(spans), st.Dropped, 2*workers*perWorker)
	}
	for _, s := range spans {
		if s.Name == "stale" || len(s.Events) > 0 || s.StatusCode != codes.Unset {
			t.Fatalf("an ended span's write reached an exported span: %+v", s)
		}
		for _, a := range s.Attributes {
			if a.Key == "stale" {
				t.Fatalf("stale attribute exported: %+v", s)
			}
		}
		if s.Name == "live" && (len(s.Attributes) != 1 || s.Attributes[0].Key != "i") {
			t.Fatalf("live span attributes %v", s.Attributes)
		}
	}
}

func TestChildrenCarryFormatStateAndSamplerTracestate(t *testing.T) {
	tp, _ := newMemoryProvider(t)
	tr := tp.Tracer("x")
	h := propagation.HeaderCarrier{}
	h.Set("b3", "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-d")
	ctx := propagation.B3{}.Extract(context.Background(), h)
	ctx, child := tr.Start(ctx, "child")
	_, grandchild := tr.Start(ctx, "grandchild")
	out := propagation.HeaderCarrier{}
	propagation.B3{}.Inject(trace.ContextWithSpan(context.Background(), grandchild), out)
	want := "4bf92f3577b34da6a3ce929d0e0e4736-" + grandchild.SpanContext().SpanID().String() + "-d"
	if out.Get("b3") != want {
		t.Fatalf("b3 %q, want %q: debug travels to every descendant", out.Get("b3"), want)
	}
	child.End()
	grandchild.End()

	cp, _ := newMemoryProvider(t, weft.WithSampler(sampling.ConsistentProbability(1)))
	_, root := cp.Tracer("x").Start(context.Background(), "root")
	if ts := root.SpanContext().TraceState().String(); ts != "ot=th:0" {
		t.Fatalf("tracestate %q, want ot=th:0", ts)
	}
	out = propagation.HeaderCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), root), out)
	if out.Get("tracestate") != "ot=th:0" {
		t.Fatalf("injected tracestate %q", out.Get("tracestate"))
	}
	root.End()
}

func TestSpansEndedAfterShutdownAreDroppedAndCounted(t *testing.T) {
	tp, m := newMemoryProvider(t)
	tr := tp.Tracer("x")
	_, before := tr.Start(context.Background(), "before")
	_, after := tr.Start(context.Background(), "after")
	before.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	after.End()
	if n := len(m.all()); n != 1 {
		t.Fatalf("%d spans exported, want the one ended before Shutdown", n)
	}
	if st := tp.Stats(); st.Dropped != 1 {
		t.Fatalf("stats %+v: the span ended after Shutdown must count as dropped", st)
	}
	if tr2 := tp.Tracer("x"); tr2 != tr {
		t.Fatal("Tracer(name) must return the same tracer")
	}
}

// TestKeptSpansKeepTheirIdentity keeps ended spans while many more are started in other
// goroutines: span handles are allocated in slabs but never reused, so every kept span and the
// context it is keep their own IDs.
func TestKeptSpansKeepTheirIdentity(t *testing.T) {
	tp, _ := newMemoryProvider(t, weft.WithSampler(sampling.AlwaysOn()))
	tr := tp.Tracer("kept")
	type kept struct {
		ctx context.Context
		s   trace.Span
		sc  trace.SpanContext
	}
	var all []kept
	for i := 0; i < 1000; i++ {
		ctx, s := tr.Start(context.Background(), "kept")
		s.End()
		all = append(all, kept{ctx, s, s.SpanContext()})
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				_, s := tr.Start(context.Background(), "churn")
				s.End()
			}
		}()
	}
	wg.Wait()
	seen := map[trace.SpanID]bool{}
	for _, k := range all {
		if !k.s.SpanContext().Equal(k.sc) || !trace.SpanFromContext(k.ctx).SpanContext().Equal(k.sc) || seen[k.sc.SpanID()] {
			t.Fatalf("a kept span changed or repeats: %v", k.sc)
		}
		seen[k.sc.SpanID()] = true
	}
}
