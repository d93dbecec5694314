//! Reads spans from a row group: one trace's, or all of them.

use super::col;
pub(crate) use super::pages::RowGroup;
use crate::BlockError;
use crate::columns::SpanColumns;
use crate::read::DictColumn;
use crate::row::SpanRow;
use bytes::Bytes;
use parquet::column::reader::get_typed_column_reader;
use parquet::data_type::{ByteArrayType, DataType, FixedLenByteArrayType, Int32Type, Int64Type};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::ReaderProperties;
use parquet::file::reader::{ChunkReader, Length};
use std::sync::Arc;

/// Byte ranges of the data file held in memory, addressed by file offsets: (offset, bytes),
/// ascending and disjoint. Every read must fall within one of them.
pub struct RangeChunk {
    pub pieces: Arc<[(u64, Bytes)]>,
    pub file_len: u64,
}

impl RangeChunk {
    /// The piece holding `start..start + length`, and `start`'s offset in it.
    fn find(&self, start: u64, length: usize) -> parquet::errors::Result<(&Bytes, usize)> {
        self.pieces
            .iter()
            .find_map(|(base, data)| {
                let off = start.checked_sub(*base)? as usize;
                (off + length <= data.len()).then_some((data, off))
            })
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!("range {start}+{length} outside the fetched ranges"))
            })
    }
}

impl Length for RangeChunk {
    fn len(&self) -> u64 {
        self.file_len
    }
}

impl ChunkReader for RangeChunk {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        let (data, off) = self.find(start, 0)?;
        Ok(data.slice(off..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let (data, off) = self.find(start, length)?;
        Ok(data.slice(off..off + length))
    }
}

/// The byte range of row group `rg` in the data file.
pub fn row_group_range(meta: &ParquetMetaData, rg: usize) -> std::ops::Range<u64> {
    let mut lo = u64::MAX;
    let mut hi = 0;
    for c in meta.row_group(rg).columns() {
        let (s, l) = c.byte_range();
        lo = lo.min(s);
        hi = hi.max(s + l);
    }
    lo..hi
}

pub(super) fn read<T: DataType>(
    rg: &RowGroup<'_>,
    i: usize,
    skip: usize,
    take: usize,
    optional: bool,
) -> Result<(Vec<T::T>, Vec<i16>), BlockError>
where
    T::T: Clone,
{
    let mut r = get_typed_column_reader::<T>(rg.get_column_reader(i)?);
    let mut skipped = 0;
    while skipped < skip {
        let n = r.skip_records(skip - skipped)?;
        if n == 0 {
            return Err(BlockError::Corrupt(format!("column {i} ended while skipping")));
        }
        skipped += n;
    }
    let mut vals = Vec::with_capacity(take);
    let mut def = Vec::with_capacity(take);
    let mut got = 0;
    while got < take {
        let (n, _, _) = if optional {
            r.read_records(take - got, Some(&mut def), None, &mut vals)?
        } else {
            r.read_records(take - got, None, None, &mut vals)?
        };
        if n == 0 {
            return Err(BlockError::Corrupt(format!("column {i} ended early")));
        }
        got += n;
    }
    Ok((vals, def))
}

/// Expands optional values with their definition levels into one `Option` per row.
pub(super) fn spread<T>(vals: Vec<T>, def: &[i16], rows: usize) -> Vec<Option<T>> {
    let mut it = vals.into_iter();
    if def.is_empty() {
        return (0..rows).map(|_| it.next()).collect();
    }
    def.iter().map(|&d| if d > 0 { it.next() } else { None }).collect()
}

/// Most rows a row group may claim. weft writes up to twice `row_group_rows` (8,192 by
/// default) per row group; the limit keeps a damaged footer's row count from sizing an
/// allocation that would abort the process.
const MAX_ROW_GROUP_ROWS: usize = 1 << 24;

/// The row count of row group `rg`, checked against [`MAX_ROW_GROUP_ROWS`].
pub(super) fn row_count(meta: &ParquetMetaData, rg: usize) -> Result<usize, BlockError> {
    let n = meta.row_group(rg).num_rows();
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_ROW_GROUP_ROWS)
        .ok_or_else(|| BlockError::Corrupt(format!("row group {rg} claims {n} rows")))
}

