package weft_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/protobuf/proto"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/exporters/otlp"
	"weft.dev/sdk/go/sampling"
)

// tee exports to memory and to an OTLP exporter.
type tee struct {
	m *memory
	o *otlp.Exporter
}

func (t tee) Export(ctx context.Context, res *export.Resource, b []*export.SpanData) error {
	t.m.Export(ctx, res, b)
	return t.o.Export(ctx, res, b)
}
func (t tee) Shutdown(ctx context.Context) error { return t.o.Shutdown(ctx) }

// receiver collects the requests an OTLP endpoint received, decoded by the official proto.
type receiver struct {
	mu       sync.Mutex
	requests []*collectortrace.ExportTraceServiceRequest
	headers  []http.Header
}

func (r *receiver) add(req *collectortrace.ExportTraceServiceRequest, h http.Header) {
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.headers = append(r.headers, h)
	r.mu.Unlock()
}

func (r *receiver) spans() (res []*tracepb.ResourceSpans, spans []*tracepb.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.requests {
		for _, rs := range q.ResourceSpans {
			res = append(res, rs)
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}
	return
}

func httpReceiver(t *testing.T, rec *receiver, status func(n int) (int, http.Header, []byte)) *httptest.Server {
	srv := httptest.NewServer(receiverHandler(t, rec, status))
	t.Cleanup(srv.Close)
	return srv
}

// receiverHandler is an OTLP/HTTP endpoint that decodes each request into rec; status, when
// not nil, gives the n-th request's answer.
func receiverHandler(t *testing.T, rec *receiver, status func(n int) (int, http.Header, []byte)) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1))
		if status != nil {
			code, h, body := status(i)
			if code != 200 {
				for k, v := range h {
					w.Header()[k] = v
				}
				w.WriteHeader(code)
				return
			}
			if body != nil {
				defer w.Write(body)
			}
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("gzip: %v", err)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(raw, req); err != nil {
			t.Errorf("request does not decode with the official proto: %v", err)
		}
		rec.add(req, r.Header.Clone())
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
}

type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	rec *receiver
}

func (g *grpcReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.rec.add(req, nil)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startGRPCReceiver(t *testing.T, rec *receiver) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, &grpcReceiver{rec: rec})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// recordVariedSpans records spans that use every field the encoder writes.
func recordVariedSpans(tp *weft.TracerProvider) {
	tr := tp.Tracer("interop", trace.WithInstrumentationVersion("0.9"), trace.WithSchemaURL("https://opentelemetry.io/schemas/1.26.0"))
	other := tp.Tracer("interop.other")
	ctx, root := tr.Start(context.Background(), "GET /items", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", "GET"), attribute.Int("http.response.status_code", 200),
			attribute.Float64("load", 0.25), attribute.Bool("cache.hit", false), attribute.Int64("neg", -7),
			attribute.StringSlice("accept", []string{"a", "b"}), attribute.Int64Slice("ints", []int64{1, -2}),
			attribute.BoolSlice("bools", []bool{true}), attribute.Float64Slice("floats", []float64{1.5}),
			attribute.String("empty", ""), attribute.String("unicode", "grüße, 世界")))
	for i := 0; i < 3; i++ {
		_, c := other.Start(ctx, "SELECT", trace.WithSpanKind(trace.SpanKindClient))
		c.AddEvent("rows", trace.WithAttributes(attribute.Int("n", i)))
		c.AddLink(trace.Link{SpanContext: root.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("why", "batch")}})
		if i == 1 {
			c.SetStatus(codes.Error, "timeout")
		}
		c.End()
	}
	root.SetStatus(codes.Ok, "")
	root.End()
}

func anyEquals(t *testing.T, got *commonpb.AnyValue, want attribute.Value) bool {
	switch want.Type() {
	case attribute.STRING:
		return got.GetStringValue() == want.AsString() && got.Value != nil
	case attribute.INT64:
		_, ok := got.Value.(*commonpb.AnyValue_IntValue)
		return ok && got.GetIntValue() == want.AsInt64()
	case attribute.FLOAT64:
		return got.GetDoubleValue() == want.AsFloat64()
	case attribute.BOOL:
		_, ok := got.Value.(*commonpb.AnyValue_BoolValue)
		return ok && got.GetBoolValue() == want.AsBool()
	case attribute.STRINGSLICE, attribute.INT64SLICE, attribute.BOOLSLICE, attribute.FLOAT64SLICE:
		arr := got.GetArrayValue()
		var items []attribute.Value
		switch want.Type() {
		case attribute.STRINGSLICE:
			for _, s := range want.AsStringSlice() {
				items = append(items, attribute.StringValue(s))
			}
		case attribute.INT64SLICE:
			for _, s := range want.AsInt64Slice() {
				items = append(items, attribute.Int64Value(s))
			}
		case attribute.BOOLSLICE:
			for _, s := range want.AsBoolSlice() {
				items = append(items, attribute.BoolValue(s))
			}
		case attribute.FLOAT64SLICE:
			for _, s := range want.AsFloat64Slice() {
				items = append(items, attribute.Float64Value(s))
			}
		}
		if arr == nil || len(arr.Values) != len(items) {
			return false
		}
		for i := range items {
			if !anyEquals(t, arr.Values[i], items[i]) {
				return false
			}
		}
		return true
	}
	t.Fatalf("unexpected type %v", want.Type())
	return false
}

