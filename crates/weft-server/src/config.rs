//! Configuration: YAML file (`--config`), overridden by flags and `WEFT_*` variables.

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The ingester's head is cut at this much memory by default. At high rates a cut of compact
/// spans then holds about 750,000 of them: a block of the compactor's final tier, which is
/// never rewritten (ADR 7). Smaller cuts were each rewritten once more by compaction.
pub const DEFAULT_INGESTER_HEAD_BYTES: usize = 64 << 20;

/// Each partition's head of a block builder is cut at this much memory by default: one
/// builder may own all of the topic's partitions (16 by default).
pub const DEFAULT_PARTITION_HEAD_BYTES: usize = 16 << 20;

#[derive(Debug, Parser)]
#[command(
    name = "weft",
    version,
    about = "weft: a fast, cheap distributed tracing backend (OTLP in; Tempo-compatible queries out)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub server: ServerFlags,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate OTLP gRPC load against a weft (or any OTLP) endpoint and report throughput.
    Loadgen(crate::loadgen::LoadgenArgs),
}

/// Which roles this process runs ([`crate::modules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Every role in one process (the default).
    All,
    /// Receives spans (OTLP ports), keeps the WAL and the head, and writes blocks. Serves
    /// /metrics and /ready on the HTTP port, no queries. Leaves compaction to a compactor.
    Ingester,
    /// Answers the query API and the UI from the blocks of the data directory, re-reading the
    /// block list every --blocklist-poll seconds. Writes nothing.
    Querier,
    /// Compacts blocks, applies retention and deletes what crashed writers left behind.
    /// Serves /metrics and /ready on the HTTP port.
    Compactor,
    /// Receives spans on every receiver port, admits them (validation, tenancy, rate limits)
    /// and writes them to Kafka (--kafka-brokers), routed by trace ID. Keeps no WAL and no
    /// blocks; a request is acknowledged once Kafka acknowledged it.
    Distributor,
    /// Reads its Kafka partitions (--block-builder-partitions, default all) into heads and
    /// writes blocks to storage, committing offsets to --kafka-group only after the blocks are
    /// written. Serves /metrics and /ready on the HTTP port.
    BlockBuilder,
}

/// How the distributor compresses record batches it writes to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaCompression {
    /// Batches as received: OTLP protobuf as clients sent it.
    None,
    /// LZ4 frames, as Kafka's own producer writes them (the default): a sixth of the bytes on
    /// the wire and on the brokers' disks in `make bench`, for little CPU on distributors, and
    /// less on block builders and brokers than uncompressed batches.
    Lz4,
    /// zstd level 1: fewer bytes than LZ4, for more CPU on the distributor.
    Zstd,
}

/// Where blocks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageKind {
    /// `<data_dir>/blocks` on the local filesystem (the default).
    Local,
    /// An S3-compatible bucket (`--s3-*`). The WAL stays in `data_dir`.
    S3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fsync {
    /// fsync the WAL before acknowledging each request (group commit shares the cost). Nothing
    /// acknowledged is lost, even on power failure.
    Always,
    /// fsync at most every `fsync_interval_ms`; acknowledge after the write. A power failure
    /// may lose the last interval; a process crash loses nothing.
    Interval,
    /// Never fsync explicitly. Fastest; a power failure may lose whatever the OS had not
    /// written back.
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    Text,
    Json,
}

