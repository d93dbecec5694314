package weft_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/exporters/otlp"
	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/propagation"
	"weft.dev/sdk/go/sampling"
)

// weftServer is a running weft binary with its own ports and data directory.
type weftServer struct {
	http, grpc, otlpHTTP int
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startWeft runs $WEFT_BIN, or skips the test (saying so) when WEFT_BIN is unset. env adds
// variables (WEFT_*) after the defaults, so they win.
func startWeft(t *testing.T, env ...string) *weftServer {
	bin := os.Getenv("WEFT_BIN")
	if bin == "" {
		t.Skip("WEFT_BIN is not set; not running the end-to-end test against the weft binary")
	}
	w := &weftServer{http: freePort(t), grpc: freePort(t), otlpHTTP: freePort(t)}
	cmd := exec.Command(bin, "--data-dir", t.TempDir(), "--http-port", fmt.Sprint(w.http),
		"--otlp-grpc-port", fmt.Sprint(w.grpc), "--otlp-http-port", fmt.Sprint(w.otlpHTTP))
	// Every listener the test does not use is off (0), so that a weft or Jaeger running on the
	// default ports does not stop this one from starting; newer binaries also serve Jaeger
	// remote sampling (WEFT_SAMPLING_*), which older ones ignore.
	cmd.Env = append(os.Environ(), "WEFT_ZIPKIN_PORT=0", "WEFT_JAEGER_HTTP_PORT=0", "WEFT_JAEGER_GRPC_PORT=0",
		"WEFT_JAEGER_QUERY_PORT=0", "WEFT_XRAY_PORT=0", "WEFT_JAEGER_COMPACT_PORT=0", "WEFT_JAEGER_BINARY_PORT=0",
		"WEFT_SAMPLING_HTTP_PORT=0", "WEFT_SAMPLING_GRPC_PORT=0")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("cannot start %s: %v", bin, err)
	}
	// exited is closed when the process has ended (waitErr is then set); the cleanup can wait
	// for it even when the readiness loop below has already seen it end.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", w.http))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return w
			}
		}
		select {
		case <-exited:
			t.Fatalf("weft exited before it was ready: %v", waitErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft did not become ready on port %d", w.http)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readTrace polls GET /api/traces/<id> (protobuf) until it holds n spans.
func (w *weftServer) readTrace(t *testing.T, traceID string, n int) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/api/traces/%s", w.http, traceID), nil)
		req.Header.Set("Accept", "application/protobuf")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var spans []*tracepb.Span
		switch resp.StatusCode {
		case 200:
			var td tracepb.TracesData
			if err := proto.Unmarshal(body, &td); err != nil {
				t.Fatalf("trace %s does not decode as TracesData: %v", traceID, err)
			}
			for _, rs := range td.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					spans = append(spans, ss.Spans...)
				}
			}
			if len(spans) >= n {
				return spans
			}
		case 404:
		default:
			t.Fatalf("GET /api/traces/%s: %d %s", traceID, resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d of %d spans readable after 30 s", traceID, len(spans), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestExportToWeftAndReadBack(t *testing.T) {
	w := startWeft(t)
	for _, c := range []struct {
		label string
		cfg   otlp.Config
	}{
		{"http", otlp.Config{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/v1/traces", w.otlpHTTP)}},
		{"grpc", otlp.Config{Protocol: otlp.GRPC, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", w.grpc)}},
	} {
		t.Run(c.label, func(t *testing.T) {
			o, err := otlp.New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := &memory{}
			tp, err := weft.NewTracerProvider(weft.WithExporter(tee{m, o}), weft.WithServiceName("weft-sdk-go-e2e"),
				weft.WithSampler(sampling.AlwaysOn()))
			if err != nil {
				t.Fatal(err)
			}
			tr := tp.Tracer("e2e")
			ctx, root := tr.Start(context.Background(), c.label+" root", trace.WithSpanKind(trace.SpanKindServer))
			for i := 0; i < 2; i++ {
				_, ch := tr.Start(ctx, fmt.Sprintf("%s child %d", c.label, i))
				ch.SetAttributes(attribute.Int("child.index", i), attribute.String("label", c.label))
				ch.AddEvent("work", trace.WithAttributes(attribute.Bool("ok", true)))
				ch.SetStatus(codes.Ok, "")
				ch.End()
			}
			root.End()
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := o.Stats(); st.ExportedSpans != 3 {
				t.Fatalf("exporter stats %+v", st)
			}
			sent := m.all()
			got := w.readTrace(t, root.SpanContext().TraceID().String(), len(sent))
			compareReadBack(t, sent, got)
		})
	}
}

func compareReadBack(t *testing.T, sent []export.SpanData, got []*tracepb.Span) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("read back %d spans, sent %d", len(got), len(sent))
	}
	for _, d := range sent {
		var s *tracepb.Span
		for _, g := range got {
			if string(g.SpanId) == string(d.SpanID[:]) {
				s = g
			}
		}
		if s == nil {
			t.Fatalf("span %s (%s) not read back", d.SpanID, d.Name)
		}
		if string(s.TraceId) != string(d.TraceID[:]) || s.Name != d.Name || s.StartTimeUnixNano != d.StartUnixNano ||
			s.EndTimeUnixNano != d.EndUnixNano || len(s.Attributes) != len(d.Attributes) || len(s.Events) != len(d.Events) {
			t.Fatalf("read back %v, sent %+v", s, d)
		}
		if d.ParentSpanID.IsValid() && string(s.ParentSpanId) != string(d.ParentSpanID[:]) {
			t.Fatalf("%s: parent %x, sent %s", d.Name, s.ParentSpanId, d.ParentSpanID)
		}
	}
}

// TestOtelhttpServerAndClientTraceReadsBackWhole runs an otelhttp-instrumented client and
// server, switched to weft with otel.SetTracerProvider, and reads their trace back from weft.
func TestOtelhttpServerAndClientTraceReadsBackWhole(t *testing.T) {
	w := startWeft(t)
	o, err := otlp.New(otlp.Config{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/v1/traces", w.otlpHTTP)})
	if err != nil {
		t.Fatal(err)
	}
	m := &memory{}
	tp, err := weft.NewTracerProvider(weft.WithExporter(tee{m, o}), weft.WithServiceName("otelhttp-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.Composite{propagation.TraceContext{}, propagation.W3CBaggage{}})
	defer func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) }()

	backend := httptest.NewServer(otelhttp.NewHandler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, s := otel.Tracer("backend").Start(r.Context(), "load item")
		s.End()
		io.WriteString(rw, "ok")
	}), "backend"))
	defer backend.Close()
	client := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}
	frontend := httptest.NewServer(otelhttp.NewHandler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		for i := 0; i < 2; i++ {
			req, _ := http.NewRequestWithContext(r.Context(), "GET", backend.URL+"/item", nil)
			resp, err := client.Do(req)
			if err != nil {
				http.Error(rw, err.Error(), 500)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		io.WriteString(rw, "done")
	}), "frontend"))
	defer frontend.Close()

	resp, err := http.Get(frontend.URL + "/checkout")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	backend.Close()
	frontend.Close()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	sent := m.all()
	// frontend server, 2 × (client, backend server, load item)
	if len(sent) != 7 {
		t.Fatalf("%d spans recorded, want 7", len(sent))
	}
	traceID := sent[0].TraceID
	kinds := map[trace.SpanKind]int{}
	for _, s := range sent {
		if s.TraceID != traceID {
			t.Fatalf("spans of one request are in several traces")
		}
		kinds[s.Kind]++
	}
	if kinds[trace.SpanKindServer] != 3 || kinds[trace.SpanKindClient] != 2 {
		t.Fatalf("span kinds %v", kinds)
	}
	got := w.readTrace(t, traceID.String(), len(sent))
	compareReadBack(t, sent, got)
	// Every backend server span's parent is a distinct client span.
	parents := map[string]bool{}
	for _, s := range sent {
		if s.Kind == trace.SpanKindServer && s.ParentSpanID.IsValid() {
			if parents[s.ParentSpanID.String()] {
				t.Fatal("two requests carried the same parent-id")
			}
			parents[s.ParentSpanID.String()] = true
		}
	}
}

