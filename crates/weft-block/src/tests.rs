use super::*;
use prost::Message;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value::Value as V,
};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span, Status, TracesData, span};
use weft_storage::MemoryStorage;

fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

/// A deterministic request: `traces` traces of `per_trace` spans over two services, with every
/// attribute type, events, links, status and trace state.
pub(crate) fn sample_request(traces: u32, per_trace: u32, seed: u8) -> ExportTraceServiceRequest {
    let mut rs = Vec::new();
    for svc in 0..2u32 {
        let mut spans = Vec::new();
        for t in 0..traces {
            for s in 0..per_trace {
                if (t + s) % 2 != svc {
                    continue;
                }
                let mut tid = [0u8; 16];
                tid[0] = seed;
                tid[1..5].copy_from_slice(&(t.wrapping_mul(2654435761)).to_be_bytes());
                tid[15] = 1;
                let mut sid = [0u8; 8];
                sid[0] = seed;
                sid[1..5].copy_from_slice(&t.to_be_bytes());
                sid[5..7].copy_from_slice(&(s as u16).to_be_bytes());
                sid[7] = 7;
                let mut parent = sid;
                parent[5..7].copy_from_slice(&0u16.to_be_bytes());
                let start = 1_700_000_000_000_000_000u64 + u64::from(t) * 1_000_000 + u64::from(s) * 1000;
                spans.push(Span {
                    trace_id: tid.to_vec().into(),
                    span_id: sid.to_vec().into(),
                    trace_state: if s == 1 { "ro=1,vendor=x".into() } else { String::new() },
                    parent_span_id: if s == 0 {
                        Default::default()
                    } else {
                        parent.to_vec().into()
                    },
                    flags: 0x301,
                    name: format!("op-{}", s % 3),
                    kind: (s % 6) as i32,
                    start_time_unix_nano: start,
                    end_time_unix_nano: start + 5000 + u64::from(s),
                    attributes: vec![
                        kv("str", V::StringValue(format!("v{t}"))),
                        kv("int", V::IntValue(-(t as i64))),
                        kv("dbl", V::DoubleValue(1.5)),
                        kv("bool", V::BoolValue(true)),
                        kv(
                            "arr",
                            V::ArrayValue(ArrayValue {
                                values: vec![
                                    AnyValue {
                                        value: Some(V::IntValue(1)),
                                    },
                                    AnyValue {
                                        value: Some(V::StringValue("x".into())),
                                    },
                                ],
                            }),
                        ),
                        kv(
                            "kv",
                            V::KvlistValue(KeyValueList {
                                values: vec![kv("inner", V::BoolValue(false))],
                            }),
                        ),
                        kv("bytes", V::BytesValue(vec![0, 1, 2, 255].into())),
                    ],
                    dropped_attributes_count: s % 2,
                    events: if s == 0 {
                        vec![span::Event {
                            time_unix_nano: start + 10,
                            name: "ev".into(),
                            attributes: vec![kv("e", V::IntValue(3))],
                            dropped_attributes_count: 0,
                        }]
                    } else {
                        vec![]
                    },
                    dropped_events_count: 0,
                    links: if s == 2 {
                        vec![span::Link {
                            trace_id: vec![9; 16].into(),
                            span_id: vec![8; 8].into(),
                            trace_state: "a=b".into(),
                            attributes: vec![kv("l", V::StringValue("x".into()))],
                            dropped_attributes_count: 1,
                            flags: 1,
                        }]
                    } else {
                        vec![]
                    },
                    dropped_links_count: 0,
                    status: if s == 3 {
                        Some(Status {
                            message: "boom".into(),
                            code: 2,
                        })
                    } else {
                        None
                    },
                });
            }
        }
        rs.push(ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", V::StringValue(format!("svc-{svc}"))),
                    kv("host", V::StringValue("h".into())),
                ],
                dropped_attributes_count: 0,
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    version: "1.0".into(),
                    attributes: vec![],
                    dropped_attributes_count: 0,
                }),
                spans,
                schema_url: "https://s/1".into(),
            }],
            schema_url: "https://r/1".into(),
        });
    }
    ExportTraceServiceRequest { resource_spans: rs }
}

