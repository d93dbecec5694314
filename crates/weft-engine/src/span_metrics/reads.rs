//! What a query reads of a span: the columns ([`MetricNeeds`]) and how its filter reads the
//! duration ([`DurationReads`]), or `None` when it reads a field without a column.

use weft_block::MetricNeeds;
use weft_traceql::Query;
use weft_traceql::ast::{AttributeScope, FieldExpr, Intrinsic, Stage};

/// At most this many span attribute keys are read one span at a time; a query reading more
/// runs over whole traces.
pub const MAX_SPAN_KEYS: usize = 4;

/// The columns a plain filter `{ … }` reads, and how it reads the duration, when every field
/// it reads is a field of the span itself with a column (as span-at-a-time metrics require);
/// `None` for any other query. Such a filter matches a span alone exactly as it matches it in
/// its trace.
pub(crate) fn span_filter_needs(query: &Query) -> Option<(MetricNeeds, DurationReads)> {
    let [Stage::Spanset(weft_traceql::ast::SpansetExpr::Filter(f))] = query.pipeline.stages.as_slice() else {
        return None;
    };
    if query.math.is_some() {
        return None;
    }
    let mut reads = Reads::default();
    f.expr.iter().try_for_each(|e| reads.expr(e, false))?;
    Some((reads.needs, reads.durations))
}

/// How a filter reads the span's duration, so that spans with different durations can share
/// one evaluation.
///
/// A comparison of the duration with a literal (`duration > 1s`, `100ms <= duration`) depends
/// only on how the duration orders against that literal. So two spans that agree on every
/// other field the filter reads, and whose durations order alike against each literal the
/// filter compares them with, match alike: [`Self::class`] is that ordering, and is part of
/// the key evaluations are cached by. Any other use of the duration (arithmetic, `by()`, a
/// comparison with a field) makes every span be evaluated on its own ([`Self::per_span`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct DurationReads {
    thresholds: Vec<Threshold>,
    per_span: bool,
}

/// A literal the duration is compared with, as the evaluator compares them
/// (`weft_traceql`'s `compare_scalar`): integers and durations as integers, floats as floats.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Threshold {
    Int(i64),
    Float(f64),
}

/// More literals than this (two bits each in [`DurationReads::class`]) and spans are
/// evaluated one by one.
const MAX_THRESHOLDS: usize = 32;

/// A stored duration as the evaluator reads it (`decode_parts`, then `Val::Duration`): the
/// stored bits as unsigned nanoseconds, saturating at `i64::MAX`.
#[inline]
pub(crate) fn evaluated_duration(stored: i64) -> i64 {
    i64::try_from(stored as u64).unwrap_or(i64::MAX)
}

impl DurationReads {
    /// Every span must be evaluated with its own duration.
    #[inline]
    pub(crate) fn per_span(&self) -> bool {
        self.per_span
    }

    /// How `duration` (as the evaluator reads it: `Val::Duration`) orders against each
    /// literal, two bits per literal; 0 when the filter compares it with none, or when every
    /// span is evaluated on its own.
    #[inline]
    pub(crate) fn class(&self, duration: i64) -> u64 {
        let mut class = 0;
        if self.per_span {
            return class;
        }
        for (k, t) in self.thresholds.iter().enumerate() {
            let ord = match *t {
                Threshold::Int(b) => duration.cmp(&b),
                // Literals are finite; a duration as a float is never NaN.
                Threshold::Float(b) => (duration as f64).partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
            };
            class |= ((ord as i64 + 1) as u64) << (2 * k);
        }
        class
    }

    /// Records `duration op e` (or `e op duration`) for a comparison `op`: true when `e` is a
    /// numeric literal, and the comparison is then accounted for.
    fn threshold(&mut self, e: &FieldExpr) -> bool {
        use weft_traceql::ast::Static;
        let t = match e {
            FieldExpr::Static(Static::Int(i) | Static::Duration(i)) => Threshold::Int(*i),
            FieldExpr::Static(Static::Float(x)) => Threshold::Float(*x),
            _ => return false,
        };
        if !self.thresholds.contains(&t) {
            self.thresholds.push(t);
            self.per_span |= self.thresholds.len() > MAX_THRESHOLDS;
        }
        true
    }
}

/// What the fields of a query read, or `None` when one has no column.
#[derive(Default)]
pub(super) struct Reads {
    pub(super) needs: MetricNeeds,
    /// How the filter and `by()` read the duration (the metric's value aside).
    pub(super) durations: DurationReads,
}

