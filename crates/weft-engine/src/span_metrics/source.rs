//! Spans by index: the [`SpanSource`] trait, and its implementation over a row group's
//! column chunks ([`MetricColumns`]).
//!
//! The hot path: these are called per span from [`super::sink`]'s loop in another module, so
//! they are `#[inline]` to stay inlined there, as they were when one file held both. Without
//! it `MetricColumns::key` became a call per span and span-local metrics were 26–37 % slower
//! (`errors_rate`, `errors_rate_gt_1` on the same 2 M spans, 2026-12-02).

use bytes::Bytes;
#[cfg(doc)]
use weft_block::MetricNeeds;
use weft_block::row::SpanRow;
use weft_block::{DictColumn, MetricColumns};

#[cfg(doc)]
use super::SpanMetrics;
use super::key::{BaseKey, HAS_PARENT};
use crate::decode::KeysOf;

/// Spans fed to [`SpanMetrics::add`] (and the column tag sinks) by index.
pub trait SpanSource {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn start(&self, i: usize) -> u64;
    fn duration(&self, i: usize) -> i64;
    /// Equal keys within one source mean equal name, status, status message, kind, resource
    /// and scope (so the same evaluation, unless the duration matters or attributes are read).
    fn key(&self, i: usize) -> BaseKey;
    /// The value id of span attribute `k` of [`MetricNeeds::span_keys`] in span `i`: equal
    /// ids within one source mean equal values.
    fn attr_id(&self, k: usize, i: usize) -> u32;
    /// Span `i` with at least the fields [`SpanMetrics::needs`] names filled in.
    fn row(&self, i: usize) -> SpanRow;
    /// The trace ID of span `i`, where the source has it (for exemplars).
    fn trace_id(&self, i: usize) -> Option<[u8; 16]>;
    /// The span ID of span `i`, where the source has it.
    fn span_id(&self, _i: usize) -> Option<[u8; 8]> {
        None
    }
    /// The value ids of span `i`'s attribute blob (with [`MetricNeeds::blobs`]) and event and
    /// link blobs (with [`MetricNeeds::lists`]); equal ids within one source mean equal bytes,
    /// and a block's blob not read has id 0. [`Self::row`] then fills in the blobs read. A
    /// block's attribute blob lacks the values moved to dedicated columns, so the row's
    /// attributes are the blob followed by the picked values of [`MetricNeeds::span_keys`]: a
    /// key read may appear twice, its first value being the span's.
    fn blob_ids(&self, _i: usize) -> [u32; 3] {
        [0; 3]
    }
    /// The stored bytes of span `i`'s part `of`: its resource or scope header (with
    /// [`MetricNeeds::resource`] or [`MetricNeeds::scope`]), its attribute blob (with
    /// [`MetricNeeds::blobs`]; in a block, without the values moved to dedicated columns), or
    /// its event or link blob (with [`MetricNeeds::lists`]). Empty when not read.
    fn part(&self, _of: KeysOf, _i: usize) -> &[u8] {
        &[]
    }
    /// With [`MetricNeeds::blobs`]: the span attribute keys whose values were moved out of the
    /// attribute blobs into dedicated columns.
    fn dedicated_keys(&self) -> &[String] {
        &[]
    }
    /// Which of [`Self::dedicated_keys`] span `i` has (bit `k` for key `k`).
    fn dedicated_mask(&self, _i: usize) -> u16 {
        0
    }
    /// With [`MetricNeeds::all_span_attributes`]: how many dedicated columns hold values moved
    /// out of the attribute blobs ([`MetricColumns::moved`]); the head moves nothing.
    fn moved_columns(&self) -> usize {
        0
    }
    /// The id and bytes of span `i`'s value moved to dedicated column `k`, which [`Self::part`]
    /// of [`KeysOf::Span`] lacks (empty if none). Equal ids within one source and column mean
    /// equal bytes.
    fn moved(&self, _k: usize, _i: usize) -> (u32, &[u8]) {
        (0, &[])
    }
}

/// Span `i`'s parent ID from a parent column (zeros for a root, or when the column was not
/// read), as the row reader gives it.
#[inline]
fn parent_of(d: &DictColumn, i: usize) -> [u8; 8] {
    d.values
        .get(dict_id(d, i) as usize)
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .unwrap_or_default()
}

