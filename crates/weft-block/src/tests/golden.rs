//! The committed golden blocks (`testdata/golden`) of every released format and index version
//! stay readable.

use super::metric_columns::assert_metric_columns_match_rows;
use super::*;

/// Blocks written by every released format version stay readable. Regenerate only when adding
/// a new version (or the writer changes how it encodes one): `WEFT_WRITE_GOLDEN=1 cargo test -p
/// weft-block golden`. Two v1 blocks are committed: from the first writer (Parquet's column writer)
/// and from the writer with its own column chunks (`parquet_spans::chunk`).
#[tokio::test]
async fn golden_v1_block_stays_readable() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
    let store = weft_storage::LocalStorage::new(&dir).unwrap();
    let req = sample_request(40, 5, 9);
    if std::env::var_os("WEFT_WRITE_GOLDEN").is_some() {
        let cols = columns_of(&req);
        let opts = WriteOptions {
            row_group_rows: 64,
            ..Default::default()
        };
        write_block(&store, &cols, "golden", Origin::default(), &opts)
            .await
            .unwrap();
    }
    let listed = store.list("blocks/golden/").await.unwrap();
    let metas: Vec<_> = listed.iter().filter(|o| o.path.ends_with("/meta.json")).collect();
    assert!(!metas.is_empty(), "golden blocks are committed under {}", dir.display());
    for m in metas {
        let prefix = m.path.trim_end_matches("/meta.json");
        let block = Block::open(&store, prefix).await.unwrap();
        assert_eq!(block.meta.span_count, 200);
        for id in trace_ids(&req) {
            let rows = block.find_trace(&store, &id).await.unwrap();
            assert_eq!(decode_rows(&rows), spans_of(&req, &id), "golden block {prefix}");
        }
        assert_row_groups_hold_the_spans(&store, &block, &req).await;
    }
}

/// Every span of `req` reads back from a scan of `block`'s row groups (the whole-trace
/// queries' read), each trace's spans in the order a trace fetch returns them.
async fn assert_row_groups_hold_the_spans(
    store: &weft_storage::LocalStorage,
    block: &Block,
    req: &ExportTraceServiceRequest,
) {
    let mut all = Vec::new();
    for rg in 0..block.row_group_count() {
        let (rows, _) = block.read_row_group(store, rg).await.unwrap();
        all.extend(rows);
    }
    assert_eq!(all.len(), block.meta.span_count as usize);
    for id in trace_ids(req) {
        let rows: Vec<_> = all.iter().filter(|r| r.trace_id == id).cloned().collect();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(req, &id)));
    }
}

/// A version 2 block with dedicated columns stays readable (regenerate as for
/// `golden_v1_block_stays_readable`).
#[tokio::test]
async fn golden_v2_block_with_dedicated_columns_stays_readable() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
    let store = weft_storage::LocalStorage::new(&dir).unwrap();
    let req = with_dedicatable_attributes(sample_request(40, 5, 9));
    if std::env::var_os("WEFT_WRITE_GOLDEN").is_some() {
        let cols = columns_of(&req);
        let opts = WriteOptions {
            row_group_rows: 64,
            dedicated_columns: true,
            ..Default::default()
        };
        write_block(&store, &cols, "golden-v2", Origin::default(), &opts)
            .await
            .unwrap();
    }
    let listed = store.list("blocks/golden-v2/").await.unwrap();
    let metas: Vec<_> = listed.iter().filter(|o| o.path.ends_with("/meta.json")).collect();
    assert_eq!(
        metas.len(),
        1,
        "one v2 golden block is committed under {}",
        dir.display()
    );
    let prefix = metas[0].path.trim_end_matches("/meta.json");
    let block = Block::open(&store, prefix).await.unwrap();
    assert_eq!(block.meta.version, 2);
    assert!(block.meta.dedicated_columns.len() >= 5);
    for id in trace_ids(&req) {
        let rows = block.find_trace(&store, &id).await.unwrap();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(&req, &id)));
    }
    assert_row_groups_hold_the_spans(&store, &block, &req).await;
    assert_metric_columns_match_rows(&store, &block).await;
}

/// A block whose index is version 3 (key lists) stays readable (regenerate as for
/// `golden_v1_block_stays_readable`): written as compaction writes, with value blooms, key
/// lists and dedicated columns.
#[tokio::test]
async fn golden_index_v3_block_with_key_lists_stays_readable() {
    let req = with_dedicatable_attributes(sample_request(40, 5, 9));
    let (store, prefix) = the_golden_block("golden-v3", &req).await;
    let prefix = prefix.as_str();
    let index = store.get(&format!("{prefix}/index.bin")).await.unwrap();
    assert_eq!(index[8..12], 3u32.to_le_bytes(), "index version");
    let block = Block::open(&store, prefix).await.unwrap();
    assert_eq!(block.meta.version, 2);
    assert!(block.index.keys.is_some() && block.index.value_blooms.len() == block.row_group_count());
    for id in trace_ids(&req) {
        let rows = block.find_trace(&store, &id).await.unwrap();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(&req, &id)));
    }
    assert_row_groups_hold_the_spans(&store, &block, &req).await;
    assert_metric_columns_match_rows(&store, &block).await;
}

/// A block of format 3 (time-sliced row groups, index version 4) stays readable (regenerate as
/// for `golden_v1_block_stays_readable`): written as compaction writes.
#[tokio::test]
async fn golden_format_3_time_sliced_block_stays_readable() {
    let req = with_dedicatable_attributes(sample_request(40, 5, 9));
    let (store, prefix) = the_golden_block("golden-format3", &req).await;
    let prefix = prefix.as_str();
    let index = store.get(&format!("{prefix}/index.bin")).await.unwrap();
    assert_eq!(index[8..12], 4u32.to_le_bytes(), "index version");
    let block = Block::open(&store, prefix).await.unwrap();
    assert_eq!(block.meta.version, 3);
    assert!(block.row_group_count() > 1);
    assert_eq!(block.index.trace_blooms.len(), block.row_group_count());
    for id in trace_ids(&req) {
        let rows = block.find_trace(&store, &id).await.unwrap();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(&req, &id)));
        assert_eq!(block.index.candidates(&id).len(), 1);
    }
    assert_row_groups_hold_the_spans(&store, &block, &req).await;
    assert_metric_columns_match_rows(&store, &block).await;
}

/// The one golden block committed under `testdata/golden/blocks/<tenant>/`, and its prefix;
/// with `WEFT_WRITE_GOLDEN` set, first written from `req` as compaction writes.
async fn the_golden_block(tenant: &str, req: &ExportTraceServiceRequest) -> (weft_storage::LocalStorage, String) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
    let store = weft_storage::LocalStorage::new(&dir).unwrap();
    if std::env::var_os("WEFT_WRITE_GOLDEN").is_some() {
        write_block(
            &store,
            &columns_of(req),
            tenant,
            Origin::default(),
            &WriteOptions::lasting(64),
        )
        .await
        .unwrap();
    }
    let listed = store.list(&format!("blocks/{tenant}/")).await.unwrap();
    let metas: Vec<_> = listed.iter().filter(|o| o.path.ends_with("/meta.json")).collect();
    assert_eq!(
        metas.len(),
        1,
        "one golden block of {tenant} is committed under {}",
        dir.display()
    );
    (store, metas[0].path.trim_end_matches("/meta.json").to_string())
}
