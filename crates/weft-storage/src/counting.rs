//! Request counts, errors, latency and bytes of any [`Storage`], as a wrapper.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use weft_core::prom::{Exposition, Kind};

const OPS: [&str; 6] = ["put", "get", "get_range", "list", "delete", "put_if_absent"];
const KINDS: [&str; 5] = ["not_found", "invalid_path", "bad_range", "io", "backend"];
/// Latency bucket bounds in seconds: local calls take microseconds, remote ones up to seconds.
const BOUNDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Clone, Copy)]
enum Op {
    Put = 0,
    Get = 1,
    GetRange = 2,
    List = 3,
    Delete = 4,
    PutIfAbsent = 5,
}

#[derive(Debug, Default)]
struct OpMetrics {
    requests: AtomicU64,
    errors: [AtomicU64; KINDS.len()],
    /// Non-cumulative bucket counts; the last one is above every bound.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_micros: AtomicU64,
}

/// Counters of one store's calls, by operation (`put`, `get`, `get_range`, `list`, `delete`,
/// `put_if_absent`).
///
/// Every call counts as a request when it ends (an abandoned call counts nowhere) and its latency
/// is observed; a failed call also counts as an error of its [`StorageError::kind`]. Reads count
/// the bytes they return, `put` the bytes it writes.
#[derive(Debug, Default)]
pub struct StorageMetrics {
    ops: [OpMetrics; OPS.len()],
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl StorageMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    fn observe(&self, op: Op, started: Instant, err: Option<&StorageError>) {
        let m = &self.ops[op as usize];
        let secs = started.elapsed().as_secs_f64();
        let bucket = BOUNDS.iter().position(|b| secs <= *b).unwrap_or(BOUNDS.len());
        m.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        m.sum_micros.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
        if let Some(e) = err {
            let k = KINDS.iter().position(|k| *k == e.kind()).expect("every kind is listed");
            m.errors[k].fetch_add(1, Ordering::Relaxed);
        }
        m.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `op` so far (`"put"`, `"get"`, …); 0 for an unknown `op`.
    pub fn requests(&self, op: &str) -> u64 {
        OPS.iter()
            .position(|o| *o == op)
            .map_or(0, |i| self.ops[i].requests.load(Ordering::Relaxed))
    }

    /// Failed calls of `op` with error `kind` (see [`StorageError::kind`]).
    pub fn errors(&self, op: &str, kind: &str) -> u64 {
        match (OPS.iter().position(|o| *o == op), KINDS.iter().position(|k| *k == kind)) {
            (Some(o), Some(k)) => self.ops[o].errors[k].load(Ordering::Relaxed),
            _ => 0,
        }
    }

    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// Writes `weft_storage_requests_total{op}`, `weft_storage_errors_total{op,kind}` (only
    /// kinds seen), `weft_storage_request_duration_seconds{op}` (a histogram) and
    /// `weft_storage_bytes_total{direction}`.
    pub fn render(&self, out: &mut Exposition) {
        let n = |v: &AtomicU64| v.load(Ordering::Relaxed) as f64;
        out.family(
            "weft_storage_requests_total",
            Kind::Counter,
            "Calls to object storage, by operation.",
        );
        for (op, m) in OPS.iter().zip(&self.ops) {
            out.sample("weft_storage_requests_total", &[("op", op)], n(&m.requests));
        }
        out.family(
            "weft_storage_errors_total",
            Kind::Counter,
            "Failed calls to object storage, by operation and error kind.",
        );
        for (op, m) in OPS.iter().zip(&self.ops) {
            for (kind, c) in KINDS.iter().zip(&m.errors) {
                if c.load(Ordering::Relaxed) > 0 {
                    out.sample("weft_storage_errors_total", &[("op", op), ("kind", kind)], n(c));
                }
            }
        }
        let h = "weft_storage_request_duration_seconds";
        out.family(h, Kind::Histogram, "Latency of calls to object storage, by operation.");
        for (op, m) in OPS.iter().zip(&self.ops) {
            let mut cumulative = 0.0;
            for (bound, c) in BOUNDS.iter().zip(&m.buckets) {
                cumulative += n(c);
                out.sample(
                    &format!("{h}_bucket"),
                    &[("op", op), ("le", &bound.to_string())],
                    cumulative,
                );
            }
            cumulative += n(&m.buckets[BOUNDS.len()]);
            out.sample(&format!("{h}_bucket"), &[("op", op), ("le", "+Inf")], cumulative);
            out.sample(&format!("{h}_sum"), &[("op", op)], n(&m.sum_micros) / 1e6);
            out.sample(&format!("{h}_count"), &[("op", op)], cumulative);
        }
        out.family(
            "weft_storage_bytes_total",
            Kind::Counter,
            "Object bytes read from and written to object storage.",
        )
        .sample(
            "weft_storage_bytes_total",
            &[("direction", "read")],
            n(&self.bytes_read),
        )
        .sample(
            "weft_storage_bytes_total",
            &[("direction", "write")],
            n(&self.bytes_written),
        );
    }
}

/// Wraps any [`Storage`] and keeps [`StorageMetrics`] of its calls. Behaves exactly as the
/// wrapped store otherwise.
#[derive(Debug)]
pub struct CountingStorage<S> {
    inner: S,
    metrics: Arc<StorageMetrics>,
}

impl<S: Storage> CountingStorage<S> {
    pub fn new(inner: S) -> Self {
        Self::with_metrics(inner, Arc::new(StorageMetrics::new()))
    }

