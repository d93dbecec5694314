//! The head's spans as a [`SpanSource`]: [`HeadRows`], rows of its columns in a given order,
//! with the span attributes a query reads picked out of each distinct attribute blob once.

use bytes::Bytes;
use weft_block::columns::SpanColumns;
use weft_block::row::SpanRow;
use weft_block::{DictBuilder, DictColumn, MetricNeeds};

use super::SpanSource;
use super::key::{BaseKey, HAS_PARENT};
use crate::decode::KeysOf;

/// Rows of head columns, in the order given (`SpanColumns::sorted_order`, which leaves out
/// client-retry duplicates).
pub struct HeadRows<'a> {
    cols: &'a SpanColumns,
    order: &'a [u32],
    /// Per span attribute key read: the picked attributes of each distinct attribute blob of
    /// the head, as a [`DictColumn`] indexed by blob id.
    attrs: Vec<DictColumn>,
    /// [`MetricNeeds::blobs`] and [`MetricNeeds::lists`].
    blobs: bool,
    lists: bool,
}

impl<'a> HeadRows<'a> {
    /// The rows `order` of `cols`, with the span attributes `needs` names picked out of each
    /// distinct attribute blob once.
    pub fn new(cols: &'a SpanColumns, order: &'a [u32], needs: &MetricNeeds) -> HeadRows<'a> {
        let keys: Vec<&[u8]> = needs.span_keys.iter().map(|k| k.as_bytes()).collect();
        let mut attrs: Vec<DictBuilder> = keys.iter().map(|_| DictBuilder::default()).collect();
        let mut picked: Vec<Vec<u8>> = vec![Vec::new(); keys.len()];
        if !keys.is_empty() {
            let blobs = &cols.attributes;
            for id in 0..blobs.distinct() as u32 {
                picked.iter_mut().for_each(Vec::clear);
                weft_block::dedicated::pick_attributes(&blobs.bytes()[blobs.value_range(id)], &keys, &mut picked);
                for (d, p) in attrs.iter_mut().zip(&picked) {
                    d.push(p);
                }
            }
        }
        let attrs = attrs.into_iter().map(DictBuilder::finish).collect();
        HeadRows {
            cols,
            order,
            attrs,
            blobs: needs.blobs,
            lists: needs.lists,
        }
    }

    /// The value id of attribute `k` in row `r` of the columns.
    #[inline]
    fn attr_of(&self, k: usize, r: usize) -> u32 {
        self.attrs[k].ids[self.cols.attributes.ids[r] as usize]
    }
}

impl SpanSource for HeadRows<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.order.len()
    }

    #[inline]
    fn start(&self, i: usize) -> u64 {
        self.cols.start[self.order[i] as usize]
    }

    #[inline]
    fn trace_id(&self, i: usize) -> Option<[u8; 16]> {
        Some(self.cols.trace_id[self.order[i] as usize])
    }

    #[inline]
    fn span_id(&self, i: usize) -> Option<[u8; 8]> {
        Some(self.cols.span_id[self.order[i] as usize])
    }

    #[inline]
    fn duration(&self, i: usize) -> i64 {
        self.cols.duration[self.order[i] as usize]
    }

    #[inline]
    fn key(&self, i: usize) -> BaseKey {
        let (c, r) = (self.cols, self.order[i] as usize);
        (
            [c.name[r], c.status_message[r], c.resource[r], c.scope[r]],
            u32::from(c.status_code[r]) << 8
                | u32::from(c.kind[r])
                | if c.parent_span_id[r] == [0; 8] { 0 } else { HAS_PARENT },
        )
    }

    #[inline]
    fn attr_id(&self, k: usize, i: usize) -> u32 {
        self.attrs.get(k).map_or(0, |_| self.attr_of(k, self.order[i] as usize))
    }

    #[inline]
    fn blob_ids(&self, i: usize) -> [u32; 3] {
        let (c, r) = (self.cols, self.order[i] as usize);
        [c.attributes.ids[r], c.events.ids[r], c.links.ids[r]]
    }

    #[inline]
    fn part(&self, of: KeysOf, i: usize) -> &[u8] {
        let (c, r) = (self.cols, self.order[i] as usize);
        match of {
            KeysOf::Span => c.attributes.get(r),
            KeysOf::Resource => c.headers.get(c.resource[r]),
            KeysOf::Scope => c.headers.get(c.scope[r]),
            KeysOf::Events => c.events.get(r),
            KeysOf::Links => c.links.get(r),
        }
    }

    fn row(&self, i: usize) -> SpanRow {
        let (c, r) = (self.cols, self.order[i] as usize);
        let header = |id: u32| Bytes::copy_from_slice(c.headers.get(id));
        let text = |id: u32| String::from_utf8_lossy(c.strings.get(id)).into_owned();
        let mut attributes = Vec::new();
        let (mut events, mut links) = (Vec::new(), Vec::new());
        if self.lists {
            events.extend_from_slice(c.events.get(r));
            links.extend_from_slice(c.links.get(r));
        }
        if self.blobs {
            attributes.extend_from_slice(c.attributes.get(r));
        } else {
            for k in 0..self.attrs.len() {
                attributes.extend_from_slice(&self.attrs[k].values[self.attr_of(k, r) as usize]);
            }
        }
        SpanRow {
            name: text(c.name[r]),
            status_message: text(c.status_message[r]),
            status_code: c.status_code[r],
            kind: c.kind[r],
            start_unix_nano: c.start[r],
            duration_nano: c.duration[r],
            resource: header(c.resource[r]),
            scope: header(c.scope[r]),
            attributes: attributes.into(),
            events: events.into(),
            links: links.into(),
            parent_span_id: c.parent_span_id[r],
            ..Default::default()
        }
    }
}
