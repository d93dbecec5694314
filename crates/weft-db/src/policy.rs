//! Which blocks a compaction merges: a size-tiered policy with bounded write amplification
//! (docs/adr/0007-size-tiered-compaction.md).
//!
//! With `M` the largest block compaction writes and `F` the fanout, blocks fall in three tiers
//! by span count:
//!
//! - **final**, `≥ M/F`: never merged again;
//! - **middle**, `[M/F², M/F)`: `F` of them, the oldest first, merge into one final block;
//! - **small**, `< M/F²`: when the oldest of them, at most `F²`, hold `M/F` spans, they merge
//!   straight into one final block (and wait for that while `F²` of their mean size would get
//!   there); otherwise the oldest (up to `max_inputs`) merge once they hold `M/F²` spans
//!   together, into a middle or final block. Tiny blocks (a trickle of traffic, cut by age)
//!   that cannot reach that volume are bounded by a valve: when `max_inputs` small blocks
//!   share a level (how many merges made them), the oldest `max_inputs` of them merge into one
//!   block of the next level.
//!
//! Only blocks of one tier merge, so a large block is never rewritten to absorb a small one,
//! and every merge but the valve's moves its spans up a tier. A span is therefore written at
//! most 3 times (its head block, then middle, then final; twice when `F²` head blocks make a
//! final block) whenever `max_inputs` head blocks hold `M/F²` spans (head blocks of 1,000
//! spans and more with the defaults), and once more per valve otherwise, each valve
//! multiplying the block size by `max_inputs`; [`simulate`] checks the bound over an hour of
//! block arrivals.

/// A block as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub spans: u64,
    /// The block's newest span end (Unix ns): older blocks merge first, keeping time ranges
    /// of merged blocks close together.
    pub max_end: u64,
    /// How many compactions produced it (0: a head cut).
    pub level: u32,
}

/// The policy's parameters.
#[derive(Debug, Clone, Copy)]
pub struct TierPolicy {
    /// `M`: the largest block compaction writes.
    pub max_block_spans: u64,
    /// `F`: blocks of the middle tier merged at once, and the size ratio between tiers.
    pub fanout: u64,
    /// Most small blocks merged at once, and the valve's threshold.
    pub max_inputs: usize,
}

/// A block's tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Small,
    Middle,
    Final,
}

impl TierPolicy {
    fn fanout(&self) -> u64 {
        self.fanout.max(2)
    }

    /// The smallest block of the final tier (`M/F`).
    pub fn final_spans(&self) -> u64 {
        (self.max_block_spans / self.fanout()).max(1)
    }

    /// The smallest block of the middle tier (`M/F²`).
    pub fn middle_spans(&self) -> u64 {
        (self.final_spans() / self.fanout()).max(1)
    }

    /// The most small blocks merged straight into a final block: `F²`, and at most
    /// `max_inputs`.
    fn direct_inputs(&self) -> usize {
        let f = self.fanout() as usize;
        (f * f).min(self.max_inputs.max(2))
    }

    pub fn tier(&self, spans: u64) -> Tier {
        if spans >= self.final_spans() {
            Tier::Final
        } else if spans >= self.middle_spans() {
            Tier::Middle
        } else {
            Tier::Small
        }
    }

    /// The blocks to merge next (indices into `blocks`), or none. The middle tier goes first
    /// (its merges are the largest and free the most), then the small tier by volume, then
    /// the valve.
    pub fn pick(&self, blocks: &[Candidate]) -> Vec<usize> {
        let oldest_first = |tier: Tier| {
            let mut v: Vec<usize> = (0..blocks.len())
                .filter(|&i| self.tier(blocks[i].spans) == tier)
                .collect();
            v.sort_by_key(|&i| (blocks[i].max_end, i));
            v
        };
        let middle = oldest_first(Tier::Middle);
        let f = self.fanout() as usize;
        if middle.len() >= f {
            return middle[..f].to_vec();
        }
        let small = oldest_first(Tier::Small);
        // Straight to the final tier: when the oldest small blocks, at most `F²` of them (so
        // under `M` spans), hold `M/F` spans, they all merge into one final block, so their
        // spans are written twice in all instead of three times. While fewer than `F²` small
        // blocks wait and their mean size says `F²` of them would get there, they wait.
        let direct = &small[..small.len().min(self.direct_inputs())];
        let sum: u64 = direct.iter().map(|&i| blocks[i].spans).sum();
        if sum >= self.final_spans() {
            return direct.to_vec();
        }
        if direct.len() == small.len()
            && direct.len() < self.direct_inputs()
            && sum.saturating_mul(self.direct_inputs() as u64) >= self.final_spans() * direct.len() as u64
        {
            return Vec::new();
        }
        let mut sum = 0;
        for (n, &i) in small.iter().enumerate().take(self.max_inputs.max(2)) {
            sum += blocks[i].spans;
            if sum >= self.middle_spans() {
                return if n >= 1 { small[..=n].to_vec() } else { Vec::new() };
            }
        }
        // The valve: the lowest level holding max_inputs small blocks.
        let mut levels: Vec<u32> = small.iter().map(|&i| blocks[i].level).collect();
        levels.sort_unstable();
        levels.dedup();
        for level in levels {
            let same: Vec<usize> = small.iter().copied().filter(|&i| blocks[i].level == level).collect();
            if same.len() >= self.max_inputs.max(2) {
                return same[..self.max_inputs.max(2)].to_vec();
            }
        }
        Vec::new()
    }
}

