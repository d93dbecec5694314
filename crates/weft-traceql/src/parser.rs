//! A recursive-descent parser with precedence climbing for the two operator grammars (field
//! expressions inside `{ }`, and spanset expressions between filters). The grammar and the
//! precedence tables are in the crate docs.

use crate::ParseError;
use crate::ast::{
    Aggregate, AggregateFn, BinaryOp, Compare, FieldExpr, Hint, Intrinsic, MetricsExpr, MetricsFn, MetricsStage,
    Pipeline, Query, ScalarExpr, ScalarExprFilter, ScalarFilter, SecondStage, SecondStageFn, SpansetExpr,
    SpansetFilter, SpansetOp, Stage, Static, UnaryOp,
};
use crate::lexer::{Pos, Tok, Token, tokenize};

/// The deepest nesting accepted, counted both as parser recursion and as syntax-tree depth, so
/// that neither parsing nor walking the tree (printing, validating, dropping) can exhaust the
/// stack.
pub const MAX_DEPTH: u32 = 128;

/// Parses a TraceQL query.
pub fn parse(input: &str) -> Result<Query, ParseError> {
    let tokens = tokenize(input)?;
    let mut parser = Parser { tokens, i: 0 };
    parser.query()
}

struct Parser {
    /// Always ends with `Tok::Eof`.
    tokens: Vec<Token>,
    i: usize,
}

