//! Block format versions 1 to 3: `data.parquet` with one row per span; in versions 1 and 2 sorted
//! by trace ID, in version 3 by time slice, then trace ID (each row group a slice: see
//! [`crate::columns::SpanColumns::time_sliced_order`]).
//!
//! Schema (`weft_span_v1`):
//!
//! | column | type | encoding |
//! |---|---|---|
//! | trace_id | FIXED_LEN_BYTE_ARRAY(16) | dictionary (each ID repeats once per span of its trace) |
//! | span_id | FIXED_LEN_BYTE_ARRAY(8) | plain (random, incompressible) |
//! | parent_span_id | optional FIXED_LEN_BYTE_ARRAY(8), null for roots | dictionary |
//! | name | STRING | dictionary |
//! | kind | INT32 (OTLP SpanKind) | dictionary |
//! | start_time_unix_nano | INT64 | delta binary packed |
//! | duration_nano | INT64 (end − start) | delta binary packed |
//! | status_code | INT32 (OTLP StatusCode) | dictionary |
//! | status_message | optional STRING | dictionary |
//! | service_name | STRING (resource `service.name`) | dictionary |
//! | resource | BINARY: encoded `ResourceSpans` fields except `scope_spans` | dictionary |
//! | scope | BINARY: encoded `ScopeSpans` fields except `spans` | dictionary |
//! | attributes, events, links | optional BINARY: the span's encoded repeated fields | dictionary, falling back to plain |
//! | extra | optional BINARY: every other span field, encoded | dictionary |
//!
//! Pages of trace_id, span_id, the timestamps and attributes are zstd-compressed; the
//! dictionary-encoded low-cardinality columns and the sparse ones are stored uncompressed (the
//! codec is per column chunk, so readers need no change). Row groups hold up to
//! `row_group_rows` rows (under twice that, to keep traces whole); `index.bin` records each row
//! group's trace-ID range and, from version 3, its trace bloom and trace start times.
//!
//! Version 2 is the same schema followed by one optional column per dedicated attribute key
//! listed in `meta.json` ([`crate::meta::BlockMeta::dedicated_columns`]). Version 3 is version
//! 2's schema with time-sliced row groups; this module writes it and reads all three. The rest of the crate reaches it only through [`crate::format`], as
//! [`V1`].

pub mod chunk;
mod dedicated_columns;
mod pages;
pub(crate) mod query_columns;
pub mod reader;
pub mod writer;

use crate::columns::SpanColumns;
use crate::format::BlockFormat;
use crate::meta::DedicatedColumn;
use crate::read::{FilterColumns, GraphColumns, MetricColumns, MetricNeeds, Needs};
use crate::row::SpanRow;
use crate::write::{Encoded, WriteOptions};
use crate::{BlockError, RowGroupData};
use parquet::file::metadata::ParquetMetaData;
use std::ops::Range;

pub const SCHEMA: &str = "message weft_span_v1 {
  required fixed_len_byte_array(16) trace_id;
  required fixed_len_byte_array(8) span_id;
  optional fixed_len_byte_array(8) parent_span_id;
  required binary name (STRING);
  required int32 kind;
  required int64 start_time_unix_nano;
  required int64 duration_nano;
  required int32 status_code;
  optional binary status_message (STRING);
  required binary service_name (STRING);
  required binary resource;
  required binary scope;
  optional binary attributes;
  optional binary events;
  optional binary links;
  optional binary extra;
}";

pub(crate) mod col {
    pub const TRACE_ID: usize = 0;
    pub const SPAN_ID: usize = 1;
    pub const PARENT: usize = 2;
    pub const NAME: usize = 3;
    pub const KIND: usize = 4;
    pub const START: usize = 5;
    pub const DURATION: usize = 6;
    pub const STATUS_CODE: usize = 7;
    pub const STATUS_MESSAGE: usize = 8;
    pub const SERVICE: usize = 9;
    pub const RESOURCE: usize = 10;
    pub const SCOPE: usize = 11;
    pub const ATTRIBUTES: usize = 12;
    pub const EVENTS: usize = 13;
    pub const LINKS: usize = 14;
    pub const EXTRA: usize = 15;
}

/// Format versions 1 and 2 behind the [`BlockFormat`] seam.
pub(crate) struct V1;

/// The fetched bytes of `data` as the Parquet reader's chunk.
fn chunk(data: &RowGroupData) -> reader::RangeChunk {
    reader::RangeChunk {
        pieces: data.pieces.clone(),
        file_len: data.file_len,
    }
}

impl BlockFormat for V1 {
    const START: usize = col::START;
    const DURATION: usize = col::DURATION;
    const GRAPH_COLUMNS: &'static [usize] = &query_columns::GRAPH_COLUMNS;

    fn encode(cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError> {
        writer::encode(cols, opts)
    }

    fn column_count(dedicated: usize) -> usize {
        col::EXTRA + 1 + dedicated
    }

    fn metric_columns(needs: &MetricNeeds, dedicated: &[DedicatedColumn]) -> Vec<usize> {
        query_columns::metric_columns(needs, dedicated)
    }

    fn row_group_range(footer: &ParquetMetaData, rg: usize) -> Range<u64> {
        reader::row_group_range(footer, rg)
    }

    fn read_rows(data: &RowGroupData, keep: Option<&[Range<usize>]>) -> Result<Vec<SpanRow>, BlockError> {
        reader::read_row_group(&data.footer, data.rg, chunk(data), &data.dedicated, keep)
    }

    fn append_rows(data: &RowGroupData, cols: &mut SpanColumns) -> Result<(), BlockError> {
        reader::append_row_group(&data.footer, data.rg, chunk(data), &data.dedicated, cols)
    }

    fn read_trace(data: &RowGroupData, trace_id: &[u8; 16]) -> Result<Vec<SpanRow>, BlockError> {
        reader::read_trace(&data.footer, data.rg, chunk(data), &data.dedicated, trace_id)
    }

    fn read_metric_columns(data: &RowGroupData, needs: &MetricNeeds) -> Result<MetricColumns, BlockError> {
        query_columns::read_metric_columns(&data.footer, data.rg, chunk(data), &data.dedicated, needs)
    }

    fn read_graph_columns(data: &RowGroupData) -> Result<GraphColumns, BlockError> {
        query_columns::read_graph_columns(&data.footer, data.rg, chunk(data))
    }

    fn read_filter_columns(data: &RowGroupData, needs: Needs) -> Result<FilterColumns, BlockError> {
        query_columns::read_filter_columns(&data.footer, data.rg, chunk(data), &data.dedicated, needs)
    }
}
