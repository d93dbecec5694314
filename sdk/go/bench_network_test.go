//go:build weftbench

package weft_test

// Span to the network: a sampled span with 4 attributes from Start to a local OTLP receiver,
// per span, with weft's exporter beside otlptracehttp and otlptracegrpc. Built only with
// -tags weftbench (bench.sh), so that the test stage does not compile the OpenTelemetry
// exporters.

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/exporters/otlp"
	"weft.dev/sdk/go/sampling"
)

// discardCodec lets the benchmark's gRPC receiver take requests as bytes without decoding
// them, so that the receiver costs the same whichever SDK sent them.
type discardCodec struct{}

func (discardCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (discardCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = data
	return nil
}
func (discardCodec) Name() string { return "proto" }

var _ encoding.Codec = discardCodec{}

// netReceiver is an OTLP endpoint over HTTP or gRPC that reads each request whole without
// decoding it, counts its bytes and answers with an empty ExportTraceServiceResponse.
type netReceiver struct {
	requests, bytes atomic.Int64
}

func (n *netReceiver) startHTTP(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := io.Copy(io.Discard, r.Body)
		n.requests.Add(1)
		n.bytes.Add(c)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

func (n *netReceiver) startGRPC(b *testing.B) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(discardCodec{}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			var req []byte
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			n.requests.Add(1)
			n.bytes.Add(int64(len(req)))
			resp := []byte{}
			return stream.SendMsg(&resp)
		}))
	go s.Serve(lis)
	b.Cleanup(s.Stop)
	return lis.Addr().String()
}

// BenchmarkSpanToNetwork: both SDKs gzip, batch 512 spans, queue 65,536 spans; ForceFlush runs
// every flushEvery spans and at the end, inside the timed region, so every span has been sent
// (or counted in dropped/op, which stays 0).
func BenchmarkSpanToNetwork(b *testing.B) {
	ctx := context.Background()
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	for _, proto := range []string{"http", "grpc"} {
		for _, par := range []bool{false, true} {
			name := proto + "/1-goroutine"
			if par {
				name = proto + "/gomaxprocs-goroutines"
			}
			b.Run(name+"/weft", func(b *testing.B) {
				n := &netReceiver{}
				cfg := otlp.Config{Compression: "gzip"}
				if proto == "http" {
					cfg.Endpoint = n.startHTTP(b) + "/v1/traces"
				} else {
					cfg.Protocol, cfg.Endpoint = otlp.GRPC, "http://"+n.startGRPC(b)
				}
				tp, err := weft.NewTracerProvider(weft.WithSampler(sampling.AlwaysOn()), weft.WithOTLP(cfg),
					weft.WithBatching(benchQueue, 512, 0, 0))
				if err != nil {
					b.Fatal(err)
				}
				runNetwork(b, tp.Tracer("bench"), par, func() { tp.ForceFlush(ctx) })
				b.ReportMetric(float64(tp.Stats().Dropped)/float64(b.N), "dropped/op")
				reportWire(b, n, proto)
				tp.Shutdown(ctx)
			})
			b.Run(name+"/otel", func(b *testing.B) {
				n := &netReceiver{}
				var exp sdktrace.SpanExporter
				var err error
				if proto == "http" {
					exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(n.startHTTP(b)+"/v1/traces"),
						otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
				} else {
					exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(n.startGRPC(b)), otlptracegrpc.WithInsecure(),
						otlptracegrpc.WithCompressor("gzip"))
				}
				if err != nil {
					b.Fatal(err)
				}
				ce := &countingSpanExporter{SpanExporter: exp}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
					sdktrace.WithBatcher(ce, sdktrace.WithMaxQueueSize(benchQueue), sdktrace.WithMaxExportBatchSize(512)))
				runNetwork(b, tp.Tracer("bench"), par, func() { tp.ForceFlush(ctx) })
				b.ReportMetric(float64(int64(b.N)-ce.spans.Load())/float64(b.N), "dropped/op")
				reportWire(b, n, proto)
				tp.Shutdown(ctx)
			})
		}
	}
}

// flushEvery is how many spans a goroutine ends between two flushes: the exporters are slower
// than the producers, so without the flushes both SDKs would drop most spans and the benchmark
// would time their drop paths. Each goroutine keeps at most flushEvery spans in the 65,536-span
// queue, so nothing is dropped and ns/op is the cost of a span all the way to the receiver.
const flushEvery = 8192

func runNetwork(b *testing.B, tr trace.Tracer, par bool, flush func()) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	if par {
		b.RunParallel(func(pb *testing.PB) {
			for i := 1; pb.Next(); i++ {
				spanCases[1].run(ctx, tr)
				if i%flushEvery == 0 {
					flush()
				}
			}
		})
	} else {
		for i := 1; i <= b.N; i++ {
			spanCases[1].run(ctx, tr)
			if i%flushEvery == 0 {
				flush()
			}
		}
	}
	flush()
	b.StopTimer()
}

// reportWire reports the bytes the receiver read per span: the gzip body over HTTP, the
// decompressed protobuf over gRPC (which decompresses before the codec sees the message).
func reportWire(b *testing.B, n *netReceiver, proto string) {
	unit := "gzip-B/span"
	if proto == "grpc" {
		unit = "proto-B/span"
	}
	b.ReportMetric(float64(n.bytes.Load())/float64(b.N), unit)
}

// countingSpanExporter counts the spans handed to the OpenTelemetry exporter.
type countingSpanExporter struct {
	sdktrace.SpanExporter
	spans atomic.Int64
}

func (c *countingSpanExporter) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	c.spans.Add(int64(len(s)))
	return c.SpanExporter.ExportSpans(ctx, s)
}
