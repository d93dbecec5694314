//! Aggregate filters: aggregates compared with a value or with each other (`count() > 2`,
//! `({ .a } | count()) > ({ .b } | count())`), and constant arithmetic folded as Tempo folds it.

use crate::ast::{
    Aggregate, AggregateFn, BinaryOp, Pipeline, ScalarExpr, ScalarExprFilter, ScalarFilter, Stage, Static,
};
use crate::lexer::Tok;

use super::expr::binary_op;
use super::{Parsed, Parser, comparison_op};

impl Parser {
    // scalar_filter = scalar_expr compare_op scalar_expr, whose left side starts with the
    // aggregate `func` (its name already read)
    pub(super) fn scalar_filter(&mut self, func: AggregateFn, depth: u32) -> Parsed<Stage> {
        let (args, d) = self.call_args(func.name(), depth)?;
        let first = ScalarExpr::Aggregate(Aggregate { func, args });
        let (lhs, d) = self.scalar_expr_rest(first, d, 0, depth)?;
        let Some(op) = comparison_op(self.peek()) else {
            return self.expected(&format!(
                "a comparison operator after '{}()' (aggregates are compared with a value, e.g. 'count() > 2')",
                func.name()
            ));
        };
        self.advance();
        // A constant on the right is folded, as Tempo folds it at parse time (`avg(.x) > 1 - 3`).
        let at = self.i;
        let (rhs, rd) = self.scalar_expr(0, depth + 1, op.symbol())?;
        let d = d.max(rd);
        Ok(match (lhs, fold_scalar(&rhs)) {
            (_, Some(Err(message))) => {
                self.i = at;
                return self.error(message);
            }
            (ScalarExpr::Aggregate(aggregate), Some(Ok(value))) => {
                (Stage::ScalarFilter(ScalarFilter { aggregate, op, value }), d)
            }
            (lhs, _) => (Stage::ScalarExprFilter(ScalarExprFilter { lhs, op, rhs }), d + 1),
        })
    }

    // wrapped_scalar_filter = scalar_expr compare_op scalar_expr, where a primary may be a
    // parenthesised pipeline ending in an aggregate
    pub(super) fn wrapped_scalar_filter(&mut self, depth: u32) -> Parsed<ScalarExprFilter> {
        let (lhs, d) = self.scalar_expr(0, depth, "(")?;
        let Some(op) = comparison_op(self.peek()) else {
            return self.expected("a comparison operator");
        };
        self.advance();
        let (rhs, rd) = self.scalar_expr(0, depth, op.symbol())?;
        if !has_pipeline(&lhs) && !has_pipeline(&rhs) {
            return self.expected("a spanset filter or pipeline");
        }
        Ok((ScalarExprFilter { lhs, op, rhs }, d.max(rd) + 1))
    }

    /// After '(': a pipeline whose last stage is an aggregate without a comparison, then ')'.
    fn wrapped_pipeline_aggregate(&mut self, depth: u32) -> Parsed<ScalarExpr> {
        let (first, mut d) = self.stage(depth)?;
        let mut stages = vec![first];
        loop {
            self.expect(Tok::Pipe, "'|' and an aggregate such as 'count()'")?;
            if let Some(func) = self.peek_ident().and_then(AggregateFn::from_name)
                && *self.peek_at(1) == Tok::LParen
            {
                let at = self.i;
                self.advance();
                let (args, ad) = self.call_args(func.name(), depth)?;
                if *self.peek() == Tok::RParen {
                    self.advance();
                    let pipeline = Box::new(Pipeline { stages });
                    let aggregate = Aggregate { func, args };
                    return Ok((ScalarExpr::Pipeline { pipeline, aggregate }, d.max(ad) + 1));
                }
                self.i = at;
            }
            let (stage, sd) = self.stage(depth)?;
            d = d.max(sd);
            stages.push(stage);
        }
    }

    // scalar_expr = scalar_primary { arith_op scalar_primary }   (precedence climbing)
    fn scalar_expr(&mut self, min_prec: u8, depth: u32, after: &str) -> Parsed<ScalarExpr> {
        self.check_depth(depth)?;
        let (first, d) = self.scalar_primary(depth, after)?;
        self.scalar_expr_rest(first, d, min_prec, depth)
    }

