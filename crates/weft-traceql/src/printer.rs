//! Canonical TraceQL text for the syntax tree (`Display`).
//!
//! The output parses back to an equal tree, and printing that tree again gives the same text.
//! Canonical form: one space around binary and spanset operators and around `|`; `{ }` for the
//! empty filter and `{ expr }` otherwise; parentheses only where precedence or associativity
//! needs them; the short spelling of intrinsics that have one; strings in double quotes, or in
//! backticks when they contain a backslash (regular expressions stay readable); durations in the
//! largest unit that divides them exactly (`1500ms`, `2m`); floats with a decimal point or an
//! exponent (`1.0`, `1e-7`).

use std::fmt::{self, Display, Formatter, Write};

use crate::ast::{
    Attribute, AttributeScope, FieldExpr, MetricsExpr, Pipeline, Query, ScalarExpr, ScalarExprFilter, SecondStage,
    SecondStageFn, SpansetExpr, SpansetFilter, Stage, Static, UnaryOp,
};
use crate::lexer::is_attribute_char;

/// Binding strength of unary operators: tighter than every binary operator.
const UNARY_PRECEDENCE: u8 = 7;

impl Display for Query {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.math {
            Some(math) => write!(f, "{math}")?,
            None => write!(f, "{}", self.pipeline)?,
        }
        if !self.hints.is_empty() {
            f.write_str(" with(")?;
            for (n, hint) in self.hints.iter().enumerate() {
                if n > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{}={}", hint.key, hint.value)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl Display for Pipeline {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        // Second stages after a metrics function: comparisons follow without '|', and
        // arithmetic with a number wraps what comes before it in parentheses.
        let mut out = String::new();
        for (n, stage) in self.stages.iter().enumerate() {
            match stage {
                Stage::SecondStage(second) if !second.func.is_function() => {
                    out = with_second_stage(out, second);
                }
                _ => {
                    if n > 0 {
                        out.push_str(" | ");
                    }
                    let _ = write!(out, "{stage}");
                }
            }
        }
        f.write_str(&out)
    }
}

/// `expr` followed by a second stage: `expr | topk(5)`, `expr > 10`, `(expr) * 100`,
/// `100 * (expr)`.
fn with_second_stage(expr: String, stage: &SecondStage) -> String {
    let value = stage
        .args
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match stage.func {
        SecondStageFn::TopK | SecondStageFn::BottomK => format!("{expr} | {}({value})", stage.func.name()),
        SecondStageFn::Filter(op) => format!("{expr} {} {value}", op.symbol()),
        SecondStageFn::Arithmetic {
            op,
            scalar_first: false,
        } => format!("({expr}) {} {value}", op.symbol()),
        SecondStageFn::Arithmetic { op, scalar_first: true } => format!("{value} {} ({expr})", op.symbol()),
    }
}

impl Display for MetricsExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&metrics_expr(self, 0, false))
    }
}

/// Prints metrics arithmetic as an operand of an operator with precedence `parent`, on its
/// right side if `right`. Operands that are queries are always parenthesised.
fn metrics_expr(expr: &MetricsExpr, parent: u8, right: bool) -> String {
    match expr {
        MetricsExpr::Query(pipeline) => format!("({pipeline})"),
        MetricsExpr::Binary { op, lhs, rhs, stages } => {
            let prec = op.precedence();
            let core = format!(
                "{} {} {}",
                metrics_expr(lhs, prec, false),
                op.symbol(),
                metrics_expr(rhs, prec, true)
            );
            if stages.is_empty() {
                let parens = prec < parent || (prec == parent && right);
                return if parens { format!("({core})") } else { core };
            }
            let out = stages.iter().fold(core, with_second_stage);
            if parent > 0 { format!("({out})") } else { out }
        }
    }
}

impl Display for ScalarExprFilter {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.lhs, self.op.symbol(), self.rhs)
    }
}

/// Arithmetic is parenthesized only where precedence or associativity needs it, so the printed
/// form parses back to the same tree (a parenthesis right after `|` would read as a spanset).
impl Display for ScalarExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        scalar(f, self, 0, false)
    }
}

