//! The format-neutral inputs and outputs of encoding a block (see [`crate::encode`] and
//! [`crate::write_block`]), whatever format version this build writes.

use crate::index::TraceIndex;
use crate::meta::DedicatedColumn;
use bytes::Bytes;

/// Tuning for [`encode`](crate::encode).
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Rows per row group. Smaller groups make trace-by-ID reads cheaper; larger ones compress
    /// better and cost less per row to write (one compressor and dictionary per column chunk).
    /// 8192 keeps a trace lookup to one read of about 150 KB (see BENCHMARKS.md).
    pub row_group_rows: usize,
    pub zstd_level: i32,
    /// Write a bloom filter of each row group's string attribute values into the index
    /// (compaction does; head cuts skip it to keep ingest cheap).
    pub value_blooms: bool,
    /// Choose and write dedicated attribute columns ([`crate::dedicated`]); compaction does,
    /// head cuts skip the extra pass over every attribute to keep ingest cheap.
    pub dedicated_columns: bool,
    /// If set, `meta.json` (the commit point) is written only before this time; later, the
    /// write fails with [`crate::BlockError::Deadline`] and leaves an incomplete folder. A
    /// compactor's lease ends then (weft-db's `lease` module).
    pub commit_before: Option<std::time::SystemTime>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            row_group_rows: 8192,
            zstd_level: 3,
            value_blooms: false,
            dedicated_columns: false,
            commit_before: None,
        }
    }
}

/// The encoded files of a block.
pub struct Encoded {
    pub data: Bytes,
    /// Rows written: the spans of the columns less client-retry duplicates.
    pub rows: u64,
    pub index: TraceIndex,
    pub row_groups: u32,
    /// The dedicated columns written after the `weft_span_v1` ones.
    pub dedicated: Vec<DedicatedColumn>,
}
