//! The in-memory trace model the evaluator reads. The storage layer fills it; the evaluator never
//! mutates it.
//!
//! Everything is owned and plain: attributes are `(key, value)` lists in the order they were
//! received, ids are raw bytes, times are Unix nanoseconds. The resource's service name is the
//! resource attribute `service.name`.
//!
//! Lookups follow two rules the evaluator relies on:
//! - the first attribute with a key wins, and an attribute whose value is [`Value::Nil`] counts as
//!   absent (so `{ span.x = nil }` matches it);
//! - a span's parent is the span of the same trace whose `span_id` equals its `parent_span_id`,
//!   never the span itself; when several spans share that id, the one with the lowest index is
//!   the parent ([`Trace::parents`]).

use std::collections::HashMap;

use crate::ast::{Kind, Status};

/// An attribute value, or the value of a field expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// A 64-bit signed integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A duration in nanoseconds.
    Duration(i64),
    /// A span status.
    Status(Status),
    /// A span kind.
    Kind(Kind),
    /// No value: a missing attribute, or an attribute stored without a value.
    Nil,
    /// An array; comparisons look at its elements.
    Array(Vec<Value>),
}

/// A timestamped event inside a span.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The event name (`event:name`).
    pub name: String,
    /// When it happened, in Unix nanoseconds.
    pub time_unix_nano: u64,
    /// The event's attributes (`event.x`).
    pub attrs: Vec<(String, Value)>,
}

/// A link from a span to another span, possibly in another trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The linked trace (`link:traceID`).
    pub trace_id: [u8; 16],
    /// The linked span (`link:spanID`).
    pub span_id: [u8; 8],
    /// The link's attributes (`link.x`).
    pub attrs: Vec<(String, Value)>,
}

/// One span with its resource and instrumentation scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The trace this span belongs to (`trace:id`).
    pub trace_id: [u8; 16],
    /// The span id (`span:id`).
    pub span_id: [u8; 8],
    /// The parent's span id (`span:parentID`); `None` for a root span.
    pub parent_span_id: Option<[u8; 8]>,
    /// The span name (`name`).
    pub name: String,
    /// The span kind (`kind`).
    pub kind: Kind,
    /// The span status (`status`).
    pub status: Status,
    /// The status message (`statusMessage`).
    pub status_message: String,
    /// Start time in Unix nanoseconds.
    pub start_unix_nano: u64,
    /// Duration in nanoseconds (`duration`).
    pub duration_nano: u64,
    /// Span attributes (`span.x`).
    pub span_attrs: Vec<(String, Value)>,
    /// Resource attributes (`resource.x`); the service name is `service.name`.
    pub resource_attrs: Vec<(String, Value)>,
    /// Instrumentation scope name (`instrumentation:name`).
    pub scope_name: String,
    /// Instrumentation scope version (`instrumentation:version`).
    pub scope_version: String,
    /// Instrumentation scope attributes (`instrumentation.x`).
    pub scope_attrs: Vec<(String, Value)>,
    /// Events, in the order received.
    pub events: Vec<Event>,
    /// Links, in the order received.
    pub links: Vec<Link>,
}

impl Default for Span {
    /// An unnamed root span with zero ids, kind `unspecified`, status `unset` and no attributes.
    fn default() -> Self {
        Span {
            trace_id: [0; 16],
            span_id: [0; 8],
            parent_span_id: None,
            name: String::new(),
            kind: Kind::Unspecified,
            status: Status::Unset,
            status_message: String::new(),
            start_unix_nano: 0,
            duration_nano: 0,
            span_attrs: Vec::new(),
            resource_attrs: Vec::new(),
            scope_name: String::new(),
            scope_version: String::new(),
            scope_attrs: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
        }
    }
}

impl Span {
    /// End time in Unix nanoseconds (start plus duration, saturating).
    pub fn end_unix_nano(&self) -> u64 {
        self.start_unix_nano.saturating_add(self.duration_nano)
    }

