//! Row groups laid out as other Parquet writers lay them out (plain pages, a dictionary that
//! falls back to plain pages when it grows past its limit, several pages per chunk) read back
//! as the same spans as weft's own layout: the row reader's fast path takes only weft's own
//! pages and hands the rest to the generic column reader.

use super::*;
use crate::parquet_spans::query_columns::read_filter_columns;
use crate::parquet_spans::reader::{RangeChunk, read_row_group};
use crate::read::Needs;
use bytes::Bytes;
use parquet::data_type::{ByteArray, ByteArrayType, FixedLenByteArray, FixedLenByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use std::sync::Arc;

/// Writes the next column of `rg`: `vals` of the rows that have one, with a definition level
/// per row for an optional column.
fn column<T: parquet::data_type::DataType>(
    rg: &mut parquet::file::writer::SerializedRowGroupWriter<'_, Vec<u8>>,
    vals: &[T::T],
    defs: Option<&[i16]>,
) {
    let mut c = rg.next_column().unwrap().unwrap();
    c.typed::<T>().write_batch(vals, defs, None).unwrap();
    c.close().unwrap();
}

/// The present values of an optional column and a definition level per row.
fn optional<V>(rows: &[SpanRow], get: impl Fn(&SpanRow) -> Option<V>) -> (Vec<V>, Vec<i16>) {
    let defs = rows.iter().map(|r| i16::from(get(r).is_some())).collect();
    (rows.iter().filter_map(get).collect(), defs)
}

/// `rows` written as one row group of `weft_span_v1` by Parquet's own column writer.
fn write_generic(rows: &[SpanRow], props: WriterProperties) -> Bytes {
    let schema = Arc::new(parquet::schema::parser::parse_message_type(crate::parquet_spans::SCHEMA).unwrap());
    let mut w = SerializedFileWriter::new(Vec::new(), schema, Arc::new(props)).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let fixed = |v: &[u8]| FixedLenByteArray::from(v.to_vec());
    let bytes = |v: &[u8]| ByteArray::from(v.to_vec());
    let each = |f: &dyn Fn(&SpanRow) -> ByteArray| rows.iter().map(f).collect::<Vec<_>>();
    let ids: Vec<_> = rows.iter().map(|r| fixed(&r.trace_id)).collect();
    column::<FixedLenByteArrayType>(&mut rg, &ids, None);
    let ids: Vec<_> = rows.iter().map(|r| fixed(&r.span_id)).collect();
    column::<FixedLenByteArrayType>(&mut rg, &ids, None);
    let (parents, defs) = optional(rows, |r| (r.parent_span_id != [0; 8]).then(|| fixed(&r.parent_span_id)));
    column::<FixedLenByteArrayType>(&mut rg, &parents, Some(&defs));
    column::<ByteArrayType>(&mut rg, &each(&|r| bytes(r.name.as_bytes())), None);
    column::<Int32Type>(
        &mut rg,
        &rows.iter().map(|r| i32::from(r.kind)).collect::<Vec<_>>(),
        None,
    );
    column::<Int64Type>(
        &mut rg,
        &rows.iter().map(|r| r.start_unix_nano as i64).collect::<Vec<_>>(),
        None,
    );
    column::<Int64Type>(&mut rg, &rows.iter().map(|r| r.duration_nano).collect::<Vec<_>>(), None);
    column::<Int32Type>(
        &mut rg,
        &rows.iter().map(|r| i32::from(r.status_code)).collect::<Vec<_>>(),
        None,
    );
    let (msgs, defs) = optional(rows, |r| {
        (!r.status_message.is_empty()).then(|| bytes(r.status_message.as_bytes()))
    });
    column::<ByteArrayType>(&mut rg, &msgs, Some(&defs));
    let service = |r: &SpanRow| bytes(crate::columns::service_name(&r.resource).unwrap_or_default().as_bytes());
    column::<ByteArrayType>(&mut rg, &each(&service), None);
    column::<ByteArrayType>(&mut rg, &each(&|r| bytes(&r.resource)), None);
    column::<ByteArrayType>(&mut rg, &each(&|r| bytes(&r.scope)), None);
    let blobs: [fn(&SpanRow) -> &Bytes; 4] = [|r| &r.attributes, |r| &r.events, |r| &r.links, |r| &r.extra];
    for f in blobs {
        let (vals, defs) = optional(rows, |r| (!f(r).is_empty()).then(|| bytes(f(r))));
        column::<ByteArrayType>(&mut rg, &vals, Some(&defs));
    }
    rg.close().unwrap();
    Bytes::from(w.into_inner().unwrap())
}

fn read_back(file: Bytes) -> Vec<SpanRow> {
    let reader = SerializedFileReader::new(file.clone()).unwrap();
    let meta = reader.metadata();
    assert_eq!(meta.num_row_groups(), 1);
    read_row_group(meta, 0, whole(&file), &[], None).unwrap()
}

fn whole(file: &Bytes) -> RangeChunk {
    RangeChunk {
        pieces: Arc::from(vec![(0u64, file.clone())]),
        file_len: file.len() as u64,
    }
}

/// What a search's filter sees of each span: the row group's filter columns, every one read.
type Seen = (
    [u8; 16],
    (u64, i64, u8, u8, bool),
    [Vec<u8>; 6], // name, resource, scope, attributes, events, links
);

fn seen(trace_id: [u8; 16], f: impl crate::row::SpanFields) -> Seen {
    (
        trace_id,
        (
            f.start_unix_nano(),
            f.duration_nano(),
            f.status_code(),
            f.kind(),
            f.has_parent(),
        ),
        [f.name(), f.resource(), f.scope(), f.attributes(), f.events(), f.links()].map(<[u8]>::to_vec),
    )
}

fn filter_back(file: Bytes) -> Vec<Seen> {
    let reader = SerializedFileReader::new(file.clone()).unwrap();
    let all = Needs {
        name: true,
        status: true,
        kind: true,
        resource: true,
        scope: true,
        attributes: true,
        events: true,
        links: true,
        parent: true,
    };
    let cols = read_filter_columns(reader.metadata(), 0, whole(&file), &[], all).unwrap();
    (0..cols.len()).map(|i| seen(cols.trace_ids[i], cols.row(i))).collect()
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
    let want: Vec<Seen> = rows.iter().map(|r| seen(r.trace_id, r)).collect();
    for (what, props) in layouts {
        let file = write_generic(&rows, props);
        assert_eq!(read_back(file.clone()), rows, "{what}");
        assert_eq!(filter_back(file), want, "{what}: the filter columns");
    }
}
