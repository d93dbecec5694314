//! Spans decoded into columns in memory: the head of the store and the input of a block.
//!
//! Decoding happens here exactly once per span (see ARCHITECTURE.md, "marshal once"). Repeated
//! values are interned: span names and status messages in a string table, resource and scope
//! headers in a bytes table, so a batch of 512 spans from one resource stores its resource
//! once. Attribute, event and link lists are kept as their protobuf bytes.

use crate::hash::{FastBuild, FastMap};
use crate::row::SpanRow;
use bytes::Bytes;
use hashbrown::HashTable;
use weft_otlp::request::{GroupKind, SpanView};
use weft_otlp::wire::Reader;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A table of distinct byte strings; id 0 is always the empty string.
///
/// The values lie end to end in one buffer and the lookup table holds their ids, so interning
/// a new value costs no allocation of its own (amortised growth of three vectors). Queries
/// intern every distinct value of the columns they decode: with a boxed copy per value (two,
/// with the map's key), `compare()` over 10M spans spent a tenth of its samples here and about
/// 15 % in malloc and free; one buffer took 11–13 % off its CPU at parallelism 1 and 2
/// (docs/benchmarks/query-parallelism.md).
#[derive(Debug)]
pub struct Interner {
    data: Vec<u8>,
    /// End of each value in `data`; value `id` is `data[ends[id - 1]..ends[id]]`, `ends[0]` = 0.
    ends: Vec<u32>,
    /// Distinct non-empty values: (hash, id).
    table: HashTable<(u64, u32)>,
    seed: u64,
    bytes: usize,
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            data: Vec::new(),
            ends: vec![0],
            table: HashTable::new(),
            seed: crate::hash::process_seed(),
            bytes: 0,
        }
    }
}

impl Interner {
    #[inline]
    pub fn intern(&mut self, v: &[u8]) -> u32 {
        if v.is_empty() {
            return 0;
        }
        let (id, new) = intern_into(&mut self.data, &mut self.ends, &mut self.table, self.seed, v);
        if new {
            // What the value adds: its bytes, its end, its table entry.
            self.bytes += v.len() + 4 + 16;
        }
        id
    }

    #[inline]
    pub fn get(&self, id: u32) -> &[u8] {
        if id == 0 {
            return &[];
        }
        &self.data[self.ends[id as usize - 1] as usize..self.ends[id as usize] as usize]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.len() <= 1
    }
}

/// The id of the non-empty value `v` among the values end to end in `data` (value `id` is
/// `data[ends[id - 1]..ends[id]]`), appending it if it is new; and whether it was. `table` holds
/// (hash, id) of every value, hashed with `seed`. Shared by [`Interner`] and [`BlobColumn`].
#[inline]
fn intern_into(
    data: &mut Vec<u8>,
    ends: &mut Vec<u32>,
    table: &mut HashTable<(u64, u32)>,
    seed: u64,
    v: &[u8],
) -> (u32, bool) {
    let h = xxh3_64_with_seed(v, seed);
    let value = |id: u32| &data[ends[id as usize - 1] as usize..ends[id as usize] as usize];
    if let Some(&(_, id)) = table.find(h, |&(eh, id)| eh == h && value(id) == v) {
        return (id, false);
    }
    let id = ends.len() as u32;
    data.extend_from_slice(v);
    ends.push(data.len() as u32);
    table.insert_unique(h, (h, id), |&(eh, _)| eh);
    (id, true)
}

/// The rows of one trace in [`SpanColumns`], newest first.
#[derive(Clone)]
pub struct Chain<'a> {
    cols: &'a SpanColumns,
    next: u32,
}

impl Iterator for Chain<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let r = self.next;
        if r == NONE {
            return None;
        }
        self.next = self.cols.prev[r as usize];
        Some(r)
    }
}

/// One row of [`SpanColumns`], read in place.
#[derive(Clone, Copy)]
pub struct ColumnRow<'a> {
    cols: &'a SpanColumns,
    i: usize,
}

impl crate::row::SpanFields for ColumnRow<'_> {
    fn name(&self) -> &[u8] {
        self.cols.strings.get(self.cols.name[self.i])
    }
    fn start_unix_nano(&self) -> u64 {
        self.cols.start[self.i]
    }
    fn duration_nano(&self) -> i64 {
        self.cols.duration[self.i]
    }
    fn status_code(&self) -> u8 {
        self.cols.status_code[self.i]
    }
    fn kind(&self) -> u8 {
        self.cols.kind[self.i]
    }
    fn resource(&self) -> &[u8] {
        self.cols.headers.get(self.cols.resource[self.i])
    }
    fn scope(&self) -> &[u8] {
        self.cols.headers.get(self.cols.scope[self.i])
    }
    fn attributes(&self) -> &[u8] {
        self.cols.attributes.get(self.i)
    }
    fn events(&self) -> &[u8] {
        self.cols.events.get(self.i)
    }
    fn links(&self) -> &[u8] {
        self.cols.links.get(self.i)
    }
    fn has_parent(&self) -> bool {
        self.cols.parent_span_id[self.i] != [0; 8]
    }
}

