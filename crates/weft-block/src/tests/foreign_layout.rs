//! Row groups laid out as other Parquet writers lay them out (plain pages, a dictionary that
//! falls back to plain pages when it grows past its limit, several pages per chunk) read back
//! as the same spans as weft's own layout: the row reader's fast path takes only weft's own
//! pages and hands the rest to the generic column reader.

use super::*;
use crate::parquet_spans::reader::{RangeChunk, read_row_group};
use bytes::Bytes;
use parquet::data_type::{ByteArray, ByteArrayType, FixedLenByteArray, FixedLenByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use std::sync::Arc;

/// `rows` written as one row group of `weft_span_v1` by Parquet's own column writer.
fn write_generic(rows: &[SpanRow], props: WriterProperties) -> Bytes {
    let schema = Arc::new(parquet::schema::parser::parse_message_type(crate::parquet_spans::SCHEMA).unwrap());
    let mut w = SerializedFileWriter::new(Vec::new(), schema, Arc::new(props)).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let fixed = |v: &[u8]| FixedLenByteArray::from(v.to_vec());
    let bytes = |v: &[u8]| ByteArray::from(v.to_vec());
    // An optional column: the values of the rows that have one, and a level per row.
    let optional = |get: &dyn Fn(&SpanRow) -> Option<ByteArray>| -> (Vec<ByteArray>, Vec<i16>) {
        let vals: Vec<_> = rows.iter().filter_map(get).collect();
        let defs = rows.iter().map(|r| i16::from(get(r).is_some())).collect();
        (vals, defs)
    };
    let blob = |b: &Bytes| (!b.is_empty()).then(|| bytes(b));
    let mut c = rg.next_column().unwrap().unwrap();
    let ids: Vec<_> = rows.iter().map(|r| fixed(&r.trace_id)).collect();
    c.typed::<FixedLenByteArrayType>()
        .write_batch(&ids, None, None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    let ids: Vec<_> = rows.iter().map(|r| fixed(&r.span_id)).collect();
    c.typed::<FixedLenByteArrayType>()
        .write_batch(&ids, None, None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    let vals: Vec<_> = rows
        .iter()
        .filter(|r| r.parent_span_id != [0; 8])
        .map(|r| fixed(&r.parent_span_id))
        .collect();
    let defs: Vec<i16> = rows.iter().map(|r| i16::from(r.parent_span_id != [0; 8])).collect();
    c.typed::<FixedLenByteArrayType>()
        .write_batch(&vals, Some(&defs), None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    let names: Vec<_> = rows.iter().map(|r| bytes(r.name.as_bytes())).collect();
    c.typed::<ByteArrayType>().write_batch(&names, None, None).unwrap();
    c.close().unwrap();
    let ints: [fn(&SpanRow) -> i32; 1] = [|r| i32::from(r.kind)];
    for f in ints {
        let mut c = rg.next_column().unwrap().unwrap();
        let v: Vec<i32> = rows.iter().map(f).collect();
        c.typed::<Int32Type>().write_batch(&v, None, None).unwrap();
        c.close().unwrap();
    }
    let longs: [fn(&SpanRow) -> i64; 2] = [|r| r.start_unix_nano as i64, |r| r.duration_nano];
    for f in longs {
        let mut c = rg.next_column().unwrap().unwrap();
        let v: Vec<i64> = rows.iter().map(f).collect();
        c.typed::<Int64Type>().write_batch(&v, None, None).unwrap();
        c.close().unwrap();
    }
    let mut c = rg.next_column().unwrap().unwrap();
    let v: Vec<i32> = rows.iter().map(|r| i32::from(r.status_code)).collect();
    c.typed::<Int32Type>().write_batch(&v, None, None).unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    let (vals, defs) = optional(&|r| (!r.status_message.is_empty()).then(|| bytes(r.status_message.as_bytes())));
    c.typed::<ByteArrayType>()
        .write_batch(&vals, Some(&defs), None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    let v: Vec<_> = rows
        .iter()
        .map(|r| bytes(crate::columns::service_name(&r.resource).unwrap_or_default().as_bytes()))
        .collect();
    c.typed::<ByteArrayType>().write_batch(&v, None, None).unwrap();
    c.close().unwrap();
    let required: [fn(&SpanRow) -> &[u8]; 2] = [|r| &r.resource, |r| &r.scope];
    for f in required {
        let mut c = rg.next_column().unwrap().unwrap();
        let v: Vec<_> = rows.iter().map(|r| bytes(f(r))).collect();
        c.typed::<ByteArrayType>().write_batch(&v, None, None).unwrap();
        c.close().unwrap();
    }
    let blobs: [fn(&SpanRow) -> &Bytes; 4] = [|r| &r.attributes, |r| &r.events, |r| &r.links, |r| &r.extra];
    for f in blobs {
        let mut c = rg.next_column().unwrap().unwrap();
        let (vals, defs) = optional(&|r| blob(f(r)));
        c.typed::<ByteArrayType>()
            .write_batch(&vals, Some(&defs), None)
            .unwrap();
        c.close().unwrap();
    }
    rg.close().unwrap();
    Bytes::from(w.into_inner().unwrap())
}

fn read_back(file: Bytes) -> Vec<SpanRow> {
    let reader = SerializedFileReader::new(file.clone()).unwrap();
    let meta = reader.metadata();
    assert_eq!(meta.num_row_groups(), 1);
    let chunk = RangeChunk {
        pieces: Arc::from(vec![(0u64, file.clone())]),
        file_len: file.len() as u64,
    };
    read_row_group(meta, 0, chunk, &[], None).unwrap()
}

#[tokio::test]
async fn row_groups_of_other_writers_read_as_the_same_spans() {
    let store = MemoryStorage::new();
    let req = sample_request(60, 7, 3);
    let opts = WriteOptions {
        row_group_rows: 1 << 12,
        ..Default::default()
    };
    let meta = write_block(&store, &columns_of(&req), "t", Origin::default(), &opts)
        .await
        .unwrap();
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    assert_eq!(block.row_group_count(), 1);
    let (rows, _) = block.read_row_group(&store, 0).await.unwrap();
    assert_eq!(rows.len(), 420);
    assert!(rows.iter().any(|r| r.parent_span_id == [0; 8]) && rows.iter().any(|r| !r.events.is_empty()));

    let layouts = [
        (
            "plain pages",
            WriterProperties::builder().set_dictionary_enabled(false).build(),
        ),
        (
            // A 256-byte dictionary limit: every column starts dictionary-encoded and falls
            // back to plain pages once its dictionary is full; small pages, several per chunk.
            "dictionary then plain",
            WriterProperties::builder()
                .set_dictionary_page_size_limit(256)
                .set_data_page_size_limit(512)
                .set_write_batch_size(16)
                .build(),
        ),
        ("the generic writer's defaults", WriterProperties::builder().build()),
    ];
    for (what, props) in layouts {
        assert_eq!(read_back(write_generic(&rows, props)), rows, "{what}");
    }
}
