//! Drives the `tracecontext-service` example the way the W3C test harness does: POST a list of
//! callbacks, and check what the callbacks receive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn example_binary() -> PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/examples/tracecontext-service
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    dir.join(format!("tracecontext-service{}", std::env::consts::EXE_SUFFIX))
}

struct Service(Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the service on a port it picks itself and reads that port from its stderr. Picking a
/// free port here and passing it in races: between the probe listener's drop and the service's
/// bind another test (or a self-connected probe) can take it, and a test then talks to nothing.
fn start_service() -> (Service, u16) {
    let bin = example_binary();
    assert!(bin.exists(), "{} not built (cargo test builds examples)", bin.display());
    let mut child = Command::new(bin)
        .arg("0")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tracecontext-service");
    let stderr = child.stderr.take().unwrap();
    let service = Service(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(rest) = line.split_once("listening on http://127.0.0.1:").map(|(_, r)| r) {
                let port: u16 = rest.trim_end_matches("/test").parse().expect("port");
                let _ = tx.send(port);
                break;
            }
        }
        // Keep draining so the service never blocks on a full pipe.
        for _ in lines {}
    });
    let port = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("service did not say where it listens within 10 s");
    (service, port)
}

/// Lowercased headers and body of one request.
type Received = (Vec<(String, String)>, Vec<u8>);

/// Reads one HTTP/1.1 request.
fn read_request(stream: &mut TcpStream) -> Received {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (headers, body)
}

/// A callback server that records the headers of `n` requests.
fn callbacks(n: usize) -> (String, mpsc::Receiver<Received>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/callback", l.local_addr().unwrap().port());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..n {
            let (mut s, _) = l.accept().unwrap();
            let req = read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            tx.send(req).unwrap();
        }
    });
    (url, rx)
}

fn post(port: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "POST /test HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[test]
fn propagates_traceparent_and_tracestate_to_every_callback() {
    let (_svc, port) = start_service();
    let (url, rx) = callbacks(2);
    let body = format!(r#"[{{"url": "{url}", "arguments": [1]}}, {{"url": "{url}", "arguments": {{"a": "b"}}}}]"#);
    let resp = post(
        port,
        &[
            ("traceparent", "00-12345678901234567890123456789012-1234567890123456-01"),
            ("tracestate", "foo=1,bar=2"),
        ],
        &body,
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    for want_body in ["[1]", r#"{"a":"b"}"#] {
        let (h, b) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let tp = header(&h, "traceparent").unwrap();
        assert!(tp.starts_with("00-12345678901234567890123456789012-"), "{tp}");
        assert_ne!(
            &tp[36..52],
            "1234567890123456",
            "the service's client span is the new parent"
        );
        assert!(tp.ends_with("-01"), "sampled parent: ParentBased samples the child");
        assert_eq!(header(&h, "tracestate"), Some("foo=1,bar=2"));
        assert_eq!(String::from_utf8(b).unwrap(), want_body);
    }
}

#[test]
fn invalid_traceparent_starts_a_new_trace_without_tracestate() {
    let (_svc, port) = start_service();
    let (url, rx) = callbacks(1);
    let body = format!(r#"[{{"url": "{url}", "arguments": []}}]"#);
    post(
        port,
        &[
            ("traceparent", "00-12345678901234567890123456789012-1234567890123456-0X"),
            ("tracestate", "foo=1"),
        ],
        &body,
    );
    let (h, _) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let tp = header(&h, "traceparent").unwrap();
    assert_eq!(tp.len(), 55);
    assert!(!tp.contains("12345678901234567890123456789012"));
    assert_eq!(header(&h, "tracestate"), None);
}

/// Makes the service call back `n` times with `headers` on the incoming request, and returns
/// the headers of every callback, in order.
fn call_back(headers: &[(&str, &str)], n: usize) -> Vec<Vec<(String, String)>> {
    let (_svc, port) = start_service();
    let (url, rx) = callbacks(n);
    let calls: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"url": "{url}", "arguments": [{i}]}}"#))
        .collect();
    let resp = post(port, headers, &format!("[{}]", calls.join(", ")));
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    (0..n)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap().0)
        .collect()
}

/// Checks that every callback got one well-formed traceparent, all with one trace ID and each
/// with its own parent ID; returns the trace ID.
fn distinct_client_spans(received: &[Vec<(String, String)>], incoming_parent: Option<&str>) -> String {
    let mut trace_ids = std::collections::BTreeSet::new();
    let mut parent_ids = std::collections::BTreeSet::new();
    for h in received {
        let tps: Vec<&str> = h
            .iter()
            .filter(|(k, _)| k == "traceparent")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(tps.len(), 1, "{h:?}");
        let tp = tps[0];
        assert_eq!(tp.len(), 55, "{tp}");
        assert!(tp.starts_with("00-"), "{tp}");
        trace_ids.insert(tp[3..35].to_owned());
        parent_ids.insert(tp[36..52].to_owned());
    }
    assert_eq!(trace_ids.len(), 1, "one trace: {trace_ids:?}");
    assert_eq!(
        parent_ids.len(),
        received.len(),
        "one client span per call: {parent_ids:?}"
    );
    if let Some(p) = incoming_parent {
        assert!(
            !parent_ids.contains(p),
            "the incoming parent-id is not reused: {parent_ids:?}"
        );
    }
    trace_ids.into_iter().next().unwrap()
}

#[test]
fn each_callback_gets_its_own_span_with_a_valid_traceparent() {
    let got = call_back(
        &[("traceparent", "00-12345678901234567890123456789012-1234567890123456-01")],
        3,
    );
    let trace_id = distinct_client_spans(&got, Some("1234567890123456"));
    assert_eq!(trace_id, "12345678901234567890123456789012");
}

#[test]
fn each_callback_gets_its_own_span_without_a_traceparent() {
    let got = call_back(&[], 3);
    let trace_id = distinct_client_spans(&got, None);
    assert_ne!(trace_id, "00000000000000000000000000000000");
}

#[test]
fn each_callback_gets_its_own_span_with_an_invalid_traceparent() {
    let got = call_back(
        &[("traceparent", "00-00000000000000000000000000000000-1234567890123456-01")],
        3,
    );
    let trace_id = distinct_client_spans(&got, Some("1234567890123456"));
    assert_ne!(trace_id, "00000000000000000000000000000000");
}

#[test]
fn duplicated_tracestate_keys_keep_the_first_and_the_rest() {
    let got = call_back(
        &[
            ("traceparent", "00-12345678901234567890123456789012-1234567890123456-00"),
            ("tracestate", "foo=1,bar=2,foo=2"),
            ("tracestate", "bar=3,baz=4"),
        ],
        2,
    );
    for h in &got {
        assert_eq!(header(h, "tracestate"), Some("foo=1,bar=2,baz=4"), "{h:?}");
    }
}