/// Collects (resource, scope, span) triples for comparison, ignoring grouping and order.
/// A span with its resource and scope, and their schema URLs, for field-by-field comparison.
type FlatSpan = (Option<Resource>, String, Option<InstrumentationScope>, String, Span);

fn flatten(rs: &[ResourceSpans]) -> Vec<FlatSpan> {
    let mut out = Vec::new();
    for r in rs {
        for ss in &r.scope_spans {
            for s in &ss.spans {
                out.push((
                    r.resource.clone(),
                    r.schema_url.clone(),
                    ss.scope.clone(),
                    ss.schema_url.clone(),
                    s.clone(),
                ));
            }
        }
    }
    out.sort_by(|a, b| a.4.span_id.cmp(&b.4.span_id));
    out
}

fn trace_ids(req: &ExportTraceServiceRequest) -> Vec<[u8; 16]> {
    let mut ids: Vec<[u8; 16]> = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.trace_id[..].try_into().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn spans_of(req: &ExportTraceServiceRequest, id: &[u8; 16]) -> Vec<FlatSpan> {
    flatten(&req.resource_spans)
        .into_iter()
        .filter(|x| x.4.trace_id[..] == id[..])
        .collect()
}

fn decode_rows(rows: &[SpanRow]) -> Vec<FlatSpan> {
    let td = TracesData::decode(&row::encode_traces_data(rows)[..]).unwrap();
    flatten(&td.resource_spans)
}

fn columns_of(req: &ExportTraceServiceRequest) -> SpanColumns {
    let bytes = req.encode_to_vec();
    let mut summary = weft_otlp::request::RequestSummary::default();
    weft_otlp::request::validate_request(&bytes, &mut summary).unwrap();
    let mut cols = SpanColumns::default();
    cols.push_request(&bytes).unwrap();
    cols
}

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
    for w in block.index.row_groups.windows(2) {
        assert!(w[0].max < w[1].min, "row groups are disjoint and sorted");
    }
}

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
    }
}

/// Span attribute keys the metric-column checks read: dedicated (complete or not, of every
/// type) and generic keys, a repeated one, and one no span has.
const METRIC_KEYS: [&str; 8] = ["http.method", "mixed", "int", "dbl", "bool", "str", "bytes", "absent"];

/// The value of row `i` of a dictionary column.
fn dict_at(d: &DictColumn, i: usize) -> Bytes {
    d.values[d.ids[i] as usize].clone()
}

/// Checks that the metric and service-graph columns of every row group of `block` read (with
/// only their chunks fetched) the same values as the full row reader.
async fn assert_metric_columns_match_rows(store: &dyn weft_storage::Storage, block: &Block) {
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
        assert!(starts.name.ids.is_empty() && starts.duration.is_empty());

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

/// `sample_request` plus attributes that become dedicated columns: a low-cardinality string,
/// a key that is mostly an int and sometimes a string, and a key repeated within a span.
fn with_dedicatable_attributes(mut req: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let mut i = 0usize;
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            for s in &mut ss.spans {
                i += 1;
                s.attributes
                    .push(kv("http.method", V::StringValue(["GET", "POST", "PUT"][i % 3].into())));
                s.attributes.push(if i.is_multiple_of(10) {
                    kv("mixed", V::StringValue("ten".into()))
                } else {
                    kv("mixed", V::IntValue(i as i64 % 7))
                });
                if i.is_multiple_of(4) {
                    s.attributes.push(kv("http.method", V::StringValue("again".into())));
                }
            }
        }
    }
    req
}

/// Attributes sorted by key (stable, so repeated keys keep their order): dedicated values are
/// appended after the generic ones, and OTLP gives attribute order no meaning.
fn normalized(mut spans: Vec<FlatSpan>) -> Vec<FlatSpan> {
    for s in &mut spans {
        s.4.attributes.sort_by(|a, b| a.key.cmp(&b.key));
    }
    spans
}

