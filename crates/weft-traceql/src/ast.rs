//! The TraceQL syntax tree.
//!
//! The tree keeps what the query says and nothing about how it was spelled: parentheses that only
//! group, spacing, the short and colon forms of an intrinsic (`name` and `span:name`), and the
//! quoting of strings are gone. Negative number and duration literals are folded into their
//! [`Static`] (`-1` is `Static::Int(-1)`), so a `Neg` node never wraps a numeric literal.
//!
//! The parser accepts some shapes that [`validate`](crate::validate) then rejects, so that the
//! error can say what is wrong instead of "unexpected token": function argument lists are kept as
//! parsed (`count(duration)` and `avg()` parse), and so are pipeline stages in any order. After
//! `validate` succeeds, the shape rules written on each type hold.

/// A parsed TraceQL query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// The stages, in order. Never empty.
    ///
    /// For metrics arithmetic between queries (`math` is `Some`), this is not what runs: it is
    /// the union view of the operands, one [`Stage::Spanset`] joining each operand pipeline
    /// (spanset stages, metrics function and second stages) with `||`. It tells consumers that
    /// walk `pipeline` which spans and fields the query reads (every span any operand reads);
    /// [`MetricsExpr::union_pipeline`] builds it.
    pub pipeline: Pipeline,
    /// Query hints from a trailing `with(key=value, ...)`, in the order written.
    pub hints: Vec<Hint>,
    /// Metrics arithmetic between queries, `({ } | rate()) / ({ } | count_over_time())`:
    /// always a [`MetricsExpr::Binary`]. `None` for every other query, including metrics
    /// queries with one operand, whose scalar arithmetic, comparisons and `topk()` are
    /// [`Stage::SecondStage`]s of `pipeline`.
    pub math: Option<MetricsExpr>,
}

impl Query {
    /// A query of one pipeline (no metrics arithmetic between queries).
    pub fn new(pipeline: Pipeline, hints: Vec<Hint>) -> Query {
        Query {
            pipeline,
            hints,
            math: None,
        }
    }

    /// A query of metrics arithmetic between queries; `pipeline` is set to the union view.
    pub fn from_math(math: MetricsExpr, hints: Vec<Hint>) -> Query {
        Query {
            pipeline: math.union_pipeline(),
            hints,
            math: Some(math),
        }
    }

    /// Every pipeline the query runs: `pipeline`, or each operand of `math`, left to right.
    pub fn pipelines(&self) -> Vec<&Pipeline> {
        match &self.math {
            Some(math) => math.operands(),
            None => vec![&self.pipeline],
        }
    }
}

/// Metrics arithmetic between queries (Tempo's "metrics math").
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsExpr {
    /// `({ ... } | rate() ...)`: a pipeline that ends in a metrics function, optionally followed
    /// by second stages ([`Stage::SecondStage`]).
    Query(Pipeline),
    /// `lhs op rhs` with `op` one of `+ - * /`, then `stages` applied to the result (scalar
    /// arithmetic, comparisons, `topk()`/`bottomk()`), in order.
    Binary {
        /// `+`, `-`, `*` or `/`.
        op: BinaryOp,
        /// The left operand.
        lhs: Box<MetricsExpr>,
        /// The right operand.
        rhs: Box<MetricsExpr>,
        /// Second stages applied to the combined series, in order.
        stages: Vec<SecondStage>,
    },
}

impl MetricsExpr {
    /// The operand pipelines, left to right.
    pub fn operands(&self) -> Vec<&Pipeline> {
        let mut out = Vec::new();
        let mut todo = vec![self];
        while let Some(e) = todo.pop() {
            match e {
                MetricsExpr::Query(p) => out.push(p),
                MetricsExpr::Binary { lhs, rhs, .. } => {
                    todo.push(rhs);
                    todo.push(lhs);
                }
            }
        }
        out
    }