/// A column of variable-length byte values, each distinct value stored once.
///
/// Invariants: value id 0 is the empty value; `ids[row]` is the value id of each row; value
/// `v ≥ 1` occupies `data[ends[v - 1]..ends[v]]` and `ends[0] == 0`. Rows that repeat a value
/// (the same attribute set, the same empty event list) share it, so the head holds each
/// distinct value once and the block writer gets its dictionary from the ids instead of
/// hashing every value again (the largest cost of block encoding; docs/benchmarks/ingest.md,
/// "What changed this session").
///
/// While a head fills, values are appended to a `Vec`. [`BlobColumn::freeze`] turns the data
/// into shared [`Bytes`] without copying, so the block writer can hand out slices of it.
#[derive(Debug)]
pub struct BlobColumn {
    data: Vec<u8>,
    frozen: Bytes,
    ends: Vec<u32>,
    /// Value id of each row.
    pub ids: Vec<u32>,
    /// Distinct non-empty values: (hash, value id).
    table: HashTable<(u64, u32)>,
    seed: u64,
}

impl Default for BlobColumn {
    fn default() -> Self {
        BlobColumn {
            data: Vec::new(),
            frozen: Bytes::new(),
            ends: vec![0],
            ids: Vec::new(),
            table: HashTable::new(),
            seed: crate::hash::process_seed(),
        }
    }
}

impl BlobColumn {
    /// Appends a row holding `v`. Must not be called after [`BlobColumn::freeze`].
    #[inline]
    pub fn push(&mut self, v: &[u8]) {
        let id = self.intern(v);
        self.ids.push(id);
    }

    /// The value id of `v`, adding it if it is new, without appending a row (see
    /// [`Self::push_id`]). Must not be called after [`BlobColumn::freeze`].
    #[inline]
    pub fn intern(&mut self, v: &[u8]) -> u32 {
        debug_assert!(self.frozen.is_empty(), "push after freeze");
        if v.is_empty() {
            return 0;
        }
        intern_into(&mut self.data, &mut self.ends, &mut self.table, self.seed, v).0
    }

    /// Appends a row holding the value `id` returned by [`Self::intern`].
    #[inline]
    pub fn push_id(&mut self, id: u32) {
        debug_assert!((id as usize) < self.ends.len(), "unknown value id");
        self.ids.push(id);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Number of value ids, the empty value included.
    pub fn distinct(&self) -> usize {
        self.ends.len()
    }

    /// The bytes of value `id` as a range of [`Self::bytes`].
    #[inline]
    pub fn value_range(&self, id: u32) -> std::ops::Range<usize> {
        if id == 0 {
            return 0..0;
        }
        self.ends[id as usize - 1] as usize..self.ends[id as usize] as usize
    }

    /// The value of row `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        &self.bytes()[self.value_range(self.ids[i])]
    }

    /// The value of row `i` as shared bytes: a slice of the data once frozen (no copy),
    /// otherwise a copy.
    pub fn get_shared(&self, i: usize) -> Bytes {
        let r = self.value_range(self.ids[i]);
        if r.is_empty() {
            Bytes::new()
        } else if self.frozen.is_empty() {
            Bytes::copy_from_slice(&self.data[r])
        } else {
            self.frozen.slice(r)
        }
    }

    /// Every distinct value, end to end.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        if self.frozen.is_empty() {
            &self.data
        } else {
            &self.frozen
        }
    }

    /// Bytes of distinct values held.
    pub fn data_len(&self) -> usize {
        self.bytes().len()
    }

    /// Heap bytes held, for cutting heads by size.
    pub fn memory_bytes(&self) -> usize {
        self.data_len() + self.ids.len() * 4 + self.ends.len() * 4 + self.table.len() * 24
    }

    /// Reserves room for `rows` more rows and `values` more distinct values holding `bytes`.
    pub fn reserve(&mut self, rows: usize, values: usize, bytes: usize) {
        self.ids.reserve(rows);
        self.ends.reserve(values);
        self.data.reserve(bytes);
        self.table.reserve(values, |&(h, _)| h);
    }

    /// Makes the column immutable and its data shareable; cheap, no copy. Drops the lookup
    /// table, which only pushing needs.
    pub fn freeze(&mut self) {
        self.table = HashTable::new();
        if !self.data.is_empty() {
            self.frozen = Bytes::from(std::mem::take(&mut self.data));
        }
    }

    /// The distinct values as shared bytes: a reference count if frozen, otherwise a copy.
    pub fn shared(&self) -> Bytes {
        if self.frozen.is_empty() {
            Bytes::copy_from_slice(&self.data)
        } else {
            self.frozen.clone()
        }
    }
}

