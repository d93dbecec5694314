//! The exact TraceQL evaluator over in-memory traces ([`Trace`]).
//!
//! [`Evaluator::new`] validates a query, runs the [support check](crate::supported) and compiles
//! it (each regular expression once); [`Evaluator::eval`] runs its spanset pipeline on one trace;
//! [`eval`] does both. Metrics queries go through [`eval_metrics`](crate::eval_metrics).
//! Evaluation itself cannot fail: every error is found at compile time.
//!
//! # Semantics
//!
//! Tempo's engine (`pkg/traceql`, vParquet4 blocks) is the reference. Deliberate differences are
//! marked **differs**.
//!
//! Fields:
//! - `.x` is the span attribute `x`, else the resource attribute `x`.
//! - `span.x`, `resource.x` and `instrumentation.x` read only that scope.
//! - An attribute that is missing, or stored as [`Value::Nil`], is nil.
//! - `span:id`, `span:parentID`, `trace:id`, `link:traceID` and `link:spanID` are lowercase hex
//!   strings; `span:parentID` is nil when the span has no parent id.
//! - `span:childCount` is the number of spans of the trace whose parent is the span.
//! - `nestedSetLeft`, `nestedSetRight` and `nestedSetParent` number the trace depth first from
//!   its roots (`nested_sets`); **differs**: roots and children are visited by start time,
//!   then span ID, where Tempo follows storage order.
//!   A comparison of `nestedSetParent` with an integer literal that only tells roots from
//!   other spans (`nestedSetParent < 0`, `= -1`, `!= -1`, `>= 0`) is compiled as a test of the
//!   span's parent ID ([`crate::ast::root_test`]), so it needs no trace structure.
//! - `event:timeSinceStart` is the event's time minus its span's start, a duration; negative
//!   for an event before the span starts (Tempo stores the unsigned difference and reads it back
//!   signed). It binds per event in comparisons, like `event:name`.
//! - `rootName`, `rootServiceName` and `traceDuration` are the same for every span of a trace
//!   ([`Trace::root`], [`Trace::duration_nano`]); nil when the trace has no root.
//! - **differs**: when there is no span without a parent id, the earliest span whose parent is
//!   missing from the trace is the root (Tempo leaves `rootName` empty).
//!
//! Comparisons:
//! - A comparison with a nil operand is false, `!=` included.
//! - `f = nil` (or `nil = f`) is true when `f` is nil; `f != nil` when it is not; `f` may be
//!   any expression. `nil = nil` and `nil != nil` are false, as in Tempo.
//! - Integers, floats and durations compare numerically, durations as nanoseconds; integer and
//!   duration pairs compare exactly, the rest as `f64`.
//! - Strings compare byte-wise with `< <= > >=`.
//! - Booleans, statuses and kinds support only `=` and `!=`.
//! - Operands of different types (`"1"` and `1`) compare false, `!=` included.
//! - `=~` and `!~` match the whole string: the pattern is compiled as `^(?s:pattern)$`, like
//!   Tempo's Prometheus-style matcher, in the `regex` crate's RE2-like syntax; a non-string
//!   operand makes both false.
//! - Array against scalar: `!=` and `!~` hold when they hold for every element (none equals,
//!   none matches); the other operators when they hold for any element. Array against array
//!   is false (Tempo fails the query).
//! - A comparison that reads `event.x` or `event:name` holds when it holds for at least one
//!   event of the span, each event evaluated on its own; `link.x`, `link:traceID` and
//!   `link:spanID` likewise per link. A span without events (links) fails it.
//! - `event.x = nil` holds when no event has `x` (`!= nil`: some event has it); links alike.
//! - **differs**: outside a comparison (`by()`, `select()`, aggregates, metrics, a bare
//!   `{ event.x }`), an event or link field is read from the first event or link that has it.
//!
//! Logic and arithmetic:
//! - `&&` and `||` treat every value but `true` as false.
//! - `!x` is `true` for `false`, `false` for `true` and nil otherwise (**differs**: Tempo fails
//!   the query when `x` is not a boolean).
//! - Integer `+ - * / % ^` give integers (`/` truncates); on overflow, or a negative exponent,
//!   the float result. Integer `/ 0` and `% 0` are nil. **differs**: Tempo computes integer
//!   `a ^ b` as `b ^ a`, wraps on overflow, and panics on integer division by zero.
//! - Other numeric arithmetic is `f64` arithmetic with durations as nanoseconds, like Tempo.
//!
//! Spansets:
//! - `{ expr }` keeps the spans of its input spanset for which `expr` is `true`; `{ }` keeps all.
//! - `A && B` is the spans of both sides when both are non-empty, else empty; `A || B` is the
//!   spans of either side.
//! - `A > B`: the B spans whose parent is in A. `A >> B`: the B spans with an ancestor in A.
//! - `A < B`: the B spans that are the parent of some A span. `A << B`: the B spans that are an
//!   ancestor of some A span.
//! - `A ~ B`: the B spans that share a parent with some other span of A. Spans without a
//!   parent id are siblings of each other (Tempo's nested sets give every root one parent);
//!   a span whose parent is not in the trace has no siblings; a span is not its own sibling.
//! - `!>`, `!>>`, `!<`, `!<<`, `!~`: the B spans for which the relation does not hold (all of B
//!   when A is empty).
//! - `&>`, `&>>`, `&<`, `&<<`, `&~`: the union forms: the B spans for which the relation holds
//!   with some A span, together with the A spans it holds for with some B span (`A &> B` is the
//!   children in B and their parents in A). Empty when either side is.
//! - A pipeline used as an operand, `({ } | count() > 1) && { }`, runs on the spanset being
//!   evaluated; the spans of every spanset it yields are the operand's spans. Attributes its
//!   stages set (`count()`, `by()` keys) are not kept, as in Tempo; fields its `select()`
//!   stages name are reported for every span the enclosing stage returns (Tempo fetches them
//!   for the whole query). A structural operator needs one spanset on each side, so an operand
//!   with `by()` not followed by `coalesce()` is refused by validation (Tempo fails such a
//!   query at run time once a trace splits).
//! - Relations use parent links ([`Trace::parents`]) over the whole trace, whatever the input
//!   spanset holds. A span whose parent is not in the trace has no parent.
//! - **differs**: in a parent cycle (malformed input) every other span of the cycle is an
//!   ancestor; a span is never its own ancestor. Tempo's nested sets relate no span of a cycle.
//!
//! Pipelines:
//! - The first stage reads one spanset of every span of the trace; an empty trace gives none.
//! - Every stage maps each input spanset on its own; a spanset left with no spans is dropped.
//! - `count() op n` compares the number of spans.
//! - `avg/min/max/sum(f) op v` aggregate `f` over the spans where it is a number or duration,
//!   skipping the rest; with no such span the spanset is dropped. The average of integers or of
//!   durations is compared exactly (as a fraction).
//! - `by(f)` splits each spanset by the value of `f`; spans lacking `f` form a nil group, as in
//!   Tempo. Groups come in the order of their first span (**differs**: Tempo's are unordered).
//! - Aggregate results and `by()` keys are recorded in [`Spanset::attributes`] under their
//!   printed names (`count()`, `by(resource.service.name)`), as Tempo does.
//! - `coalesce()` merges every spanset into one, without the attributes of earlier stages
//!   (Tempo starts a new spanset); `select()` fields are kept.
//! - `select(a, b)` keeps spansets unchanged and reports `a` and `b` for each span in
//!   [`Spanset::selected_values`].
//!
//! # Cost
//!
//! Testing a span against a filter allocates nothing: values are borrowed from the trace and
//! the query, ids are hex-encoded on the stack, and each regex is compiled once per query.
//! Parent links and their cycles are worked out once per trace; each structural operator then
//! takes time linear in the trace's span count, per input spanset (so `by()` into many groups
//! followed by a structural operator costs groups × spans).

