// Package weft is the weft SDK for Go: a go.opentelemetry.io/otel/trace TracerProvider that
// records spans with no allocation per span in steady state and exports them over OTLP.
//
// An application switches from the OpenTelemetry SDK by building a weft provider:
//
//	tp, err := weft.NewTracerProvider(weft.WithEnv())
//	if err != nil { ... }
//	defer tp.Shutdown(context.Background())
//	otel.SetTracerProvider(tp)
package weft
