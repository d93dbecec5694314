package otlp

import (
	"context"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// rawCodec sends the bytes AppendRequest wrote as the gRPC message, without any proto object.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type grpcTransport struct {
	conn *grpc.ClientConn
	md   metadata.MD
	opts []grpc.CallOption
	resp []byte
}

func newGRPC(cfg Config) (*grpcTransport, error) {
	creds := insecure.NewCredentials()
	if secure(&cfg) {
		tc, err := tlsConfig(&cfg)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	// The gRPC target is host:port: the scheme only chose TLS, and a URL's root path
	// ("https://collector:4317/", as OTEL_EXPORTER_OTLP_ENDPOINT often reads) is dropped.
	target := strings.TrimPrefix(strings.TrimPrefix(cfg.Endpoint, "http://"), "https://")
	target = strings.TrimSuffix(target, "/")
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("weft-sdk-go/"+Version))
	if err != nil {
		return nil, err
	}
	t := &grpcTransport{conn: conn, md: metadata.New(cfg.Headers)}
	t.opts = []grpc.CallOption{grpc.ForceCodec(rawCodec{})}
	if cfg.Compression == "gzip" {
		t.opts = append(t.opts, grpc.UseCompressor("gzip"))
	}
	return t, nil
}

func (t *grpcTransport) export(ctx context.Context, body []byte) (Outcome, time.Duration, PartialSuccess, error) {
	if len(t.md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, t.md)
	}
	err := t.conn.Invoke(ctx, exportMethod, &body, &t.resp, t.opts...)
	if err == nil {
		ps, _ := DecodeResponse(t.resp)
		return Success, -1, ps, nil
	}
	st := status.Convert(err)
	delay := time.Duration(-1)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	code := strings.ToUpper(codeName(st.Code().String()))
	return ClassifyGRPC(code, delay >= 0), delay, PartialSuccess{}, err
}

// codeName turns grpc's CamelCase code names (DeadlineExceeded) into the proto names
// (DEADLINE_EXCEEDED).
func codeName(s string) string {
	if s == "Canceled" {
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (t *grpcTransport) close() error { return t.conn.Close() }
