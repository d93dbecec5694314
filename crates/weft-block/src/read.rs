//! What a caller asks of a row group's columns and what it gets back
//! ([`RowGroupData`](crate::RowGroupData)), whatever the block's format version: these types
//! are format-neutral, and each encoding (the `parquet_spans` module, …) fills them.

use bytes::Bytes;

/// Which columns [`filter_columns`](crate::RowGroupData::filter_columns) reads besides trace
/// IDs, start times and durations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub name: bool,
    pub status: bool,
    pub kind: bool,
    pub resource: bool,
    pub scope: bool,
    pub attributes: bool,
    pub events: bool,
    pub links: bool,
    /// Whether each span has a parent span ID ([`SpanFields::has_parent`](crate::row::SpanFields::has_parent)).
    pub parent: bool,
}

/// The columns a prefilter tests, for every row of a row group. Columns not asked for are
/// empty and read as empty values.
#[derive(Debug, Default)]
pub struct FilterColumns {
    pub trace_ids: Vec<[u8; 16]>,
    pub start: Vec<i64>,
    pub duration: Vec<i64>,
    pub(crate) name: DictColumn,
    pub(crate) status: Vec<i32>,
    pub(crate) kind: Vec<i32>,
    pub(crate) resource: DictColumn,
    pub(crate) scope: DictColumn,
    /// Attributes, events and links (empty for an empty list).
    pub(crate) blobs: [DictColumn; 3],
    /// In a block with dedicated columns: per row, its attributes with the values moved to
    /// those columns appended, where it has any (none read: empty).
    pub(crate) assembled: Vec<Option<Box<[u8]>>>,
    /// Whether each row has a parent span ID.
    pub(crate) has_parent: Vec<bool>,
}

impl FilterColumns {
    pub fn len(&self) -> usize {
        self.trace_ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.trace_ids.is_empty()
    }

    /// Row `i` as [`SpanFields`](crate::row::SpanFields).
    pub fn row(&self, i: usize) -> FilterRow<'_> {
        FilterRow { cols: self, i }
    }
}

/// One row of [`FilterColumns`].
#[derive(Debug, Clone, Copy)]
pub struct FilterRow<'a> {
    cols: &'a FilterColumns,
    i: usize,
}

impl crate::row::SpanFields for FilterRow<'_> {
    fn name(&self) -> &[u8] {
        self.cols.name.get(self.i)
    }
    fn start_unix_nano(&self) -> u64 {
        self.cols.start[self.i] as u64
    }
    fn duration_nano(&self) -> i64 {
        self.cols.duration[self.i]
    }
    fn status_code(&self) -> u8 {
        self.cols
            .status
            .get(self.i)
            .map(|&c| c.clamp(0, 255) as u8)
            .unwrap_or(0)
    }
    fn kind(&self) -> u8 {
        self.cols.kind.get(self.i).map(|&c| c.clamp(0, 255) as u8).unwrap_or(0)
    }
    fn resource(&self) -> &[u8] {
        self.cols.resource.get(self.i)
    }
    fn scope(&self) -> &[u8] {
        self.cols.scope.get(self.i)
    }
    fn attributes(&self) -> &[u8] {
        match self.cols.assembled.get(self.i) {
            Some(Some(a)) => a,
            _ => self.cols.blobs[0].get(self.i),
        }
    }
    fn events(&self) -> &[u8] {
        self.cols.blobs[1].get(self.i)
    }
    fn links(&self) -> &[u8] {
        self.cols.blobs[2].get(self.i)
    }
    fn has_parent(&self) -> bool {
        self.cols.has_parent.get(self.i).copied().unwrap_or(false)
    }
}

/// Which columns [`metric_columns`](crate::RowGroupData::metric_columns) reads besides start
/// times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricNeeds {
    pub name: bool,
    pub status: bool,
    pub status_message: bool,
    pub kind: bool,
    pub duration: bool,
    pub resource: bool,
    pub scope: bool,
    /// Span attribute keys whose values are read ([`MetricColumns::span_attributes`]), each
    /// once, in the order given.
    pub span_keys: Vec<String>,
    /// Trace and span IDs, for exemplars ([`MetricColumns::trace_id`],
    /// [`MetricColumns::span_id`]).
    pub trace_ids: bool,
    /// Parent span IDs, for whether a span is a root ([`MetricColumns::parent`]).
    pub parents: bool,
    /// The attribute blobs with their dictionary ids, and which span-scope dedicated columns
    /// hold a value in each row ([`MetricColumns::attributes`], the dedicated keys and mask):
    /// what span attribute keys a row group holds, for the tag APIs.
    pub blobs: bool,
    /// The event and link blobs with their dictionary ids ([`MetricColumns::events`],
    /// [`MetricColumns::links`]).
    pub lists: bool,
    /// Every span attribute: the attribute blobs with their dictionary ids
    /// ([`MetricColumns::attributes`]) and the values moved out of them into span-scope
    /// dedicated columns ([`MetricColumns::moved`]).
    pub all_span_attributes: bool,
}

