//! Writes a block from [`SpanColumns`].

use super::chunk::{ChunkBuf, ChunkSpec};
use super::{SCHEMA, col};
use crate::BlockError;
use crate::columns::SpanColumns;
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
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;
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
struct Remap {
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
    fn memo(&mut self, g: u32, f: impl FnOnce() -> u32) -> u32 {
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

    fn reset(&mut self) {
        for &g in &self.touched {
            self.map[g as usize] = UNSET;
        }
        self.touched.clear();
    }
}

/// The fixed-size fields of one span, gathered from the head's columns in block order.
struct Row {
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

/// Longest string statistic written (Parquet's default truncation length).
const STATISTICS_BYTES: usize = 64;

/// A lower bound of `v` of at most [`STATISTICS_BYTES`] (cut at a character boundary when
/// `v` is UTF-8), and whether it is `v` itself.
fn truncated_min(v: &[u8]) -> (Vec<u8>, bool) {
    if v.len() <= STATISTICS_BYTES {
        return (v.to_vec(), true);
    }
    let mut cut = STATISTICS_BYTES;
    if let Ok(s) = std::str::from_utf8(v) {
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
    }
    (v[..cut].to_vec(), false)
}

/// An upper bound of `v` of at most [`STATISTICS_BYTES`], and whether it is `v` itself: the
/// prefix with its last character (UTF-8) or byte incremented; `v` whole when no prefix can be.
fn truncated_max(v: &[u8]) -> (Vec<u8>, bool) {
    if v.len() <= STATISTICS_BYTES {
        return (v.to_vec(), true);
    }
    if let Ok(s) = std::str::from_utf8(v) {
        let mut cut = STATISTICS_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut chars: Vec<char> = s[..cut].chars().collect();
        while let Some(c) = chars.pop() {
            let next = match c as u32 + 1 {
                0xD800 => Some('\u{E000}'),
                n => char::from_u32(n),
            };
            if let Some(n) = next {
                chars.push(n);
                return (chars.into_iter().collect::<String>().into_bytes(), false);
            }
        }
    } else {
        let mut p = v[..STATISTICS_BYTES].to_vec();
        while let Some(b) = p.pop() {
            if b < 0xFF {
                p.push(b + 1);
                return (p, false);
            }
        }
    }
    (v.to_vec(), true)
}

/// Memoised for a source without a value in a dedicated column: the row is null.
const ABSENT: u32 = u32::MAX - 1;

/// The dictionary of one dedicated column chunk while it is built: each distinct value once,
/// PLAIN-encoded, with the bounds for its statistics. Booleans keep no dictionary: their
/// "index" is the value (0 or 1), for [`write_dedicated_bools`].
struct DedicatedDict<'a> {
    ty: ValueType,
    dict: Vec<u8>,
    len: u32,
    strings: FastMap<&'a [u8], u32>,
    numbers: FastMap<u64, u32>,
    strs: (Option<&'a [u8]>, Option<&'a [u8]>),
    ints: (Option<i64>, Option<i64>),
    doubles: (Option<f64>, Option<f64>),
}

impl<'a> DedicatedDict<'a> {
    fn new(ty: ValueType) -> Self {
        DedicatedDict {
            ty,
            dict: Vec::new(),
            len: 0,
            strings: FastMap::with_hasher(FastBuild::default()),
            numbers: FastMap::with_hasher(FastBuild::default()),
            strs: (None, None),
            ints: (None, None),
            doubles: (None, None),
        }
    }