/// Prints `e` as an operand of an operator with precedence `parent`, on its right side if
/// `right`.
fn scalar(f: &mut Formatter<'_>, e: &ScalarExpr, parent: u8, right: bool) -> fmt::Result {
    if let ScalarExpr::Binary { op, lhs, rhs } = e {
        let prec = op.precedence();
        let parens = prec < parent || (prec == parent && right != op.is_right_associative());
        if parens {
            f.write_str("(")?;
        }
        scalar(f, lhs, prec, false)?;
        write!(f, " {} ", op.symbol())?;
        scalar(f, rhs, prec, true)?;
        if parens {
            f.write_str(")")?;
        }
        return Ok(());
    }
    scalar_leaf(f, e)
}

fn scalar_leaf(f: &mut Formatter<'_>, e: &ScalarExpr) -> fmt::Result {
    match e {
        ScalarExpr::Static(s) => write!(f, "{s}"),
        ScalarExpr::Aggregate(a) => call(f, a.func.name(), &a.args),
        ScalarExpr::Pipeline { pipeline, aggregate } => {
            write!(f, "({pipeline} | ")?;
            call(f, aggregate.func.name(), &aggregate.args)?;
            f.write_str(")")
        }
        ScalarExpr::Binary { .. } => unreachable!("printed by scalar()"),
    }
}

impl Display for Stage {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Spanset(expr) => write!(f, "{expr}"),
            Stage::ScalarFilter(filter) => {
                call(f, filter.aggregate.func.name(), &filter.aggregate.args)?;
                write!(f, " {} {}", filter.op.symbol(), filter.value)
            }
            Stage::ScalarExprFilter(filter) => write!(f, "{filter}"),
            Stage::By(args) => call(f, "by", args),
            Stage::Select(args) => call(f, "select", args),
            Stage::Coalesce => f.write_str("coalesce()"),
            Stage::Metrics(metrics) => {
                call(f, metrics.func.name(), &metrics.args)?;
                if let Some(by) = &metrics.by {
                    f.write_str(" ")?;
                    call(f, "by ", by)?;
                }
                Ok(())
            }
            Stage::Compare(compare) => {
                write!(f, "compare({}", compare.filter)?;
                for arg in &compare.args {
                    write!(f, ", {arg}")?;
                }
                f.write_str(")")
            }
            Stage::SecondStage(stage) if stage.func.is_function() => call(f, stage.func.name(), &stage.args),
            // Comparisons and arithmetic print around the rest of their pipeline.
            Stage::SecondStage(stage) => f.write_str(&with_second_stage(String::new(), stage)),
        }
    }
}

/// `name(a, b)`.
fn call(f: &mut Formatter<'_>, name: &str, args: &[FieldExpr]) -> fmt::Result {
    write!(f, "{name}(")?;
    for (n, arg) in args.iter().enumerate() {
        if n > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{arg}")?;
    }
    f.write_str(")")
}

impl Display for SpansetExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        spanset(f, self, 0, false)
    }
}

/// Prints `expr` as an operand of an operator with precedence `parent`, on its right side if
/// `right`. All spanset operators are left-associative, so an equal-precedence right operand
/// needs parentheses.
fn spanset(f: &mut Formatter<'_>, expr: &SpansetExpr, parent: u8, right: bool) -> fmt::Result {
    match expr {
        SpansetExpr::Filter(filter) => write!(f, "{filter}"),
        SpansetExpr::Pipeline(pipeline) => write!(f, "({pipeline})"),
        SpansetExpr::Op { op, lhs, rhs } => {
            let prec = op.precedence();
            let parens = prec < parent || (prec == parent && right);
            if parens {
                f.write_str("(")?;
            }
            spanset(f, lhs, prec, false)?;
            write!(f, " {} ", op.symbol())?;
            spanset(f, rhs, prec, true)?;
            if parens {
                f.write_str(")")?;
            }
            Ok(())
        }
    }
}

