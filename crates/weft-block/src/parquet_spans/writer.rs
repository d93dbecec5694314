//! Writes a block from [`SpanColumns`].

use super::chunk::{ChunkBuf, ChunkSpec};
use super::dedicated_columns::{ABSENT, DedicatedDict, dedicated_chunk, write_dedicated_bools};
use super::{SCHEMA, col};
use crate::BlockError;
use crate::columns::{BlobColumn, SpanColumns};
use crate::dedicated::{self, Scalar};
use crate::hash::{FastBuild, FastMap};
use crate::index::{Bloom, KeyLists, KeyScope, MAX_LISTED_KEYS, RowGroupRange, TraceIndex};
use crate::meta::{DedicatedColumn, DedicatedScope, ValueType};
use crate::write::{Encoded, WriteOptions};
use bytes::Bytes;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::data_type::{FixedLenByteArray, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnDescPtr, ColumnPath};
use std::sync::Arc;

/// Writer properties. Only the two timestamp columns go through the Parquet column writer
/// (see [`encode`]); the other chunks are written by [`ChunkBuf`] with their own settings.
fn props(opts: &WriteOptions) -> Result<WriterProperties, BlockError> {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(opts.zstd_level)?))
        .set_created_by(format!("weft {}", env!("CARGO_PKG_VERSION")))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        // No page index (see `chunk.rs`): every byte of the file is checksummed.
        .set_offset_index_disabled(true)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "weft.block.version".to_string(),
            crate::meta::FORMAT_VERSION.to_string(),
        )]));
    for c in ["start_time_unix_nano", "duration_nano"] {
        b = b
            .set_column_dictionary_enabled(ColumnPath::from(c), false)
            .set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED);
    }
    Ok(b.build())
}

/// Maps head ids (interner or blob value ids) to dictionary indexes local to one column chunk.
///
/// An array indexed by head id instead of a hash map: one load per row. Only the entries set
/// for a chunk are reset after it, so a block with many row groups pays per value, not per
/// head id.
pub(super) struct Remap {
    map: Vec<u32>,
    touched: Vec<u32>,
}

const UNSET: u32 = u32::MAX;

