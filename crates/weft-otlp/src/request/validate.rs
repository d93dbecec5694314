//! Validation: the receiver's one walk over a request, checking every nested message and
//! summing up what routing and limits need.

use super::fields::*;
use super::{MAX_DEPTH, RequestSummary, RootRef, ScanError};
use crate::wire::{Field, Reader, WireError};

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
        let at = Base(buf.as_ptr() as usize);
        scan_resource_spans(rs, at, &mut path, out)?;
        path.rs += 1;
    }
    Ok(())
}

/// Fills `out` as [`validate_request`] does, for a request weft encoded itself: a receiver's
/// conversion of a foreign format (Zipkin, Jaeger, X-Ray). Those are valid by construction
/// (every string comes from a decoded, UTF-8-checked payload, every ID from a checked parse)
/// and their tests and fuzz targets check them with [`validate_request`], so this reads only
/// the nesting and each span's trace ID, which routing and limits need. Validating them again
/// was a tenth of those receivers' CPU (docs/benchmarks/receivers-zipkin-jaeger-xray.md,
/// "Conversions summarized, not validated again").
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
                let trace_id =
                    converted_trace_id(&buf[span.clone()]).ok_or_else(|| bad("a span without a trace ID"))?;
                out.add_span(trace_id, (r - start) as u32);
                if converted_is_root(&buf[span.clone()]) {
                    out.roots.push(RootRef {
                        resource_spans: rs.start as u32..rs.end as u32,
                        span: span.start as u32..span.end as u32,
                    });
                }
            }
        }
    }
    #[cfg(debug_assertions)]
    {
        let mut check = RequestSummary::default();
        validate_request(buf, &mut check)?;
        assert_eq!(
            (check.spans, &check.runs, &check.roots),
            (out.spans, &out.runs, &out.roots),
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

/// The request's first byte, to find a sub-slice's offset in it.
#[derive(Clone, Copy)]
struct Base(usize);

impl Base {
    fn range(self, part: &[u8]) -> std::ops::Range<u32> {
        let start = (part.as_ptr() as usize - self.0) as u32;
        start..start + part.len() as u32
    }
}

/// Whether a converted span has no parent: its fields up to `parent_span_id` (the converters
/// write the IDs first, so this reads two or three fields).
#[inline]
fn converted_is_root(span: &[u8]) -> bool {
    let mut p = 0;
    while p < span.len() {
        let Ok((n, _, v)) = crate::wire::next_field(span, &mut p) else {
            return true;
        };
        match n {
            SPAN_PARENT_SPAN_ID => return v.is_empty(),
            SPAN_TRACE_ID | SPAN_SPAN_ID | SPAN_TRACE_STATE => {}
            _ => return true,
        }
    }
    true
}

fn scan_resource_spans(buf: &[u8], at: Base, path: &mut Path, out: &mut RequestSummary) -> Result<(), ScanError> {
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
                scan_scope_spans(ss, buf, at, path, out)?;
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

fn scan_scope_spans(
    buf: &[u8],
    resource_spans: &[u8],
    at: Base,
    path: &mut Path,
    out: &mut RequestSummary,
) -> Result<(), ScanError> {
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
                let (trace_id, root) = scan_span(span, *path)?;
                out.add_span(trace_id, (f.end - f.start) as u32);
                if root {
                    out.roots.push(RootRef {
                        resource_spans: at.range(resource_spans),
                        span: at.range(span),
                    });
                }
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

/// Validates one span and returns its trace ID and whether it is a root (no parent).
///
/// Written out by hand like [`SpanView::parse`](super::SpanView::parse): the receiver walks
/// every span once, and the generic [`Reader`] was most of that walk's cost (`weft loadgen
/// --stages`). Every read is bounds-checked and every known field's wire type is checked.
fn scan_span(buf: &[u8], path: Path) -> Result<([u8; 16], bool), ScanError> {
    use crate::wire::{Value, read_varint};
    let invalid = |problem: String| ScanError::Invalid {
        path: path.render(2),
        problem,
    };
    let w = wire(path, 2);
    let mut trace_id: Option<[u8; 16]> = None;
    let mut has_span_id = false;
    let mut root = true;
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
                root = b.is_empty();
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
    Ok((trace_id, root))
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
    // cost of the general decoder (UTF-8 checks were 3.5% of ingest CPU in the first ingest
    // profile, 2026-11-23: `git show 09bb5d5:BENCHMARKS.md`, "Where the time goes").
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
/// (before it, `Reader::next` was 10% of ingest CPU and attribute validation 5%, in the first
/// ingest profile, 2026-11-23: `git show 09bb5d5:BENCHMARKS.md`, "Where the time goes").
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
        /// The fast path never accepts what the general validator refuses.
        #[test]
        fn fast_path_never_accepts_invalid_bytes(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            if key_value_is_simple(&buf) {
                prop_assert!(validate_key_value_general(&buf, 0).is_ok(), "{:02x?}", buf);
            }
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
