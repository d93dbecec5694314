//! weft's block format.
//!
//! A block is the unit of stored data: one tenant's spans over a span of time, in a folder (or
//! object prefix) `blocks/<tenant>/<block_id>/` holding
//! - `data.parquet`: one row per span, in row groups that are time slices, each sorted by trace
//!   ID (format 3; formats 1 and 2 sort the whole file by trace ID); the schema is the format
//!   version's: see the `parquet_spans` module;
//! - `index.bin`: each row group's trace-ID range, trace bloom and trace start times, plus the
//!   block's bloom filter ([`index`]);
//! - `meta.json`: version, tenant, time range, counts, sizes and checksums (of the data file's
//!   column chunks and footer, of `index.bin`, and of itself) ([`meta`]), written last;
//! - while it is written, the empty marker [`WRITING_MARKER`]; while it is deleted,
//!   [`RETIRED_MARKER`].
//!
//! **Invariant:** a block whose `meta.json` exists is complete. Writers put the write marker,
//! then `data.parquet` and `index.bin`, then `meta.json`, then delete the marker; readers ignore
//! folders without `meta.json`. Block files without `meta.json` and without a marker lost their
//! meta (damage).
//!
//! # Format versions
//!
//! Formats are versioned modules behind one seam, the `format` module: it alone maps
//! `meta.version` to the encoding that reads the block (`format::from_version`, called by
//! [`Block::open`]) and names the encoding this build writes ([`write_block`], [`encode`]).
//! [`Block`] remembers its encoding and [`RowGroupData`] carries it, so every read dispatches
//! there. Callers see only this crate root and format-neutral types ([`WriteOptions`],
//! [`Needs`], [`MetricNeeds`], [`FilterColumns`], [`MetricColumns`], [`GraphColumns`],
//! [`DictColumn`], …), never an encoding module. The `parquet_spans` module reads versions 1
//! to 3.
//!
//! To add a format 3:
//! 1. write it as a new module beside `parquet_spans` (say `v3`), with a type implementing
//!    `format::BlockFormat` on the neutral types;
//! 2. add its variant to `format::Encoding` and its arm to the dispatch in `format` (and map
//!    version 3 to it in `format::from_version`); to write it, point `format::WRITES` at it
//!    and bump [`meta::FORMAT_VERSION`] and [`meta::READABLE_VERSIONS`];
//! 3. keep every older encoding: golden blocks of every old version stay committed under
//!    `testdata/golden/` and are read by the tests forever (see `golden_v1_block_stays_readable`
//!    in the tests; commit a golden block of the new version the same way).

pub mod columns;
pub mod dedicated;
mod format;
pub mod hash;
pub mod index;
pub mod meta;
mod parquet_spans;
mod read;
pub mod row;
pub mod values;
mod write;

pub use read::{DictBuilder, DictColumn, FilterColumns, FilterRow, GraphColumns, MetricColumns, MetricNeeds, Needs};
pub use write::{Encoded, HEAD_CUT_ZSTD_LEVEL, WriteOptions};

use bytes::Bytes;
use columns::SpanColumns;
use format::Encoding;
use index::TraceIndex;
use meta::{BlockMeta, FORMAT_VERSION, WalPos};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use row::SpanRow;
use std::sync::Arc;
use weft_storage::{Storage, StorageError};