#[tokio::test]
async fn dedicated_columns_round_trip_every_field() {
    let req = with_dedicatable_attributes(sample_request(600, 5, 5));
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 500,
        dedicated_columns: true,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    assert_eq!(meta.version, 2);
    let chosen: Vec<(meta::DedicatedScope, &str, meta::ValueType)> = meta
        .dedicated_columns
        .iter()
        .map(|c| (c.scope, c.name.as_str(), c.value_type))
        .collect();
    use meta::{DedicatedScope as S, ValueType as T};
    for want in [
        (S::Span, "http.method", T::String),
        (S::Span, "mixed", T::Int),
        (S::Span, "int", T::Int),
        (S::Span, "dbl", T::Double),
        (S::Span, "bool", T::Bool),
        (S::Resource, "service.name", T::String),
        (S::Resource, "host", T::String),
    ] {
        assert!(chosen.contains(&want), "{want:?} is dedicated: {chosen:?}");
    }
    assert!(
        !chosen.iter().any(|c| c.1 == "str"),
        "a string with a value per trace stays generic: {chosen:?}"
    );
    // A column is complete when no occurrence of its key stayed in the blob: `http.method` is
    // sometimes repeated and `mixed` sometimes a string.
    for c in meta.dedicated_columns.iter().filter(|c| c.scope == S::Span) {
        let complete = !matches!(c.name.as_str(), "http.method" | "mixed");
        assert_eq!(c.complete, complete, "{c:?}");
    }
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    for id in trace_ids(&req).iter().step_by(7) {
        let rows = block.find_trace(&store, id).await.unwrap();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(&req, id)));
    }
    // Whole row groups, and the prefilter's attribute column, carry the moved values too.
    let mut all = Vec::new();
    for rg in 0..block.row_group_count() {
        let data = block.fetch_row_group(&store, rg).await.unwrap();
        let rows = data.rows().unwrap();
        let needs = Needs {
            attributes: true,
            ..Default::default()
        };
        let f = data.filter_columns(needs).unwrap();
        let ranges = [0..1, 3..7, rows.len() - 2..rows.len()];
        let want: Vec<SpanRow> = ranges.iter().flat_map(|r| rows[r.clone()].to_vec()).collect();
        assert_eq!(data.rows_in(&ranges).unwrap(), want, "rows_in is rows() restricted");
        for (i, r) in rows.iter().enumerate() {
            use row::SpanFields;
            assert_eq!(f.row(i).attributes(), &r.attributes[..]);
        }
        all.extend(rows);
    }
    assert_eq!(normalized(decode_rows(&all)), normalized(flatten(&req.resource_spans)));

    // Rewriting the rows (compaction) keeps every value; the same data without dedicated
    // columns is larger.
    let mut again = SpanColumns::default();
    for r in &all {
        again.push_row(r);
    }
    again.end_run();
    let meta2 = write_block(&store, &again, "t", Origin::default(), &opts)
        .await
        .unwrap();
    assert_eq!(meta2.dedicated_columns, meta.dedicated_columns);
    let generic = WriteOptions {
        dedicated_columns: false,
        ..opts.clone()
    };
    let plain = write_block(&store, &cols, "t", Origin::default(), &generic)
        .await
        .unwrap();
    assert!(plain.dedicated_columns.is_empty());
    println!(
        "sample bytes per span: {} with dedicated columns, {} without",
        meta.size_bytes / meta.span_count,
        plain.size_bytes / plain.span_count
    );
}

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

