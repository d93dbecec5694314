//! The Kafka write path's modules: the Distributor (receivers' spans into the topic, routed
//! by trace ID) and the BlockBuilder (partitions of the topic into blocks), and the options of
//! the cluster and topic they share with a querier tailing recent spans.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use weft_db::Db;
use weft_ingest::IngestConfig;

use super::Target;
use crate::config::Config;

/// How the distributor compresses record batches it writes to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kafka")]
pub struct KafkaOptions {
    /// Kafka: bootstrap brokers, `host:port`, comma-separated (needed by --target distributor).
    #[arg(long, env = "WEFT_KAFKA_BROKERS", value_delimiter = ',')]
    pub kafka_brokers: Vec<String>,
    /// Kafka: the topic spans go through.
    #[arg(long, env = "WEFT_KAFKA_TOPIC", default_value = "weft-traces")]
    pub kafka_topic: String,
    /// Kafka: partitions of the topic when weft creates it (a distributor creates a missing
    /// topic; an existing topic keeps its own count).
    #[arg(long, env = "WEFT_KAFKA_PARTITIONS", default_value_t = 16)]
    pub kafka_partitions: u32,
    /// Kafka: replication factor of the topic when weft creates it.
    #[arg(long, env = "WEFT_KAFKA_REPLICATION", default_value_t = 1)]
    pub kafka_replication: u16,
    /// Kafka: compression of the record batches the distributor writes.
    #[arg(long, env = "WEFT_KAFKA_COMPRESSION", value_enum, default_value_t = KafkaCompression::Lz4)]
    pub kafka_compression: KafkaCompression,
    /// Kafka: the consumer group whose committed offsets record block builders' progress.
    #[arg(long, env = "WEFT_KAFKA_GROUP", default_value = "weft-block-builder")]
    pub kafka_group: String,
    /// Block builder: the partitions this process builds, comma-separated (`0,1,2`); each
    /// partition needs exactly one block builder [default: every partition].
    #[arg(long, env = "WEFT_BLOCK_BUILDER_PARTITIONS", value_delimiter = ',')]
    pub block_builder_partitions: Vec<i32>,
    /// Block builder: what names this builder in its partitions' leases in the block storage;
    /// a restart with the same name takes them back at once (use a stable pod name on
    /// Kubernetes) [default: <host>:<http port>].
    #[arg(long, env = "WEFT_BLOCK_BUILDER_ID")]
    pub block_builder_id: Option<String>,
    /// Block builder: seconds of a partition lease's period. Another builder given a leased
    /// partition refuses to start; a builder that dies frees its partitions within two periods.
    #[arg(long, env = "WEFT_BLOCK_BUILDER_LEASE", default_value_t = 30.0)]
    pub block_builder_lease: f64,
    /// Live store: the partitions whose recent spans this process holds, comma-separated;
    /// together the live stores of --live-stores must hold every partition [default: every
    /// partition].
    #[arg(long, env = "WEFT_LIVE_STORE_PARTITIONS", value_delimiter = ',')]
    pub live_store_partitions: Vec<i32>,
    /// Live store (or a querier tailing Kafka): most bytes of recent spans held in memory;
    /// past it the oldest are dropped until their blocks are written, and answers that need
    /// them say they are partial. Size it for your rate times --block-max-age plus 30 s.
    #[arg(long, env = "WEFT_LIVE_STORE_MAX_BYTES", default_value_t = weft_querier::live::MAX_LIVE_BYTES)]
    pub live_store_max_bytes: usize,
    /// Kafka: connect to brokers over TLS, trusting the system's CAs unless --kafka-tls-ca.
    #[arg(long, env = "WEFT_KAFKA_TLS", action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", default_value_t = false)]
    pub kafka_tls: bool,
    /// Kafka TLS: PEM bundle of the CAs that sign the brokers' certificates [default: the
    /// system's].
    #[arg(long, env = "WEFT_KAFKA_TLS_CA")]
    pub kafka_tls_ca: Option<PathBuf>,
    /// Kafka TLS: PEM certificate chain presented to brokers that require one (mTLS).
    #[arg(long, env = "WEFT_KAFKA_TLS_CERT")]
    pub kafka_tls_cert: Option<PathBuf>,
    /// Kafka TLS: PEM private key of --kafka-tls-cert.
    #[arg(long, env = "WEFT_KAFKA_TLS_KEY")]
    pub kafka_tls_key: Option<PathBuf>,
    /// Kafka TLS: the name the brokers' certificates carry, when it is not the host each
    /// broker is dialled at.
    #[arg(long, env = "WEFT_KAFKA_TLS_SERVER_NAME")]
    pub kafka_tls_server_name: Option<String>,
    /// Kafka TLS: accept any broker certificate. It still encrypts, but no longer knows whom
    /// it talks to: for tests only.
    #[arg(long, env = "WEFT_KAFKA_TLS_INSECURE_SKIP_VERIFY", action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub kafka_tls_insecure_skip_verify: bool,
    /// Kafka: the SASL mechanism brokers authenticate this process with [default: none].
    #[arg(long, env = "WEFT_KAFKA_SASL_MECHANISM", value_enum)]
    pub kafka_sasl_mechanism: Option<SaslMechanism>,
    /// Kafka SASL (PLAIN, SCRAM): the user name.
    #[arg(long, env = "WEFT_KAFKA_SASL_USERNAME")]
    pub kafka_sasl_username: Option<String>,
    /// Kafka SASL (PLAIN, SCRAM): the password. Prefer --kafka-sasl-password-file or the
    /// WEFT_KAFKA_SASL_PASSWORD variable to a flag, which other users can read in `ps`.
    #[arg(long, env = "WEFT_KAFKA_SASL_PASSWORD", hide_env_values = true, value_parser = secret)]
    pub kafka_sasl_password: Option<weft_kafka::Secret>,
    /// Kafka SASL (PLAIN, SCRAM): a file holding the password (a trailing newline is ignored).
    #[arg(long, env = "WEFT_KAFKA_SASL_PASSWORD_FILE")]
    pub kafka_sasl_password_file: Option<PathBuf>,
    /// Kafka SASL OAUTHBEARER: a file holding the token, read again at each new connection
    /// (something else keeps it fresh: a projected service-account token, a sidecar).
    #[arg(long, env = "WEFT_KAFKA_SASL_TOKEN_FILE")]
    pub kafka_sasl_token_file: Option<PathBuf>,
    /// Kafka SASL OAUTHBEARER: a shell command printing the token, run at each new
    /// connection (an MSK IAM signer, a cloud CLI).
    #[arg(long, env = "WEFT_KAFKA_SASL_TOKEN_COMMAND")]
    pub kafka_sasl_token_command: Option<String>,
}

