//! `S3Storage` against a real S3-compatible server, and its retries against real sockets.
//!
//! The server is s3proxy, started once per test process by `scripts/s3-server.sh` on a free
//! port under `CARGO_TARGET_TMPDIR`; it stops when this process exits. To use a server that
//! already runs, set `WEFT_S3_ENDPOINT` (and `WEFT_S3_BUCKET`, `WEFT_S3_REGION`,
//! `WEFT_S3_ACCESS_KEY_ID`, `WEFT_S3_SECRET_ACCESS_KEY` unless they are the script's defaults).
//! A test that needs the server and cannot start it fails; it never skips.
//!
//! Each test works under a prefix of its own, so tests share the bucket without seeing each
//! other's objects.

use bytes::Bytes;
use object_store::ObjectStoreExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft_core::prom::Exposition;
use weft_storage::{CountingStorage, S3Storage, Storage, StorageError, conformance};

#[path = "support/s3_server.rs"]
mod s3_server;
use s3_server::*;

#[tokio::test]
async fn s3_storage_conforms() {
    let store = S3Storage::new(config("conformance")).unwrap();
    conformance::run(&store).await;
    clear(&store).await;
}

/// S3 behind HTTPS with a private CA, as many companies run MinIO or a gateway: with the CA
/// named, the whole suite passes; without it, the first request fails naming the certificate.
#[tokio::test]
async fn s3_over_tls_with_a_private_ca_conforms() {
    let s = tls_server();
    assert!(s.endpoint.starts_with("https://"), "{}", s.endpoint);
    let mut c = config_at(&s.endpoint, s, "tls");
    c.ca_file = s.ca_file.clone();
    conformance::run(&S3Storage::new(c.clone()).unwrap()).await;

    let mut untrusted = c.clone();
    untrusted.ca_file = None;
    untrusted.retry = fast_retry(0);
    let e = S3Storage::new(untrusted)
        .unwrap()
        .list("")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");

    let mut missing = c;
    missing.ca_file = Some("/nonexistent/ca.pem".into());
    let e = S3Storage::new(missing)
        .expect_err("a CA file that is not there")
        .to_string();
    assert!(e.contains("ca_file") && e.contains("/nonexistent/ca.pem"), "{e}");
}

#[tokio::test]
async fn counting_s3_storage_conforms_with_paged_listing() {
    let mut c = config("counting");
    // Two keys a page: every list of the suite takes several pages.
    c.list_page_size = 2;
    let store = CountingStorage::new(S3Storage::new(c).unwrap());
    conformance::run(&store).await;
    let m = store.metrics();
    assert_eq!(m.requests("put"), 27);
    assert_eq!(m.errors("put", "invalid_path"), 5);
    assert_eq!(m.requests("get"), 7);
    assert_eq!(m.errors("get", "not_found"), 2);
    assert_eq!(m.requests("get_range"), 6);
    assert_eq!(m.errors("get_range", "bad_range"), 1);
    assert_eq!(m.errors("get_range", "not_found"), 1);
    assert_eq!(m.requests("list"), 5);
    assert_eq!(m.requests("delete"), 4);
    assert_eq!(m.requests("put_if_absent"), 3);
    assert_eq!(m.errors("put_if_absent", "backend"), 0);
    assert_eq!(m.errors("put", "backend"), 0);
    assert_eq!(m.bytes_written(), 5 + 5 + 11 + 8 + 10 + 2 + (3 << 20) + 16 * 1000);
    let mut out = Exposition::new();
    m.render(&mut out);
    assert!(out.as_str().contains("weft_storage_requests_total{op=\"put\"} 27\n"));
    clear(&store).await;
}

#[tokio::test]
async fn list_is_a_string_prefix_in_order_across_pages() {
    let mut c = config("list");
    c.list_page_size = 3;
    let store = S3Storage::new(c).unwrap();
    // No key is also a "directory" of another ("p/1" beside "p/1/z"): s3proxy's filesystem
    // provider, like LocalStorage, cannot hold both.
    let keys = ["p/1", "p/10", "p/2", "p/a/x", "p10", "p/1x/z", "q"];
    for k in keys {
        store.put(k, Bytes::from(k)).await.unwrap();
    }
    let paths = |v: Vec<weft_storage::ObjectMeta>| v.into_iter().map(|o| o.path).collect::<Vec<_>>();
    assert_eq!(paths(store.list("p/1").await.unwrap()), ["p/1", "p/10", "p/1x/z"]);
    assert_eq!(
        paths(store.list("p").await.unwrap()),
        ["p/1", "p/10", "p/1x/z", "p/2", "p/a/x", "p10"]
    );
    let all = store.list("").await.unwrap();
    let mut sorted = keys.to_vec();
    sorted.sort();
    assert_eq!(paths(all.clone()), sorted);
    assert_eq!(all.iter().find(|o| o.path == "p/a/x").unwrap().size, 5);
    clear(&store).await;
}