/// No previous row in a trace's chain.
pub const NONE: u32 = u32::MAX;

/// Spans of one tenant in columns, with a trace-ID index.
#[derive(Debug)]
pub struct SpanColumns {
    pub trace_id: Vec<[u8; 16]>,
    pub span_id: Vec<[u8; 8]>,
    /// All zeros for a root span.
    pub parent_span_id: Vec<[u8; 8]>,
    pub name: Vec<u32>,
    pub kind: Vec<u8>,
    pub start: Vec<u64>,
    /// `end - start`, wrapping, so any end time round-trips exactly.
    pub duration: Vec<i64>,
    pub status_code: Vec<u8>,
    pub status_message: Vec<u32>,
    pub resource: Vec<u32>,
    pub scope: Vec<u32>,
    pub attributes: BlobColumn,
    pub events: BlobColumn,
    pub links: BlobColumn,
    pub extra: BlobColumn,
    /// Span names and status messages.
    pub strings: Interner,
    /// Resource and scope headers (encoded protobuf fields).
    pub headers: Interner,
    /// Service name string id for each header id that is a resource.
    pub service_of: FastMap<u32, u32>,
    /// For each trace, its last row; `prev[row]` chains to the trace's earlier rows. Complete
    /// after [`Self::end_run`] (pushing a request ends with it).
    pub traces: FastMap<[u8; 16], u32>,
    pub prev: Vec<u32>,
    pub min_start: u64,
    pub max_end: u64,
    scratch: Vec<u8>,
    /// The last row of each recently seen trace whose row the map does not have yet (`NONE`
    /// marks a free slot); `open[0]` is the trace of the row last pushed. See [`Self::chain`].
    open: [([u8; 16], u32); OPEN_TRACES],
    /// The slot the next trace not among `open` replaces (round robin over `1..`).
    evict: usize,
}

/// How many traces [`SpanColumns::chain`] keeps out of the trace map. An SDK's batch holds
/// spans in the order they ended, so the spans of the few traces in progress at once alternate
/// (one telemetrygen request of 512 spans: 336 runs of 56 traces, a handful at a time).
const OPEN_TRACES: usize = 16;

impl Default for SpanColumns {
    fn default() -> Self {
        SpanColumns {
            trace_id: Vec::new(),
            span_id: Vec::new(),
            parent_span_id: Vec::new(),
            name: Vec::new(),
            kind: Vec::new(),
            start: Vec::new(),
            duration: Vec::new(),
            status_code: Vec::new(),
            status_message: Vec::new(),
            resource: Vec::new(),
            scope: Vec::new(),
            attributes: BlobColumn::default(),
            events: BlobColumn::default(),
            links: BlobColumn::default(),
            extra: BlobColumn::default(),
            strings: Interner::default(),
            headers: Interner::default(),
            service_of: FastMap::with_hasher(FastBuild::default()),
            traces: FastMap::with_hasher(FastBuild::default()),
            prev: Vec::new(),
            min_start: u64::MAX,
            max_end: 0,
            scratch: Vec::new(),
            open: [([0; 16], NONE); OPEN_TRACES],
            evict: 1,
        }
    }
}

/// How much a [`SpanColumns`] should reserve up front.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    pub spans: usize,
    pub traces: usize,
    /// Data bytes of the attribute, event, link and extra columns.
    pub blobs: [usize; 4],
    /// Distinct values of the attribute, event, link and extra columns.
    pub blob_values: [usize; 4],
}

impl SpanColumns {
    /// Empty columns with room for `cap` spans, so a head that fills to the size of the last
    /// one grows without reallocating and copying its columns (measured in `make bench`:
    /// growth copies and page faults were a visible share of the head builder).
    pub fn with_capacity(cap: Capacity) -> Self {
        let n = cap.spans;
        let mut c = SpanColumns {
            trace_id: Vec::with_capacity(n),
            span_id: Vec::with_capacity(n),
            parent_span_id: Vec::with_capacity(n),
            name: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            start: Vec::with_capacity(n),
            duration: Vec::with_capacity(n),
            status_code: Vec::with_capacity(n),
            status_message: Vec::with_capacity(n),
            resource: Vec::with_capacity(n),
            scope: Vec::with_capacity(n),
            prev: Vec::with_capacity(n),
            ..SpanColumns::default()
        };
        c.traces.reserve(cap.traces);
        for ((col, bytes), values) in [&mut c.attributes, &mut c.events, &mut c.links, &mut c.extra]
            .into_iter()
            .zip(cap.blobs)
            .zip(cap.blob_values)
        {
            col.reserve(n, values, bytes);
        }
        c
    }

