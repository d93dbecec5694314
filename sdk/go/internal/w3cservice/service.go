// Package w3cservice is the service the W3C trace-context test harness drives
// (github.com/w3c/trace-context, test/test.py), built on weft.
//
// It accepts POST /test with a JSON array of {"url", "arguments"}. It extracts traceparent and
// tracestate from the request and starts a server span under them (a new trace when they are
// absent or invalid). For each element it starts a client span of its own, a child of the
// server span, injects that span's context and POSTs arguments to url (spec/propagation.md
// "Outgoing requests": every request carries its own parent-id).
package w3cservice

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/propagation"
)

// Handler returns the /test handler, tracing with tp.
func Handler(tp trace.TracerProvider) http.Handler {
	tr := tp.Tracer("weft.dev/sdk/go/w3cservice")
	prop := propagation.TraceContext{}
	client := &http.Client{Timeout: 10 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /test", func(w http.ResponseWriter, r *http.Request) {
		var calls []struct {
			URL       string          `json:"url"`
			Arguments json.RawMessage `json:"arguments"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || json.Unmarshal(body, &calls) != nil {
			http.Error(w, "body is not a JSON array of {url, arguments}", http.StatusBadRequest)
			return
		}
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(lowerHeaders(r.Header)))
		ctx, server := tr.Start(ctx, "POST /test", trace.WithSpanKind(trace.SpanKindServer))
		defer server.End()
		for _, c := range calls {
			cctx, cs := tr.Start(ctx, "POST", trace.WithSpanKind(trace.SpanKindClient))
			req, err := http.NewRequestWithContext(cctx, http.MethodPost, c.URL, bytes.NewReader(c.Arguments))
			if err != nil {
				cs.End()
				continue
			}
			req.Header.Set("Content-Type", "application/json")
			prop.Inject(cctx, otelHeader(req.Header))
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cs.End()
		}
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// lowerHeaders keeps every value of every header, under lowercase names.
func lowerHeaders(h http.Header) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		c := propagation.HeaderCarrier(out)
		for _, x := range v {
			c.Add(k, x)
		}
	}
	return out
}

type otelHeader http.Header

func (h otelHeader) Get(k string) string { return http.Header(h).Get(k) }
func (h otelHeader) Set(k, v string)     { http.Header(h).Set(k, v) }
func (h otelHeader) Keys() []string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	return ks
}