pub(super) fn row_group_reader<'a>(
    meta: &'a ParquetMetaData,
    rg: usize,
    chunk: RangeChunk,
) -> Result<RowGroup<'a>, BlockError> {
    Ok(RowGroup {
        meta: meta.row_group(rg),
        page_index: meta.page_index_for_row_group(rg),
        chunk: Arc::new(chunk),
        props: Arc::new(ReaderProperties::builder().build()),
    })
}

/// Returns the spans of `trace_id` in row group `rg`. `chunk` must hold the row group's bytes.
pub fn read_trace(
    meta: &ParquetMetaData,
    rg: usize,
    chunk: RangeChunk,
    dedicated: &[DedicatedColumn],
    trace_id: &[u8; 16],
) -> Result<Vec<SpanRow>, BlockError> {
    let rgr = row_group_reader(meta, rg, chunk)?;
    let rows = row_count(meta, rg)?;
    let ids = fixed_dict_column(&rgr, col::TRACE_ID, rows, false, 16)?;
    // Rows are sorted by trace ID, so the IDs of the rows are too.
    let id_of = |&k: &u32| ids.values[k as usize].as_ref();
    let lo = ids.ids.partition_point(|k| id_of(k) < trace_id.as_slice());
    let hi = ids.ids.partition_point(|k| id_of(k) <= trace_id.as_slice());
    if lo == hi {
        return Ok(Vec::new());
    }
    read_span_rows(&rgr, dedicated, rows, lo..hi, |_| *trace_id, |_| true)
}

/// Returns every span of row group `rg`, in block order (by trace ID within the row group). `chunk` must hold the
/// row group's bytes.
/// With `keep`, only the rows in those ranges (ascending, disjoint) are returned, in order.
pub fn read_row_group(
    meta: &ParquetMetaData,
    rg: usize,
    chunk: RangeChunk,
    dedicated: &[DedicatedColumn],
    keep: Option<&[std::ops::Range<usize>]>,
) -> Result<Vec<SpanRow>, BlockError> {
    let rgr = row_group_reader(meta, rg, chunk)?;
    let rows = row_count(meta, rg)?;
    let ids = fixed_dict_column(&rgr, col::TRACE_ID, rows, false, 16)?;
    let mask: Option<Vec<bool>> = keep.map(|k| {
        let mut m = vec![false; rows];
        for r in k {
            m[r.start.min(rows)..r.end.min(rows)].fill(true);
        }
        m
    });
    read_span_rows(
        &rgr,
        dedicated,
        rows,
        0..rows,
        |i| ids.values[ids.ids[i] as usize].as_ref().try_into().unwrap_or([0; 16]),
        |i| mask.as_ref().is_none_or(|m| m[i]),
    )
}

