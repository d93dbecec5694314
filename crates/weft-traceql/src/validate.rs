//! Rejects queries that parse but mean nothing: type errors, wrong argument lists, stages in
//! impossible places.
//!
//! Types: attributes are typed only at run time, so an attribute is compatible with every
//! static type (`span.x = "a"` and `span.x > 3` are both fine). Integers, floats and durations
//! compare with each other (`duration > 1` means one nanosecond), as in Tempo.

use std::collections::HashSet;

use crate::ValidateError;
use crate::ast::{
    Aggregate, AggregateFn, BinaryOp, Compare, FieldExpr, Intrinsic, MetricsExpr, MetricsFn, MetricsStage, Pipeline,
    Query, ScalarExpr, ScalarFilter, SecondStage, SecondStageFn, SpansetExpr, SpansetFilter, Stage, Static, UnaryOp,
};

/// Checks that a parsed query is meaningful. See the crate docs for the rules.
pub fn validate(query: &Query) -> Result<(), ValidateError> {
    match &query.math {
        Some(math) => metrics_expr(math)?,
        None => pipeline(&query.pipeline, true)?,
    }
    let mut seen = HashSet::new();
    for hint in &query.hints {
        if !seen.insert(hint.key.as_str()) {
            return fail(format!("hint '{}' is given more than once", hint.key));
        }
    }
    Ok(())
}

fn fail<T>(message: impl Into<String>) -> Result<T, ValidateError> {
    Err(ValidateError {
        message: message.into(),
    })
}

/// The static type of a field expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Bool,
    String,
    Int,
    Float,
    Duration,
    Status,
    Kind,
    Nil,
    /// An attribute: its type is known only at run time.
    Attribute,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Bool => "boolean",
            Type::String => "string",
            Type::Int => "integer",
            Type::Float => "float",
            Type::Duration => "duration",
            Type::Status => "status",
            Type::Kind => "kind",
            Type::Nil => "nil",
            Type::Attribute => "attribute",
        }
    }

    fn is_numeric(self) -> bool {
        matches!(self, Type::Int | Type::Float | Type::Duration)
    }

    fn numeric_or_attribute(self) -> bool {
        self.is_numeric() || self == Type::Attribute
    }

    fn bool_or_attribute(self) -> bool {
        matches!(self, Type::Bool | Type::Attribute)
    }
}

fn static_type(value: &Static) -> Type {
    match value {
        Static::Str(_) => Type::String,
        Static::Int(_) => Type::Int,
        Static::Float(_) => Type::Float,
        Static::Duration(_) => Type::Duration,
        Static::Bool(_) => Type::Bool,
        Static::Nil => Type::Nil,
        Static::Status(_) => Type::Status,
        Static::Kind(_) => Type::Kind,
    }
}

fn intrinsic_type(intrinsic: Intrinsic) -> Type {
    match intrinsic {
        // Untyped, as an attribute: Tempo checks nothing more before refusing it.
        Intrinsic::Parent => Type::Attribute,
        Intrinsic::Status => Type::Status,
        Intrinsic::Kind => Type::Kind,
        Intrinsic::Duration | Intrinsic::TraceDuration | Intrinsic::EventTimeSinceStart => Type::Duration,
        Intrinsic::NestedSetLeft | Intrinsic::NestedSetRight | Intrinsic::NestedSetParent | Intrinsic::ChildCount => {
            Type::Int
        }
        Intrinsic::Name
        | Intrinsic::StatusMessage
        | Intrinsic::RootName
        | Intrinsic::RootServiceName
        | Intrinsic::SpanId
        | Intrinsic::ParentId
        | Intrinsic::TraceId
        | Intrinsic::EventName
        | Intrinsic::LinkTraceId
        | Intrinsic::LinkSpanId
        | Intrinsic::InstrumentationName
        | Intrinsic::InstrumentationVersion => Type::String,
    }
}

/// "integer `3`", for messages.
fn typed(t: Type, expr: &FieldExpr) -> String {
    format!("{} `{expr}`", t.name())
}

