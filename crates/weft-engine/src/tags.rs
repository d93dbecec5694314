//! The tag APIs with the empty or a span-local filter, one span at a time from columns.
//!
//! Grafana asks for tag names and values as the query editor opens (with the empty filter
//! `{ }`) and as each filter is typed (with the filter so far). Over whole traces ([`TagNames`],
//! [`TagValues`]) that copies out and decodes every span in the window: about a second per
//! 700,000 spans. With `{ }` every span of the window counts on its own, so [`ColumnTagNames`]
//! and [`ColumnTagValues`] read columns instead (`weft_querier::Querier::scan_columns`):
//!
//! - a row group's resource, scope, attribute, event and link blobs keep their dictionary ids
//!   (head columns have them too), and each distinct one is read once per row group or head
//!   part: for names, its keys alone ([`each_attribute_key`]); for values, by
//!   [`decode_parts`], the same decoding the trace path uses;
//! - for names of a row group of a compacted block that every span of counts (no filter, all
//!   of it inside the window), the index's key lists ([`weft_block::index::KeyLists`]) and
//!   no column at all;
//! - span attributes moved to dedicated columns are named from the block's meta and each row's
//!   presence bits; a value of one span attribute key comes from
//!   [`MetricColumns::span_attributes`](weft_block::MetricColumns::span_attributes), which
//!   puts the moved values back.
//!
//! **Filters.** A filter `{ … }` whose conditions read only fields of the span itself that
//! have columns (name, status, kind, duration, status message, resource and instrumentation
//! attributes, up to four span attribute keys, whether the span has a parent: what
//! span-at-a-time metrics read) matches a span alone exactly as in its trace. It is evaluated
//! once per distinct combination of the column ids it reads, and of how the span's duration
//! orders against the literals the filter compares it with (`DurationReads::class`); per
//! span, on a span decoded once per combination, when it reads the duration any other way.
//! Only matching spans count. Any other filter keeps the trace path.
//!
//! **What counts.** Every span overlapping the window (all spans without one). The trace path
//! counts every span of a trace with a span in the window, so the two differ only for spans
//! outside the window whose trace reaches into it: both are autocomplete lists, and Tempo
//! lists the values of every block overlapping the window. The model test in `weft-querier`
//! checks both against the model, with and without windows, and against each other.
//!
//! Fields that need the whole trace (`rootName`, `rootServiceName`, `traceDuration`), or a
//! value per span that no column deduplicates (`duration`, `event:timeSinceStart`, `kind`,
//! `status`), keep the trace path.
//!
//! [`TagNames`]: crate::search::TagNames
//! [`TagValues`]: crate::search::TagValues

use std::collections::{BTreeMap, BTreeSet, HashSet};

use weft_block::hash::{FastBuild, FastMap};
use weft_block::index::{Bloom, KeyScope};
use weft_block::{MetricColumns, MetricNeeds, RowGroupStats};
use weft_traceql::ast::{AttributeScope, FieldExpr, Intrinsic};
use weft_traceql::{Evaluator, Query, Span, Trace, Value};

use crate::decode::{KeysOf, Parts, decode_parts, each_attribute_key};
use crate::graph::is_match_all;
use crate::prefilter::Prefilter;
use crate::search::{ScanProgress, TagScope, ValueList, add_key, field_values};
use crate::span_metrics::{
    BaseKey, ColumnSink, DurationReads, HeadRows, KeyMask, MAX_SPAN_KEYS, SpanSource, evaluated_duration,
    span_filter_needs,
};

/// An inclusive window in Unix nanoseconds.
type Window = Option<(u64, u64)>;

/// Whether span `i` of `src` overlaps `window`, as the trace path tests each span.
fn in_window(src: &impl SpanSource, i: usize, window: Window) -> bool {
    let Some((start, end)) = window else { return true };
    let s = src.start(i);
    s <= end && s.wrapping_add(src.duration(i) as u64) >= start
}

