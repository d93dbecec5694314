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

use std::cmp::Ordering;
use std::collections::HashMap;

use regex::Regex;

use crate::ast::{
    AggregateFn, AttributeScope, BinaryOp, FieldExpr, Intrinsic, Kind, MetricsFn, Pipeline, Query, RootTest,
    SecondStage, SecondStageFn, SpansetExpr, SpansetOp, Stage, Static, Status, UnaryOp,
};
use crate::trace::{Event, Link, Span, Trace, Value, find_attr, root_from_parents};
use crate::{Unsupported, ValidateError};

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
#[derive(Debug)]
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
// Compiled form

#[derive(Debug)]
enum CStage {
    /// A spanset expression, and the `select()` fields of pipelines inside it (indexes into
    /// `Evaluator::selects`), which every span it returns reports, as in Tempo.
    Spanset(SExpr, Vec<usize>),
    Coalesce,
    Scalar(CScalar),
    By {
        name: String,
        expr: Expr,
    },
    Select(Vec<usize>),
}

/// A compiled metrics function.
#[derive(Debug)]
pub(crate) struct CMetrics {
    pub(crate) func: MetricsFn,
    /// The field of `*_over_time(field)`.
    pub(crate) field: Option<Expr>,
    /// The quantiles of `quantile_over_time`.
    pub(crate) quantiles: Vec<f64>,
    /// The `by()` fields, printed and compiled.
    pub(crate) by: Vec<(String, Expr)>,
    /// What follows the metrics function, in order.
    pub(crate) second: Vec<CSecond>,
    /// For `compare()`, which replaces the metrics function (then `func` is
    /// `count_over_time` and the other fields are empty).
    pub(crate) compare: Option<CCompare>,
}

/// A compiled `compare({ selection }, top_n, start, end)`.
#[derive(Debug)]
pub(crate) struct CCompare {
    /// The selection's condition; `None` for `{ }`.
    pub(crate) selection: Option<Expr>,
    /// How many values of each attribute to return, per group.
    pub(crate) top_n: usize,
    /// Only spans starting in `(start, end]` are selected, when given.
    pub(crate) window: Option<(u64, u64)>,
}

/// Tempo's most values per attribute of `compare()`.
pub(crate) const MAX_COMPARE_TOP_N: i64 = 1000;

impl CCompare {
    /// Whether span `i` is in the selection (else it is in the baseline).
    pub(crate) fn selects(&self, env: &TraceEnv<'_>, i: usize) -> bool {
        let start = env.trace.spans[i].start_unix_nano;
        self.in_window(start) && self.condition(env, i)
    }

    /// Whether a span starting at `start` is inside the selection's time window, if it has one.
    pub(crate) fn in_window(&self, start: u64) -> bool {
        self.window.is_none_or(|(lo, hi)| start > lo && start <= hi)
    }

    /// Whether the selection's condition holds for span `i`, its time window aside.
    pub(crate) fn condition(&self, env: &TraceEnv<'_>, i: usize) -> bool {
        self.selection
            .as_ref()
            .is_none_or(|e| truthy(eval_value(e, env.ctx(i))))
    }
}

/// A compiled second stage.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CSecond {
    TopK(usize),
    BottomK(usize),
    /// Keep the points `value op v` holds for.
    Filter(BinaryOp, f64),
    /// `v op value`, or `value op v` when `scalar_first`.
    Arithmetic {
        op: BinaryOp,
        value: f64,
        scalar_first: bool,
    },
}

impl CSecond {
    /// Compiles a validated second stage.
    pub(crate) fn compile(stage: &SecondStage) -> Result<CSecond, EvalError> {
        let number = |arg: Option<&FieldExpr>| match arg {
            Some(FieldExpr::Static(Static::Int(i))) => Ok(*i as f64),
            Some(FieldExpr::Static(Static::Float(x))) => Ok(*x),
            // Durations compare in seconds, as metrics values of durations are.
            Some(FieldExpr::Static(Static::Duration(d))) => Ok(*d as f64 / 1e9),
            _ => unsupported(format!("the second stage `{}`", Stage::SecondStage(stage.clone()))),
        };
        let arg = stage.args.first();
        Ok(match stage.func {
            SecondStageFn::TopK | SecondStageFn::BottomK => {
                let n = match arg {
                    Some(FieldExpr::Static(Static::Int(n))) => usize::try_from(*n).unwrap_or(usize::MAX),
                    _ => return unsupported(format!("the argument of {}()", stage.func.name())),
                };
                if stage.func == SecondStageFn::TopK {
                    CSecond::TopK(n)
                } else {
                    CSecond::BottomK(n)
                }
            }
            SecondStageFn::Filter(op) => CSecond::Filter(op, number(arg)?),
            SecondStageFn::Arithmetic { op, scalar_first } => CSecond::Arithmetic {
                op,
                value: number(arg)?,
                scalar_first,
            },
        })
    }
}

#[derive(Debug)]
enum SExpr {
    Filter(Option<Expr>),
    And(Box<SExpr>, Box<SExpr>),
    Or(Box<SExpr>, Box<SExpr>),
    Rel {
        rel: Relation,
        mode: RelMode,
        lhs: Box<SExpr>,
        rhs: Box<SExpr>,
    },
    /// A pipeline used as an operand: its stages run on the input spanset, and the spans of
    /// every spanset it yields are the operand's spans.
    Pipeline(Vec<CStage>),
}

/// How a structural operator uses its relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RelMode {
    /// `>`: the right-hand spans related to some left-hand span.
    Plain,
    /// `!>`: the right-hand spans related to no left-hand span.
    Negated,
    /// `&>`: the right-hand spans related to some left-hand span, and the left-hand spans
    /// some right-hand span is related to.
    Union,
}

#[derive(Debug, Clone, Copy)]
enum Relation {
    Child,
    Descendant,
    Parent,
    Ancestor,
    Sibling,
}

impl Relation {
    /// The relation seen from the other side: `b` is a child of `a` exactly when `a` is the
    /// parent of `b`.
    fn inverse(self) -> Relation {
        match self {
            Relation::Child => Relation::Parent,
            Relation::Parent => Relation::Child,
            Relation::Descendant => Relation::Ancestor,
            Relation::Ancestor => Relation::Descendant,
            Relation::Sibling => Relation::Sibling,
        }
    }
}

