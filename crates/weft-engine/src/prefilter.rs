//! Cheap necessary conditions derived from a query, tested on stored spans before they are
//! decoded.
//!
//! Decoding a span's attributes costs far more than reading its fixed columns, so search first
//! asks this module whether a trace *could* match. The answer may be a false "yes" (the exact
//! evaluator then says no) but never a false "no": every test here is implied by the query.
//!
//! # What is derived
//!
//! Each spanset filter `{ e }` becomes a **leaf**: the conjunction of the simple conjuncts of
//! `e` (top-level `&&` only; everything else is left out, which only weakens the test):
//! - `name = "s"` / `name != "s"`;
//! - `duration op d` for `= != < <= > >=` with a duration or integer literal (nanoseconds);
//! - `status = s` / `status != s`, `kind = k` / `kind != k`;
//! - whether the span is a root: `span:parentID = nil` / `!= nil`, and the comparisons of
//!   `nestedSetParent` with an integer that depend only on that
//!   ([`weft_traceql::ast::root_test`]: Grafana's Traces Drilldown puts
//!   `nestedSetParent<0` in its queries); one that holds for no span makes the leaf fail;
//! - `scope.key = "s"` for a string literal: the encoded bytes of `s` must occur in the stored
//!   protobuf bytes where that scope keeps its attributes (span attributes, the resource, the
//!   scope, events or links; `.key` looks in span attributes and the resource). A string
//!   attribute equal to `s`, or an array holding it, stores those bytes verbatim.
//! - `scope.key op v` for any other comparison (`= != < <= > >= =~ !~`) with a value that is
//!   not `nil`: the key's bytes must occur in the same place, since a missing attribute is
//!   nil and nil compares false.
//!
//! The query becomes a condition tree over leaves ([`Cond`]): `A && B` and the structural
//! operators need both sides (`A > B` returns B spans whose parent is in A), `A || B` either,
//! and the negated structural operators (`A !> B`) need only B. Later spanset stages of the
//! pipeline are required too. A trace can match only if the tree holds, where a leaf holds
//! when some span of the trace passes it.
//!
//! Row groups are skipped when their statistics rule out every leaf: start-time and duration
//! ranges, and the per-row-group bloom filter of string attribute values written by compaction
//! (`attr = "s"` cannot hold where the bloom lacks `s`).
//!
//! A trace split over several stored pieces (head and blocks, or two blocks) may need spans
//! from different pieces to satisfy the tree, so a piece is first tested with
//! [`Prefilter::piece_may_match`] (some span passes some leaf); only whole traces are tested
//! with [`Prefilter::trace_may_match`].

use memchr::memmem;
use weft_block::Needs;
use weft_block::RowGroupStats;
use weft_block::index::Bloom;
use weft_block::row::SpanFields;
use weft_traceql::Query;
use weft_traceql::ast::{
    AttributeScope, BinaryOp, FieldExpr, Intrinsic, Kind, Pipeline, RootTest, SpansetExpr, SpansetOp, Stage, Static,
    Status, root_test,
};

/// Where a string needle is looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    SpanAttrs,
    Resource,
    SpanOrResource,
    Scope,
    Events,
    Links,
}

#[derive(Debug, Clone)]
enum Term {
    Name {
        eq: bool,
        value: String,
    },
    Duration {
        op: BinaryOp,
        ns: i64,
    },
    Status {
        eq: bool,
        code: u8,
    },
    Kind {
        eq: bool,
        kind: u8,
    },
    /// The span has no parent span ID (`root`), or has one.
    Root {
        root: bool,
    },
    /// No span passes (`nestedSetParent < -1`).
    Never,
    /// `exact`: the needle is a whole string attribute value (`attr = "s"`), so a row group's
    /// value bloom can rule it out.
    Contains {
        place: Place,
        finder: Box<memmem::Finder<'static>>,
        exact: bool,
    },
}

/// The conjunction of the simple conjuncts of one spanset filter.
#[derive(Debug, Clone, Default)]
struct Leaf {
    terms: Vec<Term>,
}

/// The condition tree over leaves.
#[derive(Debug, Clone)]
pub enum Cond {
    /// Some span passes leaf `n`.
    Leaf(usize),
    /// Both hold.
    And(Box<Cond>, Box<Cond>),
    /// Either holds.
    Or(Box<Cond>, Box<Cond>),
}

/// The necessary conditions of one query.
#[derive(Debug, Clone)]
pub struct Prefilter {
    leaves: Vec<Leaf>,
    cond: Cond,
    /// The query, as TraceQL: another process derives the same conditions from it.
    source: String,
}

