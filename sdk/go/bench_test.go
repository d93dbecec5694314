package weft_test

// Benchmarks beside the OpenTelemetry Go SDK (go.opentelemetry.io/otel/sdk) in the same run.
// Each benchmark has a /weft and an /otel sub-benchmark doing the same work through the same
// API; bench.sh runs them and BENCHMARKS.md records the results and ratios.

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/propagation"
	"weft.dev/sdk/go/sampling"
)

// discard is an exporter that drops every batch (the pipeline's own cost only). While hold is
// open (not nil and not closed), Export waits for it.
type discard struct {
	spans atomic.Int64
	hold  chan struct{}
}

func (d *discard) Export(_ context.Context, _ *export.Resource, b []*export.SpanData) error {
	if d.hold != nil {
		<-d.hold
	}
	d.spans.Add(int64(len(b)))
	return nil
}
func (d *discard) Shutdown(context.Context) error { return nil }

func weftTracer(b *testing.B, s sampling.Sampler, opts ...weft.Option) (trace.Tracer, *weft.TracerProvider) {
	tp, err := weft.NewTracerProvider(append([]weft.Option{weft.WithSampler(s), weft.WithExporter(&discard{})}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("bench"), tp
}

func otelTracer(b *testing.B, s sdktrace.Sampler) (trace.Tracer, *sdktrace.TracerProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("bench"), tp
}

// otelIDGenerator returns the OpenTelemetry SDK's default ID generator, which is not exported.
func otelIDGenerator() sdktrace.IDGenerator {
	tp := sdktrace.NewTracerProvider()
	f := reflect.ValueOf(tp).Elem().FieldByName("idGenerator")
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(sdktrace.IDGenerator)
}

// mallocs reports heap allocations per operation with decimals, from runtime.MemStats: go test
// prints allocs/op truncated to an integer, which shows one allocation per 42 operations as 0.
// Call it before the loop and the function it returns after.
//
// It also reports cpu-ns/op: the CPU time of the whole process per operation (the benchmark's
// goroutine, the export goroutine and the GC), which another process on the same cores changes
// less than ns/op, the wall-clock time.
func mallocs(b *testing.B) func() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	start, cpu := m.Mallocs, processCPU()
	return func() {
		used := processCPU() - cpu
		runtime.ReadMemStats(&m)
		b.ReportMetric(float64(m.Mallocs-start)/float64(b.N), "mallocs/op")
		if used > 0 {
			b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

var sinkTrace trace.TraceID
var sinkSpan trace.SpanID

func BenchmarkIDGeneration(b *testing.B) {
	b.Run("weft", func(b *testing.B) {
		g := id.Random{}
		b.ReportAllocs()
		for b.Loop() {
			sinkTrace, sinkSpan = g.NewIDs()
		}
	})
	b.Run("otel", func(b *testing.B) {
		g := otelIDGenerator()
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			sinkTrace, sinkSpan = g.NewIDs(ctx)
		}
	})
}

func BenchmarkIDGenerationParallel(b *testing.B) {
	b.Run("weft", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := id.Random{}
			for pb.Next() {
				g.NewIDs()
			}
		})
	})
	b.Run("otel", func(b *testing.B) {
		g := otelIDGenerator()
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.NewIDs(ctx)
			}
		})
	})
}

const benchTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

var sinkCtx context.Context
var sinkSC trace.SpanContext

func BenchmarkTraceparentExtract(b *testing.B) {
	carrier := otelprop.MapCarrier{"traceparent": benchTraceparent}
	ctx := context.Background()
	b.Run("weft", func(b *testing.B) {
		p := propagation.TraceContext{}
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			sinkCtx = p.Extract(ctx, carrier)
		}
		done()
	})
	b.Run("weft-parse-only", func(b *testing.B) {
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			sinkSC, _ = propagation.ExtractTraceparent(carrier)
		}
		done()
	})
	b.Run("otel", func(b *testing.B) {
		p := otelprop.TraceContext{}
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			sinkCtx = p.Extract(ctx, carrier)
		}
		done()
	})
}

