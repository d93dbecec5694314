//! Metrics arithmetic between queries (`({ } | rate()) / ({ } | count_over_time())`,
//! `(...) * 100`), with comparisons and `topk()` / `bottomk()` after it; numbers fold as they
//! are read.

use crate::ParseError;
use crate::ast::{BinaryOp, FieldExpr, MetricsExpr, SecondStage, SecondStageFn, Stage, Static};
use crate::lexer::Tok;

use super::scalar::fold;
use super::{Parsed, Parser, comparison_op, negate, unwrap_metrics_pipeline};

impl Parser {
    // metrics_query = metrics_sum { compare_op scalar | "|" ( "topk" | "bottomk" ) args }
    pub(super) fn metrics_query(&mut self, depth: u32) -> Parsed<MetricsExpr> {
        let (operand, d) = self.metrics_inner(depth)?;
        match operand {
            Operand::Metrics(expr) => Ok((expr, d)),
            Operand::Scalar(_) => self.expected("an arithmetic operator and a metrics query '({ ... } | rate())'"),
        }
    }

    /// A metrics sum and its trailing comparisons and `topk()`/`bottomk()`, or a folded number.
    fn metrics_inner(&mut self, depth: u32) -> Parsed<Operand> {
        self.check_depth(depth)?;
        let (mut operand, d) = self.metrics_sum(depth)?;
        if let Operand::Metrics(expr) = &mut operand {
            loop {
                if let Some(op) = comparison_op(self.peek()) {
                    self.advance();
                    let value = self.scalar(op.symbol(), depth)?;
                    push_second_stage(
                        expr,
                        SecondStage {
                            func: SecondStageFn::Filter(op),
                            args: vec![FieldExpr::Static(value)],
                        },
                    );
                } else if *self.peek() == Tok::Pipe
                    && matches!(self.peek_at(1), Tok::Ident(w) if w == "topk" || w == "bottomk")
                {
                    self.advance();
                    let (stage, _) = self.function_stage(depth)?;
                    if let Stage::SecondStage(stage) = stage {
                        push_second_stage(expr, stage);
                    }
                } else {
                    break;
                }
            }
        }
        Ok((operand, d))
    }

    // metrics_sum = metrics_product { ( "+" | "-" ) metrics_product }
    fn metrics_sum(&mut self, depth: u32) -> Parsed<Operand> {
        self.metrics_binary(depth, Self::metrics_product, |t| match t {
            Tok::Plus => Some(BinaryOp::Add),
            Tok::Minus => Some(BinaryOp::Sub),
            _ => None,
        })
    }

    // metrics_product = metrics_primary { ( "*" | "/" ) metrics_primary }
    fn metrics_product(&mut self, depth: u32) -> Parsed<Operand> {
        self.metrics_binary(depth, Self::metrics_primary, |t| match t {
            Tok::Star => Some(BinaryOp::Mul),
            Tok::Slash => Some(BinaryOp::Div),
            _ => None,
        })
    }

    /// One left-associative level of metrics arithmetic: `next { op next }`, with the
    /// operators `op_of` recognises.
    fn metrics_binary(
        &mut self,
        depth: u32,
        next: fn(&mut Self, u32) -> Parsed<Operand>,
        op_of: fn(&Tok) -> Option<BinaryOp>,
    ) -> Parsed<Operand> {
        let (mut lhs, mut d) = next(self, depth)?;
        while let Some(op) = op_of(self.peek()) {
            let pos = self.pos();
            self.advance();
            let (rhs, rd) = next(self, depth + 1)?;
            d = d.max(rd) + 1;
            self.check_depth(d)?;
            lhs = combine(op, lhs, rhs).map_err(|message| ParseError {
                line: pos.line,
                column: pos.column,
                message,
            })?;
        }
        Ok((lhs, d))
    }

