//! Reads the columns queries need of a row group, without assembling spans: those a
//! search filters on, those a metrics query reads, and those of the service graph.

use super::col;
use super::reader::RowGroup;
use super::reader::{
    DedicatedValues, RangeChunk, SpanDedicated, dict_column, fixed_dict_column, plain_fixed, read, read_dedicated,
    row_count, row_group_reader,
};
use crate::BlockError;
use crate::dedicated::{Scalar, append_key_value, pick_attributes};
use crate::meta::{DedicatedColumn, DedicatedScope, ValueType};
use crate::read::{DictBuilder, DictColumn, FilterColumns, GraphColumns, MetricColumns, MetricNeeds, Needs};
use bytes::Bytes;
use parquet::data_type::{FixedLenByteArrayType, Int32Type, Int64Type};
use parquet::file::metadata::ParquetMetaData;

/// Reads the columns `needs` asks for (plus trace IDs, start times and durations) of every row
/// of row group `rg`, without assembling spans. Dictionary-encoded values share their
/// dictionary's bytes, so this costs little more than decoding the indexes.
pub fn read_filter_columns(
    meta: &ParquetMetaData,
    rg: usize,
    chunk: RangeChunk,
    dedicated: &[DedicatedColumn],
    needs: Needs,
) -> Result<FilterColumns, BlockError> {
    let rgr = row_group_reader(meta, rg, chunk)?;
    let n = row_count(meta, rg)?;
    // Byte strings as their dictionary and one id per row, as the row reader takes them: the
    // generic column reader hands out a `Bytes` of the page per value of every row.
    let ids = fixed_dict_column(&rgr, col::TRACE_ID, n, false, 16)?;
    let distinct: Vec<[u8; 16]> = ids.values.iter().map(|v| v[..].try_into().unwrap_or([0; 16])).collect();
    let mut out = FilterColumns {
        trace_ids: ids.ids.iter().map(|&i| distinct[i as usize]).collect(),
        start: read::<Int64Type>(&rgr, col::START, 0, n, false)?.0,
        duration: read::<Int64Type>(&rgr, col::DURATION, 0, n, false)?.0,
        ..Default::default()
    };
    if needs.name {
        out.name = dict_column(&rgr, col::NAME, n, false)?;
    }
    if needs.status {
        out.status = read::<Int32Type>(&rgr, col::STATUS_CODE, 0, n, false)?.0;
    }
    if needs.kind {
        out.kind = read::<Int32Type>(&rgr, col::KIND, 0, n, false)?.0;
    }
    if needs.resource {
        out.resource = dict_column(&rgr, col::RESOURCE, n, false)?;
    }
    if needs.scope {
        out.scope = dict_column(&rgr, col::SCOPE, n, false)?;
    }
    if needs.parent {
        let parents = fixed_dict_column(&rgr, col::PARENT, n, true, 8)?;
        let set: Vec<bool> = parents.values.iter().map(|p| p.iter().any(|&b| b != 0)).collect();
        out.has_parent = parents.ids.iter().map(|&i| set[i as usize]).collect();
    }
    for (k, (c, need)) in [
        (col::ATTRIBUTES, needs.attributes),
        (col::EVENTS, needs.events),
        (col::LINKS, needs.links),
    ]
    .into_iter()
    .enumerate()
    {
        if need {
            out.blobs[k] = dict_column(&rgr, c, n, true)?;
        }
    }
    if needs.attributes {
        let moved = SpanDedicated::read(&rgr, dedicated, n, 0, n)?;
        if !moved.is_empty() {
            out.assembled = (0..n)
                .map(|i| {
                    moved.any(i).then(|| {
                        let stored = out.blobs[0].get(i);
                        let mut buf = Vec::with_capacity(stored.len() + moved.appended_len(i));
                        buf.extend_from_slice(stored);
                        moved.append(i, &mut buf);
                        buf.into_boxed_slice()
                    })
                })
                .collect();
        }
    }
    Ok(out)
}