    /// The union view of the operands (see [`Query::pipeline`]).
    pub fn union_pipeline(&self) -> Pipeline {
        let mut operands = self
            .operands()
            .into_iter()
            .map(|p| SpansetExpr::Pipeline(Box::new(p.clone())));
        let first = operands
            .next()
            .unwrap_or(SpansetExpr::Filter(SpansetFilter { expr: None }));
        let expr = operands.fold(first, |lhs, rhs| SpansetExpr::Op {
            op: SpansetOp::Or,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        });
        Pipeline {
            stages: vec![Stage::Spanset(expr)],
        }
    }
}

/// Stages separated by `|`. Each stage consumes the spansets the previous one produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    /// Never empty.
    pub stages: Vec<Stage>,
}

/// One stage of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    /// Spanset filters combined with spanset operators: `{ .a = 1 } >> { .b = 2 }`.
    Spanset(SpansetExpr),
    /// An aggregate compared with a static value: `count() > 2`.
    ScalarFilter(ScalarFilter),
    /// `by(expr)`: regroup the spans of each trace by the value of a field expression.
    /// After validation: exactly one argument, and it references a span field.
    By(Vec<FieldExpr>),
    /// `select(a, b)`: fetch extra fields for the returned spans.
    /// After validation: at least one argument, each an attribute or an intrinsic.
    Select(Vec<FieldExpr>),
    /// `coalesce()`: merge the spansets of a trace back into one.
    Coalesce,
    /// A metrics function such as `rate()` or `quantile_over_time(duration, 0.9)`.
    /// After validation: the last stage, or followed only by a [`Stage::SecondStage`].
    Metrics(MetricsStage),
    /// `compare({ filter }, ...)`: a metrics function that splits spans into a selection and a
    /// baseline. After validation: placed like [`Stage::Metrics`].
    Compare(Compare),
    /// `topk(n)` or `bottomk(n)` after a metrics function.
    SecondStage(SecondStage),
    /// Aggregates compared with or combined by arithmetic with each other:
    /// `min(.a) < max(duration)`, `max(.a) - min(.a) > 3`. Tempo parses these and does not
    /// run them; neither does weft (the support check refuses them).
    ScalarExprFilter(ScalarExprFilter),
}

/// `lhs op rhs` between [`ScalarExpr`]s, when it is not one aggregate against a constant
/// (that is a [`ScalarFilter`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarExprFilter {
    pub lhs: ScalarExpr,
    /// A comparison: `=`, `!=`, `<`, `<=`, `>` or `>=`.
    pub op: BinaryOp,
    pub rhs: ScalarExpr,
}

/// Arithmetic over aggregates and numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum ScalarExpr {
    Static(Static),
    Aggregate(Aggregate),
    /// A pipeline's aggregate, written in parentheses: `({ .a } | count())`.
    Pipeline {
        /// The stages before the aggregate.
        pipeline: Box<Pipeline>,
        aggregate: Aggregate,
    },
    /// `+ - * / % ^`.
    Binary {
        op: BinaryOp,
        lhs: Box<ScalarExpr>,
        rhs: Box<ScalarExpr>,
    },
}

/// Spanset filters and the operators between them.
#[derive(Debug, Clone, PartialEq)]
pub enum SpansetExpr {
    /// `{ }` or `{ expr }`.
    Filter(SpansetFilter),
    /// Two spanset expressions joined by a logical or structural operator.
    Op {
        /// The operator.
        op: SpansetOp,
        /// The left operand.
        lhs: Box<SpansetExpr>,
        /// The right operand.
        rhs: Box<SpansetExpr>,
    },
    /// A parenthesised pipeline of more than one stage used as an operand:
    /// `({ .a } | count() > 1) > { .b }`. Its first stage is always a [`Stage::Spanset`].
    Pipeline(Box<Pipeline>),
}

/// `{ }` (every span) or `{ expr }` (spans for which `expr` is true).
#[derive(Debug, Clone, PartialEq)]
pub struct SpansetFilter {
    /// `None` for `{ }`. After validation the expression is boolean (or an attribute whose
    /// truth is decided at run time).
    pub expr: Option<FieldExpr>,
}

