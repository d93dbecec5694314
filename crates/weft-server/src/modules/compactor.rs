//! The Compactor module: compaction, retention, clean-up of crashed writes, and the block
//! scrubber, each on a thread of its own at the background priority.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weft_db::Db;
use weft_db::compact::Compactor;

use super::Target;
use crate::config::{Config, parse_duration};

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Compaction and retention")]
pub struct CompactorOptions {
    /// Seconds between compaction and retention rounds; 0 disables both.
    #[arg(long, env = "WEFT_COMPACTION_INTERVAL", default_value_t = 30.0)]
    pub compaction_interval: f64,
    /// Largest block compaction writes, in spans.
    #[arg(long, env = "WEFT_COMPACTION_MAX_BLOCK_SPANS", default_value_t = 1_000_000)]
    pub compaction_max_block_spans: u64,
    /// Blocks of one size tier merged at once, and the size ratio between tiers
    /// (docs/adr/0007-size-tiered-compaction.md).
    #[arg(long, env = "WEFT_COMPACTION_FANOUT", default_value_t = 4)]
    pub compaction_fanout: u64,
    /// Seconds a compactor process holds a tenant's compaction lease; another compactor on the
    /// same storage leaves the tenant alone meanwhile (docs/adr/0008-kafka-write-path.md).
    #[arg(long, env = "WEFT_COMPACTION_LEASE", default_value_t = 300.0)]
    pub compaction_lease: f64,
    /// Most small blocks merged at once; this many small blocks of one level merge even when
    /// they hold few spans.
    #[arg(long, env = "WEFT_COMPACTION_MAX_INPUTS", default_value_t = 64)]
    pub compaction_max_inputs: usize,
    /// Delete blocks whose newest span is older than this, e.g. 336h or 7d; 0 keeps blocks
    /// forever. `tenant_retention` in the config file overrides it per tenant.
    #[arg(long, env = "WEFT_RETENTION", default_value = "336h")]
    pub retention: String,
    /// Tenant → retention, overriding `retention` (the config file's `tenant_retention`).
    #[arg(skip)]
    pub tenant_retention: BTreeMap<String, String>,
    /// Bytes per second the block scrubber reads to verify every block's checksums in the
    /// background (the process that maintains the storage runs it); 0 turns verification off,
    /// leaving the sweep for missing files.
    #[arg(long, env = "WEFT_SCRUB_RATE", default_value_t = 8 << 20)]
    pub scrub_rate: u64,
    /// Seconds between scrubber rounds (each sweeps the block folders, then verifies the
    /// blocks that are due); 0 disables the scrubber.
    #[arg(long, env = "WEFT_SCRUB_INTERVAL", default_value_t = 60.0)]
    pub scrub_interval: f64,
    /// How long after its last verification a block is verified again.
    #[arg(long, env = "WEFT_SCRUB_PERIOD", default_value = "24h")]
    pub scrub_period: String,
}

impl CompactorOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
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
        parse_duration(&self.retention).map_err(|e| anyhow::anyhow!("retention: {e}"))?;
        for (t, d) in &self.tenant_retention {
            parse_duration(d).map_err(|e| anyhow::anyhow!("tenant_retention of {t}: {e}"))?;
        }
        Ok(())
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

    /// Compaction and retention settings. A compactor process (`--target compactor`) may have
    /// peers on the same storage and takes leases, named by `owner`.
    pub fn compaction(&self, target: Target, http_port: u16) -> weft_db::compact::CompactionConfig {
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
            // The all-in-one binary is the only compactor of its storage.
            leases: (target == Target::Compactor).then(|| {
                // Host and HTTP port name the compactor, not the process: a compactor that
                // restarts takes its own leases back at once instead of waiting them out.
                weft_db::lease::Leases::new(
                    super::instance_name(http_port),
                    Duration::from_secs_f64(self.compaction_lease),
                )
            }),
            ..Default::default()
        }
    }
}

/// Starts the compactor's and the scrubber's threads.
pub fn init(cfg: &Config, db: Arc<Db>, lower: fn()) -> anyhow::Result<Arc<Compactor>> {
    let opts = &cfg.compactor;
    let c = Compactor::new(db.clone(), opts.compaction(cfg.server.target, cfg.server.http_port));
    if let Some(every) = c.config().interval {
        c.spawn(every, Some(lower)).context("starting the compactor thread")?;
    }
    if let Some(scrub) = opts.scrub() {
        weft_db::scrub::Scrubber::new(db, scrub)
            .spawn(Some(lower))
            .context("starting the scrubber thread")?;
    }
    Ok(c)
}
