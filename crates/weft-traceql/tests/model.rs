//! Model-based tests of the evaluator.
//!
//! `eval` is checked against a deliberately naive reference evaluator on random traces (random
//! parent links, so forests, orphans, duplicate ids and cycles all occur) and random queries
//! from a small grammar. The reference interprets the syntax tree directly: structural
//! operators check every pair of spans, ancestors come from walking parent links at most
//! `spans.len()` steps, parents are found by scanning all spans, and aggregates use plain `f64`
//! arithmetic. Every supported query of the shared corpus must also evaluate on random traces
//! without an error (or a panic).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::FileFailurePersistence;
use regex::Regex;
use serde::Deserialize;
use weft_traceql::ast::{
    AggregateFn, AttributeScope, BinaryOp, FieldExpr, Intrinsic, Kind, Query, SpansetExpr, SpansetOp, Stage, Static,
    Status, UnaryOp,
};
use weft_traceql::{Event, Link, Span, Spanset, Trace, Value, eval, eval_metrics, parse, supported, validate};

// ---------------------------------------------------------------------------------------------
// Random traces

fn id(n: u8) -> [u8; 8] {
    [0, 0, 0, 0, 0, 0, 0, n]
}

fn value() -> BoxedStrategy<Value> {
    let scalar = prop_oneof![
        select(vec!["x", "y", ""]).prop_map(|s| Value::Str(s.to_owned())),
        (-1i64..=2).prop_map(Value::Int),
        select(vec![-0.5, 0.0, 1.0, 1.5]).prop_map(Value::Float),
        any::<bool>().prop_map(Value::Bool),
        (0i64..=60).prop_map(Value::Duration),
    ];
    prop_oneof![
        8 => scalar.clone(),
        1 => Just(Value::Nil),
        1 => prop::collection::vec(scalar, 0..3).prop_map(Value::Array),
    ]
    .boxed()
}

