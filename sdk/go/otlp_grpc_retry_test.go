package weft_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"weft.dev/sdk/go/exporters/otlp"
)

// scriptedGRPC answers Export with the n-th status of its script (OK past the end).
type scriptedGRPC struct {
	collectortrace.UnimplementedTraceServiceServer
	script []*status.Status
	calls  atomic.Int64
	at     []time.Time
}

func (s *scriptedGRPC) Export(context.Context, *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	i := int(s.calls.Add(1)) - 1
	s.at = append(s.at, time.Now())
	if i < len(s.script) && s.script[i] != nil {
		return nil, s.script[i].Err()
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func retryInfo(t *testing.T, d time.Duration) *status.Status {
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestOTLPGRPCRetriesAsTheStatusSays(t *testing.T) {
	for _, c := range []struct {
		name              string
		script            func(t *testing.T) []*status.Status
		calls             int64
		exported, dropped int64
		minGap            time.Duration
	}{
		{"unavailable-then-ok", func(*testing.T) []*status.Status { return []*status.Status{status.New(codes.Unavailable, "down")} }, 2, 4, 0, 400 * time.Millisecond},
		{"resource-exhausted-with-retryinfo", func(t *testing.T) []*status.Status { return []*status.Status{retryInfo(t, 200*time.Millisecond)} }, 2, 4, 0, 190 * time.Millisecond},
		{"resource-exhausted-without-retryinfo", func(*testing.T) []*status.Status {
			return []*status.Status{status.New(codes.ResourceExhausted, "quota")}
		}, 1, 0, 4, 0},
		{"invalid-argument", func(*testing.T) []*status.Status { return []*status.Status{status.New(codes.InvalidArgument, "bad")} }, 1, 0, 4, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &scriptedGRPC{script: c.script(t)}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			collectortrace.RegisterTraceServiceServer(g, srv)
			go g.Serve(lis)
			defer g.Stop()
			tp, _, o := interopProvider(t, otlp.Config{Protocol: otlp.GRPC, Endpoint: "http://" + lis.Addr().String()})
			recordVariedSpans(tp)
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := o.Stats()
			if srv.calls.Load() != c.calls || st.ExportedSpans != c.exported || st.DroppedPermanent != c.dropped {
				t.Fatalf("%d calls, stats %+v", srv.calls.Load(), st)
			}
			if c.minGap > 0 && srv.at[1].Sub(srv.at[0]) < c.minGap {
				t.Fatalf("retried after %v, want at least %v", srv.at[1].Sub(srv.at[0]), c.minGap)
			}
		})
	}
}
