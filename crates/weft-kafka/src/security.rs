//! TLS and SASL on the connections to brokers, as managed Kafka services require them.
//!
//! - **TLS** is rustls with the aws-lc-rs provider (the one the S3 client already links). It
//!   trusts the system's roots or a CA bundle, can present a client certificate (mTLS), and
//!   checks that the broker's certificate names the host of the address it dialled (or
//!   [`TlsOptions::server_name`]); turning that check off is possible and says so in its name.
//! - **SASL** runs right after connecting (and after TLS), before any other request:
//!   `SaslHandshake` v1 names the mechanism, then `SaslAuthenticate` v1 carries its messages
//!   (KIP-152), both classic versions every broker from 2.1 serves. Mechanisms: `PLAIN`,
//!   `SCRAM-SHA-256` and `SCRAM-SHA-512` (RFC 5802, 7677), and `OAUTHBEARER` (RFC 7628,
//!   KIP-255) with a token read from a file or printed by a command, afresh at each connection.
//! - **Renewal.** A broker that limits sessions (`connections.max.reauth.ms`, or a token's own
//!   expiry) says how long the session lasts; the connection is retired at 80 % of that, so the
//!   next request opens a new one, authenticated with a fresh token, before the broker would
//!   close it. Requests already sent on the old one complete there.
//!
//! Failures here are [`Error::Security`]: not retriable, and worded to name the cause (an
//! untrusted certificate, a wrong password, an expired token). Secrets are [`Secret`]s, which
//! never print.

use std::fmt;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Error;
use crate::wire::{Get, Put};

/// How connections to brokers are secured. The default is plaintext with no authentication.
#[derive(Clone, Default)]
pub struct Security {
    pub tls: Option<Tls>,
    pub sasl: Option<Sasl>,
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(Sasl::mechanism))
            .finish()
    }
}

/// A password or other secret: kept out of every `Debug` and log line.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(s: impl Into<Arc<str>>) -> Secret {
        Secret(s.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What [`Tls::new`] is built from.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM file of the certificate authorities to trust; the system's roots when unset.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain presented to brokers that ask for one (mTLS), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The name brokers' certificates must carry, when it is not the host each broker is
    /// dialled at (the host of the bootstrap address or of the address metadata gives).
    pub server_name: Option<String>,
    /// Accept any certificate. Encrypts but does not authenticate the broker: for tests only.
    pub insecure_skip_verify: bool,
}

/// TLS settings, ready to connect (cheap to clone).
#[derive(Clone)]
pub struct Tls {
    connector: tokio_rustls::TlsConnector,
    server_name: Option<ServerName<'static>>,
    trusted: Arc<str>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("trusted", &self.trusted).finish()
    }
}

fn config_error(what: impl fmt::Display) -> Error {
    Error::Security(what.to_string())
}

