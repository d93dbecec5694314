//! The idempotent producer.
//!
//! A send writes one batch per partition and one `Produce` request per leader broker, with
//! `acks=all`, and returns once the broker acknowledged every batch. Each batch carries the
//! producer id, epoch and the partition's next sequence number, assigned while the request is
//! written to the connection, so sequences reach the broker in order. A batch retried after a
//! lost connection or a leader change is resent byte for byte; the broker drops it if the first
//! copy landed (`DUPLICATE_SEQUENCE_NUMBER` counts as success). When a batch finally fails, the
//! partition's sequence is no longer known to match the broker's, so the producer takes a new
//! producer id before its next send.

use crate::batch::{Compression, ProducerStamp, Record, restamp, write_batch};
use crate::client::{Client, api};
use crate::wire::{Get, Put};
use crate::{Error, retriable_code};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The records of one send bound for one partition: they become one batch.
#[derive(Debug, Clone)]
pub struct PartitionRecords<'a> {
    pub partition: i32,
    pub records: Vec<Record<'a>>,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ProducerStats {
    /// `Produce` requests sent (retries included).
    pub requests: AtomicU64,
    /// Batches acknowledged, and their bytes (as sent, batch headers included).
    pub batches: AtomicU64,
    pub bytes: AtomicU64,
    pub records: AtomicU64,
    /// Batches sent again after a retriable failure.
    pub retries: AtomicU64,
    /// Sends that failed.
    pub failures: AtomicU64,
}

struct State {
    producer_id: i64,
    epoch: i16,
    /// Bumped whenever the producer id changes; stamps of an older generation are replaced.
    generation: u64,
    next_seq: HashMap<i32, i32>,
}

/// An idempotent producer for one topic. Share it (`Arc`); sends may run concurrently.
pub struct Producer {
    client: Arc<Client>,
    topic: String,
    compression: Compression,
    state: Mutex<State>,
    init: tokio::sync::Mutex<()>,
    pub stats: ProducerStats,
}

pub(crate) struct Item {
    partition: i32,
    count: i32,
    batch: Vec<u8>,
    pub(crate) stamp: Option<(u64, ProducerStamp)>,
}

