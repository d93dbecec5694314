//! The OTLP exporter: HTTP/protobuf (gzip) or gRPC, with bounded retry (spec/otlp.md).

use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use flate2::Compression as GzLevel;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::Full;

use super::{DropReason, ExportBatch, ExportContext, ExportResult, SpanExporter};
use crate::http_client::{Client, FullResponse, TransportError, parse_endpoint};
use crate::otlp::retry::{MAX_ATTEMPTS, Outcome, backoff, classify_grpc, classify_http, grpc_code};
use crate::otlp::{Encoder, PartialSuccess, decode_export_response, decode_grpc_retry_delay};

const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// Largest decompressed gRPC response accepted.
const MAX_RESPONSE: u64 = 4 << 20;

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `POST /v1/traces`, `application/x-protobuf`.
    HttpProtobuf,
    /// Unary `TraceService/Export` over HTTP/2 (h2c).
    Grpc,
}

/// Body compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// gzip (the default).
    Gzip,
    /// Uncompressed.
    None,
}

/// OTLP exporter settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The transport.
    pub protocol: Protocol,
    /// Full URL: `http://host:4318/v1/traces` for HTTP, `http://host:4317` for gRPC.
    pub endpoint: String,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Body compression.
    pub compression: Compression,
    /// Deadline per batch, every attempt and back-off included (10 s).
    pub timeout: Duration,
    /// TLS settings for `https://` endpoints (and scheme-less gRPC ones).
    #[cfg(feature = "tls")]
    pub tls: crate::tls::TlsConfig,
}

impl OtlpConfig {
    /// HTTP/protobuf to `endpoint` (the full `/v1/traces` URL), gzip, 10 s.
    pub fn http(endpoint: impl Into<String>) -> Self {
        OtlpConfig {
            protocol: Protocol::HttpProtobuf,
            endpoint: endpoint.into(),
            headers: Vec::new(),
            compression: Compression::Gzip,
            timeout: Duration::from_secs(10),
            #[cfg(feature = "tls")]
            tls: crate::tls::TlsConfig::default(),
        }
    }

    /// gRPC to `endpoint` (`http://host:port`), gzip, 10 s.
    pub fn grpc(endpoint: impl Into<String>) -> Self {
        OtlpConfig {
            protocol: Protocol::Grpc,
            ..Self::http(endpoint)
        }
    }

    /// Reads the standard `OTEL_EXPORTER_OTLP_*` variables (`PROTOCOL`, `TRACES_ENDPOINT` /
    /// `ENDPOINT`, `HEADERS`, `COMPRESSION`, `TIMEOUT` in ms). Defaults: HTTP/protobuf to
    /// `http://localhost:4318/v1/traces`.
    pub fn from_env() -> Self {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let proto = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        let grpc = proto.as_deref().map(str::trim) == Some("grpc");
        let endpoint = match (
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(e), _) => e,
            (None, Some(base)) if grpc => base,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) if grpc => "http://localhost:4317".into(),
            (None, None) => "http://localhost:4318/v1/traces".into(),
        };
        let mut c = if grpc {
            Self::grpc(endpoint)
        } else {
            Self::http(endpoint)
        };
        if let Some(h) = var("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS")) {
            for kv in h.split(',') {
                if let Some((k, v)) = kv.split_once('=')
                    && let Some(v) = crate::baggage::percent_decode(v.trim(), false)
                {
                    c.headers.push((k.trim().to_owned(), v));
                }
            }
        }
        if let Some(comp) =
            var("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION").or_else(|| var("OTEL_EXPORTER_OTLP_COMPRESSION"))
            && comp.trim() == "none"
        {
            c.compression = Compression::None;
        }
        #[cfg(feature = "tls")]
        {
            let path = |n: &str| {
                var(&format!("OTEL_EXPORTER_OTLP_TRACES_{n}"))
                    .or_else(|| var(&format!("OTEL_EXPORTER_OTLP_{n}")))
                    .map(|v| std::path::PathBuf::from(v.trim()))
            };
            c.tls.ca_file = path("CERTIFICATE");
            c.tls.client_cert_file = path("CLIENT_CERTIFICATE");
            c.tls.client_key_file = path("CLIENT_KEY");
            c.tls.insecure = var("OTEL_EXPORTER_OTLP_TRACES_INSECURE")
                .or_else(|| var("OTEL_EXPORTER_OTLP_INSECURE"))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        }
        if let Some(ms) = var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            c.timeout = Duration::from_millis(ms);
        }
        c
    }
}

