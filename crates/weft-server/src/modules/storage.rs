//! The Storage module: where blocks live, counted for `/metrics`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use weft_storage::{Storage, StorageMetrics};

/// Where blocks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StorageKind {
    /// `<data_dir>/blocks` on the local filesystem (the default).
    Local,
    /// An S3-compatible bucket (`--s3-*`). The WAL stays in `data_dir`.
    S3,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Storage")]
pub struct StorageOptions {
    /// Where blocks are stored: local (in --data-dir) or s3.
    #[arg(long, env = "WEFT_STORAGE", value_enum, default_value_t = StorageKind::Local)]
    pub storage: StorageKind,
    /// S3: endpoint URL of an S3-compatible server (`http://127.0.0.1:9000`); unset is AWS S3.
    #[arg(long, env = "WEFT_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3: bucket (required with --storage s3).
    #[arg(long, env = "WEFT_S3_BUCKET", default_value = "")]
    pub s3_bucket: String,
    /// S3: region.
    #[arg(long, env = "WEFT_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// S3: access key ID; with the secret unset too, the environment's AWS credential chain.
    #[arg(long, env = "WEFT_S3_ACCESS_KEY_ID", default_value = "")]
    pub s3_access_key_id: String,
    /// S3: secret access key (prefer the WEFT_S3_SECRET_ACCESS_KEY variable).
    #[arg(long, env = "WEFT_S3_SECRET_ACCESS_KEY", hide_env_values = true, default_value = "")]
    pub s3_secret_access_key: String,
    /// S3: key prefix inside the bucket for everything weft stores [default: none].
    #[arg(long, env = "WEFT_S3_PREFIX", default_value = "")]
    pub s3_prefix: String,
    /// S3: PEM bundle of CAs to trust besides the system's, for an endpoint whose certificate
    /// a private CA signed.
    #[arg(long, env = "WEFT_S3_CA_FILE")]
    pub s3_ca_file: Option<std::path::PathBuf>,
    /// S3: `path` (`endpoint/bucket/key`, what S3-compatible servers expect), `virtual-host`
    /// (`bucket.endpoint/key`, what AWS prefers), or `auto`: path with --s3-endpoint,
    /// virtual-host for AWS.
    #[arg(long, env = "WEFT_S3_ADDRESSING", value_enum, default_value_t = S3Addressing::Auto)]
    pub s3_addressing: S3Addressing,
}

/// How bucket names go into S3 request URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum S3Addressing {
    /// Path style with --s3-endpoint, virtual-host style for AWS.
    Auto,
    /// `https://endpoint/bucket/key`.
    Path,
    /// `https://bucket.endpoint/key`.
    VirtualHost,
}

impl StorageOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if self.storage == StorageKind::S3 {
            self.s3_config().map_err(|e| anyhow::anyhow!("{e}"))?;
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
        .map(|mut c| {
            c.path_style = match self.s3_addressing {
                S3Addressing::Path => true,
                S3Addressing::VirtualHost => false,
                S3Addressing::Auto => self.s3_endpoint.is_some(),
            };
            c.ca_file = self.s3_ca_file.clone();
            c
        })
        .map_err(|e| e.to_string())
    }
}

/// The block storage, counted, and its counters.
pub async fn init(opts: &StorageOptions, data_dir: &Path) -> anyhow::Result<(Arc<dyn Storage>, Arc<StorageMetrics>)> {
    let inner: Arc<dyn Storage> = match opts.storage {
        // Only local blocks live in the data directory (a WAL creates its own folder there).
        StorageKind::Local => {
            std::fs::create_dir_all(data_dir).with_context(|| format!("creating data dir {}", data_dir.display()))?;
            Arc::new(weft_storage::LocalStorage::new(data_dir)?)
        }
        StorageKind::S3 => {
            let s3 = weft_storage::S3Storage::new(opts.s3_config().map_err(anyhow::Error::msg)?)?;
            // Fail at start, not at the first block, on a wrong endpoint, bucket or
            // credentials. The error's text already holds its causes: no chain to repeat.
            s3.list("blocks/").await.map_err(|e| {
                anyhow::anyhow!(
                    "listing bucket {} at {}: {e}",
                    opts.s3_bucket,
                    opts.s3_endpoint.as_deref().unwrap_or("AWS S3")
                )
            })?;
            Arc::new(s3)
        }
    };
    let metrics = Arc::new(StorageMetrics::new());
    let storage = Arc::new(weft_storage::CountingStorage::with_metrics(inner, metrics.clone()));
    Ok((storage, metrics))
}
