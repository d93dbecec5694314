//! Spanset expressions (filters joined by `&&`, `||` and the structural operators) and field
//! expressions inside `{ }`, both by precedence climbing.

use crate::ParseError;
use crate::ast::{BinaryOp, FieldExpr, Intrinsic, SpansetExpr, SpansetFilter, SpansetOp, Stage, Static, UnaryOp};
use crate::lexer::Tok;

use super::{Parsed, Parser, negate};

impl Parser {
    // spanset_expr = spanset_operand { spanset_op spanset_operand }   (precedence climbing)
    pub(super) fn spanset_expr(&mut self, min_prec: u8, depth: u32) -> Parsed<SpansetExpr> {
        self.check_depth(depth)?;
        let (mut lhs, mut d) = self.spanset_operand(depth, None)?;
        while let Some(op) = spanset_op(self.peek()) {
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.advance();
            let (rhs, rd) = self.spanset_expr_after(prec + 1, depth + 1, op)?;
            d = d.max(rd) + 1;
            self.check_depth(d)?;
            lhs = SpansetExpr::Op {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok((lhs, d))
    }

    fn spanset_expr_after(&mut self, min_prec: u8, depth: u32, op: SpansetOp) -> Parsed<SpansetExpr> {
        if !matches!(self.peek(), Tok::LBrace | Tok::LParen) {
            return self.spanset_operand(depth, Some(op));
        }
        self.spanset_expr(min_prec, depth)
    }

    // spanset_operand = spanset_filter | "(" pipeline ")"
    fn spanset_operand(&mut self, depth: u32, after: Option<SpansetOp>) -> Parsed<SpansetExpr> {
        self.check_depth(depth)?;
        match self.peek() {
            Tok::LBrace => {
                let (filter, d) = self.filter(depth)?;
                Ok((SpansetExpr::Filter(filter), d))
            }
            Tok::LParen => {
                self.advance();
                if !matches!(self.peek(), Tok::LBrace | Tok::LParen) {
                    return self.expected("a spanset filter '{ ... }' after '('");
                }
                let (mut pipeline, d) = self.pipeline(depth + 1)?;
                self.expect(Tok::RParen, "'|', a spanset operator or ')'")?;
                // Parentheses around a plain spanset expression only group.
                if let [Stage::Spanset(_)] = pipeline.stages.as_slice()
                    && let Some(Stage::Spanset(expr)) = pipeline.stages.pop()
                {
                    return Ok((expr, d));
                }
                self.check_depth(d + 1)?;
                Ok((SpansetExpr::Pipeline(Box::new(pipeline)), d + 1))
            }
            _ => match after {
                Some(op) => self.expected(&format!("a spanset filter '{{ ... }}' after '{}'", op.symbol())),
                None => self.expected("a spanset filter '{ ... }'"),
            },
        }
    }

    // spanset_filter = "{" [ field_expr ] "}"
    pub(super) fn filter(&mut self, depth: u32) -> Parsed<SpansetFilter> {
        self.expect(Tok::LBrace, "'{'")?;
        if *self.peek() == Tok::RBrace {
            self.advance();
            return Ok((SpansetFilter { expr: None }, 1));
        }
        let (expr, d) = self.field_expr(0, depth + 1, Some("{"))?;
        if *self.peek() != Tok::RBrace {
            return self.expected("an operator or '}'");
        }
        self.advance();
        Ok((SpansetFilter { expr: Some(expr) }, d + 1))
    }

    // field_expr = unary { binary_op unary }   (precedence climbing)
    pub(super) fn field_expr(&mut self, min_prec: u8, depth: u32, after: Option<&str>) -> Parsed<FieldExpr> {
        self.check_depth(depth)?;
        let (mut lhs, mut d) = self.unary(depth, after)?;
        while let Some(op) = binary_op(self.peek()) {
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            self.advance();
            let next_min = if op.is_right_associative() { prec } else { prec + 1 };
            let (rhs, rd) = self.field_expr(next_min, depth + 1, Some(op.symbol()))?;
            d = d.max(rd) + 1;
            self.check_depth(d)?;
            lhs = FieldExpr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok((lhs, d))
    }

    // unary = ( "-" | "!" ) unary | primary
    fn unary(&mut self, depth: u32, after: Option<&str>) -> Parsed<FieldExpr> {
        self.check_depth(depth)?;
        let op = match self.peek() {
            Tok::Minus => UnaryOp::Neg,
            Tok::Not => UnaryOp::Not,
            _ => return self.primary(depth, after),
        };
        self.advance();
        let (expr, d) = self.unary(depth + 1, Some(op.symbol()))?;
        if op == UnaryOp::Neg
            && let FieldExpr::Static(value) = &expr
            && let Some(negated) = negate(value)
        {
            return Ok((FieldExpr::Static(negated), d));
        }
        self.check_depth(d + 1)?;
        Ok((
            FieldExpr::Unary {
                op,
                expr: Box::new(expr),
            },
            d + 1,
        ))
    }

    // primary = "(" field_expr ")" | static | intrinsic | attribute
    fn primary(&mut self, depth: u32, after: Option<&str>) -> Parsed<FieldExpr> {
        let expr = match self.peek() {
            Tok::LParen => {
                self.advance();
                let (expr, d) = self.field_expr(0, depth + 1, Some("("))?;
                self.expect(Tok::RParen, "an operator or ')'")?;
                return Ok((expr, d));
            }
            Tok::Str(s) => FieldExpr::Static(Static::Str(s.clone())),
            Tok::Int(i) => FieldExpr::Static(Static::Int(*i)),
            Tok::Float(f) => FieldExpr::Static(Static::Float(*f)),
            Tok::Duration(ns) => FieldExpr::Static(Static::Duration(*ns)),
            Tok::Attr(attr) => FieldExpr::Attribute(attr.clone()),
            Tok::Ident(word) => match Static::from_keyword(word) {
                Some(value) => FieldExpr::Static(value),
                None => match Intrinsic::from_name(word) {
                    Some(intrinsic) => FieldExpr::Intrinsic(intrinsic),
                    None => return Err(self.unknown_word()),
                },
            },
            _ => return Err(self.no_value(after)),
        };
        self.advance();
        Ok((expr, 1))
    }
}

impl Parser {
    // The error paths of `primary` live here, out of its stack frame: `primary` is on the
    // recursion path of parenthesised expressions.

    #[cold]
    fn unknown_word(&self) -> ParseError {
        let word = self.peek_ident().unwrap_or_default();
        let message = if word.contains(':') {
            format!("unknown intrinsic '{word}'")
        } else {
            format!(
                "unknown identifier '{word}' (attributes are written '.{word}' or with a scope, e.g. 'span.{word}')"
            )
        };
        self.error_here(message)
    }

    #[cold]
    fn no_value(&self, after: Option<&str>) -> ParseError {
        match after {
            Some(op) if op != "{" && op != "(" => self.expected_here(&format!("a value after '{op}'")),
            _ => self.expected_here("a value, attribute or intrinsic"),
        }
    }
}

pub(super) fn binary_op(tok: &Tok) -> Option<BinaryOp> {
    Some(match tok {
        Tok::Or => BinaryOp::Or,
        Tok::And => BinaryOp::And,
        Tok::Eq => BinaryOp::Eq,
        Tok::Neq => BinaryOp::Neq,
        Tok::Lt => BinaryOp::Lt,
        Tok::Lte => BinaryOp::Lte,
        Tok::Gt => BinaryOp::Gt,
        Tok::Gte => BinaryOp::Gte,
        Tok::Re => BinaryOp::Regex,
        Tok::Nre => BinaryOp::NotRegex,
        Tok::Plus => BinaryOp::Add,
        Tok::Minus => BinaryOp::Sub,
        Tok::Star => BinaryOp::Mul,
        Tok::Slash => BinaryOp::Div,
        Tok::Percent => BinaryOp::Mod,
        Tok::Caret => BinaryOp::Pow,
        _ => return None,
    })
}

fn spanset_op(tok: &Tok) -> Option<SpansetOp> {
    Some(match tok {
        Tok::And => SpansetOp::And,
        Tok::Or => SpansetOp::Or,
        Tok::Gt => SpansetOp::Child,
        Tok::Desc => SpansetOp::Descendant,
        Tok::Lt => SpansetOp::Parent,
        Tok::Anc => SpansetOp::Ancestor,
        Tok::Tilde => SpansetOp::Sibling,
        Tok::NotChild => SpansetOp::NotChild,
        Tok::NotDesc => SpansetOp::NotDescendant,
        Tok::NotParent => SpansetOp::NotParent,
        Tok::NotAnc => SpansetOp::NotAncestor,
        Tok::Nre => SpansetOp::NotSibling,
        Tok::UnionChild => SpansetOp::UnionChild,
        Tok::UnionDesc => SpansetOp::UnionDescendant,
        Tok::UnionParent => SpansetOp::UnionParent,
        Tok::UnionAnc => SpansetOp::UnionAncestor,
        Tok::UnionSibling => SpansetOp::UnionSibling,
        _ => return None,
    })
}
