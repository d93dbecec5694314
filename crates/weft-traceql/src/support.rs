//! What the first executor runs. Valid TraceQL outside this set is refused with a message that
//! names the feature, never answered with partial or wrong results.

use crate::Unsupported;
use crate::ast::{FieldExpr, Intrinsic, Pipeline, Query, SpansetExpr, Stage, UnaryOp};

/// Checks that the executor supports every feature `query` uses. Call it after
/// [`validate`](crate::validate); the result for an invalid query is unspecified (but it does not
/// panic).
///
/// Not supported: `compare()`, the `nestedSet*` intrinsics, `parent.`-scoped attributes, and
/// arithmetic that involves more than one attribute or intrinsic (`span.a + span.b > 1`,
/// `span.a * 2 = span.b`).
///
/// # Query hints
///
/// Every hint `with(key=value, ...)` is accepted, as Tempo accepts any name and value (its
/// validator checks none; a hint it does not know, or of an unexpected type, is ignored). What
/// weft does with each:
///
/// | hint | effect in weft |
/// |---|---|
/// | `sample`, `trace_sample`, `span_sample` | ignored: weft evaluates every span exactly, so a sampled query returns the exact answer |
/// | `most_recent` | nothing to do: search always returns the most recent matching traces (by start time) first, whatever its value |
/// | `exemplars` | ignored |
/// | any other name (`job_size`, `debug`, ...) | ignored, as Tempo ignores unknown names and its unsafe hints by default |
///
/// Only a hint given twice is refused (by [`validate`](crate::validate)).
pub fn supported(query: &Query) -> Result<(), Unsupported> {
    query.pipelines().into_iter().try_for_each(pipeline)
}

fn unsupported(feature: impl Into<String>) -> Result<(), Unsupported> {
    Err(Unsupported {
        feature: feature.into(),
    })
}

fn pipeline(pipeline: &Pipeline) -> Result<(), Unsupported> {
    for stage in &pipeline.stages {
        match stage {
            Stage::Spanset(expr) => spanset(expr)?,
            Stage::ScalarFilter(filter) => fields(&filter.aggregate.args)?,
            Stage::By(args) | Stage::Select(args) => fields(args)?,
            Stage::Coalesce => {}
            Stage::Metrics(metrics) => {
                fields(&metrics.args)?;
                fields(metrics.by.as_deref().unwrap_or_default())?;
            }
            Stage::Compare(_) => return unsupported("compare()"),
            Stage::SecondStage(_) => {}
        }
    }
    Ok(())
}

fn spanset(expr: &SpansetExpr) -> Result<(), Unsupported> {
    match expr {
        SpansetExpr::Filter(filter) => match &filter.expr {
            Some(expr) => field(expr),
            None => Ok(()),
        },
        SpansetExpr::Op { lhs, rhs, .. } => {
            spanset(lhs)?;
            spanset(rhs)
        }
        SpansetExpr::Pipeline(inner) => pipeline(inner),
    }
}

fn fields(args: &[FieldExpr]) -> Result<(), Unsupported> {
    args.iter().try_for_each(field)
}

fn field(expr: &FieldExpr) -> Result<(), Unsupported> {
    match expr {
        FieldExpr::Static(_) => Ok(()),
        FieldExpr::Intrinsic(intrinsic) => match intrinsic {
            Intrinsic::NestedSetLeft | Intrinsic::NestedSetRight | Intrinsic::NestedSetParent => {
                unsupported(format!("the {} intrinsic", intrinsic.name()))
            }
            _ => Ok(()),
        },
        FieldExpr::Attribute(attr) => {
            if attr.parent {
                return unsupported("parent-scoped attributes (parent.)");
            }
            Ok(())
        }
        FieldExpr::Unary { expr: operand, .. } => {
            if is_arithmetic(expr) && count_fields(expr) > 1 {
                return unsupported(format!("arithmetic between two attributes (`{expr}`)"));
            }
            field(operand)
        }
        FieldExpr::Binary { op, lhs, rhs } => {
            let arithmetic = op.is_arithmetic() || (op.is_comparison() && (is_arithmetic(lhs) || is_arithmetic(rhs)));
            if arithmetic && count_fields(expr) > 1 {
                return unsupported(format!("arithmetic between two attributes (`{expr}`)"));
            }
            field(lhs)?;
            field(rhs)
        }
    }
}

/// True for `a + b`-like nodes and for negation of a non-literal.
fn is_arithmetic(expr: &FieldExpr) -> bool {
    match expr {
        FieldExpr::Binary { op, .. } => op.is_arithmetic(),
        FieldExpr::Unary { op, .. } => *op == UnaryOp::Neg,
        _ => false,
    }
}

/// How many attribute or intrinsic references `expr` contains.
fn count_fields(expr: &FieldExpr) -> usize {
    match expr {
        FieldExpr::Static(_) => 0,
        FieldExpr::Intrinsic(_) | FieldExpr::Attribute(_) => 1,
        FieldExpr::Unary { expr, .. } => count_fields(expr),
        FieldExpr::Binary { lhs, rhs, .. } => count_fields(lhs) + count_fields(rhs),
    }
}
