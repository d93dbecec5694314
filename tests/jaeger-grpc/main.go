// Command jaeger-grpc sends one Jaeger batch over the collector's gRPC API
// (jaeger.api_v2.CollectorService/PostSpans) with Jaeger's own generated client and model
// (github.com/jaegertracing/jaeger-idl), the way the Jaeger agent and Jaeger's gRPC reporters
// send it, to every address given, and prints the trace ID.
//
//	jaeger-grpc [-gzip] [-tenant T] host:port [host:port...]
//
// The batch: a server root with tags of every type, a log and scope tags; a child client span
// with error=true and its own process; a span that FOLLOWS_FROM another trace.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"time"

	model "github.com/jaegertracing/jaeger-idl/model/v1"
	api_v2 "github.com/jaegertracing/jaeger-idl/proto-gen/api_v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
)

func random64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return binary.BigEndian.Uint64(b[:])
}

func batch(now time.Time) (model.Batch, model.TraceID) {
	tid := model.TraceID{High: random64(), Low: random64()}
	other := model.TraceID{High: random64(), Low: random64()}
	root, child, async := model.SpanID(random64()), model.SpanID(random64()), model.SpanID(random64())
	// Microsecond-aligned times with a nanosecond remainder: protobuf carries nanoseconds.
	start := now.Truncate(time.Millisecond).Add(123_456 * time.Nanosecond)
	spans := []*model.Span{
		{
			TraceID:       tid,
			SpanID:        root,
			OperationName: "POST /checkout",
			Flags:         model.SampledFlag,
			StartTime:     start,
			Duration:      9 * time.Millisecond,
			Tags: []model.KeyValue{
				model.String("span.kind", "server"),
				model.String("http.method", "POST"),
				model.Int64("http.status_code", 201),
				model.Float64("ratio", 0.25),
				model.Bool("cached", false),
				model.Binary("blob", []byte{0xde, 0xad}),
				model.String("otel.scope.name", "shop.checkout"),
				model.String("otel.scope.version", "3.1"),
			},
			Logs: []model.Log{{
				Timestamp: start.Add(time.Millisecond),
				Fields:    []model.KeyValue{model.String("event", "cart validated"), model.Int64("items", 3)},
			}},
		},
		{
			TraceID:       tid,
			SpanID:        child,
			OperationName: "charge",
			References:    []model.SpanRef{model.NewChildOfRef(tid, root)},
			StartTime:     start.Add(2 * time.Millisecond),
			Duration:      4 * time.Millisecond,
			Tags: []model.KeyValue{
				model.String("span.kind", "client"),
				model.Bool("error", true),
				model.String("peer.service", "payments"),
			},
			Process: model.NewProcess("payments-gw", []model.KeyValue{model.String("region", "eu-1")}),
		},
		{
			TraceID:       tid,
			SpanID:        async,
			OperationName: "send receipt",
			References: []model.SpanRef{
				model.NewChildOfRef(tid, root),
				model.NewFollowsFromRef(other, model.SpanID(random64())),
			},
			StartTime: start.Add(8 * time.Millisecond),
			Duration:  1500 * time.Microsecond,
			Tags:      []model.KeyValue{model.String("span.kind", "producer"), model.String("messaging.system", "kafka")},
		},
	}
	return model.Batch{
		Spans: spans,
		Process: model.NewProcess("shop-grpc", []model.KeyValue{
			model.String("hostname", "node-9"),
			model.String("ip", "10.1.2.3"),
			model.String("jaeger.version", "Go-2.30.0"),
		}),
	}, tid
}

func main() {
	gz := flag.Bool("gzip", false, "compress the request with gzip")
	tenant := flag.String("tenant", "", "X-Scope-OrgID to send")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: jaeger-grpc [-gzip] [-tenant T] host:port...")
		os.Exit(2)
	}
	b, tid := batch(time.Now())
	for _, addr := range flag.Args() {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if *tenant != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-scope-orgid", *tenant)
		}
		var opts []grpc.CallOption
		if *gz {
			opts = append(opts, grpc.UseCompressor("gzip"))
		}
		_, err = api_v2.NewCollectorServiceClient(conn).PostSpans(ctx, &api_v2.PostSpansRequest{Batch: b}, opts...)
		cancel()
		conn.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", addr, err)
			os.Exit(1)
		}
	}
	fmt.Println(tid.String())
}