/// A SASL mechanism Kafka brokers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanism {
    /// User name and password in the clear: use with --kafka-tls.
    #[value(name = "plain", alias = "PLAIN")]
    Plain,
    /// Salted challenge and response (RFC 7677): the password never crosses the wire.
    #[value(name = "scram-sha-256", alias = "SCRAM-SHA-256")]
    ScramSha256,
    /// As scram-sha-256, with SHA-512 (Amazon MSK's SCRAM).
    #[value(name = "scram-sha-512", alias = "SCRAM-SHA-512")]
    ScramSha512,
    /// A bearer token from --kafka-sasl-token-file or --kafka-sasl-token-command (OIDC
    /// providers, MSK IAM through a signer).
    #[value(name = "oauthbearer", alias = "OAUTHBEARER")]
    OAuthBearer,
}

fn secret(s: &str) -> Result<weft_kafka::Secret, String> {
    Ok(weft_kafka::Secret::new(s))
}

impl KafkaOptions {
    pub(crate) fn validate(&self, target: Target) -> anyhow::Result<()> {
        if matches!(target, Target::Distributor | Target::BlockBuilder | Target::LiveStore) {
            anyhow::ensure!(
                !self.kafka_brokers.is_empty(),
                "--target {} needs --kafka-brokers (or kafka_brokers in the config file)",
                match target {
                    Target::Distributor => "distributor",
                    Target::BlockBuilder => "block-builder",
                    _ => "live-store",
                }
            );
        }
        anyhow::ensure!(!self.kafka_group.is_empty(), "kafka_group must not be empty");
        anyhow::ensure!(self.live_store_max_bytes > 0, "live_store_max_bytes must be positive");
        anyhow::ensure!(!self.kafka_topic.is_empty(), "kafka_topic must not be empty");
        anyhow::ensure!(self.kafka_partitions > 0, "kafka_partitions must be positive");
        anyhow::ensure!(self.kafka_replication > 0, "kafka_replication must be positive");
        anyhow::ensure!(
            self.block_builder_lease.is_finite() && self.block_builder_lease >= 1.0,
            "block_builder_lease must be at least 1 second"
        );
        self.security()?;
        if self.kafka_sasl_mechanism == Some(SaslMechanism::Plain) && !self.kafka_tls {
            tracing::warn!("kafka_sasl_mechanism plain without kafka_tls sends the password in the clear");
        }
        Ok(())
    }

