package w3cservice_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/internal/w3cservice"
)

// callBack posts n calls to the service with the given incoming headers and returns the
// headers of every callback it made.
func callBack(t *testing.T, headers [][2]string, n int) []http.Header {
	tp, err := weft.NewTracerProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	svc := httptest.NewServer(w3cservice.Handler(tp))
	defer svc.Close()
	var mu sync.Mutex
	var got []http.Header
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
	}))
	defer cb.Close()
	var calls []string
	for i := 0; i < n; i++ {
		calls = append(calls, fmt.Sprintf(`{"url": %q, "arguments": [%d]}`, cb.URL, i))
	}
	req, _ := http.NewRequest("POST", svc.URL+"/test", strings.NewReader("["+strings.Join(calls, ",")+"]"))
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(got) != n {
		t.Fatalf("%d callbacks, want %d", len(got), n)
	}
	return got
}

// distinctClientSpans checks one well-formed traceparent per callback, one trace, and one
// parent-id per call; it returns the trace ID.
func distinctClientSpans(t *testing.T, got []http.Header, incomingParent string) string {
	traces, parents := map[string]bool{}, map[string]bool{}
	for _, h := range got {
		tps := h.Values("traceparent")
		if len(tps) != 1 || len(tps[0]) != 55 || !strings.HasPrefix(tps[0], "00-") {
			t.Fatalf("traceparent %q", tps)
		}
		traces[tps[0][3:35]] = true
		parents[tps[0][36:52]] = true
	}
	if len(traces) != 1 || len(parents) != len(got) || parents[incomingParent] {
		t.Fatalf("traces %v parents %v (incoming parent %s)", traces, parents, incomingParent)
	}
	for tr := range traces {
		return tr
	}
	return ""
}

func TestPropagatesTraceparentAndTracestate(t *testing.T) {
	got := callBack(t, [][2]string{{"traceparent", "00-12345678901234567890123456789012-1234567890123456-01"},
		{"tracestate", "foo=1"}}, 3)
	if tr := distinctClientSpans(t, got, "1234567890123456"); tr != "12345678901234567890123456789012" {
		t.Fatalf("trace %s", tr)
	}
	for _, h := range got {
		if h.Get("tracestate") != "foo=1" || !strings.HasSuffix(h.Get("traceparent"), "-01") {
			t.Fatalf("callback headers %v", h)
		}
	}
}

func TestNoTraceparentStartsOneNewTrace(t *testing.T) {
	got := callBack(t, nil, 3)
	if tr := distinctClientSpans(t, got, ""); tr == strings.Repeat("0", 32) {
		t.Fatal("zero trace ID")
	}
}

func TestInvalidTraceparentStartsANewTraceWithoutTracestate(t *testing.T) {
	got := callBack(t, [][2]string{{"traceparent", "00-00000000000000000000000000000000-1234567890123456-01"},
		{"tracestate", "foo=1"}}, 2)
	if tr := distinctClientSpans(t, got, "1234567890123456"); tr == strings.Repeat("0", 32) {
		t.Fatal("zero trace ID")
	}
	for _, h := range got {
		if h.Get("tracestate") != "" {
			t.Fatalf("tracestate %q kept from an invalid traceparent", h.Get("tracestate"))
		}
	}
}

func TestDuplicatedTracestateKeysKeepTheFirst(t *testing.T) {
	got := callBack(t, [][2]string{{"traceparent", "00-12345678901234567890123456789012-1234567890123456-00"},
		{"tracestate", "foo=1,bar=2,foo=2"}, {"tracestate", "bar=3,baz=4"}}, 2)
	for _, h := range got {
		if h.Get("tracestate") != "foo=1,bar=2,baz=4" || !strings.HasSuffix(h.Get("traceparent"), "-00") {
			t.Fatalf("callback headers %v", h)
		}
	}
}