/// Exports batches as OTLP `ExportTraceServiceRequest`s, encoded directly into a reused buffer.
pub struct OtlpExporter {
    config: OtlpConfig,
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    rt: tokio::runtime::Runtime,
    client: Client,
    encoder: Encoder,
    buf: Vec<u8>,
    gz: Vec<u8>,
}

impl std::fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpExporter").field("config", &self.config).finish()
    }
}

/// The result of one attempt.
struct Attempt {
    outcome: Outcome,
    partial: Option<PartialSuccess>,
    message: String,
}

fn transport_failure(e: TransportError) -> Attempt {
    let outcome = match e {
        TransportError::BadEndpoint(_) => Outcome::Permanent,
        _ => Outcome::Retryable(None),
    };
    Attempt {
        outcome,
        partial: None,
        message: e.to_string(),
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

impl OtlpExporter {
    /// Creates an exporter. Fails if the endpoint is not an `http://` URL, a header is invalid,
    /// or the runtime cannot start.
    pub fn new(config: OtlpConfig) -> Result<Self, String> {
        let grpc = config.protocol == Protocol::Grpc;
        let endpoint = match &config.endpoint {
            // gRPC endpoints may omit the scheme (`host:4317`): TLS unless `insecure`, as the
            // official SDKs do.
            #[cfg(feature = "tls")]
            e if grpc && !e.contains("://") => {
                format!("{}://{e}", if config.tls.insecure { "http" } else { "https" })
            }
            e => e.clone(),
        };
        let mut uri = parse_endpoint(&endpoint).map_err(|e| e.to_string())?;
        if grpc {
            let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
            let scheme = uri.scheme_str().unwrap_or("http").to_owned();
            uri = format!("{scheme}://{authority}{GRPC_PATH}")
                .parse()
                .map_err(|e| format!("bad gRPC endpoint: {e}"))?;
        }
        let mut headers = Vec::new();
        for (k, v) in &config.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("bad header name {k:?}: {e}"))?;
            let value = HeaderValue::from_str(v).map_err(|e| format!("bad header value for {k:?}: {e}"))?;
            headers.push((name, value));
        }
        let rt = crate::http_client::runtime().map_err(|e| format!("cannot start the exporter runtime: {e}"))?;
        #[cfg(feature = "tls")]
        let client = if uri.scheme_str() == Some("https") {
            let tls = crate::tls::client_config(&config.tls, grpc)?;
            Client::with_tls(&uri, grpc, tls).map_err(|e| e.to_string())?
        } else {
            Client::new(&uri, grpc)
        };
        #[cfg(not(feature = "tls"))]
        let client = Client::new(&uri, grpc);
        Ok(OtlpExporter {
            config,
            uri,
            headers,
            rt,
            client,
            encoder: Encoder::new(),
            buf: Vec::with_capacity(64 << 10),
            gz: Vec::with_capacity(16 << 10),
        })
    }

    /// Encodes a batch into the exporter's buffer and returns the request body (compressed if
    /// configured; for gRPC, framed).
    fn body(&mut self, batch: &ExportBatch<'_>) -> Bytes {
        self.buf.clear();
        let grpc = self.config.protocol == Protocol::Grpc;
        if grpc {
            self.buf.extend_from_slice(&[0; 5]);
        }
        let start = self.buf.len();
        self.encoder
            .encode(&mut self.buf, batch.resource, batch.scopes, batch.spans);
        let payload: &[u8] = match self.config.compression {
            Compression::None => &self.buf[start..],
            Compression::Gzip => {
                self.gz.clear();
                // Level 1: the export thread shares two cores with the application; the ratio is
                // close to level 6 on span data (repeated keys dominate).
                let mut enc = GzEncoder::new(std::mem::take(&mut self.gz), GzLevel::fast());
                let _ = enc.write_all(&self.buf[start..]);
                self.gz = enc.finish().unwrap_or_default();
                &self.gz
            }
        };
        if !grpc {
            return Bytes::copy_from_slice(payload);
        }
        let mut framed = Vec::with_capacity(payload.len() + 5);
        framed.push(u8::from(self.config.compression == Compression::Gzip));
        framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        framed.extend_from_slice(payload);
        Bytes::from(framed)
    }

    fn request(&self, body: Bytes, remaining: Duration) -> Request<Full<Bytes>> {
        let mut b = Request::post(self.uri.clone())
            .header(http::header::USER_AGENT, crate::USER_AGENT)
            .header(
                http::header::HOST,
                self.uri.authority().map(|a| a.as_str()).unwrap_or("localhost"),
            );
        match self.config.protocol {
            Protocol::HttpProtobuf => {
                b = b.header(http::header::CONTENT_TYPE, "application/x-protobuf");
                if self.config.compression == Compression::Gzip {
                    b = b.header(http::header::CONTENT_ENCODING, "gzip");
                }
            }
            Protocol::Grpc => {
                b = b
                    .header(http::header::CONTENT_TYPE, "application/grpc")
                    .header(http::header::TE, "trailers")
                    .header("grpc-accept-encoding", "gzip")
                    .header(
                        "grpc-timeout",
                        format!("{}m", remaining.as_millis().clamp(1, 99_999_999)),
                    );
                if self.config.compression == Compression::Gzip {
                    b = b.header("grpc-encoding", "gzip");
                }
            }
        }
        let mut req = b
            .body(Full::new(body))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())));
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        req
    }

    fn classify_http_response(resp: &FullResponse) -> Attempt {
        let status = resp.head.status.as_u16();
        let retry_after = resp
            .head
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        let outcome = classify_http(status, retry_after, SystemTime::now());
        let mut partial = None;
        let mut message = format!("http status {status}");
        if outcome == Outcome::Success {
            let ct = resp
                .head
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            if !resp.body.is_empty() && ct.is_none_or(|c| c.starts_with("application/x-protobuf")) {
                match decode_export_response(&resp.body) {
                    Ok(p) => partial = Some(p),
                    Err(e) => message = format!("undecodable response: {e}"),
                }
            }
        } else if !resp.body.is_empty() {
            let text = String::from_utf8_lossy(&resp.body[..resp.body.len().min(256)]).into_owned();
            message = format!("http status {status}: {text}");
        }
        Attempt {
            outcome,
            partial,
            message,
        }
    }

    fn classify_grpc_response(resp: &FullResponse) -> Attempt {
        let status = resp.head.status.as_u16();
        let meta = |name: &str| {
            resp.trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .or_else(|| resp.head.headers.get(name))
                .and_then(|v| v.to_str().ok())
        };
        let code = match meta("grpc-status").and_then(|s| s.trim().parse::<u32>().ok()) {
            Some(c) => c,
            None if status != 200 => match status {
                400 => grpc_code::INTERNAL,
                401 => grpc_code::UNAUTHENTICATED,
                403 => grpc_code::PERMISSION_DENIED,
                404 => grpc_code::UNIMPLEMENTED,
                429 | 502 | 503 | 504 => grpc_code::UNAVAILABLE,
                _ => grpc_code::UNKNOWN,
            },
            None => grpc_code::UNKNOWN,
        };
        let retry_info = meta("grpc-status-details-bin")
            .and_then(base64_decode)
            .and_then(|d| decode_grpc_retry_delay(&d));
        let outcome = classify_grpc(code, retry_info);
        let mut message = format!("grpc status {code}: {}", meta("grpc-message").unwrap_or(""));
        let mut partial = None;
        if outcome == Outcome::Success && resp.body.len() >= 5 {
            let compressed = resp.body[0] == 1;
            let len = u32::from_be_bytes([resp.body[1], resp.body[2], resp.body[3], resp.body[4]]) as usize;
            let msg = &resp.body[5..(5 + len).min(resp.body.len())];
            let decoded = if compressed {
                let mut out = Vec::new();
                match GzDecoder::new(msg).take(MAX_RESPONSE).read_to_end(&mut out) {
                    Ok(_) => Some(out),
                    Err(e) => {
                        message = format!("undecodable compressed response: {e}");
                        None
                    }
                }
            } else {
                Some(msg.to_vec())
            };
            if let Some(d) = decoded {
                match decode_export_response(&d) {
                    Ok(p) => partial = Some(p),
                    Err(e) => message = format!("undecodable response: {e}"),
                }
            }
        }
        Attempt {
            outcome,
            partial,
            message,
        }
    }

    fn attempt(&mut self, body: Bytes, remaining: Duration) -> Attempt {
        let req = self.request(body, remaining);
        let grpc = self.config.protocol == Protocol::Grpc;
        let resp = self.rt.block_on(self.client.send(req, remaining));
        match resp {
            Err(e) => transport_failure(e),
            Ok(r) if grpc => Self::classify_grpc_response(&r),
            Ok(r) => Self::classify_http_response(&r),
        }
    }
}

