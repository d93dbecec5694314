//! weft SDK vs `opentelemetry_sdk`, same scenarios, same run (see BENCHMARKS.md).
//!
//! Single-thread scenarios are timed in **thread CPU time** (`CLOCK_THREAD_CPUTIME_ID`), so that
//! other processes on this shared 2-core machine inflate neither SDK's figures; the multi-thread
//! queue scenarios are timed in wall-clock time. Besides criterion's timings, every scenario's
//! allocations per operation are counted on the benchmark thread by a counting global allocator
//! and printed as `ALLOCS <id> <n>` lines, which `bench.sh` joins with criterion's estimates.

// A counting `#[global_allocator]` needs `unsafe impl GlobalAlloc`; it only forwards to the
// system allocator and bumps a thread-local counter. Reading the thread CPU clock is a libc call.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, TraceContextExt as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `op` (after a warm-up) and prints its allocations per call on this thread.
fn count_allocs(id: &str, mut op: impl FnMut()) {
    for _ in 0..10_000 {
        op();
    }
    const N: u64 = 20_000;
    let before = ALLOCS.with(|c| c.get());
    for _ in 0..N {
        op();
    }
    let after = ALLOCS.with(|c| c.get());
    println!("ALLOCS {id} {:.3}", (after - before) as f64 / N as f64);
}

/// Criterion measurement in nanoseconds of CPU time consumed by the benchmark thread.
struct ThreadCpu;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct NsFormatter;

impl ValueFormatter for NsFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = match typical {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e-3, "µs"),
            t if t < 1e9 => (1e-6, "ms"),
            _ => (1e-9, "s"),
        };
        for v in values {
            *v *= factor;
        }
        unit
    }
    fn scale_throughputs(&self, _typical: f64, _t: &Throughput, _values: &mut [f64]) -> &'static str {
        "ns"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &NsFormatter
    }
}

const QUEUE: usize = 1 << 16;

fn weft_provider(sampled: bool) -> weft_sdk::TracerProvider {
    let b = weft_sdk::TracerProvider::builder()
        .with_resource(weft_sdk::Resource::new("bench"))
        .with_batch_config(weft_sdk::export::BatchConfig {
            max_queue_size: QUEUE,
            ..Default::default()
        })
        .with_exporter(weft_sdk::export::NoopExporter);
    if sampled {
        b.with_sampler(weft_sdk::sampling::AlwaysOn).build()
    } else {
        b.with_sampler(weft_sdk::sampling::AlwaysOff).build()
    }
}

#[derive(Debug)]
struct OtelNoop;