fn field_type(expr: &FieldExpr) -> Result<Type, ValidateError> {
    match expr {
        FieldExpr::Static(value) => Ok(static_type(value)),
        FieldExpr::Intrinsic(intrinsic) => Ok(intrinsic_type(*intrinsic)),
        FieldExpr::Attribute(_) => Ok(Type::Attribute),
        FieldExpr::Unary { op, expr: operand } => {
            let t = field_type(operand)?;
            match op {
                UnaryOp::Neg if t.numeric_or_attribute() => Ok(if t == Type::Attribute { Type::Float } else { t }),
                UnaryOp::Neg => fail(format!(
                    "unary '-' needs a number or duration, found {}",
                    typed(t, operand)
                )),
                UnaryOp::Not if t.bool_or_attribute() => Ok(Type::Bool),
                UnaryOp::Not => fail(format!("'!' needs a boolean, found {}", typed(t, operand))),
            }
        }
        FieldExpr::Binary { op, lhs, rhs } => binary_type(expr, *op, lhs, rhs),
    }
}

fn binary_type(expr: &FieldExpr, op: BinaryOp, lhs: &FieldExpr, rhs: &FieldExpr) -> Result<Type, ValidateError> {
    let sym = op.symbol();
    let lt = field_type(lhs)?;
    let rt = field_type(rhs)?;
    if op.is_logical() {
        for (t, side) in [(lt, lhs), (rt, rhs)] {
            if !t.bool_or_attribute() {
                return fail(format!(
                    "'{sym}' needs boolean operands, found {} in `{expr}`",
                    typed(t, side)
                ));
            }
        }
        return Ok(Type::Bool);
    }
    if op.is_arithmetic() {
        for (t, side) in [(lt, lhs), (rt, rhs)] {
            if !t.numeric_or_attribute() {
                return fail(format!(
                    "arithmetic '{sym}' needs numbers or durations, found {} in `{expr}`",
                    typed(t, side)
                ));
            }
        }
        return Ok(if lt == Type::Duration || rt == Type::Duration {
            Type::Duration
        } else if lt == Type::Int && rt == Type::Int {
            Type::Int
        } else {
            Type::Float
        });
    }
    comparison(expr, op, (lhs, lt), (rhs, rt))?;
    Ok(Type::Bool)
}

fn comparison(
    expr: &FieldExpr,
    op: BinaryOp,
    (lhs, lt): (&FieldExpr, Type),
    (rhs, rt): (&FieldExpr, Type),
) -> Result<(), ValidateError> {
    let sym = op.symbol();
    if lt == Type::Nil || rt == Type::Nil {
        // Tempo's rules: `x = nil` / `x != nil` (either side) test whether x has a value;
        // `nil = nil` and `nil != nil` are false; nil has no order.
        if !matches!(op, BinaryOp::Eq | BinaryOp::Neq) {
            return fail(format!(
                "nil can only be compared using '=' or '!=' (to test whether a value is missing or present), in `{expr}`"
            ));
        }
        let other = if lt == Type::Nil { rhs } else { lhs };
        if op == BinaryOp::Eq
            && let Some(what) = never_nil(other)
        {
            return fail(format!("`{expr}` is not valid because {what} cannot be nil"));
        }
        return Ok(());
    }
    if op.is_regex() {
        if !matches!(lt, Type::String | Type::Attribute) {
            return fail(format!(
                "'{sym}' needs a string on its left side, found {}",
                typed(lt, lhs)
            ));
        }
        let FieldExpr::Static(Static::Str(pattern)) = rhs else {
            return fail(format!(
                "the right side of '{sym}' must be a string (a regular expression), found {}",
                typed(rt, rhs)
            ));
        };
        // As the evaluator compiles it; an invalid pattern is a validation error, as in Tempo.
        if let Err(e) = regex::Regex::new(&format!("^(?s:{pattern})$")) {
            return fail(format!("invalid regular expression `{pattern}` in `{expr}`: {e}"));
        }
        return Ok(());
    }
    for (enum_type, literals) in [
        (Type::Status, "the status literals error, ok and unset"),
        (
            Type::Kind,
            "the kind literals unspecified, internal, server, client, producer and consumer",
        ),
    ] {
        if lt != enum_type && rt != enum_type {
            continue;
        }
        let (t, other) = if lt == enum_type { (rt, rhs) } else { (lt, lhs) };
        if t != enum_type && t != Type::Attribute {
            return fail(format!(
                "{} compares with {literals}, found {}",
                enum_type.name(),
                typed(t, other)
            ));
        }
        if op.is_ordering() {
            return fail(format!(
                "{} values cannot be ordered with '{sym}', in `{expr}`",
                enum_type.name()
            ));
        }
        return Ok(());
    }
    let compatible = lt == Type::Attribute
        || rt == Type::Attribute
        || (lt.is_numeric() && rt.is_numeric())
        || (lt == rt && (!op.is_ordering() || lt == Type::String));
    if !compatible {
        return fail(format!(
            "cannot compare {} with {} using '{sym}', in `{expr}`",
            lt.name(),
            rt.name()
        ));
    }
    Ok(())
}

