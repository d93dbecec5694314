// jaeger-remote samples spans with the OpenTelemetry Go contrib Jaeger remote sampler
// (go.opentelemetry.io/contrib/samplers/jaegerremote), polling a sampling endpoint, and prints
// how many of each operation's root spans it sampled, as JSON. The sampling tests run it
// against weft's /sampling (tests/integration/test_sampling.py).
//
//	jaeger-remote -url http://127.0.0.1:5778/sampling -service checkout -n 2000 -op a -op b
//
// It waits for ten polls of the sampler (100 ms apart; the initial sampler samples half), then
// starts -n root spans of each -op. With -export it also sends the sampled
// spans over OTLP/HTTP to that endpoint (a full /v1/traces URL) at -rate root spans a second per
// operation (or -op name=rate), for -seconds, re-reading the strategy as it goes; -step-after
// multiplies one operation's rate by -step-factor from then on.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
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
	rate := flag.Float64("rate", 100, "with -export: root spans a second of each operation without its own")
	seconds := flag.Float64("seconds", 10, "with -export: how long")
	stepAfter := flag.Float64("step-after", 0, "with -export: after this many seconds, multiply -step-op's rate")
	stepOp := flag.String("step-op", "", "the operation whose rate steps")
	stepFactor := flag.Float64("step-factor", 10, "the step's factor")
	var names ops
	flag.Var(&names, "op", "an operation name, or name=rate with -export (repeatable)")
	flag.Parse()
	rates := map[string]float64{}
	for i, op := range names {
		if name, r, ok := strings.Cut(op, "="); ok && *export != "" {
			v, err := strconv.ParseFloat(r, 64)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad rate in -op", op)
				os.Exit(2)
			}
			names[i], rates[name] = name, v
		} else {
			rates[op] = *rate
		}
	}

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
		// Roots due by `at` seconds: the rate, times the step's factor after the step.
		due := func(op string, at float64) int {
			r := rates[op]
			if op == *stepOp && *stepAfter > 0 && at > *stepAfter {
				return int(*stepAfter*r + (at-*stepAfter)*r**stepFactor)
			}
			return int(at * r)
		}
		for now := begin; now.Before(end); now = time.Now() {
			at := now.Sub(begin).Seconds()
			for _, op := range names {
				for n := due(op, at); started[op] < n; {
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