func attrsEqual(t *testing.T, what string, got []*commonpb.KeyValue, want []attribute.KeyValue) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d attributes, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Key != string(want[i].Key) || !anyEquals(t, got[i].Value, want[i].Value) {
			t.Fatalf("%s: attribute %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

var otlpStatus = map[codes.Code]tracepb.Status_StatusCode{codes.Unset: tracepb.Status_STATUS_CODE_UNSET,
	codes.Ok: tracepb.Status_STATUS_CODE_OK, codes.Error: tracepb.Status_STATUS_CODE_ERROR}

// compareFieldByField checks every decoded span against the record the SDK exported.
func compareFieldByField(t *testing.T, sent []export.SpanData, res []*tracepb.ResourceSpans, got []*tracepb.Span) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("%d spans decoded, %d sent", len(got), len(sent))
	}
	for _, rs := range res {
		attrs := map[string]string{}
		for _, kv := range rs.Resource.Attributes {
			attrs[kv.Key] = kv.Value.GetStringValue()
		}
		if attrs["service.name"] != "interop-test" || attrs["telemetry.sdk.name"] != "weft" || attrs["telemetry.sdk.language"] != "go" {
			t.Fatalf("resource %v", attrs)
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				if (sp.Name == "GET /items") != (ss.Scope.Name == "interop") {
					t.Fatalf("span %q under scope %q", sp.Name, ss.Scope.Name)
				}
			}
			if ss.Scope.Name == "interop" && (ss.Scope.Version != "0.9" || ss.SchemaUrl != "https://opentelemetry.io/schemas/1.26.0") {
				t.Fatalf("scope %v schema %q", ss.Scope, ss.SchemaUrl)
			}
		}
	}
	byID := map[string]*tracepb.Span{}
	for _, s := range got {
		byID[string(s.SpanId)] = s
	}
	for _, d := range sent {
		s := byID[string(d.SpanID[:])]
		if s == nil {
			t.Fatalf("span %v not received", d.SpanID)
		}
		var parent []byte
		if d.ParentSpanID.IsValid() {
			parent = d.ParentSpanID[:]
		}
		wantFlags := uint32(d.TraceFlags&3) | 0x100
		if d.ParentIsRemote {
			wantFlags |= 0x200
		}
		if !bytes.Equal(s.TraceId, d.TraceID[:]) || !bytes.Equal(s.ParentSpanId, parent) || s.Name != d.Name ||
			int(s.Kind) != int(d.Kind) || s.StartTimeUnixNano != d.StartUnixNano || s.EndTimeUnixNano != d.EndUnixNano ||
			s.TraceState != d.Tracestate || s.Flags != wantFlags || s.DroppedAttributesCount != d.DroppedAttributes ||
			s.DroppedEventsCount != d.DroppedEvents || s.DroppedLinksCount != d.DroppedLinks {
			t.Fatalf("span differs:\n got %v\nsent %+v", s, d)
		}
		attrsEqual(t, d.Name, s.Attributes, d.Attributes)
		if len(s.Events) != len(d.Events) || len(s.Links) != len(d.Links) {
			t.Fatalf("%s: %d events %d links, sent %d %d", d.Name, len(s.Events), len(s.Links), len(d.Events), len(d.Links))
		}
		for i, e := range d.Events {
			if s.Events[i].Name != e.Name || s.Events[i].TimeUnixNano != e.TimeUnixNano {
				t.Fatalf("event %v, sent %+v", s.Events[i], e)
			}
			attrsEqual(t, "event", s.Events[i].Attributes, e.Attributes)
		}
		for i, l := range d.Links {
			tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			if !bytes.Equal(s.Links[i].TraceId, tid[:]) || !bytes.Equal(s.Links[i].SpanId, sid[:]) || s.Links[i].Flags != uint32(l.SpanContext.TraceFlags()&3)|0x100 {
				t.Fatalf("link %v, sent %+v", s.Links[i], l)
			}
			attrsEqual(t, "link", s.Links[i].Attributes, l.Attributes)
		}
		if want := otlpStatus[d.StatusCode]; s.Status.GetCode() != want || s.Status.GetMessage() != d.StatusMessage {
			t.Fatalf("status %v, sent %v %q", s.Status, d.StatusCode, d.StatusMessage)
		}
	}
}