impl Tls {
    /// Reads the CA bundle, client certificate and key the options name.
    pub fn new(o: &TlsOptions) -> Result<Tls, Error> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(format!("TLS: {e}")))?;
        let (builder, trusted) = if o.insecure_skip_verify {
            let any = Arc::new(AnyCertificate(provider));
            (
                builder.dangerous().with_custom_certificate_verifier(any),
                "any certificate (verification turned off)".to_string(),
            )
        } else {
            let mut roots = rustls::RootCertStore::empty();
            let trusted = match &o.ca_file {
                Some(path) => {
                    let certs = read_certs(path, "CA bundle")?;
                    for c in certs {
                        roots.add(c).map_err(|e| {
                            config_error(format!("TLS: a certificate in the CA bundle {}: {e}", path.display()))
                        })?;
                    }
                    format!("the CAs of {}", path.display())
                }
                None => {
                    let found = rustls_native_certs::load_native_certs();
                    for c in found.certs {
                        let _ = roots.add(c);
                    }
                    if roots.is_empty() {
                        return Err(config_error(
                            "TLS: no CA certificates found on this system; name a CA bundle (kafka_tls_ca)",
                        ));
                    }
                    "the system's CAs".to_string()
                }
            };
            (builder.with_root_certificates(roots), trusted)
        };
        let config = match (&o.cert_file, &o.key_file) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "client certificate")?;
                let key_der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| config_error(format!("TLS: reading the client key {}: {e}", key.display())))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| config_error(format!("TLS: the client certificate and key: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(config_error(
                    "TLS: a client certificate needs both its certificate and its key file",
                ));
            }
        };
        let server_name = match &o.server_name {
            Some(n) => Some(
                ServerName::try_from(n.clone()).map_err(|e| config_error(format!("TLS: server name {n:?}: {e}")))?,
            ),
            None => None,
        };
        Ok(Tls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
            trusted: trusted.into(),
        })
    }

    /// The TLS handshake with the broker at `addr` over `tcp`.
    pub(crate) async fn connect(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => {
                let host = host_of(addr);
                ServerName::try_from(host.to_string())
                    .map_err(|e| config_error(format!("TLS: broker host {host:?} is not a valid name: {e}")))?
            }
        };
        let shown = match &name {
            ServerName::DnsName(d) => d.as_ref().to_string(),
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            _ => addr.to_string(),
        };
        self.connector.connect(name, tcp).await.map_err(|e| {
            let hint = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(rustls::Error::InvalidCertificate(c)) => match c {
                    rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature => {
                        format!(": the broker's certificate is not signed by {}", self.trusted)
                    }
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. } => format!(
                        ": the broker's certificate does not name {shown} (set the TLS server name if \
                         the brokers' certificates carry another)"
                    ),
                    rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => {
                        ": the broker's certificate has expired".to_string()
                    }
                    _ => String::new(),
                },
                Some(rustls::Error::InvalidMessage(_)) | Some(rustls::Error::InappropriateMessage { .. }) => {
                    ": the broker did not answer in TLS (is this port a TLS listener?)".to_string()
                }
                _ if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    ": the broker closed the connection (is this port a TLS listener?)".to_string()
                }
                _ => String::new(),
            };
            Error::Security(format!("TLS handshake with Kafka broker {addr} failed: {e}{hint}"))
        })
    }
}

/// Why a TLS connection's read or write failed, when the broker said why with an alert after
/// the handshake (TLS 1.3 servers check client certificates then).
pub(crate) fn alert_hint(e: &std::io::Error) -> Option<&'static str> {
    use rustls::AlertDescription as A;
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(
            A::BadCertificate | A::CertificateRequired | A::UnknownCA | A::CertificateUnknown,
        )) => Some(
            ": the broker refused this client's certificate or wants one (mutual TLS: a \
             certificate and key its CAs signed)",
        ),
        Some(rustls::Error::AlertReceived(A::CertificateExpired)) => {
            Some(": the broker says this client's certificate has expired")
        }
        _ => None,
    }
}

fn read_certs(path: &std::path::Path, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| config_error(format!("TLS: reading the {what} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config_error(format!(
            "TLS: the {what} {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// The host of `host:port` or `[v6]:port`.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    }
}

/// Accepts every certificate, still checking that the handshake is signed by its key.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A SASL mechanism and its credentials.
#[derive(Debug, Clone)]
pub enum Sasl {
    /// `PLAIN`: the password in the clear, so only over TLS.
    Plain { username: String, password: Secret },
    /// `SCRAM-SHA-256` (`sha512: false`) or `SCRAM-SHA-512`: the password never crosses the
    /// wire, and the broker proves it knows the user's stored key too.
    Scram {
        sha512: bool,
        username: String,
        password: Secret,
    },
    /// `OAUTHBEARER`: a bearer token (a JWT, for most identity providers and MSK's IAM
    /// signer), read again at each new connection.
    OAuthBearer { token: TokenSource },
}

impl Sasl {
    pub fn mechanism(&self) -> &'static str {
        match self {
            Sasl::Plain { .. } => "PLAIN",
            Sasl::Scram { sha512: false, .. } => "SCRAM-SHA-256",
            Sasl::Scram { sha512: true, .. } => "SCRAM-SHA-512",
            Sasl::OAuthBearer { .. } => "OAUTHBEARER",
        }
    }
}

/// Where an OAUTHBEARER token comes from.
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// A file holding the token, which something else keeps fresh (a Kubernetes projected
    /// service-account token, a sidecar).
    File(PathBuf),
    /// A shell command that prints the token on standard output (`aws-msk-iam-sasl-signer`, a
    /// cloud CLI).
    Command(String),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::File(p) => write!(f, "file {}", p.display()),
            TokenSource::Command(c) => write!(f, "command `{c}`"),
        }
    }
}