/// Ids seen in one source (a head part or a row group), with the last one remembered: rows
/// of a trace, a resource or a batch are adjacent, so most rows repeat the previous id.
struct Seen {
    last: Option<u64>,
    /// Ids below [`Seen::DENSE`], one bit each: a source's ids are dictionary indexes, so
    /// nearly all are small, and a bit test costs a fraction of a hash-set insert per span
    /// (which was most of a service-name lookup over millions of spans).
    dense: Vec<u64>,
    set: HashSet<u64, FastBuild>,
}

impl Seen {
    const DENSE: u64 = 1 << 20;

    fn new() -> Seen {
        Seen {
            last: None,
            dense: Vec::new(),
            set: HashSet::with_hasher(FastBuild::default()),
        }
    }

    /// True the first time `id` is seen.
    #[inline]
    fn first(&mut self, id: u64) -> bool {
        if self.last == Some(id) {
            return false;
        }
        self.last = Some(id);
        if id < Self::DENSE {
            let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
            if word >= self.dense.len() {
                self.dense.resize(word + 1, 0);
            }
            let new = self.dense[word] & bit == 0;
            self.dense[word] |= bit;
            return new;
        }
        self.set.insert(id)
    }
}

/// A filter evaluated span by span (see the [module docs](self)); `None` in the sinks for the
/// empty filter, which every span passes.
#[derive(Clone)]
struct SpanFilter {
    evaluator: Evaluator,
    prefilter: Prefilter,
    parts: Parts,
    /// The filter reads the first `keys` of the needs' span keys.
    keys: usize,
    /// How the filter reads the duration: compared with literals, the duration's class joins
    /// the key results are kept by; read any other way, every span is evaluated.
    durations: DurationReads,
    /// The parts of the span's key the filter reads (the sink's field may read others).
    mask: KeyMask,
    /// Per source: the result per combination of ids, or the span decoded per combination.
    matched: FastMap<FilterKey, bool>,
    decoded: FastMap<FilterKey, Span>,
    one: Trace,
}

type FilterKey = (BaseKey, [u32; MAX_SPAN_KEYS], u64);

impl std::fmt::Debug for SpanFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanFilter")
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

/// A filter that needs whole traces.
struct NotSpanLocal;

impl SpanFilter {
    /// `Ok(None)` for the empty filter; with a filter, `needs` gains what it reads (its span
    /// keys first).
    fn new(query: &Query, needs: &mut MetricNeeds) -> Result<Option<SpanFilter>, NotSpanLocal> {
        if is_match_all(query) {
            return Ok(None);
        }
        let (reads, durations) = span_filter_needs(query).ok_or(NotSpanLocal)?;
        let evaluator = Evaluator::new(query).map_err(|_| NotSpanLocal)?;
        let parts = Parts {
            resource: reads.resource,
            scope: reads.scope,
            span_attrs: !reads.span_keys.is_empty(),
            ..Parts::default()
        };
        let keys = reads.span_keys.len();
        let mask = KeyMask::of(&reads);
        *needs = reads.union(std::mem::take(needs));
        if needs.span_keys.len() > MAX_SPAN_KEYS {
            return Err(NotSpanLocal);
        }
        Ok(Some(SpanFilter {
            evaluator,
            prefilter: Prefilter::new(query),
            parts,
            keys,
            durations,
            mask,
            matched: FastMap::with_hasher(FastBuild::default()),
            decoded: FastMap::with_hasher(FastBuild::default()),
            one: Trace {
                spans: vec![Span::default()],
            },
        }))
    }

    /// Starts a source: ids of another source mean other values.
    fn begin(&mut self) {
        self.matched.clear();
        self.decoded.clear();
    }