    /// The dictionary index of `v` ([`ABSENT`] for none), adding it if it is new. A value of
    /// another type than the column's is stored as the type's zero (it cannot occur: only
    /// values of the column's type are moved to it).
    fn add(&mut self, v: Option<Scalar<'a>>) -> u32 {
        let Some(v) = v else { return ABSENT };
        match self.ty {
            ValueType::Bool => u32::from(matches!(v, Scalar::Bool(true))),
            ValueType::String => {
                let b: &'a [u8] = match v {
                    Scalar::Str(b) => b,
                    _ => b"",
                };
                if let Some(&l) = self.strings.get(b) {
                    return l;
                }
                self.dict.extend_from_slice(&(b.len() as u32).to_le_bytes());
                self.dict.extend_from_slice(b);
                let (lo, hi) = &mut self.strs;
                *lo = Some(lo.map_or(b, |m| m.min(b)));
                *hi = Some(hi.map_or(b, |m| m.max(b)));
                self.strings.insert(b, self.len);
                self.len += 1;
                self.len - 1
            }
            ty => {
                // Integers and doubles are 8-byte PLAIN dictionary values, told apart by bits.
                let bits = match v {
                    Scalar::Int(i) if ty == ValueType::Int => i as u64,
                    Scalar::Double(d) if ty == ValueType::Double => d.to_bits(),
                    _ => 0,
                };
                if let Some(&l) = self.numbers.get(&bits) {
                    return l;
                }
                self.dict.extend_from_slice(&bits.to_le_bytes());
                if ty == ValueType::Int {
                    let i = bits as i64;
                    let (lo, hi) = &mut self.ints;
                    *lo = Some(lo.map_or(i, |m| m.min(i)));
                    *hi = Some(hi.map_or(i, |m| m.max(i)));
                } else {
                    // As Parquet asks: NaN takes no part in the bounds.
                    let d = f64::from_bits(bits);
                    if !d.is_nan() {
                        let (lo, hi) = &mut self.doubles;
                        *lo = Some(lo.map_or(d, |m| m.min(d)));
                        *hi = Some(hi.map_or(d, |m| m.max(d)));
                    }
                }
                self.numbers.insert(bits, self.len);
                self.len += 1;
                self.len - 1
            }
        }
    }

    /// Fills `buf` with the chunk: the dictionary, and a definition level and index per row
    /// from `index_of(row)`. Returns the chunk's statistics.
    fn fill(mut self, buf: &mut ChunkBuf, rows: usize, mut index_of: impl FnMut(usize) -> u32) -> Statistics {
        use parquet::data_type::ByteArray;
        let mut nulls = 0u64;
        for r in 0..rows {
            let l = index_of(r);
            if l == ABSENT {
                buf.def.push(0);
                nulls += 1;
            } else {
                buf.def.push(1);
                buf.indexes.push(l);
            }
        }
        std::mem::swap(&mut buf.dict, &mut self.dict);
        buf.dict_len = self.len;
        match self.ty {
            ValueType::String => {
                // Bounds of at most 64 bytes, as the generic writer's default: a footer keeps two
                // per column and row group, and values such as URLs can be long.
                let lo = self.strs.0.map(truncated_min);
                let hi = self.strs.1.map(truncated_max);
                let exact = |v: &Option<(Vec<u8>, bool)>| v.as_ref().is_none_or(|v| v.1);
                let (min_exact, max_exact) = (exact(&lo), exact(&hi));
                let ba = |v: Option<(Vec<u8>, bool)>| v.map(|v| ByteArray::from(v.0));
                Statistics::ByteArray(
                    parquet::file::statistics::ValueStatistics::new(ba(lo), ba(hi), None, Some(nulls), false)
                        .with_min_is_exact(min_exact)
                        .with_max_is_exact(max_exact),
                )
            }
            ValueType::Int => Statistics::int64(self.ints.0, self.ints.1, None, Some(nulls), false),
            // A zero bound is written -0.0 as the minimum and +0.0 as the maximum.
            _ => Statistics::double(
                self.doubles.0.map(|d| if d == 0.0 { -0.0 } else { d }),
                self.doubles.1.map(|d| if d == 0.0 { 0.0 } else { d }),
                None,
                Some(nulls),
                false,
            ),
        }
    }
}

/// Fills `buf` with the dedicated column chunk of `rows` for a string, integer or double key,
/// and returns its statistics. A row's value comes from its source, `source(row)` (its
/// resource header); `value_of(source)` gives it (`None` when the source lacks the key).
///
/// Work is per distinct source, not per row: a row costs one array load in `memo`. Each
/// distinct value is one dictionary entry, and the statistics come from the dictionary. The
/// generic column writer hashed, compared and allocated a `ByteArray` for every row, a quarter
/// of a merge's CPU (compaction profile, BENCHMARKS.md).
fn dedicated_chunk<'a>(
    buf: &mut ChunkBuf,
    memo: &mut Remap,
    ty: ValueType,
    rows: &[Row],
    source: impl Fn(&Row) -> u32,
    value_of: impl Fn(u32) -> Option<Scalar<'a>>,
) -> Statistics {
    let mut d = DedicatedDict::new(ty);
    let index: Vec<u32> = rows
        .iter()
        .map(|r| {
            let g = source(r);
            memo.memo(g, || d.add(value_of(g)))
        })
        .collect();
    memo.reset();
    d.fill(buf, rows.len(), |r| index[r])
}

