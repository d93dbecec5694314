//! A minimal HTTP/1.1 and HTTP/2 (prior knowledge, `h2c`) client over hyper, used by the OTLP
//! exporters and the Jaeger remote sampler. `http://`, and `https://` with the `tls` feature
//! (rustls; ALPN `h2` or `http/1.1`); one cached connection per client, re-established after
//! any error.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// Largest response body read; anything longer is an error.
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Why a request got no HTTP response.
#[derive(Debug)]
pub enum TransportError {
    /// The endpoint URL is unusable (not `http://`, no host).
    BadEndpoint(String),
    /// TCP connect failed (refused, unreachable, DNS).
    Connect(std::io::Error),
    /// The request did not complete in time.
    Timeout,
    /// The connection failed mid-request (reset, protocol error, body too large).
    Protocol(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::BadEndpoint(e) => write!(f, "bad endpoint: {e}"),
            TransportError::Connect(e) => write!(f, "connect failed: {e}"),
            TransportError::Timeout => f.write_str("request timed out"),
            TransportError::Protocol(e) => write!(f, "connection failed: {e}"),
        }
    }
}

impl std::error::Error for TransportError {}

/// A response with its whole body and trailers.
#[derive(Debug)]
pub struct FullResponse {
    /// Status and headers.
    pub head: http::response::Parts,
    /// The body bytes.
    pub body: Bytes,
    /// Trailers (HTTP/2), if any.
    pub trailers: Option<http::HeaderMap>,
}

/// Parses and checks an `http://` or `https://host[:port][/path]` endpoint.
pub fn parse_endpoint(url: &str) -> Result<Uri, TransportError> {
    let uri: Uri = url
        .parse()
        .map_err(|e| TransportError::BadEndpoint(format!("{url:?}: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        #[cfg(feature = "tls")]
        Some("https") => {}
        #[cfg(not(feature = "tls"))]
        Some("https") => {
            return Err(TransportError::BadEndpoint(format!(
                "{url:?}: https needs weft-sdk's tls feature"
            )));
        }
        Some(other) => {
            return Err(TransportError::BadEndpoint(format!(
                "{url:?}: scheme {other} is not supported"
            )));
        }
        None => {
            return Err(TransportError::BadEndpoint(format!(
                "{url:?}: missing http:// or https:// scheme"
            )));
        }
    }
    if uri.host().is_none() {
        return Err(TransportError::BadEndpoint(format!("{url:?}: missing host")));
    }
    Ok(uri)
}

enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// A client for one `host:port`. Must be used inside a tokio runtime.
pub struct Client {
    authority: String,
    http2: bool,
    conn: Option<Conn>,
    /// For `https://`: the TLS configuration and the server name to verify.
    #[cfg(feature = "tls")]
    tls: Option<(
        std::sync::Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("authority", &self.authority)
            .field("http2", &self.http2)
            .finish()
    }
}

impl Client {
    /// Returns a client for the authority of `uri`, speaking HTTP/2 if `http2`. An `https://`
    /// URI needs [`Client::with_tls`].
    pub fn new(uri: &Uri, http2: bool) -> Self {
        let host = uri.host().unwrap_or("localhost");
        let default_port = if uri.scheme_str() == Some("https") { 443 } else { 80 };
        let port = uri.port_u16().unwrap_or(default_port);
        Client {
            authority: format!("{host}:{port}"),
            http2,
            conn: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Returns a client that speaks TLS with `config` to the host of `uri`.
    #[cfg(feature = "tls")]
    pub fn with_tls(
        uri: &Uri,
        http2: bool,
        config: std::sync::Arc<rustls::ClientConfig>,
    ) -> Result<Self, TransportError> {
        let host = uri.host().unwrap_or("localhost");
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| TransportError::BadEndpoint(format!("{host:?} is not a TLS server name: {e}")))?;
        let mut c = Client::new(uri, http2);
        c.tls = Some((config, name));
        Ok(c)
    }

    async fn connect(&mut self) -> Result<(), TransportError> {
        let tcp = TcpStream::connect(&self.authority)
            .await
            .map_err(TransportError::Connect)?;
        let _ = tcp.set_nodelay(true);
        #[cfg(feature = "tls")]
        if let Some((config, name)) = &self.tls {
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| TransportError::Protocol(format!("TLS handshake failed: {e}")))?;
            return self.handshake(TokioIo::new(tls)).await;
        }
        self.handshake(TokioIo::new(tcp)).await
    }

    async fn handshake<I>(&mut self, io: I) -> Result<(), TransportError>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        if self.http2 {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| TransportError::Protocol(e.to_string()))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.conn = Some(Conn::H2(send));
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| TransportError::Protocol(e.to_string()))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.conn = Some(Conn::H1(send));
        }
        Ok(())
    }

    async fn send_inner(&mut self, req: Request<Full<Bytes>>) -> Result<FullResponse, TransportError> {
        let usable = match &self.conn {
            Some(Conn::H1(s)) => !s.is_closed(),
            Some(Conn::H2(s)) => !s.is_closed(),
            None => false,
        };
        if !usable {
            self.conn = None;
            self.connect().await?;
        }
        let resp: Response<hyper::body::Incoming> = match self.conn.as_mut() {
            Some(Conn::H1(s)) => {
                // HTTP/1.1 to an origin server uses the origin form (`/path?query`) with `Host`;
                // HTTP/2 needs the full URI for its pseudo-headers.
                let mut req = req;
                if let Some(pq) = req.uri().path_and_query().cloned()
                    && let Ok(origin) = Uri::builder().path_and_query(pq).build()
                {
                    *req.uri_mut() = origin;
                }
                s.ready().await.map_err(|e| TransportError::Protocol(e.to_string()))?;
                s.send_request(req).await
            }
            Some(Conn::H2(s)) => {
                s.ready().await.map_err(|e| TransportError::Protocol(e.to_string()))?;
                s.send_request(req).await
            }
            None => return Err(TransportError::Protocol("no connection".into())),
        }
        .map_err(|e| TransportError::Protocol(e.to_string()))?;
        let (head, body) = resp.into_parts();
        let collected = Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| TransportError::Protocol(format!("reading response body: {e}")))?;
        let trailers = collected.trailers().cloned();
        Ok(FullResponse {
            head,
            body: collected.to_bytes(),
            trailers,
        })
    }

    /// Sends `req` and reads the whole response, within `timeout`. The connection is dropped
    /// after any error so the next call reconnects.
    pub async fn send(&mut self, req: Request<Full<Bytes>>, timeout: Duration) -> Result<FullResponse, TransportError> {
        let r = match tokio::time::timeout(timeout, self.send_inner(req)).await {
            Ok(r) => r,
            Err(_) => Err(TransportError::Timeout),
        };
        if r.is_err() {
            self.conn = None;
        }
        r
    }
}

/// Returns a single-threaded runtime for a background thread.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
}