    fn matches(&mut self, src: &impl SpanSource, i: usize) -> bool {
        let mut attrs = [0; MAX_SPAN_KEYS];
        for (k, id) in attrs.iter_mut().enumerate().take(self.keys) {
            *id = src.attr_id(k, i);
        }
        let duration = evaluated_duration(src.duration(i));
        let key = (self.mask.apply(src.key(i)), attrs, self.durations.class(duration));
        let parts = self.parts;
        if self.durations.per_span() {
            let span = self
                .decoded
                .entry(key)
                .or_insert_with(|| decode_parts(&src.row(i), parts));
            self.one.spans[0].clone_from(span);
            self.one.spans[0].start_unix_nano = src.start(i);
            self.one.spans[0].duration_nano = src.duration(i) as u64;
            return self.evaluator.eval(&self.one).is_ok_and(|sets| !sets.is_empty());
        }
        if let Some(&m) = self.matched.get(&key) {
            return m;
        }
        let span = &mut self.one.spans[0];
        *span = decode_parts(&src.row(i), parts);
        span.start_unix_nano = src.start(i);
        span.duration_nano = src.duration(i) as u64;
        let m = self.evaluator.eval(&self.one).is_ok_and(|sets| !sets.is_empty());
        self.matched.insert(key, m);
        m
    }
}

/// Implements [`ColumnSink`] for a tag collector with `needs`, `filter` and `jobs` fields and
/// methods `add` (one source) and `is_done`.
macro_rules! tag_column_sink {
    ($t:ty) => {
        impl ColumnSink for $t {
            fn needs(&self) -> &MetricNeeds {
                &self.needs
            }

            fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool {
                self.filter
                    .as_ref()
                    .is_none_or(|f| f.prefilter.row_group_may_match(stats, values))
            }

            fn sorted_head(&self) -> bool {
                false
            }

            fn take_row_group_keys(
                &mut self,
                stats: &RowGroupStats,
                keys: &mut dyn Iterator<Item = (KeyScope, &[u8])>,
            ) -> bool {
                self.take_keys(stats, keys)
            }

            fn takes_row_group_keys(&self) -> bool {
                self.takes_keys()
            }

            fn add_head(&mut self, rows: &HeadRows<'_>) {
                self.add(rows)
            }

            fn add_columns(&mut self, cols: &MetricColumns) {
                self.add(cols)
            }

            fn done(&self) -> bool {
                self.is_done()
            }

            fn fork(&self) -> Self {
                self.fork_part()
            }

            fn merge(&mut self, part: Self) {
                self.merge_part(part)
            }

            fn progress(&mut self, p: ScanProgress) {
                self.jobs = Some(p)
            }
        }
    };
}

/// Attribute keys per scope of every span in a window: `/api/search/tags` and
/// `/api/v2/search/tags` with the empty filter. Fed by `Querier::scan_columns`.
#[derive(Debug)]
pub struct ColumnTagNames {
    window: Window,
    needs: MetricNeeds,
    filter: Option<SpanFilter>,
    cap: usize,
    /// Most `cap` keys per scope, as [`crate::search::TagNames::keys`].
    pub keys: BTreeMap<TagScope, BTreeSet<String>>,
    /// Every key seen per scope, as stored.
    raw: BTreeMap<TagScope, HashSet<Box<[u8]>, FastBuild>>,
    /// The scan's last progress report: the reply's jobs.
    pub jobs: Option<ScanProgress>,
}

impl ColumnTagNames {
    /// For a filter `query` and spans overlapping `window`; `None` when the filter needs whole
    /// traces (see the [module docs](self)).
    pub fn new(query: &Query, window: Window, cap: usize) -> Option<ColumnTagNames> {
        let mut needs = MetricNeeds {
            resource: true,
            scope: true,
            duration: window.is_some(),
            blobs: true,
            lists: true,
            ..MetricNeeds::default()
        };
        let filter = SpanFilter::new(query, &mut needs).ok()?;
        Some(ColumnTagNames {
            window,
            needs,
            filter,
            cap,
            keys: BTreeMap::new(),
            raw: BTreeMap::new(),
            jobs: None,
        })
    }

    /// Adds the keys another querier's part of the same lookup listed, as a fork's are
    /// merged: the union within the cap, in name order past it.
    pub fn merge_keys(&mut self, keys: BTreeMap<TagScope, BTreeSet<String>>) {
        for (scope, keys) in keys {
            for key in keys {
                add_key(&mut self.keys, self.cap, scope, &key);
            }
        }
    }