func BenchmarkTraceparentInject(b *testing.B) {
	// The context the OpenTelemetry propagator's extract produced.
	remote := otelprop.TraceContext{}.Extract(context.Background(), otelprop.MapCarrier{"traceparent": benchTraceparent})
	b.Run("weft-own-span", func(b *testing.B) {
		tr, _ := weftTracer(b, sampling.AlwaysOn())
		ctx, s := tr.Start(context.Background(), "x")
		defer s.End()
		carrier := otelprop.MapCarrier{"traceparent": ""}
		p := propagation.TraceContext{}
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			p.Inject(ctx, carrier)
		}
		done()
	})
	b.Run("weft-remote-context", func(b *testing.B) {
		// The context weft's extract produced (its remote span caches the header string).
		p := propagation.TraceContext{}
		extracted := p.Extract(context.Background(), otelprop.MapCarrier{"traceparent": benchTraceparent})
		carrier := otelprop.MapCarrier{"traceparent": ""}
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			p.Inject(extracted, carrier)
		}
		done()
	})
	b.Run("otel-own-span", func(b *testing.B) {
		tr, _ := otelTracer(b, sdktrace.AlwaysSample())
		ctx, s := tr.Start(context.Background(), "x")
		defer s.End()
		carrier := otelprop.MapCarrier{"traceparent": ""}
		p := otelprop.TraceContext{}
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			p.Inject(ctx, carrier)
		}
		done()
	})
	b.Run("otel-remote-context", func(b *testing.B) {
		carrier := otelprop.MapCarrier{"traceparent": ""}
		p := otelprop.TraceContext{}
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			p.Inject(remote, carrier)
		}
		done()
	})
}

var attrs4 = []attribute.KeyValue{attribute.String("http.request.method", "GET"), attribute.Int("http.response.status_code", 200),
	attribute.String("url.path", "/api/items"), attribute.Bool("cache.hit", true)}

var attrs10 = append(append([]attribute.KeyValue(nil), attrs4...), attribute.String("server.address", "example.com"),
	attribute.Int("server.port", 443), attribute.String("user_agent.original", "bench/1.0"), attribute.Float64("load", 0.5),
	attribute.String("network.protocol.version", "1.1"), attribute.Int64("http.request.body.size", 1234))

type spanCase struct {
	name string
	run  func(ctx context.Context, tr trace.Tracer)
}

var spanCases = []spanCase{
	{"sampled-0-attrs", func(ctx context.Context, tr trace.Tracer) {
		_, s := tr.Start(ctx, "op")
		s.End()
	}},
	{"sampled-4-attrs", func(ctx context.Context, tr trace.Tracer) {
		_, s := tr.Start(ctx, "op")
		s.SetAttributes(attrs4...)
		s.End()
	}},
	{"sampled-10-attrs-1-event", func(ctx context.Context, tr trace.Tracer) {
		_, s := tr.Start(ctx, "op")
		s.SetAttributes(attrs10...)
		s.AddEvent("cache.miss")
		s.End()
	}},
}

// warmUpWeft brings a weft provider to its steady state before a sampled benchmark counts
// allocations. Span records come from a free list, and a record is allocated (with its
// attribute slice) only when the free list is empty, that is when more spans wait in the export
// queue than ever before; so the number of records grows to the deepest the queue has been,
// at most its capacity, and stays there. On a shared 2-core machine the export goroutine is
// sometimes descheduled for long enough that the queue reaches new depths for minutes. This
// holds the exporter until the queue is full (a span is dropped), then lets it go: every record
// returns to the free list, which then holds as many records as the queue can.
func warmUpWeft(ctx context.Context, tr trace.Tracer, tp *weft.TracerProvider, d *discard, c spanCase) {
	log.SetOutput(io.Discard) // the drop that says the queue is full is logged
	defer log.SetOutput(os.Stderr)
	for tp.Stats().Dropped == 0 {
		c.run(ctx, tr)
	}
	close(d.hold)
	tp.ForceFlush(ctx)
}

func BenchmarkSpanStartEnd(b *testing.B) {
	ctx := context.Background()
	b.Run("unsampled/weft", func(b *testing.B) {
		tr, _ := weftTracer(b, sampling.AlwaysOff())
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			_, s := tr.Start(ctx, "op")
			s.End()
		}
		done()
	})
	b.Run("unsampled/otel", func(b *testing.B) {
		tr, _ := otelTracer(b, sdktrace.NeverSample())
		b.ReportAllocs()
		done := mallocs(b)
		for b.Loop() {
			_, s := tr.Start(ctx, "op")
			s.End()
		}
		done()
	})
	for _, c := range spanCases {
		b.Run(c.name+"/weft", func(b *testing.B) {
			// A queue big enough that the discard exporter keeps up: nothing is dropped.
			d := &discard{hold: make(chan struct{})}
			tp, err := weft.NewTracerProvider(weft.WithSampler(sampling.AlwaysOn()), weft.WithExporter(d),
				weft.WithBatching(1<<16, 512, 0, 0))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			tr := tp.Tracer("bench")
			warmUpWeft(ctx, tr, tp, d, c)
			dropped := tp.Stats().Dropped
			b.ReportAllocs()
			done := mallocs(b)
			for b.Loop() {
				c.run(ctx, tr)
			}
			done()
			b.ReportMetric(float64(tp.Stats().Dropped-dropped), "dropped")
		})
		b.Run(c.name+"/otel", func(b *testing.B) {
			tr, _ := otelTracer(b, sdktrace.AlwaysSample())
			b.ReportAllocs()
			done := mallocs(b)
			for b.Loop() {
				c.run(ctx, tr)
			}
			done()
		})
	}
}

