package weft_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/id"
)

// TestEnvironmentConfiguresTheProviderAndExporter sets the standard OTEL_* variables and checks
// what a real OTLP/HTTP receiver gets.
func TestEnvironmentConfiguresTheProviderAndExporter(t *testing.T) {
	rec := &receiver{}
	srv := httpReceiver(t, rec, nil)
	t.Setenv("OTEL_SERVICE_NAME", "env-service")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,team=a%20b")
	t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "1.0")
	t.Setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1")
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "3")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=secret%3D1")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")
	tp, err := weft.NewTracerProvider(weft.WithEnv())
	if err != nil {
		t.Fatal(err)
	}
	_, s := tp.Tracer("env").Start(context.Background(), "op")
	s.SetAttributes(attribute.String("first", "abcdef"), attribute.String("second", "x"))
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, spans := rec.spans()
	if len(spans) != 1 || len(res) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	attrs := map[string]string{}
	for _, kv := range res[0].Resource.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	if attrs["service.name"] != "env-service" || attrs["deployment.environment.name"] != "test" || attrs["team"] != "a b" {
		t.Fatalf("resource %v", attrs)
	}
	sp := spans[0]
	if len(sp.Attributes) != 1 || sp.Attributes[0].Value.GetStringValue() != "abc" || sp.DroppedAttributesCount != 1 {
		t.Fatalf("limits not applied: %v dropped %d", sp.Attributes, sp.DroppedAttributesCount)
	}
	h := rec.headers[0]
	if h.Get("X-Api-Key") != "secret=1" || h.Get("Content-Encoding") != "" {
		t.Fatalf("headers %v", h)
	}
}

func TestEnvironmentSamplerAndDisabledSDK(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	tp, err := weft.NewTracerProvider(weft.WithEnv())
	if err != nil {
		t.Fatal(err)
	}
	if _, s := tp.Tracer("x").Start(context.Background(), "op"); s.IsRecording() || !s.SpanContext().IsValid() {
		t.Fatal("always_off must give valid, unrecorded spans")
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "no_such_sampler")
	if _, err := weft.NewTracerProvider(weft.WithEnv()); err == nil {
		t.Fatal("an unknown sampler must be an error")
	}
}

func TestXrayGeneratorPutsEpochSecondsFirst(t *testing.T) {
	tp, m := newMemoryProvider(t, weft.WithIDGenerator(id.Xray{}))
	before := uint32(time.Now().Unix())
	_, s := tp.Tracer("x").Start(context.Background(), "op")
	s.End()
	after := uint32(time.Now().Unix())
	flush(t, tp)
	tid := m.all()[0].TraceID
	if ts := binary.BigEndian.Uint32(tid[:4]); ts < before || ts > after {
		t.Fatalf("trace ID %s starts with %d, want %d..%d", tid, ts, before, after)
	}
	if m.all()[0].TraceFlags&0x02 == 0 {
		t.Fatal("X-Ray trace IDs keep 7 random bytes: the random flag must be set")
	}
}