/// The footer statistics of dedicated columns bound the values written: null counts exact,
/// NaN left out of double bounds, a zero bound written -0.0 (min) and +0.0 (max), strings cut to
/// 64 bytes at a character boundary (the max rounded up), and no bounds for an all-null chunk.
#[test]
fn dedicated_column_statistics_bound_their_values() {
    use parquet::column::reader::get_typed_column_reader;
    use parquet::data_type::{ByteArrayType, DataType, DoubleType, Int64Type};
    use parquet::file::reader::{FileReader, RowGroupReader};
    let mut req = sample_request(300, 4, 21);
    let long = "é".repeat(40); // 80 bytes
    let mut i = 0usize;
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            for sp in &mut ss.spans {
                i += 1;
                sp.attributes
                    .push(kv("d", V::DoubleValue([f64::NAN, -0.0, 0.0, 2.5, -7.25, 0.0][i % 6])));
                sp.attributes
                    .push(kv("long", V::StringValue(format!("{long}{}", i % 3))));
                // Only in the traces sorted first: the last row groups have no value.
                if sp.trace_id[1] < 0x30 {
                    sp.attributes.push(kv("early", V::IntValue((i % 7) as i64 - 3)));
                }
            }
        }
    }
    let cols = columns_of(&req);
    let opts = WriteOptions {
        row_group_rows: 100,
        dedicated_columns: true,
        ..Default::default()
    };
    let enc = encode(&cols, &opts).unwrap();
    let file = parquet::file::serialized_reader::SerializedFileReader::new(enc.data.clone()).unwrap();
    let column = |name: &str| {
        let k = enc.dedicated.iter().position(|d| d.name == name);
        k.map(|k| 16 + k)
            .unwrap_or_else(|| panic!("{name} is dedicated: {:?}", enc.dedicated))
    };
    fn values<T: DataType>(rg: &dyn RowGroupReader, c: usize, n: usize) -> (Vec<T::T>, usize) {
        let mut r = get_typed_column_reader::<T>(rg.get_column_reader(c).unwrap());
        let (mut vals, mut def) = (Vec::new(), Vec::new());
        r.read_records(n, Some(&mut def), None, &mut vals).unwrap();
        (vals, def.iter().filter(|&&d| d == 0).count())
    }
    let mut all_null_chunks = 0;
    for rg in 0..file.num_row_groups() {
        let reader = file.get_row_group(rg).unwrap();
        let n = reader.metadata().num_rows() as usize;
        let stats = |c: usize| reader.metadata().column(c).statistics().cloned().expect("statistics");

        let c = column("d");
        let (v, nulls) = values::<DoubleType>(&*reader, c, n);
        let st = stats(c);
        assert_eq!(st.null_count_opt(), Some(nulls as u64));
        let finite: Vec<f64> = v.iter().copied().filter(|d| !d.is_nan()).collect();
        let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let as_f64 = |b: Option<&[u8]>| f64::from_le_bytes(b.unwrap().try_into().unwrap());
        let (slo, shi) = (as_f64(st.min_bytes_opt()), as_f64(st.max_bytes_opt()));
        assert_eq!(slo, lo);
        assert_eq!(shi, hi);
        if lo == 0.0 {
            assert!(slo.is_sign_negative(), "a zero minimum is -0.0");
        }
        if hi == 0.0 {
            assert!(shi.is_sign_positive(), "a zero maximum is +0.0");
        }

        let c = column("long");
        let (v, nulls) = values::<ByteArrayType>(&*reader, c, n);
        let st = stats(c);
        assert_eq!(st.null_count_opt(), Some(nulls as u64));
        let lo = v.iter().map(|b| b.data()).min().unwrap();
        let hi = v.iter().map(|b| b.data()).max().unwrap();
        let (smin, smax) = (st.min_bytes_opt().unwrap(), st.max_bytes_opt().unwrap());
        assert!(smin.len() <= 64 && smax.len() <= 64);
        assert!(smin <= lo && smax >= hi, "the bounds hold");
        assert!(lo.starts_with(smin), "the minimum is a prefix");
        assert!(std::str::from_utf8(smin).is_ok() && std::str::from_utf8(smax).is_ok());
        assert!(!st.min_is_exact() && !st.max_is_exact());

        let c = column("early");
        let (v, nulls) = values::<Int64Type>(&*reader, c, n);
        let st = stats(c);
        assert_eq!(st.null_count_opt(), Some(nulls as u64));
        if v.is_empty() {
            all_null_chunks += 1;
            assert!(st.min_bytes_opt().is_none() && st.max_bytes_opt().is_none());
        } else {
            let as_i64 = |b: Option<&[u8]>| i64::from_le_bytes(b.unwrap().try_into().unwrap());
            assert_eq!(as_i64(st.min_bytes_opt()), *v.iter().min().unwrap());
            assert_eq!(as_i64(st.max_bytes_opt()), *v.iter().max().unwrap());
        }
    }
    assert!(all_null_chunks > 0, "some row group has no `early` value");
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
    assert_metric_columns_match_rows(&store, &block).await;
}