impl Remap {
    fn new() -> Self {
        Remap {
            map: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// The local index of head id `g`, calling `add` with `g` when it is new to the chunk.
    #[inline]
    fn local(&mut self, g: u32, add: impl FnOnce(u32)) -> u32 {
        // Local indexes are handed out in order: the next one is the count of ids seen.
        let next = self.touched.len() as u32;
        self.memo(g, || {
            add(g);
            next
        })
    }

    /// The value memoised for head id `g` in this chunk, calling `f` when there is none yet.
    /// `f` must not return [`UNSET`].
    #[inline]
    pub(super) fn memo(&mut self, g: u32, f: impl FnOnce() -> u32) -> u32 {
        let gi = g as usize;
        if gi >= self.map.len() {
            self.map.resize(gi + 1, UNSET);
        }
        let l = self.map[gi];
        if l != UNSET {
            return l;
        }
        let l = f();
        debug_assert_ne!(l, UNSET);
        self.map[gi] = l;
        self.touched.push(g);
        l
    }

    /// The value memoised for head id `g`, which must have one.
    #[inline]
    fn get(&self, g: u32) -> u32 {
        self.map[g as usize]
    }

    pub(super) fn reset(&mut self) {
        for &g in &self.touched {
            self.map[g as usize] = UNSET;
        }
        self.touched.clear();
    }
}

/// The fixed-size fields of one span, gathered from the head's columns in block order.
pub(super) struct Row {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: [u8; 8],
    start: u64,
    duration: i64,
    name: u32,
    status_message: u32,
    resource: u32,
    scope: u32,
    /// Value ids of the attribute, event, link and extra blobs.
    blobs: [u32; 4],
    kind: u8,
    status_code: u8,
}

/// How many rows ahead the gather prefetches.
const PREFETCH_ROWS: usize = 16;

/// Asks the CPU to start loading the cache line holding `x` into L1, without waiting for it.
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is only a hint: it never faults and changes nothing the program
        // can observe. The pointer comes from a reference, so it is valid anyway.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

impl Row {
    /// Asks the CPU to start loading row `r`'s fields. The gather visits rows in block order,
    /// which jumps to another trace's rows every few spans; without this, each jump waited on
    /// a dozen cache misses (one per column) before the next row's loads could be issued.
    #[inline]
    fn prefetch(c: &SpanColumns, r: usize) {
        macro_rules! pf {
            ($($col:expr),*) => {$(
                if let Some(x) = $col.get(r) {
                    prefetch(x);
                }
            )*};
        }
        pf!(
            c.trace_id,
            c.span_id,
            c.parent_span_id,
            c.start,
            c.duration,
            c.name,
            c.status_message,
            c.resource,
            c.scope,
            c.attributes.ids,
            c.events.ids,
            c.links.ids,
            c.extra.ids,
            c.kind,
            c.status_code
        );
    }

    #[inline]
    fn of(c: &SpanColumns, r: usize) -> Row {
        Row {
            trace_id: c.trace_id[r],
            span_id: c.span_id[r],
            parent_span_id: c.parent_span_id[r],
            start: c.start[r],
            duration: c.duration[r],
            name: c.name[r],
            status_message: c.status_message[r],
            resource: c.resource[r],
            scope: c.scope[r],
            blobs: [c.attributes.ids[r], c.events.ids[r], c.links.ids[r], c.extra.ids[r]],
            kind: c.kind[r],
            status_code: c.status_code[r],
        }
    }
}

/// The schema of a block with `dedicated` columns: `weft_span_v1`'s, then one optional column
/// per dedicated key.
pub fn schema_with(dedicated: &[DedicatedColumn]) -> String {
    let mut s = SCHEMA.trim_end().trim_end_matches('}').to_owned();
    for d in dedicated {
        let ty = match d.value_type {
            ValueType::String => "binary",
            ValueType::Int => "int64",
            ValueType::Double => "double",
            ValueType::Bool => "boolean",
        };
        let logical = if d.value_type == ValueType::String {
            " (STRING)"
        } else {
            ""
        };
        s.push_str(&format!("  optional {ty} {}{logical};\n", d.column));
    }
    s.push('}');
    s
}

/// Chooses the dedicated columns of the rows `order` of `cols`.
fn choose_dedicated(cols: &SpanColumns, order: &[u32], data: &[u8]) -> Vec<DedicatedColumn> {
    // Spans per blob and per resource, by head id (ids are dense). The blobs are then read in
    // id order, which is their order in memory; a map's order sent each read to a cache miss.
    let mut blobs = vec![0u64; cols.attributes.distinct()];
    let mut resources = vec![0u64; cols.headers.len()];
    let mut count = |r: usize| {
        blobs[cols.attributes.ids[r] as usize] += 1;
        resources[cols.resource[r] as usize] += 1;
    };
    if order.len() == cols.len() {
        // Every row is listed (no retry was dropped), so the counts are the same taken in row
        // order, without a cache miss per row: `order` visits the rows at random, and this
        // loop was a sixth of the block writer's own time on spans of fresh traces.
        (0..cols.len()).for_each(&mut count);
    } else {
        order.iter().for_each(|&r| count(r as usize));
    }
    fn used(counts: &[u64]) -> impl Iterator<Item = (u32, u64)> + '_ {
        counts
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(g, &n)| (g as u32, n))
    }
    dedicated::choose(
        order.len() as u64,
        used(&blobs)
            .filter(|&(g, _)| g != 0)
            .map(|(g, n)| (&data[cols.attributes.value_range(g)], n)),
        used(&resources).map(|(h, n)| (cols.headers.get(h), n)),
    )
}