/// Server flags. Every flag also reads a `WEFT_*` variable and overrides the config file.
#[derive(Debug, Args, Default)]
pub struct ServerFlags {
    /// YAML configuration file; flags and WEFT_* variables override its values.
    #[arg(long, env = "WEFT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Role to run.
    #[arg(long, env = "WEFT_TARGET", value_enum)]
    pub target: Option<Target>,
    /// Directory for the WAL and blocks [default: ./weft-data].
    #[arg(long, env = "WEFT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address every port listens on [default: 127.0.0.1].
    #[arg(long, env = "WEFT_LISTEN_HOST")]
    pub listen_host: Option<String>,
    /// OTLP gRPC port [default: 4317].
    #[arg(long, env = "WEFT_OTLP_GRPC_PORT")]
    pub otlp_grpc_port: Option<u16>,
    /// OTLP HTTP port [default: 4318].
    #[arg(long, env = "WEFT_OTLP_HTTP_PORT")]
    pub otlp_http_port: Option<u16>,
    /// Zipkin port: the receiver (`POST /api/v1/spans`, `/api/v2/spans`) and Zipkin's v2 query
    /// API (`GET /api/v2/...`); 0 turns it off [default: 9411].
    #[arg(long, env = "WEFT_ZIPKIN_PORT")]
    pub zipkin_port: Option<u16>,
    /// Jaeger query API port (the routes Jaeger UI calls); 0 turns it off [default: 16686].
    #[arg(long, env = "WEFT_JAEGER_QUERY_PORT")]
    pub jaeger_query_port: Option<u16>,
    /// Jaeger collector port: `POST /api/traces` (thrift); 0 turns it off [default: 14268].
    #[arg(long, env = "WEFT_JAEGER_HTTP_PORT")]
    pub jaeger_http_port: Option<u16>,
    /// Jaeger collector gRPC port: `jaeger.api_v2.CollectorService/PostSpans`; 0 turns it off
    /// [default: 14250].
    #[arg(long, env = "WEFT_JAEGER_GRPC_PORT")]
    pub jaeger_grpc_port: Option<u16>,
    /// Jaeger agent UDP port, compact thrift; 0 turns it off [default: 6831].
    #[arg(long, env = "WEFT_JAEGER_COMPACT_PORT")]
    pub jaeger_compact_port: Option<u16>,
    /// Jaeger agent UDP port, binary thrift; 0 turns it off [default: 6832].
    #[arg(long, env = "WEFT_JAEGER_BINARY_PORT")]
    pub jaeger_binary_port: Option<u16>,
    /// AWS X-Ray daemon port: segment documents over UDP, sampling rules and targets over TCP;
    /// 0 turns it off [default: 2000].
    #[arg(long, env = "WEFT_XRAY_PORT")]
    pub xray_port: Option<u16>,
    /// X-Ray SDKs' local sampling-rules file (JSON, version 1 or 2) that the daemon port's
    /// `/GetSamplingRules` answers with [default: X-Ray's default rule, 1/s and 5%].
    #[arg(long, env = "WEFT_XRAY_SAMPLING_RULES")]
    pub xray_sampling_rules: Option<PathBuf>,
    /// Tenant of spans received over UDP, which has no headers [default: single-tenant].
    #[arg(long, env = "WEFT_UDP_TENANT")]
    pub udp_tenant: Option<String>,
    /// Tag keys whose values Zipkin's `/api/v2/autocompleteValues` lists, comma-separated
    /// (Zipkin's AUTOCOMPLETE_KEYS) [default: none].
    #[arg(long, env = "WEFT_ZIPKIN_AUTOCOMPLETE_KEYS", value_delimiter = ',')]
    pub zipkin_autocomplete_keys: Option<Vec<String>>,
    /// Tempo-compatible query API, /metrics and /ready [default: 3200].
    #[arg(long, env = "WEFT_HTTP_PORT")]
    pub http_port: Option<u16>,
    /// Require X-Scope-OrgID on every request; otherwise every request is tenant "single-tenant".
    #[arg(long, env = "WEFT_MULTITENANCY", num_args = 0..=1, default_missing_value = "true")]
    pub multitenancy: Option<bool>,
    /// WAL fsync policy [default: always].
    #[arg(long, env = "WEFT_FSYNC", value_enum)]
    pub fsync: Option<Fsync>,
    /// With --fsync interval: milliseconds between syncs [default: 100].
    #[arg(long, env = "WEFT_FSYNC_INTERVAL_MS")]
    pub fsync_interval_ms: Option<u64>,
    /// Cut a block once the oldest span in the head is this many seconds old [default: 30].
    #[arg(long, env = "WEFT_BLOCK_MAX_AGE")]
    pub block_max_age: Option<f64>,
    /// Cut a block once the head holds this many spans [default: 1000000].
    #[arg(long, env = "WEFT_BLOCK_MAX_SPANS")]
    pub block_max_spans: Option<usize>,
    /// Cut a block once the head holds about this many bytes of memory [default: 67108864 for
    /// the ingester, 16777216 per partition for a block builder]. The ingester's peak memory
    /// is about three times this: the active head plus cuts being written.
    #[arg(long, env = "WEFT_BLOCK_MAX_BYTES")]
    pub block_max_bytes: Option<usize>,
    /// Largest accepted request body, before decompression [default: 16777216].
    #[arg(long, env = "WEFT_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Largest accepted request after decompression [default: 67108864].
    #[arg(long, env = "WEFT_MAX_DECOMPRESSED_BYTES")]
    pub max_decompressed_bytes: Option<usize>,
    /// Largest trace, in encoded bytes, while it is live; 0 disables [default: 134217728].
    /// Tempo's 5 MB default refuses real traces (a 200,000-span batch job is ~60 MB); memory
    /// stays bounded by the head limits and the query read cap instead.
    #[arg(long, env = "WEFT_MAX_TRACE_BYTES")]
    pub max_trace_bytes: Option<u64>,
    /// Per-tenant ingestion rate in bytes per second; 0 disables [default: 0].
    #[arg(long, env = "WEFT_INGESTION_RATE_BYTES")]
    pub ingestion_rate_bytes: Option<u64>,
    /// Per-tenant ingestion burst in bytes [default: twice the rate].
    #[arg(long, env = "WEFT_INGESTION_BURST_BYTES")]
    pub ingestion_burst_bytes: Option<u64>,
    /// Most bytes of one trace a query reads and returns; a larger trace comes back truncated
    /// and marked so (v2: "status": "partial") [default: 33554432].
    #[arg(long, env = "WEFT_MAX_TRACE_RESPONSE_BYTES")]
    pub max_trace_response_bytes: Option<u64>,
    /// Where blocks are stored: local (in --data-dir) or s3 [default: local].
    #[arg(long, env = "WEFT_STORAGE", value_enum)]
    pub storage: Option<StorageKind>,
    /// S3: endpoint URL of an S3-compatible server (`http://127.0.0.1:9000`); unset is AWS S3.
    #[arg(long, env = "WEFT_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3: bucket (required with --storage s3).
    #[arg(long, env = "WEFT_S3_BUCKET")]
    pub s3_bucket: Option<String>,
    /// S3: region [default: us-east-1].
    #[arg(long, env = "WEFT_S3_REGION")]
    pub s3_region: Option<String>,
    /// S3: access key ID; with the secret unset too, the environment's AWS credential chain.
    #[arg(long, env = "WEFT_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// S3: secret access key (prefer the WEFT_S3_SECRET_ACCESS_KEY variable).
    #[arg(long, env = "WEFT_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub s3_secret_access_key: Option<String>,
    /// S3: key prefix inside the bucket for everything weft stores [default: none].
    #[arg(long, env = "WEFT_S3_PREFIX")]
    pub s3_prefix: Option<String>,
    /// Kafka: bootstrap brokers, `host:port`, comma-separated (needed by --target distributor).
    #[arg(long, env = "WEFT_KAFKA_BROKERS", value_delimiter = ',')]
    pub kafka_brokers: Option<Vec<String>>,
    /// Kafka: the topic spans go through [default: weft-traces].
    #[arg(long, env = "WEFT_KAFKA_TOPIC")]
    pub kafka_topic: Option<String>,
    /// Kafka: partitions of the topic when weft creates it (a distributor creates a missing
    /// topic; an existing topic keeps its own count) [default: 16].
    #[arg(long, env = "WEFT_KAFKA_PARTITIONS")]
    pub kafka_partitions: Option<u32>,
    /// Kafka: replication factor of the topic when weft creates it [default: 1].
    #[arg(long, env = "WEFT_KAFKA_REPLICATION")]
    pub kafka_replication: Option<u16>,
    /// Kafka: the consumer group whose committed offsets record block builders' progress
    /// [default: weft-block-builder].
    #[arg(long, env = "WEFT_KAFKA_GROUP")]
    pub kafka_group: Option<String>,
    /// Block builder: the partitions this process builds, comma-separated (`0,1,2`); each
    /// partition needs exactly one block builder [default: every partition].
    #[arg(long, env = "WEFT_BLOCK_BUILDER_PARTITIONS", value_delimiter = ',')]
    pub block_builder_partitions: Option<Vec<i32>>,
    /// Kafka: compression of the record batches the distributor writes [default: lz4].
    #[arg(long, env = "WEFT_KAFKA_COMPRESSION", value_enum)]
    pub kafka_compression: Option<KafkaCompression>,
    /// Seconds between re-reads of the block list, for roles that share a data directory with
    /// other processes (--target querier, ingester, compactor) [default: 5].
    #[arg(long, env = "WEFT_BLOCKLIST_POLL")]
    pub blocklist_poll: Option<f64>,
    /// Seconds between compaction and retention rounds; 0 disables both [default: 30].
    #[arg(long, env = "WEFT_COMPACTION_INTERVAL")]
    pub compaction_interval: Option<f64>,
    /// Bytes per second the block scrubber reads to verify every block's checksums in the
    /// background (the process that maintains the storage runs it); 0 turns verification off,
    /// leaving the sweep for missing files [default: 8388608].
    #[arg(long, env = "WEFT_SCRUB_RATE")]
    pub scrub_rate: Option<u64>,
    /// Seconds between scrubber rounds (each sweeps the block folders, then verifies the
    /// blocks that are due); 0 disables the scrubber [default: 60].
    #[arg(long, env = "WEFT_SCRUB_INTERVAL")]
    pub scrub_interval: Option<f64>,
    /// How long after its last verification a block is verified again [default: 24h].
    #[arg(long, env = "WEFT_SCRUB_PERIOD")]
    pub scrub_period: Option<String>,
    /// Largest block compaction writes, in spans [default: 1000000].
    #[arg(long, env = "WEFT_COMPACTION_MAX_BLOCK_SPANS")]
    pub compaction_max_block_spans: Option<u64>,
    /// Blocks of one size tier merged at once, and the size ratio between tiers
    /// (docs/adr/0007-size-tiered-compaction.md) [default: 4].
    #[arg(long, env = "WEFT_COMPACTION_FANOUT")]
    pub compaction_fanout: Option<u64>,
    /// Seconds a compactor process holds a tenant's compaction lease; another compactor on the
    /// same storage leaves the tenant alone meanwhile (docs/adr/0008-kafka-write-path.md)
    /// [default: 300].
    #[arg(long, env = "WEFT_COMPACTION_LEASE")]
    pub compaction_lease: Option<f64>,
    /// Most small blocks merged at once; this many small blocks of one level merge even when
    /// they hold few spans [default: 64].
    #[arg(long, env = "WEFT_COMPACTION_MAX_INPUTS")]
    pub compaction_max_inputs: Option<usize>,
    /// Delete blocks whose newest span is older than this, e.g. 336h or 7d; 0 keeps blocks
    /// forever. `tenant_retention` in the config file overrides it per tenant [default: 336h].
    #[arg(long, env = "WEFT_RETENTION")]
    pub retention: Option<String>,
    /// A WAL segment is sealed and a new one started at this size [default: 67108864].
    #[arg(long, env = "WEFT_WAL_SEGMENT_BYTES")]
    pub wal_segment_bytes: Option<u64>,
    /// Milliseconds a WAL write (under --fsync always) may wait for more requests, so that
    /// requests arriving within it share one fsync. It waits only while another request is
    /// likely (one being admitted, or requests arriving more often than this), so a lone
    /// request pays nothing; it bounds the latency added to an acknowledgement; 0 turns it off
    /// [default: 2].
    #[arg(long, env = "WEFT_WAL_GROUP_WAIT_MS")]
    pub wal_group_wait_ms: Option<f64>,
    /// Under --fsync always, write the WAL with O_DIRECT | O_DSYNC where the filesystem allows
    /// it: each group commit is one write that is durable when it returns, with no page cache
    /// and no separate fdatasync (about a fifth less CPU per commit of a few hundred KB); false
    /// writes through the page cache and calls fdatasync [default: true].
    #[arg(long, env = "WEFT_WAL_DIRECT_IO", num_args = 0..=1, default_missing_value = "true")]
    pub wal_direct_io: Option<bool>,
    /// Request bytes (as received plus decompressed) held by all requests at once, over every
    /// port; a request that would pass it waits briefly, then gets 503 / UNAVAILABLE before its
    /// body is read [default: 268435456].
    #[arg(long, env = "WEFT_MAX_INFLIGHT_REQUEST_BYTES")]
    pub max_inflight_request_bytes: Option<u64>,
    /// Most series a metrics query may return (Tempo's max_response_series); more is a 400
    /// [default: 1000].
    #[arg(long, env = "WEFT_MAX_METRICS_SERIES")]
    pub max_metrics_series: Option<usize>,
    /// Most points (series times steps) a metrics query may hold; more is a 400 naming the
    /// limit [default: 2000000].
    #[arg(long, env = "WEFT_MAX_METRICS_POINTS")]
    pub max_metrics_points: Option<u64>,
    /// Queries that read storage (search, tags, metrics, service graph, trace by ID) run at
    /// once; more wait up to 30 s for a slot, then get 429 [default: 8].
    #[arg(long, env = "WEFT_MAX_CONCURRENT_QUERIES")]
    pub max_concurrent_queries: Option<usize>,
    /// Most open connections per port; further connections wait in the kernel's backlog
    /// [default: 4096, lowered to fit the process's file-descriptor limit].
    #[arg(long, env = "WEFT_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Seconds a client may take to send a request's headers (an HTTP/1.1 keep-alive
    /// connection waiting longer than this for its next request is closed too), and to send
    /// its body [default: 30 and 60: --header-timeout, --body-timeout].
    #[arg(long, env = "WEFT_HEADER_TIMEOUT")]
    pub header_timeout: Option<f64>,
    #[arg(long, env = "WEFT_BODY_TIMEOUT")]
    pub body_timeout: Option<f64>,
    /// Seconds a connection with no request in flight and no bytes moving stays open
    /// (HTTP/2 and gRPC connections; see --header-timeout for HTTP/1.1) [default: 120].
    #[arg(long, env = "WEFT_IDLE_TIMEOUT")]
    pub idle_timeout: Option<f64>,
    /// Log format [default: text].
    #[arg(long, env = "WEFT_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level filter, e.g. info or weft=debug [default: info].
    #[arg(long, env = "WEFT_LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// The resolved configuration. Field names are the YAML keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub target: Target,
    pub data_dir: PathBuf,
    pub listen_host: String,
    pub otlp_grpc_port: u16,
    pub otlp_http_port: u16,
    pub http_port: u16,
    pub zipkin_port: u16,
    pub zipkin_autocomplete_keys: Vec<String>,
    pub jaeger_query_port: u16,
    pub jaeger_http_port: u16,
    pub jaeger_grpc_port: u16,
    pub jaeger_compact_port: u16,
    pub jaeger_binary_port: u16,
    pub xray_port: u16,
    pub xray_sampling_rules: Option<PathBuf>,
    pub udp_tenant: String,
    pub multitenancy: bool,
    /// Bearer token → tenant. When non-empty, every request needs a listed token.
    pub auth_tokens: BTreeMap<String, String>,
    pub fsync: Fsync,
    pub fsync_interval_ms: u64,
    pub block_max_age: f64,
    pub block_max_spans: usize,
    /// `None`: [`DEFAULT_INGESTER_HEAD_BYTES`] for the ingester's head and
    /// [`DEFAULT_PARTITION_HEAD_BYTES`] for each of a block builder's (see
    /// [`Config::head_max_bytes`]).
    pub block_max_bytes: Option<usize>,
    pub max_request_bytes: usize,
    pub max_decompressed_bytes: usize,
    pub max_trace_bytes: u64,
    pub max_trace_response_bytes: u64,
    pub ingestion_rate_bytes: u64,
    pub ingestion_burst_bytes: u64,
    pub storage: StorageKind,
    pub s3_endpoint: Option<String>,
    pub s3_bucket: String,
    pub s3_region: String,
    pub s3_access_key_id: String,
    pub s3_secret_access_key: String,
    pub s3_prefix: String,
    pub kafka_brokers: Vec<String>,
    pub kafka_topic: String,
    pub kafka_partitions: u32,
    pub kafka_replication: u16,
    pub kafka_compression: KafkaCompression,
    pub kafka_group: String,
    pub block_builder_partitions: Vec<i32>,
    pub blocklist_poll: f64,
    pub compaction_interval: f64,
    pub scrub_rate: u64,
    pub scrub_interval: f64,
    pub scrub_period: String,
    pub compaction_max_block_spans: u64,
    pub compaction_fanout: u64,
    pub compaction_max_inputs: usize,
    pub compaction_lease: f64,
    pub retention: String,
    /// Tenant → retention, overriding `retention` (YAML only).
    pub tenant_retention: BTreeMap<String, String>,
    pub wal_segment_bytes: u64,
    pub wal_group_wait_ms: f64,
    pub wal_direct_io: bool,
    pub max_inflight_request_bytes: u64,
    pub max_metrics_series: usize,
    pub max_metrics_points: u64,
    pub max_concurrent_queries: usize,
    pub max_connections: usize,
    pub header_timeout: f64,
    pub body_timeout: f64,
    pub idle_timeout: f64,
    pub log_format: LogFormat,
    pub log_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target: Target::All,
            data_dir: PathBuf::from("weft-data"),
            listen_host: "127.0.0.1".into(),
            otlp_grpc_port: 4317,
            otlp_http_port: 4318,
            http_port: 3200,
            zipkin_port: 9411,
            zipkin_autocomplete_keys: Vec::new(),
            jaeger_query_port: 16686,
            jaeger_http_port: 14268,
            jaeger_grpc_port: 14250,
            jaeger_compact_port: 6831,
            jaeger_binary_port: 6832,
            xray_port: 2000,
            xray_sampling_rules: None,
            udp_tenant: "single-tenant".into(),
            multitenancy: false,
            auth_tokens: BTreeMap::new(),
            fsync: Fsync::Always,
            fsync_interval_ms: 100,
            block_max_age: 30.0,
            block_max_spans: 1_000_000,
            block_max_bytes: None,
            max_request_bytes: 16 << 20,
            max_decompressed_bytes: 64 << 20,
            max_trace_bytes: 128 << 20,
            max_trace_response_bytes: 32 << 20,
            ingestion_rate_bytes: 0,
            ingestion_burst_bytes: 0,
            storage: StorageKind::Local,
            s3_endpoint: None,
            s3_bucket: String::new(),
            s3_region: "us-east-1".into(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: String::new(),
            s3_prefix: String::new(),
            kafka_brokers: Vec::new(),
            kafka_topic: "weft-traces".into(),
            kafka_partitions: 16,
            kafka_replication: 1,
            kafka_compression: KafkaCompression::Lz4,
            kafka_group: "weft-block-builder".into(),
            block_builder_partitions: Vec::new(),
            blocklist_poll: 5.0,
            compaction_interval: 30.0,
            scrub_rate: 8 << 20,
            scrub_interval: 60.0,
            scrub_period: "24h".into(),
            compaction_max_block_spans: 1_000_000,
            compaction_fanout: 4,
            compaction_max_inputs: 64,
            compaction_lease: 300.0,
            retention: "336h".into(),
            tenant_retention: BTreeMap::new(),
            wal_segment_bytes: 64 << 20,
            wal_group_wait_ms: 2.0,
            wal_direct_io: true,
            max_inflight_request_bytes: 256 << 20,
            max_metrics_series: 1000,
            max_metrics_points: 2_000_000,
            max_concurrent_queries: 8,
            max_connections: 4096,
            header_timeout: 30.0,
            body_timeout: 60.0,
            idle_timeout: 120.0,
            log_format: LogFormat::Text,
            log_level: "info".into(),
        }
    }
}