impl Reads {
    pub(super) fn expr(&mut self, e: &FieldExpr, in_value: bool) -> Option<()> {
        use Intrinsic as I;
        let duration = |e: &FieldExpr| matches!(e, FieldExpr::Intrinsic(I::Duration));
        match e {
            FieldExpr::Binary { op, lhs, rhs }
                if !in_value
                    && op.is_comparison()
                    && !op.is_regex()
                    && ((duration(lhs) && self.durations.threshold(rhs))
                        || (duration(rhs) && self.durations.threshold(lhs))) =>
            {
                self.needs.duration = true;
            }
            // `nestedSetParent < 0` and the like, `span:parentID = nil`: whether the span has
            // a parent, the one structural fact a span carries itself.
            FieldExpr::Binary { op, lhs, rhs } if crate::prefilter::root_comparison(*op, lhs, rhs).is_some() => {
                self.needs.parents = true;
            }
            FieldExpr::Static(_) => {}
            FieldExpr::Attribute(a) if a.parent => return None,
            FieldExpr::Attribute(a) => match a.scope {
                AttributeScope::Resource => self.needs.resource = true,
                AttributeScope::Instrumentation => self.needs.scope = true,
                AttributeScope::Span => self.span_key(&a.name)?,
                // The span's attribute, else the resource's.
                AttributeScope::Unscoped => {
                    self.span_key(&a.name)?;
                    self.needs.resource = true;
                }
                AttributeScope::Event | AttributeScope::Link => return None,
            },
            FieldExpr::Intrinsic(i) => match i {
                I::Name => self.needs.name = true,
                I::Status => self.needs.status = true,
                I::StatusMessage => self.needs.status_message = true,
                I::Kind => self.needs.kind = true,
                I::Duration => {
                    self.needs.duration = true;
                    self.durations.per_span |= !in_value;
                }
                I::InstrumentationName | I::InstrumentationVersion => self.needs.scope = true,
                _ => return None,
            },
            FieldExpr::Unary { expr, .. } => self.expr(expr, false)?,
            FieldExpr::Binary { lhs, rhs, .. } => {
                self.expr(lhs, false)?;
                self.expr(rhs, false)?;
            }
        }
        Some(())
    }

    fn span_key(&mut self, key: &str) -> Option<()> {
        if !self.needs.span_keys.iter().any(|k| k == key) {
            if self.needs.span_keys.len() == MAX_SPAN_KEYS {
                return None;
            }
            self.needs.span_keys.push(key.to_string());
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::{DurationReads, MAX_THRESHOLDS, span_filter_needs};

    fn reads(q: &str) -> DurationReads {
        let query = weft_traceql::parse(q).unwrap();
        span_filter_needs(&query).expect("span-local").1
    }

    /// Durations share a class exactly when they order alike against every literal; the model
    /// test in `weft-querier` checks the results against whole-trace evaluation.
    #[test]
    fn duration_classes_split_at_each_literal() {
        let r = reads("{ duration > 1ms && 5ms >= duration }");
        assert!(!r.per_span());
        let class = |d| r.class(d);
        assert_eq!(class(0), class(999_999));
        assert_ne!(class(999_999), class(1_000_000));
        assert_ne!(class(1_000_000), class(1_000_001));
        assert_eq!(class(1_000_001), class(4_999_999));
        assert_ne!(class(4_999_999), class(5_000_000));
        assert_ne!(class(5_000_000), class(5_000_001));
        assert_eq!(class(5_000_001), class(i64::MAX));

        // A float literal splits where the evaluator's float comparison does.
        let f = reads("{ duration < 1.5 }");
        assert_ne!(f.class(1), f.class(2));
        assert_eq!(f.class(2), f.class(3));

        // A filter without the duration has one class.
        let none = reads(r#"{ name = "a" }"#);
        assert!(!none.per_span() && none.class(1) == none.class(1 << 40));
    }

    #[test]
    fn other_reads_of_the_duration_evaluate_every_span() {
        assert!(reads("{ duration * 2 > 1s }").per_span());
        assert!(reads("{ duration = nil }").per_span());
        let literals = |n: usize| {
            let terms: Vec<String> = (1..=n).map(|i| format!("duration = {i}ns")).collect();
            format!("{{ {} }}", terms.join(" || "))
        };
        assert!(!reads(&literals(MAX_THRESHOLDS)).per_span());
        let past = reads(&literals(MAX_THRESHOLDS + 1));
        assert!(past.per_span());
        assert_eq!(past.class(7), 0);
    }
}
