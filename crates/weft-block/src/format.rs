//! The seam between blocks and their formats: the one place that maps a block's format version
//! (`meta.version`) to the encoding that reads it ([`from_version`]) and names the encoding this
//! build writes ([`WRITES`]).
//!
//! An encoding is a module (`parquet_spans`, …) with a type implementing [`BlockFormat`]: the
//! operations [`Block`](crate::Block), [`RowGroupData`] and [`write_block`](crate::write_block)
//! need, on the format-neutral types of [`crate::read`] and [`crate::write`]. [`Encoding`]
//! names one of them; its methods dispatch statically (a `match` over a `Copy` enum), so going
//! through the seam costs nothing over calling the module directly.
//!
//! | `meta.version` | encoding |
//! |---|---|
//! | 1 | [`Encoding::V1`]: the `weft_span_v1` schema |
//! | 2 | [`Encoding::V1`]: `weft_span_v1` plus the dedicated columns listed in `meta.json` |
//! | 3 | [`Encoding::V1`]: as 2, its row groups time slices (the rows' order and the index say so; the columns are the same) |
//!
//! Every encoding so far stores a Parquet data file: the footer, the checksums and the
//! fetching of column chunks in the crate root are shared by all of them.

use crate::columns::SpanColumns;
use crate::meta::DedicatedColumn;
use crate::read::{FilterColumns, GraphColumns, MetricColumns, MetricNeeds, Needs};
use crate::row::SpanRow;
use crate::write::{Encoded, WriteOptions};
use crate::{BlockError, RowGroupData};
use parquet::file::metadata::ParquetMetaData;
use std::ops::Range;

/// What a block encoding provides. Implemented by one type per encoding module
/// (`parquet_spans::V1`).
pub(crate) trait BlockFormat {
    /// The schema columns whose chunk statistics give a row group's span start times and
    /// durations (INT64), for pruning.
    const START: usize;
    const DURATION: usize;
    /// The schema columns [`Self::read_graph_columns`] reads, ascending.
    const GRAPH_COLUMNS: &'static [usize];

    /// Encodes `cols` as a data file plus its trace index.
    fn encode(cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError>;
    /// The number of columns of a data file with `dedicated` dedicated columns.
    fn column_count(dedicated: usize) -> usize;
    /// The schema columns [`Self::read_metric_columns`] reads for `needs` in a block with the
    /// `dedicated` columns, ascending.
    fn metric_columns(needs: &MetricNeeds, dedicated: &[DedicatedColumn]) -> Vec<usize>;
    /// The byte range of row group `rg` in the data file.
    fn row_group_range(footer: &ParquetMetaData, rg: usize) -> Range<u64>;
    /// See [`RowGroupData::rows`] and [`RowGroupData::rows_in`] (`keep`).
    fn read_rows(data: &RowGroupData, keep: Option<&[Range<usize>]>) -> Result<Vec<SpanRow>, BlockError>;
    /// See [`RowGroupData::append_to`].
    fn append_rows(data: &RowGroupData, cols: &mut SpanColumns) -> Result<(), BlockError>;
    /// See [`RowGroupData::trace`].
    fn read_trace(data: &RowGroupData, trace_id: &[u8; 16]) -> Result<Vec<SpanRow>, BlockError>;
    /// See [`RowGroupData::metric_columns`].
    fn read_metric_columns(data: &RowGroupData, needs: &MetricNeeds) -> Result<MetricColumns, BlockError>;
    /// See [`RowGroupData::graph_columns`].
    fn read_graph_columns(data: &RowGroupData) -> Result<GraphColumns, BlockError>;
    /// See [`RowGroupData::filter_columns`].
    fn read_filter_columns(data: &RowGroupData, needs: Needs) -> Result<FilterColumns, BlockError>;
}

/// A block encoding: which module writes and reads a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Format versions 1, 2 and 3 (`parquet_spans`).
    V1,
}

/// The encoding this build writes, as version [`FORMAT_VERSION`](crate::meta::FORMAT_VERSION).
pub(crate) const WRITES: Encoding = Encoding::V1;

