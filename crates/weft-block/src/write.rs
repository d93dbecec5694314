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
    /// 8192 keeps a trace lookup to one read of about 150 KB; 16,384 measured no faster at
    /// ingest (docs/benchmarks/ingest.md, "Experiments that did not help (kept out)").
    pub row_group_rows: usize,
    pub zstd_level: i32,
    /// Write a bloom filter of each row group's string attribute values, and the key lists of
    /// its attribute keys, into the index (compaction does; head cuts skip both to keep ingest
    /// cheap).
    pub value_blooms: bool,
    /// Choose and write dedicated attribute columns ([`crate::dedicated`]); compaction does,
    /// head cuts skip the extra pass over every attribute to keep ingest cheap.
    pub dedicated_columns: bool,
    /// If set, `meta.json` (the commit point) is written only before this time; later, the
    /// write fails with [`crate::BlockError::Deadline`] and leaves an incomplete folder. A
    /// compactor's lease ends then (weft-db's `lease` module).
    pub commit_before: Option<std::time::SystemTime>,
}

/// zstd level of head cuts ([`WriteOptions::head_cut`]).
///
/// A head block smaller than compaction's final tier is transient: compaction rewrites it at
/// [`WriteOptions::default`]'s level 3 into a larger block (ADR 7), and that block is what a
/// query reads for the rest of its retention (a cut of final size is written with
/// [`WriteOptions::lasting`] instead). Level 1 encodes spans with realistic, high-cardinality
/// attributes about a fifth faster than level 3 (951–1,030 ns against 1,224–1,231 ns per span
/// for the encode alone, `weft loadgen --stages --realistic`) for about 4 % more bytes (92.9
/// against 89.7 per span); on repetitive spans the two are equal
/// (docs/benchmarks/all-in-cost-and-compaction.md, "zstd level 1 for head cuts").
pub const HEAD_CUT_ZSTD_LEVEL: i32 = 1;

impl WriteOptions {
    /// The options of a head cut: row groups of `row_group_rows`, zstd at
    /// [`HEAD_CUT_ZSTD_LEVEL`], no value blooms and no dedicated columns (compaction writes
    /// those).
    pub fn head_cut(row_group_rows: usize) -> Self {
        WriteOptions {
            row_group_rows,
            zstd_level: HEAD_CUT_ZSTD_LEVEL,
            ..Default::default()
        }
    }

    /// The options of a block that stays as written for the rest of its retention: a
    /// compaction's output, or a head cut already as large as compaction's final blocks.
    /// Value blooms, dedicated columns and [`WriteOptions::default`]'s zstd level.
    pub fn lasting(row_group_rows: usize) -> Self {
        WriteOptions {
            row_group_rows,
            value_blooms: true,
            dedicated_columns: true,
            ..Default::default()
        }
    }
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
