//! Zero-copy validation and reading of `ExportTraceServiceRequest` bytes.
//!
//! [`validate_request`] is the receiver's only look at a request: it validates the structure (every
//! nested message well formed, IDs of the right length, strings valid UTF-8) and returns what
//! routing and limits need (span count and the size of each trace's run of spans). It allocates
//! nothing per span. The bytes then move to the WAL unchanged.
//!
//! [`for_each_span`] is used once more, when a block is built, to read each span's fields as
//! sub-slices of the request.

use crate::wire::{Field, Reader, WireError};
use thiserror::Error;

/// Field numbers from the vendored protos (`proto/`), checked against the generated code by a
/// unit test.
pub mod fields {
    pub const REQ_RESOURCE_SPANS: u32 = 1;
    pub const RS_RESOURCE: u32 = 1;
    pub const RS_SCOPE_SPANS: u32 = 2;
    pub const RS_SCHEMA_URL: u32 = 3;
    pub const SS_SCOPE: u32 = 1;
    pub const SS_SPANS: u32 = 2;
    pub const SS_SCHEMA_URL: u32 = 3;
    pub const SPAN_TRACE_ID: u32 = 1;
    pub const SPAN_SPAN_ID: u32 = 2;
    pub const SPAN_TRACE_STATE: u32 = 3;
    pub const SPAN_PARENT_SPAN_ID: u32 = 4;
    pub const SPAN_NAME: u32 = 5;
    pub const SPAN_KIND: u32 = 6;
    pub const SPAN_START: u32 = 7;
    pub const SPAN_END: u32 = 8;
    pub const SPAN_ATTRIBUTES: u32 = 9;
    pub const SPAN_DROPPED_ATTRIBUTES: u32 = 10;
    pub const SPAN_EVENTS: u32 = 11;
    pub const SPAN_DROPPED_EVENTS: u32 = 12;
    pub const SPAN_LINKS: u32 = 13;
    pub const SPAN_DROPPED_LINKS: u32 = 14;
    pub const SPAN_STATUS: u32 = 15;
    pub const SPAN_FLAGS: u32 = 16;
    pub const STATUS_MESSAGE: u32 = 2;
    pub const STATUS_CODE: u32 = 3;
    pub const RESOURCE_ATTRIBUTES: u32 = 1;
    pub const KV_KEY: u32 = 1;
    pub const KV_VALUE: u32 = 2;
    pub const ANY_STRING: u32 = 1;
}
use fields::*;

/// Why a request was rejected. The message names the span and the problem.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScanError {
    #[error("invalid protobuf at {path}: {source}")]
    Wire { path: String, source: WireError },
    #[error("invalid span at {path}: {problem}")]
    Invalid { path: String, problem: String },
    #[error("attribute nesting deeper than {MAX_DEPTH} at {path}")]
    TooDeep { path: String },
}

/// AnyValue nesting deeper than this is refused, so recursion is bounded.
pub const MAX_DEPTH: u32 = 16;

/// A run of consecutive spans of one trace within a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRun {
    pub trace_id: [u8; 16],
    pub spans: u32,
    /// Encoded size of those spans.
    pub bytes: u32,
}

/// What the receiver learns from one request.
#[derive(Debug, Default, Clone)]
pub struct RequestSummary {
    pub spans: u32,
    /// Runs of consecutive spans sharing a trace ID, in request order.
    pub runs: Vec<TraceRun>,
}

impl RequestSummary {
    pub fn clear(&mut self) {
        self.spans = 0;
        self.runs.clear();
    }

    /// Counts the next span of the request: its trace ID and its encoded size (tag included).
    fn add_span(&mut self, trace_id: [u8; 16], bytes: u32) {
        self.spans += 1;
        match self.runs.last_mut() {
            Some(run) if run.trace_id == trace_id => {
                run.spans += 1;
                run.bytes += bytes;
            }
            _ => self.runs.push(TraceRun {
                trace_id,
                spans: 1,
                bytes,
            }),
        }
    }
}

#[derive(Clone, Copy)]
struct Path {
    rs: usize,
    ss: usize,
    span: usize,
}

impl Path {
    fn render(&self, level: u8) -> String {
        match level {
            0 => format!("resource_spans[{}]", self.rs),
            1 => format!("resource_spans[{}].scope_spans[{}]", self.rs, self.ss),
            _ => format!(
                "resource_spans[{}].scope_spans[{}].spans[{}]",
                self.rs, self.ss, self.span
            ),
        }
    }
}

fn wire(path: Path, level: u8) -> impl Fn(WireError) -> ScanError {
    move |source| ScanError::Wire {
        path: path.render(level),
        source,
    }
}

/// Validates an `ExportTraceServiceRequest` and fills `out` with its routing summary.
pub fn validate_request(buf: &[u8], out: &mut RequestSummary) -> Result<(), ScanError> {
    out.clear();
    let mut path = Path { rs: 0, ss: 0, span: 0 };
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(|source| ScanError::Wire {
        path: "request".into(),
        source,
    })? {
        if f.number != REQ_RESOURCE_SPANS {
            continue;
        }
        let rs = f.value.bytes(f.number).map_err(wire(path, 0))?;
        scan_resource_spans(rs, &mut path, out)?;
        path.rs += 1;
    }
    Ok(())
}

/// Fills `out` as [`validate_request`] does, for a request weft encoded itself: a receiver's
/// conversion of a foreign format (Zipkin, Jaeger, X-Ray). Those are valid by construction
/// (every string comes from a decoded, UTF-8-checked payload, every ID from a checked parse)
/// and their tests and fuzz targets check them with [`validate_request`], so this reads only
/// the nesting and each span's trace ID, which routing and limits need. Validating them again
/// was a tenth of those receivers' CPU (BENCHMARKS.md).
///
/// Debug builds validate as well: a request validation refuses is refused with its error (a
/// conversion's bug, which every test that sends a foreign format would then see), and a
/// summary unlike validation's panics.
pub fn summarize_converted(buf: &[u8], out: &mut RequestSummary) -> Result<(), ScanError> {
    out.clear();
    let bad = |what: &str| ScanError::Invalid {
        path: "request".into(),
        problem: format!("converted request: {what}"),
    };
    let wire = |source| ScanError::Wire {
        path: "request".into(),
        source,
    };
    let mut p = 0;
    while p < buf.len() {
        let (n, wt, rs) = crate::wire::next_field(buf, &mut p).map_err(wire)?;
        if n != REQ_RESOURCE_SPANS || wt != 2 {
            continue;
        }
        let mut q = rs.start;
        while q < rs.end {
            let (n, wt, ss) = crate::wire::next_field(&buf[..rs.end], &mut q).map_err(wire)?;
            if n != RS_SCOPE_SPANS || wt != 2 {
                continue;
            }
            let mut r = ss.start;
            while r < ss.end {
                let start = r;
                let (n, wt, span) = crate::wire::next_field(&buf[..ss.end], &mut r).map_err(wire)?;
                if n != SS_SPANS || wt != 2 {
                    continue;
                }
                let trace_id = converted_trace_id(&buf[span]).ok_or_else(|| bad("a span without a trace ID"))?;
                out.add_span(trace_id, (r - start) as u32);
            }
        }
    }
    #[cfg(debug_assertions)]
    {
        let mut check = RequestSummary::default();
        validate_request(buf, &mut check)?;
        assert_eq!(
            (check.spans, &check.runs),
            (out.spans, &out.runs),
            "a converted request summarized unlike validate_request"
        );
    }
    Ok(())
}