#[tokio::test]
async fn multipart_object_round_trip_and_ranged_reads() {
    let c = config("multipart");
    let (part, prefix) = (c.part_size as u64, c.prefix.clone());
    let store = S3Storage::new(c.clone()).unwrap();
    // Above the 16 MiB threshold: three parts of 8, 8 and 4 MiB (plus a bit).
    let size = (20 << 20) + 12_345;
    let big = Bytes::from(
        (0..size)
            .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
            .collect::<Vec<u8>>(),
    );
    store.put("blocks/big", big.clone()).await.unwrap();

    // S3 marks a multipart object's ETag with its part count.
    let s = server();
    let raw = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&s.endpoint)
        .with_allow_http(true)
        .with_bucket_name(&s.bucket)
        .with_region(&s.region)
        .with_access_key_id(&s.access_key_id)
        .with_secret_access_key(&s.secret_access_key)
        .build()
        .unwrap();
    let head = raw
        .head(&object_store::path::Path::from(format!("{prefix}/blocks/big")))
        .await
        .unwrap();
    assert_eq!(head.size, size as u64);
    let etag = head.e_tag.unwrap_or_default();
    assert!(
        etag.trim_matches('"').ends_with("-3"),
        "not a 3-part upload: ETag {etag}"
    );

    assert_eq!(store.get("blocks/big").await.unwrap(), big);
    let size = size as u64;
    for r in [
        0..100,
        part - 10..part + 10,
        2 * part - 1..2 * part + 1,
        size - 5..size,
        0..size,
    ] {
        assert_eq!(
            store.get_range("blocks/big", r.clone()).await.unwrap(),
            big.slice(r.start as usize..r.end as usize),
            "range {r:?}"
        );
    }
    assert!(store.get_range("blocks/big", size..size).await.unwrap().is_empty());
    for r in [
        size - 1..size + 1,
        size..size + 1,
        size + 10..size + 20,
        std::ops::Range { start: 7, end: 3 },
    ] {
        match store.get_range("blocks/big", r.clone()).await {
            Err(StorageError::BadRange { size: s, .. }) => assert_eq!(s, size, "range {r:?}"),
            other => panic!("range {r:?}: expected BadRange, got {other:?}"),
        }
    }

    // A small object replaces a multipart one, and the other way round.
    store.put("blocks/big", Bytes::from_static(b"small")).await.unwrap();
    assert_eq!(store.get("blocks/big").await.unwrap(), Bytes::from_static(b"small"));
    store.put("blocks/big", big.clone()).await.unwrap();
    assert_eq!(
        store.get_range("blocks/big", size - 3..size).await.unwrap(),
        big.slice(big.len() - 3..)
    );
    assert_eq!(store.list("blocks/").await.unwrap()[0].size, size);
    clear(&store).await;
}