/// The schema columns [`read_metric_columns`] reads for `needs`, ascending.
pub(crate) fn metric_columns(needs: &MetricNeeds, dedicated: &[DedicatedColumn]) -> Vec<usize> {
    let mut c = vec![col::START];
    for (need, i) in [
        (needs.name, col::NAME),
        (needs.kind, col::KIND),
        (needs.duration, col::DURATION),
        (needs.status, col::STATUS_CODE),
        (needs.status_message, col::STATUS_MESSAGE),
        (needs.resource, col::RESOURCE),
        (needs.scope, col::SCOPE),
        (needs.trace_ids, col::TRACE_ID),
        (needs.trace_ids, col::SPAN_ID),
        (needs.parents, col::PARENT),
    ] {
        if need {
            c.push(i);
        }
    }
    for key in &needs.span_keys {
        match span_column(dedicated, key) {
            Some((i, d)) => {
                c.push(i);
                if !d.complete {
                    c.push(col::ATTRIBUTES);
                }
            }
            None => c.push(col::ATTRIBUTES),
        }
    }
    if needs.blobs || needs.all_span_attributes {
        c.push(col::ATTRIBUTES);
        c.extend(span_dedicated(dedicated).map(|(i, _)| i));
    }
    if needs.lists {
        c.extend([col::EVENTS, col::LINKS]);
    }
    c.sort_unstable();
    c.dedup();
    c
}

/// The span-scope dedicated columns of a block, with their schema columns, at most 16 (a mask
/// of [`MetricColumns::dedicated_mask`] each; weft writes at most
/// [`crate::dedicated::MAX_PER_SCOPE`]).
fn span_dedicated(dedicated: &[DedicatedColumn]) -> impl Iterator<Item = (usize, &DedicatedColumn)> {
    dedicated
        .iter()
        .enumerate()
        .filter(|(_, d)| d.scope == DedicatedScope::Span)
        .map(|(k, d)| (col::EXTRA + 1 + k, d))
        .take(16)
}

/// The schema column of the span-scope dedicated column of `key`, if the block has one.
fn span_column<'a>(dedicated: &'a [DedicatedColumn], key: &str) -> Option<(usize, &'a DedicatedColumn)> {
    dedicated
        .iter()
        .enumerate()
        .find(|(_, d)| d.scope == DedicatedScope::Span && d.name == key)
        .map(|(k, d)| (col::EXTRA + 1 + k, d))
}

/// Reads the columns of row group `rg` that `needs` asks for. `chunk` must hold their bytes.
pub fn read_metric_columns(
    meta: &ParquetMetaData,
    rg: usize,
    chunk: RangeChunk,
    dedicated: &[DedicatedColumn],
    needs: &MetricNeeds,
) -> Result<MetricColumns, BlockError> {
    let rgr = row_group_reader(meta, rg, chunk)?;
    let n = row_count(meta, rg)?;
    let mut out = MetricColumns {
        start: read::<Int64Type>(&rgr, col::START, 0, n, false)?.0,
        ..Default::default()
    };
    if needs.duration {
        out.duration = read::<Int64Type>(&rgr, col::DURATION, 0, n, false)?.0;
    }
    if needs.status {
        out.status = read::<Int32Type>(&rgr, col::STATUS_CODE, 0, n, false)?.0;
    }
    if needs.kind {
        out.kind = read::<Int32Type>(&rgr, col::KIND, 0, n, false)?.0;
    }
    if needs.name {
        out.name = dict_column(&rgr, col::NAME, n, false)?;
    }
    if needs.status_message {
        out.status_message = dict_column(&rgr, col::STATUS_MESSAGE, n, true)?;
    }
    if needs.resource {
        out.resource = dict_column(&rgr, col::RESOURCE, n, false)?;
    }
    if needs.scope {
        out.scope = dict_column(&rgr, col::SCOPE, n, false)?;
    }
    if !needs.span_keys.is_empty() {
        out.span_attributes = span_attribute_columns(&rgr, dedicated, &needs.span_keys, n)?;
    }
    if needs.trace_ids {
        out.trace_id = fixed_dict_column(&rgr, col::TRACE_ID, n, false, 16)?;
        out.span_id = plain_fixed::<8>(&rgr, col::SPAN_ID, n)?;
    }
    if needs.parents {
        out.parent = fixed_dict_column(&rgr, col::PARENT, n, true, 8)?;
    }
    if needs.lists {
        out.events = dict_column(&rgr, col::EVENTS, n, true)?;
        out.links = dict_column(&rgr, col::LINKS, n, true)?;
    }
    if needs.all_span_attributes {
        out.moved = moved_columns(&rgr, dedicated, n)?;
    }
    if needs.blobs || needs.all_span_attributes {
        out.attributes = dict_column(&rgr, col::ATTRIBUTES, n, true)?;
    }
    if needs.blobs {
        out.dedicated_mask = vec![0; n];
        for (bit, (c, d)) in span_dedicated(dedicated).enumerate() {
            let values = read_dedicated(&rgr, c, d.value_type, n, 0, n)?;
            for (i, m) in out.dedicated_mask.iter_mut().enumerate() {
                if SpanDedicated::value(&values, i).is_some() {
                    *m |= 1 << bit;
                }
            }
            out.dedicated_keys.push(d.name.clone());
        }
    }
    Ok(out)
}

