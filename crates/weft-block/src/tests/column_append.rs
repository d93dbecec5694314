//! Compaction's column-wise read of a row group: the columns pushing each decoded row gives,
//! and no panic on damaged bytes.

use super::*;

/// Compaction's column-wise read ([`RowGroupData::append_to`]) gives the columns that pushing
/// each decoded row gives: every field of every row, the trace index and the time range.
async fn assert_append_matches_rows(store: &dyn weft_storage::Storage, block: &Block) {
    let (mut by_row, mut by_column) = (SpanColumns::default(), SpanColumns::default());
    for rg in 0..block.row_group_count() {
        let data = block.fetch_row_group(store, rg).await.unwrap();
        for r in &data.rows().unwrap() {
            by_row.push_row(r);
        }
        data.append_to(&mut by_column).unwrap();
    }
    by_row.end_run();
    by_column.end_run();
    assert_eq!(by_column.len(), by_row.len());
    assert!(by_row.len() as u64 == block.meta.span_count);
    for i in 0..by_row.len() as u32 {
        assert_eq!(by_column.row(i), by_row.row(i), "row {i}");
    }
    assert_eq!(by_column.traces, by_row.traces);
    assert_eq!(by_column.prev, by_row.prev);
    assert_eq!(
        (by_column.min_start, by_column.max_end),
        (by_row.min_start, by_row.max_end)
    );
    assert_eq!(by_column.service_of.len(), by_row.service_of.len());
}

#[tokio::test]
async fn column_wise_append_matches_the_row_reader() {
    let store = MemoryStorage::new();
    let req = with_dedicatable_attributes(sample_request(600, 5, 11));
    let cols = columns_of(&req);
    for dedicated_columns in [false, true] {
        let opts = WriteOptions {
            row_group_rows: 256,
            dedicated_columns,
            ..Default::default()
        };
        let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
        assert_eq!(meta.dedicated_columns.is_empty(), !dedicated_columns);
        let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
        assert_append_matches_rows(&store, &block).await;
    }
    // Golden blocks: the first writer's layout (Parquet's own column writer) takes the
    // reader's general path, and the v2 block has moved attributes to put back.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
    let golden = weft_storage::LocalStorage::new(&dir).unwrap();
    let listed = golden.list("blocks/").await.unwrap();
    let metas: Vec<_> = listed.iter().filter(|o| o.path.ends_with("/meta.json")).collect();
    assert!(metas.len() >= 3, "the golden blocks are committed");
    for m in metas {
        let block = Block::open(&golden, m.path.trim_end_matches("/meta.json"))
            .await
            .unwrap();
        assert_append_matches_rows(&golden, &block).await;
    }
}

/// Compaction's column-wise read never panics on damaged bytes, whatever it returns: here the
/// row group's bytes are damaged past their checksums (as in a block written before checksums),
/// a few bytes at a time, in 600 deterministic variations.
#[tokio::test]
async fn column_wise_append_survives_damaged_bytes() {
    let store = MemoryStorage::new();
    let req = with_dedicatable_attributes(sample_request(200, 5, 13));
    let cols = columns_of(&req);
    let opts = WriteOptions {
        row_group_rows: 300,
        dedicated_columns: true,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    let data = block.fetch_row_group(&store, 1).await.unwrap();
    let (base, bytes) = data.pieces[0].clone();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ok, mut refused) = (0, 0);
    for round in 0..600 {
        let mut b = bytes.to_vec();
        if round % 10 == 9 {
            b.truncate(next() as usize % b.len());
        } else {
            for _ in 0..1 + next() % 4 {
                let at = next() as usize % b.len();
                b[at] = match next() % 3 {
                    0 => b[at] ^ (1 << (next() % 8)),
                    1 => 0xff,
                    _ => next() as u8,
                };
            }
        }
        let damaged = RowGroupData {
            pieces: vec![(base, Bytes::from(b))].into(),
            ..data.clone()
        };
        match damaged.append_to(&mut SpanColumns::default()) {
            Ok(()) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(refused > 0, "damage is noticed ({ok} read, {refused} refused)");
}