#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("index: {0}")]
    Index(#[from] index::IndexError),
    #[error("meta.json: {0}")]
    Meta(#[from] serde_json::Error),
    #[error("block format version {0} is not supported by this build")]
    UnsupportedVersion(u32),
    #[error("corrupt block: {0}")]
    Corrupt(String),
    /// Bytes read do not match the checksum recorded when the block was written.
    #[error("damaged block: {0}")]
    Damaged(String),
    /// The block was not committed: its `meta.json` was due before a deadline that passed
    /// ([`WriteOptions::commit_before`]).
    #[error("block {0} not committed: its deadline passed before meta.json was written")]
    Deadline(String),
}

impl BlockError {
    /// Whether the error says the block itself is damaged, so that no retry can fix it: a
    /// checksum mismatch, a file that is missing, shorter than its meta says or with a footer
    /// that does not parse, or, in a block without checksums, bytes that do not decode. Such a
    /// block should be quarantined. Storage that cannot be reached ([`Self::is_transient`]) is
    /// not damage.
    pub fn is_damage(&self, has_checksums: bool) -> bool {
        match self {
            BlockError::Damaged(_) => true,
            BlockError::Storage(e) => !e.is_transient(),
            BlockError::Parquet(_) | BlockError::Corrupt(_) | BlockError::Index(_) | BlockError::Meta(_) => {
                !has_checksums
            }
            BlockError::UnsupportedVersion(_) | BlockError::Deadline(_) => false,
        }
    }

    /// Whether a later attempt may succeed: storage could not be reached or failed on its side
    /// ([`StorageError::is_transient`]). A query that meets it should say "try again"
    /// (503), never quarantine the block.
    pub fn is_transient(&self) -> bool {
        matches!(self, BlockError::Storage(e) if e.is_transient())
    }
}

/// The checksums of an encoded block: its data file's footer and column chunks, and its index.
fn checksum(data: &Bytes, index: &[u8]) -> Result<meta::Checksums, BlockError> {
    let len = data.len();
    if len < 8 {
        return Err(BlockError::Corrupt(
            "encoded data.parquet is shorter than its footer".into(),
        ));
    }
    let meta_len = u32::from_le_bytes(data[len - 8..len - 4].try_into().expect("4 bytes")) as usize;
    let footer = ParquetMetaDataReader::decode_metadata(&data[len - 8 - meta_len..len - 8])?;
    let chunks = footer
        .row_groups()
        .iter()
        .map(|rg| {
            rg.columns()
                .iter()
                .map(|c| {
                    let (s, l) = c.byte_range();
                    crc32c::crc32c(&data[s as usize..(s + l) as usize])
                })
                .collect()
        })
        .collect();
    Ok(meta::Checksums {
        index: crc32c::crc32c(index),
        footer: crc32c::crc32c(&data[len - 8 - meta_len..]),
        chunks,
    })
}

/// The folder of a block.
pub fn block_prefix(tenant: &str, block_id: &str) -> String {
    format!("blocks/{tenant}/{block_id}")
}

/// Where a new block's spans come from, recorded in its meta.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// See [`BlockMeta::wal_end`].
    pub wal_end: Option<WalPos>,
    /// See [`BlockMeta::compaction_level`].
    pub compaction_level: u32,
    /// See [`BlockMeta::compacted_from`].
    pub compacted_from: Vec<String>,
    /// See [`BlockMeta::kafka`].
    pub kafka: Vec<meta::KafkaRange>,
    /// The block's ID; a new UUIDv7 when `None`. A block builder derives it from what the
    /// block covers, so rebuilding the same records after a crash writes the same folder.
    pub block_id: Option<String>,
}