/// Reads rows `range` of a row group of `rows` rows; `trace_id(i)` gives the trace ID of row
/// `range.start + i`. Only rows `range.start + i` with `keep(i)` are assembled.
///
/// Every byte-string column is read as its dictionary and one index per row
/// ([`dict_column`]), whole, for weft's chunks hold one dictionary page and one index page
/// each. The generic column reader hands out every value of every row as a `Bytes` of the
/// page, an atomic increment and decrement each: with the buffers it fills with defaults,
/// about a sixth of a whole-trace query's CPU (docs/benchmarks/query-parallelism.md). A header
/// shared by rows (resource, scope) is copied once per read.
fn read_span_rows(
    rgr: &RowGroup<'_>,
    dedicated: &[DedicatedColumn],
    rows: usize,
    range: std::ops::Range<usize>,
    trace_id: impl Fn(usize) -> [u8; 16],
    keep: impl Fn(usize) -> bool,
) -> Result<Vec<SpanRow>, BlockError> {
    let (lo, n) = (range.start, range.len());
    let fixed = |v: &[u8]| -> [u8; 8] { v.try_into().unwrap_or([0; 8]) };
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    let strings = |c: usize, optional: bool| dict_column(rgr, c, rows, optional).map(|d| Column::new(d, lo));
    let span_ids = plain_fixed::<8>(rgr, col::SPAN_ID, rows)?;
    let parents = Column::new(fixed_dict_column(rgr, col::PARENT, rows, true, 8)?, lo);
    let names = strings(col::NAME, false)?;
    let (kinds, _) = read::<Int32Type>(rgr, col::KIND, lo, n, false)?;
    let (starts, _) = read::<Int64Type>(rgr, col::START, lo, n, false)?;
    let (durs, _) = read::<Int64Type>(rgr, col::DURATION, lo, n, false)?;
    let (codes, _) = read::<Int32Type>(rgr, col::STATUS_CODE, lo, n, false)?;
    let msgs = strings(col::STATUS_MESSAGE, true)?;
    let mut res = strings(col::RESOURCE, false)?;
    let mut scopes = strings(col::SCOPE, false)?;
    let attrs = strings(col::ATTRIBUTES, true)?;
    let events = strings(col::EVENTS, true)?;
    let links = strings(col::LINKS, true)?;
    let extra = strings(col::EXTRA, true)?;
    let moved = SpanDedicated::read(rgr, dedicated, rows, lo, n)?;
    let attributes = |i: usize| -> Bytes {
        let more = if moved.is_empty() { 0 } else { moved.appended_len(i) };
        if more == 0 {
            return attrs.copy(i);
        }
        let stored = attrs.get(i);
        // Sized once: growing by doubling took two or three reallocations per span.
        let mut out = Vec::with_capacity(stored.len() + more);
        out.extend_from_slice(stored);
        moved.append(i, &mut out);
        Bytes::from(out)
    };
    let mut out = Vec::new();
    for i in (0..n).filter(|&i| keep(i)) {
        out.push(SpanRow {
            trace_id: trace_id(i),
            span_id: span_ids[lo + i],
            parent_span_id: fixed(parents.get(i)),
            name: text(names.get(i)),
            kind: kinds[i].clamp(0, 255) as u8,
            start_unix_nano: starts[i] as u64,
            duration_nano: durs[i],
            status_code: codes[i].clamp(0, 255) as u8,
            status_message: text(msgs.get(i)),
            resource: res.owned(i),
            scope: scopes.owned(i),
            attributes: attributes(i),
            events: events.copy(i),
            links: links.copy(i),
            extra: extra.copy(i),
        });
    }
    Ok(out)
}

/// A byte-string column of a row group, read from row `lo` on.
struct Column {
    dict: DictColumn,
    lo: usize,
    copies: Vec<Option<Bytes>>,
}

impl Column {
    fn new(dict: DictColumn, lo: usize) -> Column {
        Column {
            dict,
            lo,
            copies: Vec::new(),
        }
    }

    /// Row `lo + i`'s value (empty when null).
    fn get(&self, i: usize) -> &[u8] {
        &self.dict.values[self.dict.ids[self.lo + i] as usize]
    }

    /// Row `lo + i`'s value copied: a row outlives the read and must not hold the page. For
    /// values most rows have their own of (attributes); a shared copy of one would cost an
    /// allocation more (`Bytes` moves a `Vec` to a shared buffer on its first clone).
    fn copy(&self, i: usize) -> Bytes {
        Bytes::copy_from_slice(self.get(i))
    }