/// Writes a boolean dedicated column chunk through the Parquet column writer (statistics for
/// pruning); [`dedicated_chunk`] writes the other types.
fn write_dedicated_bools<W: std::io::Write + Send>(
    rg: &mut parquet::file::writer::SerializedRowGroupWriter<'_, W>,
    values: &[Option<Scalar<'_>>],
) -> Result<(), BlockError> {
    use parquet::data_type::BoolType;
    let mut cw = rg
        .next_column()?
        .ok_or_else(|| BlockError::Corrupt("schema has fewer columns than the writer".into()))?;
    let def: Vec<i16> = values.iter().map(|v| i16::from(v.is_some())).collect();
    let v: Vec<bool> = values
        .iter()
        .flatten()
        .map(|s| matches!(s, Scalar::Bool(true)))
        .collect();
    cw.typed::<BoolType>().write_batch(&v, Some(&def), None)?;
    cw.close()?;
    Ok(())
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

/// Encodes `cols` as a v1 data file plus its trace index.
///
/// Every column except the two timestamps is written by [`ChunkBuf`] from the head's own
/// dictionaries; the timestamps go through the Parquet column writer for its
/// `DELTA_BINARY_PACKED` encoder and statistics.
pub fn encode(cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError> {
    let order = cols.sorted_order();
    let blobs = [&cols.attributes, &cols.events, &cols.links, &cols.extra].map(|c| (c, c.shared()));
    let dedicated = if opts.dedicated_columns {
        choose_dedicated(cols, &order, &blobs[0].1)
    } else {
        Vec::new()
    };
    let schema = Arc::new(parse_message_type(&schema_with(&dedicated))?);
    let span_keys: Vec<(&[u8], ValueType)> = dedicated
        .iter()
        .filter(|c| c.scope == DedicatedScope::Span)
        .map(|c| (c.name.as_bytes(), c.value_type))
        .collect();
    let res_keys: Vec<(&[u8], ValueType)> = dedicated
        .iter()
        .filter(|c| c.scope == DedicatedScope::Resource)
        .map(|c| (c.name.as_bytes(), c.value_type))
        .collect();
    // Resource values by header id, computed once per block.
    let mut res_vals: FastMap<u32, Vec<Option<Scalar<'_>>>> = FastMap::with_hasher(FastBuild::default());
    // Per span-scope column: an occurrence of its key stayed in the generic blob.
    let mut left = vec![false; span_keys.len()];
    let mut out: Vec<u8> = Vec::with_capacity(cols.len() * 24 + (1 << 16));
    let mut writer = SerializedFileWriter::new(&mut out, schema, Arc::new(props(opts)?))?;
    let descr: Vec<_> = (0..writer.schema_descr().num_columns())
        .map(|i| writer.schema_descr().column(i))
        .collect();

    // Service name string id by header id, so the service column needs no map lookup per row.
    let mut service_of = vec![0u32; cols.headers.len()];
    for (&h, &s) in &cols.service_of {
        service_of[h as usize] = s;
    }

    let mut bloom = Bloom::with_capacity(cols.trace_count());
    for id in cols.traces.keys() {
        bloom.insert(id);
    }
    let mut ranges = Vec::new();
    let mut value_blooms = Vec::new();
    let mut keys = KeyCollector::new();
    let mut first_row = 0u64;

    let mut chunks = Vec::new();
    {
        // Keep a trace within one row group where possible: extend a group to the end of the
        // trace it stops in, unless that trace is itself huge.
        let mut s = 0;
        while s < order.len() {
            let mut e = (s + opts.row_group_rows).min(order.len());
            let limit = (e + opts.row_group_rows).min(order.len());
            while e < limit && cols.trace_id[order[e] as usize] == cols.trace_id[order[e - 1] as usize] {
                e += 1;
            }
            chunks.push(s..e);
            s = e;
        }
    }

    let mut buf = ChunkBuf::new(opts.zstd_level);
    let mut fix: Vec<Row> = Vec::with_capacity(opts.row_group_rows * 2);
    let mut remap = Remap::new();
    // Span-scope dedicated columns: the row group's distinct attribute blobs, by head id.
    let mut slots = Remap::new();
    let mut splitter = dedicated::Splitter::new(&span_keys);
    let mut vals: Vec<Option<Scalar<'_>>> = vec![None; span_keys.len()];
    let mut parents: FastMap<[u8; 8], u32> = FastMap::with_hasher(FastBuild::default());
    for range in chunks {
        // One pass gathers every fixed-size field of the row group's rows, in block order, into
        // `fix`; the column loops below then read it sequentially. Block order jumps between
        // traces at random in head memory, and gathering column by column stalled on one cache
        // miss at a time per column; here a row's dozen independent loads miss together (the
        // largest cost of `encode` in the ingest profile, BENCHMARKS.md).
        let rows = &order[range.clone()];
        let n = rows.len();
        fix.clear();
        for (k, &r) in rows.iter().enumerate() {
            if let Some(&ahead) = rows.get(k + PREFETCH_ROWS) {
                Row::prefetch(cols, ahead as usize);
            }
            fix.push(Row::of(cols, r as usize));
        }
        let rows = &fix[..];
        if opts.value_blooms {
            value_blooms.push(value_bloom(cols, &blobs, rows, &mut keys));
        }
        let mut rg = writer.next_row_group()?;
        let spec = |c: usize, optional: bool, compress: bool, statistics: Option<Statistics>| ChunkSpec {
            descr: descr[c].clone(),
            rows: n,
            optional,
            compress,
            statistics,
        };

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
        buf.write(&mut rg, spec(col::TRACE_ID, false, false, Some(st)))?;

        // span_id: random, PLAIN, uncompressed.
        for r in rows {
            buf.plain.extend_from_slice(&r.span_id);
        }
        buf.write(&mut rg, spec(col::SPAN_ID, false, false, None))?;

        // parent_span_id: null for roots; parents repeat within a trace.
        for r in rows {
            let p = &r.parent_span_id;
            if *p == [0; 8] {
                buf.def.push(0);
                continue;
            }
            buf.def.push(1);
            let next = buf.dict_len;
            let l = *parents.entry(*p).or_insert(next);
            if l == next {
                buf.dict.extend_from_slice(p);
                buf.dict_len += 1;
            }
            buf.indexes.push(l);
        }
        parents.clear();
        buf.write(&mut rg, spec(col::PARENT, true, false, None))?;

        let string = |g: u32| cols.strings.get(g);
        dict_ids(&mut buf, &mut remap, rows, false, |r| r.name, string);
        buf.write(&mut rg, spec(col::NAME, false, false, None))?;

        let (lo, hi) = dict_small_ints(&mut buf, rows, |r| r.kind);
        let st = Statistics::int32(Some(lo), Some(hi), None, Some(0), false);
        buf.write(&mut rg, spec(col::KIND, false, false, Some(st)))?;

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

        let (lo, hi) = dict_small_ints(&mut buf, rows, |r| r.status_code);
        let st = Statistics::int32(Some(lo), Some(hi), None, Some(0), false);
        buf.write(&mut rg, spec(col::STATUS_CODE, false, false, Some(st)))?;

        dict_ids(&mut buf, &mut remap, rows, true, |r| r.status_message, string);
        buf.write(&mut rg, spec(col::STATUS_MESSAGE, true, false, None))?;

        let service = |r: &Row| service_of[r.resource as usize];
        dict_ids(&mut buf, &mut remap, rows, false, service, string);
        buf.write(&mut rg, spec(col::SERVICE, false, false, None))?;

        let header = |g: u32| cols.headers.get(g);
        dict_ids(&mut buf, &mut remap, rows, false, |r| r.resource, header);
        buf.write(&mut rg, spec(col::RESOURCE, false, false, None))?;
        dict_ids(&mut buf, &mut remap, rows, false, |r| r.scope, header);
        buf.write(&mut rg, spec(col::SCOPE, false, false, None))?;

        // The blobs: attributes are large and compressible; events, links and extra are
        // mostly empty (null) and small.
        // With span-scope dedicated columns, each distinct attribute blob of the row group is
        // split once, in the order rows first use it: what stays generic goes to `rest`
        // (`rest_at[slot]..rest_at[slot + 1]`), and each moved value gets its column's
        // dictionary index at once (`moved[slot * s + i]`). A column's chunk then costs one
        // load per row. Before, each column looked its blob up in a map and read and hashed the
        // value again: a sixth of a merge of spans whose attribute blobs are all distinct.
        let s = span_keys.len();
        let mut rest: Vec<u8> = Vec::new();
        let mut rest_at: Vec<usize> = vec![0];
        let mut moved: Vec<u32> = Vec::new();
        let mut dicts: Vec<DedicatedDict<'_>> = span_keys.iter().map(|&(_, t)| DedicatedDict::new(t)).collect();
        if s > 0 {
            let (blob, data) = &blobs[0];
            for r in rows {
                let g = r.blobs[0];
                if g == 0 {
                    continue;
                }
                slots.memo(g, || {
                    splitter.split(&data[blob.value_range(g)], &mut rest, &mut left, &mut vals);
                    rest_at.push(rest.len());
                    moved.extend(dicts.iter_mut().zip(&vals).map(|(d, &v)| d.add(v)));
                    (rest_at.len() - 2) as u32
                });
            }
        }
        // The index of a moved value of span-scope column `i` in its dictionary, for row `r`.
        let moved_of = |r: &Row, i: usize| {
            if r.blobs[0] == 0 {
                ABSENT
            } else {
                moved[slots.get(r.blobs[0]) as usize * s + i]
            }
        };
        for (k, (c, (blob, data))) in [col::ATTRIBUTES, col::EVENTS, col::LINKS, col::EXTRA]
            .into_iter()
            .zip(&blobs)
            .enumerate()
        {
            if k == 0 && s > 0 {
                let value = |g: u32| {
                    let slot = slots.get(g) as usize;
                    &rest[rest_at[slot]..rest_at[slot + 1]]
                };
                dict_ids(&mut buf, &mut remap, rows, true, |r| r.blobs[0], value);
            } else {
                let value = |g: u32| &data[blob.value_range(g)];
                dict_ids(&mut buf, &mut remap, rows, true, |r| r.blobs[k], value);
            }
            buf.write(&mut rg, spec(c, true, c == col::ATTRIBUTES, None))?;
        }
        if !res_keys.is_empty() {
            for r in rows {
                res_vals
                    .entry(r.resource)
                    .or_insert_with(|| dedicated::resource_values(cols.headers.get(r.resource), &res_keys));
            }
        }
        let (mut si, mut ri) = (0, 0);
        let mut dicts = dicts.into_iter();
        for (k, d) in dedicated.iter().enumerate() {
            // A span-scope column's values were moved out of the blobs above, with their
            // dictionary; a resource-scope column's are copied from each distinct resource.
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
                write_dedicated_bools(&mut rg, &values)?;
                continue;
            }
            let st = match dict {
                Some(dict) => dict.fill(&mut buf, n, |j| moved_of(&rows[j], i)),
                None => dedicated_chunk(&mut buf, &mut remap, d.value_type, rows, |r| r.resource, value_of),
            };
            buf.write(&mut rg, spec(col::EXTRA + 1 + k, true, true, Some(st)))?;
        }
        slots.reset();
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
        },
        row_groups,
        dedicated,
    })
}

#[cfg(test)]
mod tests {
    use super::{truncated_max, truncated_min};

    #[test]
    fn string_statistics_are_cut_to_64_bytes() {
        let short = b"GET /api".to_vec();
        assert_eq!(truncated_min(&short), (short.clone(), true));
        assert_eq!(truncated_max(&short), (short.clone(), true));
        // UTF-8: cut at a character boundary; the maximum's last character is incremented.
        let s = "é".repeat(40);
        let (lo, exact) = truncated_min(s.as_bytes());
        assert!(!exact && lo == "é".repeat(32).as_bytes());
        let (hi, exact) = truncated_max(s.as_bytes());
        assert!(!exact && hi == format!("{}ê", "é".repeat(31)).as_bytes());
        assert!(hi.as_slice() > s.as_bytes());
        // Bytes: trailing 0xFF carries into the byte before.
        let mut b = vec![0x80u8; 70];
        b[62] = 0x41;
        b[63] = 0xFF;
        let (hi, _) = truncated_max(&b);
        assert_eq!(hi, [&[0x80u8; 62][..], &[0x42]].concat());
        // Nothing to round up: the value itself.
        let all = vec![0xFFu8; 70];
        assert_eq!(truncated_max(&all), (all.clone(), true));
    }
}