    /// Names never fill up: every span may add one.
    fn is_done(&self) -> bool {
        false
    }

    /// An empty list of the same filter and window ([`ColumnSink::fork`]).
    fn fork_part(&self) -> ColumnTagNames {
        ColumnTagNames {
            window: self.window,
            needs: self.needs.clone(),
            filter: self.filter.clone(),
            cap: self.cap,
            keys: BTreeMap::new(),
            raw: BTreeMap::new(),
            jobs: None,
        }
    }

    /// Adds a fork's names. Within the cap the result is the union; past it, the part's
    /// names are taken in name order, so the answer is the same whatever the timing.
    fn merge_part(&mut self, part: ColumnTagNames) {
        for (scope, raw) in part.raw {
            self.raw.entry(scope).or_default().extend(raw);
        }
        for (scope, keys) in part.keys {
            for key in keys {
                add_key(&mut self.keys, self.cap, scope, &key);
            }
        }
    }

    /// Whether [`Self::take_keys`] takes a row group whose spans all start inside the window.
    fn takes_keys(&self) -> bool {
        self.filter.is_none()
    }

    /// Takes a row group's names from the index's key lists when every span of it counts: no
    /// filter, and every span starting inside the window.
    fn take_keys(&mut self, stats: &RowGroupStats, keys: &mut dyn Iterator<Item = (KeyScope, &[u8])>) -> bool {
        if !self.takes_keys() {
            return false;
        }
        // Every span starts inside the window (and none ends before it starts).
        if let Some((ws, we)) = self.window
            && !(stats.start.is_some_and(|(lo, hi)| lo >= ws && hi <= we)
                && stats.duration.is_some_and(|(shortest, _)| shortest >= 0))
        {
            return false;
        }
        for (scope, key) in keys {
            let scope = match scope {
                KeyScope::Resource => TagScope::Resource,
                KeyScope::Scope => TagScope::Instrumentation,
                KeyScope::Span => TagScope::Span,
                KeyScope::Event => TagScope::Event,
                KeyScope::Link => TagScope::Link,
            };
            self.add_raw(scope, key);
        }
        true
    }

    /// Adds a stored key. Keys are compared as bytes first: most were seen before (a blob per
    /// span when values are unique, the same few keys in each).
    fn add_raw(&mut self, scope: TagScope, key: &[u8]) {
        let known = self.raw.entry(scope).or_default();
        if !known.contains(key) {
            known.insert(key.into());
            add_key(&mut self.keys, self.cap, scope, &String::from_utf8_lossy(key));
        }
    }

    fn add(&mut self, src: &impl SpanSource) {
        if let Some(f) = &mut self.filter {
            f.begin();
        }
        // Resource, scope, attributes, events, links, dedicated presence.
        let mut seen: [Seen; 6] = std::array::from_fn(|_| Seen::new());
        const PARTS: [(KeysOf, TagScope); 5] = [
            (KeysOf::Resource, TagScope::Resource),
            (KeysOf::Scope, TagScope::Instrumentation),
            (KeysOf::Span, TagScope::Span),
            (KeysOf::Events, TagScope::Event),
            (KeysOf::Links, TagScope::Link),
        ];
        for i in 0..src.len() {
            if !in_window(src, i, self.window) || self.filter.as_mut().is_some_and(|f| !f.matches(src, i)) {
                continue;
            }
            let ([_, _, resource, scope], _) = src.key(i);
            let [attrs, events, links] = src.blob_ids(i);
            for (k, id) in [resource, scope, attrs, events, links].into_iter().enumerate() {
                if !seen[k].first(u64::from(id)) {
                    continue;
                }
                let (of, scope) = PARTS[k];
                each_attribute_key(of, src.part(of, i), |key| self.add_raw(scope, key));
            }
            let mask = src.dedicated_mask(i);
            if mask != 0 && seen[5].first(u64::from(mask)) {
                for (bit, key) in src.dedicated_keys().iter().enumerate() {
                    if mask & (1 << bit) != 0 {
                        add_key(&mut self.keys, self.cap, TagScope::Span, key);
                    }
                }
            }
        }
    }
}

