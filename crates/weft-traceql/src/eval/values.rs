//! Field values: evaluating a field expression on one span, with values borrowed from the trace
//! and the query, and the comparison, arithmetic and regex operators over them.

use std::cmp::Ordering;

use regex::Regex;

use crate::ast::{AttributeScope, BinaryOp, Intrinsic, Kind, Status};
use crate::trace::{Event, Link, Span, Value, find_attr};

use super::compile::{Bind, Expr};
use super::{TraceEnv, sat_i64};

/// Where a field expression is evaluated: a span, and the event and link bound by an enclosing
/// comparison, if any.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(super) env: &'a TraceEnv<'a>,
    pub(super) span: &'a Span,
    /// The span's index in the trace.
    pub(super) index: usize,
    pub(super) event: Option<&'a Event>,
    pub(super) link: Option<&'a Link>,
}

/// A value borrowed from the trace or the query, so evaluating a comparison allocates nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Nil,
    Str(&'a str),
    /// A span, trace or link id, kept as lowercase hex in place.
    Id(HexId),
    Int(i64),
    Float(f64),
    Duration(i64),
    Bool(bool),
    Status(Status),
    Kind(Kind),
    Array(&'a [Value]),
}

/// Up to 16 id bytes as lowercase hex, stored inline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HexId {
    buf: [u8; 32],
    len: u8,
}