/// Why `expr = nil` can never hold, as Tempo refuses it: intrinsics that every span has, and
/// `resource.service.name`. Intrinsics that a span may lack (`span:parentID` of a root span,
/// `event:name` of a span without events, ...) may be compared with nil.
fn never_nil(expr: &FieldExpr) -> Option<String> {
    match expr {
        FieldExpr::Intrinsic(i) => match i {
            Intrinsic::ParentId
            | Intrinsic::RootName
            | Intrinsic::RootServiceName
            | Intrinsic::EventName
            | Intrinsic::EventTimeSinceStart
            | Intrinsic::LinkTraceId
            | Intrinsic::LinkSpanId => None,
            _ => Some(format!("the intrinsic {}", i.name())),
        },
        FieldExpr::Attribute(a)
            if a.scope == crate::ast::AttributeScope::Resource && !a.parent && a.name == "service.name" =>
        {
            Some("resource.service.name".to_owned())
        }
        _ => None,
    }
}

/// True if `expr` reads an attribute or intrinsic somewhere.
fn references_field(expr: &FieldExpr) -> bool {
    match expr {
        FieldExpr::Static(_) => false,
        FieldExpr::Intrinsic(_) | FieldExpr::Attribute(_) => true,
        FieldExpr::Unary { expr, .. } => references_field(expr),
        FieldExpr::Binary { lhs, rhs, .. } => references_field(lhs) || references_field(rhs),
    }
}

