package weft_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/exporters/otlp"
)

// testPKI is a CA made in the test, a server certificate for 127.0.0.1 and a client
// certificate it signed, written as PEM files, and the server's TLS configuration (which
// requires a client certificate from the CA: mutual TLS).
type testPKI struct {
	caFile, clientCertFile, clientKeyFile string
	server                                *tls.Config
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weft test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) (*ecdsa.PrivateKey, []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "weft test"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return k, der
	}
	srvKey, srvDER := leaf(2, x509.ExtKeyUsageServerAuth)
	cliKey, cliDER := leaf(3, x509.ExtKeyUsageClientAuth)
	cliKeyDER, _ := x509.MarshalECPrivateKey(cliKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{
		caFile:         write("ca.pem", "CERTIFICATE", caDER),
		clientCertFile: write("client.pem", "CERTIFICATE", cliDER),
		clientKeyFile:  write("client-key.pem", "EC PRIVATE KEY", cliKeyDER),
		server: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
	}
}

// exportOne exports one span with an exporter built from cfg and returns Export's error.
func exportOne(t *testing.T, cfg otlp.Config) error {
	t.Helper()
	cfg.Timeout = 300 * time.Millisecond // a failing handshake is retried until the deadline
	e, err := otlp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	sd := &export.SpanData{Name: "tls", Scope: &export.Scope{Name: "tls-test"}}
	sd.TraceID[0], sd.SpanID[0] = 1, 1
	return e.Export(context.Background(), &export.Resource{}, []*export.SpanData{sd})
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

func startTLSGRPCReceiver(t *testing.T, rec *receiver, conf *tls.Config) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	collectortrace.RegisterTraceServiceServer(s, &grpcReceiver{rec: rec})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestOTLPOverTLS exports over HTTPS and gRPC with TLS to receivers that require a client
// certificate, with the CA and the client pair given as files, and checks what fails without
// them and how a gRPC endpoint's scheme and Insecure choose TLS or plaintext.
func TestOTLPOverTLS(t *testing.T) {
	pki := newTestPKI(t)
	files := func(c otlp.Config) otlp.Config {
		c.CertificateFile, c.ClientCertificateFile, c.ClientKeyFile = pki.caFile, pki.clientCertFile, pki.clientKeyFile
		return c
	}
	rec := &receiver{}
	hs := httptest.NewUnstartedServer(receiverHandler(t, rec, nil))
	hs.TLS = pki.server
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes the test provokes
	hs.StartTLS()
	t.Cleanup(hs.Close)
	tlsAddr := startTLSGRPCReceiver(t, rec, pki.server)
	plainAddr := startGRPCReceiver(t, rec)
	// The same trust and client pair given as a tls.Config instead of files.
	pair, err := tls.LoadX509KeyPair(pki.clientCertFile, pki.clientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(pki.caFile)
	roots.AppendCertsFromPEM(caPEM)
	conf := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}
	grpcCfg := func(endpoint string, insecure bool) otlp.Config {
		return otlp.Config{Protocol: otlp.GRPC, Endpoint: endpoint, Insecure: insecure}
	}
	for _, c := range []struct {
		name    string
		cfg     otlp.Config
		wantErr string // "" when the span must arrive
	}{
		{"https", files(otlp.Config{Endpoint: hs.URL + "/v1/traces"}), ""},
		{"https-tls-config", otlp.Config{Endpoint: hs.URL + "/v1/traces", TLS: conf}, ""},
		{"https-without-ca", otlp.Config{Endpoint: hs.URL + "/v1/traces"}, "certificate"},
		{"https-without-client-certificate", otlp.Config{Endpoint: hs.URL + "/v1/traces", CertificateFile: pki.caFile}, "certificate"},
		{"grpc-no-scheme-is-tls", files(grpcCfg(tlsAddr, false)), ""},
		{"grpc-https", files(grpcCfg("https://"+tlsAddr, false)), ""},
		{"grpc-https-root-path", files(grpcCfg("https://"+tlsAddr+"/", false)), ""},
		{"grpc-tls-config", otlp.Config{Protocol: otlp.GRPC, Endpoint: tlsAddr, TLS: conf}, ""},
		{"grpc-without-ca", grpcCfg(tlsAddr, false), "certificate"},
		{"grpc-insecure-no-scheme", grpcCfg(plainAddr, true), ""},
		{"grpc-http", grpcCfg("http://"+plainAddr, false), ""},
		{"grpc-no-scheme-to-plaintext", files(grpcCfg(plainAddr, false)), "deadline"},
		{"grpc-https-beats-insecure", files(grpcCfg("https://"+tlsAddr, true)), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := rec.count()
			err := exportOne(t, c.cfg)
			got := rec.count() - before
			switch {
			case c.wantErr == "" && (err != nil || got != 1):
				t.Fatalf("err %v, %d requests received; want the span received", err, got)
			case c.wantErr != "" && (err == nil || got != 0):
				t.Fatalf("err %v, %d requests received; want an error", err, got)
			case c.wantErr != "" && !strings.Contains(strings.ToLower(err.Error()), c.wantErr):
				t.Fatalf("err %v; want one that mentions %q", err, c.wantErr)
			}
		})
	}
}

// TestOTLPTLSFromEnvironment configures mutual TLS with the standard variables, over HTTPS and
// gRPC, and checks that OTEL_EXPORTER_OTLP_INSECURE makes a scheme-less gRPC endpoint plaintext.
func TestOTLPTLSFromEnvironment(t *testing.T) {
	pki := newTestPKI(t)
	rec := &receiver{}
	hs := httptest.NewUnstartedServer(receiverHandler(t, rec, nil))
	hs.TLS = pki.server
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes the test provokes
	hs.StartTLS()
	t.Cleanup(hs.Close)
	tlsAddr := startTLSGRPCReceiver(t, rec, pki.server)
	plainAddr := startGRPCReceiver(t, rec)
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"https", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": hs.URL, "OTEL_EXPORTER_OTLP_CERTIFICATE": pki.caFile,
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": pki.clientCertFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": pki.clientKeyFile}},
		{"grpc-traces-variables", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://" + tlsAddr,
			"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": pki.caFile, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": pki.clientCertFile,
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": pki.clientKeyFile}},
		{"grpc-insecure", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": plainAddr,
			"OTEL_EXPORTER_OTLP_INSECURE": "true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
			tp, err := weft.NewTracerProvider(weft.WithEnv())
			if err != nil {
				t.Fatal(err)
			}
			before := rec.count()
			_, s := tp.Tracer("tls").Start(context.Background(), "op")
			s.End()
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := rec.count() - before; got != 1 {
				t.Fatalf("%d requests received, want 1", got)
			}
		})
	}
}

// TestOTLPTLSFilesAreChecked: unreadable or partial TLS files fail NewTracerProvider and name
// the file.
func TestOTLPTLSFilesAreChecked(t *testing.T) {
	pki := newTestPKI(t)
	for _, c := range []otlp.Config{
		{Endpoint: "https://127.0.0.1:1/v1/traces", CertificateFile: filepath.Join(t.TempDir(), "missing.pem")},
		{Endpoint: "https://127.0.0.1:1/v1/traces", CertificateFile: pki.clientKeyFile},
		{Endpoint: "https://127.0.0.1:1/v1/traces", ClientCertificateFile: pki.clientCertFile},
		{Protocol: otlp.GRPC, Endpoint: "127.0.0.1:1", ClientCertificateFile: pki.clientCertFile, ClientKeyFile: pki.caFile},
	} {
		if _, err := weft.NewTracerProvider(weft.WithOTLP(c)); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
