//! The S3-compatible server tests run against: s3proxy, started once per test process by
//! `scripts/s3-server.sh` on a free port under `CARGO_TARGET_TMPDIR` (it stops when the
//! process exits), or the one `WEFT_S3_ENDPOINT` names. A test that needs it and cannot start
//! it fails; it never skips. Shared by the test crates that use S3 (`#[path]`-included).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use weft_storage::{S3Config, S3Retry};

#[derive(Debug, Clone)]
pub struct Server {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// The private CA of an HTTPS server.
    pub ca_file: Option<PathBuf>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static TLS_SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

pub fn server() -> &'static Server {
    match SERVER.get_or_init(|| start_server(false)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// A second server, on HTTPS with a certificate from a private CA (`ca_file`).
pub fn tls_server() -> &'static Server {
    match TLS_SERVER.get_or_init(|| start_server(true)) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn start_server(tls: bool) -> Result<Server, String> {
    if let (false, Ok(endpoint)) = (tls, std::env::var("WEFT_S3_ENDPOINT")) {
        return Ok(Server {
            endpoint,
            bucket: env_or("WEFT_S3_BUCKET", "weft"),
            region: env_or("WEFT_S3_REGION", "us-east-1"),
            access_key_id: env_or("WEFT_S3_ACCESS_KEY_ID", "weft"),
            secret_access_key: env_or("WEFT_S3_SECRET_ACCESS_KEY", "weft-secret"),
            ca_file: None,
        });
    }
    let script: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3-server.sh");
    let name = if tls { "s3-tls-server" } else { "s3-server" };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port for the S3 test server: {e}"))?
        .port();
    let how = "Start one with `scripts/s3-server.sh start DIR PORT` (needs java 17 and mvn) and set \
               WEFT_S3_ENDPOINT=http://127.0.0.1:PORT, or fix what the script reported.";
    let t = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .arg("start")
        .arg(&dir)
        .arg(port.to_string())
        .env("S3_SERVER_OWNER_PID", std::process::id().to_string())
        .env("S3_SERVER_TLS", if tls { "1" } else { "" })
        .output()
        .map_err(|e| format!("cannot run {}: {e}. {how}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "the S3 test server did not start: `{} start {} {port}` exited with {}:\n{stderr}\n{how}",
            script.display(),
            dir.display(),
            out.status
        ));
    }
    eprintln!("s3 test server on port {port} started in {:.1?}", t.elapsed());
    // The script's last line: `WEFT_S3_ENDPOINT=… WEFT_S3_BUCKET=… …`.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let var = |name: &str| {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
            .ok_or_else(|| format!("the script printed no {name} in {stdout:?}"))
    };
    Ok(Server {
        endpoint: var("WEFT_S3_ENDPOINT")?,
        bucket: var("WEFT_S3_BUCKET")?,
        region: var("WEFT_S3_REGION")?,
        access_key_id: var("WEFT_S3_ACCESS_KEY_ID")?,
        secret_access_key: var("WEFT_S3_SECRET_ACCESS_KEY")?,
        ca_file: if tls {
            Some(var("WEFT_S3_CA_FILE")?.into())
        } else {
            None
        },
    })
}

pub fn fast_retry(max_retries: usize) -> S3Retry {
    S3Retry {
        max_retries,
        init_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(100),
        base: 2.0,
        timeout: Duration::from_secs(30),
    }
}

/// A config for `endpoint` with the server's bucket and credentials, under a fresh prefix.
pub fn config_at(endpoint: &str, s: &Server, test: &str) -> S3Config {
    let mut c = S3Config::new(
        Some(endpoint),
        &s.bucket,
        &s.region,
        &s.access_key_id,
        &s.secret_access_key,
    )
    .unwrap()
    .with_prefix(&format!("tests/{test}-{}", uuid::Uuid::new_v4()))
    .unwrap();
    c.retry = fast_retry(3);
    c
}

pub fn config(test: &str) -> S3Config {
    let s = server();
    config_at(&s.endpoint, s, test)
}