/// Operators between spanset expressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpansetOp {
    /// `&&`: traces that match both sides; spans from both.
    And,
    /// `||`: spans that match either side.
    Or,
    /// `>`: right-hand spans that are children of a left-hand span.
    Child,
    /// `>>`: right-hand spans that are descendants of a left-hand span.
    Descendant,
    /// `<`: right-hand spans that are parents of a left-hand span.
    Parent,
    /// `<<`: right-hand spans that are ancestors of a left-hand span.
    Ancestor,
    /// `~`: right-hand spans that are siblings of a left-hand span.
    Sibling,
    /// `!>`: right-hand spans that are not children of a left-hand span.
    NotChild,
    /// `!>>`: right-hand spans that are not descendants of a left-hand span.
    NotDescendant,
    /// `!<`: right-hand spans that are not parents of a left-hand span.
    NotParent,
    /// `!<<`: right-hand spans that are not ancestors of a left-hand span.
    NotAncestor,
    /// `!~`: right-hand spans that are not siblings of a left-hand span.
    NotSibling,
    /// `&>`: like `>`, returning the matching spans of both sides.
    UnionChild,
    /// `&>>`: like `>>`, returning the matching spans of both sides.
    UnionDescendant,
    /// `&<`: like `<`, returning the matching spans of both sides.
    UnionParent,
    /// `&<<`: like `<<`, returning the matching spans of both sides.
    UnionAncestor,
    /// `&~`: like `~`, returning the matching spans of both sides.
    UnionSibling,
}

impl SpansetOp {
    /// The operator as written in TraceQL.
    pub fn symbol(self) -> &'static str {
        match self {
            SpansetOp::And => "&&",
            SpansetOp::Or => "||",
            SpansetOp::Child => ">",
            SpansetOp::Descendant => ">>",
            SpansetOp::Parent => "<",
            SpansetOp::Ancestor => "<<",
            SpansetOp::Sibling => "~",
            SpansetOp::NotChild => "!>",
            SpansetOp::NotDescendant => "!>>",
            SpansetOp::NotParent => "!<",
            SpansetOp::NotAncestor => "!<<",
            SpansetOp::NotSibling => "!~",
            SpansetOp::UnionChild => "&>",
            SpansetOp::UnionDescendant => "&>>",
            SpansetOp::UnionParent => "&<",
            SpansetOp::UnionAncestor => "&<<",
            SpansetOp::UnionSibling => "&~",
        }
    }

    /// Binding strength: structural operators 3, `&&` 2, `||` 1. All are left-associative.
    pub fn precedence(self) -> u8 {
        match self {
            // Tempo's grammar: `&&` and `||` share one level, left to right.
            SpansetOp::Or | SpansetOp::And => 1,
            _ => 3,
        }
    }

    /// True for the structural operators (everything except `&&` and `||`).
    pub fn is_structural(self) -> bool {
        !matches!(self, SpansetOp::And | SpansetOp::Or)
    }
}

/// A pipeline filter on a per-spanset aggregate: `count() > 2`, `avg(duration) >= 1s`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarFilter {
    /// The aggregate on the left.
    pub aggregate: Aggregate,
    /// Always a comparison: `=`, `!=`, `<`, `<=`, `>` or `>=`.
    pub op: BinaryOp,
    /// The static value on the right. After validation: a number or a duration.
    pub value: Static,
}

/// An aggregate over the spans of a spanset.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// Which aggregate.
    pub func: AggregateFn,
    /// After validation: none for `count()`, exactly one numeric field expression otherwise.
    pub args: Vec<FieldExpr>,
}

/// The spanset aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggregateFn {
    /// `count()`
    Count,
    /// `avg(f)`
    Avg,
    /// `min(f)`
    Min,
    /// `max(f)`
    Max,
    /// `sum(f)`
    Sum,
}

