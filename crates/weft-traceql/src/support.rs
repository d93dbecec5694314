//! What the first executor runs. Valid TraceQL outside this set is refused with a message that
//! names the feature, never answered with partial or wrong results.

use crate::Unsupported;
use crate::ast::{FieldExpr, Intrinsic, Pipeline, Query, SpansetExpr, Stage};

/// Checks that the executor supports every feature `query` uses. Call it after
/// [`validate`](crate::validate); the result for an invalid query is unspecified (but it does not
/// panic).
///
/// Not supported, as in Tempo, which parses these and refuses them: `parent.`-scoped attributes
/// and the `parent` intrinsic ("parent not yet supported"), and aggregates compared with or
/// combined by arithmetic with each other (`min(.a) < max(.b)`, `count() + count() = 1`).
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
            Stage::ScalarExprFilter(filter) => {
                return unsupported(format!("comparisons and arithmetic between aggregates (`{filter}`)"));
            }
            Stage::By(args) | Stage::Select(args) => fields(args)?,
            Stage::Coalesce => {}
            Stage::Metrics(metrics) => {
                fields(&metrics.args)?;
                fields(metrics.by.as_deref().unwrap_or_default())?;
            }
            Stage::Compare(compare) => {
                if let Some(expr) = &compare.filter.expr {
                    field(expr)?;
                }
            }
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
        FieldExpr::Intrinsic(Intrinsic::Parent) => unsupported("the parent intrinsic (parent)"),
        FieldExpr::Static(_) | FieldExpr::Intrinsic(_) => Ok(()),
        FieldExpr::Attribute(attr) => {
            if attr.parent {
                return unsupported("parent-scoped attributes (parent.)");
            }
            Ok(())
        }
        FieldExpr::Unary { expr, .. } => field(expr),
        FieldExpr::Binary { lhs, rhs, .. } => {
            field(lhs)?;
            field(rhs)
        }
    }
}