#[tokio::test]
async fn a_wrong_secret_is_a_backend_error() {
    let mut c = config("auth");
    c.secret_access_key = "wrong".into();
    c.retry = fast_retry(3);
    let store = S3Storage::new(c).unwrap();
    let t = Instant::now();
    let err = store.get("x").await.unwrap_err();
    assert!(matches!(err, StorageError::Backend { op: "get", .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "a 403 must not be retried");
}

// --- retries, against a real listener -----------------------------------------------------

/// What the fault listener does with its `n`th connection (from 0).
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Read the request, answer with this status and close.
    Status(u16),
    /// Read the request head and close without answering.
    Drop,
    /// Read the request head and never answer.
    Hang,
    /// Pass the connection through to the real server.
    Forward,
}

/// A TCP listener on 127.0.0.1 that treats each connection as `plan(n)` says and counts them.
struct FaultListener {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// Bytes passed from the real server to the client.
    bytes_down: Arc<AtomicUsize>,
}

impl FaultListener {
    async fn start(upstream: Option<String>, plan: impl Fn(usize) -> Act + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let bytes_down = Arc::new(AtomicUsize::new(0));
        let (n, down, plan) = (connections.clone(), bytes_down.clone(), Arc::new(plan));
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else { return };
                let act = plan(n.fetch_add(1, Ordering::SeqCst));
                let (upstream, down) = (upstream.clone(), down.clone());
                tokio::spawn(async move {
                    let _ = serve(sock, act, upstream, down).await;
                });
            }
        });
        FaultListener {
            addr,
            connections,
            bytes_down,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Reads one request (head and `Content-Length` body) from `sock`.
async fn read_request(sock: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < len {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        have += n;
    }
    Ok(())
}

async fn serve(mut sock: TcpStream, act: Act, upstream: Option<String>, down: Arc<AtomicUsize>) -> std::io::Result<()> {
    match act {
        Act::Status(code) => {
            read_request(&mut sock).await?;
            let body = format!("<?xml version=\"1.0\"?><Error><Code>Injected{code}</Code></Error>");
            let reply = format!(
                "HTTP/1.1 {code} Injected\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            sock.write_all(reply.as_bytes()).await?;
            sock.shutdown().await
        }
        Act::Drop => {
            read_request(&mut sock).await?;
            Ok(())
        }
        Act::Hang => {
            read_request(&mut sock).await?;
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        }
        Act::Forward => {
            let up = upstream.expect("a forwarding plan needs the real server");
            let to = TcpStream::connect(up.trim_start_matches("http://")).await?;
            let ((client_r, mut client_w), (server_r, mut server_w)) = (sock.into_split(), to.into_split());
            let up = pipe(client_r, &mut server_w, None);
            let back = pipe(server_r, &mut client_w, Some(&down));
            tokio::try_join!(up, back).map(|_| ())
        }
    }
}

/// Copies `from` to `to` until EOF, adding the bytes to `count`.
async fn pipe(
    mut from: impl tokio::io::AsyncRead + Unpin,
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    count: Option<&AtomicUsize>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        if let Some(c) = count {
            c.fetch_add(n, Ordering::SeqCst);
        }
    }
}

/// A store whose requests go through `l`, with the real server's bucket and credentials when
/// it forwards (only the listener is contacted otherwise).
fn store_via(l: &FaultListener, forwarding: bool, max_retries: usize, test: &str) -> S3Storage {
    let offline = Server {
        endpoint: String::new(),
        bucket: "weft".into(),
        region: "us-east-1".into(),
        access_key_id: "weft".into(),
        secret_access_key: "weft-secret".into(),
        ca_file: None,
    };
    let s = if forwarding { server() } else { &offline };
    let mut c = config_at(&l.endpoint(), s, test);
    c.retry = fast_retry(max_retries);
    c.request_timeout = Duration::from_millis(1500);
    S3Storage::new(c).unwrap()
}

#[tokio::test]
async fn retries_5xx_then_succeeds() {
    let up = server().endpoint.clone();
    let l = FaultListener::start(Some(up), |n| match n {
        0 => Act::Status(503),
        1 => Act::Status(500),
        _ => Act::Forward,
    })
    .await;
    let store = store_via(&l, true, 3, "retry-5xx");
    store.put("x", Bytes::from_static(b"survives")).await.unwrap();
    assert_eq!(l.connections(), 3, "two failed attempts, then the real server");
    assert_eq!(store.get("x").await.unwrap(), Bytes::from_static(b"survives"));
    clear(&store).await;
}

#[tokio::test]
async fn retries_connection_drops_timeouts_and_429() {
    let up = server().endpoint.clone();
    let l = FaultListener::start(Some(up), |n| match n {
        0 => Act::Drop,
        1 => Act::Hang,
        2 => Act::Status(429),
        3 => Act::Status(408),
        _ => Act::Forward,
    })
    .await;
    let store = store_via(&l, true, 5, "retry-transport");
    // A GET is idempotent, so even the timed-out attempt is retried.
    assert!(matches!(store.get("missing").await, Err(StorageError::NotFound(_))));
    assert_eq!(l.connections(), 5);
}

#[tokio::test]
async fn gives_up_after_the_bounded_attempts() {
    let l = FaultListener::start(None, |_| Act::Status(503)).await;
    let store = store_via(&l, false, 3, "retry-bounded");
    let err = store.put("x", Bytes::from_static(b"never")).await.unwrap_err();
    assert!(matches!(err, StorageError::Backend { op: "put", .. }), "{err:?}");
    assert_eq!(l.connections(), 4, "one attempt and three retries");
    let msg = err.to_string();
    assert!(msg.contains("put") && msg.contains("\"x\""), "{msg}");
}

#[tokio::test]
async fn never_retries_other_4xx() {
    for (code, is_not_found) in [(403, false), (400, false), (404, true)] {
        let l = FaultListener::start(None, move |_| Act::Status(code)).await;
        let store = store_via(&l, false, 5, "retry-4xx");
        let err = store.get("x").await.unwrap_err();
        assert_eq!(
            matches!(err, StorageError::NotFound(_)),
            is_not_found,
            "{code}: {err:?}"
        );
        assert_eq!(l.connections(), 1, "{code} must not be retried");
    }
}

#[tokio::test]
async fn ranged_reads_fetch_only_the_range() {
    let l = FaultListener::start(Some(server().endpoint.clone()), |_| Act::Forward).await;
    let store = store_via(&l, true, 3, "range-bytes");
    let obj = Bytes::from(vec![7u8; 4 << 20]);
    store.put("obj", obj).await.unwrap();
    let before = l.bytes_down.load(Ordering::SeqCst);
    assert_eq!(store.get_range("obj", 3_000_000..3_000_100).await.unwrap().len(), 100);
    let moved = l.bytes_down.load(Ordering::SeqCst) - before;
    assert!(
        moved < 16 << 10,
        "a 100-byte range moved {moved} bytes: not a range request"
    );
    clear(&store).await;
}

/// Deletes everything under the store's prefix, so a long-running server does not fill up.
async fn clear(store: &dyn Storage) {
    for o in store.list("").await.unwrap() {
        store.delete(&o.path).await.unwrap();
    }
}
