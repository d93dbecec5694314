//! A `tracing_subscriber::Layer` that records `tracing` spans straight into the weft pipeline.
//!
//! Each `tracing` span becomes a weft span when it is created (sampled with the provider's
//! sampler, under its `tracing` parent, or under the `opentelemetry` context current on the
//! thread when it has none) and is ended when it closes. Fields become attributes (field names
//! are `&'static str`, so keys never allocate), events become span events with `level` and
//! `target` attributes, and `follows_from` becomes a link. There is no round trip through
//! `tracing-opentelemetry` and its `opentelemetry` span builder.
//!
//! Special fields, as in `tracing-opentelemetry`: `otel.name` (span name), `otel.kind`
//! (`server`, `client`, `producer`, `consumer`, `internal`), `otel.status_code` (`ok`, `error`)
//! and `otel.status_message`.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//! use weft_sdk::export::InMemoryExporter;
//!
//! let exporter = InMemoryExporter::new();
//! let provider = weft_sdk::TracerProvider::builder().with_exporter(exporter.clone()).build();
//! let subscriber = tracing_subscriber::registry().with(weft_sdk::layer::WeftLayer::new(provider.weft_tracer("app")));
//! tracing::subscriber::with_default(subscriber, || {
//!     let _s = tracing::info_span!("request", user = 7).entered();
//! });
//! provider.force_flush(std::time::Duration::from_secs(5)).unwrap();
//! assert_eq!(exporter.spans()[0].name, "request");
//! ```

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use opentelemetry::trace::{Span as _, SpanKind, Status};
use opentelemetry::{Key, KeyValue};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::context::FullSpanContext;
use crate::trace::{Span, Tracer};

/// Records `tracing` spans as weft spans.
#[derive(Clone, Debug)]
pub struct WeftLayer {
    tracer: Tracer,
}

impl WeftLayer {
    /// Returns a layer creating spans with `tracer`.
    pub fn new(tracer: Tracer) -> Self {
        WeftLayer { tracer }
    }
}

/// The weft span stored in a `tracing` span's extensions.
struct WeftSpan(Span);

/// The weft span stored in a `tracing` span's extensions, if it is recording.
fn recording<'a>(ext: &'a mut tracing_subscriber::registry::ExtensionsMut<'_>) -> Option<&'a mut Span> {
    let WeftSpan(span) = ext.get_mut::<WeftSpan>()?;
    span.is_recording().then_some(span)
}

thread_local! {
    // Contexts of the entered `tracing` spans on this thread (innermost last), so code without
    // access to the registry can propagate the current span (`current_span_context`).
    static ENTERED: RefCell<Vec<Option<FullSpanContext>>> = const { RefCell::new(Vec::new()) };
}

/// Returns the context of the innermost entered `tracing` span recorded by a [`WeftLayer`] on
/// this thread, if any.
pub fn current_span_context() -> Option<FullSpanContext> {
    ENTERED.with(|e| e.borrow().iter().rev().find_map(|c| c.clone()))
}

fn key(field: &Field) -> Key {
    Key::from_static_str(field.name())
}

fn parse_kind(s: &str) -> Option<SpanKind> {
    Some(match s.to_ascii_lowercase().as_str() {
        "server" => SpanKind::Server,
        "client" => SpanKind::Client,
        "producer" => SpanKind::Producer,
        "consumer" => SpanKind::Consumer,
        "internal" => SpanKind::Internal,
        _ => return None,
    })
}

/// Collects fields into attributes and the special `otel.*` fields.
#[derive(Default)]
struct Fields {
    attributes: Vec<KeyValue>,
    name: Option<String>,
    kind: Option<SpanKind>,
    status_code: Option<String>,
    status_message: Option<String>,
    message: Option<String>,
}

impl Fields {
    fn special(&mut self, field: &Field, value: &str) -> bool {
        match field.name() {
            "otel.name" => self.name = Some(value.to_owned()),
            "otel.kind" => self.kind = parse_kind(value),
            "otel.status_code" => self.status_code = Some(value.to_ascii_lowercase()),
            "otel.status_message" => self.status_message = Some(value.to_owned()),
            "message" => self.message = Some(value.to_owned()),
            _ => return false,
        }
        true
    }

