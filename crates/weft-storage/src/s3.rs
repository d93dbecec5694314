//! Objects in an S3-compatible store, through the `object_store` crate.
//!
//! - `put` is one `PutObject`, or a multipart upload for objects above
//!   [`S3Config::multipart_threshold`]. S3 makes either visible only when complete, so readers see
//!   the old object or the new one. A failed multipart upload is aborted; one whose future is
//!   dropped is left incomplete and invisible (a bucket lifecycle rule should expire those).
//! - `get_range` is one HTTP range request. S3 answers a range reaching past the end with the
//!   bytes that exist (or 416 when it starts past the end); both become
//!   [`StorageError::BadRange`]. HTTP has no empty range, so an empty `get_range` is a `HEAD`.
//! - `list` pages through `ListObjectsV2` with the raw prefix and sorts the result.
//! - Transient failures (5xx, 429, 408, connection errors, timeouts of idempotent requests) are
//!   retried by `object_store`'s client with exponential back-off and decorrelated jitter, at
//!   most [`S3Retry::max_retries`] times and within [`S3Retry::timeout`]. Other 4xx are not.

use super::*;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig};
use std::time::Duration;

const MIB: usize = 1 << 20;
/// S3 refuses multipart parts below 5 MiB (except the last) and above 5 GiB.
const MIN_PART: usize = 5 * MIB;
const MAX_PART: usize = 5 << 30;

/// Retries of transient failures, done by `object_store`'s HTTP client.
#[derive(Debug, Clone, PartialEq)]
pub struct S3Retry {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: usize,
    /// The first back-off. Each next one is drawn at random between this and `base` times the
    /// previous one, capped at `max_backoff`.
    pub init_backoff: Duration,
    pub max_backoff: Duration,
    pub base: f64,
    /// No retry starts later than this after the first attempt.
    pub timeout: Duration,
}

