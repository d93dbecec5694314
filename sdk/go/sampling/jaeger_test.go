package sampling

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// TestJaegerRemotePollsAndAppliesStrategies serves strategies over HTTP: a failure keeps the
// initial sampler, then a per-operation strategy takes over, keyed by span name.
func TestJaegerRemotePollsAndAppliesStrategies(t *testing.T) {
	var n atomic.Int64
	var service atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		service.Store(r.URL.Query().Get("service"))
		if n.Add(1) == 1 {
			http.Error(w, "not yet", 500)
			return
		}
		w.Write([]byte(`{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0.001},
			"operationSampling": {"defaultSamplingProbability": 0.0, "defaultLowerBoundTracesPerSecond": 0.0,
			"perOperationStrategies": [{"operation": "always", "probabilisticSampling": {"samplingRate": 1.0}}]}}`))
	}))
	defer srv.Close()
	j := NewJaegerRemote(JaegerRemoteConfig{Endpoint: srv.URL, PollingInterval: 20 * time.Millisecond,
		InitialSampler: AlwaysOn(), ServiceName: "shop & co", MaxOperations: 1})
	defer j.Close()
	p := Params{Name: "always", TraceID: trace.TraceID{8: 0xff, 15: 1}}
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the sampler did not poll again after a failure")
		}
		if got := j.ShouldSample(p).Decision; got != RecordAndSample && n.Load() < 2 {
			t.Fatalf("before the first strategy the initial sampler decides: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for j.state.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no strategy applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if service.Load() != "shop & co" {
		t.Fatalf("service %q", service.Load())
	}
	if got := j.ShouldSample(p).Decision; got != RecordAndSample {
		t.Fatalf("operation with rate 1.0: %v", got)
	}
	p.Name = "other" // default probability 0 and no lower bound
	if got := j.ShouldSample(p).Decision; got != Drop {
		t.Fatalf("default operation: %v", got)
	}
}

// Close cancels a strategy fetch under way instead of waiting for its 10 s timeout.
func TestJaegerRemoteCloseCancelsFetch(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	j := NewJaegerRemote(JaegerRemoteConfig{Endpoint: srv.URL, ServiceName: "s"})
	<-started
	begin := time.Now()
	j.Close()
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("Close took %v with a stalled fetch", d)
	}
}