impl Prefilter {
    /// Derives the conditions of `query` (spanset or metrics query).
    pub fn new(query: &Query) -> Prefilter {
        let mut leaves = Vec::new();
        let cond = pipeline(&query.pipeline, &mut leaves).unwrap_or_else(|| {
            leaves.push(Leaf::default());
            Cond::Leaf(leaves.len() - 1)
        });
        Prefilter {
            leaves,
            cond,
            source: query.to_string(),
        }
    }

    /// The query these conditions were derived from, as TraceQL.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when every span passes every leaf, so testing is pointless (`{ }`).
    pub fn is_trivial(&self) -> bool {
        self.leaves.iter().all(|l| l.terms.is_empty())
    }

    /// Whether some span of `rows` (part of a trace, or all of it) passes some leaf. A trace
    /// none of whose pieces passes cannot match.
    pub fn piece_may_match<F: SpanFields>(&self, rows: impl IntoIterator<Item = F>) -> bool {
        rows.into_iter().any(|r| self.leaves.iter().any(|l| l.passes(&r)))
    }

    /// Whether the whole trace `rows` may match the query.
    pub fn trace_may_match<F: SpanFields>(&self, rows: impl IntoIterator<Item = F>) -> bool {
        self.holds(self.leaves_passed(rows))
    }

    /// The leaves some span of `rows` passes, bit `i` for leaf `i`: the pieces of one trace
    /// can be tested apart and their bits or-ed. Leaves from the 64th on share bit 63, set when
    /// any of them passes, which [`Self::holds`] reads as all of them passing (a weaker test,
    /// never a wrong "no").
    pub fn leaves_passed<F: SpanFields>(&self, rows: impl IntoIterator<Item = F>) -> u64 {
        let all = self.all_passed();
        let mut passed = 0u64;
        for r in rows {
            for (i, l) in self.leaves.iter().enumerate() {
                let bit = 1u64 << i.min(63);
                if passed & bit == 0 && l.passes(&r) {
                    passed |= bit;
                }
            }
            if passed == all {
                break;
            }
        }
        passed
    }

    /// Whether a trace whose spans pass the leaves `passed` ([`Self::leaves_passed`]) may
    /// match the query.
    pub fn holds(&self, passed: u64) -> bool {
        eval(&self.cond, &|i| passed & (1u64 << i.min(63)) != 0)
    }

    fn all_passed(&self) -> u64 {
        (0..self.leaves.len()).fold(0, |m, i| m | 1u64 << i.min(63))
    }

    /// Whether some span of a row group with these statistics and string-value bloom filter
    /// (when the block has one) could pass some leaf. `false` means the row group can be
    /// skipped.
    pub fn row_group_may_match(&self, stats: &RowGroupStats, values: Option<&Bloom>) -> bool {
        self.leaves.iter().any(|l| l.stats_allow(stats, values))
    }

    /// The columns the leaves read.
    pub fn needs(&self) -> Needs {
        let mut n = Needs::default();
        for t in self.leaves.iter().flat_map(|l| &l.terms) {
            match t {
                Term::Name { .. } => n.name = true,
                Term::Duration { .. } => {}
                Term::Status { .. } => n.status = true,
                Term::Kind { .. } => n.kind = true,
                Term::Root { .. } => n.parent = true,
                Term::Never => {}
                Term::Contains { place, .. } => match place {
                    Place::SpanAttrs => n.attributes = true,
                    Place::Resource => n.resource = true,
                    Place::SpanOrResource => {
                        n.attributes = true;
                        n.resource = true;
                    }
                    Place::Scope => n.scope = true,
                    Place::Events => n.events = true,
                    Place::Links => n.links = true,
                },
            }
        }
        n
    }
}

fn eval(c: &Cond, held: &impl Fn(usize) -> bool) -> bool {
    match c {
        Cond::Leaf(i) => held(*i),
        Cond::And(a, b) => eval(a, held) && eval(b, held),
        Cond::Or(a, b) => eval(a, held) || eval(b, held),
    }
}

