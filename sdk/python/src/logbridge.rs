//! `sdk/rust`'s warnings (dropped spans, failed exports, …) through Python `logging` (logger
//! `weft_sdk`).
//!
//! `sdk/rust` warns from whichever thread notices, often its export thread, which must never
//! take the GIL (it would stall behind the application, and a fork could catch it holding it).
//! So the sink only queues the message on a bounded lock-free queue; [`drain`] logs what is
//! queued from the next call into the SDK that holds the GIL anyway (a span start, `stats`,
//! `force_flush`, `shutdown`). The messages are already rate-limited by `sdk/rust`.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use pyo3::prelude::*;

/// Messages waiting for a Python call; beyond this, they are counted and reported as lost.
const CAPACITY: usize = 64;

static QUEUE: std::sync::OnceLock<ArrayQueue<String>> = std::sync::OnceLock::new();
static LOST: AtomicU64 = AtomicU64::new(0);

fn queue() -> &'static ArrayQueue<String> {
    QUEUE.get_or_init(|| ArrayQueue::new(CAPACITY))
}

/// The `sdk/rust` log sink: queue, never block.
fn sink(message: &str) {
    if queue().push(message.to_owned()).is_err() {
        LOST.fetch_add(1, Ordering::Relaxed);
    }
}

/// Routes `sdk/rust`'s warnings here (called once, from `init`).
pub(crate) fn install() {
    let _ = queue();
    weft_sdk::log::set_sink(sink);
}

/// Logs the queued warnings. One atomic load when there are none (every span start calls this).
#[inline]
pub(crate) fn drain(py: Python<'_>) {
    if let Some(q) = QUEUE.get()
        && !q.is_empty()
    {
        drain_slow(py, q);
    }
}

#[cold]
fn drain_slow(py: Python<'_>, q: &ArrayQueue<String>) {
    let Ok(g) = crate::globals::get(py) else { return };
    while let Some(m) = q.pop() {
        let lost = LOST.swap(0, Ordering::Relaxed);
        let m = if lost > 0 {
            format!("{m} ({lost} more warnings lost while the queue of warnings was full)")
        } else {
            m
        };
        // A failing logging handler must not fail the span start that drains.
        let _ = g.log.call1(py, (m,));
    }
}

/// Logs the queued warnings now (tests, and a safe point for applications that start no spans).
#[pyfunction]
pub(crate) fn flush_warnings(py: Python<'_>) {
    drain(py);
}
