//! Second stages (comparisons, arithmetic with a number, `topk` / `bottomk`) and arithmetic
//! between queries, applied to finished series.

use std::collections::HashMap;

use crate::ast::BinaryOp;
use crate::eval::{CSecond, GroupKey};
use crate::trace::Value;

use super::Series;
use super::accumulator::cmp_labels;

/// Applies second stages in order.
pub(super) fn second_stages(mut series: Vec<Series>, stages: &[CSecond], steps: usize) -> Vec<Series> {
    for stage in stages {
        series = match *stage {
            CSecond::TopK(k) => top_k(series, k, steps, true),
            CSecond::BottomK(k) => top_k(series, k, steps, false),
            CSecond::Filter(op, value) => series
                .into_iter()
                .filter_map(|mut s| {
                    for v in &mut s.values {
                        *v = v.filter(|x| !x.is_nan() && compare_f64(op, *x, value));
                    }
                    s.values.iter().any(Option::is_some).then_some(s)
                })
                .collect(),
            CSecond::Arithmetic {
                op,
                value,
                scalar_first,
            } => series
                .into_iter()
                .map(|mut s| {
                    for v in &mut s.values {
                        *v = v.and_then(|x| {
                            let (a, b) = if scalar_first { (value, x) } else { (x, value) };
                            arithmetic(op, a, b)
                        });
                    }
                    s
                })
                .collect(),
        };
    }
    series
}

fn compare_f64(op: BinaryOp, a: f64, b: f64) -> bool {
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

/// `a op b` for `+ - * /`; `None` for division by zero and any other undefined result.
fn arithmetic(op: BinaryOp, a: f64, b: f64) -> Option<f64> {
    let x = match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div if b == 0.0 => return None,
        BinaryOp::Div => a / b,
        _ => return None,
    };
    (!x.is_nan()).then_some(x)
}

/// `topk(k)` (`highest`) or `bottomk(k)`, as Tempo: with at most `k` series, all of them
/// unchanged; otherwise, at each step, the `k` series with the highest (lowest) values there
/// keep that value, and a series kept at no step is dropped. Ties go to the series whose labels
/// sort first for `topk` and last for `bottomk`, as Tempo's heaps break them.
fn top_k(series: Vec<Series>, k: usize, steps: usize, highest: bool) -> Vec<Series> {
    if series.len() <= k {
        return series;
    }
    // keep[n * steps + step]: series n is among the k at that step.
    let mut keep = vec![false; series.len() * steps];
    let mut order: Vec<usize> = Vec::with_capacity(series.len());
    for step in 0..steps {
        order.clear();
        order.extend((0..series.len()).filter(|&n| series[n].values.get(step).copied().flatten().is_some()));
        let value = |n: usize| series[n].values[step].unwrap_or(f64::NAN);
        order.sort_by(|&a, &b| {
            let by_value = value(a).total_cmp(&value(b));
            let by_labels = cmp_labels(&series[a].labels, &series[b].labels);
            if highest {
                by_value.reverse().then(by_labels)
            } else {
                by_value.then(by_labels.reverse())
            }
        });
        for &n in order.iter().take(k) {
            keep[n * steps + step] = true;
        }
    }
    series
        .into_iter()
        .zip(keep.chunks(steps.max(1)))
        .filter(|(_, keep)| keep.iter().any(|&k| k))
        .map(|(mut s, keep)| {
            for (v, &k) in s.values.iter_mut().zip(keep) {
                if !k {
                    *v = None;
                }
            }
            s
        })
        .collect()
}

/// The labels that identify a series for matching: all but `__name__`.
fn match_key(labels: &[(String, Value)]) -> Vec<(String, GroupKey)> {
    labels
        .iter()
        .filter(|(k, _)| k != "__name__")
        .map(|(k, v)| (k.clone(), GroupKey::of(v)))
        .collect()
}

/// `lhs op rhs` between the series of two metrics queries, as Tempo: series pair up when their
/// labels other than `__name__` are equal, and a series without such labels pairs with every
/// series of the other side. Unpaired series are dropped. Each point is `l op r` (`None` if
/// either is, or on division by zero). The labels are the left series' plus the right's not
/// already there; `__name__` becomes `(l op r)` when both sides have one, else it is dropped.
pub(super) fn binary(op: BinaryOp, lhs: &[Series], rhs: &[Series]) -> Vec<Series> {
    let index = |set: &[Series]| -> HashMap<Vec<(String, GroupKey)>, usize> {
        set.iter().enumerate().map(|(n, s)| (match_key(&s.labels), n)).collect()
    };
    let (li, ri) = (index(lhs), index(rhs));
    let bare: Vec<(String, GroupKey)> = Vec::new();
    let target = if ri.contains_key(&bare) { lhs } else { rhs };
    let mut out = Vec::new();
    for t in target {
        let key = match_key(&t.labels);
        let find =
            |index: &HashMap<Vec<(String, GroupKey)>, usize>| index.get(&key).or_else(|| index.get(&bare)).copied();
        let (Some(l), Some(r)) = (find(&li), find(&ri)) else {
            continue;
        };
        let (l, r) = (&lhs[l], &rhs[r]);
        let values = l
            .values
            .iter()
            .zip(&r.values)
            .map(|(a, b)| arithmetic(op, (*a)?, (*b)?))
            .collect();
        out.push(Series::new(merge_labels(op, &l.labels, &r.labels), values));
    }
    out
}

fn merge_labels(op: BinaryOp, l: &[(String, Value)], r: &[(String, Value)]) -> Vec<(String, Value)> {
    let mut out = l.to_vec();
    for (k, v) in r {
        if k != "__name__" && !l.iter().any(|(lk, _)| lk == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    let name = |labels: &[(String, Value)]| {
        labels.iter().find_map(|(k, v)| match v {
            Value::Str(s) if k == "__name__" => Some(s.clone()),
            _ => None,
        })
    };
    match (name(l), name(r)) {
        (Some(a), Some(b)) => {
            if let Some(slot) = out.iter_mut().find(|(k, _)| k == "__name__") {
                slot.1 = Value::Str(format!("({a} {} {b})", op.symbol()));
            }
        }
        _ => out.retain(|(k, _)| k != "__name__"),
    }
    out
}