    /// [`Self::copy`] made once per distinct value, for values many rows share (resource and
    /// scope headers, one per service and library).
    fn owned(&mut self, i: usize) -> Bytes {
        let id = self.dict.ids[self.lo + i] as usize;
        if self.copies.is_empty() {
            self.copies.resize(self.dict.values.len(), None);
        }
        let values = &self.dict.values;
        self.copies[id]
            .get_or_insert_with(|| Bytes::copy_from_slice(&values[id]))
            .clone()
    }
}

/// Appends every span of row group `rg` to `cols` (compaction's read), column by column: each
/// distinct name, header and attribute blob of the row group is interned once, and rows copy
/// ids, where [`read_row_group`] copies every value of every row into a [`SpanRow`]. Rows with
/// attribute values moved to dedicated columns are re-assembled one by one, as there.
///
/// On an error `cols` may hold part of the row group; the caller discards it.
pub fn append_row_group(
    meta: &ParquetMetaData,
    rg: usize,
    chunk: RangeChunk,
    dedicated: &[DedicatedColumn],
    cols: &mut SpanColumns,
) -> Result<(), BlockError> {
    let rgr = row_group_reader(meta, rg, chunk)?;
    let n = row_count(meta, rg)?;
    let trace = fixed_dict_column(&rgr, col::TRACE_ID, n, false, 16)?;
    let span_ids = plain_fixed::<8>(&rgr, col::SPAN_ID, n)?;
    let parents = fixed_dict_column(&rgr, col::PARENT, n, true, 8)?;
    let names = dict_column(&rgr, col::NAME, n, false)?;
    let (kinds, _) = read::<Int32Type>(&rgr, col::KIND, 0, n, false)?;
    let (starts, _) = read::<Int64Type>(&rgr, col::START, 0, n, false)?;
    let (durs, _) = read::<Int64Type>(&rgr, col::DURATION, 0, n, false)?;
    let (codes, _) = read::<Int32Type>(&rgr, col::STATUS_CODE, 0, n, false)?;
    let msgs = dict_column(&rgr, col::STATUS_MESSAGE, n, true)?;
    let res = dict_column(&rgr, col::RESOURCE, n, false)?;
    let scopes = dict_column(&rgr, col::SCOPE, n, false)?;
    let blobs = [col::ATTRIBUTES, col::EVENTS, col::LINKS, col::EXTRA].map(|c| dict_column(&rgr, c, n, true));
    let [attrs, events, links, extra] = blobs;
    let (attrs, events, links, extra) = (attrs?, events?, links?, extra?);
    let moved = SpanDedicated::read(&rgr, dedicated, n, 0, n)?;
    for (what, c) in [
        ("trace_id", &trace),
        ("parent_span_id", &parents),
        ("name", &names),
        ("status_message", &msgs),
        ("resource", &res),
        ("scope", &scopes),
        ("attributes", &attrs),
        ("events", &events),
        ("links", &links),
        ("extra", &extra),
    ] {
        if c.ids.len() != n {
            return Err(BlockError::Corrupt(format!(
                "{what}: {} values for {n} rows",
                c.ids.len()
            )));
        }
        if let Some(&bad) = c.ids.iter().find(|&&i| i as usize >= c.values.len()) {
            return Err(BlockError::Corrupt(format!(
                "{what}: value {bad} of {}",
                c.values.len()
            )));
        }
    }
    if kinds.len() != n || starts.len() != n || durs.len() != n || codes.len() != n {
        return Err(BlockError::Corrupt(format!(
            "row group {rg}: a column has fewer than {n} rows"
        )));
    }
    if trace.values.iter().any(|v| v.len() != 16) || parents.values.iter().any(|v| !v.is_empty() && v.len() != 8) {
        return Err(BlockError::Corrupt(format!(
            "row group {rg}: an ID of the wrong length"
        )));
    }
    // Each distinct value of the row group, interned once: its id in `cols`.
    // Names and messages as the row reader gives them: invalid UTF-8 replaced (weft's own
    // blocks hold none; ingest validates).
    let name_ids: Vec<u32> = names
        .values
        .iter()
        .map(|v| cols.strings.intern(String::from_utf8_lossy(v).as_bytes()))
        .collect();
    let msg_ids: Vec<u32> = (0..msgs.values.len() as u32)
        .map(|id| {
            if msgs.null == Some(id) {
                0
            } else {
                cols.strings
                    .intern(String::from_utf8_lossy(&msgs.values[id as usize]).as_bytes())
            }
        })
        .collect();
    let res_ids: Vec<u32> = res.values.iter().map(|v| cols.intern_resource(v)).collect();
    let scope_ids: Vec<u32> = scopes.values.iter().map(|v| cols.headers.intern(v)).collect();
    let blob_ids = |c: &DictColumn, blob: &mut crate::columns::BlobColumn| -> Vec<u32> {
        (0..c.values.len() as u32)
            .map(|id| {
                if c.null == Some(id) {
                    0
                } else {
                    blob.intern(&c.values[id as usize])
                }
            })
            .collect()
    };
    // Attribute blobs are interned when a row uses them as they are: in a block with
    // dedicated columns, rows with moved values store the re-assembled blob instead.
    let mut attr_ids = vec![UNSEEN; attrs.values.len()];
    let event_ids = blob_ids(&events, &mut cols.events);
    let link_ids = blob_ids(&links, &mut cols.links);
    let extra_ids = blob_ids(&extra, &mut cols.extra);
    let mut scratch = Vec::new();
    cols.reserve_rows(n);
    for i in 0..n {
        let tid: [u8; 16] = trace.values[trace.ids[i] as usize][..].try_into().unwrap_or([0; 16]);
        cols.chain(tid);
        cols.span_id.push(span_ids[i]);
        let p = parents.ids[i];
        cols.parent_span_id.push(if parents.null == Some(p) {
            [0; 8]
        } else {
            parents.values[p as usize][..].try_into().unwrap_or([0; 8])
        });
        cols.name.push(name_ids[names.ids[i] as usize]);
        cols.kind.push(kinds[i].clamp(0, 255) as u8);
        let start = starts[i] as u64;
        cols.start.push(start);
        cols.duration.push(durs[i]);
        cols.min_start = cols.min_start.min(start);
        cols.max_end = cols.max_end.max(start.wrapping_add(durs[i] as u64));
        cols.status_code.push(codes[i].clamp(0, 255) as u8);
        cols.status_message.push(msg_ids[msgs.ids[i] as usize]);
        cols.resource.push(res_ids[res.ids[i] as usize]);
        cols.scope.push(scope_ids[scopes.ids[i] as usize]);
        if moved.is_empty() || !moved.any(i) {
            let a = attrs.ids[i];
            let mut id = attr_ids[a as usize];
            if id == UNSEEN {
                id = if attrs.null == Some(a) {
                    0
                } else {
                    cols.attributes.intern(&attrs.values[a as usize])
                };
                attr_ids[a as usize] = id;
            }
            cols.attributes.push_id(id);
        } else {
            let a = attrs.ids[i];
            scratch.clear();
            if attrs.null != Some(a) {
                scratch.extend_from_slice(&attrs.values[a as usize]);
            }
            moved.append(i, &mut scratch);
            cols.attributes.push(&scratch);
        }
        cols.events.push_id(event_ids[events.ids[i] as usize]);
        cols.links.push_id(link_ids[links.ids[i] as usize]);
        cols.extra.push_id(extra_ids[extra.ids[i] as usize]);
    }
    Ok(())
}