fn pipeline(pipeline: &Pipeline, top_level: bool) -> Result<(), ValidateError> {
    let stages = &pipeline.stages;
    for (n, stage) in stages.iter().enumerate() {
        let rest = &stages[n + 1..];
        match stage {
            Stage::Spanset(expr) => spanset(expr)?,
            Stage::ScalarFilter(filter) => scalar_filter(filter)?,
            Stage::ScalarExprFilter(filter) => {
                scalar_expr(&filter.lhs)?;
                scalar_expr(&filter.rhs)?;
            }
            Stage::By(args) => {
                let [arg] = args.as_slice() else {
                    return fail(format!(
                        "by() takes one field expression, found {} arguments",
                        args.len()
                    ));
                };
                field_type(arg)?;
                if !references_field(arg) {
                    return fail(format!("by() must reference an attribute or intrinsic, found `{arg}`"));
                }
            }
            Stage::Select(args) => {
                if args.is_empty() {
                    return fail("select() needs at least one attribute or intrinsic");
                }
                fields_only("select()", args)?;
            }
            Stage::Coalesce => {
                if n == 0 {
                    return fail("coalesce() cannot start a pipeline; it merges the spansets of earlier stages");
                }
            }
            Stage::Metrics(_) | Stage::Compare(_) => {
                let name = match stage {
                    Stage::Metrics(metrics) => metrics.func.name(),
                    _ => "compare",
                };
                if !top_level {
                    return fail(format!("{name}() is only allowed at the end of the whole query"));
                }
                if n == 0 {
                    return fail(format!("{name}() needs spans to work on, e.g. '{{ }} | {name}()'"));
                }
                if !rest.iter().all(|s| matches!(s, Stage::SecondStage(_))) {
                    return fail(format!(
                        "{name}() must be the last stage of the pipeline (only topk(), bottomk(), comparisons and arithmetic may follow it)"
                    ));
                }
                match stage {
                    Stage::Metrics(metrics) => metrics_stage(metrics)?,
                    Stage::Compare(compare) => {
                        if let Some(Stage::SecondStage(second)) = rest.first() {
                            return fail(format!(
                                "compare() cannot be followed by {} (it returns attribute counts to compare, not series to rank or filter)",
                                second_stage_name(second)
                            ));
                        }
                        compare_stage(compare)?
                    }
                    _ => {}
                }
            }
            Stage::SecondStage(second) => {
                let after_metrics = n > 0
                    && matches!(
                        stages[n - 1],
                        Stage::Metrics(_) | Stage::Compare(_) | Stage::SecondStage(_)
                    );
                let has_metrics = stages
                    .iter()
                    .any(|s| matches!(s, Stage::Metrics(_) | Stage::Compare(_)));
                if top_level && !has_metrics && !second.func.is_function() {
                    return fail(format!(
                        "{} needs a metrics query such as '({{ }} | rate())', found `{}`",
                        second_stage_name(second),
                        Pipeline {
                            stages: stages[..n].to_vec()
                        }
                    ));
                }
                if !top_level || !after_metrics {
                    return fail(format!(
                        "{} must directly follow a metrics function such as rate()",
                        second_stage_name(second)
                    ));
                }
                second_stage(second)?;
            }
        }
    }
    Ok(())
}

fn spanset(expr: &SpansetExpr) -> Result<(), ValidateError> {
    match expr {
        SpansetExpr::Filter(f) => filter(f),
        SpansetExpr::Op { op, lhs, rhs } => {
            spanset(lhs)?;
            spanset(rhs)?;
            if op.is_structural() {
                for side in [lhs, rhs] {
                    if let SpansetExpr::Pipeline(p) = side.as_ref()
                        && may_split(p)
                    {
                        return fail(format!(
                            "the structural operator '{}' needs one spanset per trace on each side, but by() in `({p})` can split a trace into several (Tempo fails the query then); end that pipeline with '| coalesce()'",
                            op.symbol()
                        ));
                    }
                }
            }
            Ok(())
        }
        SpansetExpr::Pipeline(inner) => pipeline(inner, false),
    }
}

/// Whether a pipeline used as an operand can give several spansets for one input spanset: it
/// has a `by()` not followed by `coalesce()`.
fn may_split(p: &Pipeline) -> bool {
    p.stages.iter().fold(false, |split, stage| match stage {
        Stage::By(_) => true,
        Stage::Coalesce => false,
        _ => split,
    })
}

fn filter(filter: &SpansetFilter) -> Result<(), ValidateError> {
    let Some(expr) = &filter.expr else {
        return Ok(());
    };
    let t = field_type(expr)?;
    if !t.bool_or_attribute() {
        return fail(format!(
            "a spanset filter must be a boolean expression, found {} in `{{ {expr} }}`",
            t.name()
        ));
    }
    Ok(())
}

/// The aggregates of arithmetic between aggregates take the arguments they take in a
/// [`ScalarFilter`]; numbers and durations are the constants.
fn scalar_expr(expr: &ScalarExpr) -> Result<(), ValidateError> {
    match expr {
        ScalarExpr::Static(s) if static_type(s).is_numeric() => Ok(()),
        ScalarExpr::Static(s) => fail(format!(
            "arithmetic between aggregates takes numbers and durations, found {} {s}",
            static_type(s).name()
        )),
        ScalarExpr::Aggregate(a) => aggregate_args(a),
        ScalarExpr::Pipeline { pipeline: p, aggregate } => {
            pipeline(p, false)?;
            aggregate_args(aggregate)
        }
        ScalarExpr::Binary { lhs, rhs, .. } => {
            scalar_expr(lhs)?;
            scalar_expr(rhs)
        }
    }
}