tag_column_sink!(ColumnTagNames);

/// Which column identifies a span's value of a field: spans with equal ids within one source
/// have equal values.
#[derive(Debug, Clone, Copy)]
enum IdOf {
    Name,
    StatusMessage,
    Resource,
    Scope,
    /// The value of span key `k` of the needs.
    SpanAttr(usize),
    /// A span attribute (span key `k`) or, failing that, a resource attribute (`.key`).
    SpanAttrAndResource(usize),
    Events,
    Links,
}

/// The distinct values of one field over every span in a window:
/// `/api/search/tag/{tag}/values` and `/api/v2/search/tag/{tag}/values` with the empty
/// filter. Fed by `Querier::scan_columns`.
#[derive(Debug)]
pub struct ColumnTagValues {
    window: Window,
    needs: MetricNeeds,
    filter: Option<SpanFilter>,
    parts: Parts,
    field: FieldExpr,
    id_of: IdOf,
    list: ValueList,
    /// The scan's last progress report: the reply's jobs.
    pub jobs: Option<ScanProgress>,
}

impl ColumnTagValues {
    /// For the values of `field` under a filter `query`, over spans overlapping `window`, at
    /// most `cap` of them. `None` when the filter needs whole traces or `field` has no column
    /// (see the [module docs](self)).
    pub fn new(query: &Query, field: &FieldExpr, window: Window, cap: usize) -> Option<ColumnTagValues> {
        let mut needs = MetricNeeds {
            duration: window.is_some(),
            ..MetricNeeds::default()
        };
        let mut parts = Parts::default();
        let id_of = match field {
            FieldExpr::Attribute(a) if a.parent => return None,
            FieldExpr::Attribute(a) => match a.scope {
                AttributeScope::Span => {
                    needs.span_keys.push(a.name.clone());
                    parts.span_attrs = true;
                    IdOf::SpanAttr(0)
                }
                AttributeScope::Resource => {
                    needs.resource = true;
                    parts.resource = true;
                    IdOf::Resource
                }
                AttributeScope::Unscoped => {
                    needs.span_keys.push(a.name.clone());
                    needs.resource = true;
                    parts.span_attrs = true;
                    parts.resource = true;
                    IdOf::SpanAttrAndResource(0)
                }
                AttributeScope::Instrumentation => {
                    needs.scope = true;
                    parts.scope = true;
                    IdOf::Scope
                }
                AttributeScope::Event => {
                    needs.lists = true;
                    parts.events = true;
                    IdOf::Events
                }
                AttributeScope::Link => {
                    needs.lists = true;
                    parts.links = true;
                    IdOf::Links
                }
            },
            FieldExpr::Intrinsic(Intrinsic::Name) => {
                needs.name = true;
                IdOf::Name
            }
            FieldExpr::Intrinsic(Intrinsic::StatusMessage) => {
                needs.status_message = true;
                IdOf::StatusMessage
            }
            FieldExpr::Intrinsic(Intrinsic::InstrumentationName | Intrinsic::InstrumentationVersion) => {
                needs.scope = true;
                parts.scope = true;
                IdOf::Scope
            }
            FieldExpr::Intrinsic(Intrinsic::EventName) => {
                needs.lists = true;
                parts.events = true;
                IdOf::Events
            }
            _ => return None,
        };
        // The filter's span keys come first; the field's moves behind them.
        let field_key = needs.span_keys.first().cloned();
        let filter = SpanFilter::new(query, &mut needs).ok()?;
        let id_of = match (id_of, field_key) {
            (IdOf::SpanAttr(_), Some(k)) => IdOf::SpanAttr(needs.span_keys.iter().position(|x| *x == k)?),
            (IdOf::SpanAttrAndResource(_), Some(k)) => {
                IdOf::SpanAttrAndResource(needs.span_keys.iter().position(|x| *x == k)?)
            }
            (id_of, _) => id_of,
        };
        Some(ColumnTagValues {
            window,
            needs,
            filter,
            parts,
            field: field.clone(),
            id_of,
            list: ValueList::new(cap),
            jobs: None,
        })
    }

