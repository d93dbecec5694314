//! Column chunks encoded by weft itself, for the columns whose dictionary the head already has.
//!
//! The generic Parquet column writer hashes every value to build a dictionary. Most columns
//! do not need that: span names, status messages, resource and scope headers are interned in
//! the head, attribute/event/link blobs are de-duplicated there ([`crate::columns::BlobColumn`]),
//! and trace IDs arrive sorted. For them the block writer maps head ids to row-group-local
//! dictionary indexes with an array lookup and writes the pages here. Profiles showed the
//! re-hashing, compares and `ByteArray` refcounting as the largest share of block encoding
//! (docs/benchmarks/ingest.md, "What changed this session").
//!
//! The output is standard Parquet, the same as the generic writer would produce: one PLAIN
//! dictionary page and one v1 data page of `RLE_DICTIONARY` indexes (or one PLAIN data page),
//! definition levels in the RLE/bit-packed hybrid encoding, optional zstd per chunk. Readers
//! need nothing special; DuckDB reads it (tests/integration).

use crate::BlockError;
use bytes::Bytes;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedPageWriter, SerializedRowGroupWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

/// Bits needed to store values up to `max`.
fn bit_width(max: u32) -> u8 {
    (32 - max.leading_zeros()) as u8
}

/// Appends `values` in Parquet's RLE/bit-packed hybrid encoding with `width` bits per value.
///
/// Runs of 8 or more equal values become RLE runs; everything else is bit-packed in groups of
/// 8 (the last group padded with zeros, which readers ignore past the value count).
pub fn rle_hybrid(values: &[u32], width: u8, out: &mut Vec<u8>) {
    let value_bytes = (width as usize).div_ceil(8);
    let run_at = |i: usize| {
        let v = values[i];
        values[i..].iter().take_while(|&&x| x == v).count()
    };
    let mut i = 0;
    while i < values.len() {
        let run = run_at(i);
        if run >= 8 {
            put_varint(out, (run as u64) << 1);
            out.extend_from_slice(&values[i].to_le_bytes()[..value_bytes]);
            i += run;
            continue;
        }
        // Bit-packed groups of 8 until a run of 8 or more starts at a group boundary.
        let start = i;
        loop {
            i += 8;
            if i >= values.len() || run_at(i) >= 8 {
                break;
            }
        }
        let end = i.min(values.len());
        let groups = (i - start) / 8;
        put_varint(out, ((groups as u64) << 1) | 1);
        let mut acc: u64 = 0;
        let mut bits = 0u32;
        let padding = std::iter::repeat_n(0, start + groups * 8 - end);
        for v in values[start..end].iter().copied().chain(padding) {
            acc |= u64::from(v) << bits;
            bits += u32::from(width);
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        // groups * 8 * width is a multiple of 8 bits, so nothing is left over.
        debug_assert_eq!(bits, 0);
        i = end;
    }
}

fn zstd_err(e: std::io::Error) -> BlockError {
    BlockError::Parquet(parquet::errors::ParquetError::General(format!("zstd: {e}")))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A column chunk being assembled: a dictionary (or none, for PLAIN) plus per-row values.
///
/// Reused across columns and row groups so its buffers are allocated once per block.
#[derive(Default)]
pub struct ChunkBuf {
    /// PLAIN-encoded dictionary values.
    pub dict: Vec<u8>,
    pub dict_len: u32,
    /// Dictionary index of each non-null value.
    pub indexes: Vec<u32>,
    /// PLAIN-encoded values, when there is no dictionary.
    pub plain: Vec<u8>,
    /// Definition level of each row (0 null, 1 present) for optional columns.
    pub def: Vec<u32>,
    body: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    zstd_level: i32,
}

/// How a chunk is written.
pub struct ChunkSpec {
    pub descr: ColumnDescPtr,
    pub rows: usize,
    pub optional: bool,
    pub compress: bool,
    pub statistics: Option<Statistics>,
}

impl ChunkBuf {
    pub fn new(zstd_level: i32) -> Self {
        ChunkBuf {
            zstd_level,
            ..ChunkBuf::default()
        }
    }

    pub fn clear(&mut self) {
        self.dict.clear();
        self.dict_len = 0;
        self.indexes.clear();
        self.plain.clear();
        self.def.clear();
    }

    /// Adds a BYTE_ARRAY dictionary value.
    #[inline]
    pub fn dict_bytes(&mut self, v: &[u8]) {
        self.dict.extend_from_slice(&(v.len() as u32).to_le_bytes());
        self.dict.extend_from_slice(v);
        self.dict_len += 1;
    }

    fn compress(&mut self, data: &[u8]) -> Result<Vec<u8>, BlockError> {
        if self.zstd.is_none() {
            let c = zstd::bulk::Compressor::new(self.zstd_level).map_err(zstd_err)?;
            self.zstd = Some(c);
        }
        let z = self.zstd.as_mut().expect("set above");
        z.compress(data).map_err(zstd_err)
    }

    /// Encodes the chunk and appends it to `rg`, then clears the buffer. Uses the dictionary
    /// when `dict_len > 0`, otherwise the PLAIN values.
    pub fn write<W: std::io::Write + Send>(
        &mut self,
        rg: &mut SerializedRowGroupWriter<'_, W>,
        spec: ChunkSpec,
    ) -> Result<(), BlockError> {
        let dictionary = self.dict_len > 0;
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        if spec.optional {
            debug_assert_eq!(self.def.len(), spec.rows);
            body.extend_from_slice(&[0; 4]);
            rle_hybrid(&self.def, 1, &mut body);
            let n = (body.len() - 4) as u32;
            body[..4].copy_from_slice(&n.to_le_bytes());
        }
        if dictionary {
            let w = bit_width(self.dict_len - 1).max(1);
            body.push(w);
            rle_hybrid(&self.indexes, w, &mut body);
        } else {
            body.extend_from_slice(&self.plain);
        }

        let codec = if spec.compress {
            Compression::ZSTD(ZstdLevel::try_new(self.zstd_level)?)
        } else {
            Compression::UNCOMPRESSED
        };
        let mut out = TrackedWrite::new(Vec::with_capacity(body.len() + self.dict.len() + 64));
        let mut uncompressed = 0u64;
        let mut compressed = 0u64;
        let dict_spec = {
            let mut pw = SerializedPageWriter::new(&mut out);
            let dict_spec = if dictionary {
                let buf = if spec.compress {
                    let dict = std::mem::take(&mut self.dict);
                    let c = self.compress(&dict);
                    self.dict = dict;
                    Bytes::from(c?)
                } else {
                    Bytes::copy_from_slice(&self.dict)
                };
                let page = Page::DictionaryPage {
                    buf,
                    num_values: self.dict_len,
                    encoding: Encoding::PLAIN,
                    is_sorted: false,
                };
                let s = pw.write_page(CompressedPage::new(page, self.dict.len()))?;
                uncompressed += s.uncompressed_size as u64;
                compressed += s.compressed_size as u64;
                Some(s)
            } else {
                None
            };
            let buf = if spec.compress {
                Bytes::from(self.compress(&body)?)
            } else {
                Bytes::copy_from_slice(&body)
            };
            let page = Page::DataPage {
                buf,
                num_values: spec.rows as u32,
                encoding: if dictionary {
                    Encoding::RLE_DICTIONARY
                } else {
                    Encoding::PLAIN
                },
                def_level_encoding: Encoding::RLE,
                rep_level_encoding: Encoding::RLE,
                statistics: None,
            };
            let s = pw.write_page(CompressedPage::new(page, body.len()))?;
            uncompressed += s.uncompressed_size as u64;
            compressed += s.compressed_size as u64;
            pw.close()?;
            (dict_spec, s)
        };
        self.body = body;
        let (dict_spec, data_spec) = dict_spec;
        let bytes = Bytes::from(out.into_inner()?);

        let mut encodings = vec![Encoding::PLAIN, Encoding::RLE];
        if dictionary {
            encodings.push(Encoding::RLE_DICTIONARY);
        }
        let mut meta = ColumnChunkMetaData::builder(spec.descr)
            .set_compression(codec)
            .set_encodings(encodings)
            .set_num_values(spec.rows as i64)
            .set_total_compressed_size(compressed as i64)
            .set_total_uncompressed_size(uncompressed as i64)
            .set_dictionary_page_offset(dict_spec.as_ref().map(|s| s.offset as i64))
            .set_data_page_offset(data_spec.offset as i64);
        if let Some(st) = spec.statistics {
            meta = meta.set_statistics(st);
        }
        let close = ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: spec.rows as u64,
            metadata: meta.build()?,
            bloom_filter: None,
            column_index: None,
            // No page index: weft reads whole chunks and never needs one, and without it every
            // byte between the magic and the footer is in a checksummed chunk (issue 45).
            offset_index: None,
        };
        rg.append_column(&bytes, close)?;
        self.clear();
        Ok(())
    }
}

/// Decodes `count` values of Parquet's RLE/bit-packed hybrid encoding with `width` bits per
/// value from `data` into `out`: the inverse of [`rle_hybrid`], for any conforming writer.
/// Fails (instead of panicking) on truncated or malformed input.
pub fn decode_rle_hybrid(data: &[u8], width: u8, count: usize, out: &mut Vec<u32>) -> Result<(), String> {
    if width > 32 {
        return Err(format!("bit width {width} is over 32"));
    }
    let value_bytes = (width as usize).div_ceil(8);
    let mask: u64 = if width == 32 {
        u32::MAX as u64
    } else {
        (1u64 << width) - 1
    };
    let goal = out.len() + count;
    let mut p = 0usize;
    while out.len() < goal {
        let mut header = 0u64;
        let mut shift = 0;
        loop {
            let b = *data.get(p).ok_or("run header past the end of the page")?;
            p += 1;
            header |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err("run header varint too long".into());
            }
        }
        if header & 1 == 0 {
            let run = (header >> 1) as usize;
            let bytes = data
                .get(p..p + value_bytes)
                .ok_or("RLE value past the end of the page")?;
            p += value_bytes;
            let mut v = [0u8; 4];
            v[..value_bytes].copy_from_slice(bytes);
            let take = run.min(goal - out.len());
            out.extend(std::iter::repeat_n(u32::from_le_bytes(v), take));
        } else {
            let groups = (header >> 1) as usize;
            let bytes = groups
                .checked_mul(width as usize)
                .and_then(|len| data.get(p..p.checked_add(len)?))
                .ok_or("bit-packed run past the end of the page")?;
            p += bytes.len();
            let values = groups.saturating_mul(8).min(goal - out.len());
            if width == 0 {
                out.extend(std::iter::repeat_n(0, values));
                continue;
            }
            let mut acc = 0u64;
            let mut bits = 0u32;
            let mut it = bytes.iter();
            for _ in 0..values {
                while bits < width as u32 {
                    acc |= (*it.next().ok_or("bit-packed run too short")? as u64) << bits;
                    bits += 8;
                }
                out.push((acc & mask) as u32);
                acc >>= width;
                bits -= width as u32;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference decoder of the hybrid encoding, independent of the encoder's structure.
    fn decode(mut b: &[u8], width: u8, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let value_bytes = (width as usize).div_ceil(8);
        while out.len() < n {
            let mut h = 0u64;
            let mut shift = 0;
            loop {
                let x = b[0];
                b = &b[1..];
                h |= u64::from(x & 0x7f) << shift;
                shift += 7;
                if x < 0x80 {
                    break;
                }
            }
            if h & 1 == 0 {
                let mut v = [0u8; 4];
                v[..value_bytes].copy_from_slice(&b[..value_bytes]);
                b = &b[value_bytes..];
                out.extend(std::iter::repeat_n(u32::from_le_bytes(v), (h >> 1) as usize));
            } else {
                let count = (h >> 1) as usize * 8;
                let nbytes = count * width as usize / 8;
                let (bits, rest) = b.split_at(nbytes);
                b = rest;
                for k in 0..count {
                    let mut v = 0u32;
                    for j in 0..width as usize {
                        let bit = k * width as usize + j;
                        v |= u32::from((bits[bit / 8] >> (bit % 8)) & 1) << j;
                    }
                    out.push(v);
                }
            }
        }
        assert!(b.is_empty(), "trailing bytes");
        out.truncate(n);
        out
    }

    #[test]
    fn rle_hybrid_round_trips() {
        let cases: Vec<Vec<u32>> = vec![
            vec![],
            vec![0],
            vec![1, 2, 3],
            vec![5; 8],
            vec![5; 7],
            (0..100).collect(),
            (0..50).flat_map(|i| std::iter::repeat_n(i, 10)).collect(),
            [vec![1, 2, 3], vec![9; 20], vec![4, 5], vec![7; 8], vec![1]].concat(),
            (0..1000).map(|i| (i * 7919) % 3).collect(),
        ];
        for v in cases {
            let max = v.iter().copied().max().unwrap_or(0);
            let w = bit_width(max).max(1);
            let mut out = Vec::new();
            rle_hybrid(&v, w, &mut out);
            assert_eq!(decode(&out, w, v.len()), v, "values {v:?}");
            let mut got = Vec::new();
            decode_rle_hybrid(&out, w, v.len(), &mut got).unwrap();
            assert_eq!(got, v);
            if !out.is_empty() {
                let err = decode_rle_hybrid(&out[..out.len() - 1], w, v.len(), &mut Vec::new());
                assert!(err.is_err(), "truncated input of {v:?} decoded");
            }
        }
    }

    #[test]
    fn decode_rle_hybrid_rejects_huge_run_headers() {
        // A bit-packed header of 2^63 - 1 groups: the run length overflows usize arithmetic.
        let data = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        for width in [1, 8, 20, 32] {
            assert!(decode_rle_hybrid(&data, width, 8, &mut Vec::new()).is_err());
        }
    }

    proptest::proptest! {
        #[test]
        fn rle_hybrid_round_trips_any(v in proptest::collection::vec(0u32..40, 0..300), wide in proptest::bool::ANY) {
            let v: Vec<u32> = if wide { v.iter().map(|x| x * 100_000).collect() } else { v };
            let w = bit_width(v.iter().copied().max().unwrap_or(0)).max(1);
            let mut out = Vec::new();
            rle_hybrid(&v, w, &mut out);
            proptest::prop_assert_eq!(decode(&out, w, v.len()), v.clone());
            let mut got = Vec::new();
            decode_rle_hybrid(&out, w, v.len(), &mut got).unwrap();
            proptest::prop_assert_eq!(got, v);
        }

        #[test]
        fn decode_rle_hybrid_never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..64), w in 0u8..40, n in 0usize..200) {
            let mut got = Vec::new();
            if decode_rle_hybrid(&b, w, n, &mut got).is_ok() {
                proptest::prop_assert_eq!(got.len(), n);
            }
        }
    }
}