    fn status(&self) -> Option<Status> {
        match self.status_code.as_deref() {
            Some("ok") => Some(Status::Ok),
            Some("error") => Some(Status::error(self.status_message.clone().unwrap_or_default())),
            _ => None,
        }
    }
}

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attributes.push(KeyValue::new(key(field), value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(v) => self.attributes.push(KeyValue::new(key(field), v)),
            Err(_) => self.attributes.push(KeyValue::new(key(field), value.to_string())),
        }
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attributes.push(KeyValue::new(key(field), value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attributes.push(KeyValue::new(key(field), value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.special(field, value) {
            self.attributes.push(KeyValue::new(key(field), value.to_owned()));
        }
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.attributes.push(KeyValue::new(key(field), value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let s = format!("{value:?}");
        if !self.special(field, &s) {
            self.attributes.push(KeyValue::new(key(field), s));
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for WeftLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span_ref) = ctx.span(id) else { return };
        let parent = span_ref
            .parent()
            .and_then(|p| p.extensions().get::<WeftSpan>().map(|w| w.0.full_context()))
            .or_else(|| {
                let cx = opentelemetry::Context::current();
                crate::propagation::otel::full_span_context(&cx)
            });
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let name: Cow<'static, str> = match fields.name.take() {
            Some(n) => n.into(),
            None => span_ref.metadata().name().into(),
        };
        let mut span = self.tracer.start_with_parent(
            name,
            fields.kind.clone().unwrap_or(SpanKind::Internal),
            parent.as_ref(),
            std::mem::take(&mut fields.attributes),
        );
        if let Some(status) = fields.status() {
            span.set_status(status);
        }
        span_ref.extensions_mut().insert(WeftSpan(span));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span_ref) = ctx.span(id) else { return };
        let mut ext = span_ref.extensions_mut();
        let Some(span) = recording(&mut ext) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        for kv in fields.attributes.drain(..) {
            span.set_attribute(kv);
        }
        if let Some(n) = fields.name.take() {
            span.update_name(n);
        }
        if let Some(status) = fields.status() {
            span.set_status(status);
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        let Some(other) = ctx.span(follows).and_then(|f| {
            f.extensions()
                .get::<WeftSpan>()
                .map(|w| opentelemetry::trace::Span::span_context(&w.0).clone())
        }) else {
            return;
        };
        if let Some(span_ref) = ctx.span(id)
            && let Some(WeftSpan(span)) = span_ref.extensions_mut().get_mut::<WeftSpan>()
        {
            span.add_link(other, Vec::new());
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span_ref) = ctx.event_span(event) else { return };
        let mut ext = span_ref.extensions_mut();
        let Some(span) = recording(&mut ext) else { return };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        fields.attributes.push(KeyValue::new("level", meta.level().as_str()));
        fields
            .attributes
            .push(KeyValue::new("target", meta.target().to_owned()));
        let name: Cow<'static, str> = match fields.message.take() {
            Some(m) => m.into(),
            None => meta.name().into(),
        };
        span.add_event(name, fields.attributes);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let cx = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<WeftSpan>().map(|w| w.0.full_context()));
        let _ = ENTERED.try_with(|e| e.borrow_mut().push(cx));
    }

    fn on_exit(&self, _id: &Id, _ctx: Context<'_, S>) {
        let _ = ENTERED.try_with(|e| e.borrow_mut().pop());
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span_ref) = ctx.span(&id) else { return };
        let taken = span_ref.extensions_mut().remove::<WeftSpan>();
        if let Some(WeftSpan(mut span)) = taken {
            span.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tracing_subscriber::prelude::*;

    use super::*;
    use crate::export::InMemoryExporter;
    use crate::sampling::AlwaysOn;

    #[test]
    fn spans_events_fields_and_nesting() {
        let exporter = InMemoryExporter::new();
        let provider = crate::TracerProvider::builder()
            .with_resource(crate::Resource::new("t"))
            .with_sampler(AlwaysOn)
            .with_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(WeftLayer::new(provider.weft_tracer("layer")));
        let mut inner_cx = None;
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer", otel.kind = "server", user = 7u64, ok = true).entered();
            {
                let inner =
                    tracing::info_span!("inner", otel.name = "renamed", later = tracing::field::Empty).entered();
                inner.record("later", "set");
                inner_cx = current_span_context();
                tracing::warn!(code = 3, "something happened");
            }
            let follower = tracing::info_span!("follower");
            follower.follows_from(&outer);
            drop(follower);
            drop(outer);
        });
        provider.force_flush(Duration::from_secs(5)).unwrap();
        let spans = exporter.spans();
        assert_eq!(spans.len(), 3);
        let outer = spans.iter().find(|s| s.name == "outer").unwrap();
        let inner = spans.iter().find(|s| s.name == "renamed").unwrap();
        let follower = spans.iter().find(|s| s.name == "follower").unwrap();
        assert_eq!(outer.kind, SpanKind::Server);
        assert!(outer.attributes.contains(&KeyValue::new("user", 7)));
        assert_eq!(inner.parent_span_id, outer.span_id);
        assert!(inner.attributes.contains(&KeyValue::new("later", "set")));
        assert_eq!(inner.events[0].name, "something happened");
        assert!(inner.events[0].attributes.contains(&KeyValue::new("level", "WARN")));
        assert_eq!(inner_cx.unwrap().context.span_id, inner.span_id);
        assert_eq!(follower.links[0].context.span_id, outer.span_id);
        assert!(current_span_context().is_none());
    }
}