/// A token and, when it is a JWT with an `exp` claim, when it expires.
struct Token {
    value: Secret,
    expires: Option<SystemTime>,
}

impl TokenSource {
    async fn read(&self) -> Result<Token, Error> {
        let raw = match self {
            TokenSource::File(path) => tokio::fs::read_to_string(path)
                .await
                .map_err(|e| config_error(format!("OAUTHBEARER: reading the token {self}: {e}")))?,
            TokenSource::Command(cmd) => {
                let cmd = cmd.clone();
                let out =
                    tokio::task::spawn_blocking(move || std::process::Command::new("sh").arg("-c").arg(&cmd).output())
                        .await
                        .map_err(|e| config_error(format!("OAUTHBEARER: the token {self}: {e}")))?
                        .map_err(|e| config_error(format!("OAUTHBEARER: running the token {self}: {e}")))?;
                if !out.status.success() {
                    let err = String::from_utf8_lossy(&out.stderr);
                    return Err(config_error(format!(
                        "OAUTHBEARER: the token {self} failed ({}): {}",
                        out.status,
                        err.trim()
                    )));
                }
                String::from_utf8(out.stdout)
                    .map_err(|_| config_error(format!("OAUTHBEARER: the token {self} printed non-UTF-8")))?
            }
        };
        let value = raw.trim();
        if value.is_empty() {
            return Err(config_error(format!("OAUTHBEARER: the token {self} is empty")));
        }
        if value.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(config_error(format!(
                "OAUTHBEARER: the token {self} holds characters a bearer token cannot"
            )));
        }
        let expires = jwt_expiry(value);
        if let Some(at) = expires
            && at <= SystemTime::now()
        {
            let ago = SystemTime::now().duration_since(at).unwrap_or_default().as_secs();
            let exp = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
            return Err(config_error(format!(
                "OAUTHBEARER: the token from {self} expired {ago} s ago (exp {exp}); refresh it"
            )));
        }
        Ok(Token {
            value: Secret::new(value),
            expires,
        })
    }
}

/// The `exp` claim of a JWT (`header.payload.signature`, base64url), if it has one.
fn jwt_expiry(token: &str) -> Option<SystemTime> {
    let payload = token.split('.').nth(1)?;
    let json = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&json).ok()?;
    let exp = claims.get("exp")?.as_f64()?;
    UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(exp).ok()?)
}

const SASL_HANDSHAKE: (i16, i16) = (17, 1);
const SASL_AUTHENTICATE: (i16, i16) = (36, 1);

/// One request and its response on a connection nothing else uses yet.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    api: (i16, i16),
    id: i32,
    client_id: &str,
    body: &[u8],
) -> Result<Vec<u8>, std::io::Error> {
    let mut frame = Vec::with_capacity(body.len() + 14 + client_id.len());
    frame.i32(0);
    frame.i16(api.0);
    frame.i16(api.1);
    frame.i32(id);
    frame.string(client_id);
    frame.extend_from_slice(body);
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    s.write_all(&frame).await?;
    s.flush().await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = i32::from_be_bytes(len);
    if !(4..=1 << 20).contains(&len) {
        return Err(std::io::Error::other(format!("a SASL response of {len} bytes")));
    }
    let mut resp = vec![0u8; len as usize];
    s.read_exact(&mut resp).await?;
    let got = i32::from_be_bytes(resp[..4].try_into().unwrap_or_default());
    if got != id {
        return Err(std::io::Error::other(format!(
            "answer to request {got} where {id} was sent"
        )));
    }
    resp.drain(..4);
    Ok(resp)
}