impl HexId {
    fn new(bytes: &[u8]) -> HexId {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 32];
        let bytes = &bytes[..bytes.len().min(16)];
        for (n, b) in bytes.iter().enumerate() {
            buf[2 * n] = DIGITS[usize::from(b >> 4)];
            buf[2 * n + 1] = DIGITS[usize::from(b & 0xf)];
        }
        HexId {
            buf,
            len: (2 * bytes.len()) as u8,
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl<'a> Val<'a> {
    fn of(value: &'a Value) -> Val<'a> {
        match value {
            Value::Str(s) => Val::Str(s),
            Value::Int(i) => Val::Int(*i),
            Value::Float(x) => Val::Float(*x),
            Value::Bool(b) => Val::Bool(*b),
            Value::Duration(d) => Val::Duration(*d),
            Value::Status(s) => Val::Status(*s),
            Value::Kind(k) => Val::Kind(*k),
            Value::Nil => Val::Nil,
            Value::Array(a) => Val::Array(a),
        }
    }

    fn opt(value: Option<&'a Value>) -> Val<'a> {
        value.map_or(Val::Nil, Val::of)
    }

    pub(crate) fn to_value(self) -> Value {
        match self {
            Val::Nil => Value::Nil,
            Val::Str(s) => Value::Str(s.to_owned()),
            Val::Id(id) => Value::Str(id.as_str().to_owned()),
            Val::Int(i) => Value::Int(i),
            Val::Float(x) => Value::Float(x),
            Val::Duration(d) => Value::Duration(d),
            Val::Bool(b) => Value::Bool(b),
            Val::Status(s) => Value::Status(s),
            Val::Kind(k) => Value::Kind(k),
            Val::Array(a) => Value::Array(a.to_vec()),
        }
    }

    fn is_nil(&self) -> bool {
        matches!(self, Val::Nil)
    }
}

pub(super) fn truthy(v: Val<'_>) -> bool {
    matches!(v, Val::Bool(true))
}

/// Evaluates a field expression on one span.
pub(crate) fn eval_value<'a>(expr: &'a Expr, ctx: Ctx<'a>) -> Val<'a> {
    match expr {
        Expr::Const(v) => Val::of(v),
        Expr::Intrinsic(i) => intrinsic(*i, ctx),
        Expr::Attr(scope, name) => attribute(*scope, name, ctx),
        Expr::Neg(e) => neg(eval_value(e, ctx)),
        Expr::Not(e) => match eval_value(e, ctx) {
            Val::Bool(b) => Val::Bool(!b),
            _ => Val::Nil,
        },
        Expr::And(l, r) => Val::Bool(truthy(eval_value(l, ctx)) && truthy(eval_value(r, ctx))),
        Expr::Or(l, r) => Val::Bool(truthy(eval_value(l, ctx)) || truthy(eval_value(r, ctx))),
        Expr::Arith(op, l, r) => arith(*op, eval_value(l, ctx), eval_value(r, ctx)),
        Expr::Cmp { op, lhs, rhs, bind } => Val::Bool(bound(ctx, *bind, &|c| {
            compare(*op, eval_value(lhs, c), eval_value(rhs, c))
        })),
        Expr::Regex { negated, lhs, re, bind } => {
            Val::Bool(bound(ctx, *bind, &|c| regex_match(re, *negated, eval_value(lhs, c))))
        }
        Expr::Exists { negated, operand } => Val::Bool(eval_value(operand, ctx).is_nil() == *negated),
    }
}

/// Runs `test` once per event and/or link of the span, binding each in turn, and reports
/// whether any run passed. Already-bound scopes (from an enclosing comparison) stay as they are.
fn bound<'a>(ctx: Ctx<'a>, bind: Bind, test: &dyn Fn(Ctx<'a>) -> bool) -> bool {
    let events = bind.events && ctx.event.is_none();
    let links = bind.links && ctx.link.is_none();
    let per_link = |c: Ctx<'a>| {
        if links {
            c.span.links.iter().any(|l| test(Ctx { link: Some(l), ..c }))
        } else {
            test(c)
        }
    };
    if events {
        ctx.span.events.iter().any(|e| per_link(Ctx { event: Some(e), ..ctx }))
    } else {
        per_link(ctx)
    }
}

fn attribute<'a>(scope: AttributeScope, name: &str, ctx: Ctx<'a>) -> Val<'a> {
    let span = ctx.span;
    Val::opt(match scope {
        AttributeScope::Unscoped => find_attr(&span.span_attrs, name).or_else(|| find_attr(&span.resource_attrs, name)),
        AttributeScope::Span => find_attr(&span.span_attrs, name),
        AttributeScope::Resource => find_attr(&span.resource_attrs, name),
        AttributeScope::Instrumentation => find_attr(&span.scope_attrs, name),
        AttributeScope::Event => match ctx.event {
            Some(e) => find_attr(&e.attrs, name),
            None => span.events.iter().find_map(|e| find_attr(&e.attrs, name)),
        },
        AttributeScope::Link => match ctx.link {
            Some(l) => find_attr(&l.attrs, name),
            None => span.links.iter().find_map(|l| find_attr(&l.attrs, name)),
        },
    })
}

fn intrinsic<'a>(intrinsic: Intrinsic, ctx: Ctx<'a>) -> Val<'a> {
    let span = ctx.span;
    let env = ctx.env;
    match intrinsic {
        // Refused by the support check.
        Intrinsic::Parent => Val::Nil,
        Intrinsic::Name => Val::Str(&span.name),
        Intrinsic::Status => Val::Status(span.status),
        Intrinsic::StatusMessage => Val::Str(&span.status_message),
        Intrinsic::Kind => Val::Kind(span.kind),
        Intrinsic::Duration => Val::Duration(sat_i64(span.duration_nano)),
        Intrinsic::RootName => env.root.map_or(Val::Nil, |r| Val::Str(&env.trace.spans[r].name)),
        Intrinsic::RootServiceName => env.root.map_or(Val::Nil, |r| {
            Val::opt(find_attr(&env.trace.spans[r].resource_attrs, "service.name"))
        }),
        Intrinsic::TraceDuration => Val::Duration(env.duration),
        Intrinsic::SpanId => Val::Id(HexId::new(&span.span_id)),
        Intrinsic::ParentId => span.parent_span_id.map_or(Val::Nil, |p| Val::Id(HexId::new(&p))),
        Intrinsic::TraceId => Val::Id(HexId::new(&span.trace_id)),
        Intrinsic::EventName => ctx
            .event
            .or(span.events.first())
            .map_or(Val::Nil, |e| Val::Str(&e.name)),
        Intrinsic::LinkTraceId => ctx
            .link
            .or(span.links.first())
            .map_or(Val::Nil, |l| Val::Id(HexId::new(&l.trace_id))),
        Intrinsic::LinkSpanId => ctx
            .link
            .or(span.links.first())
            .map_or(Val::Nil, |l| Val::Id(HexId::new(&l.span_id))),
        Intrinsic::InstrumentationName => Val::Str(&span.scope_name),
        Intrinsic::InstrumentationVersion => Val::Str(&span.scope_version),
        Intrinsic::ChildCount => env
            .structure
            .as_ref()
            .map_or(Val::Nil, |s| Val::Int(i64::from(s.children[ctx.index]))),
        Intrinsic::EventTimeSinceStart => ctx.event.or(span.events.first()).map_or(Val::Nil, |e| {
            Val::Duration(time_since(e.time_unix_nano, span.start_unix_nano))
        }),
        // Rejected when compiling.
        Intrinsic::NestedSetLeft | Intrinsic::NestedSetRight | Intrinsic::NestedSetParent => {
            env.structure.as_ref().map_or(Val::Nil, |s| {
                let [left, right, parent] = s.nested_set[ctx.index];
                Val::Int(match intrinsic {
                    Intrinsic::NestedSetLeft => left,
                    Intrinsic::NestedSetRight => right,
                    _ => parent,
                })
            })
        }
    }
}