impl SpanExporter for OtlpExporter {
    fn export(&mut self, batch: ExportBatch<'_>, cx: &ExportContext<'_>) -> ExportResult {
        if batch.spans.is_empty() {
            return ExportResult::Success;
        }
        let deadline = cx.deadline().min(Instant::now() + self.config.timeout);
        let body = self.body(&batch);
        let mut retry = 0u32;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return ExportResult::Dropped {
                    reason: DropReason::Deadline,
                    message: "export deadline passed".into(),
                };
            }
            let a = self.attempt(body.clone(), deadline - now);
            match a.outcome {
                Outcome::Success => {
                    return match a.partial {
                        Some(p) if p.is_partial() => ExportResult::PartialSuccess {
                            rejected: p.rejected_spans.max(0) as u64,
                            message: p.error_message,
                        },
                        _ => ExportResult::Success,
                    };
                }
                Outcome::Permanent => {
                    return ExportResult::Dropped {
                        reason: DropReason::Permanent,
                        message: a.message,
                    };
                }
                Outcome::Retryable(delay) => {
                    retry += 1;
                    if retry >= MAX_ATTEMPTS {
                        return ExportResult::Dropped {
                            reason: DropReason::RetriesExhausted,
                            message: a.message,
                        };
                    }
                    let sleep = delay.or_else(|| backoff(retry)).unwrap_or_default();
                    if Instant::now() + sleep > cx.deadline().min(deadline) || !cx.sleep(sleep) {
                        return ExportResult::Dropped {
                            reason: DropReason::Deadline,
                            message: format!("{} (no time left to retry)", a.message),
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_variants() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert!(base64_decode("a*").is_none());
    }

    #[test]
    fn env_endpoint_rules() {
        let c = OtlpConfig::http("http://x:1/v1/traces");
        assert_eq!(c.compression, Compression::Gzip);
        #[cfg(not(feature = "tls"))]
        assert!(OtlpExporter::new(OtlpConfig::http("https://x/v1/traces")).is_err());
        assert!(OtlpExporter::new(OtlpConfig::http("ftp://x/v1/traces")).is_err());
        assert!(OtlpExporter::new(OtlpConfig::grpc("http://127.0.0.1:4317")).is_ok());
    }
}