impl Display for SpansetFilter {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.expr {
            None => f.write_str("{ }"),
            Some(expr) => write!(f, "{{ {expr} }}"),
        }
    }
}

impl Display for FieldExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        field(f, self, 0, false)
    }
}

fn field(f: &mut Formatter<'_>, expr: &FieldExpr, parent: u8, right: bool) -> fmt::Result {
    match expr {
        FieldExpr::Static(value) => write!(f, "{value}"),
        FieldExpr::Intrinsic(intrinsic) => f.write_str(intrinsic.name()),
        FieldExpr::Attribute(attr) => write!(f, "{attr}"),
        FieldExpr::Unary { op, expr } => {
            f.write_str(op.symbol())?;
            // `-(-1)` must not print as `--1`, which would parse back as `1`.
            let negative_literal = *op == UnaryOp::Neg && matches!(**expr, FieldExpr::Static(ref s) if is_negative(s));
            if negative_literal {
                f.write_str("(")?;
                field(f, expr, 0, false)?;
                f.write_str(")")
            } else {
                field(f, expr, UNARY_PRECEDENCE, false)
            }
        }
        FieldExpr::Binary { op, lhs, rhs } => {
            let prec = op.precedence();
            let parens = prec < parent || (prec == parent && right != op.is_right_associative());
            if parens {
                f.write_str("(")?;
            }
            field(f, lhs, prec, false)?;
            write!(f, " {} ", op.symbol())?;
            field(f, rhs, prec, true)?;
            if parens {
                f.write_str(")")?;
            }
            Ok(())
        }
    }
}

fn is_negative(value: &Static) -> bool {
    match value {
        Static::Int(i) => *i < 0,
        Static::Float(x) => x.is_sign_negative(),
        Static::Duration(ns) => *ns < 0,
        _ => false,
    }
}

impl Display for Static {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Static::Str(s) => f.write_str(&quote(s)),
            Static::Int(i) => write!(f, "{i}"),
            // `{:?}` always shows a decimal point or an exponent, so the text lexes as a float.
            Static::Float(x) => write!(f, "{x:?}"),
            Static::Duration(ns) => f.write_str(&duration_to_string(*ns)),
            Static::Bool(b) => write!(f, "{b}"),
            Static::Nil => f.write_str("nil"),
            Static::Status(status) => f.write_str(status.name()),
            Static::Kind(kind) => f.write_str(kind.name()),
        }
    }
}

impl Display for Attribute {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&attribute_to_string(self))
    }
}

/// `span.http.method`, `parent.resource.x`, `span."name with spaces"`.
pub(crate) fn attribute_to_string(attr: &Attribute) -> String {
    let mut out = String::new();
    if attr.parent {
        out.push_str("parent");
        if attr.scope != AttributeScope::Unscoped {
            out.push('.');
        }
    }
    out.push_str(attr.scope.prefix());
    let name = &attr.name;
    let needs_quotes = name.is_empty()
        || !name.chars().all(|c| is_attribute_char(c) && !c.is_control())
        // `.5` would lex as a number.
        || (attr.scope == AttributeScope::Unscoped && name.starts_with(|c: char| c.is_ascii_digit()))
        // `parent.` + `span.x` would lex as the span-scoped parent attribute `x`.
        || (attr.parent
            && attr.scope == AttributeScope::Unscoped
            && (name.starts_with("span.") || name.starts_with("resource.")));
    if needs_quotes {
        out.push_str(&double_quote(name));
    } else {
        out.push_str(name);
    }
    out
}

/// A string literal: backticks when that avoids escaping backslashes, double quotes otherwise.
pub(crate) fn quote(s: &str) -> String {
    if s.contains('\\') && !s.contains('`') && !s.chars().any(char::is_control) {
        format!("`{s}`")
    } else {
        double_quote(s)
    }
}