    /// What these columns hold now, as a hint for the next head.
    pub fn capacity_hint(&self) -> Capacity {
        Capacity {
            spans: self.len(),
            traces: self.trace_count(),
            blobs: [
                self.attributes.data_len(),
                self.events.data_len(),
                self.links.data_len(),
                self.extra.data_len(),
            ],
            blob_values: [
                self.attributes.distinct(),
                self.events.distinct(),
                self.links.distinct(),
                self.extra.distinct(),
            ],
        }
    }
}

/// Fixed bytes per span held in the columns and index, used for the memory estimate.
const FIXED_ROW_BYTES: usize = 16 + 8 + 8 + 4 + 1 + 8 + 8 + 1 + 4 + 4 + 4 + 4;

impl SpanColumns {
    pub fn len(&self) -> usize {
        self.trace_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.trace_id.is_empty()
    }

    pub fn trace_count(&self) -> usize {
        self.traces.len()
    }

    /// Approximate heap bytes held, for cutting blocks by size.
    pub fn memory_bytes(&self) -> usize {
        self.len() * FIXED_ROW_BYTES
            + self.traces.len() * 28
            + self.attributes.memory_bytes()
            + self.events.memory_bytes()
            + self.links.memory_bytes()
            + self.extra.memory_bytes()
            + self.strings.bytes
            + self.headers.bytes
    }

    /// Freezes the blob columns so a block can be written from them without copying. No more
    /// spans may be pushed afterwards.
    pub fn freeze(&mut self) {
        for c in [&mut self.attributes, &mut self.events, &mut self.links, &mut self.extra] {
            c.freeze();
        }
    }

    /// Interns a resource header and remembers its service name.
    pub fn intern_resource(&mut self, header: &[u8]) -> u32 {
        let id = self.headers.intern(header);
        if !self.service_of.contains_key(&id) {
            let svc = service_name(header).unwrap_or_default();
            let sid = self.strings.intern(svc.as_bytes());
            self.service_of.insert(id, sid);
        }
        id
    }

    /// Appends one span. Call [`Self::end_run`] (as `push_request` does) before reading the trace
    /// index. `resource` and `scope` are ids from [`Self::intern_resource`] and
    /// `headers.intern`. The span must come from a request validated by `validate_request`.
    #[inline]
    pub fn push(&mut self, resource: u32, scope: u32, s: &SpanView<'_>) {
        let tid: [u8; 16] = s.trace_id.try_into().unwrap_or([0; 16]);
        self.chain(tid);
        self.span_id.push(s.span_id.try_into().unwrap_or([0; 8]));
        self.parent_span_id.push(s.parent_span_id.try_into().unwrap_or([0; 8]));
        let name = self.strings.intern(s.name);
        self.name.push(name);
        self.kind.push(s.kind.clamp(0, 255) as u8);
        self.start.push(s.start_unix_nano);
        self.duration
            .push(s.end_unix_nano.wrapping_sub(s.start_unix_nano) as i64);
        self.min_start = self.min_start.min(s.start_unix_nano);
        self.max_end = self.max_end.max(s.end_unix_nano);
        self.status_code.push(s.status_code.clamp(0, 255) as u8);
        let msg = if s.status_message.is_empty() {
            0
        } else {
            self.strings.intern(s.status_message)
        };
        self.status_message.push(msg);
        self.resource.push(resource);
        self.scope.push(scope);
        let mut scratch = std::mem::take(&mut self.scratch);
        self.attributes.push(s.gather(GroupKind::Attributes, &mut scratch));
        self.events.push(s.gather(GroupKind::Events, &mut scratch));
        self.links.push(s.gather(GroupKind::Links, &mut scratch));
        self.extra.push(s.gather(GroupKind::Extra, &mut scratch));
        self.scratch = scratch;
    }

    /// Links the row about to be appended into its trace's chain and pushes its trace ID.
    ///
    /// The trace map is much larger than the caches, and spans of a few traces alternate (see
    /// [`OPEN_TRACES`]): a trace's last row stays in `open` while it recurs, and reaches the
    /// map only when the trace is evicted or the request ends (`end_run`). Before, each run of
    /// a trace read and wrote the map once (ingest profile, `make bench`).
    #[inline]
    pub(crate) fn chain(&mut self, tid: [u8; 16]) {
        let row = self.trace_id.len() as u32;
        let prev = if self.open[0].1 != NONE && self.open[0].0 == tid {
            self.open[0].1
        } else {
            self.open_trace(tid)
        };
        self.open[0] = (tid, row);
        self.prev.push(prev);
        self.trace_id.push(tid);
    }

