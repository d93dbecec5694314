//! The searches of the foreign query APIs (Jaeger's v1 and v3 `FindTraces`, Zipkin's
//! `/api/v2/traces`): the `limit` newest whole traces a [`Matcher`] accepts, each API's own
//! rules deciding what matches and what "newest" means.
//!
//! [`Newest`] is a [`TraceSink`], so these searches run as Tempo's does: row groups on every
//! query worker ([`TraceSink::fork`]); when the order is by trace start ([`Order::Start`]),
//! a scan that holds `limit` traces skips what starts before the oldest and stops early; and
//! split over queriers, a querier's newest matches come back as [`Found`] (ID and order key),
//! which the frontend reads whole once it knows which of them make the result.
//!
//! The order is by key, newest first, ties by trace ID (lowest first), so the result does not
//! depend on the order traces came in.

use std::sync::Arc;

use weft_block::row::SpanRow;

use crate::prefilter::Prefilter;
use crate::search::{FloorOf, TracePart, TraceSink};

/// What makes a whole trace a match, and its place in the order.
pub trait Matcher: Send + Sync {
    /// The trace's order key (newest first) when the whole trace (`rows`, ordered by start)
    /// matches; `None` otherwise.
    fn key(&self, rows: &[SpanRow]) -> Option<u64>;
}

/// What a [`Matcher`]'s key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The trace's start (its earliest span's start, Unix ns): a scan may stop early.
    Start,
    /// The start of one of the trace's spans rounded to the nearest microsecond (Zipkin's trace
    /// timestamp: its root span's, else its earliest span's): a scan may stop early, as
    /// [`FloorOf::SpanStart`] says.
    SpanStartMicros,
    /// Something else: every matching trace is read.
    Other,
}

/// A trace another querier found for this search: its ID and order key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub trace_id: [u8; 16],
    pub key: u64,
}

/// A kept trace: its spans, or `None` for one found elsewhere and not read here yet.
#[derive(Debug, Clone)]
struct Kept {
    key: u64,
    trace_id: [u8; 16],
    rows: Option<Vec<SpanRow>>,
}

/// The `limit` newest traces a [`Matcher`] accepts (see the [module docs](self)).
#[derive(Clone)]
pub struct Newest {
    prefilter: Prefilter,
    matcher: Arc<dyn Matcher>,
    order: Order,
    limit: usize,
    kept: Vec<Kept>,
    /// With `limit` traces kept in an order a scan can stop early in: the oldest's key, in
    /// Unix ns ([`Newest::key_ns`]).
    floor: Option<u64>,
}

impl std::fmt::Debug for Newest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Newest")
            .field("order", &self.order)
            .field("limit", &self.limit)
            .field("kept", &self.kept.len())
            .field("floor", &self.floor)
            .finish()
    }
}

impl Newest {
    /// A search keeping the `limit` (at least 1) newest traces `matcher` accepts, offered only
    /// traces that may pass `prefilter`.
    pub fn new(prefilter: Prefilter, matcher: Arc<dyn Matcher>, order: Order, limit: usize) -> Newest {
        Newest {
            prefilter,
            matcher,
            order,
            limit: limit.max(1),
            kept: Vec::new(),
            floor: None,
        }
    }

    /// An empty search of the same request, keeping traces from `floor` on (Unix ns, as
    /// [`TraceSink::start_floor`] gives it; 0: all; ignored when the order is
    /// [`Order::Other`]).
    pub fn fresh(&self, floor: u64) -> Newest {
        Newest {
            floor: (self.order != Order::Other && floor > 0).then_some(floor),
            ..self.clone_empty()
        }
    }

    /// A key as the floor is kept: the earliest start, in Unix ns, a trace with that key can
    /// have. `None` for an order with no floor.
    fn key_ns(&self, key: u64) -> Option<u64> {
        match self.order {
            Order::Start => Some(key),
            // Zipkin's timestamp is the start rounded to the nearest microsecond (`(ns + 500) /
            // 1000`), so a span 500 ns before the microsecond has its key: a floor of the
            // microsecond's first nanosecond left out the oldest kept trace when it was read
            // whole again (a frontend's search found it on another querier).
            Order::SpanStartMicros => Some(key.saturating_mul(1000).saturating_sub(500)),
            Order::Other => None,
        }
    }

    fn clone_empty(&self) -> Newest {
        Newest {
            prefilter: self.prefilter.clone(),
            matcher: self.matcher.clone(),
            order: self.order,
            limit: self.limit,
            kept: Vec::new(),
            floor: self.floor,
        }
    }