    // metrics_primary = number | "-" metrics_primary | "(" pipeline ")" | "(" metrics_inner ")"
    fn metrics_primary(&mut self, depth: u32) -> Parsed<Operand> {
        self.check_depth(depth)?;
        match self.peek() {
            Tok::Int(_) | Tok::Float(_) | Tok::Duration(_) => {
                let value = self.static_value("(")?;
                Ok((Operand::Scalar(value), 1))
            }
            Tok::Minus => {
                let pos = self.pos();
                self.advance();
                let (operand, d) = self.metrics_primary(depth + 1)?;
                match operand {
                    Operand::Scalar(value) => match negate(&value) {
                        Some(value) => Ok((Operand::Scalar(value), d)),
                        None => Err(ParseError {
                            line: pos.line,
                            column: pos.column,
                            message: "negated value is out of range".to_owned(),
                        }),
                    },
                    Operand::Metrics(_) => Err(ParseError {
                        line: pos.line,
                        column: pos.column,
                        message: "unary '-' cannot negate a metrics query; write '-1 * (...)'".to_owned(),
                    }),
                }
            }
            Tok::LParen => {
                let open = self.i;
                self.advance();
                // A parenthesised pipeline ending in a metrics function: `({ } | rate())`.
                if matches!(self.peek(), Tok::LBrace | Tok::LParen)
                    && let Ok((pipeline, d)) = self.pipeline(depth + 1)
                    && *self.peek() == Tok::RParen
                {
                    // Validation says so if it has no metrics function.
                    self.advance();
                    let pipeline = unwrap_metrics_pipeline(pipeline);
                    return Ok((Operand::Metrics(MetricsExpr::Query(pipeline)), d + 1));
                }
                // A parenthesised metrics expression or number: `(({ } | rate()) * 2)`, `(1 + 2)`.
                self.i = open + 1;
                let (operand, d) = self.metrics_inner(depth + 1)?;
                self.expect(Tok::RParen, "an operator or ')'")?;
                Ok((operand, d + 1))
            }
            _ => self.expected("a number or a parenthesised metrics query such as '({ } | rate())'"),
        }
    }

    /// A number after a metrics comparison, constant arithmetic folded: `> 10`, `> 2 * 5`, `> 1s`.
    pub(super) fn scalar(&mut self, after: &str, depth: u32) -> Result<Static, ParseError> {
        let pos = self.pos();
        if !matches!(
            self.peek(),
            Tok::Int(_) | Tok::Float(_) | Tok::Duration(_) | Tok::Minus | Tok::LParen
        ) {
            return self.expected(&format!("a number after '{after}'"));
        }
        let (operand, _) = self.metrics_sum(depth + 1)?;
        match operand {
            Operand::Scalar(value) => Ok(value),
            Operand::Metrics(_) => Err(ParseError {
                line: pos.line,
                column: pos.column,
                message: format!("expected a number after '{after}', found a metrics query"),
            }),
        }
    }
}

/// An operand of metrics arithmetic while parsing: a metrics query, or a number (folded).
enum Operand {
    Metrics(MetricsExpr),
    Scalar(Static),
}

fn push_second_stage(expr: &mut MetricsExpr, stage: SecondStage) {
    match expr {
        MetricsExpr::Query(pipeline) => pipeline.stages.push(Stage::SecondStage(stage)),
        MetricsExpr::Binary { stages, .. } => stages.push(stage),
    }
}

/// `lhs op rhs` for metrics arithmetic: numbers fold, a number and a metrics query become a
/// second stage of the query, two metrics queries a [`MetricsExpr::Binary`].
fn combine(op: BinaryOp, lhs: Operand, rhs: Operand) -> Result<Operand, String> {
    let arithmetic = |mut expr: MetricsExpr, value: Static, scalar_first: bool| {
        if matches!(value, Static::Duration(_)) {
            return Err(format!(
                "a duration cannot be used in metrics arithmetic ('{}'); use a number",
                op.symbol()
            ));
        }
        push_second_stage(
            &mut expr,
            SecondStage {
                func: SecondStageFn::Arithmetic { op, scalar_first },
                args: vec![FieldExpr::Static(value)],
            },
        );
        Ok(Operand::Metrics(expr))
    };
    match (lhs, rhs) {
        (Operand::Scalar(a), Operand::Scalar(b)) => Ok(Operand::Scalar(fold(op, &a, &b)?)),
        (Operand::Metrics(expr), Operand::Scalar(value)) => arithmetic(expr, value, false),
        (Operand::Scalar(value), Operand::Metrics(expr)) => arithmetic(expr, value, true),
        (Operand::Metrics(lhs), Operand::Metrics(rhs)) => Ok(Operand::Metrics(MetricsExpr::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
            stages: Vec::new(),
        })),
    }
}