fn attrs() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::vec((select(vec!["a", "b", "c"]), value()), 0..3)
        .prop_map(|v| v.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

type SpanSeed = (
    u8,
    (u8, u8),
    usize,
    (usize, usize),
    (u64, u64),
    Vec<(String, Value)>,
    (usize, Vec<(String, Value)>),
    Vec<(usize, Vec<(String, Value)>)>,
    Vec<(u8, Vec<(String, Value)>)>,
    Vec<(String, Value)>,
);

fn span_seed() -> impl Strategy<Value = SpanSeed> {
    (
        0u8..12,
        (0u8..4, 0u8..16),
        0usize..3,
        (0usize..6, 0usize..3),
        (0u64..100, 0u64..100),
        attrs(),
        (0usize..2, attrs()),
        prop::collection::vec((0usize..2, attrs()), 0..3),
        prop::collection::vec((0u8..3, attrs()), 0..2),
        attrs(),
    )
}

fn trace() -> impl Strategy<Value = Trace> {
    prop::collection::vec(span_seed(), 0..9).prop_map(|seeds| {
        let n = seeds.len() as u8;
        let ids: Vec<u8> = seeds.iter().map(|s| s.0 % (n + 2) + 1).collect();
        let kinds = [
            Kind::Unspecified,
            Kind::Internal,
            Kind::Server,
            Kind::Client,
            Kind::Producer,
            Kind::Consumer,
        ];
        let statuses = [Status::Unset, Status::Ok, Status::Error];
        let spans = seeds
            .into_iter()
            .enumerate()
            .map(
                |(
                    i,
                    (_, (mode, k), name, (kind, status), (start, dur), span_attrs, (svc, res), events, links, scope),
                )| {
                    let parent = match mode {
                        0 => None,
                        1 | 2 if i > 0 => Some(id(ids[usize::from(k) % i])),
                        1 | 2 => None,
                        // Any id: missing from the trace, the span itself, or one that closes a cycle.
                        _ => Some(id(k % (n + 3) + 1)),
                    };
                    let mut resource_attrs =
                        vec![("service.name".to_owned(), Value::Str(["api", "db"][svc].to_owned()))];
                    resource_attrs.extend(res);
                    Span {
                        trace_id: [0x0a; 16],
                        span_id: id(ids[i]),
                        parent_span_id: parent,
                        name: ["a", "b", "c"][name].to_owned(),
                        kind: kinds[kind],
                        status: statuses[status],
                        status_message: if status == 2 { "boom" } else { "" }.to_owned(),
                        start_unix_nano: start,
                        duration_nano: dur,
                        span_attrs,
                        resource_attrs,
                        scope_name: ["lib1", "lib2"][svc].to_owned(),
                        scope_version: "1".to_owned(),
                        scope_attrs: scope,
                        events: events
                            .into_iter()
                            .enumerate()
                            .map(|(e, (name, attrs))| Event {
                                name: ["exception", "retry"][name].to_owned(),
                                time_unix_nano: start + e as u64,
                                attrs,
                            })
                            .collect(),
                        links: links
                            .into_iter()
                            .map(|(s, attrs)| Link {
                                trace_id: [0xab; 16],
                                span_id: [s; 8],
                                attrs,
                            })
                            .collect(),
                    }
                },
            )
            .collect();
        Trace { spans }
    })
}

// ---------------------------------------------------------------------------------------------
// Random queries

const ATTRS: &[&str] = &[
    ".a",
    ".b",
    ".c",
    "span.a",
    "span.b",
    "resource.a",
    "resource.c",
    "event.a",
    "event.b",
    "link.a",
    "instrumentation.b",
];
const STRING_FIELDS: &[&str] = &[
    "name",
    "statusMessage",
    "rootName",
    "rootServiceName",
    "event:name",
    "span:parentID",
    "span:id",
    "instrumentation:name",
    "link:spanID",
    "resource.service.name",
];
const ORDER_OPS: &[&str] = &["=", "!=", "<", "<=", ">", ">="];

fn comparison() -> BoxedStrategy<String> {
    let join3 = |(a, b, c): (&str, &str, &str)| format!("{a} {b} {c}");
    prop_oneof![
        (
            select(ATTRS),
            select(ORDER_OPS),
            select(vec![
                "\"x\"", "\"y\"", "\"\"", "-1", "0", "1", "2", "0.5", "1.5", "20ns", "-0.5"
            ]),
        )
            .prop_map(join3),
        (
            select(ATTRS),
            select(vec!["=", "!="]),
            select(vec!["true", "false", "error", "ok", "server", "nil"]),
        )
            .prop_map(join3),
        (
            select([ATTRS, STRING_FIELDS].concat()),
            select(vec!["=~", "!~"]),
            select(vec![
                "\"x\"", "\"x|y\"", "\".*\"", "\"a.*\"", "\"\"", "\"[ab]\"", "\"0.*1\""
            ]),
        )
            .prop_map(join3),
        (
            select(STRING_FIELDS),
            select(ORDER_OPS),
            select(vec![
                "\"a\"",
                "\"b\"",
                "\"api\"",
                "\"\"",
                "\"0000000000000001\"",
                "\"boom\"",
                "\"retry\""
            ]),
        )
            .prop_map(join3),
        (select(STRING_FIELDS), select(vec!["=", "!="]), Just("nil")).prop_map(join3),
        (
            Just("nil"),
            select(vec!["=", "!="]),
            select([ATTRS, STRING_FIELDS, &["nil"]].concat())
        )
            .prop_map(join3),
        (
            Just("span:childCount"),
            select(ORDER_OPS),
            select(vec!["0", "1", "2", "1.5"]),
        )
            .prop_map(join3),
        (
            select(vec!["duration", "traceDuration"]),
            select(ORDER_OPS),
            select(vec!["30ns", "50", "1.5", "0", "60ns"]),
        )
            .prop_map(join3),
        (
            Just("event:timeSinceStart"),
            select(ORDER_OPS),
            select(vec!["0", "1ns", "2", "1.5", "-1ns"]),
        )
            .prop_map(join3),
        (Just("event:timeSinceStart"), select(vec!["=", "!="]), Just("nil")).prop_map(join3),
        (
            Just("status"),
            select(vec!["=", "!="]),
            select(vec!["error", "ok", "unset"])
        )
            .prop_map(join3),
        (
            Just("kind"),
            select(vec!["=", "!="]),
            select(vec!["server", "client", "internal"])
        )
            .prop_map(join3),
        (
            select(vec![".a", "span.b", "duration", "event.a"]),
            select(vec!["* 2", "+ 1", "- 1", "^ 2"]),
            select(ORDER_OPS),
            select(vec!["0", "1", "2", "40", "0.5"]),
        )
            .prop_map(|(f, a, op, v)| format!("{f} {a} {op} {v}")),
        (select(ATTRS), select(ORDER_OPS), select(ATTRS)).prop_map(join3),
        // Arithmetic between fields.
        (
            select(vec![".a", "span.b", "duration", "span:childCount"]),
            select(vec!["+", "-", "*", "/", "%", "^"]),
            select(vec![".a", "span.b", "duration", "nestedSetLeft"]),
            select(ORDER_OPS),
            select(vec!["0", "1", "2", "40", "0.5", "span.b", "10ns"]),
        )
            .prop_map(|(f, a, g, op, v)| format!("{f} {a} {g} {op} {v}")),
        // Either side first. A comparison of `nestedSetParent` whose result depends only on
        // root-ness is evaluated from the parent ID alone (`ast::root_test`).
        (
            select(vec!["nestedSetLeft", "nestedSetRight", "nestedSetParent"]),
            select(ORDER_OPS),
            select(vec!["-2", "-1", "0", "1", "2", "3", "5"]),
            any::<bool>(),
        )
            .prop_map(|(f, op, v, literal_first)| {
                if literal_first {
                    format!("{v} {op} {f}")
                } else {
                    format!("{f} {op} {v}")
                }
            }),
        Just("nestedSetRight - nestedSetLeft > 1".to_owned()),
    ]
    .boxed()
}

fn field_filter() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        6 => comparison(),
        1 => select(ATTRS).prop_map(str::to_owned),
        1 => Just("true".to_owned()),
    ];
    leaf.prop_recursive(2, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), select(vec!["&&", "||"]), inner.clone()).prop_map(|(a, op, b)| format!("({a}) {op} ({b})")),
            inner.prop_map(|a| format!("!({a})")),
        ]
    })
    .boxed()
}

fn spanset_expr() -> BoxedStrategy<String> {
    let filter = prop_oneof![
        2 => Just("{ }".to_owned()),
        5 => field_filter().prop_map(|f| format!("{{ {f} }}")),
    ];
    // Pipelines as operands: an aggregate filter, by() (merged by `&&`/`||`, refused by
    // structural operators unless coalesce() follows), and plain filter chains.
    let operand_pipeline = (
        filter.clone(),
        select(vec![
            "count() > 1",
            "count() = 1",
            "avg(duration) > 30",
            "by(resource.service.name) | count() > 1",
            "by(.a) | coalesce()",
            "by(kind) | count() = 1 | coalesce() | count() > 1",
            "{ status = error }",
        ]),
    )
        .prop_map(|(f, rest)| format!("({f} | {rest})"));
    let leaf = prop_oneof![
        8 => filter,
        1 => operand_pipeline,
    ];
    leaf.prop_recursive(3, 8, 2, |inner| {
        (
            inner.clone(),
            select(vec![
                "&&", "||", ">", ">>", "<", "<<", "~", "!>", "!>>", "!<", "!<<", "!~", "&>", "&>>", "&<", "&<<", "&~",
            ]),
            inner,
        )
            .prop_map(|(a, op, b)| format!("({a}) {op} ({b})"))
    })
    .boxed()
}

