//! The chunks of the dedicated attribute columns: each column's dictionary and statistics
//! (string bounds cut to 64 bytes), and the boolean columns through Parquet's column writer.

use super::chunk::ChunkBuf;
use super::writer::{Remap, Row};
use crate::BlockError;
use crate::dedicated::Scalar;
use crate::hash::{FastBuild, FastMap};
use crate::meta::ValueType;
use parquet::file::statistics::Statistics;
use parquet::file::writer::SerializedRowGroupWriter;

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
pub(super) const ABSENT: u32 = u32::MAX - 1;

/// The dictionary of one dedicated column chunk while it is built: each distinct value once,
/// PLAIN-encoded, with the bounds for its statistics. Booleans keep no dictionary: their
/// "index" is the value (0 or 1), for [`write_dedicated_bools`].
pub(super) struct DedicatedDict<'a> {
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
    pub(super) fn new(ty: ValueType) -> Self {
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
    pub(super) fn add(&mut self, v: Option<Scalar<'a>>) -> u32 {
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
    pub(super) fn fill(
        mut self,
        buf: &mut ChunkBuf,
        rows: usize,
        mut index_of: impl FnMut(usize) -> u32,
    ) -> Statistics {
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
/// of a merge's CPU (compaction profile; docs/benchmarks/all-in-cost-and-compaction.md,
/// "2026-11-26: the merge 3.6× cheaper, and all of it counted").
pub(super) fn dedicated_chunk<'a>(
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
pub(super) fn write_dedicated_bools<W: std::io::Write + Send>(
    rg: &mut SerializedRowGroupWriter<'_, W>,
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
