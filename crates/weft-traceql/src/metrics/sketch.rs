//! Quantiles that merge in bounded size: `quantile_over_time`'s per-step state.
//!
//! A step keeps its values exactly while it has at most [`EXACT_MAX`] of them, and its
//! quantiles are then exact (linear interpolation between the closest ranks). Past that it
//! becomes a log-bucket sketch (DDSketch's mapping): bucket `i` of the positive values holds
//! `(γ^(i-1), γ^i]` with `γ = (1 + α) / (1 - α)`, negative values mirror it, zero has its
//! own count. A quantile is then read at the same ranks from the buckets, each rank's value
//! taken as its bucket's midpoint `2γ^i / (γ + 1)`, so it is within **α = 1 %** (relative) of
//! the exact one. The buckets are counts, so merging sketches (or a sketch and exact values)
//! gives the sketch of all the values whatever the split: a query split over queriers gives
//! the answer one querier gives.
//!
//! Size: one bucket per 2 % of value range in use; durations from 1 µs to 100 s take at most
//! about 920 buckets a step, however many spans they count.

use std::collections::BTreeMap;

/// Values per step kept exactly; more turn the step into a [`Sketch`].
pub const EXACT_MAX: usize = 1024;
/// The sketch's relative error.
pub const ALPHA: f64 = 0.01;
/// Most values a sketch from elsewhere may count ([`Sketch::from_counts`]): more than any part
/// of a query holds, with room to add thousands of parts without overflow.
pub const MAX_COUNT: u64 = 1 << 48;

fn gamma() -> f64 {
    (1.0 + ALPHA) / (1.0 - ALPHA)
}

/// The bucket of a positive magnitude `v`: the `i` with `γ^(i-1) < v <= γ^i`, saturating.
fn index(v: f64) -> i32 {
    (v.ln() / gamma().ln()).ceil() as i32
}

/// The value bucket `i` stands for.
fn midpoint(i: i32) -> f64 {
    let g = gamma();
    2.0 * g.powi(i) / (g + 1.0)
}

/// Bucket counts of a step's values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sketch {
    /// Negative values, by the bucket of their magnitude.
    pub neg: BTreeMap<i32, u64>,
    pub zero: u64,
    pub pos: BTreeMap<i32, u64>,
}

impl Sketch {
    /// A sketch of bucket counts from another process (a query job's reply); more than
    /// [`MAX_COUNT`] values in all is refused.
    pub fn from_counts(neg: Vec<(i32, u64)>, zero: u64, pos: Vec<(i32, u64)>) -> Result<Sketch, String> {
        let total = neg
            .iter()
            .chain(&pos)
            .map(|&(_, n)| n)
            .chain([zero])
            .try_fold(0u64, |a, n| a.checked_add(n).filter(|&t| t <= MAX_COUNT));
        if total.is_none() {
            return Err(format!("a quantile sketch counts more than {MAX_COUNT} values"));
        }
        let mut s = Sketch {
            zero,
            ..Sketch::default()
        };
        for (i, n) in neg {
            *s.neg.entry(i).or_default() += n;
        }
        for (i, n) in pos {
            *s.pos.entry(i).or_default() += n;
        }
        Ok(s)
    }

    fn add(&mut self, v: f64) {
        self.add_n(v, 1);
    }

    fn add_n(&mut self, v: f64, n: u64) {
        if v > 0.0 {
            *self.pos.entry(index(v)).or_default() += n;
        } else if v < 0.0 {
            *self.neg.entry(index(-v)).or_default() += n;
        } else {
            self.zero += n;
        }
    }

    fn merge(&mut self, o: Sketch) {
        for (i, n) in o.neg {
            *self.neg.entry(i).or_default() += n;
        }
        for (i, n) in o.pos {
            *self.pos.entry(i).or_default() += n;
        }
        self.zero += o.zero;
    }

    pub fn count(&self) -> u64 {
        self.neg.values().sum::<u64>() + self.zero + self.pos.values().sum::<u64>()
    }

    /// The value at rank `k` (0: the smallest) as the buckets give it.
    fn at_rank(&self, k: u64) -> Option<f64> {
        let mut seen = 0;
        let ascending = self
            .neg
            .iter()
            .rev()
            .map(|(&i, &n)| (-midpoint(i), n))
            .chain(std::iter::once((0.0, self.zero)))
            .chain(self.pos.iter().map(|(&i, &n)| (midpoint(i), n)));
        for (v, n) in ascending {
            seen += n;
            if k < seen {
                return Some(v);
            }
        }
        None
    }
}

/// One step of `quantile_over_time`: exact values, or a sketch once there are more than
/// [`EXACT_MAX`].
#[derive(Debug, Clone, PartialEq)]
pub enum Quantiles {
    Exact(Vec<f64>),
    Sketch(Sketch),
}

impl Default for Quantiles {
    fn default() -> Self {
        Quantiles::Exact(Vec::new())
    }
}

impl Quantiles {
    pub fn push(&mut self, v: f64) {
        match self {
            Quantiles::Exact(vs) => {
                vs.push(v);
                if vs.len() > EXACT_MAX {
                    self.become_sketch();
                }
            }
            Quantiles::Sketch(s) => s.add(v),
        }
    }

    /// Adds another part's values of the same step.
    pub fn merge(&mut self, other: Quantiles) {
        match other {
            Quantiles::Exact(vs) => {
                for v in vs {
                    self.push(v);
                }
            }
            Quantiles::Sketch(s) => {
                self.become_sketch();
                if let Quantiles::Sketch(mine) = self {
                    mine.merge(s);
                }
            }
        }
    }

