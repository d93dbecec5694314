//! The reference evaluator: interprets the syntax tree directly, as naively as it can (see the
//! test's docs).

use std::collections::BTreeSet;

use regex::Regex;
use weft_traceql::ast::{
    AggregateFn, AttributeScope, BinaryOp, FieldExpr, Intrinsic, Query, SpansetExpr, SpansetOp, Stage, Static, UnaryOp,
};
use weft_traceql::{Event, Link, Spanset, Trace, Value};

/// A spanset in the model: spans, attributes, selected fields.
type ModelSet = (BTreeSet<usize>, Vec<(String, Value)>, Vec<FieldExpr>);

pub(crate) struct Model<'t> {
    t: &'t Trace,
    pub(crate) parent: Vec<Option<usize>>,
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
    pub(crate) fn new(t: &'t Trace) -> Model<'t> {
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

    pub(crate) fn eval(&self, q: &Query) -> Vec<Spanset> {
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