impl MetricNeeds {
    /// The columns either needs.
    pub fn union(self, o: MetricNeeds) -> MetricNeeds {
        let mut span_keys = self.span_keys;
        for k in o.span_keys {
            if !span_keys.contains(&k) {
                span_keys.push(k);
            }
        }
        MetricNeeds {
            name: self.name || o.name,
            status: self.status || o.status,
            status_message: self.status_message || o.status_message,
            kind: self.kind || o.kind,
            duration: self.duration || o.duration,
            resource: self.resource || o.resource,
            scope: self.scope || o.scope,
            span_keys,
            trace_ids: self.trace_ids || o.trace_ids,
            parents: self.parents || o.parents,
            blobs: self.blobs || o.blobs,
            lists: self.lists || o.lists,
            all_span_attributes: self.all_span_attributes || o.all_span_attributes,
        }
    }
}

/// A byte-string column as a dictionary plus one dictionary id per row. A null (of an optional
/// column) reads as an empty value, with an id of its own ([`DictColumn::null`]).
#[derive(Debug, Default)]
pub struct DictColumn {
    pub values: Vec<Bytes>,
    pub ids: Vec<u32>,
    /// The id of the rows that are null, if any is.
    pub null: Option<u32>,
}

impl DictColumn {
    /// Row `i`'s value: empty when null, or when the column was not read (no rows).
    pub fn get(&self, i: usize) -> &[u8] {
        self.ids
            .get(i)
            .and_then(|&id| self.values.get(id as usize))
            .map_or(&[], |v| &v[..])
    }
}

/// Builds a [`DictColumn`] row by row: equal values get equal ids (the empty value is id 0),
/// each distinct value stored once ([`crate::columns::Interner`]).
#[derive(Debug, Default)]
pub struct DictBuilder {
    values: crate::columns::Interner,
    ids: Vec<u32>,
}

impl DictBuilder {
    /// Appends a row holding `v`.
    pub fn push(&mut self, v: &[u8]) {
        let id = self.values.intern(v);
        self.ids.push(id);
    }

    /// The id of `v`, adding it as a value without appending a row.
    pub fn intern(&mut self, v: &[u8]) -> u32 {
        self.values.intern(v)
    }

    /// Appends a row holding the value `id` (from [`Self::intern`] or a row pushed before).
    pub fn push_id(&mut self, id: u32) {
        debug_assert!((id as usize) < self.values.len(), "unknown value id");
        self.ids.push(id);
    }

    /// The value `id`.
    pub fn value(&self, id: u32) -> &[u8] {
        self.values.get(id)
    }

    pub fn finish(self) -> DictColumn {
        DictColumn {
            values: (0..self.values.len() as u32)
                .map(|id| Bytes::copy_from_slice(self.values.get(id)))
                .collect(),
            ids: self.ids,
            null: None,
        }
    }
}

/// Columns of a row group for span-at-a-time metrics: start times always, the others when
/// asked for (empty otherwise). Strings keep their dictionary ids, so a caller can evaluate
/// once per distinct value instead of once per row.
#[derive(Debug, Default)]
pub struct MetricColumns {
    pub start: Vec<i64>,
    pub duration: Vec<i64>,
    pub status: Vec<i32>,
    pub kind: Vec<i32>,
    pub name: DictColumn,
    pub status_message: DictColumn,
    pub resource: DictColumn,
    pub scope: DictColumn,
    /// Per key of [`MetricNeeds::span_keys`], in that order: the span's attributes with that
    /// key as encoded `Span.attributes` fields (what a span's attribute blob holds of it, in
    /// order), empty when the span has none. Equal ids mean equal bytes.
    pub span_attributes: Vec<DictColumn>,
    /// With [`MetricNeeds::trace_ids`]: 16-byte trace IDs.
    pub trace_id: DictColumn,
    /// With [`MetricNeeds::trace_ids`]: span IDs, so an exemplar names its span as one from
    /// the head does.
    pub span_id: Vec<[u8; 8]>,
    /// With [`MetricNeeds::parents`]: 8-byte parent span IDs, empty (null) for a root span.
    pub parent: DictColumn,
    /// With [`MetricNeeds::blobs`]: each span's `attributes` blob as stored, that is without
    /// the values moved to dedicated columns ([`crate::dedicated`]).
    pub attributes: DictColumn,
    /// With [`MetricNeeds::lists`]: each span's event and link blobs.
    pub events: DictColumn,
    pub links: DictColumn,
    /// With [`MetricNeeds::blobs`]: the keys of the block's span-scope dedicated columns, and
    /// per row a mask of those that hold a value (bit `k` for `dedicated_keys[k]`).
    pub dedicated_keys: Vec<String>,
    pub dedicated_mask: Vec<u16>,
    /// With [`MetricNeeds::all_span_attributes`]: per span-scope dedicated column, each span's
    /// value moved to it, encoded as a `Span.attributes` field (empty where the span has none).
    /// The blob followed by these, in column order, is what the row reader gives. Equal ids
    /// mean equal bytes.
    pub moved: Vec<DictColumn>,
}

/// Columns of a row group for the service graph: who called whom, per trace, without
/// assembling spans. Rows are in block order, so a trace's rows are consecutive.
#[derive(Debug, Default)]
pub struct GraphColumns {
    /// Trace IDs (16 bytes) with one id per row: a change of id starts the next trace.
    pub trace: DictColumn,
    /// Span IDs as big-endian integers.
    pub span_id: Vec<u64>,
    /// Parent span IDs as big-endian integers, 0 for a root span.
    pub parent: Vec<u64>,
    pub kind: Vec<i32>,
    pub status: Vec<i32>,
    pub start: Vec<i64>,
    pub duration: Vec<i64>,
    /// Resource `service.name` (empty when the resource has none).
    pub service: DictColumn,
}
