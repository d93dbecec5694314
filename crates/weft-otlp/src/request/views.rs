//! Span views: a validated request's spans read as slices of it, with their resource and scope
//! headers, for the block builder.

use super::fields::*;
use crate::wire::{Reader, WireError};

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
/// [`validate_request`](super::validate_request).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpanView<'a> {
    pub raw: &'a [u8],
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub parent_span_id: &'a [u8],
    /// UTF-8, checked by [`validate_request`](super::validate_request); kept as bytes so the
    /// builder does not check again.
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
    /// Parses a span already validated by [`validate_request`](super::validate_request).
    ///
    /// This is the head builder's only walk over a span, so it is written out by hand instead
    /// of going through [`Reader`]: building a `Field` per field and matching on it twice made
    /// this walk about half of the head build (`weft loadgen --stages`: the walk 246 ns of the
    /// head build's 415–500 ns per span, 2026-11-23, `git show 9582684:BENCHMARKS.md`). Every
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
            // before: 8 % of the stages on realistic spans
            // (docs/benchmarks/all-in-cost-and-compaction.md, "The head builder's walk: one pass
            // per scope").
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::common::{AnyValue, KeyValue, any_value::Value as V};
    use crate::request::{RequestSummary, validate_request};
    use proptest::prelude::*;
    use prost::Message;

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

    proptest! {
        /// The hand-written span walk never panics, whatever the bytes.
        #[test]
        fn span_parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = SpanView::parse(&buf);
        }
    }
}