/// Fills `buf` with a dictionary-encoded chunk of head ids. With `optional`, id 0 is null.
#[inline]
fn dict_ids<'a>(
    buf: &mut ChunkBuf,
    remap: &mut Remap,
    rows: &[Row],
    optional: bool,
    id_of: impl Fn(&Row) -> u32,
    value_of: impl Fn(u32) -> &'a [u8],
) {
    buf.indexes.reserve(rows.len());
    for r in rows {
        let g = id_of(r);
        if optional {
            if g == 0 {
                buf.def.push(0);
                continue;
            }
            buf.def.push(1);
        }
        let l = remap.local(g, |g| buf.dict_bytes(value_of(g)));
        buf.indexes.push(l);
    }
    remap.reset();
}

/// Collects the key lists of a block ([`KeyLists`]), one row group after another.
struct KeyCollector {
    lists: KeyLists,
    /// Per scope, each key's index in `lists.keys`.
    index: [FastMap<Box<[u8]>, u32>; 5],
    /// Per scope, the key index found at each position of the previous blob: blobs of one
    /// kind of span list the same keys in the same order, so one comparison usually finds a
    /// key without hashing it (every blob is distinct when values are unique).
    at: [Vec<u32>; 5],
    /// The position in the current blob.
    pos: usize,
    /// The bitset of the row group being collected.
    bits: Vec<u64>,
    /// More than [`MAX_LISTED_KEYS`] keys, or one longer than 64 KiB: the block gets none.
    overflow: bool,
}

impl KeyCollector {
    fn new() -> KeyCollector {
        KeyCollector {
            lists: KeyLists::default(),
            index: std::array::from_fn(|_| FastMap::with_hasher(FastBuild::default())),
            at: std::array::from_fn(|_| Vec::new()),
            pos: 0,
            bits: Vec::new(),
            overflow: false,
        }
    }

    /// Starts the keys of another blob or header.
    fn begin(&mut self) {
        self.pos = 0;
    }

    fn add(&mut self, scope: KeyScope, key: &[u8]) {
        if self.overflow {
            return;
        }
        let at = &mut self.at[scope as usize];
        if at.len() <= self.pos {
            at.push(u32::MAX);
        }
        let guess = at[self.pos] as usize;
        let id = if self.lists.keys.get(guess).is_some_and(|(_, k)| **k == *key) {
            guess
        } else {
            let map = &mut self.index[scope as usize];
            let id = match map.get(key) {
                Some(&id) => id as usize,
                None => {
                    if self.lists.keys.len() >= MAX_LISTED_KEYS || key.len() > usize::from(u16::MAX) {
                        self.overflow = true;
                        return;
                    }
                    let id = self.lists.keys.len();
                    map.insert(key.into(), id as u32);
                    self.lists.keys.push((scope, key.into()));
                    id
                }
            };
            at[self.pos] = id as u32;
            id
        };
        self.pos += 1;
        if self.bits.len() <= id / 64 {
            self.bits.resize(id / 64 + 1, 0);
        }
        self.bits[id / 64] |= 1 << (id % 64);
    }

    fn end_row_group(&mut self) {
        self.lists.row_groups.push(std::mem::take(&mut self.bits));
    }

    fn finish(self) -> Option<KeyLists> {
        (!self.overflow).then_some(self.lists)
    }
}

/// The bloom filter of the string attribute values of `rows`, and their attribute keys into
/// `keys`: each distinct resource, scope and attribute/event/link value of the row group is
/// walked once.
fn value_bloom(
    cols: &SpanColumns,
    blobs: &[(&crate::columns::BlobColumn, Bytes); 4],
    rows: &[Row],
    keys: &mut KeyCollector,
) -> Bloom {
    use crate::values::{Source, for_each_key_and_string};
    let mut seen: hashbrown::HashSet<(u8, u32), FastBuild> = hashbrown::HashSet::with_hasher(FastBuild::default());
    let mut values: Vec<[u8; 16]> = Vec::new();
    for r in rows {
        let ids = [
            (0u8, r.resource),
            (1, r.scope),
            (2, r.blobs[0]),
            (3, r.blobs[1]),
            (4, r.blobs[2]),
        ];
        for (kind, id) in ids {
            if (kind >= 2 && id == 0) || !seen.insert((kind, id)) {
                continue;
            }
            let (source, buf) = match kind {
                0 => (Source::Resource, cols.headers.get(id)),
                1 => (Source::Scope, cols.headers.get(id)),
                k => {
                    let (blob, data) = &blobs[k as usize - 2];
                    let source = [Source::SpanAttributes, Source::Events, Source::Links][k as usize - 2];
                    (source, &data[blob.value_range(id)])
                }
            };
            let scope = KeyScope::ALL[usize::from(kind)];
            keys.begin();
            for_each_key_and_string(source, buf, |k| keys.add(scope, k), |s| values.push(Bloom::key_of(s)));
        }
    }
    keys.end_row_group();
    Bloom::of_keys(&values)
}