/// Encodes `cols` in the format this build writes ([`meta::FORMAT_VERSION`]): the data file
/// plus its trace index, without writing anything. [`write_block`] stores the result.
pub fn encode(cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError> {
    format::WRITES.encode(cols, opts)
}

/// Encodes `cols` and writes the block, `meta.json` last, recording `origin` (a head cut
/// passes `Origin { wal_end, ..Default::default() }`; compaction its level and inputs).
/// Returns its meta.
pub async fn write_block(
    storage: &dyn Storage,
    cols: &SpanColumns,
    tenant: &str,
    origin: Origin,
    opts: &WriteOptions,
) -> Result<BlockMeta, BlockError> {
    let enc = encode(cols, opts)?;
    let block_id = origin.block_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let prefix = block_prefix(tenant, &block_id);
    let index = Bytes::from(enc.index.encode());
    let checksums = checksum(&enc.data, &index)?;
    let meta = BlockMeta {
        version: FORMAT_VERSION,
        block_id,
        tenant: tenant.to_string(),
        min_start_unix_nano: if cols.is_empty() { 0 } else { cols.min_start },
        max_end_unix_nano: cols.max_end,
        span_count: enc.rows,
        trace_count: cols.trace_count() as u64,
        row_groups: enc.row_groups,
        size_bytes: enc.data.len() as u64,
        index_bytes: index.len() as u64,
        created_unix: weft_core::now_ns() / 1_000_000_000,
        compaction_level: origin.compaction_level,
        wal_end: origin.wal_end,
        kafka: origin.kafka,
        compacted_from: origin.compacted_from,
        dedicated_columns: enc.dedicated,
        checksums: Some(checksums),
        meta_checksum: None,
    };
    // The marker first: a folder without meta.json but with it is a write cut short, which
    // maintenance deletes; one without either lost its meta.json, which is damage.
    storage.put(&format!("{prefix}/{WRITING_MARKER}"), Bytes::new()).await?;
    storage.put(&format!("{prefix}/data.parquet"), enc.data).await?;
    storage.put(&format!("{prefix}/index.bin"), index).await?;
    if opts.commit_before.is_some_and(|t| std::time::SystemTime::now() >= t) {
        return Err(BlockError::Deadline(prefix));
    }
    storage
        .put(&format!("{prefix}/meta.json"), Bytes::from(meta.to_json()?))
        .await?;
    // A marker left beside meta.json (a crash here) means nothing; maintenance removes it.
    if let Err(e) = storage.delete(&format!("{prefix}/{WRITING_MARKER}")).await {
        tracing::warn!(block = %prefix, error = %e, "removing the block's write marker failed; maintenance removes it");
    }
    Ok(meta)
}

/// An empty object a writer puts in a block folder before any other file and deletes after
/// `meta.json`: a folder that has it and no `meta.json` is a write cut short (a crash), and
/// its files are redundant (the WAL, Kafka or the compaction inputs still hold its spans).
pub const WRITING_MARKER: &str = "writing";

/// An empty object put in a block folder before its `meta.json` is deleted to retire it
/// (compaction, retention): a folder that has it and no `meta.json` is a retired block whose
/// data is still being deleted. A folder with block files but neither marker nor `meta.json`
/// lost its `meta.json` by other means, and is damage.
pub const RETIRED_MARKER: &str = "retired";

/// The time range (Unix nanoseconds: the earliest span start, the latest span end as far as
/// statistics bound it) of the spans in the data file at `data_path` of `len` bytes, from its
/// footer's row-group statistics. For a block whose `meta.json` is lost; `None` when the footer
/// is unreadable or has no statistics.
pub async fn data_time_range(storage: &dyn Storage, data_path: &str, len: u64) -> Option<(u64, u64)> {
    let (_, buf) = fetch_footer(storage, data_path, len).await.ok()?;
    let footer = ParquetMetaDataReader::decode_metadata(&buf).ok()?;
    let version = footer
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == "weft.block.version"))
        .and_then(|k| k.value.as_deref()?.parse().ok())
        .unwrap_or(1);
    let (start, duration) = format::from_version(version).ok()?.stats_columns();
    let mut range: Option<(u64, u64)> = None;
    for rg in 0..footer.num_row_groups() {
        let (lo, hi) = int64_stats(&footer, rg, start)?;
        let (_, longest) = int64_stats(&footer, rg, duration)?;
        let end = (hi as u64).saturating_add(longest.max(0) as u64);
        range = Some(range.map_or((lo as u64, end), |(a, b)| (a.min(lo as u64), b.max(end))));
    }
    range
}

/// Reads the footer of the data file at `path`, `len` bytes long: its last 8 bytes (footer
/// length and magic) and the footer itself. A file too short for them, or whose last 8 bytes
/// do not frame a footer, is damage.
async fn fetch_footer(storage: &dyn Storage, path: &str, len: u64) -> Result<(Bytes, Bytes), BlockError> {
    if len < 8 {
        return Err(BlockError::Damaged(format!(
            "{path}: a size of {len} bytes is shorter than a parquet footer"
        )));
    }
    let tail = storage.get_range(path, len - 8..len).await?;
    let meta_len = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) as u64;
    if &tail[4..] != b"PAR1" || meta_len + 8 > len {
        return Err(BlockError::Damaged(format!(
            "{path}: the parquet footer at the end of its {len} bytes is not intact"
        )));
    }
    let buf = storage.get_range(path, len - 8 - meta_len..len - 8).await?;
    Ok((tail, buf))
}

