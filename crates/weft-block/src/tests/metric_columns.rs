//! The columns read for queries (metric, blob, span attribute and service-graph columns, and
//! the index's key lists), checked against the full row reader.

use super::*;

/// Span attribute keys the metric-column checks read: dedicated (complete or not, of every
/// type) and generic keys, a repeated one, and one no span has.
const METRIC_KEYS: [&str; 8] = ["http.method", "mixed", "int", "dbl", "bool", "str", "bytes", "absent"];

/// The value of row `i` of a dictionary column.
fn dict_at(d: &DictColumn, i: usize) -> Bytes {
    d.values[d.ids[i] as usize].clone()
}

/// Checks that the metric and service-graph columns of every row group of `block` read (with
/// only their chunks fetched) the same values as the full row reader.
pub(super) async fn assert_metric_columns_match_rows(store: &dyn weft_storage::Storage, block: &Block) {
    let needs = MetricNeeds {
        name: true,
        status: true,
        status_message: true,
        kind: true,
        duration: true,
        resource: true,
        scope: true,
        span_keys: Vec::new(),
        trace_ids: true,
        parents: true,
        blobs: false,
        lists: false,
        all_span_attributes: false,
    };
    for rg in 0..block.row_group_count() {
        let rows = block.fetch_row_group(store, rg).await.unwrap().rows().unwrap();
        let part = block.fetch_metric_columns(store, rg, &needs).await.unwrap();
        let whole = block.fetch_row_group(store, rg).await.unwrap();
        assert!(part.bytes() < whole.bytes(), "only the needed chunks are fetched");
        assert_span_attribute_columns_match_rows(store, block, rg, &rows).await;
        assert_blob_columns_match_rows(store, block, rg, &rows).await;
        let c = part.metric_columns(&needs).unwrap();
        assert_eq!(c.start.len(), rows.len());
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(c.start[i] as u64, r.start_unix_nano);
            assert_eq!(c.duration[i], r.duration_nano);
            assert_eq!(c.status[i] as u8, r.status_code);
            assert_eq!(c.kind[i] as u8, r.kind);
            assert_eq!(dict_at(&c.name, i), r.name.as_bytes());
            assert_eq!(dict_at(&c.status_message, i), r.status_message.as_bytes());
            assert_eq!(dict_at(&c.resource, i), r.resource);
            assert_eq!(dict_at(&c.scope, i), r.scope);
            assert_eq!(dict_at(&c.trace_id, i), r.trace_id.as_slice());
            assert_eq!(c.span_id[i], r.span_id, "span ID of row {i}");
            let parent: &[u8] = if r.parent_span_id == [0; 8] {
                &[]
            } else {
                &r.parent_span_id
            };
            assert_eq!(dict_at(&c.parent, i), parent, "parent of row {i}");
        }
        // Only what is asked for is read.
        let starts = part.metric_columns(&MetricNeeds::default()).unwrap();
        assert_eq!(starts.start, c.start);
        assert!(starts.name.ids.is_empty() && starts.duration.is_empty() && starts.span_id.is_empty());

        assert_graph_columns_match_rows(store, block, rg, &rows, whole.bytes()).await;

        // The index's key lists, where the block has them (compacted blocks).
        if let Some(lists) = &block.index.keys {
            let got: std::collections::BTreeSet<_> = lists.of_row_group(rg).map(|(s, k)| (s, k.to_vec())).collect();
            assert_eq!(got, keys_of_rows(&rows), "key lists of row group {rg}");
        }
    }
}

