// jaeger-remote samples spans with the OpenTelemetry Go contrib Jaeger remote sampler
// (go.opentelemetry.io/contrib/samplers/jaegerremote), polling a sampling endpoint, and prints
// how many of each operation's root spans it sampled, as JSON. The sampling tests run it
// against weft's /sampling (tests/integration/test_sampling.py).
//
//	jaeger-remote -url http://127.0.0.1:5778/sampling -service checkout -n 2000 -op a -op b
//
// It waits for ten polls of the sampler (100 ms apart; the initial sampler samples half), then
// starts -n root spans of each -op. With -export it also sends the sampled
// spans over OTLP/HTTP to that endpoint (a full /v1/traces URL) at -rate spans a second per
// operation, for -seconds, re-reading the strategy as it goes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/samplers/jaegerremote"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

type ops []string

func (o *ops) String() string     { return strings.Join(*o, ",") }
func (o *ops) Set(v string) error { *o = append(*o, v); return nil }

func main() {
	url := flag.String("url", "http://127.0.0.1:5778/sampling", "the sampling endpoint")
	service := flag.String("service", "jaeger-remote-check", "service.name")
	n := flag.Int("n", 1000, "root spans of each operation (without -export)")
	export := flag.String("export", "", "an OTLP/HTTP traces URL: send sampled spans there")
	rate := flag.Float64("rate", 100, "with -export: root spans a second of each operation")
	seconds := flag.Float64("seconds", 10, "with -export: how long")
	var names ops
	flag.Var(&names, "op", "an operation name (repeatable)")
	flag.Parse()

	initial := sdktrace.TraceIDRatioBased(0.5)
	sampler := jaegerremote.New(*service,
		jaegerremote.WithSamplingServerURL(*url),
		jaegerremote.WithSamplingRefreshInterval(100*time.Millisecond),
		jaegerremote.WithInitialSampler(initial),
	)
	// The sampler does not say when it has fetched a strategy: ten polls' time.
	time.Sleep(time.Second)
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(*service))),
	}
	ctx := context.Background()
	if *export != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(*export))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		opts = append(opts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(200*time.Millisecond)))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	tracer := tp.Tracer("jaeger-remote-check")
	sampled := map[string]int{}
	started := map[string]int{}
	one := func(op string) {
		_, span := tracer.Start(ctx, op)
		if span.SpanContext().IsSampled() {
			sampled[op]++
		}
		started[op]++
		span.End()
	}
	if *export == "" {
		for _, op := range names {
			for i := 0; i < *n; i++ {
				one(op)
			}
		}
	} else {
		begin := time.Now()
		end := begin.Add(time.Duration(*seconds * float64(time.Second)))
		for now := begin; now.Before(end); now = time.Now() {
			due := int(now.Sub(begin).Seconds() * *rate)
			for _, op := range names {
				for started[op] < due {
					one(op)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := tp.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "shutdown:", err)
		os.Exit(2)
	}
	out, _ := json.Marshal(map[string]any{"sampled": sampled, "started": started, "sampler": sampler.Description()})
	fmt.Println(string(out))
}
