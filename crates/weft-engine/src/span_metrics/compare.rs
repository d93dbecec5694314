//! `compare()`'s tallies: what each span it takes counts, by distinct ids per source, and
//! their flush into the run, each distinct entry decoded once.

use weft_block::hash::FastMap;
use weft_traceql::MetricsRun;

#[cfg(doc)]
use super::SpanMetrics;
use super::SpanSource;
use crate::decode::{self, KeysOf};

/// `compare()`'s counts over one source, by what is counted: per (in the selection, step) and
/// the ids of the values counted, the number of spans and one row that holds them. They go to
/// the run, decoded once per entry, at the end of [`SpanMetrics::add`]: every attribute of a
/// span is counted, so counting distinct ids instead of spans is what keeps the query cheap.
#[derive(Debug, Default)]
pub(super) struct CompareTally {
    /// Name and status message ids, then status and kind.
    intrinsics: Tally<[u32; 2], u32>,
    /// Resource ids.
    resources: Tally<u32, ()>,
    /// Attribute blob ids.
    attributes: Tally<u32, ()>,
    /// Dedicated column and the id of the value moved to it.
    moved: Tally<u32, u32>,
}

/// Spans and one row holding them, per (in the selection, step, ids `A` and `B`).
type Tally<A, B> = FastMap<(bool, u32, A, B), (u64, usize)>;

impl CompareTally {
    pub(super) fn count(&mut self, selected: bool, step: u32, src: &impl SpanSource, i: usize) {
        fn bump<K: std::hash::Hash + Eq>(m: &mut FastMap<K, (u64, usize)>, k: K, i: usize) {
            m.entry(k).or_insert((0, i)).0 += 1;
        }
        let ([name, message, resource, _], status_kind) = src.key(i);
        bump(&mut self.intrinsics, (selected, step, [name, message], status_kind), i);
        bump(&mut self.resources, (selected, step, resource, ()), i);
        bump(&mut self.attributes, (selected, step, src.blob_ids(i)[0], ()), i);
        for k in 0..src.moved_columns() {
            let (id, bytes) = src.moved(k, i);
            if !bytes.is_empty() {
                bump(&mut self.moved, (selected, step, k as u32, id), i);
            }
        }
    }

    /// Counts every entry into operand `k` of `run`, and empties the tally (keeping its
    /// memory for the next source).
    pub(super) fn flush(&mut self, run: &mut MetricsRun, k: usize, src: &impl SpanSource) {
        use weft_traceql::Value;
        for ((selected, step, _, _), (n, i)) in self.intrinsics.drain() {
            let r = src.row(i);
            let step = step as usize;
            run.compare_add_in(k, selected, step, "name", Value::Str(r.name), n);
            run.compare_add_in(
                k,
                selected,
                step,
                "status",
                Value::Status(decode::status(r.status_code)),
                n,
            );
            run.compare_add_in(k, selected, step, "statusMessage", Value::Str(r.status_message), n);
            run.compare_add_in(k, selected, step, "kind", Value::Kind(decode::kind(r.kind)), n);
        }
        let mut label = String::new();
        for ((selected, step, _, ()), (n, i)) in self.resources.drain() {
            for (key, v) in decode::resource_attributes(src.part(KeysOf::Resource, i)) {
                label.clear();
                label.push_str("resource.");
                label.push_str(&key);
                run.compare_add_in(k, selected, step as usize, &label, v, n);
            }
        }
        // Span attributes are decoded lazily: most distinct blobs hold high-cardinality
        // values (user IDs, URLs) whose attributes soon have too many values to list, and then
        // only their totals count.
        let mut span = |run: &mut MetricsRun, selected, step: u32, blob: &[u8], n| {
            decode::each_span_attribute(blob, |key, value| {
                label.clear();
                label.push_str("span.");
                label.push_str(&String::from_utf8_lossy(key));
                let counted = decode::is_scalar(value);
                run.compare_add_with_in(k, selected, step as usize, &label, counted, || decode::value(value), n);
            });
        };
        for ((selected, step, _, ()), (n, i)) in self.attributes.drain() {
            span(run, selected, step, src.part(KeysOf::Span, i), n);
        }
        for ((selected, step, column, _), (n, i)) in self.moved.drain() {
            span(run, selected, step, src.moved(column as usize, i).1, n);
        }
    }
}
