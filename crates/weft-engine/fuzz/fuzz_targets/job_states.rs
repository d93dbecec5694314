//! A query frontend decodes what its queriers send back (spec/jobs.md): the recent-trace
//! filter a job carries and the service-graph state a job returns. Both come over the network,
//! so any bytes must be refused with an error, never panic or index out of bounds.
//!
//! Each input is read as a recent-trace filter (`Bloom::from_bytes`, then probed), as a
//! quantile sketch's counts in JSON (`[neg, zero, pos]`: taken or refused, merged, read) and
//! as a graph state in JSON (merged into a graph, then read out and resolved).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_block::index::Bloom;
use weft_engine::graph::{GraphState, ServiceGraph};
use weft_traceql::metrics::sketch::{Quantiles, Sketch};

fuzz_target!(|data: &[u8]| {
    if let Some(b) = Bloom::from_bytes(data) {
        let _ = b.may_contain(&[7; 16]);
    }
    type Counts = (Vec<(i32, u64)>, u64, Vec<(i32, u64)>);
    if let Ok((neg, zero, pos)) = serde_json::from_slice::<Counts>(data)
        && let Ok(s) = Sketch::from_counts(neg, zero, pos)
    {
        let mut q = Quantiles::Sketch(s.clone());
        q.merge(Quantiles::Sketch(s));
        for p in [0.0, 0.5, 0.99, 1.0] {
            let _ = q.quantile(p);
        }
    }
    let Ok(state) = serde_json::from_slice::<GraphState>(data) else {
        return;
    };
    let query = weft_traceql::parse("{ }").expect("valid");
    let mut g = ServiceGraph::new(&query, None, u64::MAX).expect("a graph");
    if g.merge_state(state).is_ok() {
        let _ = g.services();
        for e in g.edges() {
            let _ = e.2.latency_quantile(0.99);
        }
        for id in g.pending_traces() {
            g.resolve(&id, &[]);
        }
        g.give_up();
    }
});
