//! Writes a block from [`SpanColumns`].

use super::{SCHEMA, col};
use crate::BlockError;
use crate::columns::{BlobColumn, SpanColumns};
use crate::index::{Bloom, RowGroupRange, TraceIndex};
use bytes::Bytes;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, FixedLenByteArray, FixedLenByteArrayType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;
use std::sync::Arc;

/// Tuning for [`encode`].
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Rows per row group. Smaller groups make trace-by-ID reads cheaper; larger ones compress
    /// better and cost less per row to write (one compressor and dictionary per column chunk).
    /// 8192 keeps a trace lookup to one read of about 150 KB (see BENCHMARKS.md).
    pub row_group_rows: usize,
    pub zstd_level: i32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            row_group_rows: 8192,
            zstd_level: 3,
        }
    }
}

/// The encoded files of a block.
pub struct Encoded {
    pub data: Bytes,
    pub index: TraceIndex,
    pub row_groups: u32,
}

fn props(opts: &WriteOptions) -> Result<WriterProperties, BlockError> {
    let p = |s: &str| ColumnPath::from(s);
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(opts.zstd_level)?))
        .set_created_by(format!("weft {}", env!("CARGO_PKG_VERSION")))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "weft.block.version".to_string(),
            "1".to_string(),
        )]));
    for c in ["span_id", "start_time_unix_nano", "duration_nano"] {
        b = b.set_column_dictionary_enabled(p(c), false);
    }
    for c in ["start_time_unix_nano", "duration_nano"] {
        b = b.set_column_encoding(p(c), Encoding::DELTA_BINARY_PACKED);
    }
    b = b.set_column_encoding(p("span_id"), Encoding::PLAIN);
    // Columns whose chunks are small after dictionary/RLE encoding are not compressed: for
    // them zstd saves a few bytes per row group but costs a compressor and decompressor
    // setup per chunk, which was ~13% of block encoding (`weft loadgen --stages`,
    // BENCHMARKS.md). The large columns (IDs, timestamps, attributes) stay zstd.
    for c in [
        "kind",
        "status_code",
        "status_message",
        "service_name",
        "scope",
        "events",
        "links",
        "name",
        "resource",
        "extra",
        "parent_span_id",
    ] {
        b = b.set_column_compression(p(c), Compression::UNCOMPRESSED);
    }
    for c in [
        "resource",
        "scope",
        "attributes",
        "events",
        "links",
        "extra",
        "status_message",
        "service_name",
        "name",
    ] {
        b = b.set_column_statistics_enabled(p(c), EnabledStatistics::None);
    }
    Ok(b.build())
}

