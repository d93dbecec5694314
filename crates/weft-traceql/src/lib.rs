//! TraceQL for weft: lexer, parser, syntax tree ([`ast`]), printer, validator, support check, and
//! an exact evaluator over in-memory traces ([`eval`](mod@eval) for spanset queries,
//! [`metrics`] for metrics queries) whose data model ([`Trace`], [`Span`], [`Value`]) the storage
//! layer fills.
//!
//! ```
//! let query = weft_traceql::parse(r#"{ resource.service.name = "api" && duration > 500ms } | count() > 2"#)?;
//! weft_traceql::validate(&query)?;
//! weft_traceql::supported(&query)?;
//! assert_eq!(query.to_string(), r#"{ resource.service.name = "api" && duration > 500ms } | count() > 2"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Evaluating a query on a trace:
//!
//! ```
//! use weft_traceql::{Span, Trace, Value, eval, parse};
//!
//! let span = |name: &str, code: i64| Span {
//!     name: name.to_owned(),
//!     span_attrs: vec![("http.status_code".to_owned(), Value::Int(code))],
//!     ..Span::default()
//! };
//! let trace = Trace { spans: vec![span("GET /", 200), span("POST /cart", 503)] };
//! let spansets = eval(&parse("{ span.http.status_code >= 500 } | count() = 1")?, &trace)?;
//! assert_eq!(spansets[0].spans, vec![1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Three steps, three error types:
//! - [`parse`] fails with a [`ParseError`] (1-based line and column, what was expected, what was
//!   found) when the text is not TraceQL;
//! - [`validate`] fails with a [`ValidateError`] when the query parses but is meaningless
//!   (`{ status = 3 }`, `{ .a =~ 1 }`, `{ } | avg() > 1`, `{ } | rate() | { }`);
//! - [`supported`] fails with [`Unsupported`] when the query is valid but uses a feature the
//!   executor does not run yet (the API answers 400 naming the feature). Query hints
//!   `with(...)` are all accepted; [`supported`] documents which ones weft honours.
//!
//! [`Evaluator::new`] runs the last two on a parsed query and compiles its regular expressions,
//! so [`eval`](eval()) and [`eval_metrics`] fail with an [`EvalError`] that wraps a
//! [`ValidateError`] or an [`Unsupported`], or names a bad regular expression.
//!
//! `Display` on [`Query`] prints canonical TraceQL: `parse(q.to_string()) == q` for every parsed
//! `q`, and printing is idempotent.
//!
//! # Grammar
//!
//! ```text
//! query          = ( pipeline | metrics_query ) [ hints ] EOF
//! hints          = "with" "(" IDENT "=" static { "," IDENT "=" static } ")"
//! pipeline       = stage { "|" stage | metrics_filter }          (metrics_filter only after a
//!                                                                   metrics function or topk())
//! metrics_filter = compare_op scalar                              ({ } | rate() > 10)
//! metrics_query  = metrics_sum { metrics_filter | "|" ( "topk" | "bottomk" ) args }
//! metrics_sum    = metrics_prod { ( "+" | "-" ) metrics_prod }
//! metrics_prod   = metrics_atom { ( "*" | "/" ) metrics_atom }
//! metrics_atom   = scalar_atom | "(" pipeline ")" | "(" metrics_query ")"
//! scalar         = scalar_sum                                     (numbers only; folded)
//! scalar_atom    = INTEGER | FLOAT | DURATION | "-" scalar_atom | "(" scalar ")"
//! stage          = spanset_expr
//!                | aggregate compare_op static                    (scalar filter: count() > 2)
//!                | "by" args | "select" args | "coalesce" "(" ")"
//!                | metrics_fn args [ "by" args ]                  (rate() by (resource.service.name))
//!                | "compare" "(" spanset_filter { "," field_expr } ")"
//!                | ( "topk" | "bottomk" ) args
//! aggregate      = ( "count" | "avg" | "min" | "max" | "sum" ) args
//! metrics_fn     = "rate" | "count_over_time" | "min_over_time" | "max_over_time" | "avg_over_time"
//!                | "sum_over_time" | "quantile_over_time" | "histogram_over_time"
//! args           = "(" [ field_expr { "," field_expr } ] ")"
//! compare_op     = "=" | "!=" | "<" | "<=" | ">" | ">="
//!
//! spanset_expr   = spanset_operand { spanset_op spanset_operand }
//! spanset_operand= spanset_filter | "(" pipeline ")"             (the pipeline starts with "{" or "(")
//! spanset_filter = "{" [ field_expr ] "}"
//! spanset_op     = "&&" | "||" | ">" | ">>" | "<" | "<<" | "~"
//!                | "!>" | "!>>" | "!<" | "!<<" | "!~" | "&>" | "&>>" | "&<" | "&<<" | "&~"
//!
//! field_expr     = unary { binary_op unary }
//! binary_op      = "||" | "&&" | "=" | "!=" | "<" | "<=" | ">" | ">=" | "=~" | "!~"
//!                | "+" | "-" | "*" | "/" | "%" | "^"
//! unary          = ( "-" | "!" ) unary | primary
//! primary        = "(" field_expr ")" | static | intrinsic | attribute
//! static         = STRING | INTEGER | FLOAT | DURATION | "true" | "false" | "nil"
//!                | "error" | "ok" | "unset"
//!                | "unspecified" | "internal" | "server" | "client" | "producer" | "consumer"
//! intrinsic      = "name" | "status" | "statusMessage" | "kind" | "duration" | "rootName"
//!                | "rootServiceName" | "traceDuration" | "nestedSetLeft" | "nestedSetRight"
//!                | "nestedSetParent" | "span:name" | "span:status" | "span:statusMessage"
//!                | "span:kind" | "span:duration" | "span:id" | "span:parentID" | "trace:rootName"
//!                | "trace:rootService" | "trace:duration" | "trace:id" | "event:name"
//!                | "event:timeSinceStart" | "link:traceID" | "link:spanID"
//!                | "instrumentation:name" | "instrumentation:version"
//! attribute      = [ "parent." [ "resource." | "span." ] | scope ] NAME    (no spaces inside)
//! scope          = "." | "resource." | "span." | "event." | "link." | "instrumentation."
//! NAME           = QUOTED_STRING | run of characters other than whitespace and { } ( ) = ~ ! < > & | ^ , " `
//! STRING         = '"' with escapes \n \t \r \\ \" \' \a \b \f \v \xHH \uHHHH \UHHHHHHHH '"'
//!                | '`' raw text, no escapes '`'
//! INTEGER        = digits (fits in i64)          FLOAT = digits "." digits | "." digits | with exponent
//! DURATION       = ( number unit )+  with unit in ns us µs ms s m h   (1.5s, 1h30m)
//! ```
//!
//! `-` directly before a number or duration is folded into the literal (`-1s`). Between spansets,
//! `!~` is the not-sibling operator; between values it is the negated regex match.
//!
//! Metrics arithmetic follows Tempo's grammar: operands are parenthesised metrics queries
//! (`({ } | rate())`) or numbers; `+ - * /` between numbers are folded at parse time with
//! Tempo's integer rules (`1 / 2` is `0`), durations are refused in arithmetic (a comparison
//! takes one, in seconds); a number and a metrics query become a second stage of that query
//! ([`ast::SecondStageFn::Arithmetic`]); two metrics queries make [`ast::MetricsExpr`]
//! (`Query::math`). `*` and `/` bind tighter than `+` and `-`, comparisons and `| topk()`
//! loosest.
//!
//! # Precedence
//!
//! From loosest to tightest; every binary operator is left-associative except `^`.
//!
//! | level | field expressions (inside `{ }`) | spanset expressions          |
//! |-------|----------------------------------|------------------------------|
//! | 0     |                                  | `\|` (pipeline, loosest)     |
//! | 1     | `&&` and `\|\|` (one level)        | `&&` and `\|\|` (one level)    |
//! | 3     | `= != < <= > >= =~ !~`           | structural: `> >> < << ~` and the `!` and `&` forms |
//! | 4     | `+ -`                            |                              |
//! | 5     | `* / %`                          |                              |
//! | 6     | `^` (right-associative)          |                              |
//! | 7     | unary `-` and `!`                |                              |
//!
//! `&&` and `||` share one level and group left to right, as in Tempo's grammar
//! (`pkg/traceql/expr.y`), so the same query means the same thing in Grafana against either
//! server: `{ .x = 1 || .y = 2 && .z = 3 }` is `(.x = 1 || .y = 2) && .z = 3`. Structural
//! operators bind tighter: `{ .a } && { .b } > { .c }` is `{ .a } && ({ .b } > { .c })`.
//!
//! # Limits
//!
//! Nesting deeper than [`MAX_DEPTH`] (parentheses, operator chains, unary chains, pipeline
//! stages: each stage is a level) is a parse error, so every later walk of the tree has bounded
//! recursion.

