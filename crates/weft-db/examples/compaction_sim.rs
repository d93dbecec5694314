//! Write amplification of the compaction policy over an hour of steady load, for several
//! block sizes and cut rates: `cargo run --release -p weft-db --example compaction_sim`.
//! Prints one JSON object per load (used by `make bench`, reported in BENCHMARKS.md).
use weft_db::policy::{Candidate, TierPolicy, simulate};

/// The policy weft had before the size tiers, for comparison: the oldest blocks under half
/// the maximum, up to 8 and the maximum's spans, merged whenever 2 qualify.
fn previous_pick(blocks: &[Candidate]) -> Vec<usize> {
    let mut c: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].spans < 500_000).collect();
    c.sort_by_key(|&i| (blocks[i].max_end, i));
    let (mut out, mut spans) = (Vec::new(), 0);
    for i in c {
        if out.len() == 8 || spans + blocks[i].spans > 1_000_000 {
            break;
        }
        spans += blocks[i].spans;
        out.push(i);
    }
    if out.len() < 2 { Vec::new() } else { out }
}

fn main() {
    // The defaults of `weft` (--compaction-max-block-spans, --compaction-fanout,
    // --compaction-max-inputs, --compaction-interval).
    let policy = TierPolicy {
        max_block_spans: 1_000_000,
        fanout: 4,
        max_inputs: 64,
    };
    // (spans per head block, seconds between cuts): a trickle cut by age, small blocks every
    // few seconds, and blocks cut by size under heavy load.
    for (spans, every) in [
        (15, 2),
        (500, 30),
        (2_000, 3),
        (10_000, 5),
        (15_000, 30),
        (30_000, 1),
        (50_000, 2),
        (200_000, 4),
    ] {
        let s = simulate(|b| policy.pick(b), spans, every, 3600, 30);
        let old = simulate(previous_pick, spans, every, 3600, 30);
        println!(
            "{{\"spans_per_block\": {spans}, \"seconds_between_blocks\": {every}, \"cut_spans\": {}, \"compacted_spans\": {}, \"write_amplification\": {:.2}, \"max_writes_of_a_span\": {}, \"most_blocks\": {}, \"blocks_after_an_hour\": {}, \"previous_policy\": {{\"write_amplification\": {:.2}, \"max_writes_of_a_span\": {}, \"most_blocks\": {}}}}}",
            s.cut_spans,
            s.compacted_spans,
            s.write_amplification(),
            s.max_writes,
            s.most_blocks,
            s.blocks_at_end,
            old.write_amplification(),
            old.max_writes,
            old.most_blocks
        );
    }
}