// The Jaeger remote sampler polls the weft binary's own /sampling (Jaeger remote sampling
// served by weft) and samples by the strategies file weft serves.
func TestE2EJaegerRemoteSamplerFollowsWeft(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/strategies.json"
	if err := os.WriteFile(file, []byte(`{"service_strategies": [{"service": "checkout", "type": "probabilistic",
		"param": 1.0, "operation_strategies": [{"operation": "GET /health", "type": "probabilistic", "param": 0}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	startWeft(t, fmt.Sprintf("WEFT_SAMPLING_HTTP_PORT=%d", port), "WEFT_SAMPLING_STRATEGIES_FILE="+file)
	remote := sampling.NewJaegerRemote(sampling.JaegerRemoteConfig{
		Endpoint:        fmt.Sprintf("http://127.0.0.1:%d/sampling", port),
		ServiceName:     "checkout",
		PollingInterval: 100 * time.Millisecond,
		InitialSampler:  sampling.TraceIDRatio(0.5),
	})
	defer remote.Close()
	rng := id.NewSeededWyrand()
	decide := func(name string) bool {
		return remote.ShouldSample(sampling.Params{TraceID: id.TraceIDFrom(rng), Name: name}).Decision == sampling.RecordAndSample
	}
	// Until the first fetch the initial sampler keeps half; the strategy keeps no health check.
	deadline := time.Now().Add(15 * time.Second)
	for dropped := 0; dropped < 200; {
		if decide("GET /health") {
			dropped = 0
			if time.Now().After(deadline) {
				t.Fatal("the sampler did not take weft's strategy within 15 s")
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		dropped++
	}
	for i := 0; i < 1000; i++ {
		if decide("GET /health") || !decide("POST /pay") {
			t.Fatalf("decision %d does not follow weft's strategy (health 0, everything else 1)", i)
		}
	}
}