/// A block whose index is version 3 (key lists) stays readable (regenerate as for
/// `golden_v1_block_stays_readable`): written as compaction writes, with value blooms, key
/// lists and dedicated columns.
#[tokio::test]
async fn golden_index_v3_block_with_key_lists_stays_readable() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden");
    let store = weft_storage::LocalStorage::new(&dir).unwrap();
    let req = with_dedicatable_attributes(sample_request(40, 5, 9));
    if std::env::var_os("WEFT_WRITE_GOLDEN").is_some() {
        write_block(
            &store,
            &columns_of(&req),
            "golden-v3",
            Origin::default(),
            &WriteOptions::lasting(64),
        )
        .await
        .unwrap();
    }
    let listed = store.list("blocks/golden-v3/").await.unwrap();
    let metas: Vec<_> = listed.iter().filter(|o| o.path.ends_with("/meta.json")).collect();
    assert_eq!(
        metas.len(),
        1,
        "one golden block with an index v3 is committed under {}",
        dir.display()
    );
    let prefix = metas[0].path.trim_end_matches("/meta.json");
    let index = store.get(&format!("{prefix}/index.bin")).await.unwrap();
    assert_eq!(index[8..12], 3u32.to_le_bytes(), "index version");
    let block = Block::open(&store, prefix).await.unwrap();
    assert_eq!(block.meta.version, 2);
    assert!(block.index.keys.is_some() && block.index.value_blooms.len() == block.row_group_count());
    for id in trace_ids(&req) {
        let rows = block.find_trace(&store, &id).await.unwrap();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(&req, &id)));
    }
    assert_metric_columns_match_rows(&store, &block).await;
}

/// Regression (issue 13, point 5): flipped bytes in the middle of `data.parquet` were served
/// as data (3 traces of 600 came back with a wrong span ID). Every read now checks the column
/// chunks it fetched, and the footer and index, against checksums recorded at write.
#[tokio::test]
async fn damaged_bytes_are_detected_never_served() {
    let req = sample_request(600, 4, 5);
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 300,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    let prefix = block_prefix("t", &meta.block_id);
    let sums = meta.checksums.clone().expect("new blocks carry checksums");
    assert_eq!(sums.chunks.len(), meta.row_groups as usize);
    let data_path = format!("{prefix}/data.parquet");
    let clean = store.get(&data_path).await.unwrap();
    for at in [clean.len() / 3, clean.len() / 2, clean.len() * 2 / 3] {
        let mut bad = clean.to_vec();
        bad[at] ^= 0x10;
        store.put(&data_path, Bytes::from(bad)).await.unwrap();
        let block = Block::open(&store, &prefix).await.unwrap();
        let mut damaged = 0;
        for id in trace_ids(&req).iter().step_by(5) {
            match block.find_trace(&store, id).await {
                Ok(rows) => assert_eq!(decode_rows(&rows), spans_of(&req, id), "served damaged data"),
                Err(e) => {
                    assert!(matches!(e, BlockError::Damaged(_)), "{e}");
                    assert!(e.is_damage(true));
                    damaged += 1;
                }
            }
        }
        assert!(damaged > 0, "a flipped byte at {at} went unnoticed");
    }
    // The footer.
    let mut bad = clean.to_vec();
    let n = bad.len();
    bad[n - 20] ^= 1;
    store.put(&data_path, Bytes::from(bad)).await.unwrap();
    let block = Block::open(&store, &prefix).await.unwrap();
    let err = block.find_trace(&store, &trace_ids(&req)[0]).await.unwrap_err();
    assert!(matches!(err, BlockError::Damaged(_)), "{err}");
    store.put(&data_path, clean).await.unwrap();
    // The index.
    let index_path = format!("{prefix}/index.bin");
    let mut index = store.get(&index_path).await.unwrap().to_vec();
    let mid = index.len() / 2;
    index[mid] ^= 4;
    store.put(&index_path, Bytes::from(index)).await.unwrap();
    let err = Block::open(&store, &prefix).await.unwrap_err();
    assert!(matches!(err, BlockError::Damaged(_)), "{err}");
}