/// A span's trace ID (the first field of a converted span, found wherever it is).
#[inline]
fn converted_trace_id(span: &[u8]) -> Option<[u8; 16]> {
    // The converters write it first: tag 0x0a, length 16.
    if span.len() >= 18 && span[0] == 0x0a && span[1] == 16 {
        return span[2..18].try_into().ok();
    }
    let mut p = 0;
    while p < span.len() {
        let (n, wt, v) = crate::wire::next_field(span, &mut p).ok()?;
        if n == SPAN_TRACE_ID && wt == 2 {
            return span[v].try_into().ok();
        }
    }
    None
}

fn scan_resource_spans(buf: &[u8], path: &mut Path, out: &mut RequestSummary) -> Result<(), ScanError> {
    path.ss = 0;
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(wire(*path, 0))? {
        match f.number {
            RS_RESOURCE => {
                let res = f.value.bytes(f.number).map_err(wire(*path, 0))?;
                validate_resource(res).map_err(|e| e.at(path.render(0) + ".resource"))?;
            }
            RS_SCOPE_SPANS => {
                let ss = f.value.bytes(f.number).map_err(wire(*path, 0))?;
                scan_scope_spans(ss, path, out)?;
                path.ss += 1;
            }
            RS_SCHEMA_URL => {
                let s = f.value.bytes(f.number).map_err(wire(*path, 0))?;
                utf8(s).map_err(|e| e.at(path.render(0) + ".schema_url"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn scan_scope_spans(buf: &[u8], path: &mut Path, out: &mut RequestSummary) -> Result<(), ScanError> {
    path.span = 0;
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(wire(*path, 1))? {
        match f.number {
            SS_SCOPE => {
                let scope = f.value.bytes(f.number).map_err(wire(*path, 1))?;
                validate_scope(scope).map_err(|e| e.at(path.render(1) + ".scope"))?;
            }
            SS_SPANS => {
                let span = f.value.bytes(f.number).map_err(wire(*path, 1))?;
                let trace_id = scan_span(span, *path)?;
                out.add_span(trace_id, (f.end - f.start) as u32);
                path.span += 1;
            }
            SS_SCHEMA_URL => {
                let s = f.value.bytes(f.number).map_err(wire(*path, 1))?;
                utf8(s).map_err(|e| e.at(path.render(1) + ".schema_url"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Validates one span and returns its trace ID.
///
/// Written out by hand like [`SpanView::parse`]: the receiver walks every span once, and the
/// generic [`Reader`] was most of that walk's cost (`weft loadgen --stages`). Every read is
/// bounds-checked and every known field's wire type is checked.
fn scan_span(buf: &[u8], path: Path) -> Result<[u8; 16], ScanError> {
    use crate::wire::{Value, read_varint};
    let invalid = |problem: String| ScanError::Invalid {
        path: path.render(2),
        problem,
    };
    let w = wire(path, 2);
    let mut trace_id: Option<[u8; 16]> = None;
    let mut has_span_id = false;
    let n = buf.len();
    let mut p = 0;
    while p < n {
        let start = p;
        let tag = read_varint(buf, &mut p).map_err(&w)?;
        let number = tag >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(w(WireError::FieldZero(start)));
        }
        let number = number as u32;
        let overrun = |len: u64, p: usize| WireError::LengthOverrun {
            at: start,
            len,
            remaining: n - p,
        };
        let v = match tag & 7 {
            0 => Value::Varint(read_varint(buf, &mut p).map_err(&w)?),
            1 => {
                let b = buf.get(p..p + 8).ok_or_else(|| w(overrun(8, p)))?;
                p += 8;
                Value::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let len = read_varint(buf, &mut p).map_err(&w)?;
                if len > (n - p) as u64 {
                    return Err(w(overrun(len, p)));
                }
                let b = &buf[p..p + len as usize];
                p += len as usize;
                Value::Bytes(b)
            }
            5 => {
                let b = buf.get(p..p + 4).ok_or_else(|| w(overrun(4, p)))?;
                p += 4;
                Value::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            wire_type => {
                return Err(w(WireError::BadWireType {
                    field: number,
                    wire_type: wire_type as u8,
                    at: start,
                }));
            }
        };
        match number {
            SPAN_ATTRIBUTES => {
                validate_key_value(v.bytes(number).map_err(&w)?, 0).map_err(|e| e.at(path.render(2) + ".attributes"))?
            }
            SPAN_TRACE_ID => {
                let b = v.bytes(number).map_err(&w)?;
                let id: [u8; 16] = b
                    .try_into()
                    .map_err(|_| invalid(format!("trace_id must be 16 bytes, got {}", b.len())))?;
                if id == [0; 16] {
                    return Err(invalid("trace_id is all zeros".into()));
                }
                trace_id = Some(id);
            }
            SPAN_SPAN_ID => {
                let b = v.bytes(number).map_err(&w)?;
                if b.len() != 8 {
                    return Err(invalid(format!("span_id must be 8 bytes, got {}", b.len())));
                }
                if b == [0; 8] {
                    return Err(invalid("span_id is all zeros".into()));
                }
                has_span_id = true;
            }
            SPAN_PARENT_SPAN_ID => {
                let b = v.bytes(number).map_err(&w)?;
                if !b.is_empty() && b.len() != 8 {
                    return Err(invalid(format!(
                        "parent_span_id must be empty or 8 bytes, got {}",
                        b.len()
                    )));
                }
            }
            SPAN_TRACE_STATE | SPAN_NAME => {
                let b = v.bytes(number).map_err(&w)?;
                utf8(b).map_err(|e| e.at(path.render(2)))?;
            }
            SPAN_KIND | SPAN_DROPPED_ATTRIBUTES | SPAN_DROPPED_EVENTS | SPAN_DROPPED_LINKS => {
                v.varint(number).map_err(&w)?;
            }
            SPAN_START | SPAN_END => {
                v.fixed64(number).map_err(&w)?;
            }
            SPAN_FLAGS => {
                v.fixed32(number).map_err(&w)?;
            }
            SPAN_EVENTS => {
                validate_event(v.bytes(number).map_err(&w)?).map_err(|e| e.at(path.render(2) + ".events"))?
            }
            SPAN_LINKS => validate_link(v.bytes(number).map_err(&w)?).map_err(|e| e.at(path.render(2) + ".links"))?,
            SPAN_STATUS => {
                validate_status(v.bytes(number).map_err(&w)?).map_err(|e| e.at(path.render(2) + ".status"))?
            }
            _ => {}
        }
    }
    let trace_id = trace_id.ok_or_else(|| invalid("trace_id is missing".into()))?;
    if !has_span_id {
        return Err(invalid("span_id is missing".into()));
    }
    Ok(trace_id)
}

/// A validation failure below span level; the caller adds the path.
#[derive(Debug)]
struct Nested(String);

impl Nested {
    fn at(self, path: String) -> ScanError {
        ScanError::Invalid { path, problem: self.0 }
    }
}

impl From<WireError> for Nested {
    fn from(e: WireError) -> Self {
        Nested(format!("invalid protobuf: {e}"))
    }
}

#[inline]
fn utf8(b: &[u8]) -> Result<(), Nested> {
    // Most OTLP strings are short ASCII; `is_ascii` checks a word at a time without the setup
    // cost of the general decoder (UTF-8 checks were 3.5% of ingest CPU, BENCHMARKS.md).
    if b.is_ascii() {
        return Ok(());
    }
    std::str::from_utf8(b)
        .map(|_| ())
        .map_err(|e| Nested(format!("string is not valid UTF-8 ({e})")))
}

/// Validates every field of a message with `check` and rejects wrong wire types.
fn each_field(buf: &[u8], mut check: impl FnMut(Field<'_>) -> Result<(), Nested>) -> Result<(), Nested> {
    let mut r = Reader::new(buf);
    while let Some(f) = r.next()? {
        check(f)?;
    }
    Ok(())
}

fn validate_key_value(buf: &[u8], depth: u32) -> Result<(), Nested> {
    if key_value_is_simple(buf) {
        return Ok(());
    }
    validate_key_value_general(buf, depth)
}

fn validate_key_value_general(buf: &[u8], depth: u32) -> Result<(), Nested> {
    each_field(buf, |f| match f.number {
        KV_KEY => utf8(f.value.bytes(f.number)?),
        KV_VALUE => validate_any_value(f.value.bytes(f.number)?, depth + 1),
        _ => Ok(()),
    })
}

/// Recognises the encoding nearly every SDK writes for a scalar attribute, and returns true
/// only if `buf` is such a `KeyValue` and valid: `key` (field 1, ASCII, under 128 bytes) then
/// `value` (field 2, under 128 bytes) holding exactly one of `string_value` (ASCII, under 128
/// bytes), `bool_value`, `int_value` or `double_value`. Anything else returns false and is
/// checked by the general path, which also writes the error messages.
///
/// Attributes are most of a span's fields, and this skips the general field walk for them
/// (`validate_key_value` and `Reader::next` were about 12% of ingest CPU, BENCHMARKS.md).
#[inline]
fn key_value_is_simple(b: &[u8]) -> bool {
    let [0x0a, klen, rest @ ..] = b else {
        return false;
    };
    let klen = usize::from(*klen);
    if klen >= 0x80 || rest.len() < klen {
        return false;
    }
    let (key, rest) = rest.split_at(klen);
    let [0x12, vlen, value @ ..] = rest else {
        return false;
    };
    if usize::from(*vlen) != value.len() || *vlen >= 0x80 || !key.is_ascii() {
        return false;
    }
    match value {
        // string_value
        [0x0a, slen, s @ ..] => usize::from(*slen) == s.len() && *slen < 0x80 && s.is_ascii(),
        // bool_value or int_value: exactly one varint filling the rest
        [0x10 | 0x18, v @ ..] => {
            matches!(v.split_last(), Some((last, init)) if *last < 0x80 && init.len() < 10 && init.iter().all(|&x| x >= 0x80))
        }
        // double_value
        [0x21, d @ ..] => d.len() == 8,
        _ => false,
    }
}

fn validate_any_value(buf: &[u8], depth: u32) -> Result<(), Nested> {
    if depth > MAX_DEPTH {
        return Err(Nested(format!("attribute nesting deeper than {MAX_DEPTH}")));
    }
    each_field(buf, |f| match f.number {
        1 => utf8(f.value.bytes(f.number)?),
        2 | 3 => f.value.varint(f.number).map(|_| ()).map_err(Into::into),
        4 => f.value.fixed64(f.number).map(|_| ()).map_err(Into::into),
        5 => each_field(f.value.bytes(f.number)?, |g| match g.number {
            1 => validate_any_value(g.value.bytes(g.number)?, depth + 1),
            _ => Ok(()),
        }),
        6 => each_field(f.value.bytes(f.number)?, |g| match g.number {
            1 => validate_key_value(g.value.bytes(g.number)?, depth + 1),
            _ => Ok(()),
        }),
        7 => f.value.bytes(f.number).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    })
}

fn validate_resource(buf: &[u8]) -> Result<(), Nested> {
    each_field(buf, |f| match f.number {
        1 => validate_key_value(f.value.bytes(f.number)?, 0),
        2 => f.value.varint(f.number).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    })
}

fn validate_scope(buf: &[u8]) -> Result<(), Nested> {
    each_field(buf, |f| match f.number {
        1 | 2 => utf8(f.value.bytes(f.number)?),
        3 => validate_key_value(f.value.bytes(f.number)?, 0),
        4 => f.value.varint(f.number).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    })
}

fn validate_event(buf: &[u8]) -> Result<(), Nested> {
    each_field(buf, |f| match f.number {
        1 => f.value.fixed64(f.number).map(|_| ()).map_err(Into::into),
        2 => utf8(f.value.bytes(f.number)?),
        3 => validate_key_value(f.value.bytes(f.number)?, 0),
        4 => f.value.varint(f.number).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    })
}

fn validate_link(buf: &[u8]) -> Result<(), Nested> {
    each_field(buf, |f| match f.number {
        1 => {
            let b = f.value.bytes(f.number)?;
            if b.len() != 16 {
                return Err(Nested(format!("link trace_id must be 16 bytes, got {}", b.len())));
            }
            Ok(())
        }
        2 => {
            let b = f.value.bytes(f.number)?;
            if b.len() != 8 {
                return Err(Nested(format!("link span_id must be 8 bytes, got {}", b.len())));
            }
            Ok(())
        }
        3 => utf8(f.value.bytes(f.number)?),
        4 => validate_key_value(f.value.bytes(f.number)?, 0),
        5 => f.value.varint(f.number).map(|_| ()).map_err(Into::into),
        6 => f.value.fixed32(f.number).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    })
}

fn validate_status(buf: &[u8]) -> Result<(), Nested> {
    each_field(buf, |f| match f.number {
        STATUS_MESSAGE => utf8(f.value.bytes(f.number)?),
        STATUS_CODE => f.value.varint(f.number).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    })
}

/// The byte ranges of one repeated group of fields inside a span. Encoders write a repeated
/// field contiguously, so the group is usually one slice of the span; when it is not,
/// [`SpanView::gather`] copies the pieces.
#[derive(Debug, Clone, Copy, Default)]
pub struct Group {
    start: usize,
    end: usize,
    split: bool,
}

impl Group {
    #[inline]
    fn add(&mut self, start: usize, end: usize) {
        if self.start == self.end {
            self.start = start;
            self.end = end;
        } else if self.end == start {
            self.end = end;
        } else {
            self.split = true;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// Which group a span field belongs to when a block is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    Attributes,
    Events,
    Links,
    /// Every field without a column of its own: trace_state, flags, dropped counts and unknown
    /// fields, kept verbatim so nothing a client sent is lost.
    Extra,
}

fn group_of(number: u32) -> Option<GroupKind> {
    match number {
        SPAN_TRACE_ID | SPAN_SPAN_ID | SPAN_PARENT_SPAN_ID | SPAN_NAME | SPAN_KIND | SPAN_START | SPAN_END
        | SPAN_STATUS => None,
        SPAN_ATTRIBUTES => Some(GroupKind::Attributes),
        SPAN_EVENTS => Some(GroupKind::Events),
        SPAN_LINKS => Some(GroupKind::Links),
        _ => Some(GroupKind::Extra),
    }
}

/// One span's fields as slices of the request. Valid only for requests that passed
/// [`validate_request`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SpanView<'a> {
    pub raw: &'a [u8],
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub parent_span_id: &'a [u8],
    /// UTF-8, checked by [`validate_request`]; kept as bytes so the builder does not check again.
    pub name: &'a [u8],
    pub kind: i32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub status_code: i32,
    pub status_message: &'a [u8],
    pub attributes: Group,
    pub events: Group,
    pub links: Group,
    pub extra: Group,
}

impl<'a> SpanView<'a> {
    /// Parses a span already validated by [`validate_request`].
    ///
    /// This is the head builder's only walk over a span, so it is written out by hand instead
    /// of going through [`Reader`]: building a `Field` per field and matching on it twice made
    /// this walk about half of the head build (`weft loadgen --stages`, BENCHMARKS.md). Every
    /// read is still bounds-checked; a field of an unexpected wire type (which `validate_request`
    /// refuses) is kept verbatim in `extra` rather than trusted.
    pub fn parse(raw: &'a [u8]) -> Result<Self, WireError> {
        let mut v = SpanView::default();
        v.read(raw)?;
        Ok(v)
    }

    /// [`Self::parse`] into a view that is still `SpanView::default()`, in place: the head
    /// builder parses each span straight into its list, where returning the 216-byte view by
    /// value cost a `memcpy` per span.
    fn read(&mut self, raw: &'a [u8]) -> Result<(), WireError> {
        use crate::wire::read_varint;
        let v = self;
        v.raw = raw;
        let n = raw.len();
        let mut p = 0;
        while p < n {
            let start = p;
            let tag = read_varint(raw, &mut p)?;
            let number = tag >> 3;
            if number == 0 || number > u64::from(u32::MAX >> 3) {
                return Err(WireError::FieldZero(start));
            }
            let number = number as u32;
            match tag & 7 {
                0 => {
                    let x = read_varint(raw, &mut p)?;
                    match number {
                        SPAN_KIND => v.kind = x as i32,
                        _ => v.extra.add(start, p),
                    }
                }
                1 => {
                    let Some(b) = raw.get(p..p + 8) else {
                        return Err(WireError::LengthOverrun {
                            at: start,
                            len: 8,
                            remaining: n - p,
                        });
                    };
                    p += 8;
                    let x = u64::from_le_bytes(b.try_into().expect("8 bytes"));
                    match number {
                        SPAN_START => v.start_unix_nano = x,
                        SPAN_END => v.end_unix_nano = x,
                        _ => v.extra.add(start, p),
                    }
                }
                2 => {
                    let at = p;
                    let len = read_varint(raw, &mut p)?;
                    if len > (n - p) as u64 {
                        return Err(WireError::LengthOverrun {
                            at,
                            len,
                            remaining: n - p,
                        });
                    }
                    let b = &raw[p..p + len as usize];
                    p += len as usize;
                    match number {
                        SPAN_ATTRIBUTES => v.attributes.add(start, p),
                        SPAN_TRACE_ID => v.trace_id = b,
                        SPAN_SPAN_ID => v.span_id = b,
                        SPAN_PARENT_SPAN_ID => v.parent_span_id = b,
                        SPAN_NAME => v.name = b,
                        SPAN_EVENTS => v.events.add(start, p),
                        SPAN_LINKS => v.links.add(start, p),
                        SPAN_STATUS => {
                            let mut s = Reader::new(b);
                            while let Some(g) = s.next()? {
                                match g.number {
                                    STATUS_MESSAGE => v.status_message = g.value.bytes(g.number)?,
                                    STATUS_CODE => v.status_code = g.value.varint(g.number)? as i32,
                                    _ => {}
                                }
                            }
                        }
                        _ => v.extra.add(start, p),
                    }
                }
                5 => {
                    if n - p < 4 {
                        return Err(WireError::LengthOverrun {
                            at: start,
                            len: 4,
                            remaining: n - p,
                        });
                    }
                    p += 4;
                    v.extra.add(start, p);
                }
                wire_type => {
                    return Err(WireError::BadWireType {
                        field: number,
                        wire_type: wire_type as u8,
                        at: start,
                    });
                }
            }
        }
        Ok(())
    }

    /// Returns the encoded fields of `kind` (tags included): a slice of the span when they are
    /// contiguous, otherwise a copy assembled in `scratch`.
    pub fn gather<'s>(&self, kind: GroupKind, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        let g = match kind {
            GroupKind::Attributes => self.attributes,
            GroupKind::Events => self.events,
            GroupKind::Links => self.links,
            GroupKind::Extra => self.extra,
        };
        if !g.split {
            return &self.raw[g.start..g.end];
        }
        scratch.clear();
        let mut r = Reader::new(self.raw);
        while let Ok(Some(f)) = r.next() {
            if group_of(f.number) == Some(kind) {
                scratch.extend_from_slice(&self.raw[f.start..f.end]);
            }
        }
        scratch
    }
}

/// One `ResourceSpans` or `ScopeSpans` header: every field except the nested list, verbatim.
fn header_without(buf: &[u8], skip: u32, out: &mut Vec<u8>) -> Result<(), WireError> {
    out.clear();
    let mut p = 0;
    while p < buf.len() {
        let start = p;
        let (number, _, _) = crate::wire::next_field(buf, &mut p)?;
        if number != skip {
            out.extend_from_slice(&buf[start..p]);
        }
    }
    Ok(())
}

/// Where a span sits in its request: the ordinal of its `ResourceSpans` and of its
/// `ScopeSpans` within the request. Equal ordinals mean identical headers, so callers can
/// intern a header once per scope instead of comparing bytes per span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderIds {
    pub resource: u32,
    pub scope: u32,
}

/// Visits every span of a validated request with its resource header (the `ResourceSpans`
/// fields other than `scope_spans`) and scope header (the `ScopeSpans` fields other than
/// `spans`). Headers are passed as encoded bytes so they can be stored and re-emitted verbatim.
pub fn for_each_span<'a>(
    buf: &'a [u8],
    mut visit: impl FnMut(HeaderIds, &[u8], &[u8], &SpanView<'a>),
) -> Result<(), WireError> {
    let mut ids = HeaderIds { resource: 0, scope: 0 };
    let mut resource = Vec::new();
    let mut scope = Vec::new();
    // The spans of one scope, parsed, until its header is complete.
    let mut views: Vec<SpanView<'a>> = Vec::new();
    let mut r = Reader::new(buf);
    while let Some(f) = r.next()? {
        if f.number != REQ_RESOURCE_SPANS {
            continue;
        }
        let rs = f.value.bytes(f.number)?;
        header_without(rs, RS_SCOPE_SPANS, &mut resource)?;
        let mut rr = Reader::new(rs);
        while let Some(g) = rr.next()? {
            if g.number != RS_SCOPE_SPANS {
                continue;
            }
            let ss = g.value.bytes(g.number)?;
            // One walk over the scope: each span is parsed where the walk meets it, and every
            // other field goes to the scope's header. The spans are visited after the walk,
            // when the header is complete (encoders write `schema_url` after the spans).
            // Walking the scope once for its header and again for its spans met the first
            // cache line of every span cold in the first walk, each miss waiting on the one
            // before: 8 % of the stages on realistic spans (BENCHMARKS.md).
            scope.clear();
            // Room for the scope's spans at about 256 bytes each, so the list seldom grows
            // (moving every parsed view) while the walk fills it.
            views.reserve(ss.len() / 256);
            let mut p = 0;
            while p < ss.len() {
                let start = p;
                let (number, wire_type, value) = crate::wire::next_field(ss, &mut p)?;
                if number != SS_SPANS {
                    scope.extend_from_slice(&ss[start..p]);
                    continue;
                }
                if wire_type != 2 {
                    return Err(WireError::UnexpectedWireType {
                        field: number,
                        expected: 2,
                        found: wire_type,
                    });
                }
                views.push(SpanView::default());
                views.last_mut().expect("just pushed").read(&ss[value])?;
            }
            for v in &views {
                visit(ids, &resource, &scope, v);
            }
            views.clear();
            ids.scope += 1;
        }
        ids.resource += 1;
    }
    Ok(())
}

/// Re-encodes a validated request keeping only the spans for which `keep(index)` is true
/// (indexes count spans in request order). Used only on the refusal path.
pub fn filter_request(buf: &[u8], mut keep: impl FnMut(usize) -> bool) -> Result<Vec<u8>, WireError> {
    Ok(SplitRequest::new(buf, 2, |i| usize::from(!keep(i)))?.to_vec(buf, 0))
}

/// Splits a validated request into `n` requests: span `index` (counting spans in request
/// order) goes to request `part_of(index)`, which must be below `n`. Resource and scope
/// headers and the spans are copied verbatim, so each part holds its spans with their own
/// resource and scope; empty scopes and resources are left out, and a part without spans is
/// empty. The copying form of [`SplitRequest`].
pub fn split_request(buf: &[u8], n: usize, part_of: impl FnMut(usize) -> usize) -> Result<Vec<Vec<u8>>, WireError> {
    let split = SplitRequest::new(buf, n, part_of)?;
    Ok((0..n).map(|p| split.to_vec(buf, p)).collect())
}

/// A validated request split into `n` requests without copying it: each part is a list of
/// pieces, byte ranges of the request (spans, and the fields of resources and scopes) and the
/// new length headers of the resources and scopes the part keeps. The distributor routes a
/// request's traces to Kafka partitions this way: the producer copies the pieces once, into
/// the record batch.
///
/// Span `index` (counting spans in request order) goes to part `part_of(index)`, which must be
/// below `n`. Consecutive spans of one part stay one piece. Lengths are minimal varints.
#[derive(Debug, Default)]
pub struct SplitRequest {
    /// Resource and scope headers (tag and length) of every part.
    heads: Vec<u8>,
    parts: Vec<Vec<Piece>>,
    lens: Vec<usize>,
}

#[derive(Debug, Clone, Copy)]
enum Piece {
    /// A range of the request.
    Request(u32, u32),
    /// A range of `heads`.
    Head(u32, u32),
}

impl SplitRequest {
    pub fn new(buf: &[u8], n: usize, mut part_of: impl FnMut(usize) -> usize) -> Result<SplitRequest, WireError> {
        // Where each part's open resource and scope started (piece index, bytes so far) and
        // how many spans they hold.
        #[derive(Clone, Copy, Default)]
        struct Open {
            rs_piece: usize,
            rs_len: usize,
            rs_kept: usize,
            ss_piece: usize,
            ss_len: usize,
            ss_kept: usize,
        }
        assert!(buf.len() < u32::MAX as usize, "requests are far below 4 GiB");
        let at = |sub: &[u8]| sub.as_ptr() as usize - buf.as_ptr() as usize;
        let mut split = SplitRequest {
            heads: Vec::new(),
            parts: vec![Vec::new(); n],
            lens: vec![0; n],
        };
        let mut open = vec![Open::default(); n];
        let mut index = 0usize;
        let mut r = Reader::new(buf);
        while let Some(f) = r.next()? {
            if f.number != REQ_RESOURCE_SPANS {
                continue;
            }
            let rs = f.value.bytes(f.number)?;
            let rs_at = at(rs);
            for (p, st) in open.iter_mut().enumerate() {
                st.rs_piece = split.parts[p].len();
                st.rs_len = split.lens[p];
                st.rs_kept = 0;
                split.parts[p].push(Piece::Head(0, 0)); // set when the resource closes
            }
            let mut rr = Reader::new(rs);
            while let Some(g) = rr.next()? {
                if g.number != RS_SCOPE_SPANS {
                    for p in 0..n {
                        split.push(p, rs_at + g.start, rs_at + g.end);
                    }
                    continue;
                }
                let ss = g.value.bytes(g.number)?;
                let ss_at = at(ss);
                for (p, st) in open.iter_mut().enumerate() {
                    st.ss_piece = split.parts[p].len();
                    st.ss_len = split.lens[p];
                    st.ss_kept = 0;
                    split.parts[p].push(Piece::Head(0, 0)); // set when the scope closes
                }
                let mut sr = Reader::new(ss);
                while let Some(h) = sr.next()? {
                    if h.number == SS_SPANS {
                        let p = part_of(index);
                        split.push(p, ss_at + h.start, ss_at + h.end);
                        open[p].ss_kept += 1;
                        index += 1;
                    } else {
                        for p in 0..n {
                            split.push(p, ss_at + h.start, ss_at + h.end);
                        }
                    }
                }
                for (p, st) in open.iter_mut().enumerate() {
                    if st.ss_kept == 0 {
                        split.parts[p].truncate(st.ss_piece);
                        split.lens[p] = st.ss_len;
                    } else {
                        split.close(p, st.ss_piece, st.ss_len, RS_SCOPE_SPANS);
                        st.rs_kept += st.ss_kept;
                    }
                }
            }
            for (p, st) in open.iter().enumerate() {
                if st.rs_kept == 0 {
                    split.parts[p].truncate(st.rs_piece);
                    split.lens[p] = st.rs_len;
                } else {
                    split.close(p, st.rs_piece, st.rs_len, REQ_RESOURCE_SPANS);
                }
            }
        }
        Ok(split)
    }

    /// Appends `buf[start..end]` to part `p`, extending its last piece when they touch.
    fn push(&mut self, p: usize, start: usize, end: usize) {
        let (start, end) = (start as u32, end as u32);
        let pieces = &mut self.parts[p];
        match pieces.last_mut() {
            Some(Piece::Request(_, e)) if *e == start => *e = end,
            _ => pieces.push(Piece::Request(start, end)),
        }
        self.lens[p] += (end - start) as usize;
    }

    /// Writes the header of the message opened at piece `piece` when part `p` held `len_then`
    /// bytes: its content is everything added since.
    fn close(&mut self, p: usize, piece: usize, len_then: usize, field: u32) {
        let content = self.lens[p] - len_then;
        let from = self.heads.len();
        crate::wire::put_tag(&mut self.heads, field, 2);
        crate::wire::put_varint(&mut self.heads, content as u64);
        let to = self.heads.len();
        self.parts[p][piece] = Piece::Head(from as u32, to as u32);
        self.lens[p] += to - from;
    }

    /// The number of parts.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// The length of part `p` in bytes; 0 when no span went to it.
    pub fn len(&self, p: usize) -> usize {
        self.lens[p]
    }

    /// Whether part `p` holds no span.
    pub fn is_empty(&self, p: usize) -> bool {
        self.lens[p] == 0
    }

    /// Part `p` copied out: the concatenation of its [`pieces`](SplitRequest::pieces).
    pub fn to_vec(&self, buf: &[u8], p: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len(p));
        for piece in self.pieces(buf, p) {
            out.extend_from_slice(piece);
        }
        out
    }

    /// Part `p` as slices of `buf` (the request this split was made from) and of the split's
    /// headers; their concatenation is the part.
    pub fn pieces<'a>(&'a self, buf: &'a [u8], p: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.parts[p].iter().map(move |piece| match *piece {
            Piece::Request(s, e) => &buf[s as usize..e as usize],
            Piece::Head(s, e) => &self.heads[s as usize..e as usize],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::common::{AnyValue, KeyValue, any_value::Value as V};
    use proptest::prelude::*;
    use prost::Message;

    fn kv(key: &str, v: V) -> Vec<u8> {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
        .encode_to_vec()
    }

    #[test]
    fn simple_key_values_take_the_fast_path() {
        for v in [
            V::StringValue("GET".into()),
            V::StringValue(String::new()),
            V::BoolValue(true),
            V::BoolValue(false),
            V::IntValue(200),
            V::IntValue(-1),
            V::IntValue(i64::MAX),
            V::DoubleValue(0.25),
        ] {
            let b = kv("http.request.method", v.clone());
            assert!(key_value_is_simple(&b), "{v:?} encoded as {b:02x?}");
            assert!(validate_key_value_general(&b, 0).is_ok());
        }
    }

    /// Every span is visited with its own resource and scope headers: every field of its
    /// `ResourceSpans` and `ScopeSpans` but the nested list, verbatim, wherever they lie. Encoders
    /// write `schema_url` after the spans; a hand-built scope also puts a field between two.
    #[test]
    fn spans_are_visited_with_complete_headers() {
        use crate::pb::collector::ExportTraceServiceRequest;
        use crate::pb::common::InstrumentationScope;
        use crate::pb::resource::Resource;
        use crate::pb::trace::{ResourceSpans, ScopeSpans, Span};
        use crate::wire::put_bytes;
        let span = |name: &str| Span {
            trace_id: vec![1; 16].into(),
            span_id: vec![2; 8].into(),
            name: name.into(),
            ..Default::default()
        };
        let scope = |name: &str, url: &str, spans: Vec<Span>| ScopeSpans {
            scope: Some(InstrumentationScope {
                name: name.into(),
                ..Default::default()
            }),
            schema_url: url.into(),
            spans,
        };
        let resource = |key: &str, url: &str, scope_spans: Vec<ScopeSpans>| ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: key.into(),
                    value: None,
                }],
                ..Default::default()
            }),
            schema_url: url.into(),
            scope_spans,
        };
        let req = ExportTraceServiceRequest {
            resource_spans: vec![
                resource(
                    "r0",
                    "https://r0",
                    vec![
                        scope("s0", "https://s0", vec![span("a"), span("b")]),
                        scope("s1", "", vec![span("c")]),
                    ],
                ),
                resource("r1", "", vec![scope("s2", "https://s2", vec![span("d")])]),
            ],
        };
        let mut buf = req.encode_to_vec();
        // A third resource by hand: its scope's schema_url sits between its two spans.
        let mut ss = Vec::new();
        put_bytes(
            &mut ss,
            1,
            &InstrumentationScope {
                name: "s3".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        put_bytes(&mut ss, 2, &span("e").encode_to_vec());
        put_bytes(&mut ss, 3, b"https://s3");
        put_bytes(&mut ss, 2, &span("f").encode_to_vec());
        let mut rs = Vec::new();
        put_bytes(&mut rs, 2, &ss);
        put_bytes(&mut buf, 1, &rs);
        let mut summary = RequestSummary::default();
        validate_request(&buf, &mut summary).unwrap();

        let header = |r: ResourceSpans| {
            ResourceSpans {
                scope_spans: vec![],
                ..r
            }
            .encode_to_vec()
        };
        let scope_header = |s: &ScopeSpans| {
            ScopeSpans {
                spans: vec![],
                ..s.clone()
            }
            .encode_to_vec()
        };
        // Scope ordinals count through the whole request.
        let mut want = Vec::new();
        let mut sc = 0;
        for (r, rs) in req.resource_spans.iter().enumerate() {
            for ss in &rs.scope_spans {
                for sp in &ss.spans {
                    want.push((r, sc, header(rs.clone()), scope_header(ss), sp.name.clone()));
                }
                sc += 1;
            }
        }
        let s3_header = scope_header(&scope("s3", "https://s3", vec![]));
        for name in ["e", "f"] {
            want.push((2, 3, vec![], s3_header.clone(), name.into()));
        }
        let mut got = Vec::new();
        for_each_span(&buf, |ids, res, sc, v| {
            let name = String::from_utf8(v.name.to_vec()).unwrap();
            got.push((
                ids.resource as usize,
                ids.scope as usize,
                res.to_vec(),
                sc.to_vec(),
                name,
            ));
        })
        .unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn span_parse_reads_every_field() {
        use crate::pb::trace::{Span, Status};
        let span = Span {
            trace_id: vec![1; 16].into(),
            span_id: vec![2; 8].into(),
            parent_span_id: vec![3; 8].into(),
            trace_state: "a=b".into(),
            name: "GET /".into(),
            kind: 2,
            start_time_unix_nano: 10,
            end_time_unix_nano: 25,
            attributes: vec![KeyValue {
                key: "k".into(),
                value: Some(AnyValue {
                    value: Some(V::IntValue(7)),
                }),
            }],
            events: vec![Default::default()],
            status: Some(Status {
                message: "boom".into(),
                code: 2,
            }),
            flags: 0x301,
            ..Default::default()
        };
        let raw = span.encode_to_vec();
        let v = SpanView::parse(&raw).unwrap();
        assert_eq!(
            (v.trace_id, v.span_id, v.parent_span_id),
            (&[1; 16][..], &[2; 8][..], &[3; 8][..])
        );
        assert_eq!(
            (v.name, v.kind, v.start_unix_nano, v.end_unix_nano),
            (&b"GET /"[..], 2, 10, 25)
        );
        assert_eq!((v.status_code, v.status_message), (2, &b"boom"[..]));
        let mut scratch = Vec::new();
        let attrs = v.gather(GroupKind::Attributes, &mut scratch).to_vec();
        assert_eq!(Span::decode(&attrs[..]).unwrap().attributes, span.attributes);
        let extra = v.gather(GroupKind::Extra, &mut scratch).to_vec();
        let extra = Span::decode(&extra[..]).unwrap();
        assert_eq!((extra.trace_state.as_str(), extra.flags), ("a=b", 0x301));
        assert!(!v.events.is_empty());
        assert!(v.links.is_empty());
    }

    /// Wraps one encoded span into a request.
    fn request_with_span(span: &[u8]) -> Vec<u8> {
        use crate::wire::{begin_nested, end_nested, put_bytes};
        let mut out = Vec::new();
        let rs = begin_nested(&mut out, REQ_RESOURCE_SPANS);
        let ss = begin_nested(&mut out, RS_SCOPE_SPANS);
        put_bytes(&mut out, SS_SPANS, span);
        end_nested(&mut out, ss);
        end_nested(&mut out, rs);
        out
    }

    #[test]
    fn scan_refuses_bad_spans_with_a_message_naming_the_problem() {
        use crate::pb::trace::Span;
        let good = Span {
            trace_id: vec![1; 16].into(),
            span_id: vec![2; 8].into(),
            name: "ok".into(),
            ..Default::default()
        };
        let mut summary = RequestSummary::default();
        validate_request(&request_with_span(&good.encode_to_vec()), &mut summary).unwrap();
        assert_eq!((summary.spans, summary.runs[0].trace_id), (1, [1; 16]));

        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                Span {
                    trace_id: vec![1; 15].into(),
                    ..good.clone()
                }
                .encode_to_vec(),
                "trace_id must be 16 bytes, got 15",
            ),
            (
                Span {
                    trace_id: vec![0; 16].into(),
                    ..good.clone()
                }
                .encode_to_vec(),
                "trace_id is all zeros",
            ),
            (
                Span {
                    span_id: vec![0; 8].into(),
                    ..good.clone()
                }
                .encode_to_vec(),
                "span_id is all zeros",
            ),
            (
                Span {
                    span_id: Default::default(),
                    ..good.clone()
                }
                .encode_to_vec(),
                "span_id is missing",
            ),
            (
                Span {
                    parent_span_id: vec![3; 4].into(),
                    ..good.clone()
                }
                .encode_to_vec(),
                "parent_span_id must be empty or 8 bytes",
            ),
            // name (field 5) sent as a varint
            (
                [good.encode_to_vec(), vec![0x28, 0x01]].concat(),
                "field 5: expected wire type 2, found 0",
            ),
            // a length that runs past the span
            ([good.encode_to_vec(), vec![0x2a, 0x7f]].concat(), "runs past the end"),
            // invalid UTF-8 in the name
            ([good.encode_to_vec(), vec![0x2a, 0x01, 0xff]].concat(), "UTF-8"),
        ];
        for (span, want) in cases {
            let err = validate_request(&request_with_span(&span), &mut summary)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "want {want:?} in {err:?}");
            assert!(err.contains("resource_spans[0].scope_spans[0].spans[0]"), "{err}");
        }
    }

    /// A converted request's summary: runs of trace IDs with their spans' encoded sizes, as
    /// `validate_request` makes it, also when a span's trace ID is not its first field.
    #[test]
    fn converted_requests_are_summarized_as_validated_ones() {
        let span = |t: u8, first: bool| {
            let s = crate::pb::trace::Span {
                trace_id: vec![t; 16].into(),
                span_id: vec![9; 8].into(),
                name: "n".into(),
                ..Default::default()
            }
            .encode_to_vec();
            if first {
                return s;
            }
            // The span ID's field (10 bytes), then the rest with the trace ID.
            assert_eq!(s[18], 0x12);
            [&s[18..28], &s[..18], &s[28..]].concat()
        };
        // A length-delimited field: its tag, its length as a varint, its bytes.
        let field = |tag: u8, b: &[u8]| {
            let mut out = vec![tag];
            prost::encoding::encode_varint(b.len() as u64, &mut out);
            out.extend_from_slice(b);
            out
        };
        let spans = [span(1, true), span(1, false), span(2, true), span(1, true)];
        let scope: Vec<u8> = spans.iter().flat_map(|sp| field(0x12, sp)).collect();
        let req = field(0x0a, &field(0x12, &scope));
        let (mut a, mut b) = (RequestSummary::default(), RequestSummary::default());
        validate_request(&req, &mut a).unwrap();
        summarize_converted(&req, &mut b).unwrap();
        assert_eq!(b.spans, 4);
        assert_eq!(
            b.runs.iter().map(|r| (r.trace_id[0], r.spans)).collect::<Vec<_>>(),
            vec![(1, 2), (2, 1), (1, 1)]
        );
        assert_eq!((a.spans, a.runs), (b.spans, b.runs));
    }

    /// A debug build validates a converted request too: one that validation refuses (here a
    /// span ID of 4 bytes, which no conversion writes) is refused with validation's error.
    #[cfg(debug_assertions)]
    #[test]
    fn debug_builds_refuse_an_invalid_converted_request() {
        let span = crate::pb::trace::Span {
            trace_id: vec![1; 16].into(),
            span_id: vec![2; 4].into(),
            ..Default::default()
        };
        let err = summarize_converted(
            &request_with_span(&span.encode_to_vec()),
            &mut RequestSummary::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("span_id must be 8 bytes"), "{err}");
    }

    #[test]
    fn other_key_values_fall_back_and_are_still_checked() {
        // Non-ASCII but valid UTF-8: general path, accepted.
        let b = kv("clé", V::StringValue("naïve".into()));
        assert!(!key_value_is_simple(&b));
        assert!(validate_key_value(&b, 0).is_ok());
        // Invalid UTF-8 in the value: refused with a message.
        let mut bad = kv("k", V::StringValue("ab".into()));
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert!(!key_value_is_simple(&bad));
        let err = validate_key_value(&bad, 0).unwrap_err();
        assert!(err.0.contains("UTF-8"), "{}", err.0);
        // Arrays and long strings go through the general path.
        let arr = kv("a", V::ArrayValue(Default::default()));
        assert!(!key_value_is_simple(&arr));
        assert!(validate_key_value(&arr, 0).is_ok());
        let long = kv("k", V::StringValue("x".repeat(300)));
        assert!(!key_value_is_simple(&long));
        assert!(validate_key_value(&long, 0).is_ok());
    }

    proptest! {
        /// Splitting puts every span in exactly the part asked for, under its own resource and
        /// scope, and each part is a valid request; the parts together are the request.
        #[test]
        fn split_routes_every_span_with_its_resource_and_scope(
            shape in proptest::collection::vec(proptest::collection::vec(0usize..5, 0..4), 1..4),
            n in 1usize..5,
            seed in any::<u64>(),
        ) {
            use crate::pb::collector::ExportTraceServiceRequest;
            use crate::pb::common::InstrumentationScope;
            use crate::pb::resource::Resource;
            use crate::pb::trace::{ResourceSpans, ScopeSpans, Span};
            let mut k = 0u8;
            let req = ExportTraceServiceRequest {
                resource_spans: shape.iter().enumerate().map(|(r, scopes)| ResourceSpans {
                    resource: Some(Resource { attributes: vec![KeyValue { key: format!("r{r}"), value: None }], ..Default::default() }),
                    schema_url: format!("rs{r}"),
                    scope_spans: scopes.iter().enumerate().map(|(sc, &spans)| ScopeSpans {
                        scope: Some(InstrumentationScope { name: format!("s{r}.{sc}"), ..Default::default() }),
                        schema_url: String::new(),
                        spans: (0..spans).map(|_| { k += 1; Span {
                            trace_id: vec![k; 16].into(), span_id: vec![k; 8].into(), name: format!("{r}.{sc}"), ..Default::default()
                        } }).collect(),
                    }).collect(),
                }).collect(),
            };
            let buf = req.encode_to_vec();
            let part = |i: usize| ((i as u64).wrapping_mul(seed | 1) >> 7) as usize % n;
            let parts = split_request(&buf, n, part).unwrap();
            prop_assert_eq!(parts.len(), n);
            let split = SplitRequest::new(&buf, n, part).unwrap();
            for (p, bytes) in parts.iter().enumerate() {
                prop_assert_eq!(split.len(p), bytes.len());
                prop_assert_eq!(split.is_empty(p), bytes.is_empty());
            }
            if n == 1 && shape.iter().all(|scopes| !scopes.is_empty() && scopes.iter().all(|&s| s > 0)) {
                // Nothing dropped: the one part is the request, byte for byte, and its spans
                // and fields are whole ranges of it (one piece per resource and scope body).
                prop_assert_eq!(&parts[0], &buf);
                let scopes: usize = shape.iter().map(Vec::len).sum();
                prop_assert!(split.pieces(&buf, 0).count() <= 2 * (shape.len() + scopes));
            }
            let mut seen = 0;
            for (p, bytes) in parts.iter().enumerate() {
                let mut summary = RequestSummary::default();
                prop_assert!(validate_request(bytes, &mut summary).is_ok());
                // A request weft encoded is summarized alike without being validated.
                let mut quick = RequestSummary::default();
                prop_assert!(summarize_converted(bytes, &mut quick).is_ok());
                prop_assert_eq!((quick.spans, &quick.runs), (summary.spans, &summary.runs));
                let got = ExportTraceServiceRequest::decode(&bytes[..]).unwrap();
                for rs in &got.resource_spans {
                    prop_assert!(!rs.scope_spans.is_empty());
                    let r = rs.schema_url.trim_start_matches("rs");
                    prop_assert_eq!(&rs.resource.as_ref().unwrap().attributes[0].key, &format!("r{r}"));
                    for ss in &rs.scope_spans {
                        prop_assert!(!ss.spans.is_empty());
                        for sp in &ss.spans {
                            let i = usize::from(sp.trace_id[0]) - 1;
                            prop_assert_eq!(part(i), p, "span {} in part {}", i, p);
                            prop_assert_eq!(format!("s{}", sp.name), ss.scope.as_ref().unwrap().name.clone());
                            let prefix = format!("{r}.");
                            prop_assert!(sp.name.starts_with(&prefix));
                            seen += 1;
                        }
                    }
                }
            }
            prop_assert_eq!(seen, usize::from(k));
            if n == 1 {
                prop_assert_eq!(ExportTraceServiceRequest::decode(&parts[0][..]).unwrap(), ExportTraceServiceRequest {
                    resource_spans: req.resource_spans.into_iter()
                        .map(|mut rs| { rs.scope_spans.retain(|s| !s.spans.is_empty()); rs })
                        .filter(|rs| !rs.scope_spans.is_empty()).collect(),
                });
            }
        }
    }

    proptest! {
        /// The fast path never accepts what the general validator refuses.
        #[test]
        fn fast_path_never_accepts_invalid_bytes(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            if key_value_is_simple(&buf) {
                prop_assert!(validate_key_value_general(&buf, 0).is_ok(), "{:02x?}", buf);
            }
        }

        /// The hand-written span walk never panics, whatever the bytes.
        #[test]
        fn span_parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = SpanView::parse(&buf);
        }

        /// Corrupting one byte of a simple attribute never makes the fast path accept what the
        /// general validator refuses.
        #[test]
        fn fast_path_agrees_on_mutated_attributes(
            key in "[a-z.]{0,20}",
            val in ".{0,20}",
            at in any::<usize>(),
            byte in any::<u8>(),
        ) {
            let mut b = kv(&key, V::StringValue(val));
            let i = at % b.len();
            b[i] = byte;
            if key_value_is_simple(&b) {
                prop_assert!(validate_key_value_general(&b, 0).is_ok(), "{:02x?}", b);
            }
        }
    }
}
