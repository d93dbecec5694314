package propagation_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/propagation"
)

// Every propagator's Extract has a fuzz target. The seed corpus is every value of the
// target's headers in spec/vectors, so `go test` runs the seeds as ordinary tests; fuzz with
// `go test -fuzz FuzzTraceContext ./propagation`.

// vectorValues returns every value of the named headers in the propagation vectors.
func vectorValues(t testing.TB, names ...string) []string {
	files, _ := filepath.Glob("../../../spec/vectors/*.json")
	if len(files) == 0 {
		t.Fatal("no spec/vectors")
	}
	var out []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var vf struct {
			Vectors []struct {
				Input struct {
					Headers map[string][]string `json:"headers"`
				} `json:"input"`
			} `json:"vectors"`
		}
		if json.Unmarshal(raw, &vf) != nil {
			continue
		}
		for _, v := range vf.Vectors {
			for k, vals := range v.Input.Headers {
				for _, n := range names {
					if strings.EqualFold(k, n) {
						out = append(out, vals...)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no seeds for %v", names)
	}
	return out
}

// checkExtract extracts with p, then checks the invariants every extract must keep: a
// context it produces is valid and remote, and injecting it and extracting again gives the
// same IDs and sampled flag.
func checkExtract(t *testing.T, p otelprop.TextMapPropagator, h propagation.HeaderCarrier) {
	ctx := p.Extract(context.Background(), h)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	if !sc.IsRemote() {
		t.Fatalf("extracted context is not remote: %v", h)
	}
	out := propagation.HeaderCarrier{}
	p.Inject(ctx, out)
	again := trace.SpanContextFromContext(p.Extract(context.Background(), out))
	if again.TraceID() != sc.TraceID() || again.SpanID() != sc.SpanID() || again.IsSampled() != sc.IsSampled() {
		t.Fatalf("round trip changed the context: %v -> %v -> %v", h, out, again)
	}
	if ts, ok := propagation.TracestateGet(out.Get("tracestate"), "x"); ok && ts == "" {
		t.Fatalf("empty tracestate member injected: %v", out)
	}
	if b := out.Get("baggage"); len(b) > propagation.MaxBaggageBytes {
		t.Fatalf("baggage of %d bytes injected", len(b))
	}
}

func FuzzTraceContext(f *testing.F) {
	tps := vectorValues(f, "traceparent")
	tss := vectorValues(f, "tracestate")
	for i, tp := range tps {
		f.Add(tp, tss[i%len(tss)])
	}
	f.Fuzz(func(t *testing.T, tp, ts string) {
		h := propagation.HeaderCarrier{}
		h.Add("traceparent", tp)
		h.Add("tracestate", ts)
		checkExtract(t, propagation.TraceContext{}, h)
		ctx := propagation.TraceContext{}.Extract(context.Background(), h)
		if _, e := propagation.FromContext(ctx); len(strings.Split(e.Tracestate, ",")) > propagation.MaxTracestateMembers {
			t.Fatalf("tracestate over 32 members: %q", e.Tracestate)
		}
	})
}

func FuzzBaggage(f *testing.F) {
	for _, v := range vectorValues(f, "baggage") {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := propagation.HeaderCarrier{}
		h.Add("baggage", v)
		ctx := propagation.W3CBaggage{}.Extract(context.Background(), h)
		b := propagation.BaggageFromContext(ctx)
		if b.Len() > propagation.MaxBaggageMembers {
			t.Fatalf("%d members", b.Len())
		}
		out := propagation.HeaderCarrier{}
		propagation.W3CBaggage{}.Inject(ctx, out)
		again := propagation.BaggageFromContext(propagation.W3CBaggage{}.Extract(context.Background(), out))
		if again.Len() != b.Len() {
			t.Fatalf("baggage round trip: %v -> %q -> %v", b.Members(), out.Get("baggage"), again.Members())
		}
		for i, m := range again.Members() {
			if w := b.Members()[i]; m.Key != w.Key || m.Value != w.Value {
				t.Fatalf("baggage round trip: %+v != %+v", m, w)
			}
		}
	})
}

func FuzzB3(f *testing.F) {
	singles := vectorValues(f, "b3")
	tids := vectorValues(f, "x-b3-traceid")
	for i, s := range singles {
		f.Add(s, tids[i%len(tids)], "00f067aa0ba902b7", "1", "")
	}
	f.Fuzz(func(t *testing.T, single, tid, sid, sampled, flags string) {
		h := propagation.HeaderCarrier{}
		h.Add("b3", single)
		h.Add("x-b3-traceid", tid)
		h.Add("x-b3-spanid", sid)
		h.Add("x-b3-sampled", sampled)
		h.Add("x-b3-flags", flags)
		checkExtract(t, propagation.B3{}, h)
		checkExtract(t, propagation.B3{Encoding: propagation.B3Multi}, h)
	})
}

func FuzzXray(f *testing.F) {
	for _, v := range vectorValues(f, "x-amzn-trace-id") {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := propagation.HeaderCarrier{}
		h.Add("x-amzn-trace-id", v)
		checkExtract(t, propagation.Xray{}, h)
	})
}

func FuzzJaeger(f *testing.F) {
	for _, v := range vectorValues(f, "uber-trace-id") {
		f.Add(v, "uberctx-k", "v%20x")
	}
	f.Fuzz(func(t *testing.T, v, bagKey, bagValue string) {
		h := propagation.HeaderCarrier{}
		h.Add("uber-trace-id", v)
		h.Add(bagKey, bagValue)
		checkExtract(t, propagation.Jaeger{}, h)
	})
}

func FuzzComposite(f *testing.F) {
	tps := vectorValues(f, "traceparent")
	xs := vectorValues(f, "x-amzn-trace-id")
	for i, tp := range tps {
		f.Add(tp, xs[i%len(xs)], "k=v")
	}
	f.Fuzz(func(t *testing.T, tp, x, bag string) {
		h := propagation.HeaderCarrier{}
		h.Add("traceparent", tp)
		h.Add("x-amzn-trace-id", x)
		h.Add("baggage", bag)
		c, _ := propagation.FromNames([]string{"tracecontext", "baggage", "xray", "b3", "jaeger"})
		c.Extract(context.Background(), h) // must not panic
	})
}