/// The values moved to each span-scope dedicated column, as [`MetricColumns::moved`].
fn moved_columns(rgr: &RowGroup<'_>, dedicated: &[DedicatedColumn], n: usize) -> Result<Vec<DictColumn>, BlockError> {
    let mut out = Vec::new();
    for (k, d) in dedicated.iter().enumerate() {
        if d.scope != DedicatedScope::Span {
            continue;
        }
        out.push(dedicated_key_values(rgr, col::EXTRA + 1 + k, d, n)?);
    }
    Ok(out)
}

/// The values of dedicated column `d` (schema column `c`) in every row, each encoded as a
/// `Span.attributes` field of its key (empty where the row has none). A string column keeps
/// its dictionary ids, so a value is encoded once per distinct value.
fn dedicated_key_values(rgr: &RowGroup<'_>, c: usize, d: &DedicatedColumn, n: usize) -> Result<DictColumn, BlockError> {
    let key = d.name.as_bytes();
    if d.value_type == ValueType::String {
        let mut ids = dict_column(rgr, c, n, true)?;
        for (id, v) in ids.values.iter_mut().enumerate() {
            let mut kv = Vec::new();
            if ids.null != Some(id as u32) {
                append_key_value(&mut kv, key, Scalar::Str(v));
            }
            *v = Bytes::from(kv);
        }
        return Ok(ids);
    }
    let values = read_dedicated(rgr, c, d.value_type, n, 0, n)?;
    let mut interner = DictBuilder::default();
    let mut kv = Vec::new();
    for i in 0..n {
        kv.clear();
        if let Some(x) = SpanDedicated::value(&values, i) {
            append_key_value(&mut kv, key, x);
        }
        interner.push(&kv);
    }
    Ok(interner.finish())
}

