//! The distributor (`--target distributor`): the write path's front half when weft runs as a
//! cluster on Kafka (ADR 0008).
//!
//! ```text
//! receiver ─► TraceConsumer::push ─► validate (trace runs) ─► rate limit
//!          ─► partition of each trace run (weft_kafka::record::partition_of)
//!          ─► one record per partition: the request's own bytes, split by partition
//!          ─► one Produce per leader broker, acks=all, idempotent ─► ack to the client
//! ```
//!
//! Marshal once: the request is validated in place and never decoded into messages. When every
//! trace of a request routes to one partition the record's value is the request itself;
//! otherwise [`SplitRequest`] lists, per partition, the byte ranges of its spans with their
//! resource and scope (and new length headers for those), and the producer copies those
//! ranges once, into the record batch. Nothing is re-encoded.
//!
//! The live-trace size limit is not applied here: a distributor keeps no trace state (Tempo's
//! distributors neither); block builders write what was acknowledged.

use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_admission::limits::RateLimiter;
use weft_admission::metrics::{IngestMetrics, RefuseReason};
use weft_admission::{PushError, PushOutcome, TraceConsumer};
use weft_core::prom::{Exposition, Kind};
use weft_kafka::record::{FORMAT_HEADER, FORMAT_VERSION, partition_of};
use weft_kafka::{PartitionRecords, Producer, Record};
use weft_otlp::request::{RequestSummary, SplitRequest};

/// Settings of a distributor.
#[derive(Debug, Clone)]
pub struct DistributorConfig {
    /// Per-tenant ingestion rate in bytes/s; 0 disables.
    pub rate_bytes: u64,
    pub burst_bytes: u64,
    /// Longest wait for Kafka to acknowledge a request (retries included).
    pub produce_timeout: Duration,
    /// Requests holding more than this many bytes not yet acknowledged by Kafka cause
    /// refusals (503), so a slow or absent broker bounds memory instead of growing it.
    pub max_inflight_bytes: u64,
}

impl Default for DistributorConfig {
    fn default() -> Self {
        DistributorConfig {
            rate_bytes: 0,
            burst_bytes: 0,
            produce_timeout: Duration::from_secs(10),
            max_inflight_bytes: 64 << 20,
        }
    }
}

/// Admits requests and writes them to Kafka. Implements [`TraceConsumer`].
pub struct Distributor {
    cfg: DistributorConfig,
    producer: Arc<Producer>,
    partitions: usize,
    rate: RateLimiter,
    roots: weft_admission::RootWatch,
    pub metrics: Arc<IngestMetrics>,
    inflight_bytes: AtomicU64,
    split_requests: AtomicU64,
}

impl Distributor {
    /// A distributor writing through `producer`, whose topic must exist.
    pub async fn new(cfg: DistributorConfig, producer: Arc<Producer>) -> Result<Arc<Distributor>, weft_kafka::Error> {
        let partitions = producer.client().partition_count(producer.topic()).await?;
        Ok(Arc::new(Distributor {
            rate: RateLimiter::new(cfg.rate_bytes, cfg.burst_bytes),
            roots: Default::default(),
            cfg,
            producer,
            partitions,
            metrics: Arc::new(IngestMetrics::default()),
            inflight_bytes: AtomicU64::new(0),
            split_requests: AtomicU64::new(0),
        }))
    }

    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// Appends the distributor's and its producer's counters to a Prometheus page.
    pub fn render_metrics(&self, out: &mut Exposition) {
        self.metrics.render(out);
        let s = &self.producer.stats;
        let n = |v: &AtomicU64| v.load(Ordering::Relaxed) as f64;
        let families: [(&str, Kind, &str, f64); 9] = [
            (
                "weft_kafka_produce_requests_total",
                Kind::Counter,
                "Produce requests sent to Kafka brokers, retries included.",
                n(&s.requests),
            ),
            (
                "weft_kafka_batches_total",
                Kind::Counter,
                "Record batches Kafka acknowledged.",
                n(&s.batches),
            ),
            (
                "weft_kafka_records_total",
                Kind::Counter,
                "Records Kafka acknowledged (one per partition per request).",
                n(&s.records),
            ),
            (
                "weft_kafka_bytes_total",
                Kind::Counter,
                "Bytes of record batches Kafka acknowledged, batch headers included.",
                n(&s.bytes),
            ),
            (
                "weft_kafka_batch_retries_total",
                Kind::Counter,
                "Batches sent again after a retriable failure.",
                n(&s.retries),
            ),
            (
                "weft_kafka_produce_failures_total",
                Kind::Counter,
                "Requests Kafka did not acknowledge in time (answered 503).",
                n(&s.failures),
            ),
            (
                "weft_distributor_split_requests_total",
                Kind::Counter,
                "Requests whose traces went to more than one partition.",
                n(&self.split_requests),
            ),
            (
                "weft_distributor_inflight_bytes",
                Kind::Gauge,
                "Bytes of requests waiting for Kafka's acknowledgement.",
                n(&self.inflight_bytes),
            ),
            (
                "weft_distributor_partitions",
                Kind::Gauge,
                "Partitions of the Kafka topic.",
                self.partitions as f64,
            ),
        ];
        for (name, kind, help, v) in families {
            out.family(name, kind, help);
            out.sample(name, &[], v);
        }
    }