/// Not interned yet (see [`append_row_group`]).
const UNSEEN: u32 = u32::MAX;

/// Reads a required FIXED_LEN_BYTE_ARRAY(`L`) column of `n` rows. The fast path takes the
/// PLAIN data pages weft writes as they are; any other layout goes through the column reader.
pub(super) fn plain_fixed<const L: usize>(rgr: &RowGroup<'_>, c: usize, n: usize) -> Result<Vec<[u8; L]>, BlockError> {
    use parquet::basic::Encoding;
    use parquet::column::page::Page;
    let mut out: Vec<[u8; L]> = Vec::with_capacity(n);
    let mut pages = rgr.get_column_page_reader(c)?;
    let mut fast = true;
    while let Some(page) = pages.get_next_page()? {
        match page {
            Page::DataPage {
                buf,
                num_values,
                encoding: Encoding::PLAIN,
                ..
            } if buf.len() == num_values as usize * L => {
                out.extend(buf.chunks_exact(L).map(|v| v.try_into().unwrap_or([0; L])));
            }
            _ => {
                fast = false;
                break;
            }
        }
    }
    if fast && out.len() == n {
        return Ok(out);
    }
    let (vals, _) = read::<FixedLenByteArrayType>(rgr, c, 0, n, false)?;
    Ok(vals.iter().map(|v| v.data().try_into().unwrap_or([0; L])).collect())
}