    /// TLS and SASL as configured: files are read and options checked here, so a mistake
    /// stops the start with its name.
    pub fn security(&self) -> anyhow::Result<weft_kafka::Security> {
        let tls_named = self.kafka_tls_ca.is_some()
            || self.kafka_tls_cert.is_some()
            || self.kafka_tls_key.is_some()
            || self.kafka_tls_server_name.is_some()
            || self.kafka_tls_insecure_skip_verify;
        anyhow::ensure!(
            self.kafka_tls || !tls_named,
            "kafka_tls_* options are set but kafka_tls is not: set kafka_tls: true to connect over TLS"
        );
        anyhow::ensure!(
            self.kafka_tls_cert.is_some() == self.kafka_tls_key.is_some(),
            "kafka_tls_cert and kafka_tls_key go together (the client certificate and its key)"
        );
        let tls = if self.kafka_tls {
            let opts = weft_kafka::TlsOptions {
                ca_file: self.kafka_tls_ca.clone(),
                cert_file: self.kafka_tls_cert.clone(),
                key_file: self.kafka_tls_key.clone(),
                server_name: self.kafka_tls_server_name.clone(),
                insecure_skip_verify: self.kafka_tls_insecure_skip_verify,
            };
            Some(weft_kafka::Tls::new(&opts).map_err(|e| anyhow::anyhow!("kafka_tls: {e}"))?)
        } else {
            None
        };
        let with_password = matches!(
            self.kafka_sasl_mechanism,
            Some(SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512)
        );
        anyhow::ensure!(
            with_password
                || (self.kafka_sasl_username.is_none()
                    && self.kafka_sasl_password.is_none()
                    && self.kafka_sasl_password_file.is_none()),
            "kafka_sasl_username and kafka_sasl_password are for kafka_sasl_mechanism plain, \
             scram-sha-256 or scram-sha-512"
        );
        let with_token = self.kafka_sasl_mechanism == Some(SaslMechanism::OAuthBearer);
        anyhow::ensure!(
            with_token || (self.kafka_sasl_token_file.is_none() && self.kafka_sasl_token_command.is_none()),
            "kafka_sasl_token_file and kafka_sasl_token_command are for kafka_sasl_mechanism oauthbearer"
        );
        let sasl = match self.kafka_sasl_mechanism {
            None => None,
            Some(SaslMechanism::OAuthBearer) => {
                let token = match (&self.kafka_sasl_token_file, &self.kafka_sasl_token_command) {
                    (Some(f), None) => weft_kafka::TokenSource::File(f.clone()),
                    (None, Some(c)) => weft_kafka::TokenSource::Command(c.clone()),
                    _ => anyhow::bail!(
                        "kafka_sasl_mechanism oauthbearer needs exactly one of kafka_sasl_token_file \
                         and kafka_sasl_token_command"
                    ),
                };
                Some(weft_kafka::Sasl::OAuthBearer { token })
            }
            Some(m) => {
                let username = self
                    .kafka_sasl_username
                    .clone()
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| anyhow::anyhow!("kafka_sasl_mechanism {m:?} needs kafka_sasl_username"))?;
                let password = match (&self.kafka_sasl_password, &self.kafka_sasl_password_file) {
                    (Some(p), None) => p.clone(),
                    (None, Some(f)) => {
                        let text = std::fs::read_to_string(f)
                            .with_context(|| format!("reading kafka_sasl_password_file {}", f.display()))?;
                        weft_kafka::Secret::new(text.trim_end_matches(['\n', '\r']))
                    }
                    (None, None) => anyhow::bail!(
                        "kafka_sasl_mechanism {m:?} needs kafka_sasl_password or kafka_sasl_password_file"
                    ),
                    (Some(_), Some(_)) => {
                        anyhow::bail!("set kafka_sasl_password or kafka_sasl_password_file, not both")
                    }
                };
                Some(match m {
                    SaslMechanism::Plain => weft_kafka::Sasl::Plain { username, password },
                    _ => weft_kafka::Sasl::Scram {
                        sha512: m == SaslMechanism::ScramSha512,
                        username,
                        password,
                    },
                })
            }
        };
        Ok(weft_kafka::Security { tls, sasl })
    }

    /// A client of the configured Kafka cluster.
    pub async fn client(&self, client_id: &str) -> anyhow::Result<Arc<weft_kafka::Client>> {
        let kafka = weft_kafka::ClientConfig {
            brokers: self.kafka_brokers.clone(),
            client_id: client_id.into(),
            security: self.security()?,
            ..Default::default()
        };
        weft_kafka::Client::connect(kafka)
            .await
            .with_context(|| format!("connecting to Kafka at {}", self.kafka_brokers.join(",")))
    }
}