impl Config {
    /// Reads the config file (if any) and applies flags over it.
    pub fn load(flags: &ServerFlags) -> anyhow::Result<Config> {
        let mut c = match &flags.config {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("reading config {}: {e}", p.display()))?;
                serde_yaml::from_str(&text).map_err(|e| anyhow::anyhow!("parsing config {}: {e}", p.display()))?
            }
            None => Config::default(),
        };
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = flags.$f.clone() { c.$f = v; } )* };
        }
        set!(
            target,
            data_dir,
            listen_host,
            otlp_grpc_port,
            otlp_http_port,
            http_port,
            zipkin_port,
            zipkin_autocomplete_keys,
            jaeger_query_port,
            jaeger_http_port,
            jaeger_grpc_port,
            jaeger_compact_port,
            jaeger_binary_port,
            xray_port,
            udp_tenant,
            multitenancy,
            fsync,
            fsync_interval_ms,
            block_max_age,
            block_max_spans,
            max_request_bytes,
            max_decompressed_bytes,
            max_trace_bytes,
            max_trace_response_bytes,
            ingestion_rate_bytes,
            ingestion_burst_bytes,
            storage,
            s3_bucket,
            s3_region,
            s3_access_key_id,
            s3_secret_access_key,
            s3_prefix,
            kafka_brokers,
            kafka_topic,
            kafka_partitions,
            kafka_replication,
            kafka_compression,
            kafka_group,
            block_builder_partitions,
            blocklist_poll,
            compaction_interval,
            scrub_rate,
            scrub_interval,
            scrub_period,
            compaction_max_block_spans,
            compaction_fanout,
            compaction_max_inputs,
            compaction_lease,
            retention,
            wal_segment_bytes,
            wal_group_wait_ms,
            wal_direct_io,
            max_inflight_request_bytes,
            max_metrics_series,
            max_metrics_points,
            max_concurrent_queries,
            max_connections,
            header_timeout,
            body_timeout,
            idle_timeout,
            log_format,
            log_level
        );
        if flags.xray_sampling_rules.is_some() {
            c.xray_sampling_rules = flags.xray_sampling_rules.clone();
        }
        if flags.block_max_bytes.is_some() {
            c.block_max_bytes = flags.block_max_bytes;
        }
        if flags.s3_endpoint.is_some() {
            c.s3_endpoint = flags.s3_endpoint.clone();
        }
        c.validate()?;
        Ok(c)
    }

    /// When a head is cut by its memory: `block_max_bytes` if set, otherwise
    /// [`DEFAULT_INGESTER_HEAD_BYTES`] for the ingester's one head, and
    /// [`DEFAULT_PARTITION_HEAD_BYTES`] for each partition's head of a block builder (which
    /// may own all the topic's partitions at once).
    pub fn head_max_bytes(&self, per_partition: bool) -> usize {
        self.block_max_bytes.unwrap_or(if per_partition {
            DEFAULT_PARTITION_HEAD_BYTES
        } else {
            DEFAULT_INGESTER_HEAD_BYTES
        })
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.block_max_age > 0.0 && self.block_max_age.is_finite(),
            "block_max_age must be a positive number of seconds"
        );
        anyhow::ensure!(self.block_max_spans > 0, "block_max_spans must be positive");
        anyhow::ensure!(self.block_max_bytes != Some(0), "block_max_bytes must be positive");
        anyhow::ensure!(self.max_request_bytes > 0, "max_request_bytes must be positive");
        anyhow::ensure!(
            self.max_decompressed_bytes >= self.max_request_bytes,
            "max_decompressed_bytes ({}) must be at least max_request_bytes ({})",
            self.max_decompressed_bytes,
            self.max_request_bytes
        );
        anyhow::ensure!(
            self.max_trace_response_bytes > 0,
            "max_trace_response_bytes must be positive"
        );
        if self.storage == StorageKind::S3 {
            self.s3_config().map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if matches!(self.target, Target::Distributor | Target::BlockBuilder) {
            anyhow::ensure!(
                !self.kafka_brokers.is_empty(),
                "--target {} needs --kafka-brokers (or kafka_brokers in the config file)",
                if self.target == Target::Distributor {
                    "distributor"
                } else {
                    "block-builder"
                }
            );
        }
        anyhow::ensure!(!self.kafka_group.is_empty(), "kafka_group must not be empty");
        anyhow::ensure!(!self.kafka_topic.is_empty(), "kafka_topic must not be empty");
        anyhow::ensure!(self.kafka_partitions > 0, "kafka_partitions must be positive");
        anyhow::ensure!(self.kafka_replication > 0, "kafka_replication must be positive");
        anyhow::ensure!(
            self.blocklist_poll > 0.0 && self.blocklist_poll.is_finite(),
            "blocklist_poll must be a positive number of seconds"
        );
        anyhow::ensure!(
            self.compaction_interval >= 0.0 && self.compaction_interval.is_finite(),
            "compaction_interval must be a non-negative number of seconds"
        );
        anyhow::ensure!(
            self.compaction_max_block_spans > 0,
            "compaction_max_block_spans must be positive"
        );
        anyhow::ensure!(self.compaction_fanout >= 2, "compaction_fanout must be at least 2");
        anyhow::ensure!(
            self.scrub_interval >= 0.0 && self.scrub_interval.is_finite(),
            "scrub_interval must be a non-negative number of seconds"
        );
        parse_duration(&self.scrub_period).map_err(|e| anyhow::anyhow!("scrub_period: {e}"))?;
        anyhow::ensure!(
            self.compaction_lease >= 1.0 && self.compaction_lease.is_finite(),
            "compaction_lease must be at least 1 second"
        );
        anyhow::ensure!(
            self.compaction_max_inputs >= 2,
            "compaction_max_inputs must be at least 2"
        );
        anyhow::ensure!(
            self.wal_segment_bytes >= 4096,
            "wal_segment_bytes must be at least 4096"
        );
        anyhow::ensure!(
            self.wal_group_wait_ms >= 0.0 && self.wal_group_wait_ms <= 100.0,
            "wal_group_wait_ms must be from 0 to 100 milliseconds"
        );
        anyhow::ensure!(
            self.max_inflight_request_bytes >= self.max_decompressed_bytes as u64,
            "max_inflight_request_bytes ({}) must be at least max_decompressed_bytes ({})",
            self.max_inflight_request_bytes,
            self.max_decompressed_bytes
        );
        anyhow::ensure!(self.max_metrics_series > 0, "max_metrics_series must be positive");
        anyhow::ensure!(self.max_metrics_points > 0, "max_metrics_points must be positive");
        anyhow::ensure!(self.max_connections > 0, "max_connections must be positive");
        anyhow::ensure!(
            self.max_concurrent_queries > 0,
            "max_concurrent_queries must be positive"
        );
        for (name, v) in [
            ("header_timeout", self.header_timeout),
            ("body_timeout", self.body_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            anyhow::ensure!(v > 0.0 && v.is_finite(), "{name} must be a positive number of seconds");
        }
        parse_duration(&self.retention).map_err(|e| anyhow::anyhow!("retention: {e}"))?;
        for (t, d) in &self.tenant_retention {
            parse_duration(d).map_err(|e| anyhow::anyhow!("tenant_retention of {t}: {e}"))?;
        }
        for t in self.auth_tokens.values() {
            weft_ingest::limits::validate_tenant(t).map_err(|e| anyhow::anyhow!("auth_tokens: {e}"))?;
        }
        Ok(())
    }

    /// The S3 settings, checked (`--storage s3`).
    pub fn s3_config(&self) -> Result<weft_storage::S3Config, String> {
        if self.s3_bucket.is_empty() {
            return Err("--storage s3 needs --s3-bucket (or s3_bucket in the config file)".into());
        }
        weft_storage::S3Config::new(
            self.s3_endpoint.as_deref(),
            &self.s3_bucket,
            &self.s3_region,
            &self.s3_access_key_id,
            &self.s3_secret_access_key,
        )
        .and_then(|c| c.with_prefix(&self.s3_prefix))
        .map_err(|e| e.to_string())
    }

    /// The smallest block of compaction's final tier (`M/F`, ADR 7): a head cut this large is
    /// written as compaction would write it, and never rewritten.
    pub fn final_block_spans(&self) -> u64 {
        weft_db::policy::TierPolicy {
            max_block_spans: self.compaction_max_block_spans,
            fanout: self.compaction_fanout,
            max_inputs: self.compaction_max_inputs,
        }
        .final_spans()
    }

    /// Scrubber settings; `None` when it is off.
    pub fn scrub(&self) -> Option<weft_db::scrub::ScrubConfig> {
        (self.scrub_interval > 0.0).then(|| weft_db::scrub::ScrubConfig {
            bytes_per_second: self.scrub_rate,
            every: Duration::from_nanos(parse_duration(&self.scrub_period).unwrap_or(86_400_000_000_000)),
            round: Duration::from_secs_f64(self.scrub_interval),
        })
    }

    /// Compaction and retention settings.
    pub fn compaction(&self) -> weft_db::compact::CompactionConfig {
        let retention = |s: &str| Some(Duration::from_nanos(parse_duration(s).ok()?)).filter(|d| !d.is_zero());
        weft_db::compact::CompactionConfig {
            interval: (self.compaction_interval > 0.0).then(|| Duration::from_secs_f64(self.compaction_interval)),
            max_block_spans: self.compaction_max_block_spans,
            fanout: self.compaction_fanout,
            max_inputs: self.compaction_max_inputs,
            retention: retention(&self.retention),
            tenant_retention: self
                .tenant_retention
                .iter()
                .map(|(t, d)| (t.clone(), retention(d).unwrap_or(Duration::MAX)))
                .collect(),
            // A compactor process may have peers on the same storage: take leases. The
            // all-in-one binary is the only compactor of its storage.
            leases: (self.target == Target::Compactor).then(|| {
                // Host and HTTP port name the compactor, not the process: a compactor that
                // restarts takes its own leases back at once instead of waiting them out.
                let host = std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
                    .filter(|h| !h.is_empty())
                    .or_else(|| std::env::var("HOSTNAME").ok())
                    .unwrap_or_else(|| "weft".into());
                let owner = format!("{host}:{}", self.http_port);
                weft_db::lease::Leases::new(owner, Duration::from_secs_f64(self.compaction_lease))
            }),
            ..Default::default()
        }
    }

    pub fn fsync_policy(&self) -> weft_wal::FsyncPolicy {
        match self.fsync {
            Fsync::Always => weft_wal::FsyncPolicy::Always,
            Fsync::Interval => weft_wal::FsyncPolicy::Interval(Duration::from_millis(self.fsync_interval_ms.max(1))),
            Fsync::Never => weft_wal::FsyncPolicy::Never,
        }
    }
}