impl AggregateFn {
    /// The function name as written in TraceQL.
    pub fn name(self) -> &'static str {
        match self {
            AggregateFn::Count => "count",
            AggregateFn::Avg => "avg",
            AggregateFn::Min => "min",
            AggregateFn::Max => "max",
            AggregateFn::Sum => "sum",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<AggregateFn> {
        Some(match name {
            "count" => AggregateFn::Count,
            "avg" => AggregateFn::Avg,
            "min" => AggregateFn::Min,
            "max" => AggregateFn::Max,
            "sum" => AggregateFn::Sum,
            _ => return None,
        })
    }
}

/// A metrics function and its grouping.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsStage {
    /// Which function.
    pub func: MetricsFn,
    /// After validation: none for `rate()` and `count_over_time()`; one attribute or intrinsic
    /// for the `*_over_time(f)` functions; for `quantile_over_time`, an attribute or intrinsic
    /// followed by at least one number in `[0, 1]` (see [`MetricsStage::quantiles`]).
    pub args: Vec<FieldExpr>,
    /// `by (a, b)`. After validation: if present, at least one attribute or intrinsic.
    pub by: Option<Vec<FieldExpr>>,
}

impl MetricsStage {
    /// The quantiles of a validated `quantile_over_time`, in the order written.
    pub fn quantiles(&self) -> Vec<f64> {
        self.args
            .iter()
            .skip(1)
            .filter_map(|arg| match arg {
                FieldExpr::Static(Static::Int(i)) => Some(*i as f64),
                FieldExpr::Static(Static::Float(f)) => Some(*f),
                _ => None,
            })
            .collect()
    }
}

/// The metrics functions (first stage of a metrics query).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricsFn {
    /// `rate()`
    Rate,
    /// `count_over_time()`
    CountOverTime,
    /// `min_over_time(f)`
    MinOverTime,
    /// `max_over_time(f)`
    MaxOverTime,
    /// `avg_over_time(f)`
    AvgOverTime,
    /// `sum_over_time(f)`
    SumOverTime,
    /// `quantile_over_time(f, q...)`
    QuantileOverTime,
    /// `histogram_over_time(f)`
    HistogramOverTime,
}

impl MetricsFn {
    /// The function name as written in TraceQL.
    pub fn name(self) -> &'static str {
        match self {
            MetricsFn::Rate => "rate",
            MetricsFn::CountOverTime => "count_over_time",
            MetricsFn::MinOverTime => "min_over_time",
            MetricsFn::MaxOverTime => "max_over_time",
            MetricsFn::AvgOverTime => "avg_over_time",
            MetricsFn::SumOverTime => "sum_over_time",
            MetricsFn::QuantileOverTime => "quantile_over_time",
            MetricsFn::HistogramOverTime => "histogram_over_time",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<MetricsFn> {
        Some(match name {
            "rate" => MetricsFn::Rate,
            "count_over_time" => MetricsFn::CountOverTime,
            "min_over_time" => MetricsFn::MinOverTime,
            "max_over_time" => MetricsFn::MaxOverTime,
            "avg_over_time" => MetricsFn::AvgOverTime,
            "sum_over_time" => MetricsFn::SumOverTime,
            "quantile_over_time" => MetricsFn::QuantileOverTime,
            "histogram_over_time" => MetricsFn::HistogramOverTime,
            _ => return None,
        })
    }
}

/// `compare({ filter })`, `compare({ filter }, topN)` or `compare({ filter }, topN, start, end)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Compare {
    /// The selection; spans not matching it form the baseline.
    pub filter: SpansetFilter,
    /// After validation: zero, one or three non-negative integer literals.
    pub args: Vec<FieldExpr>,
}

/// What may follow a metrics function: `| topk(n)`, `| bottomk(n)`, a comparison (`> 10`) or
/// arithmetic with a number (`(...) * 100`, `100 * (...)`).
#[derive(Debug, Clone, PartialEq)]
pub struct SecondStage {
    /// Which function.
    pub func: SecondStageFn,
    /// After validation: for `topk`/`bottomk`, exactly one positive integer literal; for
    /// comparisons and arithmetic, exactly one number (integer or float; comparisons also take
    /// a duration, compared in seconds).
    pub args: Vec<FieldExpr>,
}

