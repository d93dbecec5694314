package otlp

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// secure reports whether the exporter talks TLS to cfg.Endpoint, as the OTLP exporter spec
// says: an https:// endpoint always, an http:// endpoint never, and a gRPC endpoint without a
// scheme unless cfg.Insecure (OTEL_EXPORTER_OTLP_INSECURE) is set.
func secure(cfg *Config) bool {
	switch {
	case strings.HasPrefix(cfg.Endpoint, "https://"):
		return true
	case strings.HasPrefix(cfg.Endpoint, "http://"):
		return false
	default:
		return !cfg.Insecure
	}
}

// tlsConfig builds the client TLS configuration: cfg.TLS (cloned; nil is the host's root CAs
// and no client certificate), with the CA certificates of cfg.CertificateFile as the roots and
// the pair cfg.ClientCertificateFile and cfg.ClientKeyFile as the client certificate.
func tlsConfig(cfg *Config) (*tls.Config, error) {
	c := &tls.Config{}
	if cfg.TLS != nil {
		c = cfg.TLS.Clone()
	}
	if cfg.CertificateFile != "" {
		pem, err := os.ReadFile(cfg.CertificateFile)
		if err != nil {
			return nil, fmt.Errorf("otlp certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("otlp certificate %s: no PEM certificate in it", cfg.CertificateFile)
		}
		c.RootCAs = pool
	}
	switch {
	case cfg.ClientCertificateFile != "" && cfg.ClientKeyFile != "":
		pair, err := tls.LoadX509KeyPair(cfg.ClientCertificateFile, cfg.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("otlp client certificate %s and key %s: %w", cfg.ClientCertificateFile, cfg.ClientKeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case cfg.ClientCertificateFile != "" || cfg.ClientKeyFile != "":
		return nil, fmt.Errorf("otlp client certificate %q and key %q: give both or neither", cfg.ClientCertificateFile, cfg.ClientKeyFile)
	}
	return c, nil
}
