//! The compiler: a validated pipeline turned into the stages, spanset expressions and field
//! expressions the evaluator runs, each regular expression compiled once.

use regex::Regex;

use crate::Unsupported;
use crate::ast::{
    AggregateFn, AttributeScope, BinaryOp, FieldExpr, Intrinsic, MetricsFn, Pipeline, RootTest, SecondStage,
    SecondStageFn, SpansetExpr, SpansetOp, Stage, Static, UnaryOp,
};
use crate::trace::Value;

use super::values::{eval_value, truthy};
use super::{EvalError, TraceEnv};

#[derive(Debug, Clone)]
pub(super) enum CStage {
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
#[derive(Debug, Clone)]
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
#[derive(Debug, Clone)]
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

#[derive(Debug, Clone)]
pub(super) enum SExpr {
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
pub(super) enum RelMode {
    /// `>`: the right-hand spans related to some left-hand span.
    Plain,
    /// `!>`: the right-hand spans related to no left-hand span.
    Negated,
    /// `&>`: the right-hand spans related to some left-hand span, and the left-hand spans
    /// some right-hand span is related to.
    Union,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Relation {
    Child,
    Descendant,
    Parent,
    Ancestor,
    Sibling,
}

impl Relation {
    /// The relation seen from the other side: `b` is a child of `a` exactly when `a` is the
    /// parent of `b`.
    pub(super) fn inverse(self) -> Relation {
        match self {
            Relation::Child => Relation::Parent,
            Relation::Parent => Relation::Child,
            Relation::Descendant => Relation::Ancestor,
            Relation::Ancestor => Relation::Descendant,
            Relation::Sibling => Relation::Sibling,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct CScalar {
    pub(super) func: AggregateFn,
    pub(super) arg: Option<Expr>,
    pub(super) op: BinaryOp,
    pub(super) value: Value,
    /// The printed aggregate, e.g. `avg(duration)`.
    pub(super) name: String,
}

/// A compiled field expression.
#[derive(Debug, Clone)]
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
    pub(super) fn span_local(&self) -> bool {
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
    pub(super) events: bool,
    pub(super) links: bool,
}

#[derive(Default)]
pub(super) struct Compiler {
    pub(super) selects: Vec<(String, Expr)>,
    pub(super) structural: bool,
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
    pub(super) fn pipeline(&mut self, pipeline: &Pipeline) -> Result<(Vec<CStage>, Option<CMetrics>), EvalError> {
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
