package weft_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestExamplesExportToWeft builds examples/otelhttp and examples/otelgrpc, runs them with the
// OTEL_* variables pointing at a weft binary, and reads each printed trace back whole.
func TestExamplesExportToWeft(t *testing.T) {
	w := startWeft(t)
	dir := t.TempDir()
	for _, c := range []struct {
		example string
		env     []string
		spans   int
		kinds   map[tracepb.Span_SpanKind]int
	}{
		// parent, 2 × (client, server, "load cart")
		{"otelhttp", []string{fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", w.otlpHTTP)}, 7,
			map[tracepb.Span_SpanKind]int{tracepb.Span_SPAN_KIND_CLIENT: 2, tracepb.Span_SPAN_KIND_SERVER: 2}},
		// parent, 2 × (client, server)
		{"otelgrpc", []string{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", w.grpc)}, 5,
			map[tracepb.Span_SpanKind]int{tracepb.Span_SPAN_KIND_CLIENT: 2, tracepb.Span_SPAN_KIND_SERVER: 2}},
	} {
		t.Run(c.example, func(t *testing.T) {
			bin := filepath.Join(dir, c.example)
			if out, err := exec.Command("go", "build", "-o", bin, "./examples/"+c.example).CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), append(c.env, "OTEL_SERVICE_NAME=example-"+c.example)...)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", c.example, err)
			}
			traceID := strings.TrimSpace(string(out))
			spans := w.readTrace(t, traceID, c.spans)
			if len(spans) != c.spans {
				t.Fatalf("%d spans read back, want %d", len(spans), c.spans)
			}
			kinds := map[tracepb.Span_SpanKind]int{}
			for _, s := range spans {
				kinds[s.Kind]++
			}
			for k, n := range c.kinds {
				if kinds[k] != n {
					t.Fatalf("span kinds %v, want %v", kinds, c.kinds)
				}
			}
		})
	}
}
