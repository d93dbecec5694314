//! Trace structure: parent links, children, parent cycles and nested sets, arranged so that each
//! structural operator takes time linear in the trace's span count.

use crate::trace::Trace;

use super::compile::{RelMode, Relation};
use super::union;

/// Parent links of a trace, arranged for linear-time structural operators.
///
/// Each span has at most one parent, so following parents from any span ends at a span without
/// a parent or runs into a cycle. `order` lists spans so that a parent comes before its children
/// (spans without a parent and spans on cycles first); walking it forwards or backwards computes
/// "some ancestor is in A" or "some descendant is in A" for all spans at once, and cycles are
/// handled by counting A members per cycle instead of walking them.
pub(super) struct Structure {
    parent: Vec<Option<usize>>,
    /// How many spans have each span as parent (`span:childCount`).
    pub(super) children: Vec<u32>,
    /// For spans on a parent cycle, the cycle's number.
    cycle: Vec<Option<usize>>,
    /// The cycle a span reaches by following parents (its own for spans on a cycle).
    reach: Vec<Option<usize>>,
    cycles: usize,
    order: Vec<usize>,
    /// What siblings share: the parent's index, or `n` (the span count) for spans without a
    /// parent id, which Tempo's nested sets give one common parent. `None` for spans whose
    /// parent is not in the trace: they have no siblings.
    sibling_key: Vec<Option<usize>>,
    /// `nestedSetLeft`, `nestedSetRight` and `nestedSetParent` of each span: see
    /// [`nested_sets`].
    pub(super) nested_set: Vec<[i64; 3]>,
}

/// Tempo's nested-set numbering of a trace: a depth-first walk from each root span (no parent
/// span ID) with one counter starting at 1, giving a span `nestedSetLeft` on the way down and
/// `nestedSetRight` on the way back up; `nestedSetParent` is the parent's `nestedSetLeft`, -1
/// for a root. Roots, and each span's children, are visited by start time, then span ID, so the
/// numbers do not depend on how the trace was stored. Spans not reached from a root (their
/// parent is missing, or on a parent cycle) get 0 for all three, as in Tempo.
fn nested_sets(
    trace: &Trace,
    parent: &[Option<usize>],
    cycle: &[Option<usize>],
    count: &[usize],
    children: &[usize],
) -> Vec<[i64; 3]> {
    let n = parent.len();
    let mut out = vec![[0i64; 3]; n];
    let by_start = |a: &usize, b: &usize| {
        let (x, y) = (&trace.spans[*a], &trace.spans[*b]);
        (x.start_unix_nano, x.span_id).cmp(&(y.start_unix_nano, y.span_id))
    };
    let mut roots: Vec<usize> = (0..n)
        .filter(|&i| trace.spans[i].parent_span_id.is_none() && cycle[i].is_none())
        .collect();
    roots.sort_by(by_start);
    let mut bound = 1i64;
    // (span, next child position); children sorted once when the span is entered.
    let mut stack: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in roots {
        out[root] = [bound, 0, -1];
        bound += 1;
        let mut kids = children[count[root]..count[root + 1]].to_vec();
        kids.sort_by(by_start);
        stack.push((root, kids, 0));
        while let Some((span, kids, next)) = stack.last_mut() {
            if let Some(&child) = kids.get(*next) {
                *next += 1;
                out[child] = [bound, 0, out[*span][0]];
                bound += 1;
                let mut grand = children[count[child]..count[child + 1]].to_vec();
                grand.sort_by(by_start);
                stack.push((child, grand, 0));
            } else {
                out[*span][1] = bound;
                bound += 1;
                stack.pop();
            }
        }
    }
    out
}

