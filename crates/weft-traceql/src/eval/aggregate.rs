//! Aggregates over a spanset (`count()`, `avg(f)` and the like, exact where the inputs allow)
//! and the grouping keys of `by()`.

use crate::ast::{AggregateFn, BinaryOp, Kind, Status};
use crate::trace::Value;

use super::TraceEnv;
use super::compile::CScalar;
use super::values::{Val, apply, as_f64, eval_value};

/// An aggregate over a spanset, kept exact where the inputs allow.
#[derive(Debug, Clone, Copy)]
pub(super) enum Agg {
    Int(i128),
    Duration(i128),
    Float(f64),
    /// An average of integers (or durations, when `duration`) as `sum / count`.
    Ratio {
        sum: i128,
        count: u64,
        duration: bool,
    },
}

/// How a set of aggregated numbers is typed: all integers, all durations, or mixed (floats).
#[derive(Debug, Clone, Copy, PartialEq)]
enum NumKind {
    Int,
    Duration,
    Float,
}

impl CScalar {
    pub(super) fn aggregate(&self, env: &TraceEnv<'_>, spans: &[usize]) -> Option<Agg> {
        if self.func == AggregateFn::Count {
            return Some(Agg::Int(spans.len() as i128));
        }
        let arg = self.arg.as_ref()?;
        let mut kind = None;
        let mut values: Vec<Val<'_>> = Vec::with_capacity(spans.len());
        for &i in spans {
            let v = eval_value(arg, env.ctx(i));
            let k = match v {
                Val::Int(_) => NumKind::Int,
                Val::Duration(_) => NumKind::Duration,
                Val::Float(_) => NumKind::Float,
                _ => continue,
            };
            kind = Some(match kind {
                None => k,
                Some(prev) if prev == k => k,
                Some(_) => NumKind::Float,
            });
            values.push(v);
        }
        let kind = kind?;
        let exact = |v: &Val<'_>| match v {
            Val::Int(i) | Val::Duration(i) => i128::from(*i),
            _ => 0,
        };
        let typed = |x: i128| match kind {
            NumKind::Duration => Agg::Duration(x),
            _ => Agg::Int(x),
        };
        let floats = || values.iter().filter_map(|v| as_f64(*v));
        Some(match (self.func, kind) {
            (AggregateFn::Sum, NumKind::Float) => Agg::Float(floats().sum()),
            (AggregateFn::Sum, _) => typed(values.iter().map(exact).sum()),
            (AggregateFn::Min, NumKind::Float) => Agg::Float(floats().fold(f64::INFINITY, f64::min)),
            (AggregateFn::Min, _) => typed(values.iter().map(exact).min()?),
            (AggregateFn::Max, NumKind::Float) => Agg::Float(floats().fold(f64::NEG_INFINITY, f64::max)),
            (AggregateFn::Max, _) => typed(values.iter().map(exact).max()?),
            (AggregateFn::Avg, NumKind::Float) => Agg::Float(floats().sum::<f64>() / values.len() as f64),
            (AggregateFn::Avg, _) => Agg::Ratio {
                sum: values.iter().map(exact).sum(),
                count: values.len() as u64,
                duration: kind == NumKind::Duration,
            },
            (AggregateFn::Count, _) => Agg::Int(values.len() as i128),
        })
    }
}

impl Agg {
    /// `self op value` for a numeric literal; exact for integer and duration literals.
    pub(super) fn compare(self, op: BinaryOp, value: &Value) -> bool {
        let exact = match value {
            Value::Int(v) | Value::Duration(v) => Some(i128::from(*v)),
            _ => None,
        };
        let float = match value {
            Value::Int(v) | Value::Duration(v) => *v as f64,
            Value::Float(x) => *x,
            _ => return false,
        };
        let ord = match (self, exact) {
            (Agg::Int(x) | Agg::Duration(x), Some(v)) => Some(x.cmp(&v)),
            (Agg::Ratio { sum, count, .. }, Some(v)) => Some(sum.cmp(&(v * i128::from(count)))),
            _ => self.as_f64().partial_cmp(&float),
        };
        apply(op, ord)
    }

    fn as_f64(self) -> f64 {
        match self {
            Agg::Int(x) | Agg::Duration(x) => x as f64,
            Agg::Float(x) => x,
            Agg::Ratio { sum, count, .. } => sum as f64 / count as f64,
        }
    }

    pub(super) fn to_value(self) -> Value {
        match self {
            Agg::Int(x) => i64::try_from(x).map_or(Value::Float(x as f64), Value::Int),
            Agg::Duration(x) => Value::Duration(i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })),
            Agg::Float(x) => Value::Float(x),
            Agg::Ratio { duration: true, .. } => Value::Duration(self.as_f64().round() as i64),
            Agg::Ratio { .. } => Value::Float(self.as_f64()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Grouping

/// A hashable stand-in for a [`Value`]: floats by bit pattern (with `-0.0` as `0.0` and one NaN).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum GroupKey {
    Str(String),
    Int(i64),
    Float(u64),
    Bool(bool),
    Duration(i64),
    Status(Status),
    Kind(Kind),
    Nil,
    Array(Vec<GroupKey>),
}

impl GroupKey {
    pub(crate) fn of(value: &Value) -> GroupKey {
        match value {
            Value::Str(s) => GroupKey::Str(s.clone()),
            Value::Int(i) => GroupKey::Int(*i),
            Value::Float(x) => GroupKey::Float(if x.is_nan() {
                f64::NAN.to_bits()
            } else {
                (x + 0.0).to_bits()
            }),
            Value::Bool(b) => GroupKey::Bool(*b),
            Value::Duration(d) => GroupKey::Duration(*d),
            Value::Status(s) => GroupKey::Status(*s),
            Value::Kind(k) => GroupKey::Kind(*k),
            Value::Nil => GroupKey::Nil,
            Value::Array(a) => GroupKey::Array(a.iter().map(GroupKey::of).collect()),
        }
    }
}