/// The encoding that reads blocks of format `version`.
pub(crate) fn from_version(version: u32) -> Result<Encoding, BlockError> {
    match version {
        1..=3 => Ok(Encoding::V1),
        v => Err(BlockError::UnsupportedVersion(v)),
    }
}

/// Evaluates `$body` with `$F` naming the [`BlockFormat`] type of encoding `$enc`.
macro_rules! dispatch {
    ($enc:expr, $F:ident => $body:expr) => {
        match $enc {
            Encoding::V1 => {
                type $F = crate::parquet_spans::V1;
                $body
            }
        }
    };
}

impl Encoding {
    pub(crate) fn encode(self, cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError> {
        dispatch!(self, F => F::encode(cols, opts))
    }

    /// See [`BlockFormat::column_count`].
    pub(crate) fn column_count(self, dedicated: usize) -> usize {
        dispatch!(self, F => F::column_count(dedicated))
    }

    /// The start-time and duration columns: see [`BlockFormat::START`].
    pub(crate) fn stats_columns(self) -> (usize, usize) {
        dispatch!(self, F => (F::START, F::DURATION))
    }

    /// See [`BlockFormat::metric_columns`].
    pub(crate) fn metric_columns(self, needs: &MetricNeeds, dedicated: &[DedicatedColumn]) -> Vec<usize> {
        dispatch!(self, F => F::metric_columns(needs, dedicated))
    }

    /// See [`BlockFormat::GRAPH_COLUMNS`].
    pub(crate) fn graph_columns(self) -> &'static [usize] {
        dispatch!(self, F => F::GRAPH_COLUMNS)
    }

    /// See [`BlockFormat::row_group_range`].
    pub(crate) fn row_group_range(self, footer: &ParquetMetaData, rg: usize) -> Range<u64> {
        dispatch!(self, F => F::row_group_range(footer, rg))
    }

    pub(crate) fn read_rows(
        self,
        data: &RowGroupData,
        keep: Option<&[Range<usize>]>,
    ) -> Result<Vec<SpanRow>, BlockError> {
        dispatch!(self, F => F::read_rows(data, keep))
    }

    pub(crate) fn append_rows(self, data: &RowGroupData, cols: &mut SpanColumns) -> Result<(), BlockError> {
        dispatch!(self, F => F::append_rows(data, cols))
    }

    pub(crate) fn read_trace(self, data: &RowGroupData, trace_id: &[u8; 16]) -> Result<Vec<SpanRow>, BlockError> {
        dispatch!(self, F => F::read_trace(data, trace_id))
    }

    pub(crate) fn read_metric_columns(
        self,
        data: &RowGroupData,
        needs: &MetricNeeds,
    ) -> Result<MetricColumns, BlockError> {
        dispatch!(self, F => F::read_metric_columns(data, needs))
    }

    pub(crate) fn read_graph_columns(self, data: &RowGroupData) -> Result<GraphColumns, BlockError> {
        dispatch!(self, F => F::read_graph_columns(data))
    }

    pub(crate) fn read_filter_columns(self, data: &RowGroupData, needs: Needs) -> Result<FilterColumns, BlockError> {
        dispatch!(self, F => F::read_filter_columns(data, needs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{FORMAT_VERSION, READABLE_VERSIONS};

    #[test]
    fn every_readable_version_and_no_other_has_an_encoding() {
        let last = *READABLE_VERSIONS.iter().max().unwrap();
        for v in 0..=last + 10 {
            assert_eq!(from_version(v).is_ok(), READABLE_VERSIONS.contains(&v), "version {v}");
        }
        assert!(matches!(
            from_version(last + 1),
            Err(BlockError::UnsupportedVersion(v)) if v == last + 1
        ));
    }

    #[test]
    fn the_written_version_is_read_by_the_written_encoding() {
        assert_eq!(from_version(FORMAT_VERSION).unwrap(), WRITES);
    }
}