impl Leaf {
    fn passes(&self, r: &impl SpanFields) -> bool {
        self.terms.iter().all(|t| match t {
            Term::Name { eq, value } => (r.name() == value.as_bytes()) == *eq,
            Term::Duration { op, ns } => compare(*op, r.duration_nano().cmp(ns)),
            Term::Status { eq, code } => (status_code(r.status_code()) == *code) == *eq,
            Term::Kind { eq, kind } => (kind_code(r.kind()) == *kind) == *eq,
            Term::Root { root } => r.has_parent() != *root,
            Term::Never => false,
            Term::Contains { place, finder, .. } => {
                let find = |b: &[u8]| finder.find(b).is_some();
                match place {
                    Place::SpanAttrs => find(r.attributes()),
                    Place::Resource => find(r.resource()),
                    Place::SpanOrResource => find(r.attributes()) || find(r.resource()),
                    Place::Scope => find(r.scope()),
                    Place::Events => find(r.events()),
                    Place::Links => find(r.links()),
                }
            }
        })
    }

    fn stats_allow(&self, s: &RowGroupStats, values: Option<&Bloom>) -> bool {
        self.terms.iter().all(|t| match (t, s.duration) {
            (
                Term::Contains {
                    finder, exact: true, ..
                },
                _,
            ) => values.is_none_or(|b| b.may_contain_bytes(finder.needle())),
            (Term::Duration { op, ns }, Some((lo, hi))) => match op {
                BinaryOp::Eq => lo <= *ns && *ns <= hi,
                BinaryOp::Gt => hi > *ns,
                BinaryOp::Gte => hi >= *ns,
                BinaryOp::Lt => lo < *ns,
                BinaryOp::Lte => lo <= *ns,
                _ => true,
            },
            (Term::Never, _) => false,
            _ => true,
        })
    }
}

/// The status a stored code reads as (`decode`: unknown codes are `unset`).
fn status_code(c: u8) -> u8 {
    if c <= 2 { c } else { 0 }
}

/// The kind a stored number reads as (`decode`: unknown kinds are `unspecified`).
fn kind_code(k: u8) -> u8 {
    if k <= 5 { k } else { 0 }
}

fn compare(op: BinaryOp, ord: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        BinaryOp::Eq => ord == Equal,
        BinaryOp::Neq => ord != Equal,
        BinaryOp::Lt => ord == Less,
        BinaryOp::Lte => ord != Greater,
        BinaryOp::Gt => ord == Greater,
        BinaryOp::Gte => ord != Less,
        _ => true,
    }
}

/// The condition of a pipeline: every spanset stage must hold. `None` when it has none.
fn pipeline(p: &Pipeline, leaves: &mut Vec<Leaf>) -> Option<Cond> {
    let mut out: Option<Cond> = None;
    for stage in &p.stages {
        if let Stage::Spanset(e) = stage {
            let c = spanset(e, leaves);
            out = Some(match out {
                Some(prev) => Cond::And(Box::new(prev), Box::new(c)),
                None => c,
            });
        }
    }
    out
}

fn spanset(e: &SpansetExpr, leaves: &mut Vec<Leaf>) -> Cond {
    match e {
        SpansetExpr::Filter(f) => {
            let mut leaf = Leaf::default();
            if let Some(expr) = &f.expr {
                conjuncts(expr, &mut leaf.terms);
            }
            leaves.push(leaf);
            Cond::Leaf(leaves.len() - 1)
        }
        SpansetExpr::Pipeline(p) => pipeline(p, leaves).unwrap_or_else(|| {
            leaves.push(Leaf::default());
            Cond::Leaf(leaves.len() - 1)
        }),
        SpansetExpr::Op { op, lhs, rhs } => {
            let (l, r) = (spanset(lhs, leaves), spanset(rhs, leaves));
            match op {
                SpansetOp::Or => Cond::Or(Box::new(l), Box::new(r)),
                SpansetOp::NotChild
                | SpansetOp::NotDescendant
                | SpansetOp::NotParent
                | SpansetOp::NotAncestor
                | SpansetOp::NotSibling => r,
                _ => Cond::And(Box::new(l), Box::new(r)),
            }
        }
    }
}

fn conjuncts(e: &FieldExpr, out: &mut Vec<Term>) {
    let FieldExpr::Binary { op, lhs, rhs } = e else {
        return;
    };
    if *op == BinaryOp::And {
        conjuncts(lhs, out);
        conjuncts(rhs, out);
        return;
    }
    if let Some(t) = root_comparison(*op, lhs, rhs) {
        match t {
            RootTest::Root => out.push(Term::Root { root: true }),
            RootTest::NotRoot => out.push(Term::Root { root: false }),
            RootTest::Always(true) => {}
            RootTest::Always(false) => out.push(Term::Never),
        }
        return;
    }
    let (field, lit, op) = match (&**lhs, &**rhs) {
        (f, FieldExpr::Static(s)) if f.is_field() => (f, s, *op),
        (FieldExpr::Static(s), f) if f.is_field() => (f, s, flip(*op)),
        _ => return,
    };
    if let Some(t) = term(field, lit, op) {
        out.push(t);
    }
}