    /// Makes `tid` the trace in `open[0]` and returns its last row so far (or `NONE`). The
    /// previous `open[0]` moves to the slot `tid` leaves or, for a trace not open, to the
    /// evicted slot, whose trace goes to the map. Out of line, so that `chain`'s common case
    /// (the same trace as the row before) stays small where it is inlined.
    #[inline(never)]
    fn open_trace(&mut self, tid: [u8; 16]) -> u32 {
        let slot = match self.open[1..].iter().position(|&(t, r)| r != NONE && t == tid) {
            Some(i) => i + 1,
            None => {
                let e = self.evict;
                self.evict = if e + 1 == OPEN_TRACES { 1 } else { e + 1 };
                let (t, r) = self.open[e];
                if r != NONE {
                    self.traces.insert(t, r);
                }
                self.open[e] = (tid, self.traces.get(&tid).copied().unwrap_or(NONE));
                e
            }
        };
        let (_, last) = self.open[slot];
        self.open[slot] = self.open[0];
        last
    }
    /// Appends a stored span (compaction re-writes blocks this way). Call [`Self::end_run`]
    /// before reading the trace index.
    pub fn push_row(&mut self, r: &SpanRow) {
        let resource = self.intern_resource(&r.resource);
        let scope = self.headers.intern(&r.scope);
        self.chain(r.trace_id);
        self.span_id.push(r.span_id);
        self.parent_span_id.push(r.parent_span_id);
        let name = self.strings.intern(r.name.as_bytes());
        self.name.push(name);
        self.kind.push(r.kind);
        self.start.push(r.start_unix_nano);
        self.duration.push(r.duration_nano);
        self.min_start = self.min_start.min(r.start_unix_nano);
        self.max_end = self.max_end.max(r.end_unix_nano());
        self.status_code.push(r.status_code);
        let msg = if r.status_message.is_empty() {
            0
        } else {
            self.strings.intern(r.status_message.as_bytes())
        };
        self.status_message.push(msg);
        self.resource.push(resource);
        self.scope.push(scope);
        self.attributes.push(&r.attributes);
        self.events.push(&r.events);
        self.links.push(&r.links);
        self.extra.push(&r.extra);
    }

    /// Reserves room for `n` more rows in every per-row column.
    pub fn reserve_rows(&mut self, n: usize) {
        self.trace_id.reserve(n);
        self.span_id.reserve(n);
        self.parent_span_id.reserve(n);
        self.name.reserve(n);
        self.kind.reserve(n);
        self.start.reserve(n);
        self.duration.reserve(n);
        self.status_code.reserve(n);
        self.status_message.reserve(n);
        self.resource.reserve(n);
        self.scope.reserve(n);
        self.prev.reserve(n);
        for c in [&mut self.attributes, &mut self.events, &mut self.links, &mut self.extra] {
            c.ids.reserve(n);
        }
    }

    /// Records the last row of every open trace in the trace map (see `chain`); the map is
    /// complete after this.
    #[inline]
    pub fn end_run(&mut self) {
        for (t, r) in &mut self.open {
            if *r != NONE {
                self.traces.insert(*t, *r);
                *r = NONE;
            }
        }
    }

    /// Appends every span of a validated `ExportTraceServiceRequest`. The trace index is
    /// complete when this returns.
    pub fn push_request(&mut self, request: &[u8]) -> Result<usize, weft_otlp::wire::WireError> {
        let mut n = 0;
        // Intern each header once per resource/scope, not once per span.
        let mut last: Option<(weft_otlp::request::HeaderIds, u32, u32)> = None;
        weft_otlp::request::for_each_span(request, |ids, res, scope, span| {
            let (r, s) = match last {
                Some((l, r, s)) if l == ids => (r, s),
                Some((l, r, _)) if l.resource == ids.resource => (r, self.headers.intern(scope)),
                _ => (self.intern_resource(res), self.headers.intern(scope)),
            };
            last = Some((ids, r, s));
            self.push(r, s, span);
            n += 1;
        })
        .inspect_err(|_| self.end_run())?;
        self.end_run();
        Ok(n)
    }

    /// Rows of a trace, oldest first.
    pub fn rows_of(&self, trace_id: &[u8; 16]) -> Vec<u32> {
        let mut rows: Vec<u32> = self
            .trace_rows(self.traces.get(trace_id).copied().unwrap_or(NONE))
            .collect();
        rows.reverse();
        rows
    }