    /// Set when more than the cap of distinct values were seen.
    pub fn truncated(&self) -> bool {
        self.list.truncated
    }

    /// The values, in the order first seen.
    pub fn finish(self) -> Vec<Value> {
        self.list.values
    }

    fn is_done(&self) -> bool {
        self.list.truncated
    }

    /// Adds the values another querier's part of the same lookup listed (in the order it
    /// listed them), as a fork's are merged.
    pub fn merge_values(&mut self, values: Vec<Value>, truncated: bool) {
        self.list.extend(values);
        self.list.truncated |= truncated;
    }

    /// An empty list of the same field, filter and window ([`ColumnSink::fork`]).
    fn fork_part(&self) -> ColumnTagValues {
        ColumnTagValues {
            window: self.window,
            needs: self.needs.clone(),
            filter: self.filter.clone(),
            parts: self.parts,
            field: self.field.clone(),
            id_of: self.id_of,
            list: ValueList::new(self.list.cap),
            jobs: None,
        }
    }

    /// Adds a fork's values after this list's, as if its spans came next: the values in the
    /// order first seen, the same as one pass would list, truncated when it would be.
    fn merge_part(&mut self, part: ColumnTagValues) {
        self.list.extend(part.list.values);
        self.list.truncated |= part.list.truncated;
    }

    /// Values are not in the key lists.
    fn takes_keys(&self) -> bool {
        false
    }

    /// Values are not in the key lists.
    fn take_keys(&mut self, _: &RowGroupStats, _: &mut dyn Iterator<Item = (KeyScope, &[u8])>) -> bool {
        false
    }

    fn add(&mut self, src: &impl SpanSource) {
        if let Some(f) = &mut self.filter {
            f.begin();
        }
        let mut seen = Seen::new();
        let mut vals = Vec::new();
        for i in 0..src.len() {
            if self.list.truncated {
                return;
            }
            if !in_window(src, i, self.window) || self.filter.as_mut().is_some_and(|f| !f.matches(src, i)) {
                continue;
            }
            let ([name, message, resource, scope], _) = src.key(i);
            let id = match self.id_of {
                IdOf::Name => u64::from(name),
                IdOf::StatusMessage => u64::from(message),
                IdOf::Resource => u64::from(resource),
                IdOf::Scope => u64::from(scope),
                IdOf::SpanAttr(k) => u64::from(src.attr_id(k, i)),
                IdOf::SpanAttrAndResource(k) => u64::from(src.attr_id(k, i)) | u64::from(resource) << 32,
                IdOf::Events => u64::from(src.blob_ids(i)[1]),
                IdOf::Links => u64::from(src.blob_ids(i)[2]),
            };
            if seen.first(id) {
                field_values(&self.field, &decode_parts(&src.row(i), self.parts), &mut vals);
                self.list.extend(std::mem::take(&mut vals));
            }
        }
    }
}

tag_column_sink!(ColumnTagValues);

#[cfg(test)]
mod seen_tests {
    use super::Seen;

    #[test]
    fn an_id_is_first_once_small_or_large() {
        let mut seen = Seen::new();
        let ids = [
            0,
            1,
            63,
            64,
            1,
            0,
            5000,
            Seen::DENSE - 1,
            Seen::DENSE,
            u64::MAX,
            5000,
            Seen::DENSE,
            63,
        ];
        let firsts: Vec<bool> = ids.iter().map(|&id| seen.first(id)).collect();
        assert_eq!(
            firsts,
            [
                true, true, true, true, false, false, true, true, true, true, false, false, false
            ]
        );
    }
}