fn stage() -> BoxedStrategy<String> {
    prop_oneof![
        (select(ORDER_OPS), 0u8..5).prop_map(|(op, n)| format!("count() {op} {n}")),
        (
            select(vec!["avg", "min", "max", "sum"]),
            select(vec!["duration", "span.a", ".b", "event.a", "span.b * 2"]),
            select(ORDER_OPS),
            select(vec!["0", "1", "30", "30ns", "0.5"]),
        )
            .prop_map(|(f, x, op, v)| format!("{f}({x}) {op} {v}")),
        field_filter().prop_map(|f| format!("{{ {f} }}")),
        select(vec![
            "resource.service.name",
            ".a",
            "span.b",
            "kind",
            "event:name",
            "span.a * 2"
        ])
        .prop_map(|f| format!("by({f})")),
        prop::collection::vec(
            select(vec![".a", "span.b", "name", "event.a", "span:id", "link:spanID"]),
            1..3
        )
        .prop_map(|fields| format!("select({})", fields.join(", "))),
        Just("coalesce()".to_owned()),
    ]
    .boxed()
}

fn query_text() -> impl Strategy<Value = String> {
    (spanset_expr(), prop::collection::vec(stage(), 0..3))
        .prop_map(|(first, rest)| std::iter::once(first).chain(rest).collect::<Vec<_>>().join(" | "))
}

/// Parses, validates and support-checks a generated query; `None` if any step refuses it.
fn accept(text: &str) -> Option<Query> {
    let q = parse(text).ok()?;
    validate(&q).ok()?;
    supported(&q).ok()?;
    Some(q)
}

// ---------------------------------------------------------------------------------------------
// The reference evaluator

/// A spanset in the model: spans, attributes, selected fields.
type ModelSet = (BTreeSet<usize>, Vec<(String, Value)>, Vec<FieldExpr>);

struct Model<'t> {
    t: &'t Trace,
    parent: Vec<Option<usize>>,
    root: Option<usize>,
    regexes: std::cell::RefCell<Vec<(String, Regex)>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn truthy(v: &Value) -> bool {
    *v == Value::Bool(true)
}

fn is_num(v: &Value) -> bool {
    matches!(v, Value::Int(_) | Value::Float(_) | Value::Duration(_))
}

fn to_f64(v: &Value) -> f64 {
    match v {
        Value::Int(i) | Value::Duration(i) => *i as f64,
        Value::Float(x) => *x,
        _ => f64::NAN,
    }
}

/// Applies an ordering operator to two comparable values.
fn ordered<T: PartialOrd>(op: BinaryOp, a: T, b: T) -> bool {
    match op {
        BinaryOp::Eq => a == b,
        BinaryOp::Neq => a != b,
        BinaryOp::Lt => a < b,
        BinaryOp::Lte => a <= b,
        BinaryOp::Gt => a > b,
        BinaryOp::Gte => a >= b,
        _ => false,
    }
}

fn compare_scalar(op: BinaryOp, l: &Value, r: &Value) -> bool {
    match (l, r) {
        (Value::Str(a), Value::Str(b)) => ordered(op, a, b),
        (Value::Int(a) | Value::Duration(a), Value::Int(b) | Value::Duration(b)) => ordered(op, a, b),
        _ if is_num(l) && is_num(r) => ordered(op, to_f64(l), to_f64(r)),
        (Value::Bool(a), Value::Bool(b)) if !op.is_ordering() => ordered(op, a, b),
        (Value::Status(a), Value::Status(b)) if !op.is_ordering() => ordered(op, a.name(), b.name()),
        (Value::Kind(a), Value::Kind(b)) if !op.is_ordering() => ordered(op, a.name(), b.name()),
        _ => false,
    }
}

fn compare(op: BinaryOp, l: &Value, r: &Value) -> bool {
    match (l, r) {
        (Value::Nil, _) | (_, Value::Nil) | (Value::Array(_), Value::Array(_)) => false,
        (Value::Array(a), s) if op == BinaryOp::Neq => a.iter().all(|e| compare_scalar(op, e, s)),
        (Value::Array(a), s) => a.iter().any(|e| compare_scalar(op, e, s)),
        (s, Value::Array(a)) if op == BinaryOp::Neq => a.iter().all(|e| compare_scalar(op, s, e)),
        (s, Value::Array(a)) => a.iter().any(|e| compare_scalar(op, s, e)),
        _ => compare_scalar(op, l, r),
    }
}

fn mentions(e: &FieldExpr, scope: AttributeScope) -> bool {
    match e {
        FieldExpr::Static(_) => false,
        FieldExpr::Intrinsic(i) => match scope {
            AttributeScope::Event => matches!(i, Intrinsic::EventName | Intrinsic::EventTimeSinceStart),
            _ => matches!(i, Intrinsic::LinkTraceId | Intrinsic::LinkSpanId),
        },
        FieldExpr::Attribute(a) => a.scope == scope,
        FieldExpr::Unary { expr, .. } => mentions(expr, scope),
        FieldExpr::Binary { lhs, rhs, .. } => mentions(lhs, scope) || mentions(rhs, scope),
    }
}