    /// The span attribute `key`, if present and not nil.
    pub fn span_attr(&self, key: &str) -> Option<&Value> {
        find_attr(&self.span_attrs, key)
    }

    /// The resource attribute `key`, if present and not nil.
    pub fn resource_attr(&self, key: &str) -> Option<&Value> {
        find_attr(&self.resource_attrs, key)
    }

    /// The resource attribute `service.name`, if it is a string.
    pub fn service_name(&self) -> Option<&str> {
        match self.resource_attr("service.name") {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }
}

/// The first attribute named `key` whose value is not [`Value::Nil`].
pub(crate) fn find_attr<'a>(attrs: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|(k, v)| k == key && !matches!(v, Value::Nil))
        .map(|(_, v)| v)
}

/// The spans of one trace, in any order. Span indexes are positions in `spans`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// The spans.
    pub spans: Vec<Span>,
}

impl Trace {
    /// For each span, the index of its parent in this trace: the lowest-index span other than
    /// itself whose `span_id` equals its `parent_span_id`. `None` for root spans, for spans whose
    /// parent is not in the trace, and for spans that name themselves as parent.
    ///
    /// Parent links may form cycles in malformed input; callers that walk them must bound the walk.
    pub fn parents(&self) -> Vec<Option<usize>> {
        // The first two indexes per span id: enough to find "the lowest index other than me".
        let mut by_id: HashMap<[u8; 8], (usize, Option<usize>)> = HashMap::with_capacity(self.spans.len());
        for (i, span) in self.spans.iter().enumerate() {
            by_id
                .entry(span.span_id)
                .and_modify(|e| {
                    if e.1.is_none() {
                        e.1 = Some(i);
                    }
                })
                .or_insert((i, None));
        }
        self.spans
            .iter()
            .enumerate()
            .map(|(i, span)| {
                let (first, second) = *by_id.get(&span.parent_span_id?)?;
                if first != i { Some(first) } else { second }
            })
            .collect()
    }

    /// The root span: the earliest-starting span with no `parent_span_id`; if there is none, the
    /// earliest-starting span whose parent is not in the trace. Ties go to the lower index. `None`
    /// for an empty trace and for one whose every span has a parent in it (a cycle).
    pub fn root(&self) -> Option<usize> {
        root_from_parents(self, &self.parents())
    }

    /// The earliest span start, in Unix nanoseconds; `None` for an empty trace.
    pub fn start_unix_nano(&self) -> Option<u64> {
        self.spans.iter().map(|s| s.start_unix_nano).min()
    }

    /// The latest span end, in Unix nanoseconds; `None` for an empty trace.
    pub fn end_unix_nano(&self) -> Option<u64> {
        self.spans.iter().map(Span::end_unix_nano).max()
    }

    /// The trace duration (`traceDuration`): latest span end minus earliest span start; 0 for an
    /// empty trace.
    pub fn duration_nano(&self) -> u64 {
        match (self.start_unix_nano(), self.end_unix_nano()) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => 0,
        }
    }

    /// The root span's name (`rootName`).
    pub fn root_name(&self) -> Option<&str> {
        self.root().map(|r| self.spans[r].name.as_str())
    }

    /// The root span's resource attribute `service.name` (`rootServiceName`), if it is a string.
    pub fn root_service_name(&self) -> Option<&str> {
        self.root().and_then(|r| self.spans[r].service_name())
    }
}

/// [`Trace::root`] with the parent links already computed.
pub(crate) fn root_from_parents(trace: &Trace, parents: &[Option<usize>]) -> Option<usize> {
    let earliest = |pred: &dyn Fn(usize) -> bool| {
        (0..trace.spans.len())
            .filter(|&i| pred(i))
            .min_by_key(|&i| (trace.spans[i].start_unix_nano, i))
    };
    earliest(&|i| trace.spans[i].parent_span_id.is_none()).or_else(|| earliest(&|i| parents[i].is_none()))
}