    /// Groups the request's spans by partition: the one partition they all go to, or the
    /// split of the request by partition.
    fn route(&self, body: &Bytes, summary: &RequestSummary) -> Result<Route, PushError> {
        let n = self.partitions;
        let first = summary.runs.first().map_or(0, |r| partition_of(&r.trace_id, n));
        let mut parts_of_runs = Vec::with_capacity(summary.runs.len());
        let mut one = true;
        for r in &summary.runs {
            let p = partition_of(&r.trace_id, n);
            one &= p == first;
            parts_of_runs.push(p);
        }
        if one {
            return Ok(Route::One(first));
        }
        self.split_requests.fetch_add(1, Ordering::Relaxed);
        let mut span_part = Vec::with_capacity(summary.spans as usize);
        for (r, &p) in summary.runs.iter().zip(&parts_of_runs) {
            span_part.extend(std::iter::repeat_n(p, r.spans as usize));
        }
        SplitRequest::new(body, n, |i| span_part[i])
            .map(Route::Split)
            .map_err(|e| PushError::Internal(e.to_string()))
    }
}

/// Where a request's spans go.
enum Route {
    /// All to this partition: the record's value is the request itself.
    One(usize),
    /// To several: each partition's record is the split's pieces for it.
    Split(SplitRequest),
}

impl Distributor {
    /// Admits one request (validated, or only summarized when weft `converted` it from a
    /// foreign format) and produces it to its partitions.
    async fn push_request(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        deadline: Option<tokio::time::Instant>,
        converted: bool,
    ) -> Result<PushOutcome, PushError> {
        let refuse = |reason: RefuseReason, spans: u32| self.metrics.refused(tenant, reason, u64::from(spans.max(1)));
        let mut summary = RequestSummary::default();
        if !weft_admission::admit_request(
            &body,
            tenant,
            &self.rate,
            &self.metrics,
            &self.roots,
            &mut summary,
            converted,
        )? {
            return Ok(PushOutcome::empty());
        }
        let len = body.len() as u64;
        let inflight = self.inflight_bytes.fetch_add(len, Ordering::AcqRel);
        let _release = Release(&self.inflight_bytes, len);
        if inflight + len > self.cfg.max_inflight_bytes {
            refuse(RefuseReason::Overloaded, summary.spans);
            return Err(PushError::Overloaded(format!(
                "{inflight} bytes are waiting for Kafka's acknowledgement; retry later"
            )));
        }
        let route = self.route(&body, &summary)?;
        // Each partition's value as slices of the request (and of the split's new resource and
        // scope headers): the producer copies them once, into the record batch.
        let values: Vec<(usize, Vec<&[u8]>)> = match &route {
            Route::One(p) => vec![(*p, vec![&body[..]])],
            Route::Split(split) => (0..split.parts())
                .filter(|&p| !split.is_empty(p))
                .map(|p| (p, split.pieces(&body, p).collect()))
                .collect(),
        };
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let key = tenant.as_bytes();
        let headers: [(&str, &[u8]); 1] = [(FORMAT_HEADER, FORMAT_VERSION)];
        let sends: Vec<PartitionRecords<'_>> = values
            .iter()
            .map(|(p, value)| PartitionRecords {
                partition: *p as i32,
                records: vec![Record {
                    key: Some(key),
                    value_parts: value,
                    headers: &headers,
                    timestamp_ms: now_ms,
                }],
            })
            .collect();
        let mut until = tokio::time::Instant::now() + self.cfg.produce_timeout;
        if let Some(d) = deadline {
            until = until.min(d);
        }
        if let Err(e) = self.producer.send(&sends, until).await {
            return Err(match e.code() {
                Some(10) | Some(18) => {
                    refuse(RefuseReason::RequestTooLarge, summary.spans);
                    PushError::Invalid(format!(
                        "the request's spans of one partition ({} bytes) exceed the Kafka topic's max.message.bytes; send smaller requests or raise the topic's limit ({e})",
                        values
                            .iter()
                            .map(|(_, v)| v.iter().map(|piece| piece.len()).sum::<usize>())
                            .max()
                            .unwrap_or(0)
                    ))
                }
                _ => {
                    refuse(RefuseReason::Overloaded, summary.spans);
                    PushError::Overloaded(format!("Kafka did not acknowledge the request: {e}"))
                }
            });
        }
        let c = self.metrics.tenant(tenant);
        c.spans_received.fetch_add(u64::from(summary.spans), Ordering::Relaxed);
        c.bytes_received.fetch_add(len, Ordering::Relaxed);
        Ok(PushOutcome {
            accepted_spans: summary.spans,
            rejected_spans: 0,
            message: String::new(),
        })
    }
}

#[async_trait::async_trait]
impl TraceConsumer for Distributor {
    fn check_rate(&self, tenant: &Arc<str>) -> Result<(), PushError> {
        self.rate.check_or_refuse(tenant).inspect_err(|_| {
            self.metrics.refused(tenant, RefuseReason::RateLimited, 1);
        })
    }

    async fn push(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError> {
        self.push_request(tenant, body, deadline, false).await
    }

    async fn push_converted(
        &self,
        tenant: &Arc<str>,
        body: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<PushOutcome, PushError> {
        self.push_request(tenant, body, deadline, true).await
    }

    fn refused(&self, tenant: &str, reason: RefuseReason, spans: u64) {
        self.metrics.refused(tenant, reason, spans);
    }

    fn watch_roots(&self, sink: Arc<dyn weft_admission::RootSink>) -> Result<(), &'static str> {
        self.roots.set(sink)
    }
}

/// Gives back a request's in-flight bytes when it is answered, whichever way.
struct Release<'a>(&'a AtomicU64, u64);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}