mod aggregate;
mod compile;
mod structure;
mod values;

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::ast::{Pipeline, Query};
use crate::trace::{Trace, Value, root_from_parents};
use crate::{Unsupported, ValidateError};

pub(crate) use aggregate::GroupKey;
pub(crate) use compile::{CMetrics, CSecond};
use compile::{CStage, Compiler, Expr, SExpr};
use structure::Structure;
use values::{Ctx, truthy};
pub(crate) use values::{Val, eval_value};

/// Why a query cannot be evaluated. Evaluation itself never fails; every error comes from
/// [`Evaluator::new`] or from the arguments of [`eval_metrics`](crate::eval_metrics).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The query is not valid TraceQL.
    #[error(transparent)]
    Invalid(#[from] ValidateError),
    /// The query uses a feature the evaluator does not run.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// A regular expression does not compile.
    #[error("invalid regular expression `{pattern}`: {message}")]
    Regex {
        /// The pattern as written in the query.
        pattern: String,
        /// What the regex compiler said.
        message: String,
    },
    /// [`eval`] was given a metrics query.
    #[error("`{query}` is a metrics query: run it with /api/metrics/query_range")]
    MetricsQuery {
        /// The query, printed.
        query: String,
    },
    /// [`eval_metrics`](crate::eval_metrics) was given a query without a metrics function.
    #[error("`{query}` is not a metrics query: it has no rate(), count_over_time() or other metrics function")]
    NotMetricsQuery {
        /// The query, printed.
        query: String,
    },
    /// A metrics query would hold more series or points than its limits allow.
    #[error("metrics query over its limit: {message}")]
    Limit {
        /// Which limit, its value, and how to stay within it.
        message: String,
    },
    /// The time range or step of a metrics query is unusable.
    #[error("invalid metrics range: {message}")]
    Range {
        /// What is wrong, with the offending values.
        message: String,
    },
}