func interopProvider(t *testing.T, cfg otlp.Config) (*weft.TracerProvider, *memory, *otlp.Exporter) {
	o, err := otlp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &memory{}
	tp, err := weft.NewTracerProvider(weft.WithExporter(tee{m, o}), weft.WithServiceName("interop-test"),
		weft.WithSampler(sampling.AlwaysOn()))
	if err != nil {
		t.Fatal(err)
	}
	return tp, m, o
}

func TestOTLPHTTPDecodesWithTheOfficialProto(t *testing.T) {
	for _, compression := range []string{"gzip", "none"} {
		t.Run(compression, func(t *testing.T) {
			rec := &receiver{}
			srv := httpReceiver(t, rec, nil)
			tp, m, o := interopProvider(t, otlp.Config{Endpoint: srv.URL + "/v1/traces", Compression: compression,
				Headers: map[string]string{"X-Tenant": "t1"}})
			recordVariedSpans(tp)
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			res, spans := rec.spans()
			compareFieldByField(t, m.all(), res, spans)
			h := rec.headers[0]
			if h.Get("Content-Type") != "application/x-protobuf" || h.Get("X-Tenant") != "t1" ||
				h.Get("User-Agent") != "weft-sdk-go/"+otlp.Version || (h.Get("Content-Encoding") == "gzip") != (compression == "gzip") {
				t.Fatalf("headers %v", h)
			}
			if st := o.Stats(); st.ExportedSpans != 4 || st.Requests != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestOTLPGRPCDecodesWithTheOfficialProto(t *testing.T) {
	rec := &receiver{}
	addr := startGRPCReceiver(t, rec)
	tp, m, o := interopProvider(t, otlp.Config{Protocol: otlp.GRPC, Endpoint: "http://" + addr})
	recordVariedSpans(tp)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, spans := rec.spans()
	compareFieldByField(t, m.all(), res, spans)
	if st := o.Stats(); st.ExportedSpans != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOTLPRetryHonoursRetryAfterAndDropsPermanentFailures(t *testing.T) {
	rec := &receiver{}
	srv := httpReceiver(t, rec, func(n int) (int, http.Header, []byte) {
		switch n {
		case 1:
			return 503, http.Header{"Retry-After": {"0"}}, nil
		case 2:
			return 429, http.Header{"Retry-After": {"1"}}, nil
		case 3:
			return 200, nil, nil
		}
		return 400, nil, nil
	})
	tp, _, o := interopProvider(t, otlp.Config{Endpoint: srv.URL})
	start := time.Now()
	recordVariedSpans(tp)
	flush(t, tp)
	if d := time.Since(start); d < time.Second || d > 4*time.Second {
		t.Fatalf("retries took %v; Retry-After asked for 0 s then 1 s", d)
	}
	recordVariedSpans(tp) // answered 400: dropped at once
	flush(t, tp)
	st := o.Stats()
	if st.ExportedSpans != 4 || st.DroppedPermanent != 4 || st.Requests != 4 {
		t.Fatalf("stats %+v", st)
	}
	tp.Shutdown(context.Background())
}

func TestOTLPPartialSuccessIsCounted(t *testing.T) {
	resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{PartialSuccess: &collectortrace.ExportTracePartialSuccess{RejectedSpans: 1, ErrorMessage: "too old"}})
	srv := httpReceiver(t, &receiver{}, func(int) (int, http.Header, []byte) { return 200, nil, resp })
	tp, _, o := interopProvider(t, otlp.Config{Endpoint: srv.URL})
	recordVariedSpans(tp)
	tp.Shutdown(context.Background())
	if st := o.Stats(); st.ExportedSpans != 3 || st.DroppedRejected != 1 || st.Requests != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBackendDownNeverBlocksAndStaysBounded ends many spans while the endpoint refuses
// connections: End never blocks, the queue drops what does not fit, and shutdown returns by its
// deadline even though the exporter is backing off.
func TestBackendDownNeverBlocksAndStaysBounded(t *testing.T) {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	o, err := otlp.New(otlp.Config{Endpoint: "http://" + addr + "/v1/traces"})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := weft.NewTracerProvider(weft.WithExporter(o), weft.WithSampler(sampling.AlwaysOn()),
		weft.WithBatching(256, 64, 10*time.Millisecond, 0))
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("down")
	start := time.Now()
	for i := 0; i < 20000; i++ {
		_, s := tr.Start(context.Background(), "x")
		s.End()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("20,000 spans took %v with the backend down", d)
	}
	st := tp.Stats()
	if st.Dropped < 20000-256-64 || st.Queued+st.Dropped != 20000 {
		t.Fatalf("stats %+v: the queue must bound what is held", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	tp.Shutdown(ctx)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("shutdown took %v, past its 300 ms deadline", d)
	}
}