/// Second-stage functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecondStageFn {
    /// `topk(n)`: at each step, the n series with the highest values.
    TopK,
    /// `bottomk(n)`: at each step, the n series with the lowest values.
    BottomK,
    /// `> v` and the other comparisons (`=`, `!=`, `<`, `<=`, `>`, `>=`): keep the points
    /// that satisfy it, and the series left with a point.
    Filter(BinaryOp),
    /// Arithmetic (`+`, `-`, `*` or `/`) of every point with the number in `args`: `series op
    /// v`, or `v op series` when `scalar_first`.
    Arithmetic {
        /// The operator.
        op: BinaryOp,
        /// `v op series` rather than `series op v`.
        scalar_first: bool,
    },
}

impl SecondStageFn {
    /// The function name as written in TraceQL (the operator for comparisons and arithmetic).
    pub fn name(self) -> &'static str {
        match self {
            SecondStageFn::TopK => "topk",
            SecondStageFn::BottomK => "bottomk",
            SecondStageFn::Filter(op) | SecondStageFn::Arithmetic { op, .. } => op.symbol(),
        }
    }

    /// `topk` and `bottomk`, written after a `|`.
    pub fn is_function(self) -> bool {
        matches!(self, SecondStageFn::TopK | SecondStageFn::BottomK)
    }
}

/// A query hint: `key=value` inside `with(...)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    /// The hint name, e.g. `sample` or `most_recent`.
    pub key: String,
    /// The value.
    pub value: Static,
}

/// An expression evaluated for each span (inside `{ }` and in function arguments).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldExpr {
    /// A literal.
    Static(Static),
    /// A built-in span or trace field such as `duration` or `span:id`.
    Intrinsic(Intrinsic),
    /// A user attribute such as `span.http.method`.
    Attribute(Attribute),
    /// `-x` or `!x`.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand; never a numeric literal when `op` is `Neg` (those are folded).
        expr: Box<FieldExpr>,
    },
    /// `lhs op rhs`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// The left operand.
        lhs: Box<FieldExpr>,
        /// The right operand.
        rhs: Box<FieldExpr>,
    },
}

impl FieldExpr {
    /// True for attributes and intrinsics.
    pub fn is_field(&self) -> bool {
        matches!(self, FieldExpr::Intrinsic(_) | FieldExpr::Attribute(_))
    }
}

/// What a comparison `lhs op rhs` says about a span, when it compares `nestedSetParent` with an
/// integer literal and its result depends only on whether the span is a root.
///
/// `nestedSetParent` is -1 for a root span (one without a parent span ID) and 0 or more for
/// every other span (the parent's `nestedSetLeft`, or 0 for a span not reached from a root).
/// So `nestedSetParent < 0`, `= -1`, `!= -1` or `>= 0` need only the span's parent ID, not the
/// trace's structure: Grafana's Traces Drilldown selects root spans with `nestedSetParent<0`
/// in every query of its default view. `None` for any other comparison.
pub fn root_test(op: BinaryOp, lhs: &FieldExpr, rhs: &FieldExpr) -> Option<RootTest> {
    use std::cmp::Ordering;
    let (c, literal_first) = match (lhs, rhs) {
        (FieldExpr::Intrinsic(Intrinsic::NestedSetParent), FieldExpr::Static(Static::Int(c))) => (*c, false),
        (FieldExpr::Static(Static::Int(c)), FieldExpr::Intrinsic(Intrinsic::NestedSetParent)) => (*c, true),
        _ => return None,
    };
    let test = |v: i64| {
        let ord = if literal_first { c.cmp(&v) } else { v.cmp(&c) };
        match op {
            BinaryOp::Eq => ord == Ordering::Equal,
            BinaryOp::Neq => ord != Ordering::Equal,
            BinaryOp::Lt => ord == Ordering::Less,
            BinaryOp::Lte => ord != Ordering::Greater,
            BinaryOp::Gt => ord == Ordering::Greater,
            BinaryOp::Gte => ord != Ordering::Less,
            _ => false,
        }
    };
    if !op.is_comparison() || op.is_regex() || c > 0 {
        return None;
    }
    // Every value of 1 or more is above `c`, so compares as 1 does; 0 may differ from it.
    let other = test(1);
    if test(0) != other {
        return None;
    }
    Some(match (test(-1), other) {
        (true, false) => RootTest::Root,
        (false, true) => RootTest::NotRoot,
        (both, _) => RootTest::Always(both),
    })
}