/// The smallest and largest value of int64 column `c` in row group `rg`, from the footer's
/// statistics.
fn int64_stats(footer: &ParquetMetaData, rg: usize, c: usize) -> Option<(i64, i64)> {
    match footer.row_group(rg).column(c).statistics() {
        Some(parquet::file::statistics::Statistics::Int64(s)) => s.min_opt().copied().zip(s.max_opt().copied()),
        _ => None,
    }
}

/// Row-group statistics used to skip row groups that cannot match a query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowGroupStats {
    /// Smallest and largest span start time, Unix nanoseconds.
    pub start: Option<(u64, u64)>,
    /// Smallest and largest span duration, nanoseconds.
    pub duration: Option<(i64, i64)>,
}

/// The fetched bytes of one row group. Decoding is CPU work: call it off the async runtime
/// (`spawn_blocking`) for large row groups.
#[derive(Clone)]
pub struct RowGroupData {
    /// The block's encoding, which decodes the bytes (it reads the fields below).
    encoding: Encoding,
    footer: Arc<ParquetMetaData>,
    dedicated: Arc<[meta::DedicatedColumn]>,
    rg: usize,
    /// The fetched byte ranges of the data file: (file offset, bytes), ascending.
    pieces: Arc<[(u64, Bytes)]>,
    file_len: u64,
}

