//! `meta.json`: what a block holds. Written last, so its presence marks a complete block.

use serde::{Deserialize, Serialize};

/// The block format version this build writes.
pub const FORMAT_VERSION: u32 = 1;

/// A block's metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BlockMeta {
    /// Block format version; selects the reader module (`v1`, …).
    pub version: u32,
    pub block_id: String,
    pub tenant: String,
    pub min_start_unix_nano: u64,
    pub max_end_unix_nano: u64,
    pub span_count: u64,
    pub trace_count: u64,
    pub row_groups: u32,
    /// Size of `data.parquet`.
    pub size_bytes: u64,
    pub index_bytes: u64,
    /// Seconds since the Unix epoch when the block was written.
    pub created_unix: u64,
    /// 0 for a block cut from the WAL; higher after compaction.
    pub compaction_level: u32,
    /// Every WAL record of this tenant before this position is in this block or an earlier
    /// one. Replay skips those records, so a crash between writing a block and deleting WAL
    /// segments never duplicates spans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_end: Option<WalPosition>,
    /// The blocks this one replaces (compaction). Once this block's `meta.json` exists they
    /// are obsolete: a reader that still finds one of them ignores it, and startup deletes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compacted_from: Vec<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalPosition {
    pub segment: u64,
    pub offset: u64,
}