/// Fills `buf` with a dictionary-encoded INT32 chunk of small values, returning (min, max).
fn dict_small_ints(buf: &mut ChunkBuf, rows: &[Row], value_of: impl Fn(&Row) -> u8) -> (i32, i32) {
    let mut local = [UNSET; 256];
    let (mut lo, mut hi) = (i32::MAX, i32::MIN);
    for r in rows {
        let v = value_of(r);
        let mut l = local[v as usize];
        if l == UNSET {
            l = buf.dict_len;
            local[v as usize] = l;
            buf.dict.extend_from_slice(&i32::from(v).to_le_bytes());
            buf.dict_len += 1;
            lo = lo.min(i32::from(v));
            hi = hi.max(i32::from(v));
        }
        buf.indexes.push(l);
    }
    (lo, hi)
}

/// Encodes `cols` as a data file plus its trace index.
///
/// Every column except the two timestamps is written by [`ChunkBuf`] from the head's own
/// dictionaries; the timestamps go through the Parquet column writer for its
/// `DELTA_BINARY_PACKED` encoder and statistics.
pub fn encode(cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError> {
    let (order, groups) = cols.time_sliced_order(opts.row_group_rows);
    let blobs = [&cols.attributes, &cols.events, &cols.links, &cols.extra].map(|c| (c, c.shared()));
    let dedicated = if opts.dedicated_columns {
        choose_dedicated(cols, &order, &blobs[0].1)
    } else {
        Vec::new()
    };
    let schema = Arc::new(parse_message_type(&schema_with(&dedicated))?);
    let span_keys = dedicated_keys(&dedicated, DedicatedScope::Span);
    let res_keys = dedicated_keys(&dedicated, DedicatedScope::Resource);
    let mut out: Vec<u8> = Vec::with_capacity(cols.len() * 24 + (1 << 16));
    let mut writer = SerializedFileWriter::new(&mut out, schema, Arc::new(props(opts)?))?;
    let descr: Vec<_> = (0..writer.schema_descr().num_columns())
        .map(|i| writer.schema_descr().column(i))
        .collect();
    let mut chunks = ColumnChunks::new(cols, opts, &blobs, &dedicated, &span_keys, &res_keys, descr);

    let bloom = trace_bloom(cols);
    let mut ranges = Vec::new();
    let mut value_blooms = Vec::new();
    let mut trace_blooms = Vec::with_capacity(groups.len());
    let mut trace_starts = Vec::with_capacity(groups.len());
    let mut keys = KeyCollector::new();
    let mut first_row = 0u64;
    let mut fix: Vec<Row> = Vec::with_capacity(opts.row_group_rows * 2);
    for range in groups {
        gather_rows(cols, &order[range], &mut fix);
        let rows = &fix[..];
        let n = rows.len();
        let (bloom, starts) = slice_index(rows);
        trace_blooms.push(bloom);
        trace_starts.push(starts);
        if opts.value_blooms {
            value_blooms.push(value_bloom(cols, &blobs, rows, &mut keys));
        }
        let mut rg = writer.next_row_group()?;
        let (min, max) = chunks.write_row_group(&mut rg, rows)?;
        rg.close()?;
        ranges.push(RowGroupRange {
            min,
            max,
            first_row,
            rows: n as u32,
        });
        first_row += n as u64;
    }
    writer.close()?;
    let row_groups = ranges.len() as u32;
    let left = chunks.left;
    let mut dedicated = dedicated;
    for (d, left) in dedicated
        .iter_mut()
        .filter(|d| d.scope == DedicatedScope::Span)
        .zip(left)
    {
        d.complete = !left;
    }
    Ok(Encoded {
        data: Bytes::from(out),
        rows: order.len() as u64,
        index: TraceIndex {
            row_groups: ranges,
            bloom,
            keys: if opts.value_blooms { keys.finish() } else { None },
            value_blooms,
            trace_blooms,
            trace_starts,
        },
        row_groups,
        dedicated,
    })
}

/// The keys and value types of the dedicated columns of `scope`, in column order.
fn dedicated_keys(dedicated: &[DedicatedColumn], scope: DedicatedScope) -> Vec<(&[u8], ValueType)> {
    dedicated
        .iter()
        .filter(|c| c.scope == scope)
        .map(|c| (c.name.as_bytes(), c.value_type))
        .collect()
}

/// The bloom filter of the block's trace IDs.
fn trace_bloom(cols: &SpanColumns) -> Bloom {
    let mut bloom = Bloom::with_capacity(cols.trace_count());
    for id in cols.traces.keys() {
        bloom.insert(id);
    }
    bloom
}

/// A row group's trace bloom and the earliest and latest start of its traces (`rows` by trace,
/// each trace's rows by start: a trace's first row is its start here).
fn slice_index(rows: &[Row]) -> (Bloom, (u64, u64)) {
    let firsts = || {
        rows.iter()
            .enumerate()
            .filter(|&(i, r)| i == 0 || rows[i - 1].trace_id != r.trace_id)
            .map(|(_, r)| r)
    };
    let mut bloom = Bloom::for_row_group(firsts().count());
    let (mut lo, mut hi) = (u64::MAX, 0);
    for r in firsts() {
        bloom.insert(&r.trace_id);
        lo = lo.min(r.start);
        hi = hi.max(r.start);
    }
    (bloom, (lo.min(hi), hi))
}

/// Gathers every fixed-size field of the rows `rows` of `cols`, in that (block) order, into
/// `fix`; the column writers then read it sequentially. Block order jumps between traces at
/// random in head memory, and gathering column by column stalled on one cache miss at a time
/// per column; here a row's dozen independent loads miss together (the largest cost of
/// `encode` in the ingest profile; docs/benchmarks/ingest.md, "What changed this session").
fn gather_rows(cols: &SpanColumns, rows: &[u32], fix: &mut Vec<Row>) {
    fix.clear();
    for (k, &r) in rows.iter().enumerate() {
        if let Some(&ahead) = rows.get(k + PREFETCH_ROWS) {
            Row::prefetch(cols, ahead as usize);
        }
        fix.push(Row::of(cols, r as usize));
    }
}

/// How each column chunk of a row group of `rows` rows is written, by schema column.
fn chunk_specs(
    descr: &[ColumnDescPtr],
    rows: usize,
) -> impl Fn(usize, bool, bool, Option<Statistics>) -> ChunkSpec + '_ {
    move |c, optional, compress, statistics| ChunkSpec {
        descr: descr[c].clone(),
        rows,
        optional,
        compress,
        statistics,
    }
}