fn find<'a>(attrs: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    attrs.iter().find(|(k, v)| k == key && *v != Value::Nil).map(|(_, v)| v)
}

impl<'t> Model<'t> {
    fn new(t: &'t Trace) -> Model<'t> {
        let n = t.spans.len();
        let parent: Vec<Option<usize>> = (0..n)
            .map(|i| {
                let pid = t.spans[i].parent_span_id?;
                (0..n).find(|&j| j != i && t.spans[j].span_id == pid)
            })
            .collect();
        let earliest = |ok: &dyn Fn(usize) -> bool| {
            let mut best: Option<usize> = None;
            for i in 0..n {
                if ok(i) && best.is_none_or(|b| t.spans[i].start_unix_nano < t.spans[b].start_unix_nano) {
                    best = Some(i);
                }
            }
            best
        };
        let root = earliest(&|i| t.spans[i].parent_span_id.is_none()).or_else(|| earliest(&|i| parent[i].is_none()));
        Model {
            t,
            parent,
            root,
            regexes: Default::default(),
        }
    }

    /// Tempo's nested sets, recursively: roots (no parent id) and children in (start, span ID)
    /// order, one counter from 1; spans no root reaches get zeros.
    fn nested_set(&self) -> Vec<[i64; 3]> {
        fn walk(m: &Model<'_>, i: usize, parent: i64, bound: &mut i64, out: &mut Vec<[i64; 3]>) {
            out[i] = [*bound, 0, parent];
            *bound += 1;
            for c in m.sorted((0..m.t.spans.len()).filter(|&c| m.parent[c] == Some(i)).collect()) {
                walk(m, c, out[i][0], bound, out);
            }
            out[i][1] = *bound;
            *bound += 1;
        }
        let mut out = vec![[0i64; 3]; self.t.spans.len()];
        let mut bound = 1;
        let roots = (0..self.t.spans.len())
            .filter(|&i| self.t.spans[i].parent_span_id.is_none())
            .collect();
        for r in self.sorted(roots) {
            walk(self, r, -1, &mut bound, &mut out);
        }
        out
    }

    fn sorted(&self, mut spans: Vec<usize>) -> Vec<usize> {
        spans.sort_by_key(|&i| (self.t.spans[i].start_unix_nano, self.t.spans[i].span_id));
        spans
    }

    /// Walks parent links at most `spans.len()` steps; a span is not its own ancestor.
    fn ancestors(&self, i: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut at = self.parent[i];
        for _ in 0..self.t.spans.len() {
            let Some(p) = at else { break };
            if p != i {
                out.insert(p);
            }
            at = self.parent[p];
        }
        out
    }

    /// Whether `b` (right-hand side) stands in the operator's relation to `a` (left-hand side).
    fn related(&self, op: SpansetOp, a: usize, b: usize) -> bool {
        match op {
            SpansetOp::Child | SpansetOp::NotChild | SpansetOp::UnionChild => self.parent[b] == Some(a),
            SpansetOp::Descendant | SpansetOp::NotDescendant | SpansetOp::UnionDescendant => {
                self.ancestors(b).contains(&a)
            }
            SpansetOp::Parent | SpansetOp::NotParent | SpansetOp::UnionParent => self.parent[a] == Some(b),
            SpansetOp::Ancestor | SpansetOp::NotAncestor | SpansetOp::UnionAncestor => self.ancestors(a).contains(&b),
            // Same parent in the trace, or both without a parent id (Tempo's roots share one).
            SpansetOp::Sibling | SpansetOp::NotSibling | SpansetOp::UnionSibling => {
                let root = |i: usize| self.t.spans[i].parent_span_id.is_none();
                a != b && ((self.parent[a].is_some() && self.parent[a] == self.parent[b]) || (root(a) && root(b)))
            }
            _ => unreachable!("{op:?}"),
        }
    }

    fn regex(&self, pattern: &str) -> Regex {
        let mut cache = self.regexes.borrow_mut();
        if let Some((_, re)) = cache.iter().find(|(p, _)| p == pattern) {
            return re.clone();
        }
        let re = Regex::new(&format!("^(?s:{pattern})$")).unwrap();
        cache.push((pattern.to_owned(), re.clone()));
        re
    }

    fn value(&self, e: &FieldExpr, i: usize, ev: Option<&Event>, lk: Option<&Link>) -> Value {
        let span = &self.t.spans[i];
        match e {
            FieldExpr::Static(s) => Value::from(s),
            FieldExpr::Intrinsic(x) => match x {
                Intrinsic::Name => Value::Str(span.name.clone()),
                Intrinsic::Status => Value::Status(span.status),
                Intrinsic::StatusMessage => Value::Str(span.status_message.clone()),
                Intrinsic::Kind => Value::Kind(span.kind),
                Intrinsic::Duration => Value::Duration(span.duration_nano as i64),
                Intrinsic::RootName => self
                    .root
                    .map_or(Value::Nil, |r| Value::Str(self.t.spans[r].name.clone())),
                Intrinsic::RootServiceName => self.root.map_or(Value::Nil, |r| {
                    find(&self.t.spans[r].resource_attrs, "service.name")
                        .cloned()
                        .unwrap_or(Value::Nil)
                }),
                Intrinsic::TraceDuration => {
                    let start = self.t.spans.iter().map(|s| s.start_unix_nano).min().unwrap();
                    let end = self
                        .t
                        .spans
                        .iter()
                        .map(|s| s.start_unix_nano + s.duration_nano)
                        .max()
                        .unwrap();
                    Value::Duration((end - start) as i64)
                }
                Intrinsic::SpanId => Value::Str(hex(&span.span_id)),
                Intrinsic::ParentId => span.parent_span_id.map_or(Value::Nil, |p| Value::Str(hex(&p))),
                Intrinsic::TraceId => Value::Str(hex(&span.trace_id)),
                Intrinsic::EventName => ev
                    .or(span.events.first())
                    .map_or(Value::Nil, |e| Value::Str(e.name.clone())),
                Intrinsic::LinkTraceId => lk
                    .or(span.links.first())
                    .map_or(Value::Nil, |l| Value::Str(hex(&l.trace_id))),
                Intrinsic::LinkSpanId => lk
                    .or(span.links.first())
                    .map_or(Value::Nil, |l| Value::Str(hex(&l.span_id))),
                Intrinsic::InstrumentationName => Value::Str(span.scope_name.clone()),
                Intrinsic::InstrumentationVersion => Value::Str(span.scope_version.clone()),
                Intrinsic::EventTimeSinceStart => ev.or(span.events.first()).map_or(Value::Nil, |e| {
                    Value::Duration(e.time_unix_nano as i64 - span.start_unix_nano as i64)
                }),
                Intrinsic::ChildCount => {
                    Value::Int((0..self.t.spans.len()).filter(|&c| self.parent[c] == Some(i)).count() as i64)
                }
                Intrinsic::NestedSetLeft => Value::Int(self.nested_set()[i][0]),
                Intrinsic::NestedSetRight => Value::Int(self.nested_set()[i][1]),
                Intrinsic::NestedSetParent => Value::Int(self.nested_set()[i][2]),
                Intrinsic::Parent => unreachable!("refused by the support check"),
            },
            FieldExpr::Attribute(a) => {
                let name = a.name.as_str();
                let found = match a.scope {
                    AttributeScope::Unscoped => find(&span.span_attrs, name).or(find(&span.resource_attrs, name)),
                    AttributeScope::Span => find(&span.span_attrs, name),
                    AttributeScope::Resource => find(&span.resource_attrs, name),
                    AttributeScope::Instrumentation => find(&span.scope_attrs, name),
                    AttributeScope::Event => match ev {
                        Some(e) => find(&e.attrs, name),
                        None => span.events.iter().find_map(|e| find(&e.attrs, name)),
                    },
                    AttributeScope::Link => match lk {
                        Some(l) => find(&l.attrs, name),
                        None => span.links.iter().find_map(|l| find(&l.attrs, name)),
                    },
                };
                found.cloned().unwrap_or(Value::Nil)
            }
            FieldExpr::Unary { op, expr } => match (op, self.value(expr, i, ev, lk)) {
                (UnaryOp::Not, Value::Bool(b)) => Value::Bool(!b),
                (UnaryOp::Neg, Value::Int(x)) => x.checked_neg().map_or(Value::Float(-(x as f64)), Value::Int),
                (UnaryOp::Neg, Value::Float(x)) => Value::Float(-x),
                (UnaryOp::Neg, Value::Duration(x)) => {
                    x.checked_neg().map_or(Value::Float(-(x as f64)), Value::Duration)
                }
                _ => Value::Nil,
            },
            FieldExpr::Binary { op, lhs, rhs } => {
                let nil = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
                match op {
                    BinaryOp::And => {
                        Value::Bool(truthy(&self.value(lhs, i, ev, lk)) && truthy(&self.value(rhs, i, ev, lk)))
                    }
                    BinaryOp::Or => {
                        Value::Bool(truthy(&self.value(lhs, i, ev, lk)) || truthy(&self.value(rhs, i, ev, lk)))
                    }
                    BinaryOp::Eq | BinaryOp::Neq if nil(lhs) && nil(rhs) => Value::Bool(false),
                    BinaryOp::Eq | BinaryOp::Neq if nil(lhs) || nil(rhs) => {
                        let other = if nil(lhs) { rhs } else { lhs };
                        let present = self.value(other, i, ev, lk) != Value::Nil;
                        Value::Bool(present == (*op == BinaryOp::Neq))
                    }
                    _ if op.is_comparison() => {
                        let test = |ev: Option<&Event>, lk: Option<&Link>| {
                            let l = self.value(lhs, i, ev, lk);
                            if op.is_regex() {
                                let FieldExpr::Static(Static::Str(p)) = rhs.as_ref() else {
                                    unreachable!()
                                };
                                let re = self.regex(p);
                                let one = |v: &Value| match v {
                                    Value::Str(s) => re.is_match(s) != (*op == BinaryOp::NotRegex),
                                    _ => false,
                                };
                                return match &l {
                                    Value::Array(a) if *op == BinaryOp::NotRegex => a.iter().all(one),
                                    Value::Array(a) => a.iter().any(one),
                                    v => one(v),
                                };
                            }
                            compare(*op, &l, &self.value(rhs, i, ev, lk))
                        };
                        let per_event = mentions(e, AttributeScope::Event) && ev.is_none();
                        let per_link = mentions(e, AttributeScope::Link) && lk.is_none();
                        let with_links = |ev: Option<&Event>| {
                            if per_link {
                                span.links.iter().any(|l| test(ev, Some(l)))
                            } else {
                                test(ev, lk)
                            }
                        };
                        Value::Bool(if per_event {
                            span.events.iter().any(|e| with_links(Some(e)))
                        } else {
                            with_links(ev)
                        })
                    }
                    _ => {
                        let (l, r) = (self.value(lhs, i, ev, lk), self.value(rhs, i, ev, lk));
                        arith(*op, &l, &r)
                    }
                }
            }
        }
    }

    fn spanset(&self, e: &SpansetExpr, universe: &BTreeSet<usize>) -> BTreeSet<usize> {
        match e {
            SpansetExpr::Filter(f) => universe
                .iter()
                .copied()
                .filter(|&i| f.expr.as_ref().is_none_or(|x| truthy(&self.value(x, i, None, None))))
                .collect(),
            SpansetExpr::Op { op, lhs, rhs } => {
                let l = self.spanset(lhs, universe);
                let r = self.spanset(rhs, universe);
                match op {
                    SpansetOp::And if l.is_empty() || r.is_empty() => BTreeSet::new(),
                    SpansetOp::And | SpansetOp::Or => l.union(&r).copied().collect(),
                    SpansetOp::Child
                    | SpansetOp::Descendant
                    | SpansetOp::Parent
                    | SpansetOp::Ancestor
                    | SpansetOp::Sibling => r
                        .iter()
                        .copied()
                        .filter(|&b| l.iter().any(|&a| self.related(*op, a, b)))
                        .collect(),
                    SpansetOp::UnionChild
                    | SpansetOp::UnionDescendant
                    | SpansetOp::UnionParent
                    | SpansetOp::UnionAncestor
                    | SpansetOp::UnionSibling => {
                        let right = r
                            .iter()
                            .copied()
                            .filter(|&b| l.iter().any(|&a| self.related(*op, a, b)));
                        let left = l
                            .iter()
                            .copied()
                            .filter(|&a| r.iter().any(|&b| self.related(*op, a, b)));
                        right.chain(left).collect()
                    }
                    _ => r
                        .iter()
                        .copied()
                        .filter(|&b| !l.iter().any(|&a| self.related(*op, a, b)))
                        .collect(),
                }
            }
            // Every spanset the pipeline yields from this one contributes its spans.
            SpansetExpr::Pipeline(p) => self
                .run(&p.stages, vec![(universe.clone(), Vec::new(), Vec::new())])
                .into_iter()
                .flat_map(|(spans, _, _)| spans)
                .collect(),
        }
    }

    fn eval(&self, q: &Query) -> Vec<Spanset> {
        let n = self.t.spans.len();
        if n == 0 {
            return Vec::new();
        }
        let sets = self.run(&q.pipeline.stages, vec![((0..n).collect(), Vec::new(), Vec::new())]);
        sets.into_iter()
            .map(|(spans, attributes, selected)| Spanset {
                selected_values: spans
                    .iter()
                    .map(|&i| selected.iter().map(|f| self.value(f, i, None, None)).collect())
                    .collect(),
                selected: selected.iter().map(|f| f.to_string()).collect(),
                spans: spans.into_iter().collect(),
                attributes,
            })
            .collect()
    }

    fn run(&self, stages: &[Stage], mut sets: Vec<ModelSet>) -> Vec<ModelSet> {
        let set_attr = |attrs: &mut Vec<(String, Value)>, k: String, v: Value| {
            if let Some(slot) = attrs.iter_mut().find(|(name, _)| *name == k) {
                slot.1 = v;
            } else {
                attrs.push((k, v));
            }
        };
        for stage in stages {
            if let Stage::Coalesce = stage {
                // One spanset of every span, without attributes; selected fields kept.
                let mut spans = BTreeSet::new();
                let mut selected: Vec<FieldExpr> = Vec::new();
                for (s, _, sel) in std::mem::take(&mut sets) {
                    spans.extend(s);
                    for f in sel {
                        if !selected.contains(&f) {
                            selected.push(f);
                        }
                    }
                }
                if !spans.is_empty() {
                    sets.push((spans, Vec::new(), selected));
                }
                continue;
            }
            let mut next = Vec::new();
            for (spans, attrs, selected) in sets {
                match stage {
                    Stage::Spanset(e) => {
                        let s = self.spanset(e, &spans);
                        if !s.is_empty() {
                            next.push((s, attrs, selected));
                        }
                    }
                    Stage::ScalarFilter(f) => {
                        let mut attrs = attrs;
                        if let Some((v, reported)) = self.aggregate(f.aggregate.func, f.aggregate.args.first(), &spans)
                        {
                            let lit = Value::from(&f.value);
                            if compare(f.op, &v, &lit) {
                                let name = format!(
                                    "{}({})",
                                    f.aggregate.func.name(),
                                    f.aggregate
                                        .args
                                        .iter()
                                        .map(|a| a.to_string())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                );
                                set_attr(&mut attrs, name, reported);
                                next.push((spans, attrs, selected));
                            }
                        }
                    }
                    Stage::By(args) => {
                        let mut groups: Vec<(Value, BTreeSet<usize>)> = Vec::new();
                        for &i in &spans {
                            let v = self.value(&args[0], i, None, None);
                            match groups.iter_mut().find(|(k, _)| same(k, &v)) {
                                Some(g) => {
                                    g.1.insert(i);
                                }
                                None => groups.push((v, BTreeSet::from([i]))),
                            }
                        }
                        for (v, g) in groups {
                            let mut attrs = attrs.clone();
                            set_attr(&mut attrs, format!("by({})", args[0]), v);
                            next.push((g, attrs, selected.clone()));
                        }
                    }
                    Stage::Select(args) => {
                        let mut selected = selected;
                        for a in args {
                            if !selected.iter().any(|s| s.to_string() == a.to_string()) {
                                selected.push(a.clone());
                            }
                        }
                        next.push((spans, attrs, selected));
                    }
                    other => unreachable!("{other}"),
                }
            }
            sets = next;
        }
        sets
    }

    /// The aggregate as compared and as reported. Plain `f64` arithmetic is exact for the small
    /// numbers the generator uses; an average of durations is reported rounded to nanoseconds.
    fn aggregate(&self, func: AggregateFn, arg: Option<&FieldExpr>, spans: &BTreeSet<usize>) -> Option<(Value, Value)> {
        if func == AggregateFn::Count {
            let n = Value::Int(spans.len() as i64);
            return Some((n.clone(), n));
        }
        let values: Vec<Value> = spans
            .iter()
            .map(|&i| self.value(arg.unwrap(), i, None, None))
            .filter(is_num)
            .collect();
        if values.is_empty() {
            return None;
        }
        let all_int = values.iter().all(|v| matches!(v, Value::Int(_)));
        let all_dur = values.iter().all(|v| matches!(v, Value::Duration(_)));
        let floats: Vec<f64> = values.iter().map(to_f64).collect();
        let sum: f64 = floats.iter().fold(0.0, |a, b| a + b);
        let typed = |x: f64| {
            if all_int {
                Value::Int(x as i64)
            } else if all_dur {
                Value::Duration(x as i64)
            } else {
                Value::Float(x)
            }
        };
        let v = match func {
            AggregateFn::Sum => typed(sum),
            AggregateFn::Min => typed(floats.iter().copied().fold(f64::INFINITY, f64::min)),
            AggregateFn::Max => typed(floats.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            AggregateFn::Avg => {
                let avg = sum / values.len() as f64;
                let reported = if all_dur {
                    Value::Duration(avg.round() as i64)
                } else {
                    Value::Float(avg)
                };
                return Some((Value::Float(avg), reported));
            }
            AggregateFn::Count => unreachable!(),
        };
        Some((v.clone(), v))
    }
}

fn arith(op: BinaryOp, l: &Value, r: &Value) -> Value {
    if let (Value::Int(a), Value::Int(b)) = (l, r) {
        let exact = match op {
            BinaryOp::Add => a.checked_add(*b),
            BinaryOp::Sub => a.checked_sub(*b),
            BinaryOp::Mul => a.checked_mul(*b),
            BinaryOp::Div | BinaryOp::Mod if *b == 0 => return Value::Nil,
            BinaryOp::Div => a.checked_div(*b),
            BinaryOp::Mod => Some(a.checked_rem(*b).unwrap_or(0)),
            BinaryOp::Pow => u32::try_from(*b).ok().and_then(|e| a.checked_pow(e)),
            _ => None,
        };
        if let Some(x) = exact {
            return Value::Int(x);
        }
    }
    if !is_num(l) || !is_num(r) {
        return Value::Nil;
    }
    let (a, b) = (to_f64(l), to_f64(r));
    Value::Float(match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Mod => a % b,
        BinaryOp::Pow => a.powf(b),
        _ => f64::NAN,
    })
}

/// Group-key equality: same type and value (floats by value, so `-0.0` and `0.0` group).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q)),
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------------
// Properties

fn check(trace: &Trace, text: &str) -> Result<bool, TestCaseError> {
    let Some(query) = accept(text) else {
        return Ok(false);
    };
    let got = eval(&query, trace).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
    let want = Model::new(trace).eval(&query);
    if got != want {
        return Err(TestCaseError::fail(format!(
            "`{text}` (parsed as `{query}`)\n  eval:  {got:?}\n  model: {want:?}\n  trace: {trace:#?}"
        )));
    }
    Ok(true)
}

/// `eval_metrics` agrees with the spansets `eval` returns for the same spanset query: per step
/// of `[10, 90)` by 20ns, the span counts per service and the longest duration.
fn check_metrics(trace: &Trace, text: &str) -> Result<bool, TestCaseError> {
    let Some(query) = accept(text) else {
        return Ok(false);
    };
    let fail = |e: String| TestCaseError::fail(format!("`{text}`: {e}"));
    let spans: BTreeSet<usize> = eval(&query, trace)
        .map_err(|e| fail(e.to_string()))?
        .iter()
        .flat_map(|s| s.spans.iter().copied())
        .collect();
    let (start, end, step) = (10u64, 90u64, 20u64);
    let mut counts: std::collections::BTreeMap<String, Vec<Option<f64>>> = Default::default();
    let mut longest: Vec<Option<f64>> = vec![None; 4];
    for &i in &spans {
        let span = &trace.spans[i];
        if span.start_unix_nano < start || span.start_unix_nano >= end {
            continue;
        }
        let n = ((span.start_unix_nano - start) / step) as usize;
        let service = span.service_name().unwrap_or_default().to_owned();
        let row = counts.entry(service).or_insert_with(|| vec![Some(0.0); 4]);
        row[n] = row[n].map(|c| c + 1.0);
        let d = span.duration_nano as f64 / 1e9;
        longest[n] = Some(longest[n].map_or(d, |m: f64| m.max(d)));
    }
    let run = |metrics: &str| {
        let q = parse(&format!("{text} | {metrics}")).map_err(|e| fail(e.to_string()))?;
        eval_metrics(&q, [trace], start, end, step).map_err(|e| fail(e.to_string()))
    };
    let got: std::collections::BTreeMap<String, Vec<Option<f64>>> =
        run("count_over_time() by (resource.service.name)")?
            .into_iter()
            .map(|s| match &s.labels[..] {
                [(_, Value::Str(service))] => Ok((service.clone(), s.values)),
                other => Err(fail(format!("unexpected labels {other:?}"))),
            })
            .collect::<Result<_, _>>()?;
    prop_assert_eq!(&got, &counts, "`{}` counts", text);
    let max = run("max_over_time(duration)")?;
    let want: Vec<_> = if counts.is_empty() { Vec::new() } else { vec![longest] };
    let got: Vec<_> = max.into_iter().map(|s| s.values).collect();
    prop_assert_eq!(got, want, "`{}` max duration", text);

    // compare(): span names per step, for the error spans (selection) and the others, and
    // each group's total.
    type Counts = std::collections::BTreeMap<(String, String), Vec<Option<f64>>>;
    let mut want = Counts::new();
    for &i in &spans {
        let span = &trace.spans[i];
        if span.start_unix_nano < start || span.start_unix_nano >= end {
            continue;
        }
        let n = ((span.start_unix_nano - start) / step) as usize;
        let group = if span.status == Status::Error {
            "selection"
        } else {
            "baseline"
        };
        for key in [
            (group.to_owned(), span.name.clone()),
            (format!("{group}_total"), "nil".to_owned()),
        ] {
            let row = want.entry(key).or_insert_with(|| vec![Some(0.0); 4]);
            row[n] = row[n].map(|c| c + 1.0);
        }
    }
    let mut got = Counts::new();
    for s in run("compare({ status = error }, 1000)")? {
        if let [(_, Value::Str(meta)), (key, Value::Str(name))] = &s.labels[..]
            && key == "name"
        {
            got.insert((meta.clone(), name.clone()), s.values);
        }
    }
    prop_assert_eq!(got, want, "`{}` compare names", text);
    Ok(true)
}

#[derive(Deserialize)]
struct Corpus {
    valid: Vec<String>,
    unsupported: Vec<Unsupported>,
}

#[derive(Deserialize)]
struct Unsupported {
    query: String,
}

/// The corpus queries the evaluator must run: `valid` minus `unsupported`.
fn runnable_corpus() -> &'static [Query] {
    static QUERIES: OnceLock<Vec<Query>> = OnceLock::new();
    QUERIES.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/traceql/queries.yaml");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let corpus: Corpus = serde_yaml::from_str(&text).unwrap();
        let unsupported: BTreeSet<String> = corpus.unsupported.into_iter().map(|u| u.query).collect();
        corpus
            .valid
            .iter()
            .filter(|q| !unsupported.contains(*q))
            .map(|q| parse(q).unwrap())
            .collect()
    })
}

