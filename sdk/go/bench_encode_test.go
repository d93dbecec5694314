package weft_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/exporters/otlp"
)

// encodeBatch records 512 spans with 4 attributes and returns their records.
func encodeBatch(b *testing.B) (*export.Resource, []*export.SpanData) {
	m := &memory{}
	tp, _ := newMemoryProviderB(b, m)
	tr := tp.Tracer("bench")
	for i := 0; i < 512; i++ {
		_, s := tr.Start(context.Background(), "GET /api/items")
		s.SetAttributes(attrs4...)
		s.End()
	}
	flush(b, tp)
	var batch []*export.SpanData
	for i := range m.spans {
		batch = append(batch, &m.spans[i])
	}
	return &export.Resource{Attributes: []attribute.KeyValue{attribute.String("service.name", "bench")}}, batch
}

func toAny(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
}

func toKVs(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: toAny(kv.Value)})
	}
	return out
}

// BenchmarkOTLPEncode encodes a batch of 512 spans (4 attributes each) into an
// ExportTraceServiceRequest: weft's hand-written encoder into a reused buffer, beside building
// the official go.opentelemetry.io/proto/otlp messages from the same records and marshalling
// them (what an exporter built on the generated code does). Reported per span.
func BenchmarkOTLPEncode(b *testing.B) {
	res, batch := encodeBatch(b)
	b.Run("weft", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = otlp.AppendRequest(buf[:0], res, batch)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/span")
	})
	b.Run("official-proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: batch[0].Scope.Name}}
			for _, d := range batch {
				ss.Spans = append(ss.Spans, &tracepb.Span{TraceId: d.TraceID[:], SpanId: d.SpanID[:], Name: d.Name,
					Kind: tracepb.Span_SpanKind(d.Kind), StartTimeUnixNano: d.StartUnixNano, EndTimeUnixNano: d.EndUnixNano,
					Attributes: toKVs(d.Attributes), Flags: uint32(d.TraceFlags) | 0x100})
			}
			req := &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
				Resource: &resourcepb.Resource{Attributes: toKVs(res.Attributes)}, ScopeSpans: []*tracepb.ScopeSpans{ss}}}}
			if _, err := proto.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/span")
	})
}