/// Whether `lhs op rhs` depends only on whether the span has a parent span ID: a comparison of
/// `nestedSetParent` that [`root_test`] recognizes, or `span:parentID = nil` / `!= nil`, either
/// side first. Read from columns by the prefilter and by span-at-a-time metrics and tags.
pub(crate) fn root_comparison(op: BinaryOp, lhs: &FieldExpr, rhs: &FieldExpr) -> Option<RootTest> {
    if let Some(t) = root_test(op, lhs, rhs) {
        return Some(t);
    }
    let parent = |e: &FieldExpr| matches!(e, FieldExpr::Intrinsic(Intrinsic::ParentId));
    let nil = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
    if !((parent(lhs) && nil(rhs)) || (nil(lhs) && parent(rhs))) {
        return None;
    }
    match op {
        BinaryOp::Eq => Some(RootTest::Root),
        BinaryOp::Neq => Some(RootTest::NotRoot),
        _ => None,
    }
}

/// `a op b` written as `b op' a`.
fn flip(op: BinaryOp) -> BinaryOp {
    match op {
        BinaryOp::Lt => BinaryOp::Gt,
        BinaryOp::Lte => BinaryOp::Gte,
        BinaryOp::Gt => BinaryOp::Lt,
        BinaryOp::Gte => BinaryOp::Lte,
        other => other,
    }
}

fn term(field: &FieldExpr, lit: &Static, op: BinaryOp) -> Option<Term> {
    let eq = match op {
        BinaryOp::Eq => Some(true),
        BinaryOp::Neq => Some(false),
        _ => None,
    };
    match (field, lit) {
        (FieldExpr::Intrinsic(Intrinsic::Name), Static::Str(s)) => Some(Term::Name {
            eq: eq?,
            value: s.clone(),
        }),
        (FieldExpr::Intrinsic(Intrinsic::Duration), Static::Duration(ns) | Static::Int(ns)) => match op {
            BinaryOp::Eq | BinaryOp::Neq | BinaryOp::Lt | BinaryOp::Lte | BinaryOp::Gt | BinaryOp::Gte => {
                Some(Term::Duration { op, ns: *ns })
            }
            _ => None,
        },
        (FieldExpr::Intrinsic(Intrinsic::Status), Static::Status(s)) => Some(Term::Status {
            eq: eq?,
            code: match s {
                Status::Unset => 0,
                Status::Ok => 1,
                Status::Error => 2,
            },
        }),
        (FieldExpr::Intrinsic(Intrinsic::Kind), Static::Kind(k)) => Some(Term::Kind {
            eq: eq?,
            kind: match k {
                Kind::Unspecified => 0,
                Kind::Internal => 1,
                Kind::Server => 2,
                Kind::Client => 3,
                Kind::Producer => 4,
                Kind::Consumer => 5,
            },
        }),
        (FieldExpr::Intrinsic(Intrinsic::EventName), Static::Str(s)) if op == BinaryOp::Eq => {
            Some(contains(Place::Events, s, false))
        }
        (FieldExpr::Attribute(a), Static::Str(s)) if op == BinaryOp::Eq && !a.parent => {
            Some(contains(place_of(a.scope), s, true))
        }
        // Any other comparison with a value is false where the attribute is missing (nil
        // compares false, `!=` and `!~` included), so its key must be stored there.
        (FieldExpr::Attribute(a), lit) if !a.parent && !matches!(lit, Static::Nil) && op.is_comparison() => {
            Some(contains(place_of(a.scope), &a.name, false))
        }
        _ => None,
    }
}

fn place_of(scope: AttributeScope) -> Place {
    match scope {
        AttributeScope::Unscoped => Place::SpanOrResource,
        AttributeScope::Span => Place::SpanAttrs,
        AttributeScope::Resource => Place::Resource,
        AttributeScope::Instrumentation => Place::Scope,
        AttributeScope::Event => Place::Events,
        AttributeScope::Link => Place::Links,
    }
}

fn contains(place: Place, s: &str, exact: bool) -> Term {
    Term::Contains {
        place,
        finder: Box::new(memmem::Finder::new(s.as_bytes()).into_owned()),
        exact,
    }
}

#[cfg(test)]
mod tests;
