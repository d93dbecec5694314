use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};

use super::*;
use crate::export::{
    BatchConfig, ExportBatch, ExportContext, ExportResult, InMemoryExporter, PipelineError, SpanExporter,
};
use crate::id::{FLAG_RANDOM, FLAG_SAMPLED, SpanId};
use crate::propagation::{HeaderVec, TraceContextPropagator};
use crate::sampling::{AlwaysOff, AlwaysOn, ParentBased};

const FLUSH: Duration = Duration::from_secs(5);

fn provider(sampler: impl crate::sampling::Sampler + 'static) -> (TracerProvider, InMemoryExporter) {
    let exporter = InMemoryExporter::new();
    let p = TracerProvider::builder()
        .with_resource(crate::Resource::new("test"))
        .with_sampler(sampler)
        .with_exporter(exporter.clone())
        .build();
    (p, exporter)
}

#[test]
fn sampled_root_span_is_exported_with_its_data() {
    let (p, exp) = provider(AlwaysOn);
    let tracer = p.tracer("t");
    let mut span = tracer
        .span_builder("op")
        .with_kind(SpanKind::Server)
        .with_attributes([KeyValue::new("a", 1)])
        .start(&tracer);
    span.set_attribute(KeyValue::new("b", "x"));
    span.add_event("ev", vec![KeyValue::new("e", true)]);
    span.set_status(Status::error("boom"));
    span.set_status(Status::Unset);
    span.update_name("op2");
    let sc = span.span_context().clone();
    assert!(sc.is_sampled() && !sc.is_remote());
    span.end();
    p.force_flush(FLUSH).unwrap();
    let spans = exp.spans();
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.name, "op2");
    assert_eq!(s.kind, SpanKind::Server);
    assert_eq!(s.trace_id, sc.trace_id());
    assert_eq!(s.parent_span_id, SpanId::INVALID);
    assert_eq!(s.trace_flags, FLAG_SAMPLED | FLAG_RANDOM);
    assert_eq!(s.attributes, vec![KeyValue::new("a", 1), KeyValue::new("b", "x")]);
    assert_eq!(s.events.len(), 1);
    assert_eq!(s.status, Status::error("boom"));
    assert!(s.end_time_unix_nano >= s.start_time_unix_nano && s.start_time_unix_nano > 0);
    assert_eq!(p.stats().exported, 1);
}

#[test]
fn unsampled_span_records_nothing() {
    let (p, exp) = provider(AlwaysOff);
    let tracer = p.tracer("t");
    let mut span = tracer.start("op");
    assert!(!span.is_recording());
    span.set_attribute(KeyValue::new("a", 1));
    let sc = span.span_context().clone();
    assert!(sc.is_valid() && !sc.is_sampled());
    assert_eq!(sc.trace_flags().to_u8(), FLAG_RANDOM);
    span.end();
    p.force_flush(FLUSH).unwrap();
    assert!(exp.spans().is_empty());
}

#[test]
fn child_of_remote_parent_keeps_trace_and_tracestate() {
    let (p, exp) = provider(ParentBased::new(AlwaysOff));
    let h = HeaderVec::from_pairs([
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("tracestate", "foo@@bar=1,congo=2"),
    ]);
    let cx = opentelemetry::propagation::TextMapPropagator::extract(
        &TraceContextPropagator::new(),
        &h.0.iter().cloned().collect::<std::collections::HashMap<_, _>>(),
    );
    let tracer = p.tracer("t");
    let child = tracer.start_with_context("child", &cx);
    assert!(child.is_recording(), "remote sampled parent: ParentBased samples");
    assert_eq!(child.trace_state().as_str(), "foo@@bar=1,congo=2");
    let cx2 = cx.with_weft_span(child);
    let grandchild = tracer.start_with_context("grandchild", &cx2);
    assert_eq!(grandchild.trace_state().as_str(), "foo@@bar=1,congo=2");
    drop(grandchild);
    drop(cx2);
    p.force_flush(FLUSH).unwrap();
    let spans = exp.spans();
    assert_eq!(spans.len(), 2);
    let child = spans.iter().find(|s| s.name == "child").unwrap();
    assert!(child.parent_is_remote);
    assert_eq!(u64::from_be_bytes(child.parent_span_id.to_bytes()), 0x00f067aa0ba902b7);
    assert_eq!(
        child.trace_flags, FLAG_SAMPLED,
        "random flag copied from a parent without it"
    );
    let gc = spans.iter().find(|s| s.name == "grandchild").unwrap();
    assert_eq!(gc.parent_span_id, child.span_id);
    assert!(!gc.parent_is_remote);
}