/// Reads a BYTE_ARRAY column of `n` rows keeping its dictionary ids.
///
/// The fast path decodes the pages weft writes ([`super::chunk`]): a PLAIN dictionary page and
/// v1 data pages of `RLE_DICTIONARY` indexes. Any other layout (another writer, a PLAIN
/// fallback page) is read with the generic column reader and given ids by hashing.
pub(super) fn dict_column(rgr: &RowGroup<'_>, c: usize, n: usize, optional: bool) -> Result<DictColumn, BlockError> {
    column_with_ids(rgr, c, n, optional, None)
}

/// [`dict_column`] for a FIXED_LEN_BYTE_ARRAY column of `len`-byte values.
pub(super) fn fixed_dict_column(
    rgr: &RowGroup<'_>,
    c: usize,
    n: usize,
    optional: bool,
    len: usize,
) -> Result<DictColumn, BlockError> {
    column_with_ids(rgr, c, n, optional, Some(len))
}

fn column_with_ids(
    rgr: &RowGroup<'_>,
    c: usize,
    n: usize,
    optional: bool,
    fixed: Option<usize>,
) -> Result<DictColumn, BlockError> {
    if let Some(d) = dict_pages(rgr, c, n, optional, fixed)? {
        return Ok(d);
    }
    let copy = |v: &[u8]| Bytes::copy_from_slice(v);
    let rows: Vec<Option<Bytes>> = if fixed.is_some() {
        let (vals, def) = read::<FixedLenByteArrayType>(rgr, c, 0, n, optional)?;
        spread(vals, &def, n)
            .into_iter()
            .map(|v| v.map(|v| copy(v.data())))
            .collect()
    } else {
        let (vals, def) = read::<ByteArrayType>(rgr, c, 0, n, optional)?;
        spread(vals, &def, n)
            .into_iter()
            .map(|v| v.map(|v| copy(v.data())))
            .collect()
    };
    Ok(dict_of(rows.into_iter()))
}

/// Gives ids to values by hashing them (the slow path of [`dict_column`]).
fn dict_of(rows: impl Iterator<Item = Option<Bytes>>) -> DictColumn {
    let mut out = DictColumn::default();
    let mut seen: std::collections::HashMap<Bytes, u32> = std::collections::HashMap::new();
    let mut id_of = |b: Bytes, out: &mut DictColumn| {
        *seen.entry(b.clone()).or_insert_with(|| {
            out.values.push(b);
            out.values.len() as u32 - 1
        })
    };
    for v in rows {
        let id = match v {
            Some(v) => id_of(v, &mut out),
            None => *out.null.get_or_insert_with(|| {
                out.values.push(Bytes::new());
                out.values.len() as u32 - 1
            }),
        };
        out.ids.push(id);
    }
    out
}