/// A double-quoted string literal, escaped as the parser reads it back (also for quoted
/// attribute names: `span."a b"`).
pub fn double_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A duration in the largest unit that divides it exactly.
pub(crate) fn duration_to_string(ns: i64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    if ns == 0 {
        return "0s".to_string();
    }
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    let (size, unit) = UNITS
        .iter()
        .find(|(size, _)| abs.is_multiple_of(*size))
        .copied()
        .unwrap_or((1, "ns"));
    format!("{sign}{}{unit}", abs / size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn canonical(q: &str) -> String {
        parse(q).unwrap().to_string()
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(canonical("{}"), "{ }");
        assert_eq!(canonical("{.a=1&&span:name=\"x\"}"), "{ .a = 1 && name = \"x\" }");
        assert_eq!(
            canonical("{ (.a = 1 || .b = 2) && .c = 3 }"),
            "{ .a = 1 || .b = 2 && .c = 3 }"
        );
        assert_eq!(
            canonical("{ .a = 1 || (.b = 2 && .c = 3) }"),
            "{ .a = 1 || (.b = 2 && .c = 3) }"
        );
        assert_eq!(canonical("{ ((.a = 1)) }"), "{ .a = 1 }");
        assert_eq!(canonical("{ duration > 1.5s }"), "{ duration > 1500ms }");
        assert_eq!(canonical("{ .a = 1.0 }"), "{ .a = 1.0 }");
        assert_eq!(canonical("{ .a =~ \"a\\\\d+\" }"), "{ .a =~ `a\\d+` }");
        assert_eq!(canonical("{ span.\"a b\" = 1 }"), "{ span.\"a b\" = 1 }");
        assert_eq!(canonical("{ span.\"ab\" = 1 }"), "{ span.ab = 1 }");
        assert_eq!(canonical("({ .a } && { .b }) > { .c }"), "({ .a } && { .b }) > { .c }");
        assert_eq!(canonical("{ .a } > ({ .b } > { .c })"), "{ .a } > ({ .b } > { .c })");
        assert_eq!(canonical("{ 2 ^ (3 ^ 4) = 1 }"), "{ 2 ^ 3 ^ 4 = 1 }");
        assert_eq!(canonical("{ (2 ^ 3) ^ 4 = 1 }"), "{ (2 ^ 3) ^ 4 = 1 }");
        assert_eq!(canonical("{ -(.a + 1) = 1 }"), "{ -(.a + 1) = 1 }");
        assert_eq!(
            canonical("{ } | rate() by(resource.service.name)"),
            "{ } | rate() by (resource.service.name)"
        );
        assert_eq!(
            canonical("{}|rate() with(sample=0.1,most_recent=true)"),
            "{ } | rate() with(sample=0.1, most_recent=true)"
        );
    }

    #[test]
    fn metrics_second_stages_and_arithmetic() {
        assert_eq!(canonical("{}|rate()>10|topk(5)"), "{ } | rate() > 10 | topk(5)");
        assert_eq!(canonical("({}|rate())*(2+3)"), "({ } | rate()) * 5");
        assert_eq!(canonical("100*({}|rate())"), "100 * ({ } | rate())");
        assert_eq!(canonical("((({}|rate())))"), "{ } | rate()");
        assert_eq!(canonical("({}|rate())|topk(3)"), "{ } | rate() | topk(3)");
        assert_eq!(
            canonical("({.a}|rate())/({}|rate())*100>1"),
            "(({ .a } | rate()) / ({ } | rate())) * 100 > 1"
        );
        assert_eq!(
            canonical("({.a}|rate())-(({.b}|rate())-({.c}|rate()))"),
            "({ .a } | rate()) - (({ .b } | rate()) - ({ .c } | rate()))"
        );
        assert_eq!(canonical("({}|rate())>1s"), "{ } | rate() > 1s");
    }

    #[test]
    fn durations() {
        assert_eq!(duration_to_string(0), "0s");
        assert_eq!(duration_to_string(90_000_000_000), "90s");
        assert_eq!(duration_to_string(-120_000_000_000), "-2m");
        assert_eq!(duration_to_string(1_001), "1001ns");
        assert_eq!(duration_to_string(i64::MIN), "-9223372036854775808ns");
    }
}
