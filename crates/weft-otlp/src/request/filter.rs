//! Filtering and splitting: a validated request re-encoded with some of its spans, or split
//! into several requests (without copying, for the distributor).

use super::fields::*;
use crate::wire::{Reader, WireError};

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
    use crate::pb::common::KeyValue;
    use crate::request::{RequestSummary, summarize_converted, validate_request};
    use proptest::prelude::*;
    use prost::Message;

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
}
