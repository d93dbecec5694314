package weft_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	weft "weft.dev/sdk/go"
)

// stallingStrategies answers no strategy request: it reports each request's service and holds
// it until the client gives up (or the test ends).
func stallingStrategies(t *testing.T) (*httptest.Server, chan string) {
	services := make(chan string, 16)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		services <- r.URL.Query().Get("service")
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, services
}

func jaegerEnv(t *testing.T, srv *httptest.Server) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_jaeger_remote")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "endpoint="+srv.URL+",pollingIntervalMs=60000")
}

// Shutdown cancels the Jaeger remote sampler's fetch under way and honours its context.
func TestShutdownCancelsJaegerFetch(t *testing.T) {
	srv, services := stallingStrategies(t)
	jaegerEnv(t, srv)
	tp, err := weft.NewTracerProvider(weft.WithEnv())
	if err != nil {
		t.Fatal(err)
	}
	<-services // the fetch is under way
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	tp.Shutdown(ctx)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown took %v with a stalled strategy fetch", d)
	}
}

// The sampler asks for the service name the provider ends up with: WithServiceName after
// WithEnv, OTEL_SERVICE_NAME, or OTEL_RESOURCE_ATTRIBUTES' service.name.
func TestJaegerRemoteServiceNameAfterAllOptions(t *testing.T) {
	for _, c := range []struct {
		name, serviceEnv, resourceEnv string
		opts                          []weft.Option
		want                          string
	}{
		{"option after env", "from-env", "", []weft.Option{weft.WithServiceName("from-option")}, "from-option"},
		{"OTEL_SERVICE_NAME", "from-env", "service.name=from-resource", nil, "from-env"},
		{"OTEL_RESOURCE_ATTRIBUTES", "", "team=a,service.name=from-resource", nil, "from-resource"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, services := stallingStrategies(t)
			jaegerEnv(t, srv)
			t.Setenv("OTEL_SERVICE_NAME", c.serviceEnv)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", c.resourceEnv)
			tp, err := weft.NewTracerProvider(append([]weft.Option{weft.WithEnv()}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Shutdown(context.Background())
			if got := <-services; got != c.want {
				t.Fatalf("service=%q, want %q", got, c.want)
			}
		})
	}
}