/// The values of span attribute `keys` in every row, as [`MetricColumns::span_attributes`].
///
/// A key whose dedicated column is complete is read from that column alone (a string column
/// keeps its dictionary ids, so the work is per distinct value). Any other key is picked out of
/// each span's attribute blob, plus its dedicated column's moved values if it has one.
fn span_attribute_columns(
    rgr: &RowGroup<'_>,
    dedicated: &[DedicatedColumn],
    keys: &[String],
    n: usize,
) -> Result<Vec<DictColumn>, BlockError> {
    let mut out: Vec<DictColumn> = keys.iter().map(|_| DictColumn::default()).collect();
    // Keys read from the blob: (index in `keys`, the moved values of an incomplete column).
    let mut from_blob: Vec<(usize, Option<DedicatedValues>)> = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        match span_column(dedicated, key) {
            Some((c, d)) if d.complete => out[k] = dedicated_key_values(rgr, c, d, n)?,
            Some((c, d)) => from_blob.push((k, Some(read_dedicated(rgr, c, d.value_type, n, 0, n)?))),
            None => from_blob.push((k, None)),
        }
    }
    if from_blob.is_empty() {
        return Ok(out);
    }
    // The keys are picked once per distinct blob (the dictionary's values), and each row takes
    // its blob's ids, unless a dedicated column moved a value out of it.
    let blobs = dict_column(rgr, col::ATTRIBUTES, n, true)?;
    let want: Vec<&[u8]> = from_blob.iter().map(|&(k, _)| keys[k].as_bytes()).collect();
    let mut picked: Vec<Vec<u8>> = vec![Vec::new(); want.len()];
    let mut interners: Vec<DictBuilder> = want.iter().map(|_| DictBuilder::default()).collect();
    // Per distinct blob, per key: the id of what the blob holds of it.
    let mut of_blob: Vec<u32> = Vec::with_capacity(blobs.values.len() * want.len());
    for b in &blobs.values {
        picked.iter_mut().for_each(Vec::clear);
        pick_attributes(b, &want, &mut picked);
        for (d, p) in interners.iter_mut().zip(&picked) {
            of_blob.push(d.intern(p));
        }
    }
    let mut buf = Vec::new();
    for i in 0..n {
        let blob = blobs.ids.get(i).map_or(0, |&id| id as usize);
        for (j, (_, moved)) in from_blob.iter().enumerate() {
            let id = of_blob.get(blob * want.len() + j).copied().unwrap_or(0);
            // A moved value's key occurred once in the span, so the blob had none of it.
            match moved.as_ref().and_then(|v| SpanDedicated::value(v, i)) {
                Some(x) => {
                    buf.clear();
                    buf.extend_from_slice(interners[j].value(id));
                    append_key_value(&mut buf, want[j], x);
                    interners[j].push(&buf);
                }
                None => interners[j].push_id(id),
            }
        }
    }
    for ((k, _), interner) in from_blob.into_iter().zip(interners) {
        out[k] = interner.finish();
    }
    Ok(out)
}

/// The schema columns [`read_graph_columns`] reads, ascending.
pub(crate) const GRAPH_COLUMNS: [usize; 8] = [
    col::TRACE_ID,
    col::SPAN_ID,
    col::PARENT,
    col::KIND,
    col::START,
    col::DURATION,
    col::STATUS_CODE,
    col::SERVICE,
];

/// Reads the [`GraphColumns`] of row group `rg`. `chunk` must hold [`GRAPH_COLUMNS`].
pub fn read_graph_columns(meta: &ParquetMetaData, rg: usize, chunk: RangeChunk) -> Result<GraphColumns, BlockError> {
    let rgr = row_group_reader(meta, rg, chunk)?;
    let n = row_count(meta, rg)?;
    let id = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
    let parents = fixed_dict_column(&rgr, col::PARENT, n, true, 8)?;
    let parent_of: Vec<u64> = parents.values.iter().map(|v| id(v)).collect();
    Ok(GraphColumns {
        trace: fixed_dict_column(&rgr, col::TRACE_ID, n, false, 16)?,
        span_id: read::<FixedLenByteArrayType>(&rgr, col::SPAN_ID, 0, n, false)?
            .0
            .iter()
            .map(|v| id(v.data()))
            .collect(),
        parent: parents.ids.iter().map(|&i| parent_of[i as usize]).collect(),
        kind: read::<Int32Type>(&rgr, col::KIND, 0, n, false)?.0,
        status: read::<Int32Type>(&rgr, col::STATUS_CODE, 0, n, false)?.0,
        start: read::<Int64Type>(&rgr, col::START, 0, n, false)?.0,
        duration: read::<Int64Type>(&rgr, col::DURATION, 0, n, false)?.0,
        service: dict_column(&rgr, col::SERVICE, n, false)?,
    })
}