/// Checks the span attributes read for a metrics query in row group `rg` of `block`, by key
/// ([`METRIC_KEYS`]) and all of them, against the rows.
async fn assert_span_attribute_columns_match_rows(
    store: &dyn weft_storage::Storage,
    block: &Block,
    rg: usize,
    rows: &[SpanRow],
) {
    let with_attrs = MetricNeeds {
        span_keys: METRIC_KEYS.iter().map(|k| k.to_string()).collect(),
        ..Default::default()
    };
    let attrs = block
        .fetch_metric_columns(store, rg, &with_attrs)
        .await
        .unwrap()
        .metric_columns(&with_attrs)
        .unwrap();
    assert_eq!(attrs.span_attributes.len(), METRIC_KEYS.len());
    // Every span attribute: the blob, then the moved values, is what the row reader gives.
    let all = MetricNeeds {
        all_span_attributes: true,
        ..Default::default()
    };
    let every = block
        .fetch_metric_columns(store, rg, &all)
        .await
        .unwrap()
        .metric_columns(&all)
        .unwrap();
    for (i, r) in rows.iter().enumerate() {
        let mut got = dict_at(&every.attributes, i).to_vec();
        every.moved.iter().for_each(|d| got.extend_from_slice(&dict_at(d, i)));
        assert_eq!(got, r.attributes.to_vec(), "all span attributes of row {i}");
    }
    for (k, key) in METRIC_KEYS.iter().enumerate() {
        let col = &attrs.span_attributes[k];
        for (i, r) in rows.iter().enumerate() {
            let mut want = vec![Vec::new()];
            crate::dedicated::pick_attributes(&r.attributes, &[key.as_bytes()], &mut want);
            assert_eq!(col.values[col.ids[i] as usize], want[0], "{key} of row {i}");
        }
    }
}

/// Checks the blobs read for a metrics query in row group `rg` of `block`, and which keys
/// moved to dedicated columns, against the rows.
async fn assert_blob_columns_match_rows(store: &dyn weft_storage::Storage, block: &Block, rg: usize, rows: &[SpanRow]) {
    let blobs = MetricNeeds {
        blobs: true,
        lists: true,
        ..Default::default()
    };
    let b = block
        .fetch_metric_columns(store, rg, &blobs)
        .await
        .unwrap()
        .metric_columns(&blobs)
        .unwrap();
    let span_dedicated = block
        .meta
        .dedicated_columns
        .iter()
        .filter(|d| d.scope == crate::meta::DedicatedScope::Span)
        .count();
    assert_eq!(b.dedicated_keys.len(), span_dedicated);
    let pick = |blob: &[u8], key: &str| {
        let mut out = vec![Vec::new()];
        crate::dedicated::pick_attributes(blob, &[key.as_bytes()], &mut out);
        !out[0].is_empty()
    };
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(dict_at(&b.events, i), r.events, "events of row {i}");
        assert_eq!(dict_at(&b.links, i), r.links, "links of row {i}");
        let blob = dict_at(&b.attributes, i);
        for key in METRIC_KEYS {
            let moved = b
                .dedicated_keys
                .iter()
                .position(|k| k == key)
                .is_some_and(|bit| b.dedicated_mask[i] & (1 << bit) != 0);
            assert_eq!(
                pick(&r.attributes, key),
                pick(&blob, key) || moved,
                "{key} of row {i}: in the blob or moved"
            );
        }
    }
}

/// Checks the service graph's columns of row group `rg` of `block` (fetched alone, in fewer
/// than `whole_bytes`) against the rows.
async fn assert_graph_columns_match_rows(
    store: &dyn weft_storage::Storage,
    block: &Block,
    rg: usize,
    rows: &[SpanRow],
    whole_bytes: u64,
) {
    let part = block.fetch_graph_columns(store, rg).await.unwrap();
    assert!(part.bytes() < whole_bytes, "only the graph's chunks are fetched");
    let g = part.graph_columns().unwrap();
    assert_eq!(g.span_id.len(), rows.len());
    let mut roots = 0;
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(dict_at(&g.trace, i), r.trace_id.as_slice());
        assert_eq!(g.span_id[i], u64::from_be_bytes(r.span_id));
        assert_eq!(g.parent[i], u64::from_be_bytes(r.parent_span_id));
        roots += usize::from(g.parent[i] == 0);
        assert_eq!((g.kind[i] as u8, g.status[i] as u8), (r.kind, r.status_code));
        assert_eq!((g.start[i] as u64, g.duration[i]), (r.start_unix_nano, r.duration_nano));
        let service = crate::columns::service_name(&r.resource).unwrap_or_default();
        assert_eq!(dict_at(&g.service, i), service.as_bytes());
    }
    assert!(roots > 0 && roots < rows.len(), "roots and children both occur");
}