impl opentelemetry_sdk::trace::SpanExporter for OtelNoop {
    async fn export(&self, _batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

fn otel_provider(sampled: bool) -> opentelemetry_sdk::trace::SdkTracerProvider {
    use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider};
    let bsp = BatchSpanProcessor::builder(OtelNoop)
        .with_batch_config(BatchConfigBuilder::default().with_max_queue_size(QUEUE).build())
        .build();
    SdkTracerProvider::builder()
        .with_sampler(if sampled { Sampler::AlwaysOn } else { Sampler::AlwaysOff })
        .with_span_processor(bsp)
        .build()
}

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn ids<M: Measurement>(c: &mut Criterion<M>) {
    use opentelemetry_sdk::trace::IdGenerator as _;
    use weft_sdk::id::IdGenerator as _;
    let mut g = c.benchmark_group("id_trace_id");
    let w = weft_sdk::id::RandomIdGenerator;
    let o = opentelemetry_sdk::trace::RandomIdGenerator::default();
    // IDs are folded into an accumulator rather than passed to `black_box` one by one: a
    // 16-byte `black_box` costs a store-forwarding stall (about 5 ns here) that would dominate
    // both SDKs' figures.
    g.bench_function("weft", |b| {
        let mut acc = 0u128;
        b.iter(|| acc ^= u128::from_be_bytes(w.new_trace_id().to_bytes()));
        black_box(acc);
    });
    g.bench_function("otel", |b| {
        let mut acc = 0u128;
        b.iter(|| acc ^= u128::from_be_bytes(o.new_trace_id().to_bytes()));
        black_box(acc);
    });
    g.finish();
    count_allocs("id_trace_id/weft", || {
        black_box(w.new_trace_id());
    });
    count_allocs("id_trace_id/otel", || {
        black_box(o.new_trace_id());
    });
}

fn traceparent<M: Measurement>(c: &mut Criterion<M>) {
    let mut headers = HashMap::new();
    headers.insert("traceparent".to_string(), TP.to_string());
    let otel = opentelemetry_sdk::propagation::TraceContextPropagator::new();
    let weft_api = weft_sdk::propagation::TraceContextPropagator::new();

    let mut g = c.benchmark_group("traceparent_extract");
    g.bench_function("weft", |b| {
        b.iter(|| black_box(weft_sdk::propagation::traceparent::parse(black_box(TP.as_bytes()))))
    });
    g.bench_function("weft_api", |b| {
        b.iter(|| black_box(weft_api.extract(black_box(&headers))))
    });
    g.bench_function("otel", |b| b.iter(|| black_box(otel.extract(black_box(&headers)))));
    g.finish();
    count_allocs("traceparent_extract/weft", || {
        black_box(weft_sdk::propagation::traceparent::parse(black_box(TP.as_bytes())));
    });
    count_allocs("traceparent_extract/weft_api", || {
        black_box(weft_api.extract(&headers));
    });
    count_allocs("traceparent_extract/otel", || {
        black_box(otel.extract(&headers));
    });

    let sc = weft_sdk::propagation::traceparent::parse(TP.as_bytes()).unwrap();
    let cx = Context::new().with_remote_span_context(sc.to_otel(Default::default()));
    let mut g = c.benchmark_group("traceparent_inject");
    g.bench_function("weft", |b| {
        let mut buf = [0u8; 55];
        b.iter(|| {
            black_box(weft_sdk::propagation::traceparent::format(black_box(&sc), &mut buf));
        })
    });
    g.bench_function("weft_api", |b| {
        b.iter(|| {
            let mut out: HashMap<String, String> = HashMap::with_capacity(2);
            weft_api.inject_context(&cx, &mut out);
            black_box(out)
        })
    });
    g.bench_function("otel", |b| {
        b.iter(|| {
            let mut out: HashMap<String, String> = HashMap::with_capacity(2);
            otel.inject_context(&cx, &mut out);
            black_box(out)
        })
    });
    g.finish();
    let mut buf = [0u8; 55];
    count_allocs("traceparent_inject/weft", || {
        black_box(weft_sdk::propagation::traceparent::format(&sc, &mut buf));
    });
    count_allocs("traceparent_inject/weft_api", || {
        let mut out: HashMap<String, String> = HashMap::with_capacity(2);
        weft_api.inject_context(&cx, &mut out);
        black_box(out);
    });
    count_allocs("traceparent_inject/otel", || {
        let mut out: HashMap<String, String> = HashMap::with_capacity(2);
        otel.inject_context(&cx, &mut out);
        black_box(out);
    });
}

/// One span scenario, written once against the `opentelemetry` API and run on both SDKs.
fn scenario<T: opentelemetry::trace::Tracer>(tracer: &T, attrs: usize, event: bool) {
    const KEYS: [&str; 10] = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"];
    let mut span = tracer.start("op");
    for (i, k) in KEYS.iter().take(attrs).enumerate() {
        if i % 2 == 0 {
            span.set_attribute(KeyValue::new(*k, i as i64));
        } else {
            span.set_attribute(KeyValue::new(*k, "value"));
        }
    }
    if event {
        span.add_event("event", Vec::new());
    }
    span.end();
}

fn spans<M: Measurement>(c: &mut Criterion<M>) {
    let cases: [(&str, bool, usize, bool); 4] = [
        ("span_unsampled", false, 0, false),
        ("span_sampled_0_attrs", true, 0, false),
        ("span_sampled_4_attrs", true, 4, false),
        ("span_sampled_10_attrs_1_event", true, 10, true),
    ];
    for (name, sampled, attrs, event) in cases {
        let wp = weft_provider(sampled);
        let wt = wp.tracer("bench");
        let op = otel_provider(sampled);
        let ot = op.tracer("bench");
        let mut g = c.benchmark_group(name);
        g.bench_function("weft", |b| b.iter(|| scenario(&wt, attrs, event)));
        g.bench_function("otel", |b| b.iter(|| scenario(&ot, attrs, event)));
        g.finish();
        count_allocs(&format!("{name}/weft"), || scenario(&wt, attrs, event));
        count_allocs(&format!("{name}/otel"), || scenario(&ot, attrs, event));
        let _ = wp.shutdown(Duration::from_secs(5));
        let _ = op.shutdown();
    }
}

/// Wall time per span per thread with `threads` threads ending sampled spans at once.
fn parallel<T: opentelemetry::trace::Tracer + Clone + Send + 'static>(
    tracer: &T,
    threads: usize,
    iters: u64,
) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let t = tracer.clone();
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                for _ in 0..iters {
                    scenario(&t, 2, false);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        let _ = h.join();
    }
    start.elapsed()
}

fn queue(c: &mut Criterion) {
    let wp = weft_provider(true);
    let wt = wp.tracer("bench");
    let op = otel_provider(true);
    let ot = op.tracer("bench");
    for threads in [1usize, 2] {
        let mut g = c.benchmark_group(format!("export_queue_{threads}_thread"));
        g.bench_function("weft", |b| b.iter_custom(|iters| parallel(&wt, threads, iters)));
        g.bench_function("otel", |b| b.iter_custom(|iters| parallel(&ot, threads, iters)));
        g.finish();
    }
    count_allocs("export_queue_1_thread/weft", || scenario(&wt, 2, false));
    count_allocs("export_queue_1_thread/otel", || scenario(&ot, 2, false));
    let stats = wp.stats();
    println!("WEFT_STATS exported={} dropped={}", stats.exported, stats.dropped());
    let _ = wp.shutdown(Duration::from_secs(5));
    let _ = op.shutdown();
}

fn cpu_config() -> Criterion<ThreadCpu> {
    Criterion::default()
        .with_measurement(ThreadCpu)
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(2))
        .sample_size(40)
}

fn wall_config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(2))
        .sample_size(40)
}

fn main() {
    // `WEFT_BENCH_CLOCK=wall` times the single-thread scenarios in wall-clock time too.
    if std::env::var("WEFT_BENCH_CLOCK").as_deref() == Ok("wall") {
        let mut c = wall_config().configure_from_args();
        ids(&mut c);
        traceparent(&mut c);
        spans(&mut c);
        queue(&mut c);
        c.final_summary();
    } else {
        let mut c = cpu_config().configure_from_args();
        ids(&mut c);
        traceparent(&mut c);
        spans(&mut c);
        c.final_summary();
        let mut w = wall_config().configure_from_args();
        queue(&mut w);
        w.final_summary();
    }
}