/// `time - start` in nanoseconds, negative for an event before its span's start (as Tempo reads
/// its unsigned difference back as a signed duration), saturating at the `i64` bounds.
fn time_since(time: u64, start: u64) -> i64 {
    let d = i128::from(time) - i128::from(start);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

fn neg(v: Val<'_>) -> Val<'_> {
    match v {
        Val::Int(i) => i.checked_neg().map_or(Val::Float(-(i as f64)), Val::Int),
        Val::Float(x) => Val::Float(-x),
        Val::Duration(d) => d.checked_neg().map_or(Val::Float(-(d as f64)), Val::Duration),
        _ => Val::Nil,
    }
}

/// The value of a number or duration as `f64` (durations in nanoseconds).
pub(super) fn as_f64(v: Val<'_>) -> Option<f64> {
    match v {
        Val::Int(i) | Val::Duration(i) => Some(i as f64),
        Val::Float(x) => Some(x),
        _ => None,
    }
}

fn arith<'a>(op: BinaryOp, l: Val<'a>, r: Val<'a>) -> Val<'a> {
    if let (Val::Int(a), Val::Int(b)) = (l, r) {
        return int_arith(op, a, b);
    }
    let (Some(a), Some(b)) = (as_f64(l), as_f64(r)) else {
        return Val::Nil;
    };
    Val::Float(float_arith(op, a, b))
}

fn float_arith(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Mod => a % b,
        BinaryOp::Pow => a.powf(b),
        _ => f64::NAN,
    }
}

fn int_arith<'a>(op: BinaryOp, a: i64, b: i64) -> Val<'a> {
    let exact = match op {
        BinaryOp::Add => a.checked_add(b),
        BinaryOp::Sub => a.checked_sub(b),
        BinaryOp::Mul => a.checked_mul(b),
        BinaryOp::Div | BinaryOp::Mod if b == 0 => return Val::Nil,
        BinaryOp::Div => a.checked_div(b),
        BinaryOp::Mod => Some(a.checked_rem(b).unwrap_or(0)),
        BinaryOp::Pow => u32::try_from(b).ok().and_then(|e| a.checked_pow(e)),
        _ => return Val::Nil,
    };
    exact.map_or_else(|| Val::Float(float_arith(op, a as f64, b as f64)), Val::Int)
}

/// Applies a comparison operator to an ordering; `None` (unordered, NaN) satisfies only `!=`.
pub(super) fn apply(op: BinaryOp, ord: Option<Ordering>) -> bool {
    match op {
        BinaryOp::Eq => ord == Some(Ordering::Equal),
        BinaryOp::Neq => ord != Some(Ordering::Equal),
        BinaryOp::Lt => ord == Some(Ordering::Less),
        BinaryOp::Lte => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        BinaryOp::Gt => ord == Some(Ordering::Greater),
        BinaryOp::Gte => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
        _ => false,
    }
}

/// `l op r` for a comparison operator, with array elements handled as documented.
pub(crate) fn compare(op: BinaryOp, l: Val<'_>, r: Val<'_>) -> bool {
    match (l, r) {
        (Val::Nil, _) | (_, Val::Nil) | (Val::Array(_), Val::Array(_)) => false,
        (Val::Array(elems), scalar) => elements(op, elems, |e| compare_scalar(op, e, scalar)),
        (scalar, Val::Array(elems)) => elements(op, elems, |e| compare_scalar(op, scalar, e)),
        _ => compare_scalar(op, l, r),
    }
}

/// `!=` must hold for every element; any other operator for some element.
fn elements(op: BinaryOp, elems: &[Value], test: impl Fn(Val<'_>) -> bool) -> bool {
    if op == BinaryOp::Neq {
        elems.iter().all(|e| test(Val::of(e)))
    } else {
        elems.iter().any(|e| test(Val::of(e)))
    }
}

fn compare_scalar(op: BinaryOp, l: Val<'_>, r: Val<'_>) -> bool {
    match (l, r) {
        (Val::Nil, _) | (_, Val::Nil) => false,
        (Val::Int(a) | Val::Duration(a), Val::Int(b) | Val::Duration(b)) => apply(op, Some(a.cmp(&b))),
        (Val::Int(_) | Val::Duration(_) | Val::Float(_), Val::Int(_) | Val::Duration(_) | Val::Float(_)) => {
            let (Some(a), Some(b)) = (as_f64(l), as_f64(r)) else {
                return false;
            };
            apply(op, a.partial_cmp(&b))
        }
        (Val::Bool(a), Val::Bool(b)) => equality(op, a == b),
        (Val::Status(a), Val::Status(b)) => equality(op, a == b),
        (Val::Kind(a), Val::Kind(b)) => equality(op, a == b),
        _ => match (str_of(&l), str_of(&r)) {
            (Some(a), Some(b)) => apply(op, Some(a.cmp(b))),
            _ => false,
        },
    }
}

fn str_of<'v>(v: &'v Val<'_>) -> Option<&'v str> {
    match v {
        Val::Str(s) => Some(s),
        Val::Id(id) => Some(id.as_str()),
        _ => None,
    }
}

/// `=` or `!=` for values that have no order.
fn equality(op: BinaryOp, equal: bool) -> bool {
    match op {
        BinaryOp::Eq => equal,
        BinaryOp::Neq => !equal,
        _ => false,
    }
}

fn regex_match(re: &Regex, negated: bool, v: Val<'_>) -> bool {
    let one = |v: &Val<'_>| str_of(v).map(|s| re.is_match(s) != negated);
    match v {
        Val::Array(elems) if negated => elems.iter().all(|e| one(&Val::of(e)) == Some(true)),
        Val::Array(elems) => elems.iter().any(|e| one(&Val::of(e)) == Some(true)),
        _ => one(&v) == Some(true),
    }
}