#[derive(Debug)]
struct CScalar {
    func: AggregateFn,
    arg: Option<Expr>,
    op: BinaryOp,
    value: Value,
    /// The printed aggregate, e.g. `avg(duration)`.
    name: String,
}

/// A compiled field expression.
#[derive(Debug)]
pub(crate) enum Expr {
    Const(Value),
    Intrinsic(Intrinsic),
    Attr(AttributeScope, String),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Arith(BinaryOp, Box<Expr>, Box<Expr>),
    Cmp {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        bind: Bind,
    },
    Regex {
        negated: bool,
        lhs: Box<Expr>,
        re: Regex,
        bind: Bind,
    },
    /// `operand != nil` (or `= nil` when `negated`).
    Exists {
        negated: bool,
        operand: Box<Expr>,
    },
}

impl Expr {
    /// Whether the value depends only on the span (not on other spans of its trace).
    fn span_local(&self) -> bool {
        use Intrinsic as I;
        match self {
            Expr::Const(_) | Expr::Attr(..) => true,
            Expr::Intrinsic(i) => !matches!(
                i,
                I::RootName
                    | I::RootServiceName
                    | I::TraceDuration
                    | I::NestedSetLeft
                    | I::NestedSetRight
                    | I::NestedSetParent
                    | I::ChildCount
            ),
            Expr::Neg(e) | Expr::Not(e) => e.span_local(),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Arith(_, a, b) => a.span_local() && b.span_local(),
            Expr::Cmp { lhs, rhs, .. } => lhs.span_local() && rhs.span_local(),
            Expr::Regex { lhs, .. } => lhs.span_local(),
            Expr::Exists { operand, .. } => operand.span_local(),
        }
    }
}

/// Which per-event / per-link loops a comparison runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bind {
    events: bool,
    links: bool,
}

#[derive(Default)]
struct Compiler {
    selects: Vec<(String, Expr)>,
    structural: bool,
    /// How many spanset expressions enclose the pipeline being compiled.
    nested: usize,
    /// The `select()` fields met in pipelines inside the current spanset stage.
    hoisted: Vec<usize>,
}

fn unsupported<T>(feature: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError::Unsupported(Unsupported {
        feature: feature.into(),
    }))
}