    fn become_sketch(&mut self) {
        if let Quantiles::Exact(vs) = self {
            let mut s = Sketch::default();
            for &v in vs.iter() {
                s.add(v);
            }
            *self = Quantiles::Sketch(s);
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            Quantiles::Exact(vs) => vs.len() as u64,
            Quantiles::Sketch(s) => s.count(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `q` quantile, interpolated linearly between the closest ranks: rank
    /// `h = q * (n - 1)`, value `x[⌊h⌋] + (h - ⌊h⌋) * (x[⌊h⌋ + 1] - x[⌊h⌋])`. Exact for exact
    /// values (sorts them), within [`ALPHA`] of it for a sketch.
    pub fn quantile(&mut self, q: f64) -> Option<f64> {
        let last = self.len().checked_sub(1)?;
        let h = q.clamp(0.0, 1.0) * last as f64;
        let lo = (h.floor() as u64).min(last);
        let hi = (lo + 1).min(last);
        let (a, b) = match self {
            Quantiles::Exact(vs) => {
                vs.sort_by(f64::total_cmp);
                (vs[lo as usize], vs[hi as usize])
            }
            Quantiles::Sketch(s) => (s.at_rank(lo)?, s.at_rank(hi)?),
        };
        Some(if a == b { a } else { a + (h - lo as f64) * (b - a) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(mut v: Vec<f64>, q: f64) -> f64 {
        v.sort_by(f64::total_cmp);
        let last = v.len() - 1;
        let h = q * last as f64;
        let lo = h.floor() as usize;
        let hi = (lo + 1).min(last);
        v[lo] + (h - lo as f64) * (v[hi] - v[lo])
    }

    #[test]
    fn small_steps_are_exact_and_large_ones_within_alpha() {
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for n in [1usize, 7, EXACT_MAX, EXACT_MAX + 1, 50_000] {
            // Durations from 1 µs to 100 s, log-uniform, some negative values and zeros.
            let values: Vec<f64> = (0..n)
                .map(|i| {
                    let v = 1e-6 * 10f64.powf((next() % 8000) as f64 / 1000.0);
                    match i % 17 {
                        0 => 0.0,
                        1 => -v,
                        _ => v,
                    }
                })
                .collect();
            let mut q = Quantiles::default();
            for &v in &values {
                q.push(v);
            }
            assert_eq!(matches!(q, Quantiles::Exact(_)), n <= EXACT_MAX);
            for p in [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0] {
                let want = exact(values.clone(), p);
                let got = q.quantile(p).unwrap();
                if n <= EXACT_MAX {
                    assert_eq!(got, want, "n {n} p {p}");
                } else {
                    // Interpolating two values each within α keeps the result within α of
                    // the exact interpolation when both have one sign.
                    let tol = ALPHA * want.abs().max(1e-12) + 1e-12;
                    assert!((got - want).abs() <= tol * 1.0001, "n {n} p {p}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn any_split_merged_gives_the_unsplit_state() {
        let values: Vec<f64> = (0..5000).map(|i| ((i * 7919) % 10007) as f64 / 97.0 - 3.0).collect();
        let mut whole = Quantiles::default();
        for &v in &values {
            whole.push(v);
        }
        for parts in [2usize, 3, 10, 4999] {
            let mut merged = Quantiles::default();
            for chunk in values.chunks(values.len().div_ceil(parts)) {
                let mut part = Quantiles::default();
                for &v in chunk {
                    part.push(v);
                }
                merged.merge(part);
            }
            assert_eq!(merged, whole, "{parts} parts");
        }
        // Under the exact limit, any split is the exact list's multiset.
        let mut a = Quantiles::default();
        let mut b = Quantiles::default();
        for v in [3.0, 1.0, 2.0] {
            a.push(v);
        }
        b.push(0.5);
        a.merge(b);
        assert_eq!(a.quantile(0.0), Some(0.5));
        assert_eq!(a.quantile(1.0), Some(3.0));
    }

    proptest::proptest! {
        /// Any counts another process sends are refused or read without a panic, merged
        /// with themselves and with exact values.
        #[test]
        fn sketches_from_elsewhere_never_panic(
            neg in proptest::collection::vec((proptest::prelude::any::<i32>(), 0u64..=MAX_COUNT), 0..20),
            zero in 0u64..=MAX_COUNT,
            pos in proptest::collection::vec((proptest::prelude::any::<i32>(), proptest::prelude::any::<u64>()), 0..20),
            q in 0.0f64..=1.0,
        ) {
            if let Ok(s) = Sketch::from_counts(neg, zero, pos) {
                let mut merged = Quantiles::Sketch(s.clone());
                merged.merge(Quantiles::Sketch(s));
                merged.merge(Quantiles::Exact(vec![1.0, -2.5, 0.0]));
                let _ = merged.quantile(q);
            }
        }
    }

    #[test]
    fn infinities_and_extremes_do_not_panic() {
        let mut q = Quantiles::default();
        for i in 0..(EXACT_MAX + 10) {
            q.push(match i % 4 {
                0 => f64::INFINITY,
                1 => f64::NEG_INFINITY,
                2 => f64::MIN_POSITIVE,
                _ => f64::MAX,
            });
        }
        for p in [0.0, 0.5, 1.0] {
            assert!(q.quantile(p).is_some());
        }
    }
}
