//! Span-at-a-time scans from columns ([`Querier::scan_columns`]): span-local metrics and the
//! tag APIs without a filter. The row groups' columns are fetched and decoded on the query
//! workers, up to `--query-parallelism` at once, and each row group is added to a fork of the
//! sink of its own ([`ColumnSink::fork`]) on the worker too. The forks are merged back in
//! block order by the workers ([`crate::workers::Workers::fold`]), so sums come out the same
//! whatever the timing.
//!
//! What a row group needs is asked of the sink when its read starts, not when the scan is
//! planned: a metrics sink stops asking for trace IDs once a range's exemplars are found, and
//! asked before any row group was added it wanted them everywhere (a third of
//! `{ } | rate() by (resource.service.name)`'s CPU went to exemplars nobody kept).

use std::collections::HashSet;
use std::sync::Arc;

use weft_block::Block;
use weft_db::recent::FrozenSpans;
use weft_engine::span_metrics::{ColumnSink, HeadRows};

use super::{ScanFold, ScanPart, ScanStats, Window, block_outside, counts_block, row_group_outside};
use crate::workers::{Flow, FoldSteps};
use crate::{Querier, QueryError};

/// One row group to read, and its span start times (statistics; the whole range if absent).
struct Unit {
    block: usize,
    rg: usize,
    lo: u64,
    hi: u64,
}

