//! Configuration: every option is declared once, as a flag of its module's section.
//!
//! Each module owns a `clap::Args` struct of its options (`crate::zipkin::ZipkinOptions`,
//! `crate::modules::storage::StorageOptions`, ...), each option a field with its flag, its
//! `WEFT_*` variable and its default. [`Config`] gathers the sections. The YAML file
//! (`--config`) uses the fields' names as keys (`zipkin_port: 9412`); [`Config::load`] reads
//! it as if its keys were flags given before the command line's, so flags and variables win
//! over the file, the file wins over defaults, and a bad value is refused by the same parser
//! whichever way it came. Only options that are maps (`auth_tokens`, `tenant_retention`) exist
//! in the file alone.
//!
//! To add an option: a field in its module's section. To add a section: a struct deriving
//! `clap::Args` in its module and one `#[command(flatten)]` line below.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::modules::Target;

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
    pub config: Config,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate OTLP gRPC load against a weft (or any OTLP) endpoint and report throughput.
    Loadgen(weft_loadgen::LoadgenArgs),
}

/// The whole configuration: one section per module.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// YAML configuration file; flags and WEFT_* variables override its values.
    #[arg(long, env = "WEFT_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerOptions,
    #[command(flatten)]
    pub tenants: crate::tenant::TenantOptions,
    #[command(flatten)]
    pub receivers: crate::receivers::ReceiverOptions,
    /// Every external API's section ([`crate::apis`]).
    #[command(flatten)]
    pub apis: crate::apis::ApiOptions,
    #[command(flatten)]
    pub query: crate::query::QueryOptions,
    #[command(flatten)]
    pub storage: crate::modules::storage::StorageOptions,
    #[command(flatten)]
    pub ingester: crate::modules::ingester::IngesterOptions,
    #[command(flatten)]
    pub head: crate::modules::ingester::HeadOptions,
    #[command(flatten)]
    pub admission: crate::modules::ingester::AdmissionOptions,
    #[command(flatten)]
    pub kafka: crate::modules::kafka::KafkaOptions,
    #[command(flatten)]
    pub poller: crate::modules::db::PollerOptions,
    #[command(flatten)]
    pub compactor: crate::modules::compactor::CompactorOptions,
}