/// What authenticating a connection settled.
pub(crate) struct Session {
    /// When to stop sending new requests on the connection (before the broker ends the
    /// session), if the session or its token has an end.
    pub renew_after: Option<Duration>,
}

/// Authenticates a fresh connection (after TLS, before any other request).
pub(crate) async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    sasl: &Sasl,
    addr: &str,
    client_id: &str,
) -> Result<Session, Error> {
    let mech = sasl.mechanism();
    let io = |e: std::io::Error| match alert_hint(&e) {
        Some(hint) => Error::Security(format!("SASL {mech} with Kafka broker {addr}: {e}{hint}")),
        None => Error::Io(format!("SASL {mech} with Kafka broker {addr}: {e}")),
    };
    let mut body = Vec::new();
    body.string(mech);
    let resp = round_trip(s, SASL_HANDSHAKE, 0, client_id, &body).await.map_err(io)?;
    let mut g = Get::new(&resp);
    let code = g.i16()?;
    if code != 0 {
        let mut offered = Vec::new();
        for _ in 0..g.array_len(2).unwrap_or(0) {
            offered.push(g.string().unwrap_or("?").to_string());
        }
        return Err(Error::Security(if code == 33 {
            format!(
                "Kafka broker {addr} does not take SASL mechanism {mech}; it takes {}",
                if offered.is_empty() {
                    "none".to_string()
                } else {
                    offered.join(", ")
                }
            )
        } else {
            format!(
                "Kafka broker {addr} refused the SASL {mech} handshake: {} ({code}); is this port a SASL listener?",
                crate::error_name(code)
            )
        }));
    }
    let mut next_id = 0;
    let mut auth = async |message: &[u8]| -> Result<(Vec<u8>, i64), Error> {
        next_id += 1;
        let mut body = Vec::with_capacity(message.len() + 4);
        body.i32(message.len() as i32);
        body.extend_from_slice(message);
        let resp = round_trip(s, SASL_AUTHENTICATE, next_id, client_id, &body)
            .await
            .map_err(io)?;
        let mut g = Get::new(&resp);
        let code = g.i16()?;
        let why = g.nullable_string()?.map(str::to_string);
        let n = g.i32()?;
        let bytes = if n > 0 {
            g.bytes(n as usize)?.to_vec()
        } else {
            Vec::new()
        };
        let lifetime_ms = g.i64()?;
        if code != 0 {
            let why = why.unwrap_or_else(|| crate::error_name(code).to_string());
            return Err(Error::Security(format!(
                "SASL {mech} authentication with Kafka broker {addr} failed: {why}"
            )));
        }
        Ok((bytes, lifetime_ms))
    };
    let failed = |why: String| Error::Security(format!("SASL {mech} with Kafka broker {addr}: {why}"));
    let mut token_expires = None;
    let lifetime_ms = match sasl {
        Sasl::Plain { username, password } => auth(format!("\0{username}\0{}", password.expose()).as_bytes()).await?.1,
        Sasl::Scram {
            sha512,
            username,
            password,
        } => {
            let mut c = Scram::new(*sha512, username, password.clone());
            let (server_first, _) = auth(&c.client_first()).await?;
            let client_final = c.client_final(&server_first).map_err(failed)?;
            let (server_final, lifetime_ms) = auth(&client_final).await?;
            c.verify_server_final(&server_final).map_err(failed)?;
            lifetime_ms
        }
        Sasl::OAuthBearer { token } => {
            let t = token.read().await?;
            token_expires = t.expires;
            let first = format!("n,,\x01auth=Bearer {}\x01\x01", t.value.expose());
            let (challenge, lifetime_ms) = auth(first.as_bytes()).await?;
            if !challenge.is_empty() {
                // An error challenge (RFC 7628 §3.2.2): the client acknowledges it, and the
                // broker then fails the exchange with its reason.
                let shown = String::from_utf8_lossy(&challenge).into_owned();
                return Err(match auth(&[0x01]).await {
                    Err(e) => Error::Security(format!("{e} (the broker's challenge: {shown})")),
                    Ok(_) => failed(format!("the broker refused the token: {shown}")),
                });
            }
            lifetime_ms
        }
    };
    let mut renew_after = (lifetime_ms > 0).then(|| Duration::from_millis(lifetime_ms as u64).mul_f64(0.8));
    if let Some(at) = token_expires {
        let left = at.duration_since(SystemTime::now()).unwrap_or_default().mul_f64(0.8);
        renew_after = Some(renew_after.map_or(left, |r| r.min(left)));
    }
    Ok(Session {
        renew_after: renew_after.map(|r| r.max(Duration::from_secs(1))),
    })
}