impl RowGroupData {
    /// Bytes fetched from storage.
    pub fn bytes(&self) -> u64 {
        self.pieces.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// Every span, in block order.
    pub fn rows(&self) -> Result<Vec<SpanRow>, BlockError> {
        self.encoding.read_rows(self, None)
    }

    /// The spans of the rows in `ranges` (ascending, disjoint row indexes of the row group),
    /// in order: what [`Self::rows`] gives for those rows, without assembling the others.
    pub fn rows_in(&self, ranges: &[std::ops::Range<usize>]) -> Result<Vec<SpanRow>, BlockError> {
        self.encoding.read_rows(self, Some(ranges))
    }

    /// Appends every span to `cols`, in block order: what pushing each of [`Self::rows`] does
    /// ([`SpanColumns::push_row`]), without copying each span out first. Call
    /// [`SpanColumns::end_run`] before reading the trace index. On an error `cols` may hold
    /// part of the row group and should be discarded.
    pub fn append_to(&self, cols: &mut SpanColumns) -> Result<(), BlockError> {
        self.encoding.append_rows(self, cols)
    }

    /// The spans of one trace.
    pub fn trace(&self, trace_id: &[u8; 16]) -> Result<Vec<SpanRow>, BlockError> {
        self.encoding.read_trace(self, trace_id)
    }

    /// The columns span-at-a-time metrics need, with dictionary ids. The data must have been
    /// fetched with [`Block::fetch_metric_columns`] with the same `needs`, or whole.
    pub fn metric_columns(&self, needs: &MetricNeeds) -> Result<MetricColumns, BlockError> {
        self.encoding.read_metric_columns(self, needs)
    }

    /// The columns the service graph needs, with dictionary ids. The data must have been
    /// fetched with [`Block::fetch_graph_columns`], or whole.
    pub fn graph_columns(&self) -> Result<GraphColumns, BlockError> {
        self.encoding.read_graph_columns(self)
    }

    /// The columns a prefilter needs, for every row.
    pub fn filter_columns(&self, needs: Needs) -> Result<FilterColumns, BlockError> {
        self.encoding.read_filter_columns(self, needs)
    }
}

/// An open block: its meta and index in memory, the Parquet footer loaded on first use.
#[derive(Debug)]
pub struct Block {
    pub meta: BlockMeta,
    pub index: TraceIndex,
    /// The encoding of `meta.version`.
    encoding: Encoding,
    prefix: String,
    footer: tokio::sync::OnceCell<Arc<ParquetMetaData>>,
    /// `meta.dedicated_columns`, shared with the row groups read.
    dedicated: Arc<[meta::DedicatedColumn]>,
}

impl Block {
    /// Opens the block at `prefix` (reads `meta.json` and `index.bin`).
    pub async fn open(storage: &dyn Storage, prefix: &str) -> Result<Block, BlockError> {
        let meta = BlockMeta::from_json(&storage.get(&format!("{prefix}/meta.json")).await?)?
            .map_err(|why| BlockError::Damaged(format!("{prefix}/{why}")))?;
        // The folder names the block: a meta that names another tenant or block is damage
        // (and must never serve spans to that other tenant).
        if !prefix.ends_with(&format!("/{}/{}", meta.tenant, meta.block_id)) {
            return Err(BlockError::Damaged(format!(
                "{prefix}/meta.json names block {}/{}",
                meta.tenant, meta.block_id
            )));
        }
        let encoding = format::from_version(meta.version)?;
        if meta.version == 1 && !meta.dedicated_columns.is_empty() {
            return Err(BlockError::Corrupt("a version 1 block lists dedicated columns".into()));
        }
        let index_bytes = storage.get(&format!("{prefix}/index.bin")).await?;
        if meta.index_bytes != 0 && index_bytes.len() as u64 != meta.index_bytes {
            return Err(BlockError::Damaged(format!(
                "{prefix}/index.bin is {} bytes; meta.json says {}",
                index_bytes.len(),
                meta.index_bytes
            )));
        }
        if let Some(c) = &meta.checksums {
            if crc32c::crc32c(&index_bytes) != c.index {
                return Err(BlockError::Damaged(format!(
                    "{prefix}/index.bin does not match its checksum"
                )));
            }
            if c.chunks.len() != meta.row_groups as usize {
                return Err(BlockError::Damaged(format!(
                    "{prefix}/meta.json lists checksums of {} row groups for {}",
                    c.chunks.len(),
                    meta.row_groups
                )));
            }
        }
        let index = TraceIndex::decode(&index_bytes)?;
        Ok(Block {
            dedicated: meta.dedicated_columns.clone().into(),
            meta,
            index,
            encoding,
            prefix: prefix.to_string(),
            footer: tokio::sync::OnceCell::new(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The cheap check of a block's files at open: `data.parquet` is listed (`listed_size`,
    /// from a listing of the folder; `None`: not listed) at the length `meta.json` says, and
    /// its footer is intact (read and, with checksums, verified; it stays loaded for the first
    /// query). A failure is damage ([`BlockError::is_damage`]) or, if storage could not be
    /// reached, transient.
    pub async fn check(&self, storage: &dyn Storage, listed_size: Option<u64>) -> Result<(), BlockError> {
        match listed_size {
            None => return Err(BlockError::Damaged(format!("{} is missing", self.data_path()))),
            Some(n) if n != self.meta.size_bytes => {
                return Err(BlockError::Damaged(format!(
                    "{} is {n} bytes; meta.json says {}",
                    self.data_path(),
                    self.meta.size_bytes
                )));
            }
            Some(_) => {}
        }
        self.footer(storage).await.map(|_| ())
    }

    /// Verifies every column chunk of row group `rg` against its checksum (a block without
    /// checksums: that the row group's bytes decode). For the background scrubber. Returns
    /// the bytes read.
    pub async fn verify_row_group(&self, storage: &dyn Storage, rg: usize) -> Result<u64, BlockError> {
        if rg == 0 {
            // The leading magic: the one part of the file no checksum covers.
            let magic = storage.get_range(&self.data_path(), 0..4).await?;
            if &magic[..] != b"PAR1" {
                return Err(BlockError::Damaged(format!(
                    "{}: the leading parquet magic is not intact",
                    self.data_path()
                )));
            }
        }
        let data = self.fetch_row_group(storage, rg).await?;
        let bytes = data.bytes();
        if self.meta.checksums.is_none() {
            tokio::task::spawn_blocking(move || data.rows().map(drop))
                .await
                .map_err(|e| BlockError::Corrupt(format!("reader task failed: {e}")))??;
        }
        Ok(bytes)
    }

    pub fn data_path(&self) -> String {
        format!("{}/data.parquet", self.prefix)
    }

    async fn footer(&self, storage: &dyn Storage) -> Result<Arc<ParquetMetaData>, BlockError> {
        self.footer
            .get_or_try_init(|| async {
                // At the length meta.json gives: a shorter file fails the range read as
                // damage, and so does a footer that does not frame (the writer wrote one).
                let (tail, buf) = fetch_footer(storage, &self.data_path(), self.meta.size_bytes).await?;
                if let Some(c) = &self.meta.checksums
                    && crc32c::crc32c_append(crc32c::crc32c(&buf), &tail) != c.footer
                {
                    return Err(BlockError::Damaged(format!(
                        "{}: the parquet footer does not match its checksum",
                        self.data_path()
                    )));
                }
                let footer = ParquetMetaDataReader::decode_metadata(&buf)?;
                let want = self.encoding.column_count(self.dedicated.len());
                if footer.file_metadata().schema_descr().num_columns() != want {
                    return Err(BlockError::Corrupt(format!(
                        "data.parquet has {} columns; meta.json implies {want}",
                        footer.file_metadata().schema_descr().num_columns()
                    )));
                }
                Ok(Arc::new(footer))
            })
            .await
            .cloned()
    }

    /// The number of row groups (from the index, so no read is needed).
    pub fn row_group_count(&self) -> usize {
        self.index.row_groups.len()
    }

    /// What the footer's statistics say about row group `rg`, for pruning: its start times and
    /// durations. `None` fields mean the statistics are absent, so nothing can be pruned.
    pub async fn row_group_stats(&self, storage: &dyn Storage, rg: usize) -> Result<RowGroupStats, BlockError> {
        let footer = self.footer(storage).await?;
        if rg >= footer.num_row_groups() {
            return Err(BlockError::Corrupt(format!("no row group {rg}")));
        }
        let int64 = |c: usize| int64_stats(&footer, rg, c);
        let (start, duration) = self.encoding.stats_columns();
        Ok(RowGroupStats {
            start: int64(start).map(|(a, b)| (a as u64, b as u64)),
            duration: int64(duration),
        })
    }

    /// Fetches the bytes of row group `rg`, to decode with [`RowGroupData`].
    pub async fn fetch_row_group(&self, storage: &dyn Storage, rg: usize) -> Result<RowGroupData, BlockError> {
        let footer = self.footer(storage).await?;
        if rg >= footer.num_row_groups() {
            return Err(BlockError::Corrupt(format!(
                "row group {rg} of {}",
                footer.num_row_groups()
            )));
        }
        let range = self.encoding.row_group_range(&footer, rg);
        let data = storage.get_range(&self.data_path(), range.clone()).await?;
        self.verify(&footer, rg, range.start, &data)?;
        Ok(RowGroupData {
            encoding: self.encoding,
            footer,
            dedicated: self.dedicated.clone(),
            rg,
            pieces: vec![(range.start, data)].into(),
            file_len: self.meta.size_bytes,
        })
    }

    /// Fetches only the column chunks of row group `rg` that `needs` names, for
    /// [`RowGroupData::metric_columns`].
    pub async fn fetch_metric_columns(
        &self,
        storage: &dyn Storage,
        rg: usize,
        needs: &MetricNeeds,
    ) -> Result<RowGroupData, BlockError> {
        self.fetch_columns(storage, rg, &self.encoding.metric_columns(needs, &self.dedicated))
            .await
    }

    /// Fetches the column chunks of row group `rg` that [`RowGroupData::graph_columns`] reads.
    pub async fn fetch_graph_columns(&self, storage: &dyn Storage, rg: usize) -> Result<RowGroupData, BlockError> {
        self.fetch_columns(storage, rg, self.encoding.graph_columns()).await
    }

    async fn fetch_columns(
        &self,
        storage: &dyn Storage,
        rg: usize,
        columns: &[usize],
    ) -> Result<RowGroupData, BlockError> {
        let footer = self.footer(storage).await?;
        if rg >= footer.num_row_groups() {
            return Err(BlockError::Corrupt(format!(
                "row group {rg} of {}",
                footer.num_row_groups()
            )));
        }
        // One read per run of chunks, joining runs whose gap is small: a gap costs less than
        // another request to object storage.
        const JOIN_GAP: u64 = 256 << 10;
        let mut spans: Vec<(u64, u64)> = columns
            .iter()
            .map(|&c| {
                let (s, l) = footer.row_group(rg).column(c).byte_range();
                (s, s + l)
            })
            .collect();
        spans.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (s, e) in spans {
            match runs.last_mut() {
                Some(last) if s <= last.1 + JOIN_GAP => last.1 = last.1.max(e),
                _ => runs.push((s, e)),
            }
        }
        let mut pieces = Vec::with_capacity(runs.len());
        for (lo, hi) in runs {
            let data = storage.get_range(&self.data_path(), lo..hi).await?;
            self.verify(&footer, rg, lo, &data)?;
            pieces.push((lo, data));
        }
        Ok(RowGroupData {
            encoding: self.encoding,
            footer,
            dedicated: self.dedicated.clone(),
            rg,
            pieces: pieces.into(),
            file_len: self.meta.size_bytes,
        })
    }

    /// Checks every column chunk of row group `rg` that lies within `data` (fetched from file
    /// offset `base`) against the checksums in the meta, if it has them.
    fn verify(&self, footer: &ParquetMetaData, rg: usize, base: u64, data: &Bytes) -> Result<(), BlockError> {
        let Some(sums) = self.meta.checksums.as_ref().and_then(|c| c.chunks.get(rg)) else {
            return Ok(());
        };
        let end = base + data.len() as u64;
        for (c, col) in footer.row_group(rg).columns().iter().enumerate() {
            let (s, l) = col.byte_range();
            if s < base || s + l > end {
                continue;
            }
            let got = crc32c::crc32c(&data[(s - base) as usize..(s - base + l) as usize]);
            if sums.get(c) != Some(&got) {
                return Err(BlockError::Damaged(format!(
                    "{}: row group {rg} column {} does not match its checksum",
                    self.data_path(),
                    col.column_descr().name()
                )));
            }
        }
        Ok(())
    }

    /// Reads every span of row group `rg`, in block order. Returns them with the number of
    /// bytes read from storage.
    pub async fn read_row_group(&self, storage: &dyn Storage, rg: usize) -> Result<(Vec<SpanRow>, u64), BlockError> {
        let data = self.fetch_row_group(storage, rg).await?;
        let bytes = data.bytes();
        let rows = tokio::task::spawn_blocking(move || data.rows())
            .await
            .map_err(|e| BlockError::Corrupt(format!("reader task failed: {e}")))??;
        Ok((rows, bytes))
    }

    /// Returns the spans of `trace_id` in this block (possibly none). Reads only the row groups
    /// the index names.
    pub async fn find_trace(&self, storage: &dyn Storage, trace_id: &[u8; 16]) -> Result<Vec<SpanRow>, BlockError> {
        let mut out = Vec::new();
        for rg in self.index.candidates(trace_id) {
            out.extend(self.find_trace_in(storage, trace_id, rg).await?);
        }
        Ok(out)
    }

    /// Returns the spans of `trace_id` in row group `rg` (one of `index.candidates`).
    pub async fn find_trace_in(
        &self,
        storage: &dyn Storage,
        trace_id: &[u8; 16],
        rg: usize,
    ) -> Result<Vec<SpanRow>, BlockError> {
        let data = self.fetch_row_group(storage, rg).await?;
        let id = *trace_id;
        tokio::task::spawn_blocking(move || data.trace(&id))
            .await
            .map_err(|e| BlockError::Corrupt(format!("reader task failed: {e}")))?
    }
}

#[cfg(test)]
mod tests;