#[test]
fn active_span_in_context_is_the_parent() {
    let (p, exp) = provider(AlwaysOn);
    let tracer = p.tracer("t");
    tracer.in_span("outer", |cx| {
        let inner = tracer.start("inner");
        assert_eq!(inner.weft_context().trace_id, cx.span().span_context().trace_id());
    });
    p.force_flush(FLUSH).unwrap();
    let spans = exp.spans();
    let outer = spans.iter().find(|s| s.name == "outer").unwrap();
    let inner = spans.iter().find(|s| s.name == "inner").unwrap();
    assert_eq!(inner.parent_span_id, outer.span_id);
    let _ = Context::current();
}

#[test]
fn limits_count_what_they_drop() {
    let exp = InMemoryExporter::new();
    let limits = SpanLimits {
        max_attributes_per_span: 2,
        max_attribute_value_length: Some(3),
        max_events_per_span: 1,
        max_links_per_span: 1,
        max_attributes_per_event: 1,
        max_attributes_per_link: 0,
    };
    let p = TracerProvider::builder()
        .with_resource(crate::Resource::new("test"))
        .with_span_limits(limits)
        .with_exporter(exp.clone())
        .build();
    let tracer = p.tracer("t");
    let mut span = tracer
        .span_builder("op")
        .with_attributes([KeyValue::new("a", "abcdef")])
        .start(&tracer);
    for i in 0..4 {
        span.set_attribute(KeyValue::new(format!("k{i}"), i));
    }
    span.add_event("e1", vec![KeyValue::new("x", 1), KeyValue::new("y", 2)]);
    span.add_event("e2", vec![]);
    let other = tracer.start("other").span_context().clone();
    span.add_link(other.clone(), vec![KeyValue::new("l", 1)]);
    span.add_link(other, vec![]);
    span.end();
    p.force_flush(FLUSH).unwrap();
    let s = exp.spans().into_iter().find(|s| s.name == "op").unwrap();
    assert_eq!(s.attributes.len(), 2);
    assert_eq!(s.attributes[0].value.as_str(), "abc");
    assert_eq!(s.dropped_attributes_count, 3);
    assert_eq!(
        (
            s.events.len(),
            s.dropped_events_count,
            s.events[0].dropped_attributes_count
        ),
        (1, 1, 1)
    );
    assert_eq!(
        (
            s.links.len(),
            s.dropped_links_count,
            s.links[0].dropped_attributes_count
        ),
        (1, 1, 1)
    );
}

#[test]
fn status_ok_is_final() {
    let (p, exp) = provider(AlwaysOn);
    let tracer = p.tracer("t");
    let mut span = tracer.start("op");
    span.set_status(Status::Ok);
    span.set_status(Status::error("late"));
    span.end();
    p.force_flush(FLUSH).unwrap();
    assert_eq!(exp.spans()[0].status, Status::Ok);
}

#[test]
fn drop_ends_the_span_and_end_is_idempotent() {
    let (p, exp) = provider(AlwaysOn);
    let tracer = p.tracer("t");
    {
        let _span = tracer.start("dropped");
    }
    let mut s = tracer.start("twice");
    s.end();
    s.end();
    drop(s);
    p.force_flush(FLUSH).unwrap();
    assert_eq!(exp.spans().len(), 2);
}

