//! Exporters for tests and benchmarks.

use std::sync::{Arc, Mutex};

use super::{ExportBatch, ExportContext, ExportResult, SpanExporter};
use crate::trace::SpanData;

/// Keeps every exported span in memory; clones share the same store.
#[derive(Clone, Debug, Default)]
pub struct InMemoryExporter {
    spans: Arc<Mutex<Vec<SpanData>>>,
}

impl InMemoryExporter {
    /// Returns an empty exporter.
    pub fn new() -> Self {
        Self::default()
    }
    /// Returns a copy of the spans exported so far.
    pub fn spans(&self) -> Vec<SpanData> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }
    /// Forgets the spans exported so far.
    pub fn reset(&self) {
        if let Ok(mut s) = self.spans.lock() {
            s.clear();
        }
    }
}

impl SpanExporter for InMemoryExporter {
    fn export(&mut self, batch: ExportBatch<'_>, _: &ExportContext<'_>) -> ExportResult {
        if let Ok(mut s) = self.spans.lock() {
            s.extend(batch.spans.iter().map(|b| SpanData::clone(b)));
        }
        ExportResult::Success
    }
}

/// Accepts and discards every batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopExporter;

impl SpanExporter for NoopExporter {
    fn export(&mut self, _: ExportBatch<'_>, _: &ExportContext<'_>) -> ExportResult {
        ExportResult::Success
    }
}