fn aggregate_args(aggregate: &Aggregate) -> Result<(), ValidateError> {
    let Aggregate { func, args } = aggregate;
    let name = func.name();
    if *func == AggregateFn::Count {
        if !args.is_empty() {
            return fail(format!("count() takes no arguments, found {}", args.len()));
        }
        return Ok(());
    }
    let [arg] = args.as_slice() else {
        return fail(format!("{name}() takes one argument, found {}", args.len()));
    };
    let t = field_type(arg)?;
    if !t.numeric_or_attribute() {
        return fail(format!("{name}() needs a numeric field, found {}", typed(t, arg)));
    }
    if !references_field(arg) {
        return fail(format!(
            "{name}() must reference an attribute or intrinsic, found `{arg}`"
        ));
    }
    Ok(())
}

fn scalar_filter(filter: &ScalarFilter) -> Result<(), ValidateError> {
    aggregate_args(&filter.aggregate)?;
    let func = filter.aggregate.func;
    let name = func.name();
    let t = static_type(&filter.value);
    let ok = if func == AggregateFn::Count {
        matches!(t, Type::Int | Type::Float)
    } else {
        t.is_numeric()
    };
    if !ok {
        let wanted = if func == AggregateFn::Count {
            "a number"
        } else {
            "a number or duration"
        };
        return fail(format!(
            "{name}() compares with {wanted}, found {} {}",
            t.name(),
            filter.value
        ));
    }
    Ok(())
}

/// Every argument must be a bare attribute or intrinsic.
fn fields_only(what: &str, args: &[FieldExpr]) -> Result<(), ValidateError> {
    for arg in args {
        if !arg.is_field() {
            return fail(format!("{what} takes attributes and intrinsics, found `{arg}`"));
        }
    }
    Ok(())
}

fn metrics_stage(metrics: &MetricsStage) -> Result<(), ValidateError> {
    let name = metrics.func.name();
    let args = &metrics.args;
    match metrics.func {
        MetricsFn::Rate | MetricsFn::CountOverTime => {
            if !args.is_empty() {
                return fail(format!("{name}() takes no arguments, found {}", args.len()));
            }
        }
        MetricsFn::MinOverTime
        | MetricsFn::MaxOverTime
        | MetricsFn::AvgOverTime
        | MetricsFn::SumOverTime
        | MetricsFn::HistogramOverTime => {
            let [arg] = args.as_slice() else {
                return fail(format!(
                    "{name}() takes one attribute or intrinsic, found {} arguments",
                    args.len()
                ));
            };
            numeric_field(name, arg)?;
        }
        MetricsFn::QuantileOverTime => {
            let Some((field, quantiles)) = args.split_first() else {
                return fail(
                    "quantile_over_time() needs an attribute and at least one quantile, e.g. quantile_over_time(duration, 0.9)",
                );
            };
            numeric_field(name, field)?;
            if quantiles.is_empty() {
                return fail(format!(
                    "quantile_over_time() needs at least one quantile, e.g. quantile_over_time({field}, 0.9)"
                ));
            }
            for q in quantiles {
                let value = match q {
                    FieldExpr::Static(Static::Int(i)) => *i as f64,
                    FieldExpr::Static(Static::Float(x)) => *x,
                    other => return fail(format!("quantiles must be numbers between 0 and 1, found `{other}`")),
                };
                if !(0.0..=1.0).contains(&value) {
                    return fail(format!("quantile {q} is outside [0, 1]"));
                }
            }
        }
    }
    if let Some(by) = &metrics.by {
        if by.is_empty() {
            return fail("by() needs at least one attribute or intrinsic");
        }
        fields_only("by()", by)?;
    }
    Ok(())
}

/// The argument of a `*_over_time` function: an attribute or a numeric intrinsic.
fn numeric_field(name: &str, arg: &FieldExpr) -> Result<(), ValidateError> {
    if !arg.is_field() {
        return fail(format!("{name}() takes an attribute or intrinsic, found `{arg}`"));
    }
    let t = field_type(arg)?;
    if !t.numeric_or_attribute() {
        return fail(format!(
            "{name}() needs a numeric attribute or intrinsic, found {}",
            typed(t, arg)
        ));
    }
    Ok(())
}