/// The client side of SCRAM (RFC 5802) with SHA-256 or SHA-512.
struct Scram {
    sha512: bool,
    username: String,
    password: Secret,
    nonce: String,
    client_first_bare: String,
    server_signature: Vec<u8>,
}

impl Scram {
    fn new(sha512: bool, username: &str, password: Secret) -> Scram {
        let mut raw = [0u8; 24];
        aws_lc_rs::rand::fill(&mut raw).expect("the system's random source");
        Scram::with_nonce(sha512, username, password, STANDARD.encode(raw))
    }

    fn with_nonce(sha512: bool, username: &str, password: Secret, nonce: String) -> Scram {
        // RFC 5802 §5.1: ',' and '=' in a user name are escaped.
        let user = username.replace('=', "=3D").replace(',', "=2C");
        let client_first_bare = format!("n={user},r={nonce}");
        Scram {
            sha512,
            username: username.to_string(),
            password,
            nonce,
            client_first_bare,
            server_signature: Vec::new(),
        }
    }

    fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| "the server's first message is not UTF-8".to_string())?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for field in server_first.split(',') {
            match field.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = Some(v),
                Some(("i=", v)) => iterations = Some(v),
                Some(("e=", v)) => return Err(format!("the broker refused: {v}")),
                Some(("m=", _)) => return Err("the broker asks for a SCRAM extension this client lacks".into()),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("the server's first message lacks r, s or i: {server_first:?}"));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() <= self.nonce.len() {
            return Err("the server's nonce does not extend this client's".into());
        }
        let salt = STANDARD
            .decode(salt)
            .map_err(|_| "the server's salt is not base64".to_string())?;
        let iterations = iterations
            .parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| format!("the server's iteration count {iterations:?} is not a positive number"))?;
        let (pbkdf, mac, digest, len) = if self.sha512 {
            (
                aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA512,
                aws_lc_rs::hmac::HMAC_SHA512,
                &aws_lc_rs::digest::SHA512,
                64,
            )
        } else {
            (
                aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
                aws_lc_rs::hmac::HMAC_SHA256,
                &aws_lc_rs::digest::SHA256,
                32,
            )
        };
        let mut salted = vec![0u8; len];
        aws_lc_rs::pbkdf2::derive(pbkdf, iterations, &salt, self.password.expose().as_bytes(), &mut salted);
        let salted = aws_lc_rs::hmac::Key::new(mac, &salted);
        let client_key = aws_lc_rs::hmac::sign(&salted, b"Client Key");
        let stored_key = aws_lc_rs::digest::digest(digest, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = aws_lc_rs::hmac::sign(
            &aws_lc_rs::hmac::Key::new(mac, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = aws_lc_rs::hmac::sign(&salted, b"Server Key");
        self.server_signature = aws_lc_rs::hmac::sign(
            &aws_lc_rs::hmac::Key::new(mac, server_key.as_ref()),
            auth_message.as_bytes(),
        )
        .as_ref()
        .to_vec();
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(server_final);
        if let Some(e) = text.strip_prefix("e=") {
            return Err(format!("the broker refused user {:?}: {e}", self.username));
        }
        let v = text
            .strip_prefix("v=")
            .ok_or_else(|| format!("the server's final message is not a signature: {text:?}"))?;
        match STANDARD.decode(v.trim()) {
            Ok(sig) if sig == self.server_signature => Ok(()),
            _ => Err("the broker's signature is wrong: it does not hold this user's SCRAM credentials".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3: the SCRAM-SHA-256 exchange, byte for byte.
    #[test]
    fn scram_sha256_matches_rfc7677() {
        let mut c = Scram::with_nonce(false, "user", Secret::new("pencil"), "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let fin = c.client_final(server_first).unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        let wrong = c
            .verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G5=")
            .unwrap_err();
        assert!(wrong.contains("signature is wrong"), "{wrong}");
        let refused = c.verify_server_final(b"e=invalid-proof").unwrap_err();
        assert!(refused.contains("invalid-proof"), "{refused}");
    }

    #[test]
    fn scram_refuses_a_nonce_it_did_not_start_and_escapes_user_names() {
        let mut c = Scram::with_nonce(true, "a=b,c", Secret::new("p"), "abc".into());
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=abc");
        let e = c.client_final(b"r=xyzdef,s=AAAA,i=4096").unwrap_err();
        assert!(e.contains("nonce"), "{e}");
        let e = c.client_final(b"r=abcdef,s=AAAA,i=0").unwrap_err();
        assert!(e.contains("iteration"), "{e}");
        assert!(c.client_final(b"r=abcdef,s=AAAA,i=4096").is_ok());
    }

    #[test]
    fn secrets_never_print() {
        let s = Sasl::Plain {
            username: "u".into(),
            password: Secret::new("hunter2"),
        };
        assert!(!format!("{s:?}").contains("hunter2"));
        let sec = Security {
            tls: None,
            sasl: Some(s),
        };
        assert!(!format!("{sec:?}").contains("hunter2"));
    }

    #[test]
    fn jwt_expiry_reads_exp_and_ignores_other_tokens() {
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"weft","exp":1700000000}"#);
        let t = format!("eyJhbGciOiJub25lIn0.{payload}.");
        assert_eq!(jwt_expiry(&t), Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
        assert_eq!(jwt_expiry("opaque-token"), None);
        assert_eq!(jwt_expiry("a.b.c"), None);
        // Claims past any clock, negative or not numbers are ignored, never a panic.
        for exp in ["1e300", "-5", "\"soon\""] {
            let t = format!("x.{}.", URL_SAFE_NO_PAD.encode(format!(r#"{{"exp":{exp}}}"#)));
            assert_eq!(jwt_expiry(&t), None, "{exp}");
        }
    }

    #[tokio::test]
    async fn an_expired_token_is_refused_naming_its_source() {
        let dir = std::env::temp_dir().join(format!("weft-kafka-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"weft","exp":1000}"#);
        std::fs::write(&path, format!("eyJhbGciOiJub25lIn0.{payload}.\n")).unwrap();
        let e = TokenSource::File(path.clone()).read().await.err().unwrap().to_string();
        assert!(e.contains("expired") && e.contains(&path.display().to_string()), "{e}");
        let e = TokenSource::Command("exit 3".into())
            .read()
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("failed"), "{e}");
        let ok = TokenSource::Command("echo abc.def".into()).read().await.unwrap();
        assert_eq!(ok.value.expose(), "abc.def");
        std::fs::remove_dir_all(dir).ok();
    }

    proptest::proptest! {
        /// The broker's SCRAM messages and a token's claims are outside input: any bytes are
        /// read or refused, never a panic.
        #[test]
        fn any_broker_message_or_token_is_read_or_refused(server in proptest::collection::vec(proptest::num::u8::ANY, 0..200), text in ".{0,200}") {
            let mut c = Scram::with_nonce(false, "weft", Secret::new("p"), "abc".into());
            let _ = c.client_final(&server);
            let _ = c.client_final(format!("r=abc{text},s=AAAA,i={}", text.len()).as_bytes());
            let _ = c.verify_server_final(&server);
            let _ = jwt_expiry(&text);
            let _ = jwt_expiry(&format!("a.{}.c", URL_SAFE_NO_PAD.encode(text.as_bytes())));
        }
    }

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("broker-1.example.com:9093"), "broker-1.example.com");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
    }
}