#[inline]
fn dict_id(d: &DictColumn, i: usize) -> u32 {
    d.ids.get(i).copied().unwrap_or(0)
}

#[inline]
fn small(v: &[i32], i: usize) -> u8 {
    v.get(i).map_or(0, |&x| x.clamp(0, 255) as u8)
}

/// A row group's columns; columns not read are empty and read as empty values.
impl SpanSource for MetricColumns {
    #[inline]
    fn len(&self) -> usize {
        self.start.len()
    }

    #[inline]
    fn start(&self, i: usize) -> u64 {
        self.start[i] as u64
    }

    #[inline]
    fn trace_id(&self, i: usize) -> Option<[u8; 16]> {
        let id = self.trace_id.values.get(*self.trace_id.ids.get(i)? as usize)?;
        id.as_ref().try_into().ok()
    }

    #[inline]
    fn span_id(&self, i: usize) -> Option<[u8; 8]> {
        self.span_id.get(i).copied()
    }

    #[inline]
    fn duration(&self, i: usize) -> i64 {
        self.duration.get(i).copied().unwrap_or(0)
    }

    #[inline]
    fn key(&self, i: usize) -> BaseKey {
        (
            [
                dict_id(&self.name, i),
                dict_id(&self.status_message, i),
                dict_id(&self.resource, i),
                dict_id(&self.scope, i),
            ],
            u32::from(small(&self.status, i)) << 8
                | u32::from(small(&self.kind, i))
                | if parent_of(&self.parent, i) == [0; 8] {
                    0
                } else {
                    HAS_PARENT
                },
        )
    }

    #[inline]
    fn attr_id(&self, k: usize, i: usize) -> u32 {
        self.span_attributes.get(k).map_or(0, |d| dict_id(d, i))
    }

    #[inline]
    fn blob_ids(&self, i: usize) -> [u32; 3] {
        [
            dict_id(&self.attributes, i),
            dict_id(&self.events, i),
            dict_id(&self.links, i),
        ]
    }

    #[inline]
    fn dedicated_keys(&self) -> &[String] {
        &self.dedicated_keys
    }

    #[inline]
    fn part(&self, of: KeysOf, i: usize) -> &[u8] {
        let d = match of {
            KeysOf::Span => &self.attributes,
            KeysOf::Resource => &self.resource,
            KeysOf::Scope => &self.scope,
            KeysOf::Events => &self.events,
            KeysOf::Links => &self.links,
        };
        d.values.get(dict_id(d, i) as usize).map_or(&[], |v| v)
    }

    #[inline]
    fn dedicated_mask(&self, i: usize) -> u16 {
        self.dedicated_mask.get(i).copied().unwrap_or(0)
    }

    #[inline]
    fn moved_columns(&self) -> usize {
        self.moved.len()
    }

    #[inline]
    fn moved(&self, k: usize, i: usize) -> (u32, &[u8]) {
        let d = &self.moved[k];
        let id = dict_id(d, i);
        (id, d.values.get(id as usize).map_or(&[], |v| v))
    }

    fn row(&self, i: usize) -> SpanRow {
        let value = |d: &DictColumn| -> Bytes { d.values.get(dict_id(d, i) as usize).cloned().unwrap_or_default() };
        let text = |d: &DictColumn| String::from_utf8_lossy(&value(d)).into_owned();
        let picked = match self.span_attributes.as_slice() {
            [] => Bytes::new(),
            [one] => value(one),
            many => many.iter().flat_map(&value).collect::<Vec<u8>>().into(),
        };
        let attributes = match (self.attributes.ids.is_empty(), picked.is_empty()) {
            (true, _) => picked,
            (false, true) => value(&self.attributes),
            (false, false) => [value(&self.attributes), picked].concat().into(),
        };
        SpanRow {
            name: text(&self.name),
            status_message: text(&self.status_message),
            status_code: small(&self.status, i),
            kind: small(&self.kind, i),
            start_unix_nano: self.start(i),
            duration_nano: self.duration(i),
            resource: value(&self.resource),
            scope: value(&self.scope),
            attributes,
            events: value(&self.events),
            links: value(&self.links),
            parent_span_id: parent_of(&self.parent, i),
            ..Default::default()
        }
    }
}