/// The result of [`root_test`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootTest {
    /// True for root spans only.
    Root,
    /// True for spans with a parent span ID only.
    NotRoot,
    /// The same for every span.
    Always(bool),
}

/// Unary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `!x`
    Not,
}

impl UnaryOp {
    /// The operator as written in TraceQL.
    pub fn symbol(self) -> &'static str {
        match self {
            UnaryOp::Neg => "-",
            UnaryOp::Not => "!",
        }
    }
}

/// Binary operators of field expressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `=`
    Eq,
    /// `!=`
    Neq,
    /// `<`
    Lt,
    /// `<=`
    Lte,
    /// `>`
    Gt,
    /// `>=`
    Gte,
    /// `=~`: the left side matches the regular expression on the right.
    Regex,
    /// `!~`: the left side does not match the regular expression on the right.
    NotRegex,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `^`
    Pow,
}

impl BinaryOp {
    /// The operator as written in TraceQL.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "=",
            BinaryOp::Neq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Lte => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Gte => ">=",
            BinaryOp::Regex => "=~",
            BinaryOp::NotRegex => "!~",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Pow => "^",
        }
    }

    /// Binding strength, from `||` (1) to `^` (6). Unary operators bind tighter than all.
    pub fn precedence(self) -> u8 {
        match self {
            // Tempo's grammar: `&&` and `||` share one level, left to right.
            BinaryOp::Or | BinaryOp::And => 1,
            BinaryOp::Eq
            | BinaryOp::Neq
            | BinaryOp::Lt
            | BinaryOp::Lte
            | BinaryOp::Gt
            | BinaryOp::Gte
            | BinaryOp::Regex
            | BinaryOp::NotRegex => 3,
            BinaryOp::Add | BinaryOp::Sub => 4,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod => 5,
            BinaryOp::Pow => 6,
        }
    }

    /// `^` is right-associative; every other operator is left-associative.
    pub fn is_right_associative(self) -> bool {
        self == BinaryOp::Pow
    }

    /// `&&` and `||`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }

    /// `=`, `!=`, `<`, `<=`, `>`, `>=`, `=~` and `!~`.
    pub fn is_comparison(self) -> bool {
        self.precedence() == 3
    }

    /// `=~` and `!~`.
    pub fn is_regex(self) -> bool {
        matches!(self, BinaryOp::Regex | BinaryOp::NotRegex)
    }

    /// `<`, `<=`, `>` and `>=`.
    pub fn is_ordering(self) -> bool {
        matches!(self, BinaryOp::Lt | BinaryOp::Lte | BinaryOp::Gt | BinaryOp::Gte)
    }

    /// `+`, `-`, `*`, `/`, `%` and `^`.
    pub fn is_arithmetic(self) -> bool {
        self.precedence() >= 4
    }
}

/// Literal values.
#[derive(Debug, Clone, PartialEq)]
pub enum Static {
    /// A string (from `"..."` or a backtick raw string).
    Str(String),
    /// A 64-bit signed integer.
    Int(i64),
    /// A finite 64-bit float.
    Float(f64),
    /// A duration in nanoseconds; negative only through unary minus (`-1s`).
    Duration(i64),
    /// `true` or `false`.
    Bool(bool),
    /// `nil`: compared with `=`/`!=` to test whether a field is absent/present.
    Nil,
    /// `error`, `ok` or `unset`.
    Status(Status),
    /// `unspecified`, `internal`, `server`, `client`, `producer` or `consumer`.
    Kind(Kind),
}

