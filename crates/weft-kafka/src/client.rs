//! Cluster metadata, connections to brokers, and every request but `Produce`.

use crate::Error;
use crate::batch::{FetchedRecord, ReadBatch, RecordBatches};
use crate::conn::Conn;
use crate::security::Security;
use crate::wire::{Get, Put};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) mod api {
    pub const PRODUCE: (i16, i16) = (0, 7);
    pub const FETCH: (i16, i16) = (1, 4);
    pub const LIST_OFFSETS: (i16, i16) = (2, 1);
    pub const METADATA: (i16, i16) = (3, 4);
    pub const OFFSET_COMMIT: (i16, i16) = (8, 2);
    pub const OFFSET_FETCH: (i16, i16) = (9, 1);
    pub const FIND_COORDINATOR: (i16, i16) = (10, 1);
    pub const API_VERSIONS: (i16, i16) = (18, 0);
    pub const CREATE_TOPICS: (i16, i16) = (19, 2);
    pub const INIT_PRODUCER_ID: (i16, i16) = (22, 1);
    pub const USED: [(&str, (i16, i16)); 9] = [
        ("Produce", PRODUCE),
        ("Fetch", FETCH),
        ("ListOffsets", LIST_OFFSETS),
        ("Metadata", METADATA),
        ("OffsetCommit", OFFSET_COMMIT),
        ("OffsetFetch", OFFSET_FETCH),
        ("FindCoordinator", FIND_COORDINATOR),
        ("CreateTopics", CREATE_TOPICS),
        ("InitProducerId", INIT_PRODUCER_ID),
    ];
}

/// How to reach the cluster.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` of one or more brokers; the rest are learned from metadata.
    pub brokers: Vec<String>,
    pub client_id: String,
    /// Longest wait for one broker answer (a fetch adds its own wait to this).
    pub request_timeout: Duration,
    /// TLS and SASL (none by default).
    pub security: Security,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            brokers: vec!["127.0.0.1:9092".into()],
            client_id: "weft".into(),
            request_timeout: Duration::from_secs(10),
            security: Security::default(),
        }
    }
}

/// Where [`Client::list_offset`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetAt {
    Earliest,
    Latest,
}

/// The answer to one fetch.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The offset asked for.
    pub offset: i64,
    /// The record batches returned, read one at a time: records at or after `offset`, in
    /// offset order. Each batch says where the next fetch starts after it.
    pub batches: RecordBatches,
    /// The partition's high watermark (the offset the next produced record will get).
    pub high_watermark: i64,
}

impl Fetched {
    /// Every record, and where the next fetch starts (after the last complete batch, or the
    /// offset asked for when none came back). Fails if any batch cannot be read.
    pub fn into_records(self) -> Result<(Vec<FetchedRecord>, i64), Error> {
        let mut next = self.offset;
        let mut out = Vec::new();
        self.apply_batches(|batch| {
            out.extend(batch.records);
            next = next.max(batch.next_offset);
        })?;
        Ok((out, next))
    }

    /// Hands each batch to `apply` in order, reading (and inflating) it just before, and stops
    /// at the first batch that cannot be read, returning its error; the batches before it were
    /// applied, so the next fetch starts at the last `next_offset` applied.
    pub fn apply_batches(self, mut apply: impl FnMut(ReadBatch)) -> Result<(), Error> {
        for batch in self.batches {
            apply(batch?);
        }
        Ok(())
    }
}

#[derive(Default)]
struct Metadata {
    brokers: HashMap<i32, String>,
    /// Leader node of each partition, by topic; -1 while a partition has none.
    leaders: HashMap<String, Vec<i32>>,
}

/// A connection pool and metadata cache for one cluster. Cheap to share (`Arc`).
pub struct Client {
    cfg: ClientConfig,
    meta: Mutex<Metadata>,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    /// Held while a connection is opened, so each broker has exactly one: a producer's
    /// sequence numbers are ordered by the one connection they are written to.
    opening: tokio::sync::Mutex<()>,
    /// Connections opened so far (reconnects and session renewals included).
    opened: std::sync::atomic::AtomicU64,
}