    /// The traces kept, newest first, each with its order key: what a querier replies with.
    pub fn found(mut self) -> Vec<Found> {
        self.trim();
        self.kept
            .iter()
            .map(|k| Found {
                trace_id: k.trace_id,
                key: k.key,
            })
            .collect()
    }

    /// Adds traces another querier found. They take their place in the order now; the ones
    /// that stay in it are read whole later ([`Newest::to_read`]).
    pub fn merge_found(&mut self, found: Vec<Found>) {
        for f in found {
            if self.kept.iter().any(|k| k.trace_id == f.trace_id) {
                continue;
            }
            self.push(Kept {
                key: f.key,
                trace_id: f.trace_id,
                rows: None,
            });
        }
        self.trim();
    }

    /// The traces found elsewhere that are in the result, to read whole and offer here.
    pub fn to_read(&mut self) -> Vec<[u8; 16]> {
        self.trim();
        self.kept
            .iter()
            .filter(|k| k.rows.is_none())
            .map(|k| k.trace_id)
            .collect()
    }

    /// The result: each kept trace's spans, newest first. A trace found elsewhere that was
    /// never read here (gone since) is left out.
    pub fn into_traces(mut self) -> Vec<Vec<SpanRow>> {
        self.trim();
        self.kept.into_iter().filter_map(|k| k.rows).collect()
    }

    fn push(&mut self, k: Kept) {
        if let (Some(f), Some(key)) = (self.floor, self.key_ns(k.key))
            && key < f
        {
            return;
        }
        self.kept.push(k);
        if self.kept.len() >= 2 * self.limit {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.kept
            .sort_by(|a, b| b.key.cmp(&a.key).then(a.trace_id.cmp(&b.trace_id)));
        self.kept.truncate(self.limit);
        if self.kept.len() == self.limit {
            let oldest = self.kept.last().and_then(|k| self.key_ns(k.key));
            self.floor = self.floor.max(oldest);
        }
    }

    fn merge_part(&mut self, part: Newest) {
        for k in part.kept {
            self.kept.retain(|x| x.trace_id != k.trace_id || x.rows.is_some());
            self.push(k);
        }
        self.trim();
    }
}

impl TraceSink for Newest {
    fn prefilter(&self) -> &Prefilter {
        &self.prefilter
    }

    fn start_floor(&self) -> Option<u64> {
        // Ties are kept (`>=`): the trace ID breaks them.
        self.floor
    }

    fn floor_of(&self) -> FloorOf {
        match self.order {
            Order::SpanStartMicros => FloorOf::SpanStart,
            Order::Start | Order::Other => FloorOf::TraceStart,
        }
    }

    fn offer(&mut self, rows: &[SpanRow]) {
        let Some(first) = rows.first() else {
            return;
        };
        let trace_id = first.trace_id;
        // A trace found elsewhere, now read here: its spans replace the placeholder.
        self.kept.retain(|k| k.trace_id != trace_id || k.rows.is_some());
        if self.order != Order::Other {
            let bound = self.floor_of().bound(rows.iter().map(|r| r.start_unix_nano));
            if !TraceSink::wants_start(self, bound) {
                return;
            }
        }
        if let Some(key) = self.matcher.key(rows) {
            self.push(Kept {
                key,
                trace_id,
                rows: Some(rows.to_vec()),
            });
        }
    }

    fn fork(&self) -> Option<Box<dyn TracePart>> {
        Some(Box::new(self.clone_empty()))
    }

    fn merge(&mut self, part: Box<dyn TracePart>) {
        if let Ok(part) = part.into_any().downcast::<Newest>() {
            self.merge_part(*part);
        }
    }
}

impl TracePart for Newest {
    fn offer(&mut self, rows: &[SpanRow]) {
        TraceSink::offer(self, rows)
    }