/// Span status literals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// `error`
    Error,
    /// `ok`
    Ok,
    /// `unset`
    Unset,
}

impl Status {
    /// The literal as written in TraceQL.
    pub fn name(self) -> &'static str {
        match self {
            Status::Error => "error",
            Status::Ok => "ok",
            Status::Unset => "unset",
        }
    }
}

/// Span kind literals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `unspecified`
    Unspecified,
    /// `internal`
    Internal,
    /// `server`
    Server,
    /// `client`
    Client,
    /// `producer`
    Producer,
    /// `consumer`
    Consumer,
}

impl Kind {
    /// The literal as written in TraceQL.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Unspecified => "unspecified",
            Kind::Internal => "internal",
            Kind::Server => "server",
            Kind::Client => "client",
            Kind::Producer => "producer",
            Kind::Consumer => "consumer",
        }
    }
}

impl Static {
    /// The literal for a keyword (`true`, `nil`, `error`, `server`, ...), if it is one.
    pub(crate) fn from_keyword(word: &str) -> Option<Static> {
        Some(match word {
            "true" => Static::Bool(true),
            "false" => Static::Bool(false),
            "nil" => Static::Nil,
            "error" => Static::Status(Status::Error),
            "ok" => Static::Status(Status::Ok),
            "unset" => Static::Status(Status::Unset),
            "unspecified" => Static::Kind(Kind::Unspecified),
            "internal" => Static::Kind(Kind::Internal),
            "server" => Static::Kind(Kind::Server),
            "client" => Static::Kind(Kind::Client),
            "producer" => Static::Kind(Kind::Producer),
            "consumer" => Static::Kind(Kind::Consumer),
            _ => return None,
        })
    }
}

/// Built-in fields of spans, traces, events, links and instrumentation scopes.
///
/// The short and colon spellings of one field map to one variant (`name` and `span:name` are
/// both [`Intrinsic::Name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    /// `name`, `span:name` (string)
    Name,
    /// `status`, `span:status` (status)
    Status,
    /// `statusMessage`, `span:statusMessage` (string)
    StatusMessage,
    /// `kind`, `span:kind` (kind)
    Kind,
    /// `duration`, `span:duration` (duration)
    Duration,
    /// `rootName`, `trace:rootName` (string)
    RootName,
    /// `rootServiceName`, `trace:rootService` (string)
    RootServiceName,
    /// `traceDuration`, `trace:duration` (duration)
    TraceDuration,
    /// `span:id` (string, lowercase hex)
    SpanId,
    /// `span:parentID` (string, lowercase hex)
    ParentId,
    /// `trace:id` (string, lowercase hex)
    TraceId,
    /// `event:name` (string)
    EventName,
    /// `event:timeSinceStart` (duration)
    EventTimeSinceStart,
    /// `link:traceID` (string, lowercase hex)
    LinkTraceId,
    /// `link:spanID` (string, lowercase hex)
    LinkSpanId,
    /// `instrumentation:name` (string)
    InstrumentationName,
    /// `instrumentation:version` (string)
    InstrumentationVersion,
    /// `nestedSetLeft` (integer)
    NestedSetLeft,
    /// `nestedSetRight` (integer)
    NestedSetRight,
    /// `nestedSetParent` (integer)
    NestedSetParent,
    /// `span:childCount` (integer): how many spans of the trace have this span as parent.
    ChildCount,
    /// `parent`: the span's parent itself. Tempo parses it and does not run it ("parent not
    /// yet supported"); neither does weft.
    Parent,
}