    /// The rows of a trace whose last row is `last`, newest first (follows `prev`; none for
    /// [`NONE`]).
    pub fn trace_rows(&self, last: u32) -> Chain<'_> {
        Chain { cols: self, next: last }
    }

    /// Row `i` read in place, as [`SpanFields`](crate::row::SpanFields): what a query's
    /// prefilter tests before any row is copied out.
    pub fn at(&self, i: u32) -> ColumnRow<'_> {
        ColumnRow {
            cols: self,
            i: i as usize,
        }
    }

    /// What [`Self::row`] would copy out for row `i`: its fixed fields (64 bytes) and its
    /// variable-length values, for scan statistics.
    pub fn row_bytes(&self, i: u32) -> u64 {
        let i = i as usize;
        (64 + self.strings.get(self.name[i]).len()
            + self.strings.get(self.status_message[i]).len()
            + self.headers.get(self.resource[i]).len()
            + self.headers.get(self.scope[i]).len()
            + self.attributes.get(i).len()
            + self.events.get(i).len()
            + self.links.get(i).len()
            + self.extra.get(i).len()) as u64
    }

    /// Copies rows out, appending them to `out` in the order given. Spans of one trace mostly
    /// share their resource and scope, so each distinct header is copied once and shared, and
    /// frozen columns hand out slices instead of copies (with a copy of each header per span,
    /// six concurrent JSON fetches of a 200,000-span trace in the head peaked at 674 MiB;
    /// with this, 566 MiB, before large head reads took a permit).
    pub fn copy_rows(&self, rows: impl IntoIterator<Item = u32>, out: &mut Vec<SpanRow>) {
        let mut headers: FastMap<u32, Bytes> = FastMap::with_hasher(FastBuild::default());
        for i in rows {
            out.push(self.copy_row(i, &mut |id| {
                headers
                    .entry(id)
                    .or_insert_with(|| Bytes::copy_from_slice(self.headers.get(id)))
                    .clone()
            }));
        }
    }

    /// Copies one row out.
    pub fn row(&self, i: u32) -> SpanRow {
        self.copy_row(i, &mut |id| Bytes::copy_from_slice(self.headers.get(id)))
    }

    /// Row `i`, with its resource and scope headers from `header`.
    fn copy_row(&self, i: u32, header: &mut impl FnMut(u32) -> Bytes) -> SpanRow {
        let i = i as usize;
        SpanRow {
            trace_id: self.trace_id[i],
            span_id: self.span_id[i],
            parent_span_id: self.parent_span_id[i],
            name: String::from_utf8_lossy(self.strings.get(self.name[i])).into_owned(),
            kind: self.kind[i],
            start_unix_nano: self.start[i],
            duration_nano: self.duration[i],
            status_code: self.status_code[i],
            status_message: String::from_utf8_lossy(self.strings.get(self.status_message[i])).into_owned(),
            resource: header(self.resource[i]),
            scope: header(self.scope[i]),
            attributes: self.attributes.get_shared(i),
            events: self.events.get_shared(i),
            links: self.links.get_shared(i),
            extra: self.extra.get_shared(i),
        }
    }

    /// Row order by trace ID, then start time, then span ID; of spans with the same trace ID,
    /// span ID and start time (client retries) only the first is listed. Queries over the
    /// head read it in this order.
    pub fn sorted_order(&self) -> Vec<u32> {
        // Each trace's ID with its last row, sorted by value: sorting references would read
        // the map at random for every comparison, and each trace would need a lookup after.
        let mut ids: Vec<([u8; 16], u32)> = self.traces.iter().map(|(id, &r)| (*id, r)).collect();
        ids.sort_unstable_by_key(|a| a.0);
        let mut order = Vec::with_capacity(self.len());
        for (_, last) in ids {
            self.push_trace(last, &mut order);
        }
        order
    }

    /// Row order and row groups of a block whose row groups are *time slices* (format 3): the
    /// traces ordered by their start (their earliest span here), then ID, are cut into slices
    /// of at least `row_group_rows` rows (under twice that); a slice is one row group, its
    /// traces sorted by ID. A trace of more than `row_group_rows` rows is a slice of its own,
    /// cut into row groups of `row_group_rows`. Each trace's rows are as in
    /// [`Self::sorted_order`], which lists the same rows.
    ///
    /// So every row group holds whole traces (bar the largest) sorted by ID, and the newest
    /// traces are in one row group, not spread over all of them: a search for the newest
    /// matches reads that row group first and can stop there.
    pub fn time_sliced_order(&self, row_group_rows: usize) -> (Vec<u32>, Vec<std::ops::Range<usize>>) {
        struct Trace {
            start: u64,
            id: [u8; 16],
            from: u32,
            len: u32,
        }
        let per_group = row_group_rows.max(1);
        // Every trace's rows, in one buffer: the traces are then ordered by reference to it.
        let mut rows = Vec::with_capacity(self.len());
        let mut traces = Vec::with_capacity(self.traces.len());
        for (id, &last) in &self.traces {
            let from = rows.len();
            self.push_trace(last, &mut rows);
            traces.push(Trace {
                start: self.start[rows[from] as usize],
                id: *id,
                from: from as u32,
                len: (rows.len() - from) as u32,
            });
        }
        traces.sort_unstable_by_key(|t| (t.start, t.id));
        let mut order = Vec::with_capacity(rows.len());
        let mut groups = Vec::with_capacity(rows.len() / per_group + 1);
        let mut i = 0;
        while i < traces.len() {
            let len = traces[i].len as usize;
            if len > per_group {
                let from = traces[i].from as usize;
                for chunk in rows[from..from + len].chunks(per_group) {
                    let s = order.len();
                    order.extend_from_slice(chunk);
                    groups.push(s..order.len());
                }
                i += 1;
                continue;
            }
            let (mut j, mut n) = (i, 0);
            while j < traces.len() && n < per_group && traces[j].len as usize <= per_group {
                n += traces[j].len as usize;
                j += 1;
            }
            let slice = &mut traces[i..j];
            slice.sort_unstable_by_key(|t| t.id);
            let s = order.len();
            for t in slice.iter() {
                order.extend_from_slice(&rows[t.from as usize..(t.from + t.len) as usize]);
            }
            groups.push(s..order.len());
            i = j;
        }
        (order, groups)
    }

    /// Appends the rows of the trace whose last row is `last` to `order`, by start time, then
    /// span ID, each client retry (same start and span ID) left out.
    fn push_trace(&self, last: u32, order: &mut Vec<u32>) {
        let from = order.len();
        let mut r = last;
        while r != NONE {
            order.push(r);
            r = self.prev[r as usize];
        }
        order[from..].sort_unstable_by_key(|&r| (self.start[r as usize], self.span_id[r as usize]));
        // A client retry stores a span twice: same ID and start, now adjacent. Keep one.
        let mut keep = from + 1;
        for i in from + 1..order.len() {
            let (a, b) = (order[keep - 1] as usize, order[i] as usize);
            if (self.start[a], self.span_id[a]) != (self.start[b], self.span_id[b]) {
                order[keep] = order[i];
                keep += 1;
            }
        }
        order.truncate(keep.min(order.len()));
    }
}