/// `Block::open` maps `meta.version` to an encoding through the dispatch: an unknown version
/// is refused with its number, and a version 1 block that lists dedicated columns is corrupt.
#[tokio::test]
async fn open_refuses_versions_without_an_encoding() {
    let cols = columns_of(&sample_request(50, 3, 6));
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        dedicated_columns: true,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    assert!(!meta.dedicated_columns.is_empty());
    let prefix = block_prefix("t", &meta.block_id);
    let put_meta = |m: meta::BlockMeta| {
        let store = &store;
        let path = format!("{prefix}/meta.json");
        async move {
            store
                .put(&path, Bytes::from(serde_json::to_vec(&m).unwrap()))
                .await
                .unwrap()
        }
    };
    put_meta(meta::BlockMeta {
        kafka: Vec::new(),
        version: meta::FORMAT_VERSION + 1,
        ..meta.clone()
    })
    .await;
    let err = Block::open(&store, &prefix).await.unwrap_err();
    assert!(
        matches!(err, BlockError::UnsupportedVersion(v) if v == meta::FORMAT_VERSION + 1),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "block format version {} is not supported by this build",
            meta::FORMAT_VERSION + 1
        )
    );
    put_meta(meta::BlockMeta {
        kafka: Vec::new(),
        version: 1,
        ..meta.clone()
    })
    .await;
    let err = Block::open(&store, &prefix).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt block: a version 1 block lists dedicated columns"
    );
    put_meta(meta.clone()).await;
    assert_eq!(Block::open(&store, &prefix).await.unwrap().meta, meta);
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

/// Regression (issue 45): a value of `meta.json` changed so that it still parses (a time range,
/// `wal_end`, a tenant) was believed: a block skipped for the wrong windows, WAL records
/// skipped at replay, spans served to the tenant the damaged meta named. The meta carries its
/// own checksum, and the folder must name the block the meta describes.
#[tokio::test]
async fn a_meta_changed_but_parsing_is_damage() {
    let cols = columns_of(&sample_request(40, 2, 3));
    let store = MemoryStorage::new();
    let meta = write_block(&store, &cols, "t", Origin::default(), &WriteOptions::default())
        .await
        .unwrap();
    let prefix = block_prefix("t", &meta.block_id);
    let path = format!("{prefix}/meta.json");
    let clean = store.get(&path).await.unwrap();
    let text = String::from_utf8(clean.to_vec()).unwrap();
    assert!(text.contains("\"meta_checksum\""), "{text}");
    Block::open(&store, &prefix).await.expect("the clean meta opens");
    // Reformatted (white space only): still the same meta.
    let compact = serde_json::to_vec(&serde_json::from_slice::<serde_json::Value>(&clean).unwrap()).unwrap();
    store.put(&path, Bytes::from(compact)).await.unwrap();
    Block::open(&store, &prefix).await.expect("white space is not damage");
    let start = meta.min_start_unix_nano.to_string();
    let later = (meta.min_start_unix_nano + 1_000_000_000).to_string();
    for (what, from, to) in [
        ("a time", start.as_str(), later.as_str()),
        (
            "the span count",
            &*format!("\"span_count\": {}", meta.span_count),
            "\"span_count\": 1",
        ),
    ] {
        assert!(text.contains(from), "{what}: {from} not in {text}");
        store.put(&path, Bytes::from(text.replacen(from, to, 1))).await.unwrap();
        let err = Block::open(&store, &prefix).await.unwrap_err();
        assert!(
            matches!(err, BlockError::Damaged(_)) && err.is_damage(true),
            "{what}: {err}"
        );
    }
    // Another tenant's name, with a checksum that matches it: the folder disagrees.
    let mut other = meta.clone();
    other.tenant = "someone-else".into();
    store.put(&path, Bytes::from(other.to_json().unwrap())).await.unwrap();
    let err = Block::open(&store, &prefix).await.unwrap_err();
    assert!(matches!(err, BlockError::Damaged(_)), "{err}");
    // A meta written before the checksum (none recorded) is read as it is.
    let mut old = serde_json::from_slice::<serde_json::Value>(&clean).unwrap();
    old.as_object_mut().unwrap().remove("meta_checksum");
    store
        .put(&path, Bytes::from(serde_json::to_vec(&old).unwrap()))
        .await
        .unwrap();
    Block::open(&store, &prefix)
        .await
        .expect("a meta without a checksum opens");
}