/// The process: its role, where it keeps data, the address and HTTP port it serves, the
/// limits every port shares, and its logs.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Server")]
pub struct ServerOptions {
    /// Role to run.
    #[arg(long, env = "WEFT_TARGET", value_enum, default_value_t = Target::All)]
    pub target: Target,
    /// Directory for the WAL and blocks.
    #[arg(long, env = "WEFT_DATA_DIR", default_value = "weft-data")]
    pub data_dir: PathBuf,
    /// Address every port listens on.
    #[arg(long, env = "WEFT_LISTEN_HOST", default_value = "127.0.0.1")]
    pub listen_host: String,
    /// Tempo-compatible query API, the UI, /metrics and /ready.
    #[arg(long, env = "WEFT_HTTP_PORT", default_value_t = 3200)]
    pub http_port: u16,
    /// Most open connections per port; further connections wait in the kernel's backlog
    /// [lowered to fit the process's file-descriptor limit].
    #[arg(long, env = "WEFT_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Seconds a client may take to send a request's headers (an HTTP/1.1 keep-alive
    /// connection waiting longer than this for its next request is closed too); see
    /// --body-timeout for the body.
    #[arg(long, env = "WEFT_HEADER_TIMEOUT", default_value_t = 30.0)]
    pub header_timeout: f64,
    /// Seconds a connection with no request in flight and no bytes moving stays open
    /// (HTTP/2 and gRPC connections; see --header-timeout for HTTP/1.1).
    #[arg(long, env = "WEFT_IDLE_TIMEOUT", default_value_t = 120.0)]
    pub idle_timeout: f64,
    /// Log format.
    #[arg(long, env = "WEFT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level filter, e.g. info or weft=debug.
    #[arg(long, env = "WEFT_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl ServerOptions {
    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.max_connections > 0, "max_connections must be positive");
        for (name, v) in [
            ("header_timeout", self.header_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            anyhow::ensure!(v > 0.0 && v.is_finite(), "{name} must be a positive number of seconds");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Options that are maps, which only the file can hold.
const FILE_ONLY: &[&str] = &["auth_tokens", "tenant_retention"];

impl Config {
    /// The configuration from a command line (`args[0]` is the program), its `WEFT_*`
    /// variables, and the file `--config` names, in that order of precedence; checked.
    pub fn load<I, T>(args: I) -> anyhow::Result<Config>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let cmd = Cli::command();
        let matches = cmd.clone().try_get_matches_from(&args)?;
        let mut cfg = Config::from_arg_matches(&matches)?;
        if let Some(path) = cfg.config.clone() {
            let what = || format!("parsing config {}", path.display());
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading config {}", path.display()))?;
            let doc: serde_yaml::Value = serde_yaml::from_str(&text).with_context(what)?;
            let doc = match doc {
                serde_yaml::Value::Null => serde_yaml::Mapping::new(),
                serde_yaml::Value::Mapping(m) => m,
                _ => anyhow::bail!("{}: expected a mapping of option names to values", what()),
            };
            let mut from_file = vec![args.first().cloned().unwrap_or_else(|| "weft".into())];
            for (key, value) in &doc {
                let key = key
                    .as_str()
                    .with_context(|| format!("{}: option names are strings", what()))?;
                if FILE_ONLY.contains(&key) {
                    continue;
                }
                let long = cmd
                    .get_arguments()
                    .find(|a| a.get_id() == key && key != "config")
                    .and_then(|a| a.get_long())
                    .with_context(|| format!("{}: unknown option `{key}`", what()))?;
                // A flag or a variable set it: it wins over the file.
                if matches!(
                    matches.value_source(key),
                    Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                ) {
                    continue;
                }
                if let Some(v) = flag_value(value).with_context(|| format!("{}: `{key}`", what()))? {
                    from_file.push(format!("--{long}={v}").into());
                }
            }
            // The file's values alone first, so that an error names the file.
            cmd.clone()
                .try_get_matches_from(&from_file)
                .map_err(|e| anyhow::anyhow!("{}: {}", what(), e.render().to_string().trim()))?;
            from_file.extend(args.into_iter().skip(1));
            cfg = Config::from_arg_matches(&cmd.try_get_matches_from(&from_file)?)?;
            if let Some(v) = doc.get("auth_tokens") {
                cfg.tenants.auth_tokens = serde_yaml::from_value(v.clone()).context("auth_tokens")?;
            }
            if let Some(v) = doc.get("tenant_retention") {
                cfg.compactor.tenant_retention = serde_yaml::from_value(v.clone()).context("tenant_retention")?;
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Each section's checks, and those across sections.
    fn validate(&self) -> anyhow::Result<()> {
        self.server.validate()?;
        self.tenants.validate()?;
        self.receivers.validate()?;
        self.query.validate()?;
        self.storage.validate()?;
        self.ingester.validate()?;
        self.head.validate()?;
        self.kafka.validate(self.server.target)?;
        anyhow::ensure!(
            self.server.target != Target::QueryFrontend || !self.query.query_peers.is_empty(),
            "--target query-frontend needs --query-peers: the queriers it splits queries across"
        );
        anyhow::ensure!(
            self.server.target != Target::LiveStore || self.query.live_stores.is_empty(),
            "--target live-store holds recent spans itself: --live-stores is for frontends and queriers"
        );
        anyhow::ensure!(
            self.query.live_stores.is_empty() || matches!(self.server.target, Target::Querier | Target::QueryFrontend),
            "--live-stores is for --target querier and query-frontend"
        );
        self.poller.validate()?;
        self.compactor.validate()?;
        self.apis.sampling.validate()?;
        anyhow::ensure!(
            self.receivers.max_inflight_request_bytes >= self.receivers.max_decompressed_bytes as u64,
            "max_inflight_request_bytes ({}) must be at least max_decompressed_bytes ({})",
            self.receivers.max_inflight_request_bytes,
            self.receivers.max_decompressed_bytes
        );
        Ok(())
    }
}

/// A YAML value as a flag's value: scalars as written, lists comma-separated (as the flags
/// take them), nothing for null.
fn flag_value(v: &serde_yaml::Value) -> anyhow::Result<Option<String>> {
    use serde_yaml::Value as Y;
    let scalar = |v: &Y| match v {
        Y::Bool(b) => Ok(b.to_string()),
        Y::Number(n) => Ok(n.to_string()),
        Y::String(s) => Ok(s.clone()),
        _ => anyhow::bail!("expected a number, a string or true/false"),
    };
    Ok(match v {
        Y::Null => None,
        Y::Sequence(items) => Some(items.iter().map(scalar).collect::<anyhow::Result<Vec<_>>>()?.join(",")),
        v => Some(scalar(v)?),
    })
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
        let why = if secs.is_finite() {
            "must not be negative"
        } else {
            "must be a finite number"
        };
        return Err(format!("invalid duration {s:?}: {why}"));
    }
    weft_core::parse_duration(s, true).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::ingester::{DEFAULT_INGESTER_HEAD_BYTES, DEFAULT_PARTITION_HEAD_BYTES};
    use crate::modules::kafka::KafkaCompression;
    use crate::modules::storage::StorageKind;

    fn load(args: &[&str]) -> anyhow::Result<Config> {
        Config::load(std::iter::once("weft").chain(args.iter().copied()))
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weft.yaml");
        std::fs::write(
            &p,
            "http_port: 9999\nmultitenancy: true\nblock_max_spans: 10\nkafka_brokers: [a:1, b:2]\n",
        )
        .unwrap();
        let c = load(&["--config", p.to_str().unwrap(), "--http-port", "1234"]).unwrap();
        assert_eq!(c.server.http_port, 1234);
        assert!(c.tenants.multitenancy);
        assert_eq!(c.head.block_max_spans, 10);
        assert_eq!(c.kafka.kafka_brokers, ["a:1", "b:2"]);
        assert_eq!(c.apis.otlp.otlp_grpc_port, 4317);
        // Unset, the head's memory cap depends on the role; set, it holds for both.
        assert_eq!(c.head.head_max_bytes(false), DEFAULT_INGESTER_HEAD_BYTES);
        assert_eq!(c.head.head_max_bytes(true), DEFAULT_PARTITION_HEAD_BYTES);
        let c = load(&["--block-max-bytes", "1048576"]).unwrap();
        assert_eq!(
            (c.head.head_max_bytes(false), c.head.head_max_bytes(true)),
            (1 << 20, 1 << 20)
        );
        let zero = load(&["--block-max-bytes", "0"]);
        assert!(zero.unwrap_err().to_string().contains("block_max_bytes"));
        let frontend = load(&["--target", "query-frontend"]);
        assert!(frontend.unwrap_err().to_string().contains("--query-peers"));
        let c = load(&["--target", "query-frontend", "--query-peers", "q1:3200,q2:3200"]).unwrap();
        assert_eq!(c.server.target, Target::QueryFrontend);
        assert!(load(&["--querier-live-store", "false"]).is_ok_and(|c| !c.query.querier_live_store));
        let live = load(&["--target", "live-store"]);
        assert!(live.unwrap_err().to_string().contains("--kafka-brokers"));
        let c = load(&[
            "--target",
            "live-store",
            "--kafka-brokers",
            "k:9092",
            "--live-store-partitions",
            "0,2",
        ])
        .unwrap();
        assert_eq!(c.kafka.live_store_partitions, vec![0, 2]);
        let c = load(&["--target", "querier", "--live-stores", "l1:3200,l2:3200"]).unwrap();
        assert_eq!(c.query.live_stores.len(), 2);
        assert!(load(&["--live-stores", "l1:3200"]).is_err());
    }

    /// docs/cluster.yaml describes a whole cluster: every role loads it, with its target
    /// from the command line.
    #[test]
    fn the_cluster_example_loads_for_every_role() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cluster.yaml");
        for target in ["distributor", "block-builder", "querier", "compactor"] {
            let c = load(&[
                "--config",
                path.to_str().unwrap(),
                "--target",
                target,
                "--s3-access-key-id",
                "k",
                "--s3-secret-access-key",
                "s",
            ])
            .unwrap_or_else(|e| panic!("{target}: {e:#}"));
            assert_eq!(c.kafka.kafka_brokers.len(), 3);
            assert_eq!(c.kafka.kafka_topic, "weft-traces");
            assert_eq!(c.kafka.kafka_replication, 3);
            assert_eq!(c.kafka.kafka_compression, KafkaCompression::Lz4);
            assert_eq!(c.storage.storage, StorageKind::S3);
            assert_eq!(c.storage.s3_bucket, "weft-blocks");
            assert_eq!(Target::from_str(target, false).unwrap(), c.server.target);
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.yaml");
        std::fs::write(&p, "no_such_key: 1\n").unwrap();
        let err = load(&["--config", p.to_str().unwrap()]).unwrap_err();
        assert!(err.to_string().contains("no_such_key"), "{err}");
        std::fs::write(&p, "http_port: many\n").unwrap();
        let err = load(&["--config", p.to_str().unwrap()]).unwrap_err();
        assert!(
            err.to_string().contains("bad.yaml") && err.to_string().contains("http-port"),
            "{err}"
        );
        let err = load(&["--block-max-age=-1"]).unwrap_err();
        assert!(err.to_string().contains("block_max_age"), "{err}");
    }

    #[test]
    fn file_only_maps_and_negative_numbers_load() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("weft.yaml");
        std::fs::write(
            &p,
            "auth_tokens: {t0k3n: acme}\ntenant_retention: {acme: 7d}\nblock_max_age: -2\n",
        )
        .unwrap();
        // Read as written, then refused by the check, not by the parser.
        let err = load(&["--config", p.to_str().unwrap()]).unwrap_err();
        assert!(err.to_string().contains("block_max_age"), "{err}");
        std::fs::write(&p, "auth_tokens: {t0k3n: acme}\ntenant_retention: {acme: 7d}\n").unwrap();
        let c = load(&["--config", p.to_str().unwrap()]).unwrap();
        assert_eq!(c.tenants.auth_tokens["t0k3n"], "acme");
        assert_eq!(c.compactor.tenant_retention["acme"], "7d");
    }
}
