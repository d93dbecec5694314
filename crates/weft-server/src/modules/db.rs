//! The Db module (the block list and its maintenance primitives) and the BlocklistPoller,
//! which re-reads the block list that other processes sharing the storage write.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weft_db::{Db, DbOptions};
use weft_storage::Storage;

use super::Target;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Block list")]
pub struct PollerOptions {
    /// Seconds between re-reads of the block list, for roles that share a data directory with
    /// other processes (--target querier, ingester, compactor).
    #[arg(long, env = "WEFT_BLOCKLIST_POLL", default_value_t = 5.0)]
    pub blocklist_poll: f64,
}

impl PollerOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.blocklist_poll > 0.0 && self.blocklist_poll.is_finite(),
            "blocklist_poll must be a positive number of seconds"
        );
        Ok(())
    }
}

/// A block folder without `meta.json` younger than this may still be being written by another
/// process sharing the data directory, and is not deleted as a crashed write.
const INCOMPLETE_GRACE: Duration = Duration::from_secs(600);

/// Opens the block list; the target decides whether this process maintains the storage.
pub async fn init(target: Target, storage: Arc<dyn Storage>) -> anyhow::Result<Arc<Db>> {
    let opts = match target {
        // The only process: clean up at once.
        Target::All => DbOptions {
            maintains: true,
            incomplete_grace: Duration::ZERO,
        },
        // Shares the directory with an ingester that may be writing a block.
        Target::Compactor => DbOptions {
            maintains: true,
            incomplete_grace: INCOMPLETE_GRACE,
        },
        _ => DbOptions {
            maintains: false,
            incomplete_grace: INCOMPLETE_GRACE,
        },
    };
    Db::open(storage, opts).await.context("loading blocks")
}

/// Re-reads the block list every `--blocklist-poll` seconds while the Db lives.
pub fn spawn_poller(db: &Arc<Db>, opts: &PollerOptions) {
    let db = Arc::downgrade(db);
    let every = Duration::from_secs_f64(opts.blocklist_poll);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(db) = db.upgrade() else { break };
            if let Err(e) = db.poll().await {
                tracing::warn!(error = %e, "re-reading the block list failed; keeping the last one");
            }
        }
    });
}