/// A set of spans of one trace produced by the query, with what the pipeline attached to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanset {
    /// Indexes into `trace.spans`, ascending, without duplicates. Never empty.
    pub spans: Vec<usize>,
    /// Values attached by pipeline stages, in stage order, under their printed names: `by()`
    /// keys (`by(resource.service.name)`) and aggregate results (`count()`, `avg(duration)`).
    /// A later stage with the same name replaces the earlier value.
    pub attributes: Vec<(String, Value)>,
    /// The fields named by `select()` stages, printed (`span.http.method`), without duplicates.
    pub selected: Vec<String>,
    /// One row per entry of `spans`, in the same order; row `i` holds the value of each
    /// `selected` field for span `spans[i]` ([`Value::Nil`] when it lacks the field).
    pub selected_values: Vec<Vec<Value>>,
}

/// Runs the spanset pipeline of `query` on `trace`. Compiles the query on every call; use
/// [`Evaluator`] to evaluate one query over many traces.
pub fn eval(query: &Query, trace: &Trace) -> Result<Vec<Spanset>, EvalError> {
    Evaluator::new(query)?.eval(trace)
}

/// A compiled query, ready to run on any number of traces.
#[derive(Debug, Clone)]
pub struct Evaluator {
    /// The printed query, for error messages.
    text: String,
    /// The stages before the metrics function (all of them for a spanset query).
    stages: Vec<CStage>,
    /// Fields named by `select()` stages; `CStage::Select` refers to them by index.
    selects: Vec<(String, Expr)>,
    /// The trailing metrics function, if any.
    pub(crate) metrics: Option<CMetrics>,
    /// Whether the query is metrics arithmetic between queries (run by
    /// [`MetricsRun`](crate::MetricsRun), which compiles each operand).
    pub(crate) math: bool,
    /// Whether any stage uses a structural operator, so traces need their parent structure.
    pub(crate) structural: bool,
}

impl Evaluator {
    /// Validates and compiles `query`. Fails when it is invalid, unsupported, or has a regular
    /// expression that does not compile.
    pub fn new(query: &Query) -> Result<Evaluator, EvalError> {
        crate::validate(query)?;
        crate::supported(query)?;
        let text = query.to_string();
        if query.math.is_some() {
            // Every operand is compiled (and its regular expressions checked) now.
            for pipeline in query.pipelines() {
                Evaluator::compile(pipeline, String::new())?;
            }
            return Ok(Evaluator {
                text,
                stages: Vec::new(),
                selects: Vec::new(),
                metrics: None,
                math: true,
                structural: false,
            });
        }
        Evaluator::compile(&query.pipeline, text)
    }

    /// Compiles one validated, supported pipeline.
    pub(crate) fn compile(pipeline: &Pipeline, text: String) -> Result<Evaluator, EvalError> {
        let mut compiler = Compiler::default();
        let (stages, metrics) = compiler.pipeline(pipeline)?;
        Ok(Evaluator {
            text,
            stages,
            selects: compiler.selects,
            metrics,
            math: false,
            structural: compiler.structural,
        })
    }

    /// True when the query ends in a metrics function (or is arithmetic between metrics
    /// queries) and must be run by [`eval_metrics`](crate::eval_metrics).
    pub fn is_metrics(&self) -> bool {
        self.metrics.is_some() || self.math
    }