impl Default for S3Retry {
    fn default() -> Self {
        S3Retry {
            max_retries: 5,
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Where and how to reach an S3-compatible store.
///
/// Build one with [`S3Config::new`] (which checks the required values) and adjust the public
/// fields; [`S3Storage::new`] checks the whole config again.
#[derive(Clone, PartialEq)]
pub struct S3Config {
    /// `http(s)://host[:port]`, for S3-compatible servers; `None` is AWS S3 in `region`.
    pub endpoint: Option<String>,
    pub bucket: String,
    pub region: String,
    /// Static credentials. Both empty means the environment's chain (`AWS_*` variables, web
    /// identity, instance metadata).
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Key prefix inside the bucket under which every object lives (`""` for the bucket root).
    /// Object paths are relative to it.
    pub prefix: String,
    /// Allows `http://` endpoints (local servers). Off by default.
    pub allow_http: bool,
    /// Path-style addressing (`endpoint/bucket/key`), which S3-compatible servers expect. When
    /// off, requests go to `bucket.endpoint/key` (virtual-host style, which AWS prefers).
    pub path_style: bool,
    /// PEM bundle of CAs to trust besides the system's: for a server with a private CA.
    pub ca_file: Option<std::path::PathBuf>,
    /// Objects larger than this are written with a multipart upload.
    pub multipart_threshold: usize,
    /// Part size of multipart uploads (at least 5 MiB).
    pub part_size: usize,
    /// Parts of one object uploaded at once.
    pub part_concurrency: usize,
    /// Keys asked for per `ListObjectsV2` page (at most 1000).
    pub list_page_size: usize,
    /// Time limit of one HTTP request, and of connecting.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: S3Retry,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("prefix", &self.prefix)
            .field("allow_http", &self.allow_http)
            .field("path_style", &self.path_style)
            .field("ca_file", &self.ca_file)
            .field("multipart_threshold", &self.multipart_threshold)
            .field("part_size", &self.part_size)
            .field("part_concurrency", &self.part_concurrency)
            .field("list_page_size", &self.list_page_size)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

/// A bad [`S3Config`] value: which field, the value (secrets are not repeated), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid s3 {field} {value:?}: {reason}")]
pub struct S3ConfigError {
    pub field: &'static str,
    pub value: String,
    pub reason: String,
}

impl S3Config {
    /// A config for `bucket` at `endpoint` (`None` for AWS) with static credentials and the
    /// defaults for the rest: no prefix, path-style addressing, `allow_http` when the endpoint
    /// is `http://`, multipart above 16 MiB in 8 MiB parts, 5 retries. Fails naming the first
    /// bad value.
    pub fn new(
        endpoint: Option<&str>,
        bucket: &str,
        region: &str,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> Result<Self, S3ConfigError> {
        let cfg = S3Config {
            endpoint: endpoint.map(|e| e.trim_end_matches('/').to_string()),
            bucket: bucket.to_string(),
            region: region.to_string(),
            access_key_id: access_key_id.to_string(),
            secret_access_key: secret_access_key.to_string(),
            prefix: String::new(),
            allow_http: endpoint.is_some_and(|e| e.starts_with("http://")),
            path_style: true,
            ca_file: None,
            multipart_threshold: 16 * MIB,
            part_size: 8 * MIB,
            part_concurrency: 4,
            list_page_size: 1000,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            retry: S3Retry::default(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets the key prefix inside the bucket.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, S3ConfigError> {
        self.prefix = prefix.to_string();
        self.validate()?;
        Ok(self)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), S3ConfigError> {
        let bad = |field, value: &str, reason: &str| {
            Err(S3ConfigError {
                field,
                value: value.to_string(),
                reason: reason.to_string(),
            })
        };
        if let Some(ep) = &self.endpoint {
            let rest = if let Some(r) = ep.strip_prefix("https://") {
                r
            } else if let Some(r) = ep.strip_prefix("http://") {
                if !self.allow_http {
                    return bad("endpoint", ep, "is http:// but allow_http is off");
                }
                r
            } else {
                return bad("endpoint", ep, "must start with http:// or https://");
            };
            let host = rest.split('/').next().unwrap_or("");
            if host.is_empty() || rest.contains(['?', '#', ' ']) {
                return bad("endpoint", ep, "must be a URL with a host and no query");
            }
        }
        let b = &self.bucket;
        if b.len() < 3 || b.len() > 63 {
            return bad("bucket", b, "must be 3 to 63 characters long");
        }
        if !b
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        {
            return bad("bucket", b, "may hold only lowercase letters, digits, '-' and '.'");
        }
        if !b.starts_with(|c: char| c.is_ascii_alphanumeric()) || !b.ends_with(|c: char| c.is_ascii_alphanumeric()) {
            return bad("bucket", b, "must start and end with a letter or digit");
        }
        let r = &self.region;
        if r.is_empty()
            || !r
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        {
            return bad("region", r, "must be non-empty lowercase letters, digits and '-'");
        }
        match (self.access_key_id.is_empty(), self.secret_access_key.is_empty()) {
            (true, false) => {
                return bad("access_key_id", "", "is empty but secret_access_key is set");
            }
            (false, true) => {
                return bad("secret_access_key", "", "is empty but access_key_id is set");
            }
            _ => {}
        }
        if !self.prefix.is_empty() {
            let p = self.prefix.trim_end_matches('/');
            if validate_path(p).is_err() {
                return bad(
                    "prefix",
                    &self.prefix,
                    "must be a '/'-separated key prefix without leading '/' or '.', '..' or empty segments",
                );
            }
        }
        if self.part_size < MIN_PART || self.part_size > MAX_PART {
            return bad(
                "part_size",
                &self.part_size.to_string(),
                "must be between 5 MiB and 5 GiB",
            );
        }
        if self.multipart_threshold < self.part_size {
            return bad(
                "multipart_threshold",
                &self.multipart_threshold.to_string(),
                "must be at least part_size",
            );
        }
        if self.part_concurrency == 0 {
            return bad("part_concurrency", "0", "must be at least 1");
        }
        if self.list_page_size == 0 || self.list_page_size > 1000 {
            return bad(
                "list_page_size",
                &self.list_page_size.to_string(),
                "must be between 1 and 1000",
            );
        }
        for (field, d) in [
            ("request_timeout", self.request_timeout),
            ("connect_timeout", self.connect_timeout),
            ("retry.timeout", self.retry.timeout),
        ] {
            if d.is_zero() {
                return bad(field, "0s", "must be positive");
            }
        }
        if self.retry.base < 1.0 || !self.retry.base.is_finite() {
            return bad("retry.base", &self.retry.base.to_string(), "must be at least 1");
        }
        if self.retry.init_backoff.is_zero() || self.retry.init_backoff > self.retry.max_backoff {
            return bad(
                "retry.init_backoff",
                &format!("{:?}", self.retry.init_backoff),
                "must be positive and at most retry.max_backoff",
            );
        }
        Ok(())
    }

    /// The prefix as keys start with it: `""` or ending in one `/`.
    fn key_prefix(&self) -> String {
        let p = self.prefix.trim_end_matches('/');
        if p.is_empty() { String::new() } else { format!("{p}/") }
    }
}

/// A [`Storage`] over an S3-compatible bucket (see the module docs for how each call maps to
/// requests).
#[derive(Debug, Clone)]
pub struct S3Storage {
    store: Arc<AmazonS3>,
    config: Arc<S3Config>,
    key_prefix: String,
}

impl S3Storage {
    /// Checks `config` and builds the client. Makes no request: a wrong endpoint or credentials
    /// show in the first call.
    pub fn new(config: S3Config) -> Result<Self, S3ConfigError> {
        config.validate()?;
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let profile = (config.access_key_id.is_empty()
            && env("AWS_ACCESS_KEY_ID").is_none()
            && env("AWS_WEB_IDENTITY_TOKEN_FILE").is_none())
        .then(|| {
            let file = env("AWS_SHARED_CREDENTIALS_FILE")
                .map(std::path::PathBuf::from)
                .or_else(|| env("HOME").map(|h| std::path::Path::new(&h).join(".aws/credentials")))?;
            let text = std::fs::read_to_string(file).ok()?;
            profile_keys(&text, env("AWS_PROFILE").as_deref().unwrap_or("default"))
        })
        .flatten();
        let mut b = if let Some((id, secret, token)) = profile {
            let b = AmazonS3Builder::from_env()
                .with_access_key_id(id)
                .with_secret_access_key(secret);
            match token {
                Some(t) => b.with_token(t),
                None => b,
            }
        } else if config.access_key_id.is_empty() {
            // The environment (AWS_ACCESS_KEY_ID and friends), web identity (IRSA on EKS),
            // the ECS container endpoint, then EC2 instance metadata.
            AmazonS3Builder::from_env()
        } else {
            AmazonS3Builder::new()
                .with_access_key_id(&config.access_key_id)
                .with_secret_access_key(&config.secret_access_key)
        };
        let mut client = ClientOptions::new()
            .with_allow_http(config.allow_http)
            .with_timeout(config.request_timeout)
            .with_connect_timeout(config.connect_timeout);
        if let Some(path) = &config.ca_file {
            let bad = |reason: String| S3ConfigError {
                field: "ca_file",
                value: path.display().to_string(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
            let certs = object_store::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("holds no PEM certificate".into()));
            }
            for c in certs {
                client = client.with_root_certificate(c);
            }
        }
        b = b
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_allow_http(config.allow_http)
            .with_virtual_hosted_style_request(!config.path_style)
            .with_client_options(client)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: config.retry.init_backoff,
                    max_backoff: config.retry.max_backoff,
                    base: config.retry.base,
                },
                max_retries: config.retry.max_retries,
                retry_timeout: config.retry.timeout,
            });
        if let Some(ep) = &config.endpoint {
            b = b.with_endpoint(ep);
        }
        let store = b.build().map_err(|e| S3ConfigError {
            field: "config",
            value: config.bucket.clone(),
            reason: e.to_string(),
        })?;
        Ok(S3Storage {
            store: Arc::new(store),
            key_prefix: config.key_prefix(),
            config: Arc::new(config),
        })
    }

    pub fn config(&self) -> &S3Config {
        &self.config
    }

    fn key(&self, path: &str) -> Result<ObjectPath, StorageError> {
        validate_path(path)?;
        ObjectPath::parse(format!("{}{path}", self.key_prefix)).map_err(|_| StorageError::InvalidPath {
            path: path.to_string(),
            reason: "not a valid object store key",
        })
    }

    async fn put_multipart(&self, key: &ObjectPath, data: Bytes) -> Result<(), object_store::Error> {
        let mut upload = self.store.put_multipart(key).await?;
        let step = self.config.part_size;
        // Part numbers are assigned in call order, so the parts may finish in any order.
        let parts: Vec<_> = (0..data.len())
            .step_by(step)
            .map(|at| upload.put_part(data.slice(at..(at + step).min(data.len())).into()))
            .collect();
        let sent = futures::stream::iter(parts)
            .buffer_unordered(self.config.part_concurrency)
            .try_collect::<Vec<()>>()
            .await;
        let done = match sent {
            Ok(_) => upload.complete().await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            if let Err(abort) = upload.abort().await {
                tracing::warn!(key = %key, error = %abort, "aborting failed multipart upload");
            }
            return Err(e);
        }
        Ok(())
    }

    /// After a ranged read failed or came back short: the object's size decides between
    /// `NotFound`, `BadRange` and the original error.
    async fn range_error(
        &self,
        key: &ObjectPath,
        path: &str,
        range: &Range<u64>,
        original: Option<object_store::Error>,
    ) -> StorageError {
        match self.store.head(key).await {
            Ok(meta) if range.start > range.end || range.end > meta.size => StorageError::BadRange {
                path: path.to_string(),
                start: range.start,
                end: range.end,
                size: meta.size,
            },
            Ok(_) => match original {
                Some(e) => backend("get_range", path, e),
                None => StorageError::Backend {
                    op: "get_range",
                    path: path.to_string(),
                    source: "the server answered a range request with different bytes".into(),
                },
            },
            Err(object_store::Error::NotFound { .. }) => StorageError::NotFound(path.to_string()),
            Err(e) => backend("get_range", path, original.unwrap_or(e)),
        }
    }
}

/// The static keys of `profile` in an AWS shared credentials file (`~/.aws/credentials`):
/// access key, secret and session token, when the profile has the first two.
fn profile_keys(ini: &str, profile: &str) -> Option<(String, String, Option<String>)> {
    let mut section = "";
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in ini.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim();
            continue;
        }
        if section != profile {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    Some((id?, secret?, token))
}

fn backend(op: &'static str, path: &str, e: object_store::Error) -> StorageError {
    StorageError::Backend {
        op,
        path: path.to_string(),
        source: Box::new(e),
    }
}

fn map_err(op: &'static str, path: &str, e: object_store::Error) -> StorageError {
    match e {
        object_store::Error::NotFound { .. } => StorageError::NotFound(path.to_string()),
        e => backend(op, path, e),
    }
}

#[async_trait]
impl Storage for S3Storage {
    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError> {
        let key = self.key(path)?;
        let res = if data.len() > self.config.multipart_threshold {
            self.put_multipart(&key, data).await
        } else {
            self.store.put(&key, data.into()).await.map(|_| ())
        };
        res.map_err(|e| backend("put", path, e))
    }

    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError> {
        let key = self.key(path)?;
        let opts = object_store::PutOptions {
            mode: object_store::PutMode::Create,
            ..Default::default()
        };
        match self.store.put_opts(&key, data.into(), opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(backend("put_if_absent", path, e)),
        }
    }

    async fn get(&self, path: &str) -> Result<Bytes, StorageError> {
        let key = self.key(path)?;
        let got = self.store.get(&key).await.map_err(|e| map_err("get", path, e))?;
        got.bytes().await.map_err(|e| map_err("get", path, e))
    }

    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let key = self.key(path)?;
        if range.start >= range.end {
            // HTTP has no empty range: an empty or inverted one only needs the object's size.
            let meta = self.store.head(&key).await.map_err(|e| map_err("get_range", path, e))?;
            if range.start > range.end || range.end > meta.size {
                return Err(StorageError::BadRange {
                    path: path.to_string(),
                    start: range.start,
                    end: range.end,
                    size: meta.size,
                });
            }
            return Ok(Bytes::new());
        }
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            ..Default::default()
        };
        let got = match self.store.get_opts(&key, opts).await {
            Ok(got) => got,
            Err(e @ object_store::Error::NotFound { .. }) => return Err(map_err("get_range", path, e)),
            // S3 answers 416 to a range starting at or past the end.
            Err(e) => return Err(self.range_error(&key, path, &range, Some(e)).await),
        };
        if got.meta.size < range.end {
            return Err(StorageError::BadRange {
                path: path.to_string(),
                start: range.start,
                end: range.end,
                size: got.meta.size,
            });
        }
        let bytes = got.bytes().await.map_err(|e| map_err("get_range", path, e))?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(self.range_error(&key, path, &range, None).await);
        }
        Ok(bytes)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let full = format!("{}{prefix}", self.key_prefix);
        let mut out = Vec::new();
        let mut page_token = None;
        loop {
            let opts = PaginatedListOptions {
                max_keys: Some(self.config.list_page_size),
                page_token: page_token.take(),
                ..Default::default()
            };
            let page = self
                .store
                .list_paginated((!full.is_empty()).then_some(full.as_str()), opts)
                .await
                .map_err(|e| backend("list", prefix, e))?;
            for o in page.result.objects {
                let key = o.location.as_ref();
                // Keys outside the store's prefix, or the directory markers some tools write,
                // are not objects of this store.
                let Some(rel) = key.strip_prefix(self.key_prefix.as_str()) else {
                    continue;
                };
                if rel.starts_with(prefix) && validate_path(rel).is_ok() {
                    out.push(ObjectMeta {
                        path: rel.to_string(),
                        size: o.size,
                    });
                }
            }
            match page.page_token {
                Some(t) => page_token = Some(t),
                None => break,
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|a, b| a.path == b.path);
        Ok(out)
    }

    async fn delete(&self, path: &str) -> Result<(), StorageError> {
        let key = self.key(path)?;
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(backend("delete", path, e)),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn profiles_of_a_shared_credentials_file() {
        let ini = "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s1\n\n\
                   # a comment\n[prod]\naws_access_key_id=AKIAPROD\naws_secret_access_key=s2\n\
                   aws_session_token = tok\n[broken]\naws_access_key_id = only-an-id\n";
        assert_eq!(
            profile_keys(ini, "default"),
            Some(("AKIADEFAULT".into(), "s1".into(), None))
        );
        assert_eq!(
            profile_keys(ini, "prod"),
            Some(("AKIAPROD".into(), "s2".into(), Some("tok".into())))
        );
        assert_eq!(profile_keys(ini, "broken"), None);
        assert_eq!(profile_keys(ini, "missing"), None);
    }

    use super::*;

    fn ok() -> S3Config {
        S3Config::new(Some("http://127.0.0.1:9000"), "weft", "us-east-1", "k", "s").unwrap()
    }

    fn field_of(r: Result<impl std::fmt::Debug, S3ConfigError>) -> &'static str {
        r.unwrap_err().field
    }

    #[test]
    fn config_defaults_and_prefix() {
        let c = ok();
        assert!(c.allow_http && c.path_style);
        assert_eq!((c.multipart_threshold, c.part_size), (16 * MIB, 8 * MIB));
        assert_eq!(c.key_prefix(), "");
        assert_eq!(c.clone().with_prefix("a/b/").unwrap().key_prefix(), "a/b/");
        assert_eq!(c.with_prefix("a").unwrap().key_prefix(), "a/");
        let aws = S3Config::new(None, "my-bucket.x", "eu-west-1", "", "").unwrap();
        assert!(!aws.allow_http);
    }

    #[test]
    fn config_errors_name_the_bad_value() {
        let new = |ep: Option<&str>, b: &str, r: &str, k: &str, s: &str| S3Config::new(ep, b, r, k, s);
        assert_eq!(field_of(new(Some("ftp://x"), "weft", "r", "k", "s")), "endpoint");
        assert_eq!(field_of(new(Some("http://"), "weft", "r", "k", "s")), "endpoint");
        assert_eq!(field_of(new(None, "ab", "r", "k", "s")), "bucket");
        assert_eq!(field_of(new(None, "Upper", "r", "k", "s")), "bucket");
        assert_eq!(field_of(new(None, "-abc", "r", "k", "s")), "bucket");
        assert_eq!(field_of(new(None, "weft", "", "k", "s")), "region");
        assert_eq!(field_of(new(None, "weft", "r", "", "s")), "access_key_id");
        assert_eq!(field_of(new(None, "weft", "r", "k", "")), "secret_access_key");
        assert_eq!(field_of(ok().with_prefix("/abs")), "prefix");
        assert_eq!(field_of(ok().with_prefix("a/../b")), "prefix");

        let e = new(None, "Bad_Bucket", "r", "k", "s").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid s3 bucket \"Bad_Bucket\": may hold only lowercase letters, digits, '-' and '.'"
        );

        let mut c = ok();
        c.allow_http = false;
        let e = c.validate().unwrap_err();
        assert_eq!((e.field, e.value.as_str()), ("endpoint", "http://127.0.0.1:9000"));

        let mut c = ok();
        c.part_size = MIB;
        assert_eq!(field_of(c.validate()), "part_size");
        let mut c = ok();
        c.multipart_threshold = c.part_size - 1;
        assert_eq!(field_of(c.validate()), "multipart_threshold");
        let mut c = ok();
        c.list_page_size = 1001;
        assert_eq!(field_of(c.validate()), "list_page_size");
        let mut c = ok();
        c.retry.timeout = Duration::ZERO;
        assert_eq!(field_of(S3Storage::new(c)), "retry.timeout");
    }

    #[test]
    fn secrets_stay_out_of_debug_and_errors() {
        let c = S3Config::new(None, "weft", "r", "key", "hunter2").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        let e = S3Config::new(None, "weft", "r", "", "hunter2").unwrap_err();
        assert!(!e.to_string().contains("hunter2"));
    }
}