/// The column writers of a block, kept across its row groups: the inputs, and the buffers and
/// maps each row group reuses.
struct ColumnChunks<'a> {
    cols: &'a SpanColumns,
    /// The attribute, event, link and extra blob columns, with their shared values.
    blobs: &'a [(&'a BlobColumn, Bytes); 4],
    dedicated: &'a [DedicatedColumn],
    /// The keys of the span-scope and resource-scope dedicated columns.
    span_keys: &'a [(&'a [u8], ValueType)],
    res_keys: &'a [(&'a [u8], ValueType)],
    descr: Vec<ColumnDescPtr>,
    /// Service name string id by header id, so the service column needs no map lookup per row.
    service_of: Vec<u32>,
    buf: ChunkBuf,
    remap: Remap,
    /// Span-scope dedicated columns: the row group's distinct attribute blobs, by head id.
    slots: Remap,
    splitter: dedicated::Splitter<'a, 'a>,
    vals: Vec<Option<Scalar<'a>>>,
    parents: FastMap<[u8; 8], u32>,
    /// Resource values by header id, computed once per block.
    res_vals: FastMap<u32, Vec<Option<Scalar<'a>>>>,
    /// Per span-scope column: an occurrence of its key stayed in the generic blob.
    left: Vec<bool>,
}