/// What [`simulate`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// Spans written by head cuts.
    pub cut_spans: u64,
    /// Spans written by compaction.
    pub compacted_spans: u64,
    /// The most times one span was written (its head block included).
    pub max_writes: u32,
    /// Blocks at the end, and the most there were at once.
    pub blocks_at_end: usize,
    pub most_blocks: usize,
}

impl Simulation {
    /// All spans written over spans cut: 1 means nothing was rewritten.
    pub fn write_amplification(&self) -> f64 {
        (self.cut_spans + self.compacted_spans) as f64 / self.cut_spans.max(1) as f64
    }
}

/// Runs a policy (`pick`, as [`TierPolicy::pick`]) over head blocks of `spans_per_block` spans
/// arriving every `seconds_between` seconds for `duration_s`, compacting every `interval_s`
/// until nothing qualifies, as the compactor does.
pub fn simulate(
    pick: impl Fn(&[Candidate]) -> Vec<usize>,
    spans_per_block: u64,
    seconds_between: u64,
    duration_s: u64,
    interval_s: u64,
) -> Simulation {
    // Each block: the candidate and the most writes any of its spans had.
    let mut blocks: Vec<(Candidate, u32)> = Vec::new();
    let mut sim = Simulation {
        cut_spans: 0,
        compacted_spans: 0,
        max_writes: 1,
        blocks_at_end: 0,
        most_blocks: 0,
    };
    let mut t = 0;
    while t < duration_s {
        t += 1;
        if t % seconds_between.max(1) == 0 {
            blocks.push((
                Candidate {
                    spans: spans_per_block,
                    max_end: t,
                    level: 0,
                },
                1,
            ));
            sim.cut_spans += spans_per_block;
        }
        sim.most_blocks = sim.most_blocks.max(blocks.len());
        if t % interval_s.max(1) == 0 {
            loop {
                let cands: Vec<Candidate> = blocks.iter().map(|(c, _)| c.clone()).collect();
                let mut chosen = pick(&cands);
                if chosen.is_empty() {
                    break;
                }
                chosen.sort_unstable();
                let merged: Vec<(Candidate, u32)> = chosen.iter().rev().map(|&i| blocks.remove(i)).collect();
                let spans = merged.iter().map(|(c, _)| c.spans).sum();
                let writes = merged.iter().map(|(_, w)| *w).max().unwrap_or(0) + 1;
                sim.compacted_spans += spans;
                sim.max_writes = sim.max_writes.max(writes);
                blocks.push((
                    Candidate {
                        spans,
                        max_end: merged.iter().map(|(c, _)| c.max_end).max().unwrap_or(0),
                        level: merged.iter().map(|(c, _)| c.level).max().unwrap_or(0) + 1,
                    },
                    writes,
                ));
            }
        }
    }
    sim.blocks_at_end = blocks.len();
    sim
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: TierPolicy = TierPolicy {
        max_block_spans: 1_000_000,
        fanout: 4,
        max_inputs: 64,
    };

    fn c(spans: u64, max_end: u64, level: u32) -> Candidate {
        Candidate { spans, max_end, level }
    }

    #[test]
    fn tiers_by_size() {
        assert_eq!((POLICY.middle_spans(), POLICY.final_spans()), (62_500, 250_000));
        assert_eq!(POLICY.tier(10), Tier::Small);
        assert_eq!(POLICY.tier(62_500), Tier::Middle);
        assert_eq!(POLICY.tier(250_000), Tier::Final);
    }

    #[test]
    fn a_large_block_never_absorbs_a_small_one() {
        // The old policy merged a 120k block with every small newcomer.
        let blocks = [c(120_000, 1, 1), c(15, 2, 0), c(15, 3, 0)];
        assert!(POLICY.pick(&blocks).is_empty());
        // Four middle blocks merge, the oldest first.
        let blocks = [
            c(100_000, 5, 1),
            c(100_000, 1, 1),
            c(100_000, 2, 1),
            c(100_000, 3, 1),
            c(100_000, 4, 1),
        ];
        assert_eq!(POLICY.pick(&blocks), vec![1, 2, 3, 4]);
    }

    #[test]
    fn small_blocks_merge_by_volume_then_by_the_valve() {
        let blocks: Vec<Candidate> = (0..10).map(|i| c(10_000, i, 0)).collect();
        assert_eq!(POLICY.pick(&blocks).len(), 7, "the oldest until 62,500 spans");
        let tiny: Vec<Candidate> = (0..63).map(|i| c(15, i, 0)).collect();
        assert!(POLICY.pick(&tiny).is_empty(), "63 tiny blocks wait");
        let tiny: Vec<Candidate> = (0..65).map(|i| c(15, i, 0)).collect();
        assert_eq!(
            POLICY.pick(&tiny),
            (0..64).collect::<Vec<_>>(),
            "the valve opens at 64, oldest first"
        );
        // Valve outputs (level 1) too small to reach the volume within 64 have a valve of
        // their own; a mix of levels does not open it.
        let merged: Vec<Candidate> = (0..65).map(|i| c(960, i, 1)).collect();
        assert_eq!(POLICY.pick(&merged).len(), 64);
        let mixed: Vec<Candidate> = (0..63).map(|i| c(960, i, (i % 2) as u32)).collect();
        assert!(POLICY.pick(&mixed).is_empty());
    }

    #[test]
    fn small_blocks_that_can_make_a_final_block_merge_straight_into_one() {
        // 30k-span head blocks (realistic spans cut at 16 MiB of head memory): 16 of them
        // make 480k spans, a final block, so they wait for each other instead of merging
        // three at a time into a middle block that would be rewritten again.
        let five: Vec<Candidate> = (0..5).map(|i| c(30_000, i, 0)).collect();
        assert!(
            POLICY.pick(&five).is_empty(),
            "five wait: sixteen would make a final block"
        );
        let nine: Vec<Candidate> = (0..9).map(|i| c(30_000, i, 0)).collect();
        assert_eq!(POLICY.pick(&nine), (0..9).collect::<Vec<_>>(), "270k spans: final");
        let many: Vec<Candidate> = (0..20).rev().map(|i| c(30_000, i, 0)).collect();
        assert_eq!(
            POLICY.pick(&many),
            (4..20).rev().collect::<Vec<_>>(),
            "at most sixteen, the oldest first"
        );
        // Blocks too small for sixteen to make a final block keep the volume rule.
        let small: Vec<Candidate> = (0..5).map(|i| c(15_000, i, 0)).collect();
        assert_eq!(POLICY.pick(&small).len(), 5, "the oldest until 62,500 spans");
        // A middle block is not taken into a small merge.
        let mixed = [c(100_000, 0, 1), c(30_000, 1, 0), c(30_000, 2, 0)];
        assert!(POLICY.pick(&mixed).is_empty());
    }

    #[test]
    fn an_hour_of_steady_load_writes_each_span_at_most_three_times() {
        for (spans, every) in [
            (10_000, 5),
            (50_000, 2),
            (200_000, 4),
            (2_000, 3),
            (100_000, 30),
            (30_000, 1),
        ] {
            let s = simulate(|b| POLICY.pick(b), spans, every, 3600, 30);
            assert!(s.max_writes <= 3, "{spans} spans every {every}s: {s:?}");
            assert!(s.write_amplification() <= 3.0, "{spans} every {every}s: {s:?}");
            // Head blocks that sixteen at a time make a final block are rewritten once.
            if spans * 16 >= POLICY.final_spans() {
                assert_eq!(s.max_writes, 2, "{spans} spans every {every}s: {s:?}");
            }
            // Blocks stay few: final ones hold a quarter of the maximum or more, and below
            // them at most a tier's worth of each smaller size waits.
            let bound = (s.cut_spans / POLICY.final_spans()) as usize + 2 * 4 + 64;
            assert!(s.most_blocks <= bound, "{s:?} (bound {bound})");
        }
        // A trickle: tiny blocks every 2 s; the valve adds at most one write.
        let s = simulate(|b| POLICY.pick(b), 15, 2, 3600, 30);
        // At most max_inputs blocks of each of the two levels, and those cut between rounds.
        assert!(s.max_writes <= 4 && s.most_blocks <= 2 * 64 + 15, "{s:?}");
    }
}
