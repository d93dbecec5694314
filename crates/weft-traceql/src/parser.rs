//! A recursive-descent parser with precedence climbing for the two operator grammars (field
//! expressions inside `{ }`, and spanset expressions between filters). The grammar and the
//! precedence tables are in the crate docs.

mod expr;
mod metrics;
mod scalar;

use crate::ParseError;
use crate::ast::{
    AggregateFn, BinaryOp, Compare, FieldExpr, Hint, MetricsExpr, MetricsFn, MetricsStage, Pipeline, Query,
    SecondStage, SecondStageFn, SpansetExpr, Stage, Static,
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
            // Each stage is a level for what walks a pipeline (the prefilter nests one `and`
            // per stage), so a long flat pipeline counts as deep, and a stage nests from the
            // depth the stages before it reached.
            if depth + stages.len() as u32 > MAX_DEPTH {
                return self.error(format!(
                    "query nests too deeply (more than {MAX_DEPTH} levels; each pipeline stage counts as one)"
                ));
            }
            if *self.peek() == Tok::Pipe {
                self.advance();
                let (stage, sd) = self.stage(depth + stages.len() as u32)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::{Attribute, AttributeScope, SpansetFilter, SpansetOp, UnaryOp};

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
        let stages = format!("{{ }}{}", " | { }".repeat(30_000));
        assert!(
            parse(&stages)
                .unwrap_err()
                .message
                .contains("each pipeline stage counts")
        );
        let metrics = format!("{{ }}{} | rate()", " | { }".repeat(30_000));
        assert!(parse(&metrics).unwrap_err().message.contains("nests too deeply"));
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
            format!("{{ }}{}", " | { }".repeat(n)),
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