impl Structure {
    pub(super) fn new(trace: &Trace, parent: Vec<Option<usize>>) -> Structure {
        let n = parent.len();
        let sibling_key = (0..n)
            .map(|i| match parent[i] {
                Some(p) => Some(p),
                None if trace.spans[i].parent_span_id.is_none() => Some(n),
                None => None,
            })
            .collect();
        // Find cycles: walk up from each unvisited span, marking the path; meeting a span of the
        // current path closes a cycle.
        const NEW: u8 = 0;
        const ON_PATH: u8 = 1;
        const DONE: u8 = 2;
        let mut state = vec![NEW; n];
        let mut cycle = vec![None; n];
        let mut cycles = 0;
        let mut path = Vec::new();
        for start in 0..n {
            let mut at = Some(start);
            while let Some(i) = at {
                match state[i] {
                    NEW => {
                        state[i] = ON_PATH;
                        path.push(i);
                        at = parent[i];
                    }
                    ON_PATH => {
                        let from = path.iter().rposition(|&p| p == i).unwrap_or(0);
                        for &c in &path[from..] {
                            cycle[c] = Some(cycles);
                        }
                        cycles += 1;
                        break;
                    }
                    _ => break,
                }
            }
            for &p in &path {
                state[p] = DONE;
            }
            path.clear();
        }
        // Children of spans not on a cycle, as a compressed adjacency list.
        let mut count = vec![0usize; n + 1];
        for i in 0..n {
            if let (Some(p), None) = (parent[i], cycle[i]) {
                count[p + 1] += 1;
            }
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut children = vec![0usize; count[n]];
        for i in 0..n {
            if let (Some(p), None) = (parent[i], cycle[i]) {
                children[fill[p]] = i;
                fill[p] += 1;
            }
        }
        // Breadth-first from spans without a parent and spans on cycles.
        let mut order: Vec<usize> = (0..n).filter(|&i| parent[i].is_none() || cycle[i].is_some()).collect();
        let mut next = 0;
        while next < order.len() {
            let p = order[next];
            next += 1;
            order.extend_from_slice(&children[count[p]..count[p + 1]]);
        }
        let mut reach = vec![None; n];
        for &i in &order {
            reach[i] = match (cycle[i], parent[i]) {
                (Some(c), _) => Some(c),
                (None, Some(p)) => reach[p],
                (None, None) => None,
            };
        }
        let mut child_count = vec![0u32; n];
        for p in parent.iter().flatten() {
            child_count[*p] = child_count[*p].saturating_add(1);
        }
        let nested_set = nested_sets(trace, &parent, &cycle, &count, &children);
        Structure {
            parent,
            children: child_count,
            cycle,
            reach,
            cycles,
            order,
            sibling_key,
            nested_set,
        }
    }

    /// The spans of `rhs` that stand in `rel` to some span of `lhs`, with `mode` applied:
    /// negated, or joined with the spans of `lhs` that some span of `rhs` stands in `rel` to.
    pub(super) fn apply(&self, rel: Relation, mode: RelMode, lhs: &[usize], rhs: &[usize]) -> Vec<usize> {
        match mode {
            RelMode::Plain => self.relate(rel, false, lhs, rhs),
            RelMode::Negated => self.relate(rel, true, lhs, rhs),
            RelMode::Union => union(
                &self.relate(rel.inverse(), false, rhs, lhs),
                &self.relate(rel, false, lhs, rhs),
            ),
        }
    }

    /// The spans of `rhs` that stand in `rel` to some span of `lhs` (or to none, if `negated`).
    fn relate(&self, rel: Relation, negated: bool, lhs: &[usize], rhs: &[usize]) -> Vec<usize> {
        let n = self.parent.len();
        let mut in_lhs = vec![false; n];
        for &a in lhs {
            in_lhs[a] = true;
        }
        let keep: Box<dyn Fn(usize) -> bool> = match rel {
            Relation::Sibling => {
                // How many lhs spans share each parent; a span is not its own sibling.
                let mut sharing = vec![0usize; n + 1];
                for &a in lhs {
                    if let Some(k) = self.sibling_key[a] {
                        sharing[k] += 1;
                    }
                }
                let in_lhs = &in_lhs;
                Box::new(move |b: usize| self.sibling_key[b].is_some_and(|k| sharing[k] > usize::from(in_lhs[b])))
            }
            Relation::Child => Box::new(|b: usize| self.parent[b].is_some_and(|p| in_lhs[p])),
            Relation::Parent => {
                let mut is_parent = vec![false; n];
                for &a in lhs {
                    if let Some(p) = self.parent[a] {
                        is_parent[p] = true;
                    }
                }
                Box::new(move |b: usize| is_parent[b])
            }
            Relation::Descendant => {
                // below[i]: some span reached from i by one or more parent steps is in lhs.
                let mut on_cycle = vec![0usize; self.cycles];
                for &a in lhs {
                    if let Some(c) = self.cycle[a] {
                        on_cycle[c] += 1;
                    }
                }
                let mut below = vec![false; n];
                for &i in &self.order {
                    below[i] = match (self.cycle[i], self.parent[i]) {
                        (Some(c), _) => on_cycle[c] > 0,
                        (None, Some(p)) => in_lhs[p] || below[p],
                        (None, None) => false,
                    };
                }
                let in_lhs = &in_lhs;
                Box::new(move |b: usize| match self.cycle[b] {
                    Some(c) => on_cycle[c] > usize::from(in_lhs[b]),
                    None => below[b],
                })
            }
            Relation::Ancestor => {
                // above[i]: i is reached from some lhs span by one or more parent steps.
                let mut reaching = vec![0usize; self.cycles];
                for &a in lhs {
                    if let Some(c) = self.reach[a] {
                        reaching[c] += 1;
                    }
                }
                let mut above = vec![false; n];
                for &i in self.order.iter().rev() {
                    if self.cycle[i].is_none()
                        && (in_lhs[i] || above[i])
                        && let Some(p) = self.parent[i]
                    {
                        above[p] = true;
                    }
                }
                let in_lhs = &in_lhs;
                Box::new(move |b: usize| match self.cycle[b] {
                    Some(c) => reaching[c] > usize::from(in_lhs[b]),
                    None => above[b],
                })
            }
        };
        rhs.iter().copied().filter(|&b| keep(b) != negated).collect()
    }
}