#[test]
fn shutdown_drops_later_spans_and_is_not_repeatable() {
    let (p, exp) = provider(AlwaysOn);
    let tracer = p.tracer("t");
    tracer.start("before").end();
    p.shutdown(FLUSH).unwrap();
    assert_eq!(exp.spans().len(), 1);
    tracer.start("after").end();
    assert_eq!(p.stats().dropped_shutdown, 1);
    assert_eq!(p.shutdown(FLUSH), Err(PipelineError::AlreadyShutdown));
    assert_eq!(p.force_flush(FLUSH), Err(PipelineError::AlreadyShutdown));
}

/// An exporter that blocks until released, to fill the queue.
struct Blocking {
    release: Arc<Barrier>,
    calls: Arc<AtomicUsize>,
}

impl SpanExporter for Blocking {
    fn export(&mut self, _: ExportBatch<'_>, _: &ExportContext<'_>) -> ExportResult {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.release.wait();
        }
        ExportResult::Success
    }
}

#[test]
fn full_queue_drops_without_blocking_and_flush_times_out() {
    let release = Arc::new(Barrier::new(2));
    let calls = Arc::new(AtomicUsize::new(0));
    let p = TracerProvider::builder()
        .with_resource(crate::Resource::new("test"))
        .with_batch_config(BatchConfig {
            max_queue_size: 8,
            max_export_batch_size: 4,
            scheduled_delay: Duration::from_millis(10),
            shards: 1,
            ..Default::default()
        })
        .with_exporter(Blocking {
            release: release.clone(),
            calls: calls.clone(),
        })
        .build();
    let tracer = p.tracer("t");
    let start = Instant::now();
    for _ in 0..100 {
        tracer.start("x").end();
    }
    assert!(start.elapsed() < Duration::from_secs(1), "ending spans never blocks");
    assert_eq!(p.force_flush(Duration::from_millis(50)), Err(PipelineError::Timeout));
    let stats = p.stats();
    assert!(stats.dropped_queue_full >= 100 - 8 - 4, "{stats:?}");
    release.wait();
    p.force_flush(FLUSH).unwrap();
    let stats = p.stats();
    assert_eq!(stats.exported + stats.dropped_queue_full, 100, "{stats:?}");
}

#[test]
fn many_threads_lose_nothing_below_capacity() {
    let exp = InMemoryExporter::new();
    let p = TracerProvider::builder()
        .with_resource(crate::Resource::new("test"))
        .with_batch_config(BatchConfig {
            max_queue_size: 100_000,
            ..Default::default()
        })
        .with_exporter(exp.clone())
        .build();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let tracer = p.tracer("t");
            std::thread::spawn(move || {
                for i in 0..1000 {
                    let mut s = tracer.start("x");
                    s.set_attribute(KeyValue::new("i", i as i64));
                    s.end();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    p.force_flush(FLUSH).unwrap();
    assert_eq!(exp.spans().len(), 4000);
    let mut ids: Vec<_> = exp.spans().iter().map(|s| s.span_id).collect();
    ids.sort_by_key(|s| s.to_bytes());
    ids.dedup();
    assert_eq!(ids.len(), 4000, "span IDs are unique");
}

#[test]
fn start_with_parent_uses_the_full_context() {
    let (p, exp) = provider(AlwaysOn);
    let tracer = p.tracer("t");
    let parent = crate::FullSpanContext::new(
        crate::SpanContext::new(7u128.into(), 9u64.into(), 0x03, true),
        crate::TraceState::parse_str("a=1").unwrap(),
    );
    let mut s = tracer.start_with_parent("x", SpanKind::Client, Some(&parent), vec![KeyValue::new("k", 1)]);
    assert_eq!(s.hex_ids().trace_id(), "00000000000000000000000000000007");
    s.end();
    p.force_flush(FLUSH).unwrap();
    let d = &exp.spans()[0];
    assert_eq!(d.trace_state.as_str(), "a=1");
    assert_eq!(d.trace_flags, 0x03);
}
