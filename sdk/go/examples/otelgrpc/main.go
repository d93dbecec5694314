// Command otelgrpc shows a gRPC client and server instrumented with otelgrpc switching to
// weft. It serves the standard gRPC health service, calls it twice under one parent span,
// shuts the provider down and prints the trace ID. Export goes where the OTEL_* variables say:
//
//	OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 go run ./examples/otelgrpc
package main

import (
	"context"
	"fmt"
	"log"
	"net"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/propagation"
)

func main() {
	// The switch: a weft provider instead of the OpenTelemetry SDK's.
	tp, err := weft.NewTracerProvider(weft.WithEnv())
	if err != nil {
		log.Fatal(err)
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.FromEnv())

	// Unchanged application code from here on.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		log.Fatal(err)
	}
	client := healthpb.NewHealthClient(conn)
	ctx, parent := otel.Tracer("health-check").Start(context.Background(), "check twice")
	for i := 0; i < 2; i++ {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			log.Fatal(err)
		}
	}
	parent.End()
	conn.Close()
	srv.GracefulStop()

	if err := tp.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(parent.SpanContext().TraceID())
}