impl Producer {
    pub fn new(client: Arc<Client>, topic: &str, compression: Compression) -> Producer {
        Producer {
            client,
            topic: topic.to_string(),
            compression,
            state: Mutex::new(State {
                producer_id: -1,
                epoch: -1,
                generation: 0,
                next_seq: HashMap::new(),
            }),
            init: tokio::sync::Mutex::new(()),
            stats: ProducerStats::default(),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    pub(crate) async fn ensure_producer_id(&self) -> Result<(), Error> {
        if self.state.lock().producer_id >= 0 {
            return Ok(());
        }
        let _one = self.init.lock().await;
        if self.state.lock().producer_id >= 0 {
            return Ok(());
        }
        let (pid, epoch) = self.client.init_producer_id().await?;
        let mut s = self.state.lock();
        s.producer_id = pid;
        s.epoch = epoch;
        s.generation += 1;
        s.next_seq.clear();
        tracing::debug!(producer_id = pid, epoch, "Kafka producer id");
        Ok(())
    }

    /// Forgets the producer id; the next send asks for a new one.
    fn reset(&self) {
        let mut s = self.state.lock();
        s.producer_id = -1;
        s.generation += 1;
        s.next_seq.clear();
    }

    /// [`Producer::reset`], unless a reset already happened since `generation` (several
    /// batches of one broken sequence see the same failure; one new producer id is enough).
    fn reset_since(&self, generation: u64) {
        let mut s = self.state.lock();
        if s.generation == generation {
            s.producer_id = -1;
            s.generation += 1;
            s.next_seq.clear();
        }
    }

    /// Writes every partition's records and waits until the broker acknowledged all of them
    /// (`acks=all`), retrying what may succeed until `deadline`. On `Err`, some batches may
    /// have been written (a later send of the same data can duplicate them).
    pub async fn send(&self, parts: &[PartitionRecords<'_>], deadline: Instant) -> Result<(), Error> {
        let mut pending = Vec::with_capacity(parts.len());
        for p in parts.iter().filter(|p| !p.records.is_empty()) {
            let mut batch = Vec::new();
            write_batch(&mut batch, &p.records, ProducerStamp::NONE, self.compression)?;
            pending.push(Item {
                partition: p.partition,
                count: p.records.len() as i32,
                batch,
                stamp: None,
            });
        }
        let result = self.send_items(pending, deadline).await;
        if result.is_err() {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn send_items(&self, mut pending: Vec<Item>, deadline: Instant) -> Result<(), Error> {
        let mut backoff = Duration::from_millis(20);
        let mut attempt = 0u32;
        loop {
            if let Err(e) = self.ensure_producer_id().await {
                if !e.is_retriable() || Instant::now() + backoff >= deadline {
                    return Err(e);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
            if attempt > 0 {
                self.stats.retries.fetch_add(pending.len() as u64, Ordering::Relaxed);
            }
            attempt += 1;
            // Group by leader.
            let mut by_leader: HashMap<i32, (Arc<crate::conn::Conn>, Vec<Item>)> = HashMap::new();
            let mut last_err = None;
            let mut retry = Vec::new();
            for item in pending.drain(..) {
                match self.client.leader(&self.topic, item.partition).await {
                    Ok((node, conn)) => by_leader.entry(node).or_insert_with(|| (conn, Vec::new())).1.push(item),
                    Err(e) if e.is_retriable() => {
                        last_err = Some(e);
                        retry.push(item);
                    }
                    Err(e) => return Err(e),
                }
            }
            let sends = by_leader
                .into_values()
                .map(|(conn, items)| self.produce_to(conn, items, deadline));
            for (items_back, err) in futures_join(sends).await {
                if let Some(e) = err {
                    if !e.is_retriable() {
                        self.reset();
                        return Err(e);
                    }
                    last_err = Some(e);
                }
                retry.extend(items_back);
            }
            if retry.is_empty() {
                return Ok(());
            }
            pending = retry;
            if Instant::now() + backoff >= deadline {
                // The sequences of what failed are now unknown to match the broker's.
                self.reset();
                return Err(last_err.unwrap_or_else(|| Error::Io("Kafka produce timed out".into())));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// One `Produce` request to one broker. Returns the items to retry and the error, if any.
    pub(crate) async fn produce_to(
        &self,
        conn: Arc<crate::conn::Conn>,
        mut items: Vec<Item>,
        deadline: Instant,
    ) -> (Vec<Item>, Option<Error>) {
        let timeout = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let (key, version) = api::PRODUCE;
        // The request is written straight into its frame: each batch is copied once, here.
        let mut frame = conn.frame(
            key,
            version,
            items.iter().map(|i| i.batch.len() + 8).sum::<usize>() + 64,
        );
        let body_at = frame.len();
        frame.nullable_string(None); // transactional id
        frame.i16(-1); // acks=all
        frame.i32(timeout.as_millis().min(i32::MAX as u128) as i32);
        frame.i32(1);
        frame.string(&self.topic);
        frame.i32(items.len() as i32);
        let mut at = Vec::with_capacity(items.len());
        for item in &items {
            frame.i32(item.partition);
            frame.i32(item.batch.len() as i32);
            at.push(frame.len() - body_at);
            frame.extend_from_slice(&item.batch);
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let stamp_items = &mut items;
        let result = conn
            .send_frame(frame, timeout, |body| {
                let mut s = self.state.lock();
                for (item, &pos) in stamp_items.iter_mut().zip(&at) {
                    let stamp = match item.stamp {
                        Some((g, st)) if g == s.generation => st,
                        // Between a reset and the next producer id: write without idempotence.
                        _ if s.producer_id < 0 => ProducerStamp::NONE,
                        _ => {
                            let (producer_id, epoch) = (s.producer_id, s.epoch);
                            let seq = s.next_seq.entry(item.partition).or_insert(0);
                            let st = ProducerStamp {
                                producer_id,
                                epoch,
                                base_sequence: *seq,
                            };
                            // Kafka's DefaultRecordBatch.incrementSequence: wraps past i32::MAX.
                            *seq = if *seq > i32::MAX - item.count {
                                item.count - (i32::MAX - *seq) - 1
                            } else {
                                *seq + item.count
                            };
                            item.stamp = Some((s.generation, st));
                            st
                        }
                    };
                    restamp(&mut body[pos..pos + item.batch.len()], stamp);
                }
            })
            .await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => return (items, Some(e)),
        };
        let codes = match read_produce_response(&resp) {
            Ok(c) => c,
            Err(e) => return (items, Some(e)),
        };
        let mut retry = Vec::new();
        let mut err = None;
        for item in items {
            let code = codes.get(&item.partition).copied().unwrap_or(-1);
            match code {
                0 | 46 => {
                    self.stats.batches.fetch_add(1, Ordering::Relaxed);
                    self.stats.records.fetch_add(item.count as u64, Ordering::Relaxed);
                    self.stats.bytes.fetch_add(item.batch.len() as u64, Ordering::Relaxed);
                }
                47 | 59 => {
                    // The broker no longer knows this producer: take a new id and new stamps.
                    self.reset_since(item.stamp.map_or(0, |(g, _)| g));
                    err = Some(Error::broker(
                        code,
                        format!("producing to {}/{}", self.topic, item.partition),
                    ));
                    retry.push(Item { stamp: None, ..item });
                }
                c if retriable_code(c) => {
                    if matches!(c, 3 | 5 | 6 | 74 | 75) {
                        self.client.invalidate(&self.topic);
                    }
                    // The batch was not written (a leader change, a missing partition, too few
                    // replicas), or a batch before it was not (out of order): the batches sent
                    // after it carry sequences the broker will not take in order, and a broker
                    // that has no state for this producer takes any first sequence. Start a
                    // new sequence under a new producer id. Ambiguous failures (timeouts, a
                    // lost connection) keep their stamp so the broker can drop a second copy.
                    err = Some(Error::broker(
                        c,
                        format!("producing to {}/{}", self.topic, item.partition),
                    ));
                    if c == 7 {
                        retry.push(item); // a request timeout: ambiguous, keep the stamp
                    } else {
                        self.reset_since(item.stamp.map_or(0, |(g, _)| g));
                        retry.push(Item { stamp: None, ..item });
                    }
                }
                c => {
                    return (
                        Vec::new(),
                        Some(Error::broker(
                            c,
                            format!(
                                "producing {} bytes to {}/{}",
                                item.batch.len(),
                                self.topic,
                                item.partition
                            ),
                        )),
                    );
                }
            }
        }
        // A retriable error is only reported when something is retried.
        let err = if retry.is_empty() { None } else { err };
        (retry, err)
    }
}

/// Polls the futures together on the current task (one per leader broker, usually one) and
/// returns their results in order.
async fn futures_join<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut running: Vec<_> = futs.map(|f| Some(Box::pin(f))).collect();
    let mut results: Vec<Option<F::Output>> = (0..running.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (f, r) in running.iter_mut().zip(results.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *r = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    results.into_iter().map(|r| r.expect("every future finished")).collect()
}

fn read_produce_response(resp: &[u8]) -> Result<HashMap<i32, i16>, Error> {
    let mut g = Get::new(resp);
    let mut codes = HashMap::new();
    for _ in 0..g.array_len(6)? {
        let _name = g.string()?;
        for _ in 0..g.array_len(30)? {
            let p = g.i32()?;
            let code = g.i16()?;
            let _base = g.i64()?;
            let _append_time = g.i64()?;
            let _log_start = g.i64()?;
            codes.insert(p, code);
        }
    }
    Ok(codes)
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    pub(crate) fn item(partition: i32, count: i32, batch: Vec<u8>) -> Item {
        Item {
            partition,
            count,
            batch,
            stamp: None,
        }
    }

    impl Producer {
        /// The stamp the last batch to `partition` took.
        pub(crate) fn last_stamp(&self, partition: i32) -> (u64, ProducerStamp) {
            let s = self.state.lock();
            let next = s.next_seq.get(&partition).copied().unwrap_or(0);
            (
                s.generation,
                ProducerStamp {
                    producer_id: s.producer_id,
                    epoch: s.epoch,
                    base_sequence: next - 1,
                },
            )
        }
    }
}
