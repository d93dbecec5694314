//! The key of the per-combination evaluation cache: a span's dictionary ids, status, kind and
//! parent ([`BaseKey`]), cleared to what the query reads ([`KeyMask`]) and packed with its
//! span attribute values' id ([`Key`]).

use weft_block::MetricNeeds;

#[cfg(doc)]
use super::SpanSource;

/// Dictionary ids of name, status message, resource and scope (ids of columns the query does
/// not read are 0), then `status << 8 | kind`, with bit 16 set for a span that has a parent
/// span ID (read with [`MetricNeeds::parents`]; always known in the head); see
/// [`SpanSource::key`].
pub type BaseKey = ([u32; 4], u32);

/// The bit of [`BaseKey`] set for a span with a parent.
pub(super) const HAS_PARENT: u32 = 1 << 16;

/// The parts of a [`BaseKey`] that a query reads; the others are cleared, so that spans that
/// differ only in fields the query does not read share one evaluation. Block columns the query
/// does not read already give id 0, but head rows have every id, and the tag APIs read the
/// column of the field they list beside the filter's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyMask {
    ids: [u32; 4],
    status_kind: u32,
}

impl KeyMask {
    pub(crate) fn of(needs: &MetricNeeds) -> KeyMask {
        let all = |read: bool| if read { u32::MAX } else { 0 };
        KeyMask {
            ids: [
                all(needs.name),
                all(needs.status_message),
                all(needs.resource),
                all(needs.scope),
            ],
            status_kind: if needs.status { 0xff00 } else { 0 }
                | if needs.kind { 0x00ff } else { 0 }
                | if needs.parents { HAS_PARENT } else { 0 },
        }
    }

    #[inline]
    pub(crate) fn apply(&self, (ids, status_kind): BaseKey) -> BaseKey {
        (
            std::array::from_fn(|k| ids[k] & self.ids[k]),
            status_kind & self.status_kind,
        )
    }
}

/// What a span is evaluated by: a [`BaseKey`] and one id for the values of the span attributes
/// read (the value id itself for one key, an id of the combination per source for several),
/// packed two ids to a word. The cache lookup is the per-row cost of `bench_search.py`'s
/// metrics queries: built as six `u32` stores, the hasher's 8-byte loads stalled on store
/// forwarding and the lookup took twice as long (`rate() > 1` over 3M spans: 130 ms against
/// 84 ms).
pub(super) type Key = [u64; 3];
