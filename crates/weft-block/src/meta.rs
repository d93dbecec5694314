//! `meta.json`: what a block holds. Written last, so its presence marks a complete block.

use serde::{Deserialize, Serialize};

/// The block format version this build writes.
///
/// - 1: the `weft_span_v1` schema.
/// - 2: `weft_span_v1` followed by the block's dedicated attribute columns, listed in
///   [`BlockMeta::dedicated_columns`] (none is the same as version 1).
/// - 3: as 2, with *time-sliced* row groups: each holds the traces that start in one stretch of
///   the block's time, sorted by trace ID, and `index.bin` (version 4) gives each a bloom filter
///   of its trace IDs and its traces' earliest and latest start
///   ([`crate::columns::SpanColumns::time_sliced_order`], [`crate::index`]). A search for the
///   newest matches reads the newest row group first and stops there once it holds `limit`.
pub const FORMAT_VERSION: u32 = 3;

/// Every version this build reads (the `format` module maps each to the encoding that reads it;
/// a test checks they agree).
pub const READABLE_VERSIONS: [u32; 3] = [1, 2, 3];

/// A block's metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BlockMeta {
    /// Block format version; selects the encoding that reads the block (`parquet_spans`, …).
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
    pub wal_end: Option<WalPos>,
    /// For a block built from Kafka (cluster mode), the offsets of each partition whose records
    /// it covers: every record of this tenant in `[start, end)` of the partition is in this
    /// block or an earlier one. A block builder resumes after the highest `end` of a tenant's
    /// blocks, so a crash between writing blocks and committing offsets never duplicates
    /// spans. Compaction keeps, per partition, the lowest start and the highest end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kafka: Vec<KafkaRange>,
    /// The blocks this one replaces (compaction). Once this block's `meta.json` exists they
    /// are obsolete: a reader that still finds one of them ignores it, and startup deletes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compacted_from: Vec<String>,
    /// The attribute keys that have their own typed column in this block (format 2), in
    /// column order after the `weft_span_v1` columns. Chosen when the block is built (see
    /// [`crate::dedicated`]); no configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dedicated_columns: Vec<DedicatedColumn>,
    /// CRC32C checksums of the block's files, recorded when it is written and verified by every
    /// read, so damage is detected instead of served. Absent in blocks written before they were
    /// added (those are read unverified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums: Option<Checksums>,
    /// CRC32C of this `meta.json` itself ([`BlockMeta::self_checksum`]), so a changed value
    /// that still parses (a time range, `wal_end`, an offset) is damage instead of a wrong
    /// answer or a skipped WAL record. Absent in blocks written before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_checksum: Option<u32>,
}

impl BlockMeta {
    /// The checksum [`BlockMeta::meta_checksum`] records: CRC32C of the meta's JSON with
    /// `meta_checksum` left out, written compactly from the parsed value (so it is the same
    /// whatever the file's white space, and covers fields this build does not know).
    pub fn self_checksum(value: &serde_json::Value) -> u32 {
        let mut v = value.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("meta_checksum");
        }
        crc32c::crc32c(&serde_json::to_vec(&v).expect("a JSON value serializes"))
    }

    /// Serializes the meta as `meta.json`, with its own checksum.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut v = serde_json::to_value(BlockMeta {
            meta_checksum: None,
            ..self.clone()
        })?;
        let sum = BlockMeta::self_checksum(&v);
        if let Some(m) = v.as_object_mut() {
            m.insert("meta_checksum".into(), sum.into());
        }
        serde_json::to_vec_pretty(&v)
    }

    /// Parses `meta.json`. `Ok(Err(why))` when it parses but does not match its own checksum.
    pub fn from_json(bytes: &[u8]) -> Result<Result<BlockMeta, String>, serde_json::Error> {
        let v: serde_json::Value = serde_json::from_slice(bytes)?;
        let recorded = v.get("meta_checksum").cloned();
        let meta: BlockMeta = serde_json::from_value(v.clone())?;
        if recorded.is_some() && meta.meta_checksum != Some(BlockMeta::self_checksum(&v)) {
            return Ok(Err(format!(
                "meta.json does not match its own checksum ({:?} recorded)",
                meta.meta_checksum
            )));
        }
        Ok(Ok(meta))
    }
}

/// The records of one Kafka partition a block covers ([`BlockMeta::kafka`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct KafkaRange {
    pub partition: i32,
    /// The first offset covered.
    pub start: i64,
    /// The offset after the last one covered.
    pub end: i64,
}

/// Merges the Kafka ranges of blocks being compacted: per partition, the lowest start and the
/// highest end, sorted by partition.
pub fn merge_kafka_ranges<'a>(ranges: impl IntoIterator<Item = &'a KafkaRange>) -> Vec<KafkaRange> {
    let mut out: Vec<KafkaRange> = Vec::new();
    for r in ranges {
        match out.iter_mut().find(|o| o.partition == r.partition) {
            Some(o) => {
                o.start = o.start.min(r.start);
                o.end = o.end.max(r.end);
            }
            None => out.push(*r),
        }
    }
    out.sort_by_key(|r| r.partition);
    out
}

/// CRC32C (Castagnoli) checksums of a block's files.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Checksums {
    /// Of the whole `index.bin`.
    pub index: u32,
    /// Of the Parquet footer: the file's last `8 + footer length` bytes.
    pub footer: u32,
    /// Per row group, per column (schema order): of the column chunk's bytes.
    pub chunks: Vec<Vec<u32>>,
}

/// An attribute key stored in its own column.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct DedicatedColumn {
    pub scope: DedicatedScope,
    /// The attribute key, e.g. `http.request.method`.
    pub name: String,
    /// The value type the column holds. Values of another type stay in the generic columns.
    #[serde(rename = "type")]
    pub value_type: ValueType,
    /// The Parquet column's name (`span_dedicated_0`, `resource_dedicated_0`, ...).
    pub column: String,
    /// Span scope: every occurrence of the key in the block's span attributes is in this
    /// column (none stayed in the generic blob), so a reader that needs only this key reads
    /// the column alone and takes a null as "absent". Resource columns are copies of the
    /// headers and leave it false. Absent in blocks written before it existed (read as false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub complete: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum DedicatedScope {
    /// Span attributes: the value is moved out of the span's `attributes` blob.
    Span,
    /// Resource attributes: the value is copied (the resource header keeps it; it is stored
    /// once per row group in the header column's dictionary anyway).
    Resource,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    String,
    Int,
    Double,
    Bool,
}

/// A WAL position as `meta.json` records it: `{"segment": n, "offset": n}`.
pub use weft_core::WalPos;
