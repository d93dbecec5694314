package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"weft.dev/sdk/go/export"
)

// Version is the SDK version sent in User-Agent.
const Version = "0.1.0"

// Protocol names, as in OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	HTTPProtobuf = "http/protobuf"
	GRPC         = "grpc"
)

// Config configures an Exporter. Zero fields take the OTLP defaults.
type Config struct {
	// Protocol is HTTPProtobuf (default) or GRPC.
	Protocol string
	// Endpoint: for HTTP the full http:// or https:// URL (default
	// http://localhost:4318/v1/traces); for gRPC host:port, http://host:port (plaintext) or
	// https://host:port (default localhost:4317). A gRPC endpoint without a scheme uses TLS
	// unless Insecure is set, as the OpenTelemetry exporters do.
	Endpoint string
	// Insecure sends gRPC in plaintext to an endpoint given without a scheme
	// (OTEL_EXPORTER_OTLP_INSECURE); the scheme decides otherwise.
	Insecure bool
	// TLS is the client TLS configuration for https:// and secure gRPC endpoints; nil is the
	// host's root CAs and no client certificate. The files below are applied to a copy.
	TLS *tls.Config
	// CertificateFile holds the PEM CA certificates that verify the server, in place of the
	// host's roots (OTEL_EXPORTER_OTLP_CERTIFICATE).
	CertificateFile string
	// ClientCertificateFile and ClientKeyFile are the PEM client certificate and its private
	// key for mutual TLS (OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_KEY);
	// give both or neither.
	ClientCertificateFile, ClientKeyFile string
	// Headers are sent with every request (gRPC: as metadata).
	Headers map[string]string
	// Compression is "gzip" (default) or "none".
	Compression string
	// Timeout is the deadline of one batch, covering every attempt and back-off (default 10 s).
	Timeout time.Duration
}

// Stats counts what the exporter did.
type Stats struct {
	ExportedSpans int64
	// Dropped spans by reason: permanent, retries_exhausted, deadline, rejected.
	DroppedPermanent, DroppedRetriesExhausted, DroppedDeadline, DroppedRejected int64
	Requests                                                                    int64
}

// Exporter exports batches over OTLP. It is used by one goroutine at a time (the provider's
// export goroutine); Stats may be read from any goroutine.
type Exporter struct {
	cfg  Config
	buf  []byte
	zbuf bytes.Buffer
	zw   *gzip.Writer
	hc   *http.Client
	grpc *grpcTransport

	exported, permanent, exhausted, deadline, rejected, requests atomic.Int64
	logs                                                         rateLog
	closed                                                       atomic.Bool
}

// New returns an exporter for cfg.
func New(cfg Config) (*Exporter, error) {
	if cfg.Protocol == "" {
		cfg.Protocol = HTTPProtobuf
	}
	if cfg.Compression == "" {
		cfg.Compression = "gzip"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	e := &Exporter{cfg: cfg}
	switch cfg.Protocol {
	case HTTPProtobuf:
		if e.cfg.Endpoint == "" {
			e.cfg.Endpoint = "http://localhost:4318/v1/traces"
		}
		if !strings.HasPrefix(e.cfg.Endpoint, "http://") && !strings.HasPrefix(e.cfg.Endpoint, "https://") {
			return nil, fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL", e.cfg.Endpoint)
		}
		tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}
		if secure(&e.cfg) {
			tc, err := tlsConfig(&e.cfg)
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
		}
		e.hc = &http.Client{Transport: tr}
		e.zw, _ = gzip.NewWriterLevel(&e.zbuf, gzip.BestSpeed)
	case GRPC:
		if e.cfg.Endpoint == "" {
			e.cfg.Endpoint = "localhost:4317"
		}
		t, err := newGRPC(e.cfg)
		if err != nil {
			return nil, err
		}
		e.grpc = t
	default:
		return nil, fmt.Errorf("otlp protocol %q: want %q or %q", cfg.Protocol, HTTPProtobuf, GRPC)
	}
	return e, nil
}

// Stats returns the counters.
func (e *Exporter) Stats() Stats {
	return Stats{ExportedSpans: e.exported.Load(), DroppedPermanent: e.permanent.Load(),
		DroppedRetriesExhausted: e.exhausted.Load(), DroppedDeadline: e.deadline.Load(),
		DroppedRejected: e.rejected.Load(), Requests: e.requests.Load()}
}