impl Compiler {
    fn pipeline(&mut self, pipeline: &Pipeline) -> Result<(Vec<CStage>, Option<CMetrics>), EvalError> {
        let mut stages = Vec::new();
        let mut metrics = None;
        for stage in &pipeline.stages {
            if let Some(m) = &mut metrics {
                let Stage::SecondStage(second) = stage else {
                    return unsupported(format!("a stage after a metrics function (`{stage}`)"));
                };
                let m: &mut CMetrics = m;
                m.second.push(CSecond::compile(second)?);
                continue;
            }
            stages.push(match stage {
                Stage::Spanset(expr) => {
                    let outer = std::mem::take(&mut self.hoisted);
                    let expr = self.spanset(expr)?;
                    let hoisted = std::mem::replace(&mut self.hoisted, outer);
                    if self.nested > 0 {
                        self.hoisted.extend(hoisted.iter().copied());
                    }
                    CStage::Spanset(expr, hoisted)
                }
                Stage::ScalarExprFilter(_) => return unsupported("comparisons and arithmetic between aggregates"),
                Stage::ScalarFilter(filter) => CStage::Scalar(CScalar {
                    func: filter.aggregate.func,
                    arg: filter.aggregate.args.first().map(|a| self.field(a)).transpose()?,
                    op: filter.op,
                    value: Value::from(&filter.value),
                    name: format!(
                        "{}({})",
                        filter.aggregate.func.name(),
                        filter
                            .aggregate
                            .args
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
                Stage::By(args) => {
                    let [arg] = args.as_slice() else {
                        return unsupported("by() with more than one argument");
                    };
                    CStage::By {
                        name: format!("by({arg})"),
                        expr: self.field(arg)?,
                    }
                }
                Stage::Select(args) => {
                    let mut fields = Vec::with_capacity(args.len());
                    for arg in args {
                        let name = arg.to_string();
                        let n = match self.selects.iter().position(|(k, _)| *k == name) {
                            Some(n) => n,
                            None => {
                                let expr = self.field(arg)?;
                                self.selects.push((name, expr));
                                self.selects.len() - 1
                            }
                        };
                        fields.push(n);
                    }
                    if self.nested > 0 {
                        self.hoisted.extend(fields.iter().copied());
                    }
                    CStage::Select(fields)
                }
                Stage::Metrics(m) => {
                    let mut args = m.args.iter();
                    let field = match m.func {
                        MetricsFn::Rate | MetricsFn::CountOverTime => None,
                        _ => args.next().map(|a| self.field(a)).transpose()?,
                    };
                    let quantiles = args
                        .map(|q| match q {
                            FieldExpr::Static(Static::Int(i)) => Ok(*i as f64),
                            FieldExpr::Static(Static::Float(x)) => Ok(*x),
                            other => unsupported(format!("the quantile `{other}`")),
                        })
                        .collect::<Result<Vec<f64>, EvalError>>()?;
                    let by =
                        m.by.iter()
                            .flatten()
                            .map(|b| Ok((b.to_string(), self.field(b)?)))
                            .collect::<Result<Vec<_>, EvalError>>()?;
                    metrics = Some(CMetrics {
                        func: m.func,
                        field,
                        quantiles,
                        by,
                        second: Vec::new(),
                        compare: None,
                    });
                    continue;
                }
                Stage::Coalesce => CStage::Coalesce,
                Stage::Compare(c) => {
                    let int = |k: usize| match c.args.get(k) {
                        Some(FieldExpr::Static(Static::Int(v))) => Ok(*v),
                        other => unsupported(format!("the compare() argument `{other:?}`")),
                    };
                    let top_n = if c.args.is_empty() { 10 } else { int(0)? };
                    if !(1..=MAX_COMPARE_TOP_N).contains(&top_n) {
                        return Err(EvalError::Range {
                            message: format!(
                                "compare() top-N must be between 1 and {MAX_COMPARE_TOP_N}, found {top_n}"
                            ),
                        });
                    }
                    let window = match c.args.len() {
                        3 => match (int(1)?, int(2)?) {
                            (0, 0) => None,
                            (lo, hi) if lo > 0 && hi > lo => Some((lo as u64, hi as u64)),
                            (lo, hi) => {
                                return Err(EvalError::Range {
                                    message: format!(
                                        "compare() start and end must be unix nanoseconds with start < end (or both 0), found {lo} and {hi}"
                                    ),
                                });
                            }
                        },
                        _ => None,
                    };
                    let selection = c.filter.expr.as_ref().map(|e| self.field(e)).transpose()?;
                    metrics = Some(CMetrics {
                        func: MetricsFn::CountOverTime,
                        field: None,
                        quantiles: Vec::new(),
                        by: Vec::new(),
                        second: Vec::new(),
                        compare: Some(CCompare {
                            selection,
                            top_n: top_n as usize,
                            window,
                        }),
                    });
                    continue;
                }
                Stage::SecondStage(s) => {
                    return unsupported(format!("`{}` before a metrics function", Stage::SecondStage(s.clone())));
                }
            });
        }
        Ok((stages, metrics))
    }

    fn spanset(&mut self, expr: &SpansetExpr) -> Result<SExpr, EvalError> {
        Ok(match expr {
            SpansetExpr::Filter(filter) => SExpr::Filter(filter.expr.as_ref().map(|e| self.field(e)).transpose()?),
            SpansetExpr::Op { op, lhs, rhs } => {
                let lhs = Box::new(self.spanset(lhs)?);
                let rhs = Box::new(self.spanset(rhs)?);
                let (rel, mode) = match op {
                    SpansetOp::And => return Ok(SExpr::And(lhs, rhs)),
                    SpansetOp::Or => return Ok(SExpr::Or(lhs, rhs)),
                    SpansetOp::Child => (Relation::Child, RelMode::Plain),
                    SpansetOp::Descendant => (Relation::Descendant, RelMode::Plain),
                    SpansetOp::Parent => (Relation::Parent, RelMode::Plain),
                    SpansetOp::Ancestor => (Relation::Ancestor, RelMode::Plain),
                    SpansetOp::Sibling => (Relation::Sibling, RelMode::Plain),
                    SpansetOp::NotChild => (Relation::Child, RelMode::Negated),
                    SpansetOp::NotDescendant => (Relation::Descendant, RelMode::Negated),
                    SpansetOp::NotParent => (Relation::Parent, RelMode::Negated),
                    SpansetOp::NotAncestor => (Relation::Ancestor, RelMode::Negated),
                    SpansetOp::NotSibling => (Relation::Sibling, RelMode::Negated),
                    SpansetOp::UnionChild => (Relation::Child, RelMode::Union),
                    SpansetOp::UnionDescendant => (Relation::Descendant, RelMode::Union),
                    SpansetOp::UnionParent => (Relation::Parent, RelMode::Union),
                    SpansetOp::UnionAncestor => (Relation::Ancestor, RelMode::Union),
                    SpansetOp::UnionSibling => (Relation::Sibling, RelMode::Union),
                };
                self.structural = true;
                SExpr::Rel { rel, mode, lhs, rhs }
            }
            SpansetExpr::Pipeline(pipeline) => {
                self.nested += 1;
                let compiled = self.pipeline(pipeline);
                self.nested -= 1;
                let (stages, metrics) = compiled?;
                if metrics.is_some() {
                    // Rejected by validation.
                    return unsupported("a metrics function inside a spanset expression");
                }
                SExpr::Pipeline(stages)
            }
        })
    }

    fn field(&mut self, expr: &FieldExpr) -> Result<Expr, EvalError> {
        Ok(match expr {
            FieldExpr::Static(value) => Expr::Const(Value::from(value)),
            FieldExpr::Intrinsic(intrinsic) => match intrinsic {
                Intrinsic::NestedSetLeft
                | Intrinsic::NestedSetRight
                | Intrinsic::NestedSetParent
                | Intrinsic::ChildCount => {
                    self.structural = true;
                    Expr::Intrinsic(*intrinsic)
                }
                _ => Expr::Intrinsic(*intrinsic),
            },
            FieldExpr::Attribute(attr) => {
                if attr.parent {
                    return unsupported("parent-scoped attributes (parent.)");
                }
                Expr::Attr(attr.scope, attr.name.clone())
            }
            FieldExpr::Unary { op, expr } => {
                let operand = Box::new(self.field(expr)?);
                match op {
                    UnaryOp::Neg => Expr::Neg(operand),
                    UnaryOp::Not => Expr::Not(operand),
                }
            }
            FieldExpr::Binary { op, lhs, rhs } => {
                // `nestedSetParent < 0` and the like test whether the span has a parent ID,
                // which needs no trace structure (nor trace assembly in span-at-a-time metrics).
                if let Some(test) = crate::ast::root_test(*op, lhs, rhs) {
                    let parent = || Box::new(Expr::Intrinsic(Intrinsic::ParentId));
                    return Ok(match test {
                        RootTest::Root => Expr::Exists {
                            negated: true,
                            operand: parent(),
                        },
                        RootTest::NotRoot => Expr::Exists {
                            negated: false,
                            operand: parent(),
                        },
                        RootTest::Always(b) => Expr::Const(Value::Bool(b)),
                    });
                }
                let nil = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
                if nil(lhs) && nil(rhs) {
                    // `nil = nil` and `nil != nil` are false, as in Tempo.
                    return Ok(Expr::Const(Value::Bool(false)));
                }
                if op.is_comparison() && (nil(lhs) || nil(rhs)) && matches!(op, BinaryOp::Eq | BinaryOp::Neq) {
                    let operand = if nil(rhs) { lhs } else { rhs };
                    return Ok(Expr::Exists {
                        negated: *op == BinaryOp::Eq,
                        operand: Box::new(self.field(operand)?),
                    });
                }
                if op.is_regex() {
                    let FieldExpr::Static(Static::Str(pattern)) = rhs.as_ref() else {
                        return unsupported(format!("a regular expression that is not a string literal (`{expr}`)"));
                    };
                    let re = Regex::new(&format!("^(?s:{pattern})$")).map_err(|e| EvalError::Regex {
                        pattern: pattern.clone(),
                        message: e.to_string(),
                    })?;
                    return Ok(Expr::Regex {
                        negated: *op == BinaryOp::NotRegex,
                        bind: Bind::of(lhs),
                        lhs: Box::new(self.field(lhs)?),
                        re,
                    });
                }
                let l = Box::new(self.field(lhs)?);
                let r = Box::new(self.field(rhs)?);
                match op {
                    BinaryOp::And => Expr::And(l, r),
                    BinaryOp::Or => Expr::Or(l, r),
                    _ if op.is_comparison() => {
                        let bind = Bind::of(lhs).or(Bind::of(rhs));
                        Expr::Cmp {
                            op: *op,
                            lhs: l,
                            rhs: r,
                            bind,
                        }
                    }
                    _ => Expr::Arith(*op, l, r),
                }
            }
        })
    }
}

impl Bind {
    /// The event and link fields `expr` reads.
    fn of(expr: &FieldExpr) -> Bind {
        match expr {
            FieldExpr::Static(_) => Bind::default(),
            FieldExpr::Intrinsic(i) => Bind {
                events: matches!(i, Intrinsic::EventName | Intrinsic::EventTimeSinceStart),
                links: matches!(i, Intrinsic::LinkTraceId | Intrinsic::LinkSpanId),
            },
            FieldExpr::Attribute(a) => Bind {
                events: a.scope == AttributeScope::Event,
                links: a.scope == AttributeScope::Link,
            },
            FieldExpr::Unary { expr, .. } => Bind::of(expr),
            FieldExpr::Binary { lhs, rhs, .. } => Bind::of(lhs).or(Bind::of(rhs)),
        }
    }

    fn or(self, other: Bind) -> Bind {
        Bind {
            events: self.events || other.events,
            links: self.links || other.links,
        }
    }
}

impl From<&Static> for Value {
    fn from(value: &Static) -> Value {
        match value {
            Static::Str(s) => Value::Str(s.clone()),
            Static::Int(i) => Value::Int(*i),
            Static::Float(x) => Value::Float(*x),
            Static::Duration(d) => Value::Duration(*d),
            Static::Bool(b) => Value::Bool(*b),
            Static::Nil => Value::Nil,
            Static::Status(s) => Value::Status(*s),
            Static::Kind(k) => Value::Kind(*k),
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

/// Parent links of a trace, arranged for linear-time structural operators.
///
/// Each span has at most one parent, so following parents from any span ends at a span without
/// a parent or runs into a cycle. `order` lists spans so that a parent comes before its children
/// (spans without a parent and spans on cycles first); walking it forwards or backwards computes
/// "some ancestor is in A" or "some descendant is in A" for all spans at once, and cycles are
/// handled by counting A members per cycle instead of walking them.
struct Structure {
    parent: Vec<Option<usize>>,
    /// How many spans have each span as parent (`span:childCount`).
    children: Vec<u32>,
    /// For spans on a parent cycle, the cycle's number.
    cycle: Vec<Option<usize>>,
    /// The cycle a span reaches by following parents (its own for spans on a cycle).
    reach: Vec<Option<usize>>,
    cycles: usize,
    order: Vec<usize>,
    /// What siblings share: the parent's index, or `n` (the span count) for spans without a
    /// parent id, which Tempo's nested sets give one common parent. `None` for spans whose
    /// parent is not in the trace: they have no siblings.
    sibling_key: Vec<Option<usize>>,
    /// `nestedSetLeft`, `nestedSetRight` and `nestedSetParent` of each span: see
    /// [`nested_sets`].
    nested_set: Vec<[i64; 3]>,
}

/// Tempo's nested-set numbering of a trace: a depth-first walk from each root span (no parent
/// span ID) with one counter starting at 1, giving a span `nestedSetLeft` on the way down and
/// `nestedSetRight` on the way back up; `nestedSetParent` is the parent's `nestedSetLeft`, -1
/// for a root. Roots, and each span's children, are visited by start time, then span ID, so the
/// numbers do not depend on how the trace was stored. Spans not reached from a root (their
/// parent is missing, or on a parent cycle) get 0 for all three, as in Tempo.
fn nested_sets(
    trace: &Trace,
    parent: &[Option<usize>],
    cycle: &[Option<usize>],
    count: &[usize],
    children: &[usize],
) -> Vec<[i64; 3]> {
    let n = parent.len();
    let mut out = vec![[0i64; 3]; n];
    let by_start = |a: &usize, b: &usize| {
        let (x, y) = (&trace.spans[*a], &trace.spans[*b]);
        (x.start_unix_nano, x.span_id).cmp(&(y.start_unix_nano, y.span_id))
    };
    let mut roots: Vec<usize> = (0..n)
        .filter(|&i| trace.spans[i].parent_span_id.is_none() && cycle[i].is_none())
        .collect();
    roots.sort_by(by_start);
    let mut bound = 1i64;
    // (span, next child position); children sorted once when the span is entered.
    let mut stack: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in roots {
        out[root] = [bound, 0, -1];
        bound += 1;
        let mut kids = children[count[root]..count[root + 1]].to_vec();
        kids.sort_by(by_start);
        stack.push((root, kids, 0));
        while let Some((span, kids, next)) = stack.last_mut() {
            if let Some(&child) = kids.get(*next) {
                *next += 1;
                out[child] = [bound, 0, out[*span][0]];
                bound += 1;
                let mut grand = children[count[child]..count[child + 1]].to_vec();
                grand.sort_by(by_start);
                stack.push((child, grand, 0));
            } else {
                out[*span][1] = bound;
                bound += 1;
                stack.pop();
            }
        }
    }
    out
}

impl Structure {
    fn new(trace: &Trace, parent: Vec<Option<usize>>) -> Structure {
        let n = parent.len();
        let sibling_key = (0..n)
            .map(|i| match parent[i] {
                Some(p) => Some(p),
                None if trace.spans[i].parent_span_id.is_none() => Some(n),
                None => None,
            })
            .collect();
        // Find cycles: walk up from each unvisited span, marking the path; meeting a span of the
        // current path closes a cycle.
        const NEW: u8 = 0;
        const ON_PATH: u8 = 1;
        const DONE: u8 = 2;
        let mut state = vec![NEW; n];
        let mut cycle = vec![None; n];
        let mut cycles = 0;
        let mut path = Vec::new();
        for start in 0..n {
            let mut at = Some(start);
            while let Some(i) = at {
                match state[i] {
                    NEW => {
                        state[i] = ON_PATH;
                        path.push(i);
                        at = parent[i];
                    }
                    ON_PATH => {
                        let from = path.iter().rposition(|&p| p == i).unwrap_or(0);
                        for &c in &path[from..] {
                            cycle[c] = Some(cycles);
                        }
                        cycles += 1;
                        break;
                    }
                    _ => break,
                }
            }
            for &p in &path {
                state[p] = DONE;
            }
            path.clear();
        }
        // Children of spans not on a cycle, as a compressed adjacency list.
        let mut count = vec![0usize; n + 1];
        for i in 0..n {
            if let (Some(p), None) = (parent[i], cycle[i]) {
                count[p + 1] += 1;
            }
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut children = vec![0usize; count[n]];
        for i in 0..n {
            if let (Some(p), None) = (parent[i], cycle[i]) {
                children[fill[p]] = i;
                fill[p] += 1;
            }
        }
        // Breadth-first from spans without a parent and spans on cycles.
        let mut order: Vec<usize> = (0..n).filter(|&i| parent[i].is_none() || cycle[i].is_some()).collect();
        let mut next = 0;
        while next < order.len() {
            let p = order[next];
            next += 1;
            order.extend_from_slice(&children[count[p]..count[p + 1]]);
        }
        let mut reach = vec![None; n];
        for &i in &order {
            reach[i] = match (cycle[i], parent[i]) {
                (Some(c), _) => Some(c),
                (None, Some(p)) => reach[p],
                (None, None) => None,
            };
        }
        let mut child_count = vec![0u32; n];
        for p in parent.iter().flatten() {
            child_count[*p] = child_count[*p].saturating_add(1);
        }
        let nested_set = nested_sets(trace, &parent, &cycle, &count, &children);
        Structure {
            parent,
            children: child_count,
            cycle,
            reach,
            cycles,
            order,
            sibling_key,
            nested_set,
        }
    }

    /// The spans of `rhs` that stand in `rel` to some span of `lhs`, with `mode` applied:
    /// negated, or joined with the spans of `lhs` that some span of `rhs` stands in `rel` to.
    fn apply(&self, rel: Relation, mode: RelMode, lhs: &[usize], rhs: &[usize]) -> Vec<usize> {
        match mode {
            RelMode::Plain => self.relate(rel, false, lhs, rhs),
            RelMode::Negated => self.relate(rel, true, lhs, rhs),
            RelMode::Union => union(
                &self.relate(rel.inverse(), false, rhs, lhs),
                &self.relate(rel, false, lhs, rhs),
            ),
        }
    }

    /// The spans of `rhs` that stand in `rel` to some span of `lhs` (or to none, if `negated`).
    fn relate(&self, rel: Relation, negated: bool, lhs: &[usize], rhs: &[usize]) -> Vec<usize> {
        let n = self.parent.len();
        let mut in_lhs = vec![false; n];
        for &a in lhs {
            in_lhs[a] = true;
        }
        let keep: Box<dyn Fn(usize) -> bool> = match rel {
            Relation::Sibling => {
                // How many lhs spans share each parent; a span is not its own sibling.
                let mut sharing = vec![0usize; n + 1];
                for &a in lhs {
                    if let Some(k) = self.sibling_key[a] {
                        sharing[k] += 1;
                    }
                }
                let in_lhs = &in_lhs;
                Box::new(move |b: usize| self.sibling_key[b].is_some_and(|k| sharing[k] > usize::from(in_lhs[b])))
            }
            Relation::Child => Box::new(|b: usize| self.parent[b].is_some_and(|p| in_lhs[p])),
            Relation::Parent => {
                let mut is_parent = vec![false; n];
                for &a in lhs {
                    if let Some(p) = self.parent[a] {
                        is_parent[p] = true;
                    }
                }
                Box::new(move |b: usize| is_parent[b])
            }
            Relation::Descendant => {
                // below[i]: some span reached from i by one or more parent steps is in lhs.
                let mut on_cycle = vec![0usize; self.cycles];
                for &a in lhs {
                    if let Some(c) = self.cycle[a] {
                        on_cycle[c] += 1;
                    }
                }
                let mut below = vec![false; n];
                for &i in &self.order {
                    below[i] = match (self.cycle[i], self.parent[i]) {
                        (Some(c), _) => on_cycle[c] > 0,
                        (None, Some(p)) => in_lhs[p] || below[p],
                        (None, None) => false,
                    };
                }
                let in_lhs = &in_lhs;
                Box::new(move |b: usize| match self.cycle[b] {
                    Some(c) => on_cycle[c] > usize::from(in_lhs[b]),
                    None => below[b],
                })
            }
            Relation::Ancestor => {
                // above[i]: i is reached from some lhs span by one or more parent steps.
                let mut reaching = vec![0usize; self.cycles];
                for &a in lhs {
                    if let Some(c) = self.reach[a] {
                        reaching[c] += 1;
                    }
                }
                let mut above = vec![false; n];
                for &i in self.order.iter().rev() {
                    if self.cycle[i].is_none()
                        && (in_lhs[i] || above[i])
                        && let Some(p) = self.parent[i]
                    {
                        above[p] = true;
                    }
                }
                let in_lhs = &in_lhs;
                Box::new(move |b: usize| match self.cycle[b] {
                    Some(c) => reaching[c] > usize::from(in_lhs[b]),
                    None => above[b],
                })
            }
        };
        rhs.iter().copied().filter(|&b| keep(b) != negated).collect()
    }
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

// ---------------------------------------------------------------------------------------------
// Field expressions

/// Where a field expression is evaluated: a span, and the event and link bound by an enclosing
/// comparison, if any.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    env: &'a TraceEnv<'a>,
    span: &'a Span,
    /// The span's index in the trace.
    index: usize,
    event: Option<&'a Event>,
    link: Option<&'a Link>,
}

/// A value borrowed from the trace or the query, so evaluating a comparison allocates nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Nil,
    Str(&'a str),
    /// A span, trace or link id, kept as lowercase hex in place.
    Id(HexId),
    Int(i64),
    Float(f64),
    Duration(i64),
    Bool(bool),
    Status(Status),
    Kind(Kind),
    Array(&'a [Value]),
}

/// Up to 16 id bytes as lowercase hex, stored inline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HexId {
    buf: [u8; 32],
    len: u8,
}

impl HexId {
    fn new(bytes: &[u8]) -> HexId {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 32];
        let bytes = &bytes[..bytes.len().min(16)];
        for (n, b) in bytes.iter().enumerate() {
            buf[2 * n] = DIGITS[usize::from(b >> 4)];
            buf[2 * n + 1] = DIGITS[usize::from(b & 0xf)];
        }
        HexId {
            buf,
            len: (2 * bytes.len()) as u8,
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl<'a> Val<'a> {
    fn of(value: &'a Value) -> Val<'a> {
        match value {
            Value::Str(s) => Val::Str(s),
            Value::Int(i) => Val::Int(*i),
            Value::Float(x) => Val::Float(*x),
            Value::Bool(b) => Val::Bool(*b),
            Value::Duration(d) => Val::Duration(*d),
            Value::Status(s) => Val::Status(*s),
            Value::Kind(k) => Val::Kind(*k),
            Value::Nil => Val::Nil,
            Value::Array(a) => Val::Array(a),
        }
    }

    fn opt(value: Option<&'a Value>) -> Val<'a> {
        value.map_or(Val::Nil, Val::of)
    }

    pub(crate) fn to_value(self) -> Value {
        match self {
            Val::Nil => Value::Nil,
            Val::Str(s) => Value::Str(s.to_owned()),
            Val::Id(id) => Value::Str(id.as_str().to_owned()),
            Val::Int(i) => Value::Int(i),
            Val::Float(x) => Value::Float(x),
            Val::Duration(d) => Value::Duration(d),
            Val::Bool(b) => Value::Bool(b),
            Val::Status(s) => Value::Status(s),
            Val::Kind(k) => Value::Kind(k),
            Val::Array(a) => Value::Array(a.to_vec()),
        }
    }

    fn is_nil(&self) -> bool {
        matches!(self, Val::Nil)
    }
}

fn truthy(v: Val<'_>) -> bool {
    matches!(v, Val::Bool(true))
}

/// Evaluates a field expression on one span.
pub(crate) fn eval_value<'a>(expr: &'a Expr, ctx: Ctx<'a>) -> Val<'a> {
    match expr {
        Expr::Const(v) => Val::of(v),
        Expr::Intrinsic(i) => intrinsic(*i, ctx),
        Expr::Attr(scope, name) => attribute(*scope, name, ctx),
        Expr::Neg(e) => neg(eval_value(e, ctx)),
        Expr::Not(e) => match eval_value(e, ctx) {
            Val::Bool(b) => Val::Bool(!b),
            _ => Val::Nil,
        },
        Expr::And(l, r) => Val::Bool(truthy(eval_value(l, ctx)) && truthy(eval_value(r, ctx))),
        Expr::Or(l, r) => Val::Bool(truthy(eval_value(l, ctx)) || truthy(eval_value(r, ctx))),
        Expr::Arith(op, l, r) => arith(*op, eval_value(l, ctx), eval_value(r, ctx)),
        Expr::Cmp { op, lhs, rhs, bind } => Val::Bool(bound(ctx, *bind, &|c| {
            compare(*op, eval_value(lhs, c), eval_value(rhs, c))
        })),
        Expr::Regex { negated, lhs, re, bind } => {
            Val::Bool(bound(ctx, *bind, &|c| regex_match(re, *negated, eval_value(lhs, c))))
        }
        Expr::Exists { negated, operand } => Val::Bool(eval_value(operand, ctx).is_nil() == *negated),
    }
}

/// Runs `test` once per event and/or link of the span, binding each in turn, and reports
/// whether any run passed. Already-bound scopes (from an enclosing comparison) stay as they are.
fn bound<'a>(ctx: Ctx<'a>, bind: Bind, test: &dyn Fn(Ctx<'a>) -> bool) -> bool {
    let events = bind.events && ctx.event.is_none();
    let links = bind.links && ctx.link.is_none();
    let per_link = |c: Ctx<'a>| {
        if links {
            c.span.links.iter().any(|l| test(Ctx { link: Some(l), ..c }))
        } else {
            test(c)
        }
    };
    if events {
        ctx.span.events.iter().any(|e| per_link(Ctx { event: Some(e), ..ctx }))
    } else {
        per_link(ctx)
    }
}

fn attribute<'a>(scope: AttributeScope, name: &str, ctx: Ctx<'a>) -> Val<'a> {
    let span = ctx.span;
    Val::opt(match scope {
        AttributeScope::Unscoped => find_attr(&span.span_attrs, name).or_else(|| find_attr(&span.resource_attrs, name)),
        AttributeScope::Span => find_attr(&span.span_attrs, name),
        AttributeScope::Resource => find_attr(&span.resource_attrs, name),
        AttributeScope::Instrumentation => find_attr(&span.scope_attrs, name),
        AttributeScope::Event => match ctx.event {
            Some(e) => find_attr(&e.attrs, name),
            None => span.events.iter().find_map(|e| find_attr(&e.attrs, name)),
        },
        AttributeScope::Link => match ctx.link {
            Some(l) => find_attr(&l.attrs, name),
            None => span.links.iter().find_map(|l| find_attr(&l.attrs, name)),
        },
    })
}

fn intrinsic<'a>(intrinsic: Intrinsic, ctx: Ctx<'a>) -> Val<'a> {
    let span = ctx.span;
    let env = ctx.env;
    match intrinsic {
        // Refused by the support check.
        Intrinsic::Parent => Val::Nil,
        Intrinsic::Name => Val::Str(&span.name),
        Intrinsic::Status => Val::Status(span.status),
        Intrinsic::StatusMessage => Val::Str(&span.status_message),
        Intrinsic::Kind => Val::Kind(span.kind),
        Intrinsic::Duration => Val::Duration(sat_i64(span.duration_nano)),
        Intrinsic::RootName => env.root.map_or(Val::Nil, |r| Val::Str(&env.trace.spans[r].name)),
        Intrinsic::RootServiceName => env.root.map_or(Val::Nil, |r| {
            Val::opt(find_attr(&env.trace.spans[r].resource_attrs, "service.name"))
        }),
        Intrinsic::TraceDuration => Val::Duration(env.duration),
        Intrinsic::SpanId => Val::Id(HexId::new(&span.span_id)),
        Intrinsic::ParentId => span.parent_span_id.map_or(Val::Nil, |p| Val::Id(HexId::new(&p))),
        Intrinsic::TraceId => Val::Id(HexId::new(&span.trace_id)),
        Intrinsic::EventName => ctx
            .event
            .or(span.events.first())
            .map_or(Val::Nil, |e| Val::Str(&e.name)),
        Intrinsic::LinkTraceId => ctx
            .link
            .or(span.links.first())
            .map_or(Val::Nil, |l| Val::Id(HexId::new(&l.trace_id))),
        Intrinsic::LinkSpanId => ctx
            .link
            .or(span.links.first())
            .map_or(Val::Nil, |l| Val::Id(HexId::new(&l.span_id))),
        Intrinsic::InstrumentationName => Val::Str(&span.scope_name),
        Intrinsic::InstrumentationVersion => Val::Str(&span.scope_version),
        Intrinsic::ChildCount => env
            .structure
            .as_ref()
            .map_or(Val::Nil, |s| Val::Int(i64::from(s.children[ctx.index]))),
        Intrinsic::EventTimeSinceStart => ctx.event.or(span.events.first()).map_or(Val::Nil, |e| {
            Val::Duration(time_since(e.time_unix_nano, span.start_unix_nano))
        }),
        // Rejected when compiling.
        Intrinsic::NestedSetLeft | Intrinsic::NestedSetRight | Intrinsic::NestedSetParent => {
            env.structure.as_ref().map_or(Val::Nil, |s| {
                let [left, right, parent] = s.nested_set[ctx.index];
                Val::Int(match intrinsic {
                    Intrinsic::NestedSetLeft => left,
                    Intrinsic::NestedSetRight => right,
                    _ => parent,
                })
            })
        }
    }
}

/// `time - start` in nanoseconds, negative for an event before its span's start (as Tempo reads
/// its unsigned difference back as a signed duration), saturating at the `i64` bounds.
fn time_since(time: u64, start: u64) -> i64 {
    let d = i128::from(time) - i128::from(start);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

fn neg(v: Val<'_>) -> Val<'_> {
    match v {
        Val::Int(i) => i.checked_neg().map_or(Val::Float(-(i as f64)), Val::Int),
        Val::Float(x) => Val::Float(-x),
        Val::Duration(d) => d.checked_neg().map_or(Val::Float(-(d as f64)), Val::Duration),
        _ => Val::Nil,
    }
}

/// The value of a number or duration as `f64` (durations in nanoseconds).
fn as_f64(v: Val<'_>) -> Option<f64> {
    match v {
        Val::Int(i) | Val::Duration(i) => Some(i as f64),
        Val::Float(x) => Some(x),
        _ => None,
    }
}

fn arith<'a>(op: BinaryOp, l: Val<'a>, r: Val<'a>) -> Val<'a> {
    if let (Val::Int(a), Val::Int(b)) = (l, r) {
        return int_arith(op, a, b);
    }
    let (Some(a), Some(b)) = (as_f64(l), as_f64(r)) else {
        return Val::Nil;
    };
    Val::Float(float_arith(op, a, b))
}

fn float_arith(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Mod => a % b,
        BinaryOp::Pow => a.powf(b),
        _ => f64::NAN,
    }
}

fn int_arith<'a>(op: BinaryOp, a: i64, b: i64) -> Val<'a> {
    let exact = match op {
        BinaryOp::Add => a.checked_add(b),
        BinaryOp::Sub => a.checked_sub(b),
        BinaryOp::Mul => a.checked_mul(b),
        BinaryOp::Div | BinaryOp::Mod if b == 0 => return Val::Nil,
        BinaryOp::Div => a.checked_div(b),
        BinaryOp::Mod => Some(a.checked_rem(b).unwrap_or(0)),
        BinaryOp::Pow => u32::try_from(b).ok().and_then(|e| a.checked_pow(e)),
        _ => return Val::Nil,
    };
    exact.map_or_else(|| Val::Float(float_arith(op, a as f64, b as f64)), Val::Int)
}

/// Applies a comparison operator to an ordering; `None` (unordered, NaN) satisfies only `!=`.
fn apply(op: BinaryOp, ord: Option<Ordering>) -> bool {
    match op {
        BinaryOp::Eq => ord == Some(Ordering::Equal),
        BinaryOp::Neq => ord != Some(Ordering::Equal),
        BinaryOp::Lt => ord == Some(Ordering::Less),
        BinaryOp::Lte => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        BinaryOp::Gt => ord == Some(Ordering::Greater),
        BinaryOp::Gte => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
        _ => false,
    }
}

/// `l op r` for a comparison operator, with array elements handled as documented.
pub(crate) fn compare(op: BinaryOp, l: Val<'_>, r: Val<'_>) -> bool {
    match (l, r) {
        (Val::Nil, _) | (_, Val::Nil) | (Val::Array(_), Val::Array(_)) => false,
        (Val::Array(elems), scalar) => elements(op, elems, |e| compare_scalar(op, e, scalar)),
        (scalar, Val::Array(elems)) => elements(op, elems, |e| compare_scalar(op, scalar, e)),
        _ => compare_scalar(op, l, r),
    }
}

/// `!=` must hold for every element; any other operator for some element.
fn elements(op: BinaryOp, elems: &[Value], test: impl Fn(Val<'_>) -> bool) -> bool {
    if op == BinaryOp::Neq {
        elems.iter().all(|e| test(Val::of(e)))
    } else {
        elems.iter().any(|e| test(Val::of(e)))
    }
}

fn compare_scalar(op: BinaryOp, l: Val<'_>, r: Val<'_>) -> bool {
    match (l, r) {
        (Val::Nil, _) | (_, Val::Nil) => false,
        (Val::Int(a) | Val::Duration(a), Val::Int(b) | Val::Duration(b)) => apply(op, Some(a.cmp(&b))),
        (Val::Int(_) | Val::Duration(_) | Val::Float(_), Val::Int(_) | Val::Duration(_) | Val::Float(_)) => {
            let (Some(a), Some(b)) = (as_f64(l), as_f64(r)) else {
                return false;
            };
            apply(op, a.partial_cmp(&b))
        }
        (Val::Bool(a), Val::Bool(b)) => equality(op, a == b),
        (Val::Status(a), Val::Status(b)) => equality(op, a == b),
        (Val::Kind(a), Val::Kind(b)) => equality(op, a == b),
        _ => match (str_of(&l), str_of(&r)) {
            (Some(a), Some(b)) => apply(op, Some(a.cmp(b))),
            _ => false,
        },
    }
}

fn str_of<'v>(v: &'v Val<'_>) -> Option<&'v str> {
    match v {
        Val::Str(s) => Some(s),
        Val::Id(id) => Some(id.as_str()),
        _ => None,
    }
}

/// `=` or `!=` for values that have no order.
fn equality(op: BinaryOp, equal: bool) -> bool {
    match op {
        BinaryOp::Eq => equal,
        BinaryOp::Neq => !equal,
        _ => false,
    }
}

fn regex_match(re: &Regex, negated: bool, v: Val<'_>) -> bool {
    let one = |v: &Val<'_>| str_of(v).map(|s| re.is_match(s) != negated);
    match v {
        Val::Array(elems) if negated => elems.iter().all(|e| one(&Val::of(e)) == Some(true)),
        Val::Array(elems) => elems.iter().any(|e| one(&Val::of(e)) == Some(true)),
        _ => one(&v) == Some(true),
    }
}

// ---------------------------------------------------------------------------------------------
// Aggregates

/// An aggregate over a spanset, kept exact where the inputs allow.
#[derive(Debug, Clone, Copy)]
enum Agg {
    Int(i128),
    Duration(i128),
    Float(f64),
    /// An average of integers (or durations, when `duration`) as `sum / count`.
    Ratio {
        sum: i128,
        count: u64,
        duration: bool,
    },
}

/// How a set of aggregated numbers is typed: all integers, all durations, or mixed (floats).
#[derive(Debug, Clone, Copy, PartialEq)]
enum NumKind {
    Int,
    Duration,
    Float,
}

impl CScalar {
    fn aggregate(&self, env: &TraceEnv<'_>, spans: &[usize]) -> Option<Agg> {
        if self.func == AggregateFn::Count {
            return Some(Agg::Int(spans.len() as i128));
        }
        let arg = self.arg.as_ref()?;
        let mut kind = None;
        let mut values: Vec<Val<'_>> = Vec::with_capacity(spans.len());
        for &i in spans {
            let v = eval_value(arg, env.ctx(i));
            let k = match v {
                Val::Int(_) => NumKind::Int,
                Val::Duration(_) => NumKind::Duration,
                Val::Float(_) => NumKind::Float,
                _ => continue,
            };
            kind = Some(match kind {
                None => k,
                Some(prev) if prev == k => k,
                Some(_) => NumKind::Float,
            });
            values.push(v);
        }
        let kind = kind?;
        let exact = |v: &Val<'_>| match v {
            Val::Int(i) | Val::Duration(i) => i128::from(*i),
            _ => 0,
        };
        let typed = |x: i128| match kind {
            NumKind::Duration => Agg::Duration(x),
            _ => Agg::Int(x),
        };
        let floats = || values.iter().filter_map(|v| as_f64(*v));
        Some(match (self.func, kind) {
            (AggregateFn::Sum, NumKind::Float) => Agg::Float(floats().sum()),
            (AggregateFn::Sum, _) => typed(values.iter().map(exact).sum()),
            (AggregateFn::Min, NumKind::Float) => Agg::Float(floats().fold(f64::INFINITY, f64::min)),
            (AggregateFn::Min, _) => typed(values.iter().map(exact).min()?),
            (AggregateFn::Max, NumKind::Float) => Agg::Float(floats().fold(f64::NEG_INFINITY, f64::max)),
            (AggregateFn::Max, _) => typed(values.iter().map(exact).max()?),
            (AggregateFn::Avg, NumKind::Float) => Agg::Float(floats().sum::<f64>() / values.len() as f64),
            (AggregateFn::Avg, _) => Agg::Ratio {
                sum: values.iter().map(exact).sum(),
                count: values.len() as u64,
                duration: kind == NumKind::Duration,
            },
            (AggregateFn::Count, _) => Agg::Int(values.len() as i128),
        })
    }
}

impl Agg {
    /// `self op value` for a numeric literal; exact for integer and duration literals.
    fn compare(self, op: BinaryOp, value: &Value) -> bool {
        let exact = match value {
            Value::Int(v) | Value::Duration(v) => Some(i128::from(*v)),
            _ => None,
        };
        let float = match value {
            Value::Int(v) | Value::Duration(v) => *v as f64,
            Value::Float(x) => *x,
            _ => return false,
        };
        let ord = match (self, exact) {
            (Agg::Int(x) | Agg::Duration(x), Some(v)) => Some(x.cmp(&v)),
            (Agg::Ratio { sum, count, .. }, Some(v)) => Some(sum.cmp(&(v * i128::from(count)))),
            _ => self.as_f64().partial_cmp(&float),
        };
        apply(op, ord)
    }

    fn as_f64(self) -> f64 {
        match self {
            Agg::Int(x) | Agg::Duration(x) => x as f64,
            Agg::Float(x) => x,
            Agg::Ratio { sum, count, .. } => sum as f64 / count as f64,
        }
    }

    fn to_value(self) -> Value {
        match self {
            Agg::Int(x) => i64::try_from(x).map_or(Value::Float(x as f64), Value::Int),
            Agg::Duration(x) => Value::Duration(i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })),
            Agg::Float(x) => Value::Float(x),
            Agg::Ratio { duration: true, .. } => Value::Duration(self.as_f64().round() as i64),
            Agg::Ratio { .. } => Value::Float(self.as_f64()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Grouping

/// A hashable stand-in for a [`Value`]: floats by bit pattern (with `-0.0` as `0.0` and one NaN).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum GroupKey {
    Str(String),
    Int(i64),
    Float(u64),
    Bool(bool),
    Duration(i64),
    Status(Status),
    Kind(Kind),
    Nil,
    Array(Vec<GroupKey>),
}

impl GroupKey {
    pub(crate) fn of(value: &Value) -> GroupKey {
        match value {
            Value::Str(s) => GroupKey::Str(s.clone()),
            Value::Int(i) => GroupKey::Int(*i),
            Value::Float(x) => GroupKey::Float(if x.is_nan() {
                f64::NAN.to_bits()
            } else {
                (x + 0.0).to_bits()
            }),
            Value::Bool(b) => GroupKey::Bool(*b),
            Value::Duration(d) => GroupKey::Duration(*d),
            Value::Status(s) => GroupKey::Status(*s),
            Value::Kind(k) => GroupKey::Kind(*k),
            Value::Nil => GroupKey::Nil,
            Value::Array(a) => GroupKey::Array(a.iter().map(GroupKey::of).collect()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
