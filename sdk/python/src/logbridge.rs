//! `sdk/rust`'s warnings (dropped spans, failed exports, …) through Python `logging` (logger
//! `weft_sdk`).
//!
//! `sdk/rust` warns from whichever thread notices, often its export thread, which must never
//! take the GIL (it would stall behind the application). So the sink only queues the message;
//! [`drain`] logs what is queued from the next call into the SDK that holds the GIL anyway (a
//! span start, `stats`, `force_flush`, `shutdown`). The messages are already rate-limited by
//! `sdk/rust`. Both sides only `try_lock` the queue and never wait: a fork that catches the lock
//! held leaves it held in the child, which then loses (and counts) its warnings instead of
//! hanging its export thread.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pyo3::prelude::*;

/// Messages waiting for a Python call; beyond this, they are counted and reported as lost.
const CAPACITY: usize = 64;

static QUEUE: Mutex<Vec<String>> = Mutex::new(Vec::new());
static PENDING: AtomicBool = AtomicBool::new(false);
static LOST: AtomicU64 = AtomicU64::new(0);

/// The `sdk/rust` log sink: queue, never block.
fn sink(message: &str) {
    match QUEUE.try_lock() {
        Ok(mut q) if q.len() < CAPACITY => q.push(message.to_owned()),
        _ => {
            LOST.fetch_add(1, Ordering::Relaxed);
        }
    }
    PENDING.store(true, Ordering::Release);
}

/// Routes `sdk/rust`'s warnings here (called once, from `init`).
pub(crate) fn install() {
    weft_sdk::log::set_sink(sink);
}

/// Logs the queued warnings. One atomic load when there are none (every span start calls this).
#[inline]
pub(crate) fn drain(py: Python<'_>) {
    if PENDING.load(Ordering::Acquire) {
        drain_slow(py);
    }
}

#[cold]
fn drain_slow(py: Python<'_>) {
    let Ok(g) = crate::globals::get(py) else { return };
    let messages = match QUEUE.try_lock() {
        Ok(mut q) => {
            PENDING.store(false, Ordering::Release);
            std::mem::take(&mut *q)
        }
        Err(_) => return,
    };
    let lost = LOST.swap(0, Ordering::Relaxed);
    // A failing logging handler must not fail the span start that drains.
    for m in messages {
        let _ = g.log.call1(py, (m,));
    }
    if lost > 0 {
        let _ = g
            .log
            .call1(py, (format!("{lost} warnings of the native core were lost"),));
    }
}

/// Logs the queued warnings now (tests, and a safe point for applications that start no spans).
#[pyfunction]
pub(crate) fn flush_warnings(py: Python<'_>) {
    drain(py);
}

/// Warns through `sdk/rust`'s log from a new Rust thread that never holds the GIL (tests).
#[pyfunction]
pub(crate) fn warn_from_native_thread(py: Python<'_>, message: String) {
    py.allow_threads(move || {
        let _ = std::thread::spawn(move || weft_sdk::log::warn(format_args!("{message}"))).join();
    });
}