// ErrShutdown is returned by Export after Shutdown.
var ErrShutdown = errors.New("otlp exporter is shut down")

// Export encodes the batch and sends it, retrying as spec/otlp.md says. The batch is encoded
// before the first attempt, so its records are free again as soon as Export returns.
func (e *Exporter) Export(ctx context.Context, res *export.Resource, batch []*export.SpanData) error {
	if e.closed.Load() {
		return ErrShutdown
	}
	if len(batch) == 0 {
		return nil
	}
	e.buf = AppendRequest(e.buf[:0], res, batch)
	body := e.buf
	gz := e.cfg.Compression == "gzip"
	if gz && e.hc != nil {
		e.zbuf.Reset()
		e.zw.Reset(&e.zbuf)
		e.zw.Write(body)
		e.zw.Close()
		body = e.zbuf.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	n := int64(len(batch))
	for attempt := 1; ; attempt++ {
		e.requests.Add(1)
		var outcome Outcome
		var delay time.Duration
		var ps PartialSuccess
		var err error
		if e.hc != nil {
			outcome, delay, ps, err = e.postHTTP(ctx, body, gz)
		} else {
			outcome, delay, ps, err = e.grpc.export(ctx, body)
		}
		switch outcome {
		case Success:
			if ps.RejectedSpans > 0 {
				e.rejected.Add(ps.RejectedSpans)
				e.logs.printf("rejected", "weft: otlp export: server rejected %d spans: %s", ps.RejectedSpans, ps.ErrorMessage)
			} else if ps.ErrorMessage != "" {
				e.logs.printf("warning", "weft: otlp export: server warning: %s", ps.ErrorMessage)
			}
			e.exported.Add(n - ps.RejectedSpans)
			return nil
		case Permanent:
			e.permanent.Add(n)
			e.logs.printf("permanent", "weft: otlp export to %s failed permanently, %d spans dropped: %v", e.cfg.Endpoint, n, err)
			return err
		}
		if delay < 0 {
			lo, hi, giveUp := BackoffRange(attempt)
			if giveUp {
				e.exhausted.Add(n)
				e.logs.printf("retries_exhausted", "weft: otlp export to %s failed %d times, %d spans dropped: %v", e.cfg.Endpoint, attempt, n, err)
				return err
			}
			delay = lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
		} else if attempt >= MaxAttempts {
			e.exhausted.Add(n)
			e.logs.printf("retries_exhausted", "weft: otlp export to %s failed %d times, %d spans dropped: %v", e.cfg.Endpoint, attempt, n, err)
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(delay).After(dl) {
			e.deadline.Add(n)
			e.logs.printf("deadline", "weft: otlp export to %s: deadline passed, %d spans dropped: %v", e.cfg.Endpoint, n, err)
			return fmt.Errorf("otlp export deadline: %w", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			e.deadline.Add(n)
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (e *Exporter) postHTTP(ctx context.Context, body []byte, gz bool) (Outcome, time.Duration, PartialSuccess, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return Permanent, -1, PartialSuccess{}, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	req.Header.Set("User-Agent", "weft-sdk-go/"+Version)
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return Retryable, -1, PartialSuccess{}, err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	outcome, delay := ClassifyHTTP(resp.StatusCode, resp.Header, time.Now())
	if outcome != Success {
		return outcome, delay, PartialSuccess{}, fmt.Errorf("POST %s: status %d: %s", e.cfg.Endpoint, resp.StatusCode, truncate(rb))
	}
	var ps PartialSuccess
	if ct := resp.Header.Get("Content-Type"); ct == "" || strings.HasPrefix(ct, "application/x-protobuf") {
		ps, _ = DecodeResponse(rb)
	}
	return Success, -1, ps, nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

// Shutdown closes the transport; later Export calls fail.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	if e.hc != nil {
		e.hc.CloseIdleConnections()
	}
	if e.grpc != nil {
		return e.grpc.close()
	}
	return nil
}

// rateLog logs at most one message per key per minute.
type rateLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (r *rateLog) printf(key, format string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	if t, ok := r.last[key]; ok && now.Sub(t) < time.Minute {
		r.mu.Unlock()
		return
	}
	r.last[key] = now
	r.mu.Unlock()
	log.Printf(format, args...)
}
