//! weft's block format.
//!
//! A block is the unit of stored data: one tenant's spans over a span of time, in a folder (or
//! object prefix) `blocks/<tenant>/<block_id>/` holding
//! - `data.parquet`: one row per span, sorted by trace ID (see [`v1`] for the schema);
//! - `index.bin`: each row group's trace-ID range plus a bloom filter ([`index`]);
//! - `meta.json`: version, tenant, time range, counts and sizes ([`meta`]), written last.
//!
//! **Invariant:** a block whose `meta.json` exists is complete. Writers put `data.parquet` and
//! `index.bin` first; readers ignore folders without `meta.json`.
//!
//! Formats are versioned modules: `meta.version` selects the reader. Blocks written by older
//! versions are committed under `testdata/` and read by the tests forever.

pub mod columns;
pub mod dedicated;
pub mod hash;
pub mod index;
pub mod meta;
pub mod row;
pub mod v1;
pub mod values;

use bytes::Bytes;
use columns::SpanColumns;
use index::TraceIndex;
use meta::{BlockMeta, FORMAT_VERSION, WalPosition};
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
}

impl BlockError {
    /// Whether the error says the block's bytes are damaged (a checksum mismatch, or, in a
    /// block without checksums, bytes that do not decode), as opposed to storage being
    /// unreachable. Such a block should be quarantined rather than retried.
    pub fn is_damage(&self, has_checksums: bool) -> bool {
        match self {
            BlockError::Damaged(_) => true,
            BlockError::Parquet(_) | BlockError::Corrupt(_) | BlockError::Index(_) | BlockError::Meta(_) => {
                !has_checksums
            }
            BlockError::Storage(_) | BlockError::UnsupportedVersion(_) => false,
        }
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

/// Encodes `cols` and writes the block, `meta.json` last. Returns its meta.
pub async fn write_block(
    storage: &dyn Storage,
    cols: &SpanColumns,
    tenant: &str,
    wal_end: Option<WalPosition>,
    opts: &v1::writer::WriteOptions,
) -> Result<BlockMeta, BlockError> {
    let origin = Origin {
        wal_end,
        ..Origin::default()
    };
    write_block_from(storage, cols, tenant, origin, opts).await
}

/// Where a new block's spans come from, recorded in its meta.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// See [`BlockMeta::wal_end`].
    pub wal_end: Option<WalPosition>,
    /// See [`BlockMeta::compaction_level`].
    pub compaction_level: u32,
    /// See [`BlockMeta::compacted_from`].
    pub compacted_from: Vec<String>,
}

/// [`write_block`] with the block's origin spelled out (compaction).
pub async fn write_block_from(
    storage: &dyn Storage,
    cols: &SpanColumns,
    tenant: &str,
    origin: Origin,
    opts: &v1::writer::WriteOptions,
) -> Result<BlockMeta, BlockError> {
    let enc = v1::writer::encode(cols, opts)?;
    let block_id = uuid::Uuid::now_v7().to_string();
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
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        compaction_level: origin.compaction_level,
        wal_end: origin.wal_end,
        compacted_from: origin.compacted_from,
        dedicated_columns: enc.dedicated,
        checksums: Some(checksums),
    };
    storage.put(&format!("{prefix}/data.parquet"), enc.data).await?;
    storage.put(&format!("{prefix}/index.bin"), index).await?;
    storage
        .put(
            &format!("{prefix}/meta.json"),
            Bytes::from(serde_json::to_vec_pretty(&meta)?),
        )
        .await?;
    Ok(meta)
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
    footer: Arc<ParquetMetaData>,
    dedicated: Arc<[meta::DedicatedColumn]>,
    rg: usize,
    base: u64,
    data: Bytes,
    file_len: u64,
}

impl RowGroupData {
    /// Bytes fetched from storage.
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64
    }

    fn chunk(&self) -> v1::reader::RangeChunk {
        v1::reader::RangeChunk {
            base: self.base,
            data: self.data.clone(),
            file_len: self.file_len,
        }
    }

    /// Every span, in block order.
    pub fn rows(&self) -> Result<Vec<SpanRow>, BlockError> {
        v1::reader::read_row_group(&self.footer, self.rg, self.chunk(), &self.dedicated, None)
    }

    /// The spans of the rows in `ranges` (ascending, disjoint row indexes of the row group),
    /// in order: what [`Self::rows`] gives for those rows, without assembling the others.
    pub fn rows_in(&self, ranges: &[std::ops::Range<usize>]) -> Result<Vec<SpanRow>, BlockError> {
        v1::reader::read_row_group(&self.footer, self.rg, self.chunk(), &self.dedicated, Some(ranges))
    }

    /// The spans of one trace.
    pub fn trace(&self, trace_id: &[u8; 16]) -> Result<Vec<SpanRow>, BlockError> {
        v1::reader::read_trace(&self.footer, self.rg, self.chunk(), &self.dedicated, trace_id)
    }

    /// The columns span-at-a-time metrics need, with dictionary ids. The data must have been
    /// fetched with [`Block::fetch_metric_columns`] with the same `needs`, or whole.
    pub fn metric_columns(&self, needs: v1::reader::MetricNeeds) -> Result<v1::reader::MetricColumns, BlockError> {
        v1::reader::read_metric_columns(&self.footer, self.rg, self.chunk(), needs)
    }

    /// The columns the service graph needs, with dictionary ids. The data must have been
    /// fetched with [`Block::fetch_graph_columns`], or whole.
    pub fn graph_columns(&self) -> Result<v1::reader::GraphColumns, BlockError> {
        v1::reader::read_graph_columns(&self.footer, self.rg, self.chunk())
    }

    /// The columns a prefilter needs, for every row.
    pub fn filter_columns(&self, needs: v1::reader::Needs) -> Result<v1::reader::FilterColumns, BlockError> {
        v1::reader::read_filter_columns(&self.footer, self.rg, self.chunk(), &self.dedicated, needs)
    }
}