type Parsed<T> = Result<(T, u32), ParseError>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.token(0).tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.token(n).tok
    }

    fn token(&self, n: usize) -> &Token {
        let last = self.tokens.len() - 1;
        &self.tokens[(self.i + n).min(last)]
    }

    fn pos(&self) -> Pos {
        self.token(0).pos
    }

    /// Moves to the next token; stays on the final `Tok::Eof`.
    fn advance(&mut self) {
        if self.i + 1 < self.tokens.len() {
            self.i += 1;
        }
    }

    /// An error at the current token.
    fn error_here(&self, message: impl Into<String>) -> ParseError {
        let pos = self.pos();
        ParseError {
            line: pos.line,
            column: pos.column,
            message: message.into(),
        }
    }

    fn error<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(self.error_here(message))
    }

    /// An error naming what was expected and the current token.
    fn expected_here(&self, what: &str) -> ParseError {
        self.error_here(format!("expected {what}, found {}", self.peek().describe()))
    }

    fn expected<T>(&self, what: &str) -> Result<T, ParseError> {
        Err(self.expected_here(what))
    }

    /// Consumes `tok` or fails with "expected {what}".
    fn expect(&mut self, tok: Tok, what: &str) -> Result<(), ParseError> {
        if *self.peek() == tok {
            self.advance();
            Ok(())
        } else {
            self.expected(what)
        }
    }

    fn check_depth(&self, depth: u32) -> Result<(), ParseError> {
        if depth > MAX_DEPTH {
            return self.error(format!("query nests too deeply (more than {MAX_DEPTH} levels)"));
        }
        Ok(())
    }

    fn peek_ident(&self) -> Option<&str> {
        match self.peek() {
            Tok::Ident(word) => Some(word),
            _ => None,
        }
    }

    // query = ( pipeline | metrics_query ) [ hints ] EOF
    fn query(&mut self) -> Result<Query, ParseError> {
        let start = self.i;
        let plain = self.pipeline(0);
        let plain_end = self.i;
        let complete = plain.is_ok() && self.at_query_end();
        if let Ok((pipeline, _)) = &plain
            && complete
        {
            let pipeline = unwrap_metrics_pipeline(pipeline.clone());
            return self.finish_query(pipeline, None);
        }
        // Not a plain pipeline: maybe metrics arithmetic, `({ } | rate()) * 100`.
        self.i = start;
        let metrics = self.metrics_query(0);
        match metrics {
            Ok((expr, _)) if self.at_query_end() => match expr {
                MetricsExpr::Query(pipeline) => self.finish_query(pipeline, None),
                math => self.finish_query(math.union_pipeline(), Some(math)),
            },
            metrics => {
                // Maybe pipelines' aggregates compared or combined, as Tempo parses them:
                // `({ .a } | count()) > ({ .b } | count())`.
                self.i = start;
                if let Ok((filter, _)) = self.wrapped_scalar_filter(0)
                    && self.at_query_end()
                {
                    let stages = vec![Stage::ScalarExprFilter(filter)];
                    return self.finish_query(Pipeline { stages }, None);
                }
                let metrics_error = match metrics {
                    Ok(_) => self.expected_here("an arithmetic operator, a comparison, '|' or end of query"),
                    Err(e) => e,
                };
                let plain_error = match plain {
                    Ok(_) => {
                        self.i = plain_end;
                        self.expected_here("'|' or end of query")
                    }
                    Err(e) => e,
                };
                // The error further into the query. At the same place, the metrics one when the
                // query starts like metrics arithmetic or the pipeline stopped at an operator.
                let (m, p) = (
                    (metrics_error.line, metrics_error.column),
                    (plain_error.line, plain_error.column),
                );
                let metrics_like = matches!(
                    self.tokens[start].tok,
                    Tok::Int(_) | Tok::Float(_) | Tok::Duration(_) | Tok::Minus
                ) || plain_error.message.starts_with("expected '|' or end of query");
                let further = m > p || (m == p && metrics_like);
                Err(if further { metrics_error } else { plain_error })
            }
        }
    }

    fn at_query_end(&self) -> bool {
        *self.peek() == Tok::Eof || self.peek_ident() == Some("with")
    }

    // [ hints ] EOF
    fn finish_query(&mut self, pipeline: Pipeline, math: Option<MetricsExpr>) -> Result<Query, ParseError> {
        let hints = if self.peek_ident() == Some("with") {
            self.hints()?
        } else {
            Vec::new()
        };
        if *self.peek() != Tok::Eof {
            let what = if hints.is_empty() {
                "'|' or end of query"
            } else {
                "end of query"
            };
            return self.expected(what);
        }
        Ok(Query { pipeline, hints, math })
    }

    // pipeline = stage { "|" stage | metrics_filter }
    fn pipeline(&mut self, depth: u32) -> Parsed<Pipeline> {
        self.check_depth(depth)?;
        let (first, mut d) = self.stage(depth)?;
        let mut stages = vec![first];
        loop {
            if *self.peek() == Tok::Pipe {
                self.advance();
                let (stage, sd) = self.stage(depth)?;
                d = d.max(sd);
                stages.push(stage);
            } else if let Some(op) = comparison_op(self.peek())
                && matches!(
                    stages.last(),
                    Some(Stage::Metrics(_) | Stage::Compare(_) | Stage::SecondStage(_))
                )
            {
                // `{ } | rate() > 10`: a comparison on the series, without a '|'.
                self.advance();
                let value = self.scalar(op.symbol(), depth)?;
                stages.push(Stage::SecondStage(SecondStage {
                    func: SecondStageFn::Filter(op),
                    args: vec![FieldExpr::Static(value)],
                }));
            } else {
                break;
            }
        }
        Ok((Pipeline { stages }, d))
    }

    // metrics_query = metrics_sum { compare_op scalar | "|" ( "topk" | "bottomk" ) args }
    fn metrics_query(&mut self, depth: u32) -> Parsed<MetricsExpr> {
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
    fn scalar(&mut self, after: &str, depth: u32) -> Result<Static, ParseError> {
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

    fn stage(&mut self, depth: u32) -> Parsed<Stage> {
        if matches!(self.peek(), Tok::LBrace | Tok::LParen) {
            let (expr, d) = self.spanset_expr(0, depth)?;
            return Ok((Stage::Spanset(expr), d));
        }
        self.function_stage(depth)
    }

    // Kept out of `stage`, which is on the recursion path of nested pipelines: its locals would
    // otherwise be paid for at every level.
    fn function_stage(&mut self, depth: u32) -> Parsed<Stage> {
        let Some(name) = self.peek_ident().map(str::to_owned) else {
            return self.expected("a spanset filter '{ ... }' or a pipeline function");
        };
        let known = AggregateFn::from_name(&name).is_some()
            || MetricsFn::from_name(&name).is_some()
            || matches!(
                name.as_str(),
                "by" | "select" | "coalesce" | "compare" | "topk" | "bottomk"
            );
        if !known {
            if *self.peek_at(1) == Tok::LParen {
                return self.error(format!("unknown pipeline function '{name}'"));
            }
            return self.expected("a spanset filter '{ ... }' or a pipeline function");
        }
        self.advance();
        if *self.peek() != Tok::LParen {
            return self.expected(&format!("'(' after '{name}'"));
        }
        if let Some(func) = AggregateFn::from_name(&name) {
            return self.scalar_filter(func, depth);
        }
        if let Some(func) = MetricsFn::from_name(&name) {
            let (args, mut d) = self.call_args(&name, depth)?;
            let mut by = None;
            if self.peek_ident() == Some("by") {
                self.advance();
                let (list, bd) = self.call_args("by", depth)?;
                d = d.max(bd);
                by = Some(list);
            }
            return Ok((Stage::Metrics(MetricsStage { func, args, by }), d));
        }
        match name.as_str() {
            "by" => {
                let (args, d) = self.call_args(&name, depth)?;
                Ok((Stage::By(args), d))
            }
            "select" => {
                let (args, d) = self.call_args(&name, depth)?;
                Ok((Stage::Select(args), d))
            }
            "coalesce" => {
                self.advance();
                self.expect(Tok::RParen, "')' after 'coalesce('")?;
                Ok((Stage::Coalesce, 1))
            }
            "compare" => self.compare(depth),
            _ => {
                let func = if name == "topk" {
                    SecondStageFn::TopK
                } else {
                    SecondStageFn::BottomK
                };
                let (args, d) = self.call_args(&name, depth)?;
                Ok((Stage::SecondStage(SecondStage { func, args }), d))
            }
        }
    }

    // scalar_filter = scalar_expr compare_op scalar_expr, whose left side starts with the
    // aggregate `func` (its name already read)
    fn scalar_filter(&mut self, func: AggregateFn, depth: u32) -> Parsed<Stage> {
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
    fn wrapped_scalar_filter(&mut self, depth: u32) -> Parsed<ScalarExprFilter> {
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

    // compare = "compare" "(" spanset_filter { "," field_expr } ")"
    fn compare(&mut self, depth: u32) -> Parsed<Stage> {
        self.advance();
        if *self.peek() != Tok::LBrace {
            return self.expected("a spanset filter '{ ... }' as the first argument of compare()");
        }
        let (filter, mut d) = self.filter(depth + 1)?;
        let mut args = Vec::new();
        while *self.peek() == Tok::Comma {
            self.advance();
            let (arg, ad) = self.field_expr(0, depth + 1, Some(","))?;
            d = d.max(ad);
            args.push(arg);
        }
        self.expect(Tok::RParen, "',' or ')' in the arguments of compare(")?;
        Ok((Stage::Compare(Compare { filter, args }), d + 1))
    }

    // call_args = "(" [ field_expr { "," field_expr } ] ")"
    fn call_args(&mut self, name: &str, depth: u32) -> Parsed<Vec<FieldExpr>> {
        self.expect(Tok::LParen, &format!("'(' after '{name}'"))?;
        let mut args = Vec::new();
        let mut d = 0;
        if *self.peek() == Tok::RParen {
            self.advance();
            return Ok((args, 1));
        }
        let mut after = None;
        loop {
            let (arg, ad) = self.field_expr(0, depth + 1, after)?;
            d = d.max(ad);
            args.push(arg);
            match self.peek() {
                Tok::Comma => {
                    self.advance();
                    after = Some(",");
                }
                Tok::RParen => {
                    self.advance();
                    return Ok((args, d + 1));
                }
                _ => return self.expected(&format!("an operator, ',' or ')' in the arguments of '{name}('")),
            }
        }
    }

    // hints = "with" "(" ident "=" static { "," ident "=" static } ")"
    fn hints(&mut self) -> Result<Vec<Hint>, ParseError> {
        self.advance();
        self.expect(Tok::LParen, "'(' after 'with'")?;
        let mut hints = Vec::new();
        loop {
            let Some(key) = self.peek_ident().map(str::to_owned) else {
                return self.expected("a hint name such as 'sample'");
            };
            self.advance();
            self.expect(Tok::Eq, &format!("'=' after hint name '{key}'"))?;
            let value = self.static_value("=")?;
            hints.push(Hint { key, value });
            match self.peek() {
                Tok::Comma => {
                    self.advance();
                }
                Tok::RParen => {
                    self.advance();
                    return Ok(hints);
                }
                _ => return self.expected("',' or ')' in with(...)"),
            }
        }
    }

    /// A literal, with an optional minus before numbers and durations.
    fn static_value(&mut self, after: &str) -> Result<Static, ParseError> {
        let negative = *self.peek() == Tok::Minus;
        if negative {
            self.advance();
        }
        let value = match self.peek() {
            Tok::Int(i) => Static::Int(*i),
            Tok::Float(f) => Static::Float(*f),
            Tok::Duration(ns) => Static::Duration(*ns),
            Tok::Str(s) if !negative => Static::Str(s.clone()),
            Tok::Ident(word) if !negative => match Static::from_keyword(word) {
                Some(value) => value,
                None => return self.expected(&format!("a value after '{after}'")),
            },
            _ if negative => return self.expected("a number or duration after '-'"),
            _ => return self.expected(&format!("a value after '{after}'")),
        };
        self.advance();
        if negative {
            return match negate(&value) {
                Some(value) => Ok(value),
                None => self.error("negated value is out of range"),
            };
        }
        Ok(value)
    }

    // spanset_expr = spanset_operand { spanset_op spanset_operand }   (precedence climbing)
    fn spanset_expr(&mut self, min_prec: u8, depth: u32) -> Parsed<SpansetExpr> {
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
    fn filter(&mut self, depth: u32) -> Parsed<SpansetFilter> {
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
    fn field_expr(&mut self, min_prec: u8, depth: u32, after: Option<&str>) -> Parsed<FieldExpr> {
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

/// `-value` for numbers and durations; `None` for other literals or on overflow.
fn negate(value: &Static) -> Option<Static> {
    match value {
        Static::Int(i) => i.checked_neg().map(Static::Int),
        Static::Float(f) => Some(Static::Float(-f)),
        Static::Duration(ns) => ns.checked_neg().map(Static::Duration),
        _ => None,
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
fn fold(op: BinaryOp, a: &Static, b: &Static) -> Result<Static, String> {
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

/// `({ } | rate())` and `({ } | rate()) | topk(2)` at the start of a pipeline are the metrics
/// pipeline itself: the parentheses only group.
fn unwrap_metrics_pipeline(mut pipeline: Pipeline) -> Pipeline {
    loop {
        let wrapped = matches!(
            pipeline.stages.first(),
            Some(Stage::Spanset(SpansetExpr::Pipeline(inner))) if has_metrics(inner)
        ) && pipeline.stages[1..].iter().all(|s| matches!(s, Stage::SecondStage(_)));
        if !wrapped {
            return pipeline;
        }
        let rest = pipeline.stages.split_off(1);
        match pipeline.stages.pop() {
            Some(Stage::Spanset(SpansetExpr::Pipeline(inner))) => {
                pipeline = *inner;
                pipeline.stages.extend(rest);
            }
            _ => return pipeline,
        }
    }
}

/// Whether the pipeline has a metrics function (or `compare()`).
fn has_metrics(pipeline: &Pipeline) -> bool {
    pipeline
        .stages
        .iter()
        .any(|s| matches!(s, Stage::Metrics(_) | Stage::Compare(_)))
}

fn comparison_op(tok: &Tok) -> Option<BinaryOp> {
    Some(match tok {
        Tok::Eq => BinaryOp::Eq,
        Tok::Neq => BinaryOp::Neq,
        Tok::Lt => BinaryOp::Lt,
        Tok::Lte => BinaryOp::Lte,
        Tok::Gt => BinaryOp::Gt,
        Tok::Gte => BinaryOp::Gte,
        _ => return None,
    })
}

fn binary_op(tok: &Tok) -> Option<BinaryOp> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::{Attribute, AttributeScope};

    fn attr(scope: AttributeScope, name: &str) -> FieldExpr {
        FieldExpr::Attribute(Attribute {
            scope,
            parent: false,
            name: name.into(),
        })
    }

    fn filter_expr(q: &str) -> FieldExpr {
        let query = parse(q).unwrap();
        match &query.pipeline.stages[0] {
            Stage::Spanset(SpansetExpr::Filter(SpansetFilter { expr: Some(e) })) => e.clone(),
            other => panic!("not a filter: {other:?}"),
        }
    }

    fn bin(op: BinaryOp, lhs: FieldExpr, rhs: FieldExpr) -> FieldExpr {
        FieldExpr::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        }
    }

    fn int(i: i64) -> FieldExpr {
        FieldExpr::Static(Static::Int(i))
    }

    #[test]
    fn and_and_or_share_a_level_left_to_right() {
        // As in Tempo's grammar, so a query means the same against either server.
        let a = || attr(AttributeScope::Unscoped, "a");
        assert_eq!(
            filter_expr("{ .a = 1 || .a = 2 && .a = 3 }"),
            bin(
                BinaryOp::And,
                bin(
                    BinaryOp::Or,
                    bin(BinaryOp::Eq, a(), int(1)),
                    bin(BinaryOp::Eq, a(), int(2))
                ),
                bin(BinaryOp::Eq, a(), int(3))
            )
        );
    }

    #[test]
    fn arithmetic_precedence_and_power_is_right_associative() {
        assert_eq!(
            filter_expr("{ 1 + 2 * 3 ^ 4 ^ 5 = 0 }"),
            bin(
                BinaryOp::Eq,
                bin(
                    BinaryOp::Add,
                    int(1),
                    bin(
                        BinaryOp::Mul,
                        int(2),
                        bin(BinaryOp::Pow, int(3), bin(BinaryOp::Pow, int(4), int(5)))
                    )
                ),
                int(0)
            )
        );
        assert_eq!(
            filter_expr("{ 1 - 2 - 3 = 0 }"),
            bin(
                BinaryOp::Eq,
                bin(BinaryOp::Sub, bin(BinaryOp::Sub, int(1), int(2)), int(3)),
                int(0)
            )
        );
    }

    #[test]
    fn unary_minus_folds_into_literals_and_binds_tightest() {
        assert_eq!(
            filter_expr("{ -(2) ^ 2 = 4 }"),
            bin(BinaryOp::Eq, bin(BinaryOp::Pow, int(-2), int(2)), int(4))
        );
        assert_eq!(
            filter_expr("{ -.a = 1 }"),
            bin(
                BinaryOp::Eq,
                FieldExpr::Unary {
                    op: UnaryOp::Neg,
                    expr: Box::new(attr(AttributeScope::Unscoped, "a"))
                },
                int(1)
            )
        );
    }

    #[test]
    fn structural_binds_tighter_than_and() {
        let query = parse("{ .a } && { .b } > { .c } || { .d }").unwrap();
        let Stage::Spanset(SpansetExpr::Op { op, lhs, .. }) = &query.pipeline.stages[0] else {
            panic!("not a spanset op");
        };
        assert_eq!(*op, SpansetOp::Or);
        let SpansetExpr::Op { op, rhs, .. } = lhs.as_ref() else {
            panic!("not a spanset op");
        };
        assert_eq!(*op, SpansetOp::And);
        assert!(matches!(
            rhs.as_ref(),
            SpansetExpr::Op {
                op: SpansetOp::Child,
                ..
            }
        ));
    }

    #[test]
    fn errors_name_position_expected_and_found() {
        let err = parse("{ .a = }").unwrap_err();
        assert_eq!(
            err.to_string(),
            "parse error at line 1, column 8: expected a value after '=', found '}'"
        );
        let err = parse("{ .a = 1 }\n| count( > 1").unwrap_err();
        assert_eq!((err.line, err.column), (2, 10));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{{ {}1{} = 1 }}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(parse(&deep).unwrap_err().message.contains("nests too deeply"));
        let long = format!("{{ .a = 1{} }}", " && .a = 1".repeat(10_000));
        assert!(parse(&long).unwrap_err().message.contains("nests too deeply"));
        let minus = format!("{{ {}.a = 1 }}", "-".repeat(100_000));
        assert!(parse(&minus).unwrap_err().message.contains("nests too deeply"));
        let spansets = format!("{{ }}{}", " && { }".repeat(10_000));
        assert!(parse(&spansets).unwrap_err().message.contains("nests too deeply"));
    }

    #[test]
    fn nesting_up_to_the_limit_is_accepted_and_walkable() {
        let n = MAX_DEPTH as usize - 6;
        let cases = [
            format!("{{ {}.a{} = 1 }}", "(".repeat(n), ")".repeat(n)),
            format!("{{ {}.a = 1 }}", "-".repeat(n)),
            format!("{{ .a = 1{} }}", " && .a = 1".repeat(n)),
            format!("{{ 2{} = 1 }}", " ^ 2".repeat(n)),
            format!("{{ }}{}", " >> { }".repeat(n)),
            format!("{}{{ }}{}", "(".repeat(n), " | { })".repeat(n)),
        ];
        // Half the default 2 MiB thread stack, in a debug build (the worst case needs about 550 KiB).
        let worker = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || {
                for q in cases {
                    let query = parse(&q).unwrap_or_else(|e| panic!("{e}"));
                    let _ = crate::validate(&query);
                    let _ = crate::supported(&query);
                    assert_eq!(parse(&query.to_string()).unwrap(), query);
                }
            })
            .unwrap();
        worker.join().unwrap();
    }
}
