//! Spans written and read back: head columns and blocks reproduce every field, traces kept
//! within row groups, and `encode` giving the bytes `write_block` stores.

use super::*;

#[test]
fn head_columns_reproduce_every_field() {
    let req = sample_request(20, 5, 1);
    let cols = columns_of(&req);
    assert_eq!(cols.len(), 100);
    for id in trace_ids(&req) {
        let rows: Vec<SpanRow> = cols.rows_of(&id).into_iter().map(|r| cols.row(r)).collect();
        assert_eq!(decode_rows(&rows), spans_of(&req, &id));
    }
}

#[tokio::test]
async fn block_round_trip_reproduces_every_field() {
    let req = sample_request(3000, 5, 2);
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    // Compaction's options (zstd level 3) and a head cut's (level 1).
    let compaction = WriteOptions {
        row_group_rows: 1000,
        ..Default::default()
    };
    let mut sizes = Vec::new();
    for (tenant, opts) in [("t1", compaction), ("t2", WriteOptions::head_cut(1000))] {
        let meta = write_block(&store, &cols, tenant, Origin::default(), &opts)
            .await
            .unwrap();
        assert_eq!(meta.span_count, 15000);
        assert_eq!(meta.trace_count, 3000);
        assert!(meta.row_groups >= 15);
        let block = Block::open(&store, &block_prefix(tenant, &meta.block_id))
            .await
            .unwrap();
        for id in trace_ids(&req).iter().step_by(97) {
            let rows = block.find_trace(&store, id).await.unwrap();
            assert_eq!(rows.len(), 5);
            assert_eq!(decode_rows(&rows), spans_of(&req, id));
        }
        assert!(block.find_trace(&store, &[0xee; 16]).await.unwrap().is_empty());
        println!(
            "bytes per span for the sample at zstd level {}: {}",
            opts.zstd_level,
            meta.size_bytes / meta.span_count
        );
        sizes.push(meta.size_bytes);
    }
    // The level reaches the compressor: the same spans encode to a different size.
    assert_ne!(sizes[0], sizes[1], "zstd level 1 and 3 wrote identical sizes");
}

#[tokio::test]
async fn traces_never_straddle_row_groups_needlessly() {
    let req = sample_request(500, 7, 3);
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 100,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    // Time slices: each row group holds whole traces sorted by ID, and the traces of a later
    // row group start no earlier than those of the one before.
    let idx = &block.index;
    assert!(idx.row_groups.len() > 3 && idx.trace_starts.len() == idx.row_groups.len());
    for w in idx.trace_starts.windows(2) {
        assert!(w[0].0 <= w[0].1 && w[0].1 <= w[1].0, "slices in start order: {w:?}");
    }
    let mut seen = std::collections::HashSet::new();
    let mut false_hits = 0;
    for rg in 0..block.row_group_count() {
        let (rows, _) = block.read_row_group(&store, rg).await.unwrap();
        assert!(
            rows.windows(2).all(|w| w[0].trace_id <= w[1].trace_id),
            "row group {rg} by trace ID"
        );
        let ids: std::collections::HashSet<_> = rows.iter().map(|r| r.trace_id).collect();
        assert!(ids.iter().all(|id| seen.insert(*id)), "a trace in two row groups");
        for id in &ids {
            let found = idx.candidates(id);
            assert!(found.contains(&rg), "the index finds the trace's row group");
            false_hits += found.len() - 1;
        }
        assert!(rows.len() < 200);
    }
    assert_eq!(seen.len(), 500);
    // 500 traces, each tested against the other row groups' trace blooms.
    assert!(
        false_hits <= 1,
        "{false_hits} row groups named that do not hold the trace"
    );
}

/// [`encode`] gives the bytes [`write_block`] stores.
#[tokio::test]
async fn encode_is_what_write_block_stores() {
    let cols = columns_of(&sample_request(200, 4, 7));
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 100,
        ..Default::default()
    };
    let enc = encode(&cols, &opts).unwrap();
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    let prefix = block_prefix("t", &meta.block_id);
    assert_eq!(store.get(&format!("{prefix}/data.parquet")).await.unwrap(), enc.data);
    assert_eq!(
        store.get(&format!("{prefix}/index.bin")).await.unwrap(),
        Bytes::from(enc.index.encode())
    );
    assert_eq!((meta.span_count, meta.row_groups), (enc.rows, enc.row_groups));
}