/// Creates the topic if it is missing and starts producing to it.
pub async fn init_distributor(cfg: &Config) -> anyhow::Result<Arc<weft_distributor::Distributor>> {
    let k = &cfg.kafka;
    let client = k.client("weft-distributor").await?;
    // A request's spans of one partition are one record: allow records as large as the
    // largest request.
    let max_message = (cfg.receivers.max_decompressed_bytes + (1 << 20)).to_string();
    let created = client
        .create_topic(
            &k.kafka_topic,
            k.kafka_partitions as i32,
            k.kafka_replication as i16,
            &[("max.message.bytes", &max_message)],
        )
        .await
        .with_context(|| format!("creating Kafka topic {}", k.kafka_topic))?;
    let compression = match k.kafka_compression {
        KafkaCompression::None => weft_kafka::Compression::None,
        KafkaCompression::Lz4 => weft_kafka::Compression::Lz4,
        KafkaCompression::Zstd => weft_kafka::Compression::Zstd(1),
    };
    let producer = Arc::new(weft_kafka::Producer::new(client, &k.kafka_topic, compression));
    let dcfg = weft_distributor::DistributorConfig {
        rate_bytes: cfg.admission.ingestion_rate_bytes,
        burst_bytes: cfg.admission.ingestion_burst_bytes,
        ..Default::default()
    };
    let d = weft_distributor::Distributor::new(dcfg, producer)
        .await
        .with_context(|| format!("reading Kafka topic {}", k.kafka_topic))?;
    tracing::info!(
        topic = %k.kafka_topic,
        partitions = d.partitions(),
        created,
        "distributing to Kafka"
    );
    Ok(d)
}

/// Starts reading this builder's partitions into heads.
pub async fn init_block_builder(cfg: &Config, db: Arc<Db>) -> anyhow::Result<Arc<weft_blockbuilder::BlockBuilder>> {
    let k = &cfg.kafka;
    let client = k.client("weft-block-builder").await?;
    let bcfg = weft_blockbuilder::BlockBuilderConfig {
        topic: k.kafka_topic.clone(),
        group: k.kafka_group.clone(),
        partitions: k.block_builder_partitions.clone(),
        cut: cfg.head.cut(true),
        row_group_rows: IngestConfig::default().row_group_rows,
        final_block_spans: cfg.compactor.final_block_spans(),
        fetch_bytes: 8 << 20,
        fetch_min_bytes: 1 << 20,
        owner: k
            .block_builder_id
            .clone()
            .unwrap_or_else(|| super::instance_name(cfg.server.http_port)),
        lease_period: std::time::Duration::from_secs_f64(k.block_builder_lease),
    };
    weft_blockbuilder::BlockBuilder::start(bcfg, client, db, tokio::runtime::Handle::current())
        .await
        .with_context(|| format!("starting to read Kafka topic {}", k.kafka_topic))
}