/// A row group's distinct attribute blobs split for the span-scope dedicated columns
/// ([`ColumnChunks::split_attributes`]).
struct SplitAttributes<'a> {
    /// What stays generic of each distinct blob: slot `i` is `rest[rest_at[i]..rest_at[i + 1]]`.
    rest: Vec<u8>,
    rest_at: Vec<usize>,
    /// The dictionary index of each moved value: `moved[slot * columns + i]` for column `i`.
    moved: Vec<u32>,
    /// The dictionary of each span-scope column.
    dicts: Vec<DedicatedDict<'a>>,
}

impl<'a> ColumnChunks<'a> {
    fn new(
        cols: &'a SpanColumns,
        opts: &WriteOptions,
        blobs: &'a [(&'a BlobColumn, Bytes); 4],
        dedicated: &'a [DedicatedColumn],
        span_keys: &'a [(&'a [u8], ValueType)],
        res_keys: &'a [(&'a [u8], ValueType)],
        descr: Vec<ColumnDescPtr>,
    ) -> Self {
        let mut service_of = vec![0u32; cols.headers.len()];
        for (&h, &s) in &cols.service_of {
            service_of[h as usize] = s;
        }
        ColumnChunks {
            cols,
            blobs,
            dedicated,
            span_keys,
            res_keys,
            descr,
            service_of,
            buf: ChunkBuf::new(opts.zstd_level),
            remap: Remap::new(),
            slots: Remap::new(),
            splitter: dedicated::Splitter::new(span_keys),
            vals: vec![None; span_keys.len()],
            parents: FastMap::with_hasher(FastBuild::default()),
            res_vals: FastMap::with_hasher(FastBuild::default()),
            left: vec![false; span_keys.len()],
        }
    }

    /// Writes the column chunks of one row group, `rows` in block order, to `rg`; returns the
    /// least and greatest trace IDs in it.
    fn write_row_group<W: std::io::Write + Send>(
        &mut self,
        rg: &mut SerializedRowGroupWriter<'_, W>,
        rows: &[Row],
    ) -> Result<([u8; 16], [u8; 16]), BlockError> {
        let range = self.write_span_columns(rg, rows)?;
        let split = self.split_attributes(rows);
        self.write_blob_columns(rg, rows, &split)?;
        self.write_dedicated_columns(rg, rows, split)?;
        self.slots.reset();
        Ok(range)
    }

    /// Writes the columns from `trace_id` to `scope`; returns the least and greatest trace IDs.
    fn write_span_columns<W: std::io::Write + Send>(
        &mut self,
        rg: &mut SerializedRowGroupWriter<'_, W>,
        rows: &[Row],
    ) -> Result<([u8; 16], [u8; 16]), BlockError> {
        let n = rows.len();
        let spec = chunk_specs(&self.descr, n);
        let buf = &mut self.buf;

        // trace_id: rows are sorted, so the dictionary is each new ID in turn. Random IDs do
        // not compress; the pages stay uncompressed.
        let mut prev: Option<&[u8; 16]> = None;
        for r in rows {
            let id = &r.trace_id;
            if prev != Some(id) {
                buf.dict.extend_from_slice(id);
                buf.dict_len += 1;
                prev = Some(id);
            }
            buf.indexes.push(buf.dict_len - 1);
        }
        let (min, max) = (rows[0].trace_id, rows[n - 1].trace_id);
        let flba = |v: &[u8]| FixedLenByteArray::from(v.to_vec());
        let st = Statistics::fixed_len_byte_array(Some(flba(&min)), Some(flba(&max)), None, Some(0), false);
        buf.write(rg, spec(col::TRACE_ID, false, false, Some(st)))?;

        // span_id: random, PLAIN, uncompressed.
        for r in rows {
            buf.plain.extend_from_slice(&r.span_id);
        }
        buf.write(rg, spec(col::SPAN_ID, false, false, None))?;

        // parent_span_id: null for roots; parents repeat within a trace.
        for r in rows {
            let p = &r.parent_span_id;
            if *p == [0; 8] {
                buf.def.push(0);
                continue;
            }
            buf.def.push(1);
            let next = buf.dict_len;
            let l = *self.parents.entry(*p).or_insert(next);
            if l == next {
                buf.dict.extend_from_slice(p);
                buf.dict_len += 1;
            }
            buf.indexes.push(l);
        }
        self.parents.clear();
        buf.write(rg, spec(col::PARENT, true, false, None))?;

        let cols = self.cols;
        let remap = &mut self.remap;
        let string = |g: u32| cols.strings.get(g);
        dict_ids(buf, remap, rows, false, |r| r.name, string);
        buf.write(rg, spec(col::NAME, false, false, None))?;

        let (lo, hi) = dict_small_ints(buf, rows, |r| r.kind);
        let st = Statistics::int32(Some(lo), Some(hi), None, Some(0), false);
        buf.write(rg, spec(col::KIND, false, false, Some(st)))?;

        for c in [col::START, col::DURATION] {
            let mut cw = rg
                .next_column()?
                .ok_or_else(|| BlockError::Corrupt("schema has fewer columns than the writer".into()))?;
            let v: Vec<i64> = if c == col::START {
                rows.iter().map(|r| r.start as i64).collect()
            } else {
                rows.iter().map(|r| r.duration).collect()
            };
            cw.typed::<Int64Type>().write_batch(&v, None, None)?;
            cw.close()?;
        }

        let (lo, hi) = dict_small_ints(buf, rows, |r| r.status_code);
        let st = Statistics::int32(Some(lo), Some(hi), None, Some(0), false);
        buf.write(rg, spec(col::STATUS_CODE, false, false, Some(st)))?;

        dict_ids(buf, remap, rows, true, |r| r.status_message, string);
        buf.write(rg, spec(col::STATUS_MESSAGE, true, false, None))?;

        let service_of = &self.service_of;
        let service = |r: &Row| service_of[r.resource as usize];
        dict_ids(buf, remap, rows, false, service, string);
        buf.write(rg, spec(col::SERVICE, false, false, None))?;

        let header = |g: u32| cols.headers.get(g);
        dict_ids(buf, remap, rows, false, |r| r.resource, header);
        buf.write(rg, spec(col::RESOURCE, false, false, None))?;
        dict_ids(buf, remap, rows, false, |r| r.scope, header);
        buf.write(rg, spec(col::SCOPE, false, false, None))?;
        Ok((min, max))
    }

    /// With span-scope dedicated columns, splits each distinct attribute blob of the row group
    /// once, in the order rows first use it: what stays generic goes to `rest`, and each moved
    /// value gets its column's dictionary index at once. A column's chunk then costs one load
    /// per row. Before, each column looked its blob up in a map and read and hashed the value
    /// again: a sixth of a merge of spans whose attribute blobs are all distinct.
    fn split_attributes(&mut self, rows: &[Row]) -> SplitAttributes<'a> {
        let mut split = SplitAttributes {
            rest: Vec::new(),
            rest_at: vec![0],
            moved: Vec::new(),
            dicts: self.span_keys.iter().map(|&(_, t)| DedicatedDict::new(t)).collect(),
        };
        if !self.span_keys.is_empty() {
            let (blob, data) = &self.blobs[0];
            for r in rows {
                let g = r.blobs[0];
                if g == 0 {
                    continue;
                }
                self.slots.memo(g, || {
                    self.splitter.split(
                        &data[blob.value_range(g)],
                        &mut split.rest,
                        &mut self.left,
                        &mut self.vals,
                    );
                    split.rest_at.push(split.rest.len());
                    split
                        .moved
                        .extend(split.dicts.iter_mut().zip(&self.vals).map(|(d, &v)| d.add(v)));
                    (split.rest_at.len() - 2) as u32
                });
            }
        }
        split
    }

    /// Writes the blob columns. Attributes are large and compressible; events, links and extra
    /// are mostly empty (null) and small. With span-scope dedicated columns, the attributes
    /// written are what stayed generic of each blob (`split`).
    fn write_blob_columns<W: std::io::Write + Send>(
        &mut self,
        rg: &mut SerializedRowGroupWriter<'_, W>,
        rows: &[Row],
        split: &SplitAttributes<'_>,
    ) -> Result<(), BlockError> {
        let spec = chunk_specs(&self.descr, rows.len());
        let s = self.span_keys.len();
        for (k, (c, (blob, data))) in [col::ATTRIBUTES, col::EVENTS, col::LINKS, col::EXTRA]
            .into_iter()
            .zip(self.blobs)
            .enumerate()
        {
            if k == 0 && s > 0 {
                let slots = &self.slots;
                let value = |g: u32| {
                    let slot = slots.get(g) as usize;
                    &split.rest[split.rest_at[slot]..split.rest_at[slot + 1]]
                };
                dict_ids(&mut self.buf, &mut self.remap, rows, true, |r| r.blobs[0], value);
            } else {
                let value = |g: u32| &data[blob.value_range(g)];
                dict_ids(&mut self.buf, &mut self.remap, rows, true, |r| r.blobs[k], value);
            }
            self.buf.write(rg, spec(c, true, c == col::ATTRIBUTES, None))?;
        }
        Ok(())
    }

    /// Writes the dedicated columns. A span-scope column's values were moved out of the blobs
    /// (`split`), with their dictionary; a resource-scope column's are copied from each
    /// distinct resource.
    fn write_dedicated_columns<W: std::io::Write + Send>(
        &mut self,
        rg: &mut SerializedRowGroupWriter<'_, W>,
        rows: &[Row],
        split: SplitAttributes<'a>,
    ) -> Result<(), BlockError> {
        let n = rows.len();
        let spec = chunk_specs(&self.descr, n);
        if !self.res_keys.is_empty() {
            for r in rows {
                self.res_vals
                    .entry(r.resource)
                    .or_insert_with(|| dedicated::resource_values(self.cols.headers.get(r.resource), self.res_keys));
            }
        }
        // The index of a moved value of span-scope column `i` in its dictionary, for row `r`.
        let s = self.span_keys.len();
        let (moved, slots, res_vals) = (&split.moved, &self.slots, &self.res_vals);
        let moved_of = |r: &Row, i: usize| {
            if r.blobs[0] == 0 {
                ABSENT
            } else {
                moved[slots.get(r.blobs[0]) as usize * s + i]
            }
        };
        let (mut si, mut ri) = (0, 0);
        let mut dicts = split.dicts.into_iter();
        for (k, d) in self.dedicated.iter().enumerate() {
            let span = d.scope == DedicatedScope::Span;
            let i = if span { si } else { ri };
            let dict = if span {
                si += 1;
                Some(dicts.next().expect("one dictionary per span-scope column"))
            } else {
                ri += 1;
                None
            };
            let value_of = |g: u32| res_vals.get(&g).and_then(|v| v[i]);
            if d.value_type == ValueType::Bool {
                let value = |r: &Row| {
                    if !span {
                        return value_of(r.resource);
                    }
                    match moved_of(r, i) {
                        ABSENT => None,
                        b => Some(Scalar::Bool(b == 1)),
                    }
                };
                let values: Vec<Option<Scalar<'_>>> = rows.iter().map(value).collect();
                write_dedicated_bools(rg, &values)?;
                continue;
            }
            let st = match dict {
                Some(dict) => dict.fill(&mut self.buf, n, |j| moved_of(&rows[j], i)),
                None => dedicated_chunk(
                    &mut self.buf,
                    &mut self.remap,
                    d.value_type,
                    rows,
                    |r| r.resource,
                    value_of,
                ),
            };
            self.buf.write(rg, spec(col::EXTRA + 1 + k, true, true, Some(st)))?;
        }
        Ok(())
    }
}