/// Finds `service.name` in an encoded resource header (`ResourceSpans` fields other than
/// `scope_spans`).
pub fn service_name(header: &[u8]) -> Option<String> {
    use weft_otlp::request::fields::*;
    let mut r = Reader::new(header);
    while let Ok(Some(f)) = r.next() {
        if f.number != RS_RESOURCE {
            continue;
        }
        let res = f.value.bytes(f.number).ok()?;
        let mut rr = Reader::new(res);
        while let Ok(Some(a)) = rr.next() {
            if a.number != RESOURCE_ATTRIBUTES {
                continue;
            }
            let kv = a.value.bytes(a.number).ok()?;
            let mut key = None;
            let mut val = None;
            let mut kr = Reader::new(kv);
            while let Ok(Some(k)) = kr.next() {
                match k.number {
                    KV_KEY => key = k.value.bytes(k.number).ok(),
                    KV_VALUE => val = k.value.bytes(k.number).ok(),
                    _ => {}
                }
            }
            if key == Some(b"service.name".as_slice())
                && let Some(v) = val
            {
                let mut vr = Reader::new(v);
                while let Ok(Some(x)) = vr.next() {
                    if x.number == ANY_STRING {
                        return x
                            .value
                            .bytes(x.number)
                            .ok()
                            .map(|s| String::from_utf8_lossy(s).into_owned());
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::SpanColumns;
    use crate::row::SpanRow;

    proptest! {
        /// Equal values get equal ids, distinct values distinct ids, ids count up from 1 in
        /// first-seen order, and every id reads back its value; the empty value is always 0.
        #[test]
        fn interner_ids_read_back(values in proptest::collection::vec(
            proptest::collection::vec(0u8..4, 0..6), 0..200)) {
            let mut interner = super::Interner::default();
            let mut seen: Vec<Vec<u8>> = vec![Vec::new()];
            for v in &values {
                let id = interner.intern(v);
                let want = match seen.iter().position(|s| s == v) {
                    Some(i) => i,
                    None => {
                        seen.push(v.clone());
                        seen.len() - 1
                    }
                };
                prop_assert_eq!(id as usize, want);
                prop_assert_eq!(interner.get(id), v.as_slice());
            }
            prop_assert_eq!(interner.len(), seen.len());
            prop_assert_eq!(interner.is_empty(), seen.len() == 1);
            for (id, v) in seen.iter().enumerate() {
                prop_assert_eq!(interner.get(id as u32), v.as_slice());
            }
        }
    }

    /// Each row chains to the last row of its trace, and after `end_run` the map holds each
    /// trace's last row, however the traces alternate: in runs, one span at a time, among more
    /// traces than stay open, and across requests.
    #[test]
    fn trace_chains_survive_alternating_traces() {
        let mut state = 0x9e37_79b9_u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        let mut cols = SpanColumns::default();
        let mut last: std::collections::HashMap<[u8; 16], u32> = Default::default();
        let mut want_prev = Vec::new();
        for request in 0..40u64 {
            // Requests alternate among 3, 12, 40 and 100 traces in flight, each trace's spans
            // in runs of 1 to 4.
            let traces = [3, 12, 40, 100][(request % 4) as usize];
            let mut n = 0;
            while n < 300 {
                let mut tid = [0u8; 16];
                tid[..8].copy_from_slice(&next(traces).to_le_bytes());
                tid[8] = (request / 8) as u8; // traces recur in later requests
                for _ in 0..=next(4) {
                    let row = cols.trace_id.len() as u32;
                    want_prev.push(last.insert(tid, row).unwrap_or(super::NONE));
                    cols.chain(tid);
                    n += 1;
                }
            }
            cols.end_run();
            assert_eq!(cols.prev, want_prev, "request {request}");
            assert_eq!(cols.traces.len(), last.len());
            for (t, r) in &last {
                assert_eq!(cols.traces.get(t), Some(r), "request {request}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Rows by trace ID (as bytes), then start, then span ID, with each repeated
        /// (trace, start, span) listed once: the order a plain sort of the rows gives.
        #[test]
        fn sorted_order_is_the_order_of_a_plain_sort(
            rows in proptest::collection::vec((0usize..12, 0u64..4, 0u8..4), 0..200),
            traces in proptest::collection::vec(any::<[u8; 16]>(), 12),
        ) {
            let mut cols = SpanColumns::default();
            let mut keys = Vec::new();
            for (t, start, span) in rows {
                let row = SpanRow {
                    trace_id: traces[t],
                    span_id: [span; 8],
                    start_unix_nano: start,
                    ..SpanRow::default()
                };
                cols.push_row(&row);
                keys.push((traces[t], start, [span; 8]));
            }
            cols.end_run();
            keys.sort();
            keys.dedup();
            let got: Vec<_> = cols
                .sorted_order()
                .iter()
                .map(|&r| {
                    let r = r as usize;
                    (cols.trace_id[r], cols.start[r], cols.span_id[r])
                })
                .collect();
            prop_assert_eq!(got, keys);
        }

        /// Time slices list the rows `sorted_order` lists; each row group holds whole traces
        /// sorted by ID (a trace longer than a row group: only its own rows), under twice
        /// `per_group` rows; and no trace of a later row group starts before one of an
        /// earlier row group.
        #[test]
        fn time_slices_hold_whole_traces_newest_last(
            rows in proptest::collection::vec((0usize..12, 0u64..40, 0u8..4), 0..300),
            traces in proptest::collection::vec(any::<[u8; 16]>(), 12),
            per_group in 1usize..40,
        ) {
            let mut cols = SpanColumns::default();
            for (t, start, span) in rows {
                let start = start + t as u64 * 3;
                cols.push_row(&SpanRow {
                    trace_id: traces[t],
                    span_id: [span; 8],
                    start_unix_nano: start,
                    ..SpanRow::default()
                });
            }
            cols.end_run();
            let (order, groups) = cols.time_sliced_order(per_group);
            let mut sorted = order.clone();
            let mut want = cols.sorted_order();
            sorted.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(sorted, want);
            prop_assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), order.len());
            let trace_start = |id: &[u8; 16]| {
                order.iter().filter(|&&r| cols.trace_id[r as usize] == *id).map(|&r| cols.start[r as usize]).min()
            };
            let mut latest = 0;
            for (k, g) in groups.iter().enumerate() {
                prop_assert!(k == 0 || groups[k - 1].end == g.start);
                let ids: Vec<[u8; 16]> = order[g.clone()].iter().map(|&r| cols.trace_id[r as usize]).collect();
                prop_assert!(ids.windows(2).all(|w| w[0] <= w[1]), "sorted by ID within a row group");
                let whole = ids.iter().all(|id| order[g.clone()].iter().filter(|&&r| cols.trace_id[r as usize] == *id).count()
                    == order.iter().filter(|&&r| cols.trace_id[r as usize] == *id).count());
                if whole {
                    prop_assert!(g.len() < 2 * per_group);
                } else {
                    prop_assert!(ids.iter().all(|id| *id == ids[0]) && g.len() <= per_group, "only a long trace is cut");
                }
                let starts: Vec<u64> = ids.iter().filter_map(trace_start).collect();
                let (lo, hi) = (*starts.iter().min().unwrap(), *starts.iter().max().unwrap());
                prop_assert!(lo >= latest, "row group {} starts at {} before {}", k, lo, latest);
                latest = hi;
            }
        }
    }
}