impl Intrinsic {
    /// The canonical spelling: the short form where one exists, else the colon form.
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Name => "name",
            Intrinsic::Status => "status",
            Intrinsic::StatusMessage => "statusMessage",
            Intrinsic::Kind => "kind",
            Intrinsic::Duration => "duration",
            Intrinsic::RootName => "rootName",
            Intrinsic::RootServiceName => "rootServiceName",
            Intrinsic::TraceDuration => "traceDuration",
            Intrinsic::SpanId => "span:id",
            Intrinsic::ParentId => "span:parentID",
            Intrinsic::TraceId => "trace:id",
            Intrinsic::EventName => "event:name",
            Intrinsic::EventTimeSinceStart => "event:timeSinceStart",
            Intrinsic::LinkTraceId => "link:traceID",
            Intrinsic::LinkSpanId => "link:spanID",
            Intrinsic::InstrumentationName => "instrumentation:name",
            Intrinsic::InstrumentationVersion => "instrumentation:version",
            Intrinsic::NestedSetLeft => "nestedSetLeft",
            Intrinsic::NestedSetRight => "nestedSetRight",
            Intrinsic::NestedSetParent => "nestedSetParent",
            Intrinsic::ChildCount => "span:childCount",
            Intrinsic::Parent => "parent",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Intrinsic> {
        Some(match name {
            "name" | "span:name" => Intrinsic::Name,
            "status" | "span:status" => Intrinsic::Status,
            "statusMessage" | "span:statusMessage" => Intrinsic::StatusMessage,
            "kind" | "span:kind" => Intrinsic::Kind,
            "duration" | "span:duration" => Intrinsic::Duration,
            "rootName" | "trace:rootName" => Intrinsic::RootName,
            "rootServiceName" | "trace:rootService" => Intrinsic::RootServiceName,
            "traceDuration" | "trace:duration" => Intrinsic::TraceDuration,
            "span:id" => Intrinsic::SpanId,
            "span:parentID" => Intrinsic::ParentId,
            "trace:id" => Intrinsic::TraceId,
            "event:name" => Intrinsic::EventName,
            "event:timeSinceStart" => Intrinsic::EventTimeSinceStart,
            "link:traceID" => Intrinsic::LinkTraceId,
            "link:spanID" => Intrinsic::LinkSpanId,
            "instrumentation:name" => Intrinsic::InstrumentationName,
            "instrumentation:version" => Intrinsic::InstrumentationVersion,
            "nestedSetLeft" => Intrinsic::NestedSetLeft,
            "nestedSetRight" => Intrinsic::NestedSetRight,
            "nestedSetParent" => Intrinsic::NestedSetParent,
            "span:childCount" => Intrinsic::ChildCount,
            "parent" => Intrinsic::Parent,
            _ => return None,
        })
    }
}

/// A user attribute reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attribute {
    /// Where to look for the attribute.
    pub scope: AttributeScope,
    /// `parent.`: read the attribute from the span's parent instead of the span.
    pub parent: bool,
    /// The attribute key, e.g. `http.request.method`. Never empty.
    pub name: String,
}

/// Attribute scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttributeScope {
    /// `.x`: span or resource attribute (span wins when both exist).
    Unscoped,
    /// `resource.x`
    Resource,
    /// `span.x`
    Span,
    /// `event.x`
    Event,
    /// `link.x`
    Link,
    /// `instrumentation.x`
    Instrumentation,
}

impl AttributeScope {
    /// The prefix as written in TraceQL, including the dot.
    pub fn prefix(self) -> &'static str {
        match self {
            AttributeScope::Unscoped => ".",
            AttributeScope::Resource => "resource.",
            AttributeScope::Span => "span.",
            AttributeScope::Event => "event.",
            AttributeScope::Link => "link.",
            AttributeScope::Instrumentation => "instrumentation.",
        }
    }

    pub(crate) fn from_word(word: &str) -> Option<AttributeScope> {
        Some(match word {
            "resource" => AttributeScope::Resource,
            "span" => AttributeScope::Span,
            "event" => AttributeScope::Event,
            "link" => AttributeScope::Link,
            "instrumentation" => AttributeScope::Instrumentation,
            _ => return None,
        })
    }
}
