// Command otelhttp shows an application instrumented with otelhttp switching to weft: the
// only weft-specific lines build the provider and the propagators.
//
// It starts an instrumented server, calls it twice through an instrumented client under one
// parent span, shuts the provider down (exporting everything) and prints the trace ID. Export
// goes where the OTEL_* variables say (default http://localhost:4318/v1/traces):
//
//	OTEL_SERVICE_NAME=shop go run ./examples/otelhttp
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"

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
	otel.SetTextMapPropagator(propagation.FromEnv()) // OTEL_PROPAGATORS, default tracecontext,baggage

	// Unchanged application code from here on.
	srv := httptest.NewServer(otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := otel.Tracer("shop").Start(r.Context(), "load cart")
		defer span.End()
		io.WriteString(w, "ok")
	}), "GET /cart"))
	client := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}

	ctx, parent := otel.Tracer("shop").Start(context.Background(), "checkout")
	for i := 0; i < 2; i++ {
		// otelhttp's transport starts one client span per request and injects its context.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/cart", nil)
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	parent.End()
	srv.Close()

	if err := tp.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(parent.SpanContext().TraceID())
}