impl Client {
    /// Connects to the first bootstrap broker that answers and checks that it serves every
    /// request version this client sends.
    pub async fn connect(cfg: ClientConfig) -> Result<Arc<Client>, Error> {
        if cfg.brokers.is_empty() {
            return Err(Error::Config("no Kafka brokers configured".into()));
        }
        let client = Arc::new(Client {
            cfg,
            meta: Mutex::new(Metadata::default()),
            conns: Mutex::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            opened: std::sync::atomic::AtomicU64::new(0),
        });
        let conn = client.any_conn().await?;
        let body = conn
            .call(
                api::API_VERSIONS.0,
                api::API_VERSIONS.1,
                &[],
                client.cfg.request_timeout,
            )
            .await?;
        let mut g = Get::new(&body);
        let code = g.i16()?;
        if code != 0 {
            return Err(Error::broker(code, format!("answering ApiVersions at {}", conn.addr)));
        }
        let mut served = HashMap::new();
        for _ in 0..g.array_len(6)? {
            let key = g.i16()?;
            served.insert(key, (g.i16()?, g.i16()?));
        }
        for (name, (key, version)) in api::USED {
            match served.get(&key) {
                Some(&(lo, hi)) if lo <= version && version <= hi => {}
                Some(&(lo, hi)) => {
                    return Err(Error::Config(format!(
                        "Kafka broker {} serves {name} versions {lo}-{hi}; weft needs version {version}",
                        conn.addr
                    )));
                }
                None => {
                    return Err(Error::Config(format!(
                        "Kafka broker {} does not serve {name}",
                        conn.addr
                    )));
                }
            }
        }
        Ok(client)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// How many connections this client has opened: one per broker and fetch lane, plus one
    /// for each reconnect or renewed session.
    pub fn connections_opened(&self) -> u64 {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn conn(&self, addr: &str) -> Result<Arc<Conn>, Error> {
        self.conn_lane(addr, None).await
    }

    /// The connection to `addr` for `lane`: `None` is the shared one (every request but
    /// fetches); each fetch lane has its own, because a broker answers one connection's
    /// requests in order and a long-polling fetch would hold up everything behind it.
    async fn conn_lane(&self, addr: &str, lane: Option<i32>) -> Result<Arc<Conn>, Error> {
        let key = match lane {
            None => addr.to_string(),
            Some(l) => format!("{addr}#fetch-{l}"),
        };
        if let Some(c) = self.conns.lock().get(&key)
            && c.usable()
        {
            return Ok(c.clone());
        }
        let _one = self.opening.lock().await;
        if let Some(c) = self.conns.lock().get(&key)
            && c.usable()
        {
            return Ok(c.clone());
        }
        let c = Conn::open(addr, &self.cfg.client_id, self.cfg.request_timeout, &self.cfg.security).await?;
        self.opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.conns.lock().insert(key, c.clone());
        Ok(c)
    }

    /// A live connection to any known broker, bootstrap brokers first.
    async fn any_conn(&self) -> Result<Arc<Conn>, Error> {
        let mut addrs = self.cfg.brokers.clone();
        addrs.extend(self.meta.lock().brokers.values().cloned());
        let mut last = None;
        for a in addrs {
            match self.conn(&a).await {
                Ok(c) => return Ok(c),
                // Every broker has the same TLS and SASL settings: the next would fail alike.
                Err(e @ Error::Security(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Config("no Kafka brokers configured".into())))
    }

    pub(crate) async fn call_any(&self, api: (i16, i16), body: &[u8]) -> Result<Bytes, Error> {
        let conn = self.any_conn().await?;
        conn.call(api.0, api.1, body, self.cfg.request_timeout).await
    }

    /// Re-reads the brokers and the partition leaders of `topic`.
    pub async fn refresh_metadata(&self, topic: &str) -> Result<(), Error> {
        let mut body = Vec::new();
        body.i32(1);
        body.string(topic);
        body.i8(0); // allow_auto_topic_creation: no
        let resp = self.call_any(api::METADATA, &body).await?;
        let mut g = Get::new(&resp);
        let _throttle = g.i32()?;
        let mut brokers = HashMap::new();
        for _ in 0..g.array_len(12)? {
            let id = g.i32()?;
            let host = g.string()?;
            let port = g.i32()?;
            let _rack = g.nullable_string()?;
            brokers.insert(id, format!("{host}:{port}"));
        }
        let _cluster = g.nullable_string()?;
        let _controller = g.i32()?;
        let mut leaders = HashMap::new();
        for _ in 0..g.array_len(7)? {
            let code = g.i16()?;
            let name = g.string()?.to_string();
            let _internal = g.bool()?;
            let n = g.array_len(22)?;
            let mut parts = vec![-1; n];
            for _ in 0..n {
                let _pcode = g.i16()?;
                let index = g.i32()?;
                let leader = g.i32()?;
                for _ in 0..g.array_len(4)? {
                    g.i32()?;
                }
                for _ in 0..g.array_len(4)? {
                    g.i32()?;
                }
                if index >= 0 && (index as usize) < n {
                    parts[index as usize] = leader;
                }
            }
            if code == 3 {
                continue; // unknown topic: leave it out
            }
            if code != 0 && code != 5 {
                return Err(Error::broker(code, format!("reading metadata of topic {name}")));
            }
            leaders.insert(name, parts);
        }
        let mut m = self.meta.lock();
        m.brokers = brokers;
        m.leaders.extend(leaders);
        Ok(())
    }

    /// How many partitions `topic` has (reading metadata if it is not cached).
    pub async fn partition_count(&self, topic: &str) -> Result<usize, Error> {
        if let Some(p) = self.meta.lock().leaders.get(topic) {
            return Ok(p.len());
        }
        self.refresh_metadata(topic).await?;
        self.meta
            .lock()
            .leaders
            .get(topic)
            .map(|p| p.len())
            .ok_or_else(|| Error::Config(format!("Kafka topic {topic} does not exist")))
    }

    /// A connection to the leader of `topic`/`partition`, refreshing metadata once if unknown.
    pub(crate) async fn leader(&self, topic: &str, partition: i32) -> Result<(i32, Arc<Conn>), Error> {
        self.leader_lane(topic, partition, None).await
    }

    async fn leader_lane(&self, topic: &str, partition: i32, lane: Option<i32>) -> Result<(i32, Arc<Conn>), Error> {
        for attempt in 0..2 {
            let found = {
                let m = self.meta.lock();
                m.leaders
                    .get(topic)
                    .and_then(|p| p.get(partition as usize))
                    .filter(|&&l| l >= 0)
                    .and_then(|l| m.brokers.get(l).map(|a| (*l, a.clone())))
            };
            if let Some((node, addr)) = found {
                return Ok((node, self.conn_lane(&addr, lane).await?));
            }
            if attempt == 0 {
                self.refresh_metadata(topic).await?;
            }
        }
        Err(Error::broker(5, format!("for {topic}/{partition}")))
    }

    /// Forgets the leaders of `topic`, so the next request reads metadata again.
    pub(crate) fn invalidate(&self, topic: &str) {
        self.meta.lock().leaders.remove(topic);
    }

    /// Creates `topic` unless it exists. Returns whether it was created.
    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        replication: i16,
        configs: &[(&str, &str)],
    ) -> Result<bool, Error> {
        let mut body = Vec::new();
        body.i32(1);
        body.string(topic);
        body.i32(partitions);
        body.i16(replication);
        body.i32(0); // assignments
        body.i32(configs.len() as i32);
        for (k, v) in configs {
            body.string(k);
            body.nullable_string(Some(v));
        }
        body.i32(self.cfg.request_timeout.as_millis() as i32);
        body.i8(0); // validate_only
        let resp = self.call_any(api::CREATE_TOPICS, &body).await?;
        let mut g = Get::new(&resp);
        let _throttle = g.i32()?;
        for _ in 0..g.array_len(5)? {
            let _name = g.string()?;
            let code = g.i16()?;
            let msg = g.nullable_string()?;
            match code {
                0 => {}
                36 => return Ok(false),
                c => {
                    return Err(Error::broker(
                        c,
                        format!("creating topic {topic}: {}", msg.unwrap_or("")),
                    ));
                }
            }
        }
        // Wait until metadata shows a leader for every partition.
        let until = Instant::now() + self.cfg.request_timeout;
        loop {
            self.invalidate(topic);
            if self.refresh_metadata(topic).await.is_ok()
                && let Some(p) = self.meta.lock().leaders.get(topic)
                && p.len() == partitions as usize
                && p.iter().all(|&l| l >= 0)
            {
                return Ok(true);
            }
            if Instant::now() > until {
                return Err(Error::Io(format!("topic {topic} was created but has no leaders yet")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The earliest offset still kept, or the offset the next record will get.
    /// Retries while the partition has no leader yet or it moved (a topic just created, say),
    /// up to the request timeout.
    pub async fn list_offset(&self, topic: &str, partition: i32, at: OffsetAt) -> Result<i64, Error> {
        let until = Instant::now() + self.cfg.request_timeout;
        loop {
            match self.list_offset_once(topic, partition, at).await {
                Err(e) if e.is_retriable() && Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                r => return r,
            }
        }
    }

    async fn list_offset_once(&self, topic: &str, partition: i32, at: OffsetAt) -> Result<i64, Error> {
        let mut body = Vec::new();
        body.i32(-1); // replica_id
        body.i32(1);
        body.string(topic);
        body.i32(1);
        body.i32(partition);
        body.i64(match at {
            OffsetAt::Earliest => -2,
            OffsetAt::Latest => -1,
        });
        let resp = self.partition_call(topic, partition, api::LIST_OFFSETS, &body).await?;
        let mut g = Get::new(&resp);
        for _ in 0..g.array_len(6)? {
            let _name = g.string()?;
            if g.array_len(22)? > 0 {
                let _p = g.i32()?;
                let code = g.i16()?;
                let _ts = g.i64()?;
                let offset = g.i64()?;
                if code != 0 {
                    self.invalidate(topic);
                    return Err(Error::broker(code, format!("listing offsets of {topic}/{partition}")));
                }
                return Ok(offset);
            }
        }
        Err(Error::Protocol("ListOffsets answer without the partition".into()))
    }

    async fn partition_call(&self, topic: &str, partition: i32, api: (i16, i16), body: &[u8]) -> Result<Bytes, Error> {
        let (_, conn) = self.leader(topic, partition).await?;
        conn.call(api.0, api.1, body, self.cfg.request_timeout).await
    }

    /// Reads records of `topic`/`partition` from `offset` on: up to about `max_bytes`. The
    /// broker answers once it holds `min_bytes` from `offset` on, or after `max_wait` with
    /// what it has (Kafka's `fetch.min.bytes` and `fetch.max.wait.ms`).
    pub async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        min_bytes: i32,
        max_wait: Duration,
    ) -> Result<Fetched, Error> {
        let mut body = Vec::new();
        body.i32(-1); // replica_id
        body.i32(max_wait.as_millis() as i32);
        body.i32(min_bytes);
        body.i32(max_bytes);
        body.i8(0); // read uncommitted: this producer writes no transactions
        body.i32(1);
        body.string(topic);
        body.i32(1);
        body.i32(partition);
        body.i64(offset);
        body.i32(max_bytes);
        // Each partition fetches on a connection of its own (see `conn_lane`).
        let (_, conn) = self.leader_lane(topic, partition, Some(partition)).await?;
        let resp = conn
            .call(api::FETCH.0, api::FETCH.1, &body, self.cfg.request_timeout + max_wait)
            .await?;
        let mut g = Get::new(&resp);
        let _throttle = g.i32()?;
        for _ in 0..g.array_len(6)? {
            let _name = g.string()?;
            if g.array_len(30)? > 0 {
                let _p = g.i32()?;
                let code = g.i16()?;
                let high_watermark = g.i64()?;
                let _lso = g.i64()?;
                for _ in 0..g.array_len(16)? {
                    g.i64()?;
                    g.i64()?;
                }
                let n = g.i32()?;
                let records = if n > 0 {
                    resp.slice_ref(g.bytes(n as usize)?)
                } else {
                    Bytes::new()
                };
                if code != 0 {
                    if crate::retriable_code(code) {
                        self.invalidate(topic);
                    }
                    return Err(Error::broker(
                        code,
                        format!("fetching {topic}/{partition} at offset {offset}"),
                    ));
                }
                return Ok(Fetched {
                    offset,
                    batches: RecordBatches::new(records, offset),
                    high_watermark,
                });
            }
        }
        Err(Error::Protocol("Fetch answer without the partition".into()))
    }

    /// A connection to the coordinator of consumer group `group`.
    async fn coordinator(&self, group: &str) -> Result<Arc<Conn>, Error> {
        let mut body = Vec::new();
        body.string(group);
        body.i8(0); // key type: group
        let until = Instant::now() + self.cfg.request_timeout;
        loop {
            let resp = self.call_any(api::FIND_COORDINATOR, &body).await?;
            let mut g = Get::new(&resp);
            let _throttle = g.i32()?;
            let code = g.i16()?;
            let msg = g.nullable_string()?;
            let _node = g.i32()?;
            let host = g.string()?;
            let port = g.i32()?;
            if code == 0 {
                return self.conn(&format!("{host}:{port}")).await;
            }
            if !crate::retriable_code(code) || Instant::now() > until {
                return Err(Error::broker(
                    code,
                    format!("finding the coordinator of group {group}: {}", msg.unwrap_or("")),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stores `offsets` (partition, next offset to read) as group `group`'s committed offsets
    /// of `topic`. The group has no members: this is static assignment, where only the stored
    /// offsets matter.
    pub async fn commit_offsets(&self, group: &str, topic: &str, offsets: &[(i32, i64)]) -> Result<(), Error> {
        self.with_coordinator_retry(|| self.commit_offsets_once(group, topic, offsets))
            .await
    }

    /// Retries a group request while the coordinator is loading, moving or not yet known.
    async fn with_coordinator_retry<T, F: std::future::Future<Output = Result<T, Error>>>(
        &self,
        mut call: impl FnMut() -> F,
    ) -> Result<T, Error> {
        let until = Instant::now() + self.cfg.request_timeout;
        loop {
            match call().await {
                Err(e) if e.is_retriable() && Instant::now() < until => {
                    tracing::debug!(error = %e, "retrying a consumer-group request");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                r => return r,
            }
        }
    }

    async fn commit_offsets_once(&self, group: &str, topic: &str, offsets: &[(i32, i64)]) -> Result<(), Error> {
        let mut body = Vec::new();
        body.string(group);
        body.i32(-1); // generation: none
        body.string(""); // member id: none
        body.i64(-1); // retention: the broker's
        body.i32(1);
        body.string(topic);
        body.i32(offsets.len() as i32);
        for &(p, o) in offsets {
            body.i32(p);
            body.i64(o);
            body.nullable_string(None);
        }
        let conn = self.coordinator(group).await?;
        let resp = conn
            .call(
                api::OFFSET_COMMIT.0,
                api::OFFSET_COMMIT.1,
                &body,
                self.cfg.request_timeout,
            )
            .await?;
        let mut g = Get::new(&resp);
        for _ in 0..g.array_len(6)? {
            let _name = g.string()?;
            for _ in 0..g.array_len(6)? {
                let p = g.i32()?;
                let code = g.i16()?;
                if code != 0 {
                    return Err(Error::broker(
                        code,
                        format!("committing group {group}'s offset of {topic}/{p}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Group `group`'s committed offsets of `partitions` of `topic`; None where nothing was
    /// committed.
    pub async fn committed_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<Option<i64>>, Error> {
        self.with_coordinator_retry(|| self.committed_offsets_once(group, topic, partitions))
            .await
    }

    async fn committed_offsets_once(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<Option<i64>>, Error> {
        let mut body = Vec::new();
        body.string(group);
        body.i32(1);
        body.string(topic);
        body.i32(partitions.len() as i32);
        for &p in partitions {
            body.i32(p);
        }
        let conn = self.coordinator(group).await?;
        let resp = conn
            .call(
                api::OFFSET_FETCH.0,
                api::OFFSET_FETCH.1,
                &body,
                self.cfg.request_timeout,
            )
            .await?;
        let mut g = Get::new(&resp);
        let mut out = vec![None; partitions.len()];
        for _ in 0..g.array_len(6)? {
            let _name = g.string()?;
            for _ in 0..g.array_len(16)? {
                let p = g.i32()?;
                let offset = g.i64()?;
                let _meta = g.nullable_string()?;
                let code = g.i16()?;
                if code != 0 {
                    return Err(Error::broker(
                        code,
                        format!("reading group {group}'s offset of {topic}/{p}"),
                    ));
                }
                if let Some(i) = partitions.iter().position(|&q| q == p) {
                    out[i] = (offset >= 0).then_some(offset);
                }
            }
        }
        Ok(out)
    }

    /// A producer id and epoch for an idempotent producer.
    pub(crate) async fn init_producer_id(&self) -> Result<(i64, i16), Error> {
        let mut body = Vec::new();
        body.nullable_string(None);
        body.i32(60_000);
        let until = Instant::now() + self.cfg.request_timeout;
        loop {
            let resp = self.call_any(api::INIT_PRODUCER_ID, &body).await?;
            let mut g = Get::new(&resp);
            let _throttle = g.i32()?;
            let code = g.i16()?;
            let pid = g.i64()?;
            let epoch = g.i16()?;
            if code == 0 {
                return Ok((pid, epoch));
            }
            if !crate::retriable_code(code) || Instant::now() > until {
                return Err(Error::broker(code, "asking for a producer id"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