/// Encodes `cols` as a v1 data file plus its trace index.
pub fn encode(cols: &SpanColumns, opts: &WriteOptions) -> Result<Encoded, BlockError> {
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let order = cols.sorted_order();
    let mut out: Vec<u8> = Vec::with_capacity(cols.len() * 24 + (1 << 16));
    let mut writer = SerializedFileWriter::new(&mut out, schema, Arc::new(props(opts)?))?;

    // One Bytes per interned value; every row clones (refcounts) instead of copying.
    let strings: Vec<ByteArray> = (0..cols.strings.len())
        .map(|i| ByteArray::from(Bytes::copy_from_slice(cols.strings.get(i as u32))))
        .collect();
    let headers: Vec<ByteArray> = (0..cols.headers.len())
        .map(|i| ByteArray::from(Bytes::copy_from_slice(cols.headers.get(i as u32))))
        .collect();
    let blob = BlobColumn::shared;
    let (attrs, events, links, extra) = (
        blob(&cols.attributes),
        blob(&cols.events),
        blob(&cols.links),
        blob(&cols.extra),
    );

    let mut bloom = Bloom::with_capacity(cols.trace_count());
    for id in cols.traces.keys() {
        bloom.insert(id);
    }
    let mut ranges = Vec::new();
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

    for range in chunks {
        let rows = &order[range.clone()];
        let mut rg = writer.next_row_group()?;
        let mut ids = Vec::with_capacity(rows.len() * 16);
        for &r in rows {
            ids.extend_from_slice(&cols.trace_id[r as usize]);
        }
        let ids = Bytes::from(ids);
        let mut sids = Vec::with_capacity(rows.len() * 8);
        for &r in rows {
            sids.extend_from_slice(&cols.span_id[r as usize]);
        }
        let sids = Bytes::from(sids);
        let mut parents = Vec::with_capacity(rows.len() * 8);
        let mut parent_def = Vec::with_capacity(rows.len());
        for &r in rows {
            let p = &cols.parent_span_id[r as usize];
            if *p == [0; 8] {
                parent_def.push(0);
            } else {
                parent_def.push(1);
                parents.extend_from_slice(p);
            }
        }
        let parents = Bytes::from(parents);
        let flba = |b: &Bytes, w: usize| -> Vec<FixedLenByteArray> {
            (0..b.len() / w)
                .map(|i| FixedLenByteArray::from(ByteArray::from(b.slice(i * w..(i + 1) * w))))
                .collect()
        };
        let opt_blob = |c: &BlobColumn, data: &Bytes| -> (Vec<ByteArray>, Vec<i16>) {
            let mut vals = Vec::new();
            let mut def = Vec::with_capacity(rows.len());
            for &r in rows {
                let rg = c.range(r as usize);
                if rg.is_empty() {
                    def.push(0);
                } else {
                    def.push(1);
                    vals.push(ByteArray::from(data.slice(rg)));
                }
            }
            (vals, def)
        };
        let mut idx = 0;
        while let Some(mut cw) = rg.next_column()? {
            match idx {
                col::TRACE_ID => {
                    cw.typed::<FixedLenByteArrayType>()
                        .write_batch(&flba(&ids, 16), None, None)?;
                }
                col::SPAN_ID => {
                    cw.typed::<FixedLenByteArrayType>()
                        .write_batch(&flba(&sids, 8), None, None)?;
                }
                col::PARENT => {
                    cw.typed::<FixedLenByteArrayType>()
                        .write_batch(&flba(&parents, 8), Some(&parent_def), None)?;
                }
                col::NAME => {
                    let v: Vec<ByteArray> = rows
                        .iter()
                        .map(|&r| strings[cols.name[r as usize] as usize].clone())
                        .collect();
                    cw.typed::<ByteArrayType>().write_batch(&v, None, None)?;
                }
                col::KIND => {
                    let v: Vec<i32> = rows.iter().map(|&r| i32::from(cols.kind[r as usize])).collect();
                    cw.typed::<Int32Type>().write_batch(&v, None, None)?;
                }
                col::START => {
                    let v: Vec<i64> = rows.iter().map(|&r| cols.start[r as usize] as i64).collect();
                    cw.typed::<Int64Type>().write_batch(&v, None, None)?;
                }
                col::DURATION => {
                    let v: Vec<i64> = rows.iter().map(|&r| cols.duration[r as usize]).collect();
                    cw.typed::<Int64Type>().write_batch(&v, None, None)?;
                }
                col::STATUS_CODE => {
                    let v: Vec<i32> = rows.iter().map(|&r| i32::from(cols.status_code[r as usize])).collect();
                    cw.typed::<Int32Type>().write_batch(&v, None, None)?;
                }
                col::STATUS_MESSAGE => {
                    let mut v = Vec::new();
                    let mut def = Vec::with_capacity(rows.len());
                    for &r in rows {
                        let m = cols.status_message[r as usize];
                        if m == 0 {
                            def.push(0);
                        } else {
                            def.push(1);
                            v.push(strings[m as usize].clone());
                        }
                    }
                    cw.typed::<ByteArrayType>().write_batch(&v, Some(&def), None)?;
                }
                col::SERVICE => {
                    let v: Vec<ByteArray> = rows
                        .iter()
                        .map(|&r| {
                            let sid = cols.service_of.get(&cols.resource[r as usize]).copied().unwrap_or(0);
                            strings[sid as usize].clone()
                        })
                        .collect();
                    cw.typed::<ByteArrayType>().write_batch(&v, None, None)?;
                }
                col::RESOURCE => {
                    let v: Vec<ByteArray> = rows
                        .iter()
                        .map(|&r| headers[cols.resource[r as usize] as usize].clone())
                        .collect();
                    cw.typed::<ByteArrayType>().write_batch(&v, None, None)?;
                }
                col::SCOPE => {
                    let v: Vec<ByteArray> = rows
                        .iter()
                        .map(|&r| headers[cols.scope[r as usize] as usize].clone())
                        .collect();
                    cw.typed::<ByteArrayType>().write_batch(&v, None, None)?;
                }
                col::ATTRIBUTES | col::EVENTS | col::LINKS | col::EXTRA => {
                    let (c, d) = match idx {
                        col::ATTRIBUTES => (&cols.attributes, &attrs),
                        col::EVENTS => (&cols.events, &events),
                        col::LINKS => (&cols.links, &links),
                        _ => (&cols.extra, &extra),
                    };
                    let (v, def) = opt_blob(c, d);
                    cw.typed::<ByteArrayType>().write_batch(&v, Some(&def), None)?;
                }
                _ => {
                    return Err(BlockError::Corrupt(
                        "schema has more columns than the writer knows".into(),
                    ));
                }
            }
            cw.close()?;
            idx += 1;
        }
        rg.close()?;
        let first = &ids[..16];
        let last = &ids[ids.len() - 16..];
        ranges.push(RowGroupRange {
            min: first.try_into().expect("16 bytes"),
            max: last.try_into().expect("16 bytes"),
            first_row,
            rows: rows.len() as u32,
        });
        first_row += rows.len() as u64;
    }
    writer.close()?;
    let row_groups = ranges.len() as u32;
    Ok(Encoded {
        data: Bytes::from(out),
        index: TraceIndex {
            row_groups: ranges,
            bloom,
        },
        row_groups,
    })
}