fn compare_stage(compare: &Compare) -> Result<(), ValidateError> {
    filter(&compare.filter)?;
    if ![0, 1, 3].contains(&compare.args.len()) {
        return fail(format!(
            "compare() takes a spanset filter followed by nothing, a top-N count, or a top-N count, start and end; found {} extra arguments",
            compare.args.len()
        ));
    }
    for arg in &compare.args {
        if !matches!(arg, FieldExpr::Static(Static::Int(i)) if *i >= 0) {
            return fail(format!(
                "compare() arguments after the filter must be non-negative integers, found `{arg}`"
            ));
        }
    }
    Ok(())
}

/// How messages name a second stage: `topk()`, `the comparison '>'`, `arithmetic '*'`.
fn second_stage_name(stage: &SecondStage) -> String {
    match stage.func {
        SecondStageFn::TopK | SecondStageFn::BottomK => format!("{}()", stage.func.name()),
        SecondStageFn::Filter(op) => format!("the comparison '{}'", op.symbol()),
        SecondStageFn::Arithmetic { op, .. } => format!("arithmetic '{}'", op.symbol()),
    }
}

fn second_stage(stage: &SecondStage) -> Result<(), ValidateError> {
    let name = stage.func.name();
    match stage.func {
        SecondStageFn::TopK | SecondStageFn::BottomK => match stage.args.as_slice() {
            [FieldExpr::Static(Static::Int(n))] if *n > 0 => Ok(()),
            [arg] => fail(format!("{name}() takes a positive integer, found `{arg}`")),
            args => fail(format!(
                "{name}() takes one positive integer, found {} arguments",
                args.len()
            )),
        },
        SecondStageFn::Filter(op) => {
            if !matches!(
                op,
                BinaryOp::Eq | BinaryOp::Neq | BinaryOp::Lt | BinaryOp::Lte | BinaryOp::Gt | BinaryOp::Gte
            ) {
                return fail(format!("'{name}' cannot compare metrics series"));
            }
            match stage.args.as_slice() {
                [FieldExpr::Static(Static::Int(_) | Static::Float(_) | Static::Duration(_))] => Ok(()),
                _ => fail(format!(
                    "a metrics comparison '{name}' takes a number or duration, found `{}`",
                    list(&stage.args)
                )),
            }
        }
        SecondStageFn::Arithmetic { op, .. } => {
            if !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div) {
                return fail(format!("metrics arithmetic takes '+', '-', '*' or '/', found '{name}'"));
            }
            match stage.args.as_slice() {
                [FieldExpr::Static(Static::Int(_) | Static::Float(_))] => Ok(()),
                _ => fail(format!(
                    "metrics arithmetic '{name}' takes a number, found `{}`",
                    list(&stage.args)
                )),
            }
        }
    }
}

fn list(args: &[FieldExpr]) -> String {
    args.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Metrics arithmetic between queries: each operand a metrics query, `+ - * /` between them.
fn metrics_expr(expr: &MetricsExpr) -> Result<(), ValidateError> {
    match expr {
        MetricsExpr::Query(p) => {
            if p.stages.iter().any(|s| matches!(s, Stage::Compare(_))) {
                return fail(format!("compare() cannot be used in metrics arithmetic, found `({p})`"));
            }
            let has_metrics = p.stages.iter().any(|s| matches!(s, Stage::Metrics(_)));
            if !has_metrics {
                return fail(format!(
                    "each operand of metrics arithmetic must be a metrics query such as '({{ }} | rate())', found `({p})`"
                ));
            }
            pipeline(p, true)
        }
        MetricsExpr::Binary { op, lhs, rhs, stages } => {
            if !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div) {
                return fail(format!(
                    "metrics arithmetic takes '+', '-', '*' or '/', found '{}'",
                    op.symbol()
                ));
            }
            metrics_expr(lhs)?;
            metrics_expr(rhs)?;
            stages.iter().try_for_each(second_stage)
        }
    }
}