/// The dictionary fast path of [`dict_column`]; `None` when the chunk has another layout.
/// `fixed` is the value length of a FIXED_LEN_BYTE_ARRAY column (PLAIN values without a
/// length prefix).
fn dict_pages(
    rgr: &RowGroup<'_>,
    c: usize,
    n: usize,
    optional: bool,
    fixed: Option<usize>,
) -> Result<Option<DictColumn>, BlockError> {
    use parquet::basic::Encoding;
    use parquet::column::page::Page;
    let corrupt = |m: String| BlockError::Corrupt(format!("column {c}: {m}"));
    let mut pages = rgr.get_column_page_reader(c)?;
    let mut out = DictColumn::default();
    let mut idx = Vec::new();
    while let Some(page) = pages.get_next_page()? {
        match page {
            Page::DictionaryPage { buf, num_values, .. } => {
                let mut p = 0usize;
                for _ in 0..num_values {
                    let (prefix, len) = match fixed {
                        Some(len) => (0, len),
                        None => (
                            4,
                            buf.get(p..p + 4)
                                .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
                                .ok_or_else(|| corrupt("dictionary page ends inside a length".into()))?,
                        ),
                    };
                    if p + prefix + len > buf.len() {
                        return Err(corrupt("dictionary page ends inside a value".into()));
                    }
                    out.values.push(buf.slice(p + prefix..p + prefix + len));
                    p += prefix + len;
                }
            }
            Page::DataPage {
                buf,
                num_values,
                encoding: encoding @ (Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY | Encoding::PLAIN),
                def_level_encoding,
                ..
            } if (!optional || def_level_encoding == Encoding::RLE) && (optional || encoding != Encoding::PLAIN) => {
                let num = num_values as usize;
                if out.ids.len() + num > n {
                    return Err(corrupt(format!("pages hold more than the row group's {n} rows")));
                }
                let mut p = 0usize;
                let mut defs = Vec::new();
                if optional {
                    let len = buf
                        .get(0..4)
                        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
                        .ok_or_else(|| corrupt("page ends inside the definition levels".into()))?;
                    let levels = buf
                        .get(4..4 + len)
                        .ok_or_else(|| corrupt("definition levels past the page".into()))?;
                    decode_rle_hybrid(levels, 1, num, &mut defs).map_err(corrupt)?;
                    p = 4 + len;
                }
                let present = if optional {
                    defs.iter().filter(|&&d| d > 0).count()
                } else {
                    num
                };
                if encoding == Encoding::PLAIN {
                    // weft writes an optional chunk with no value at all (events in a row
                    // group without any) as a PLAIN page of definition levels alone.
                    if present > 0 {
                        return Ok(None);
                    }
                    let null = *out.null.get_or_insert_with(|| {
                        out.values.push(Bytes::new());
                        out.values.len() as u32 - 1
                    });
                    out.ids.resize(out.ids.len() + num, null);
                    continue;
                }
                let width = *buf
                    .get(p)
                    .ok_or_else(|| corrupt("page ends before the bit width".into()))?;
                idx.clear();
                decode_rle_hybrid(&buf[p + 1..], width, present, &mut idx).map_err(corrupt)?;
                if let Some(&bad) = idx.iter().find(|&&i| i as usize >= out.values.len()) {
                    return Err(corrupt(format!("dictionary index {bad} of {}", out.values.len())));
                }
                if optional {
                    let mut vals = idx.iter();
                    for &d in &defs {
                        let id = if d > 0 {
                            vals.next().copied().unwrap_or(0)
                        } else {
                            *out.null.get_or_insert_with(|| {
                                out.values.push(Bytes::new());
                                out.values.len() as u32 - 1
                            })
                        };
                        out.ids.push(id);
                    }
                } else {
                    out.ids.extend_from_slice(&idx);
                }
            }
            _ => return Ok(None),
        }
    }
    if out.ids.len() != n {
        return Ok(None);
    }
    Ok(Some(out))
}

use super::chunk::decode_rle_hybrid;