impl Querier {
    /// Feeds `sink` every span of `tenant` one at a time from columns (span-local metrics,
    /// `weft_engine::span_metrics`; the tag APIs without a filter, `weft_engine::tags`): the
    /// head's spans, then every block row group in the window, reading only the columns the
    /// sink needs.
    ///
    /// The head and the block list are taken in one view of the recent spans, so each
    /// stored copy of a span counts once: a cut whose block is already listed (a tenant's
    /// blocks are written in cut order, and compaction keeps the highest `wal_end` of its
    /// inputs) is skipped. Client retries are dropped within the head (when the sink asks for
    /// [`ColumnSink::sorted_head`]) and within a block, not across them (compaction merges
    /// those).
    pub async fn scan_columns<M: ColumnSink + Send + 'static>(
        &self,
        tenant: &str,
        window: Option<Window>,
        m: &mut M,
    ) -> Result<ScanStats, QueryError> {
        self.scan_columns_part(tenant, window, &ScanPart::all(), m).await
    }

    /// The head part of a column scan split across queriers: offers `m` the recent spans the
    /// blocks listed at that moment do not cover, and returns that listing, which the other
    /// parts read (so no stored span counts twice or not at all).
    pub async fn scan_columns_head<M: ColumnSink + Send + 'static>(
        &self,
        tenant: &str,
        window: Option<Window>,
        m: &mut M,
    ) -> Result<(ScanStats, Vec<Arc<Block>>), QueryError> {
        self.recent.catch_up().await;
        let mut stats = ScanStats {
            damaged_blocks: self.db.quarantined_overlapping(tenant, window),
            ..ScanStats::default()
        };
        let blocks = self.head_columns(tenant, true, m, &mut stats);
        stats.total_blocks = blocks.len() as u64;
        Ok((stats, blocks))
    }

    /// [`Querier::scan_columns`] over one part of the stored spans ([`ScanPart`]): the parts
    /// of one query, each into its own sink ([`ColumnSink::fork`]) merged in any fixed order,
    /// give what one scan gives, quarantined blocks counted in each.
    pub async fn scan_columns_part<M: ColumnSink + Send + 'static>(
        &self,
        tenant: &str,
        window: Option<Window>,
        part: &ScanPart,
        m: &mut M,
    ) -> Result<ScanStats, QueryError> {
        self.recent.catch_up().await;
        let mut stats = ScanStats {
            damaged_blocks: self.db.quarantined_overlapping(tenant, window),
            ..ScanStats::default()
        };
        let mut blocks = self.head_columns(tenant, part.head, m, &mut stats);
        stats.total_blocks = blocks.len() as u64;
        blocks.retain(|b| part.reads(b));
        let only: Vec<Option<HashSet<usize>>> = blocks.iter().map(|b| part.row_groups_of(b)).collect();
        let mut failed = vec![false; blocks.len()];
        let mut read_any = vec![false; blocks.len()];
        let units = self
            .plan_columns(&blocks, &only, window, m, &mut stats, &mut failed, &mut read_any)
            .await?;
        // Progress: the head is one unit, each row group to read another (those ruled out are
        // not counted).
        let head_units = u64::from(part.head);
        let total = head_units + units.len() as u64;
        m.progress(stats.progress(head_units, total));
        // Each row group is fetched, decoded and added to a fork of the sink on one of the
        // query's runners; the forks are merged in plan order by the runners themselves
        // (`Workers::fold`), so the query's task is not woken per row group.
        let placeholder = m.fork();
        let state = ScanFold::new(std::mem::replace(m, placeholder), stats, failed, read_any);
        let blocks = Arc::new(blocks);
        let storage = self.db.storage().clone();
        let (db, at_start, at_take) = (self.db.clone(), blocks.clone(), blocks.clone());
        let folded = self
            .workers
            .fold(
                tenant,
                storage.reads_are_local(),
                units,
                state,
                FoldSteps {
                    start: move |st: &mut ScanFold<M>, u: &Unit| {
                        let b = &at_start[u.block];
                        let min_trace = b.index.row_groups.get(u.rg).map(|r| &r.min);
                        (
                            b.clone(),
                            u.rg,
                            st.sink.needs_between(u.lo, u.hi, min_trace),
                            st.sink.fork(),
                        )
                    },
                    fetch: move |(b, rg, needs, fork): (Arc<Block>, usize, weft_block::MetricNeeds, M)| {
                        let data = tokio::runtime::Handle::current()
                            .block_on(b.fetch_metric_columns(&*storage, rg, &needs))?;
                        Ok((data, needs, fork))
                    },
                    work: |(data, needs, mut fork): (weft_block::RowGroupData, weft_block::MetricNeeds, M)| {
                        let bytes = data.bytes();
                        let cols = data.metric_columns(&needs)?;
                        fork.add_columns(&cols);
                        Ok((bytes, cols.start.len() as u64, fork))
                    },
                    take: move |st: &mut ScanFold<M>, u: &Unit, result| {
                        if st.sink.done() {
                            return Flow::Stop;
                        }
                        if !st.failed[u.block]
                            && st.take_read(&db, &at_take[u.block], u.block, result, M::merge) == Flow::Stop
                        {
                            return Flow::Stop;
                        }
                        st.taken += 1;
                        let p = st.stats.progress(head_units + st.taken, total);
                        st.sink.progress(p);
                        if st.sink.done() { Flow::Stop } else { Flow::Go }
                    },
                },
            )
            .await;
        let (full, mut stats, failed, read_any) = folded?.finish()?;
        *m = full;
        m.progress(stats.progress(total, total));
        for (i, b) in blocks.iter().enumerate() {
            if failed[i] || !counts_block(b, only[i].as_ref()) {
                continue;
            }
            if read_any[i] {
                stats.inspected_blocks += 1;
            } else if !block_outside(b, window) {
                stats.skipped_blocks += 1;
            }
        }
        Ok(stats)
    }

    /// Adds the head's spans to `m`, and returns the blocks listed in the same view.
    fn head_columns(
        &self,
        tenant: &str,
        head: bool,
        m: &mut (impl ColumnSink + Send),
        stats: &mut ScanStats,
    ) -> Vec<Arc<Block>> {
        let head_order = |m: &dyn ColumnSink, cols: &weft_block::columns::SpanColumns| -> Vec<u32> {
            if m.sorted_head() {
                cols.sorted_order()
            } else {
                (0..cols.len() as u32).collect()
            }
        };
        let mut cuts: Vec<Arc<FrozenSpans>> = Vec::new();
        let mut blocks: Vec<Arc<Block>> = Vec::new();
        self.recent.view(tenant, &mut |v| {
            blocks = self.blocks(tenant);
            if !head {
                return;
            }
            if let Some(cols) = v.active {
                let order = head_order(m, cols);
                stats.inspected_spans += order.len() as u64;
                m.add_head(&HeadRows::new(cols, &order, m.needs()));
            }
            cuts = v.frozen.to_vec();
        });
        for cut in &cuts {
            if cut.covered_by(&blocks) {
                continue;
            }
            if let Some(cols) = cut.of(tenant) {
                let order = head_order(m, cols);
                stats.inspected_spans += order.len() as u64;
                m.add_head(&HeadRows::new(cols, &order, m.needs()));
            }
        }
        blocks
    }

    /// The row groups to read, in block order: those in the window that the sink's filter
    /// does not rule out, and whose tag names the index cannot give (those are taken here);
    /// of a block whose `only` is set, those of its row groups alone. A block whose footer
    /// fails is marked in `failed`.
    #[allow(clippy::too_many_arguments)]
    async fn plan_columns(
        &self,
        blocks: &[Arc<Block>],
        only: &[Option<HashSet<usize>>],
        window: Option<Window>,
        m: &mut (impl ColumnSink + Send),
        stats: &mut ScanStats,
        failed: &mut [bool],
        read_any: &mut [bool],
    ) -> Result<Vec<Unit>, QueryError> {
        let storage = &**self.db.storage();
        let mut units = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            if m.done() {
                break;
            }
            if block_outside(b, window) {
                stats.skipped_blocks += u64::from(counts_block(b, only[i].as_ref()));
                continue;
            }
            for rg in 0..b.row_group_count() {
                if m.done() {
                    break;
                }
                if only[i].as_ref().is_some_and(|only| !only.contains(&rg)) {
                    continue; // another part's
                }
                let planned: Result<Option<(u64, u64)>, QueryError> = async {
                    // Skipped by time, or by the filter's prefilter on the footer statistics
                    // and the index's value bloom (`{ span.user.id = "u-42" }` reads the
                    // row groups that may hold the value, not the whole attribute column).
                    let rg_stats = b.row_group_stats(storage, rg).await?;
                    if row_group_outside(b, storage, rg, window).await?
                        || !m.row_group_may_match(&rg_stats, b.index.value_blooms.get(rg))
                    {
                        stats.skipped_row_groups += 1;
                        return Ok(None);
                    }
                    // Tag names of a row group the index lists keys for need no columns.
                    if let Some(keys) = &b.index.keys
                        && m.take_row_group_keys(&rg_stats, &mut keys.of_row_group(rg))
                    {
                        read_any[i] = true;
                        return Ok(None);
                    }
                    Ok(Some(rg_stats.start.unwrap_or((0, u64::MAX))))
                }
                .await;
                match planned {
                    Ok(Some((lo, hi))) => units.push(Unit { block: i, rg, lo, hi }),
                    Ok(None) => {}
                    Err(QueryError::Block(e)) => {
                        failed[i] = true;
                        self.db.block_failed(b, e)?;
                        stats.damaged_blocks += 1;
                        break;
                    }
                }
            }
        }
        Ok(units)
    }
}
