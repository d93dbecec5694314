//! TLS for the exporters' HTTP client (`https://` endpoints), on rustls with the aws-lc-rs
//! provider. Settings are read as the official OpenTelemetry SDKs read them.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// TLS settings of an OTLP exporter (`OTEL_EXPORTER_OTLP_{,TRACES_}CERTIFICATE`,
/// `CLIENT_CERTIFICATE`, `CLIENT_KEY`, `INSECURE`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// A PEM file of the CA certificates to trust; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate (chain) for mutual TLS; needs `client_key_file`.
    pub client_cert_file: Option<PathBuf>,
    /// The PEM private key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
    /// For a gRPC endpoint given without a scheme (`host:4317`): plaintext instead of TLS.
    /// `http://` is always plaintext and `https://` always TLS, as in the official SDKs.
    pub insecure: bool,
}

/// A rustls client configuration from `tls`, offering `h2` (gRPC) or `http/1.1` by ALPN.
///
/// Fails, saying which file, when a file cannot be read or holds no usable certificate or key,
/// or when only one of the client certificate and key is given.
pub fn client_config(tls: &TlsConfig, http2: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca_file {
        Some(f) => {
            for c in certs(f)? {
                roots
                    .add(c)
                    .map_err(|e| format!("invalid CA certificate in {}: {e}", f.display()))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for c in native.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err("no CA certificates found on this system: set OTEL_EXPORTER_OTLP_CERTIFICATE".into());
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots);
    let mut config = match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(c), Some(k)) => {
            let key = PrivateKeyDer::from_pem_file(k)
                .map_err(|e| format!("cannot read the client key {}: {e}", k.display()))?;
            builder
                .with_client_auth_cert(certs(c)?, key)
                .map_err(|e| format!("invalid client certificate {} or key {}: {e}", c.display(), k.display()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("a client certificate needs its key, and a client key its certificate".into()),
    };
    config.alpn_protocols = vec![if http2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
    Ok(Arc::new(config))
}

fn certs(f: &PathBuf) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(f)
        .map_err(|e| format!("cannot read {}: {e}", f.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    if certs.is_empty() {
        return Err(format!("no PEM certificate in {}", f.display()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_and_half_client_auth_are_errors() {
        let missing = TlsConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsConfig::default()
        };
        assert!(
            client_config(&missing, false)
                .unwrap_err()
                .contains("/nonexistent/ca.pem")
        );
        let half = TlsConfig {
            client_cert_file: Some("/nonexistent/cert.pem".into()),
            ..TlsConfig::default()
        };
        let e = client_config(&half, true).err();
        assert!(e.is_some());
    }
}