/// Reads rows `lo..lo + n` of dedicated column `c`, of type `t`, in a row group of `rows`
/// rows. A string column keeps its dictionary ([`dict_column`]).
pub(super) fn read_dedicated(
    rgr: &RowGroup<'_>,
    c: usize,
    t: ValueType,
    rows: usize,
    lo: usize,
    n: usize,
) -> Result<DedicatedValues, BlockError> {
    use parquet::data_type::{BoolType, DoubleType};
    Ok(match t {
        ValueType::String => {
            let mut d = dict_column(rgr, c, rows, true)?;
            if lo > 0 || n < rows {
                d.ids.drain(..lo.min(rows));
                d.ids.truncate(n);
            }
            DedicatedValues::Str(d)
        }
        ValueType::Int => {
            let (v, def) = read::<Int64Type>(rgr, c, lo, n, true)?;
            DedicatedValues::Int(spread(v, &def, n))
        }
        ValueType::Double => {
            let (v, def) = read::<DoubleType>(rgr, c, lo, n, true)?;
            DedicatedValues::Double(spread(v, &def, n))
        }
        ValueType::Bool => {
            let (v, def) = read::<BoolType>(rgr, c, lo, n, true)?;
            DedicatedValues::Bool(spread(v, &def, n))
        }
    })
}

/// The span-scope dedicated columns of a range of rows, to append back to their attributes.
pub(super) struct SpanDedicated {
    /// Per column: the key and one optional value per row.
    cols: Vec<(Vec<u8>, DedicatedValues)>,
}

pub(super) enum DedicatedValues {
    /// Null rows have the id [`DictColumn::null`].
    Str(DictColumn),
    Int(Vec<Option<i64>>),
    Double(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
}

impl SpanDedicated {
    /// Reads rows `lo..lo + n` of every span-scope column of `dedicated`, in a row group of
    /// `rows` rows. Their schema index follows the `weft_span_v1` columns, in `dedicated` order.
    pub(super) fn read(
        rgr: &RowGroup<'_>,
        dedicated: &[DedicatedColumn],
        rows: usize,
        lo: usize,
        n: usize,
    ) -> Result<SpanDedicated, BlockError> {
        let mut cols = Vec::new();
        for (k, d) in dedicated.iter().enumerate() {
            if d.scope != DedicatedScope::Span {
                continue;
            }
            let values = read_dedicated(rgr, col::EXTRA + 1 + k, d.value_type, rows, lo, n)?;
            cols.push((d.name.as_bytes().to_vec(), values));
        }
        Ok(SpanDedicated { cols })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.cols.is_empty()
    }

    pub(super) fn value(v: &DedicatedValues, i: usize) -> Option<Scalar<'_>> {
        match v {
            DedicatedValues::Str(d) => {
                let id = d.ids[i];
                (d.null != Some(id)).then(|| Scalar::Str(&d.values[id as usize]))
            }
            DedicatedValues::Int(v) => v[i].map(Scalar::Int),
            DedicatedValues::Double(v) => v[i].map(Scalar::Double),
            DedicatedValues::Bool(v) => v[i].map(Scalar::Bool),
        }
    }

    /// Whether row `i` has a moved value.
    pub(super) fn any(&self, i: usize) -> bool {
        self.cols.iter().any(|(_, v)| Self::value(v, i).is_some())
    }

    /// How many bytes [`Self::append`] adds for row `i`.
    pub(super) fn appended_len(&self, i: usize) -> usize {
        self.cols
            .iter()
            .filter_map(|(key, v)| Some(key_value_len(key, Self::value(v, i)?)))
            .sum()
    }

    /// Appends row `i`'s moved values to its attributes blob `out`, in column order.
    pub(super) fn append(&self, i: usize, out: &mut Vec<u8>) {
        for (key, v) in &self.cols {
            if let Some(x) = Self::value(v, i) {
                append_key_value(out, key, x);
            }
        }
    }
}

use crate::dedicated::{Scalar, append_key_value, key_value_len};
use crate::meta::{DedicatedColumn, DedicatedScope, ValueType};