/// A block whose `meta.json` is lost still has a time range: its data file's statistics bound
/// it, so the answers it may be missing from are the ones flagged partial.
#[tokio::test]
async fn a_data_file_alone_gives_its_time_range() {
    let cols = columns_of(&sample_request(60, 3, 4));
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 50,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    assert!(meta.row_groups > 1);
    let data = format!("{}/data.parquet", block_prefix("t", &meta.block_id));
    let (lo, hi) = data_time_range(&store, &data, meta.size_bytes).await.unwrap();
    assert_eq!(lo, meta.min_start_unix_nano);
    assert!(hi >= meta.max_end_unix_nano, "{hi} < {}", meta.max_end_unix_nano);
    assert!(data_time_range(&store, &data, meta.size_bytes - 1).await.is_none());
}

/// Every byte of a data file is checked by something: the leading magic by the scrubber, each
/// column chunk by its checksum, the footer by its own. No page index sits between the last
/// chunk and the footer unchecked (issue 45: damage there went unnoticed).
#[tokio::test]
async fn every_byte_of_a_data_file_is_checksummed() {
    for (n, rg) in [(60, 50), (2000, 300)] {
        let cols = columns_of(&sample_request(n, 3, 4));
        let store = MemoryStorage::new();
        let opts = WriteOptions {
            row_group_rows: rg,
            ..Default::default()
        };
        let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
        let data = store
            .get(&format!("{}/data.parquet", block_prefix("t", &meta.block_id)))
            .await
            .unwrap();
        let len = data.len() as u64;
        let meta_len = u64::from(u32::from_le_bytes(
            data[data.len() - 8..data.len() - 4].try_into().unwrap(),
        ));
        let footer =
            ParquetMetaDataReader::decode_metadata(&data[(len - 8 - meta_len) as usize..(len - 8) as usize]).unwrap();
        let mut chunks: Vec<(u64, u64)> = footer
            .row_groups()
            .iter()
            .flat_map(|r| r.columns().iter().map(|c| c.byte_range()))
            .collect();
        chunks.sort_unstable();
        let mut at = 4; // after the leading magic
        for (s, l) in chunks {
            assert_eq!(s, at, "unchecked bytes {at}..{s}");
            at = s + l;
        }
        assert_eq!(
            at,
            len - 8 - meta_len,
            "unchecked bytes between the last chunk and the footer"
        );
        let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
        let mut bad = data.to_vec();
        bad[1] ^= 0x20;
        store
            .put(
                &format!("{}/data.parquet", block_prefix("t", &meta.block_id)),
                Bytes::from(bad),
            )
            .await
            .unwrap();
        let err = block.verify_row_group(&store, 0).await.unwrap_err();
        assert!(matches!(err, BlockError::Damaged(_)), "{err}");
    }
}