    /// Counts into `metrics`, which several stores may share.
    pub fn with_metrics(inner: S, metrics: Arc<StorageMetrics>) -> Self {
        CountingStorage { inner, metrics }
    }

    pub fn metrics(&self) -> &Arc<StorageMetrics> {
        &self.metrics
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn done<T>(&self, op: Op, started: Instant, res: &Result<T, StorageError>) {
        self.metrics.observe(op, started, res.as_ref().err());
    }
}

#[async_trait]
impl<S: Storage> Storage for CountingStorage<S> {
    fn reads_are_local(&self) -> bool {
        self.inner.reads_are_local()
    }

    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError> {
        let (t, len) = (Instant::now(), data.len() as u64);
        let res = self.inner.put(path, data).await;
        if res.is_ok() {
            self.metrics.bytes_written.fetch_add(len, Ordering::Relaxed);
        }
        self.done(Op::Put, t, &res);
        res
    }

    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError> {
        let (t, len) = (Instant::now(), data.len() as u64);
        let res = self.inner.put_if_absent(path, data).await;
        if matches!(res, Ok(true)) {
            self.metrics.bytes_written.fetch_add(len, Ordering::Relaxed);
        }
        self.done(Op::PutIfAbsent, t, &res);
        res
    }

    async fn get(&self, path: &str) -> Result<Bytes, StorageError> {
        let t = Instant::now();
        let res = self.inner.get(path).await;
        if let Ok(b) = &res {
            self.metrics.bytes_read.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        self.done(Op::Get, t, &res);
        res
    }

    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let t = Instant::now();
        let res = self.inner.get_range(path, range).await;
        if let Ok(b) = &res {
            self.metrics.bytes_read.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        self.done(Op::GetRange, t, &res);
        res
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let t = Instant::now();
        let res = self.inner.list(prefix).await;
        self.done(Op::List, t, &res);
        res
    }

    async fn delete(&self, path: &str) -> Result<(), StorageError> {
        let t = Instant::now();
        let res = self.inner.delete(path).await;
        self.done(Op::Delete, t, &res);
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counting_storage_conforms_and_counts() {
        let s = CountingStorage::new(MemoryStorage::new());
        conformance::run(&s).await;
        let m = s.metrics();
        // The suite's calls: 5 small puts, 5 refused, 1 big, 16 concurrent; 3 create-only puts.
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
        assert_eq!(m.requests("nope"), 0);
        assert_eq!(m.bytes_written(), 5 + 5 + 11 + 8 + 10 + 2 + (3 << 20) + 16 * 1000);
    }

    #[tokio::test]
    async fn renders_prometheus_text() {
        let s = CountingStorage::new(Arc::new(MemoryStorage::new()) as Arc<dyn Storage>);
        s.put("x", Bytes::from_static(b"abc")).await.unwrap();
        s.get("x").await.unwrap();
        s.get("missing").await.unwrap_err();
        let mut out = Exposition::new();
        s.metrics().render(&mut out);
        let text = out.into_string();
        for line in [
            "# TYPE weft_storage_requests_total counter",
            "weft_storage_requests_total{op=\"put\"} 1",
            "weft_storage_requests_total{op=\"get\"} 2",
            "weft_storage_requests_total{op=\"list\"} 0",
            "weft_storage_errors_total{op=\"get\",kind=\"not_found\"} 1",
            "# TYPE weft_storage_request_duration_seconds histogram",
            "weft_storage_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"} 2",
            "weft_storage_request_duration_seconds_count{op=\"get\"} 2",
            "weft_storage_bytes_total{direction=\"read\"} 3",
            "weft_storage_bytes_total{direction=\"write\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("kind=\"bad_range\""));
    }
}