/// Parses a duration flag or query parameter: a Go-style duration with `d` for days
/// ([`weft_core::parse_duration`]), or a bare number of seconds (`30`, `1.5`). Returns
/// nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok((secs * 1e9) as u64);
        }
        return Err(format!("invalid duration {s:?}: must not be negative"));
    }
    weft_core::parse_duration(s, true).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weft.yaml");
        std::fs::write(&p, "http_port: 9999\nmultitenancy: true\nblock_max_spans: 10\n").unwrap();
        let flags = ServerFlags {
            config: Some(p.clone()),
            http_port: Some(1234),
            ..Default::default()
        };
        let c = Config::load(&flags).unwrap();
        assert_eq!(c.http_port, 1234);
        assert!(c.multitenancy);
        assert_eq!(c.block_max_spans, 10);
        assert_eq!(c.otlp_grpc_port, 4317);
        // Unset, the head's memory cap depends on the role; set, it holds for both.
        assert_eq!(c.head_max_bytes(false), DEFAULT_INGESTER_HEAD_BYTES);
        assert_eq!(c.head_max_bytes(true), DEFAULT_PARTITION_HEAD_BYTES);
        let c = Config::load(&ServerFlags {
            block_max_bytes: Some(1 << 20),
            ..Default::default()
        })
        .unwrap();
        assert_eq!((c.head_max_bytes(false), c.head_max_bytes(true)), (1 << 20, 1 << 20));
        let zero = Config::load(&ServerFlags {
            block_max_bytes: Some(0),
            ..Default::default()
        });
        assert!(zero.unwrap_err().to_string().contains("block_max_bytes"));
    }

    /// docs/cluster.yaml describes a whole cluster: every role loads it, with its target
    /// from the command line.
    #[test]
    fn the_cluster_example_loads_for_every_role() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cluster.yaml");
        for target in [
            Target::Distributor,
            Target::BlockBuilder,
            Target::Querier,
            Target::Compactor,
        ] {
            let flags = ServerFlags {
                config: Some(path.clone()),
                target: Some(target),
                s3_access_key_id: Some("k".into()),
                s3_secret_access_key: Some("s".into()),
                ..Default::default()
            };
            let c = Config::load(&flags).unwrap_or_else(|e| panic!("{target:?}: {e:#}"));
            assert_eq!(c.kafka_brokers.len(), 3);
            assert_eq!(c.kafka_topic, "weft-traces");
            assert_eq!(c.kafka_replication, 3);
            assert_eq!(c.kafka_compression, KafkaCompression::Lz4);
            assert_eq!(c.storage, StorageKind::S3);
            assert_eq!(c.s3_bucket, "weft-blocks");
            assert_eq!(c.target, target);
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.yaml");
        std::fs::write(&p, "no_such_key: 1\n").unwrap();
        let err = Config::load(&ServerFlags {
            config: Some(p),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("no_such_key"), "{err}");
        let err = Config::load(&ServerFlags {
            block_max_age: Some(-1.0),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("block_max_age"));
    }
}