    fn scalar_expr_rest(&mut self, mut lhs: ScalarExpr, mut d: u32, min_prec: u8, depth: u32) -> Parsed<ScalarExpr> {
        while let Some(op) = binary_op(self.peek()).filter(|op| op.is_arithmetic()) {
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.advance();
            let next_min = if op.is_right_associative() { prec } else { prec + 1 };
            let (rhs, rd) = self.scalar_expr(next_min, depth + 1, op.symbol())?;
            d = d.max(rd) + 1;
            self.check_depth(d)?;
            lhs = ScalarExpr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok((lhs, d))
    }

    // scalar_primary = "(" scalar_expr ")" | "(" pipeline "|" aggregate ")" | aggregate | static
    fn scalar_primary(&mut self, depth: u32, after: &str) -> Parsed<ScalarExpr> {
        self.check_depth(depth)?;
        if *self.peek() == Tok::LParen {
            self.advance();
            // Only a '{' starts a wrapped pipeline here: trying one at every '(' as well would
            // make nested parentheses cost exponential time.
            if *self.peek() == Tok::LBrace {
                let open = self.i;
                match self.wrapped_pipeline_aggregate(depth + 1) {
                    Ok(found) => return Ok(found),
                    Err(_) => self.i = open,
                }
            }
            let (expr, d) = self.scalar_expr(0, depth + 1, "(")?;
            self.expect(Tok::RParen, "an operator or ')'")?;
            return Ok((expr, d));
        }
        if let Some(func) = self.peek_ident().and_then(AggregateFn::from_name)
            && *self.peek_at(1) == Tok::LParen
        {
            self.advance();
            let (args, d) = self.call_args(func.name(), depth)?;
            return Ok((ScalarExpr::Aggregate(Aggregate { func, args }), d));
        }
        Ok((ScalarExpr::Static(self.static_value(after)?), 0))
    }
}

fn has_pipeline(expr: &ScalarExpr) -> bool {
    match expr {
        ScalarExpr::Pipeline { .. } => true,
        ScalarExpr::Binary { lhs, rhs, .. } => has_pipeline(lhs) || has_pipeline(rhs),
        ScalarExpr::Static(_) | ScalarExpr::Aggregate(_) => false,
    }
}

/// The value of a constant scalar expression (literals and arithmetic between numbers), or
/// `None` when it has an aggregate.
fn fold_scalar(expr: &ScalarExpr) -> Option<Result<Static, String>> {
    match expr {
        ScalarExpr::Static(s) => Some(Ok(s.clone())),
        ScalarExpr::Aggregate(_) | ScalarExpr::Pipeline { .. } => None,
        ScalarExpr::Binary { op, lhs, rhs } => {
            let l = fold_scalar(lhs)?;
            let r = fold_scalar(rhs)?;
            Some(l.and_then(|l| r.and_then(|r| fold(*op, &l, &r))))
        }
    }
}

/// Constant arithmetic between numbers, as Tempo folds it: integers stay integers (`/`
/// truncates), anything with a float is a float; durations are refused.
pub(super) fn fold(op: BinaryOp, a: &Static, b: &Static) -> Result<Static, String> {
    let sym = op.symbol();
    let float = |s: &Static| match s {
        Static::Int(i) => Some(*i as f64),
        Static::Float(x) => Some(*x),
        _ => None,
    };
    if let (Static::Int(x), Static::Int(y)) = (a, b) {
        let result = match op {
            BinaryOp::Add => x.checked_add(*y),
            BinaryOp::Sub => x.checked_sub(*y),
            BinaryOp::Mul => x.checked_mul(*y),
            BinaryOp::Div | BinaryOp::Mod if *y == 0 => return Err(format!("division by zero in `{a} {sym} {b}`")),
            BinaryOp::Div => x.checked_div(*y),
            BinaryOp::Mod => x.checked_rem(*y),
            BinaryOp::Pow => u32::try_from(*y).ok().and_then(|e| x.checked_pow(e)),
            _ => None,
        };
        return result
            .map(Static::Int)
            .ok_or_else(|| format!("`{a} {sym} {b}` is out of range"));
    }
    let (Some(x), Some(y)) = (float(a), float(b)) else {
        return Err(format!(
            "a duration cannot be used in arithmetic between numbers (`{a} {sym} {b}`)"
        ));
    };
    let result = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div | BinaryOp::Mod if y == 0.0 => return Err(format!("division by zero in `{a} {sym} {b}`")),
        BinaryOp::Mod => x % y,
        BinaryOp::Pow => x.powf(y),
        _ => x / y,
    };
    if result.is_finite() {
        Ok(Static::Float(result))
    } else {
        Err(format!("`{a} {sym} {b}` is out of range"))
    }
}