    fn wants_start(&self, start_unix_nano: u64) -> bool {
        TraceSink::wants_start(self, start_unix_nano)
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Matches traces whose first span is named "odd"; the key is the start, or with
    /// `Order::Other`, the start's bits reversed (an order unrelated to the start).
    struct Odd(Order);

    impl Matcher for Odd {
        fn key(&self, rows: &[SpanRow]) -> Option<u64> {
            let start = rows.iter().map(|r| r.start_unix_nano).min()?;
            (rows[0].name == "odd").then_some(match self.0 {
                Order::Start => start,
                Order::SpanStartMicros => (start + 500) / 1000,
                Order::Other => start.reverse_bits(),
            })
        }
    }

    fn trace(i: u8, start: u64, odd: bool) -> Vec<SpanRow> {
        let mut id = [0u8; 16];
        id[15] = i;
        id[0] = i.wrapping_mul(37);
        vec![SpanRow {
            trace_id: id,
            span_id: [i; 8],
            name: if odd { "odd" } else { "even" }.to_owned(),
            start_unix_nano: start,
            ..SpanRow::default()
        }]
    }

    fn search(order: Order, limit: usize) -> Newest {
        let q = weft_traceql::parse("{ }").expect("valid");
        Newest::new(Prefilter::new(&q), Arc::new(Odd(order)), order, limit)
    }

    fn ids(traces: &[Vec<SpanRow>]) -> Vec<[u8; 16]> {
        traces.iter().map(|t| t[0].trace_id).collect()
    }

    /// Traces with starts colliding often, so ties matter; some of them in the second half of a
    /// microsecond, which Zipkin's timestamp rounds up.
    fn traces(n: u8) -> Vec<Vec<SpanRow>> {
        (0..n)
            .map(|i| trace(i, 1_000 + u64::from(i % 7) * 150, i % 3 != 0))
            .collect()
    }

    fn expected(all: &[Vec<SpanRow>], order: Order, limit: usize) -> Vec<[u8; 16]> {
        let m = Odd(order);
        let mut v: Vec<(u64, [u8; 16])> = all
            .iter()
            .filter_map(|t| m.key(t).map(|k| (k, t[0].trace_id)))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().take(limit).map(|(_, id)| id).collect()
    }

    #[test]
    fn keeps_the_newest_matches_ties_by_trace_id_whatever_the_order_offered() {
        let all = traces(60);
        for order in [Order::Start, Order::SpanStartMicros, Order::Other] {
            for limit in [1, 5, 20, 100] {
                let want = expected(&all, order, limit);
                for rotate in [0, 17, 41] {
                    let mut s = search(order, limit);
                    let mut offered = all.clone();
                    offered.rotate_left(rotate);
                    for t in &offered {
                        TraceSink::offer(&mut s, t);
                    }
                    assert_eq!(ids(&s.into_traces()), want, "{order:?} limit {limit} rotate {rotate}");
                }
            }
        }
    }

    #[test]
    fn ordered_by_a_start_it_raises_a_floor_and_by_anything_else_it_does_not() {
        let all = traces(60);
        let mut s = search(Order::Start, 5);
        for t in &all {
            TraceSink::offer(&mut s, t);
        }
        let floor = s.start_floor().expect("a full result has a floor");
        assert_eq!(floor, 1_900, "the oldest of the 5 kept starts");
        assert!(!TraceSink::wants_start(&s, floor - 1) && TraceSink::wants_start(&s, floor));
        let mut other = search(Order::Other, 5);
        for t in &all {
            TraceSink::offer(&mut other, t);
        }
        assert_eq!(other.start_floor(), None);
        // Zipkin's: the floor is the first nanosecond that rounds to the oldest kept key.
        let mut zipkin = search(Order::SpanStartMicros, 5);
        for t in &all {
            TraceSink::offer(&mut zipkin, t);
        }
        assert_eq!(zipkin.start_floor(), Some(1_500), "the 5 kept are all of microsecond 2");
        assert_eq!(zipkin.floor_of(), FloorOf::SpanStart);
    }

    #[test]
    fn forks_merged_and_traces_found_elsewhere_give_the_unsplit_answer() {
        let all = traces(80);
        for order in [Order::Start, Order::SpanStartMicros, Order::Other] {
            let want = expected(&all, order, 7);
            // Forks, each offered a quarter.
            let mut s = search(order, 7);
            let mut parts: Vec<Box<dyn TracePart>> = (0..4).map(|_| TraceSink::fork(&s).expect("forks")).collect();
            for (i, t) in all.iter().enumerate() {
                parts[i % 4].offer(t);
            }
            for p in parts {
                TraceSink::merge(&mut s, p);
            }
            assert_eq!(ids(&s.into_traces()), want, "{order:?} forks");
            // Jobs on other queriers: their found traces merged, then the kept ones read whole.
            let mut front = search(order, 7);
            for chunk in all.chunks(25) {
                let mut job = front.fresh(front.start_floor().unwrap_or(0));
                for t in chunk {
                    TraceSink::offer(&mut job, t);
                }
                front.merge_found(job.found());
            }
            let read = front.to_read();
            assert_eq!(read, want, "{order:?}: the result's traces are read whole");
            for id in &read {
                let t = all.iter().find(|t| t[0].trace_id == *id).expect("sent");
                TraceSink::offer(&mut front, t);
            }
            assert!(front.to_read().is_empty());
            assert_eq!(ids(&front.into_traces()), want, "{order:?} jobs");
        }
    }
}