/// Every (scope, attribute key) of `rows`, read from the whole rows (moved attributes included).
fn keys_of_rows(rows: &[crate::row::SpanRow]) -> std::collections::BTreeSet<(crate::index::KeyScope, Vec<u8>)> {
    use crate::index::KeyScope;
    use crate::values::{Source, for_each_key};
    let mut want = std::collections::BTreeSet::new();
    for r in rows {
        for (scope, source, buf) in [
            (KeyScope::Resource, Source::Resource, &r.resource),
            (KeyScope::Scope, Source::Scope, &r.scope),
            (KeyScope::Span, Source::SpanAttributes, &r.attributes),
            (KeyScope::Event, Source::Events, &r.events),
            (KeyScope::Link, Source::Links, &r.links),
        ] {
            for_each_key(source, buf, |k| {
                want.insert((scope, k.to_vec()));
            });
        }
    }
    want
}

/// The index lists each row group's attribute keys for blocks written as compaction writes
/// them (moved keys included), none for head cuts, and none past the key limit.
#[tokio::test]
async fn index_key_lists_name_each_row_groups_keys() {
    use crate::index::KeyScope;
    let mut req = with_dedicatable_attributes(sample_request(600, 5, 5));
    // A key only the spans of a few traces carry, so row groups differ.
    let mut n = 0;
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            ss.scope.get_or_insert_with(Default::default).attributes = vec![kv("lib.attr", V::IntValue(1))];
            for sp in &mut ss.spans {
                n += 1;
                if n % 997 == 0 {
                    sp.attributes.push(kv("rare", V::StringValue("r".into())));
                }
            }
        }
    }
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    let opts = WriteOptions::lasting(300);
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    let lists = block.index.keys.as_ref().expect("a compacted block lists its keys");
    assert!(meta.dedicated_columns.iter().any(|d| d.name == "http.method"));
    let mut all = std::collections::BTreeSet::new();
    let mut rare = 0;
    // Each row group's list equals the keys of its rows: checked with every other column by
    // `assert_metric_columns_match_rows` below.
    for rg in 0..block.row_group_count() {
        let got: std::collections::BTreeSet<_> = lists.of_row_group(rg).map(|(s, k)| (s, k.to_vec())).collect();
        rare += usize::from(got.contains(&(KeyScope::Span, b"rare".to_vec())));
        all.extend(got);
    }
    assert!(
        rare > 0 && rare < block.row_group_count(),
        "`rare` is in some row groups only: {rare}"
    );
    for want in [
        (KeyScope::Span, "http.method"),
        (KeyScope::Span, "str"),
        (KeyScope::Resource, "service.name"),
        (KeyScope::Scope, "lib.attr"),
        (KeyScope::Event, "e"),
    ] {
        assert!(all.contains(&(want.0, want.1.as_bytes().to_vec())), "{want:?} listed");
    }
    assert_metric_columns_match_rows(&store, &block).await;

    // A head cut has none.
    let cut = write_block(&store, &cols, "t", Origin::default(), &WriteOptions::head_cut(300))
        .await
        .unwrap();
    let cut = Block::open(&store, &block_prefix("t", &cut.block_id)).await.unwrap();
    assert!(cut.index.keys.is_none() && cut.index.value_blooms.is_empty());

    // Past the key limit the block has none, and is otherwise whole.
    let mut many = sample_request(20, 5, 6);
    let mut i = 0;
    for rs in &mut many.resource_spans {
        for ss in &mut rs.scope_spans {
            for sp in &mut ss.spans {
                for _ in 0..50 {
                    i += 1;
                    sp.attributes.push(kv(&format!("k{i}"), V::IntValue(1)));
                }
            }
        }
    }
    assert!(i > crate::index::MAX_LISTED_KEYS);
    let meta = write_block(&store, &columns_of(&many), "t", Origin::default(), &opts)
        .await
        .unwrap();
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    assert!(block.index.keys.is_none());
    assert_eq!(block.index.value_blooms.len(), block.row_group_count());
}

#[tokio::test]
async fn metric_columns_match_the_row_reader() {
    let req = sample_request(600, 5, 4);
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 500,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    assert_metric_columns_match_rows(&store, &block).await;

    // Both golden writers: weft's own chunks and Parquet's column writer (the generic path).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
    let golden = weft_storage::LocalStorage::new(&dir).unwrap();
    for m in golden.list("blocks/golden/").await.unwrap() {
        if let Some(prefix) = m.path.strip_suffix("/meta.json") {
            let block = Block::open(&golden, prefix).await.unwrap();
            assert_metric_columns_match_rows(&golden, &block).await;
        }
    }
}