pub mod ast;
pub mod eval;
mod lexer;
pub mod metrics;
mod parser;
mod printer;
mod support;
mod trace;
mod validate;

pub use ast::Query;
pub use eval::{EvalError, Evaluator, Spanset, eval};
pub use metrics::{Exemplar, MAX_METRICS_STEPS, MetricsRun, Series, eval_metrics};
pub use parser::{MAX_DEPTH, parse};
pub use printer::double_quote as string_literal;
pub use support::supported;
pub use trace::{Event, Link, Span, Trace, Value};
pub use validate::validate;

/// The query text is not TraceQL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse error at line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line of the offending token.
    pub line: u32,
    /// 1-based column of the offending token, counted in characters.
    pub column: u32,
    /// What was expected and what was found, e.g. `expected a value after '=', found '}'`.
    pub message: String,
}

/// The query parses but is meaningless (a type error, a wrong argument list, a misplaced stage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid query: {message}")]
pub struct ValidateError {
    /// What is wrong, quoting the offending part of the query.
    pub message: String,
}

/// The query is valid TraceQL but uses a feature the executor does not support yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported TraceQL feature: {feature}")]
pub struct Unsupported {
    /// The feature, e.g. `compare()` or `the nestedSetLeft intrinsic`.
    pub feature: String,
}
