//! The column scan's consumer: [`ColumnSink`], fed spans one at a time from head and row-group
//! columns, and its implementation by [`SpanMetrics`].

use weft_block::index::Bloom;
use weft_block::{MetricColumns, MetricNeeds, RowGroupStats};

use super::{HeadRows, SpanMetrics};

/// What the querier's column scan (`weft_querier::Querier::scan_columns`) feeds: spans one at
/// a time from the head's columns and from the column chunks of each row group in the window,
/// never assembled into traces.
pub trait ColumnSink {
    /// The columns to read from each row group.
    fn needs(&self) -> &MetricNeeds;
    /// The columns to read from a row group whose spans start within `[lo, hi]` and whose
    /// smallest trace ID is `min_trace` (when the block's index says); by default
    /// [`Self::needs`].
    fn needs_between(&self, _lo: u64, _hi: u64, _min_trace: Option<&[u8; 16]>) -> MetricNeeds {
        self.needs().clone()
    }
    /// Whether a row group with these statistics and value bloom may hold a span that counts
    /// (`false`: skip it).
    fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool;
    /// Whether head rows must come in `SpanColumns::sorted_order` (client retries left out,
    /// each trace's spans together); otherwise in row order, which costs no sort.
    fn sorted_head(&self) -> bool {
        true
    }
    /// Offered a row group's attribute keys from the block's index (compaction writes them;
    /// [`weft_block::index::KeyLists`]) before its columns are read. Returns true when the sink
    /// took from them all it needs of the row group, which is then not read. By default it
    /// takes nothing.
    fn take_row_group_keys(
        &mut self,
        _stats: &RowGroupStats,
        _keys: &mut dyn Iterator<Item = (weft_block::index::KeyScope, &[u8])>,
    ) -> bool {
        false
    }
    /// Whether [`Self::take_row_group_keys`] takes a row group whose statistics put every span
    /// inside the query's window: a planner's hint that such row groups, in a block whose index
    /// lists keys, cost next to nothing. By default false.
    fn takes_row_group_keys(&self) -> bool {
        false
    }
    /// Adds the spans of head columns.
    fn add_head(&mut self, rows: &HeadRows<'_>);
    /// Adds the spans of a row group, read with [`Self::needs_between`].
    fn add_columns(&mut self, cols: &MetricColumns);
    /// True once more spans cannot change the result; the scan stops.
    fn done(&self) -> bool {
        false
    }
    /// An empty sink for one row group, fed on a query worker while other row groups are
    /// read, and added back with [`Self::merge`] in the scan's order, so the result does not
    /// depend on timing. It must want no more than this sink does now (the same
    /// [`Self::needs_between`]).
    fn fork(&self) -> Self
    where
        Self: Sized;
    /// Adds what a [`fork`](Self::fork) was fed, as if it were added here next.
    fn merge(&mut self, part: Self)
    where
        Self: Sized;
    /// How far the scan feeding this sink has got, told after the head and after each row
    /// group merged, as [`TraceSink::progress`](crate::search::TraceSink::progress). For
    /// progress reports only.
    fn progress(&mut self, _p: crate::search::ScanProgress) {}
}

impl ColumnSink for SpanMetrics {
    fn needs(&self) -> &MetricNeeds {
        &self.needs
    }

    fn needs_between(&self, lo: u64, hi: u64, min_trace: Option<&[u8; 16]>) -> MetricNeeds {
        // Trace IDs (16 B per trace plus an index per span) and span IDs (8 B per span) only
        // while a span of the row group could still be an exemplar: its time range has a
        // bucket with room, or its smallest trace ID is below one that a bucket holds. Random
        // IDs make that rare after the first row groups of each range.
        MetricNeeds {
            trace_ids: self.wants_exemplars_between(lo, hi, min_trace),
            ..self.needs.clone()
        }
    }

    fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool {
        SpanMetrics::row_group_may_match(self, stats, values)
    }

    fn add_head(&mut self, rows: &HeadRows<'_>) {
        self.add(rows)
    }

    fn add_columns(&mut self, cols: &MetricColumns) {
        self.add(cols)
    }

    fn fork(&self) -> Self {
        SpanMetrics::fork(self)
    }

    fn merge(&mut self, part: Self) {
        SpanMetrics::merge(self, part)
    }

    fn progress(&mut self, p: crate::search::ScanProgress) {
        self.tell(p)
    }
}