#[test]
fn generator_mostly_produces_accepted_queries() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = query_text();
    let mut accepted = 0;
    for _ in 0..500 {
        let text = strategy.new_tree(&mut runner).unwrap().current();
        if accept(&text).is_some() {
            accepted += 1;
        }
    }
    assert!(
        accepted >= 400,
        "only {accepted} of 500 generated queries were accepted"
    );
}

#[test]
fn corpus_has_runnable_queries() {
    assert!(runnable_corpus().len() >= 100, "{}", runnable_corpus().len());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3000,
        // Integration tests have no lib.rs beside them, so name the regressions file directly.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn eval_matches_the_reference(trace in trace(), queries in prop::collection::vec(query_text(), 4)) {
        for text in &queries {
            check(&trace, text)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn metrics_agree_with_spansets(trace in trace(), queries in prop::collection::vec(query_text(), 2)) {
        for text in &queries {
            check_metrics(&trace, text)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 150,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn supported_corpus_queries_evaluate(trace in trace()) {
        for query in runnable_corpus() {
            let metrics = query.math.is_some()
                || query
                    .pipeline
                    .stages
                    .iter()
                    .any(|s| matches!(s, Stage::Metrics(_) | Stage::Compare(_)));
            if metrics {
                let result = eval_metrics(query, [&trace], 0, 200, 10);
                prop_assert!(result.is_ok(), "`{}`: {}", query, result.unwrap_err());
            } else {
                let result = eval(query, &trace);
                prop_assert!(result.is_ok(), "`{}`: {}", query, result.unwrap_err());
            }
        }
    }
}

/// Guards the property above against becoming vacuous: enough generated cases must select
/// spans, split into several spansets, and run on traces with parent cycles.
#[test]
fn generated_cases_exercise_the_evaluator() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (traces, queries) = (trace(), query_text());
    let (mut non_empty, mut several, mut cyclic) = (0, 0, 0);
    for _ in 0..1000 {
        let t = traces.new_tree(&mut runner).unwrap().current();
        let text = queries.new_tree(&mut runner).unwrap().current();
        let model = Model::new(&t);
        let on_cycle = |i: usize| {
            let mut at = model.parent[i];
            for _ in 0..t.spans.len() {
                match at {
                    Some(p) if p == i => return true,
                    Some(p) => at = model.parent[p],
                    None => return false,
                }
            }
            false
        };
        if (0..t.spans.len()).any(on_cycle) {
            cyclic += 1;
        }
        if let Some(q) = accept(&text) {
            let got = eval(&q, &t).unwrap();
            non_empty += usize::from(!got.is_empty());
            several += usize::from(got.len() > 1);
        }
    }
    assert!(non_empty >= 200, "{non_empty} of 1000 cases selected spans");
    assert!(several >= 15, "{several} of 1000 cases gave several spansets");
    assert!(cyclic >= 20, "{cyclic} of 1000 traces had a parent cycle");
}