    /// The spansets the query produces for `trace`, in pipeline order (for `by()`, in the order
    /// of each group's first span). Fails only for a metrics query.
    pub fn eval(&self, trace: &Trace) -> Result<Vec<Spanset>, EvalError> {
        if self.is_metrics() {
            return Err(EvalError::MetricsQuery {
                query: self.text.clone(),
            });
        }
        let env = TraceEnv::new(trace, self.structural);
        let sets = self.run(&env);
        Ok(sets.into_iter().map(|set| self.finish(&env, set)).collect())
    }

    /// Whether the query is one spanset filter (or none) and a metrics function whose fields
    /// all depend on the span alone, so a span evaluates the same alone as in its trace.
    pub(crate) fn span_local(&self) -> bool {
        let Some(m) = &self.metrics else { return false };
        let filter_local = match self.stages.as_slice() {
            [] => true,
            [CStage::Spanset(SExpr::Filter(e), _)] => e.as_ref().is_none_or(Expr::span_local),
            _ => false,
        };
        filter_local
            && m.field.as_ref().is_none_or(Expr::span_local)
            && m.by.iter().all(|(_, e)| e.span_local())
            && m.compare
                .as_ref()
                .is_none_or(|c| c.selection.as_ref().is_none_or(Expr::span_local))
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Runs every stage before the metrics function.
    pub(crate) fn run(&self, env: &TraceEnv<'_>) -> Vec<Set> {
        if env.trace.spans.is_empty() {
            return Vec::new();
        }
        let all = Set {
            spans: (0..env.trace.spans.len()).collect(),
            attributes: Vec::new(),
            selected: Vec::new(),
        };
        run_stages(env, &self.stages, all)
    }

    fn finish(&self, env: &TraceEnv<'_>, set: Set) -> Spanset {
        let selected_values = set
            .spans
            .iter()
            .map(|&i| {
                set.selected
                    .iter()
                    .map(|&f| eval_value(&self.selects[f].1, env.ctx(i)).to_value())
                    .collect()
            })
            .collect();
        Spanset {
            selected: set.selected.iter().map(|&f| self.selects[f].0.clone()).collect(),
            spans: set.spans,
            attributes: set.attributes,
            selected_values,
        }
    }
}

/// Runs `stages` on one spanset, stopping early once no spanset is left.
fn run_stages(env: &TraceEnv<'_>, stages: &[CStage], input: Set) -> Vec<Set> {
    let mut sets = vec![input];
    for stage in stages {
        sets = run_stage(env, stage, sets);
        if sets.is_empty() {
            break;
        }
    }
    sets
}

fn run_stage(env: &TraceEnv<'_>, stage: &CStage, input: Vec<Set>) -> Vec<Set> {
    let mut out = Vec::with_capacity(input.len());
    match stage {
        CStage::Spanset(expr, hoisted) => {
            for mut set in input {
                let spans = spanset(env, expr, &set.spans);
                if !spans.is_empty() {
                    for &f in hoisted {
                        if !set.selected.contains(&f) {
                            set.selected.push(f);
                        }
                    }
                    out.push(Set { spans, ..set });
                }
            }
        }
        CStage::Scalar(filter) => {
            for mut set in input {
                let Some(agg) = filter.aggregate(env, &set.spans) else {
                    continue;
                };
                if agg.compare(filter.op, &filter.value) {
                    set.set_attribute(&filter.name, agg.to_value());
                    out.push(set);
                }
            }
        }
        CStage::By { name, expr } => {
            for set in input {
                let mut index: HashMap<GroupKey, usize> = HashMap::new();
                let mut groups: Vec<(Value, Vec<usize>)> = Vec::new();
                for &i in &set.spans {
                    let value = eval_value(expr, env.ctx(i)).to_value();
                    let n = *index.entry(GroupKey::of(&value)).or_insert_with(|| {
                        groups.push((value, Vec::new()));
                        groups.len() - 1
                    });
                    groups[n].1.push(i);
                }
                for (value, spans) in groups {
                    let mut group = Set {
                        spans,
                        attributes: set.attributes.clone(),
                        selected: set.selected.clone(),
                    };
                    group.set_attribute(name, value);
                    out.push(group);
                }
            }
        }
        CStage::Select(fields) => {
            for mut set in input {
                for &f in fields {
                    if !set.selected.contains(&f) {
                        set.selected.push(f);
                    }
                }
                out.push(set);
            }
        }
        CStage::Coalesce => {
            // Tempo's coalesce(): one spanset of every span, without the attributes of
            // earlier stages.
            let mut spans: Vec<usize> = Vec::new();
            let mut selected: Vec<usize> = Vec::new();
            for set in input {
                spans.extend_from_slice(&set.spans);
                for f in set.selected {
                    if !selected.contains(&f) {
                        selected.push(f);
                    }
                }
            }
            spans.sort_unstable();
            spans.dedup();
            if !spans.is_empty() {
                out.push(Set {
                    spans,
                    attributes: Vec::new(),
                    selected,
                });
            }
        }
    }
    out
}

/// A spanset while the pipeline runs.
#[derive(Debug, Clone)]
pub(crate) struct Set {
    pub(crate) spans: Vec<usize>,
    attributes: Vec<(String, Value)>,
    /// Indexes into `Evaluator::selects`.
    selected: Vec<usize>,
}

impl Set {
    fn set_attribute(&mut self, name: &str, value: Value) {
        match self.attributes.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((name.to_owned(), value)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Per-trace environment

/// What the evaluator precomputes once per trace.
pub(crate) struct TraceEnv<'a> {
    pub(crate) trace: &'a Trace,
    root: Option<usize>,
    duration: i64,
    /// Built only when the query has structural operators.
    structure: Option<Structure>,
}

impl<'a> TraceEnv<'a> {
    pub(crate) fn new(trace: &'a Trace, structural: bool) -> TraceEnv<'a> {
        let parents = trace.parents();
        let root = root_from_parents(trace, &parents);
        TraceEnv {
            trace,
            root,
            duration: sat_i64(trace.duration_nano()),
            structure: structural.then(|| Structure::new(trace, parents)),
        }
    }

    /// The environment of a one-span trace for a [`Evaluator::span_local`] query, which reads
    /// no trace-level field: the parent links, root and trace duration are not computed.
    pub(crate) fn span_local(trace: &'a Trace) -> TraceEnv<'a> {
        TraceEnv {
            trace,
            root: None,
            duration: 0,
            structure: None,
        }
    }

    /// The context for evaluating a field expression on span `i`, with no event or link bound.
    pub(crate) fn ctx(&'a self, i: usize) -> Ctx<'a> {
        Ctx {
            env: self,
            span: &self.trace.spans[i],
            index: i,
            event: None,
            link: None,
        }
    }
}

fn sat_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Spanset expressions

/// The spans of `universe` (ascending) that `expr` selects, ascending.
fn spanset(env: &TraceEnv<'_>, expr: &SExpr, universe: &[usize]) -> Vec<usize> {
    match expr {
        SExpr::Filter(None) => universe.to_vec(),
        SExpr::Filter(Some(e)) => universe
            .iter()
            .copied()
            .filter(|&i| truthy(eval_value(e, env.ctx(i))))
            .collect(),
        SExpr::And(lhs, rhs) => {
            let l = spanset(env, lhs, universe);
            if l.is_empty() {
                return l;
            }
            let r = spanset(env, rhs, universe);
            if r.is_empty() {
                return r;
            }
            union(&l, &r)
        }
        SExpr::Or(lhs, rhs) => union(&spanset(env, lhs, universe), &spanset(env, rhs, universe)),
        SExpr::Rel { rel, mode, lhs, rhs } => {
            let r = spanset(env, rhs, universe);
            if r.is_empty() {
                return r;
            }
            let l = spanset(env, lhs, universe);
            match &env.structure {
                Some(structure) => structure.apply(*rel, *mode, &l, &r),
                // Unreachable: the compiler flags every query with a structural operator.
                None => Vec::new(),
            }
        }
        SExpr::Pipeline(stages) => {
            let input = Set {
                spans: universe.to_vec(),
                attributes: Vec::new(),
                selected: Vec::new(),
            };
            let mut sets = run_stages(env, stages, input);
            match sets.len() {
                0 => Vec::new(),
                1 => sets.pop().map(|s| s.spans).unwrap_or_default(),
                _ => {
                    let mut spans: Vec<usize> = sets.into_iter().flat_map(|s| s.spans).collect();
                    spans.sort_unstable();
                    spans.dedup();
                    spans
                }
            }
        }
    }
}

/// Merges two ascending, duplicate-free lists.
fn union(a: &[usize], b: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

#[cfg(test)]
pub(crate) mod tests;