// BenchmarkSpanToExporter measures a span from Start to the exporter, per span: Start, End,
// the queue and batching, with an exporter that discards; once from 1 goroutine and once from
// GOMAXPROCS goroutines. The benchmark flushes before it stops the clock, so every span reaches
// the exporter or is counted as dropped.
func BenchmarkSpanToExporter(b *testing.B) {
	ctx := context.Background()
	// Drops are reported as a metric; the rate-limited drop log would split the result lines.
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	for _, par := range []bool{false, true} {
		name := "1-goroutine"
		if par {
			name = "gomaxprocs-goroutines"
		}
		b.Run(name+"/weft", func(b *testing.B) {
			d := &discard{}
			tp, _ := weft.NewTracerProvider(weft.WithSampler(sampling.AlwaysOn()), weft.WithExporter(d),
				weft.WithBatching(benchQueue, 512, 0, 0))
			tr := tp.Tracer("bench")
			b.ReportAllocs()
			b.ResetTimer()
			done := mallocs(b)
			if par {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						spanCases[1].run(ctx, tr)
					}
				})
			} else {
				for i := 0; i < b.N; i++ {
					spanCases[1].run(ctx, tr)
				}
			}
			tp.ForceFlush(ctx)
			b.StopTimer()
			done()
			st := tp.Stats()
			b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
			tp.Shutdown(ctx)
		})
		b.Run(name+"/otel", func(b *testing.B) {
			exp := &countingOtelExporter{}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
				sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(benchQueue), sdktrace.WithMaxExportBatchSize(512)))
			tr := tp.Tracer("bench")
			b.ReportAllocs()
			b.ResetTimer()
			done := mallocs(b)
			if par {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						spanCases[1].run(ctx, tr)
					}
				})
			} else {
				for i := 0; i < b.N; i++ {
					spanCases[1].run(ctx, tr)
				}
			}
			tp.ForceFlush(ctx)
			b.StopTimer()
			done()
			b.ReportMetric(float64(int64(b.N)-exp.spans.Load())/float64(b.N), "dropped/op")
			tp.Shutdown(ctx)
		})
	}
}

// benchQueue is both SDKs' export queue capacity in the span-to-exporter benchmark.
const benchQueue = 1 << 16

type countingOtelExporter struct{ spans atomic.Int64 }

func (c *countingOtelExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	c.spans.Add(int64(len(s)))
	return nil
}
func (c *countingOtelExporter) Shutdown(context.Context) error { return nil }

// BenchmarkOtelhttpHandler serves an otelhttp-instrumented handler over loopback HTTP with
// each SDK and with none (the otel no-op provider), from GOMAXPROCS*4 concurrent clients, and
// reports requests/s, the p99 latency and GC cycles per 10,000 requests.
func BenchmarkOtelhttpHandler(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, s := trace.SpanFromContext(r.Context()).TracerProvider().Tracer("app").Start(r.Context(), "work")
		s.SetAttributes(attrs4...)
		s.End()
		io.WriteString(w, "ok")
	})
	for _, c := range []struct {
		name string
		tp   func(b *testing.B) trace.TracerProvider
	}{
		{"none", func(b *testing.B) trace.TracerProvider { return noop.NewTracerProvider() }},
		{"weft", func(b *testing.B) trace.TracerProvider {
			_, tp := weftTracer(b, sampling.AlwaysOn())
			return tp
		}},
		{"otel", func(b *testing.B) trace.TracerProvider {
			_, tp := otelTracer(b, sdktrace.AlwaysSample())
			return tp
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			tp := c.tp(b)
			srv := httptest.NewServer(otelhttp.NewHandler(handler, "GET /", otelhttp.WithTracerProvider(tp),
				otelhttp.WithPropagators(otelprop.TraceContext{})))
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 256}
			client := &http.Client{Transport: tr}
			defer tr.CloseIdleConnections()
			var mu sync.Mutex
			var lat []time.Duration
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				var local []time.Duration
				for pb.Next() {
					t0 := time.Now()
					resp, err := client.Get(srv.URL + "/")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)*10000/float64(b.N), "GC/10k-req")
		})
	}
}