/// An open block: its meta and index in memory, the Parquet footer loaded on first use.
#[derive(Debug)]
pub struct Block {
    pub meta: BlockMeta,
    pub index: TraceIndex,
    prefix: String,
    footer: tokio::sync::OnceCell<Arc<ParquetMetaData>>,
    /// `meta.dedicated_columns`, shared with the row groups read.
    dedicated: Arc<[meta::DedicatedColumn]>,
}

impl Block {
    /// Opens the block at `prefix` (reads `meta.json` and `index.bin`).
    pub async fn open(storage: &dyn Storage, prefix: &str) -> Result<Block, BlockError> {
        let meta: BlockMeta = serde_json::from_slice(&storage.get(&format!("{prefix}/meta.json")).await?)?;
        if !meta::READABLE_VERSIONS.contains(&meta.version) {
            return Err(BlockError::UnsupportedVersion(meta.version));
        }
        if meta.version == 1 && !meta.dedicated_columns.is_empty() {
            return Err(BlockError::Corrupt("a version 1 block lists dedicated columns".into()));
        }
        let index_bytes = storage.get(&format!("{prefix}/index.bin")).await?;
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
            prefix: prefix.to_string(),
            footer: tokio::sync::OnceCell::new(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn data_path(&self) -> String {
        format!("{}/data.parquet", self.prefix)
    }

    async fn footer(&self, storage: &dyn Storage) -> Result<Arc<ParquetMetaData>, BlockError> {
        self.footer
            .get_or_try_init(|| async {
                let len = self.meta.size_bytes;
                if len < 8 {
                    return Err(BlockError::Corrupt("data.parquet shorter than its footer".into()));
                }
                let tail = storage.get_range(&self.data_path(), len - 8..len).await?;
                let meta_len = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) as u64;
                if &tail[4..] != b"PAR1" || meta_len + 8 > len {
                    return Err(BlockError::Corrupt("data.parquet has a bad footer".into()));
                }
                let buf = storage
                    .get_range(&self.data_path(), len - 8 - meta_len..len - 8)
                    .await?;
                if let Some(c) = &self.meta.checksums
                    && crc32c::crc32c_append(crc32c::crc32c(&buf), &tail) != c.footer
                {
                    return Err(BlockError::Damaged(format!(
                        "{}: the parquet footer does not match its checksum",
                        self.data_path()
                    )));
                }
                let footer = ParquetMetaDataReader::decode_metadata(&buf)?;
                let want = v1::col::EXTRA + 1 + self.dedicated.len();
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
        use parquet::file::statistics::Statistics;
        let footer = self.footer(storage).await?;
        if rg >= footer.num_row_groups() {
            return Err(BlockError::Corrupt(format!("no row group {rg}")));
        }
        let int64 = |c: usize| match footer.row_group(rg).column(c).statistics() {
            Some(Statistics::Int64(s)) => s.min_opt().copied().zip(s.max_opt().copied()),
            _ => None,
        };
        Ok(RowGroupStats {
            start: int64(v1::col::START).map(|(a, b)| (a as u64, b as u64)),
            duration: int64(v1::col::DURATION),
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
        let range = v1::reader::row_group_range(&footer, rg);
        let data = storage.get_range(&self.data_path(), range.clone()).await?;
        self.verify(&footer, rg, range.start, &data)?;
        Ok(RowGroupData {
            footer,
            dedicated: self.dedicated.clone(),
            rg,
            base: range.start,
            data,
            file_len: self.meta.size_bytes,
        })
    }

    /// Fetches only the column chunks of row group `rg` that `needs` names (one contiguous
    /// read spanning them), for [`RowGroupData::metric_columns`].
    pub async fn fetch_metric_columns(
        &self,
        storage: &dyn Storage,
        rg: usize,
        needs: v1::reader::MetricNeeds,
    ) -> Result<RowGroupData, BlockError> {
        self.fetch_columns(storage, rg, &needs.columns()).await
    }

    /// Fetches the column chunks of row group `rg` that [`RowGroupData::graph_columns`] reads
    /// (one contiguous read spanning them).
    pub async fn fetch_graph_columns(&self, storage: &dyn Storage, rg: usize) -> Result<RowGroupData, BlockError> {
        self.fetch_columns(storage, rg, &v1::reader::GRAPH_COLUMNS).await
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
        let (mut lo, mut hi) = (u64::MAX, 0);
        for &c in columns {
            let (s, l) = footer.row_group(rg).column(c).byte_range();
            lo = lo.min(s);
            hi = hi.max(s + l);
        }
        let data = storage.get_range(&self.data_path(), lo..hi).await?;
        self.verify(&footer, rg, lo, &data)?;
        Ok(RowGroupData {
            footer,
            dedicated: self.dedicated.clone(),
            rg,
            base: lo,
            data,
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
