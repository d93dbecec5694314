//! Zipkin proto3 (`zipkin.proto3.ListOfSpans`), read in place.

use std::borrow::Cow;

use weft_otlp::wire::{Reader, Value};

use super::{Annotation, Endpoint, Kind, Span};
use crate::TranslateError;

fn err(n: usize, msg: impl std::fmt::Display) -> TranslateError {
    TranslateError::new(format!("Zipkin proto3 span {n}: {msg}"))
}

fn text<'a>(b: &'a [u8], n: usize, what: &str) -> Result<&'a str, TranslateError> {
    std::str::from_utf8(b).map_err(|_| err(n, format!("{what} is not UTF-8")))
}

/// Decodes a `ListOfSpans`.
pub fn decode(body: &[u8]) -> Result<Vec<Span<'_>>, TranslateError> {
    let mut out = Vec::new();
    let mut r = Reader::new(body);
    while let Some(f) = r
        .next()
        .map_err(|e| TranslateError::new(format!("malformed Zipkin proto3: {e}")))?
    {
        match (f.number, f.value) {
            (1, Value::Bytes(b)) => {
                let n = out.len();
                out.push(span(b, n)?);
            }
            (1, _) => {
                return Err(TranslateError::new(
                    "malformed Zipkin proto3: field 1 (spans) is not a message",
                ));
            }
            _ => {}
        }
    }
    Ok(out)
}

fn span(buf: &[u8], n: usize) -> Result<Span<'_>, TranslateError> {
    let mut s = Span::default();
    let (mut have_trace, mut have_id) = (false, false);
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(|e| err(n, e))? {
        match (f.number, f.value) {
            (1, Value::Bytes(b)) => {
                match b.len() {
                    8 => s.trace_id[8..].copy_from_slice(b),
                    16 => s.trace_id.copy_from_slice(b),
                    l => return Err(err(n, format!("trace_id has {l} bytes, expected 8 or 16"))),
                }
                have_trace = s.trace_id != [0; 16];
            }
            (2, Value::Bytes(b)) if !b.is_empty() => {
                let p: [u8; 8] = b
                    .try_into()
                    .map_err(|_| err(n, format!("parent_id has {} bytes, expected 8", b.len())))?;
                s.parent_id = (p != [0; 8]).then_some(p);
            }
            (2, Value::Bytes(_)) => {}
            (3, Value::Bytes(b)) => {
                s.id = b
                    .try_into()
                    .map_err(|_| err(n, format!("id has {} bytes, expected 8", b.len())))?;
                have_id = s.id != [0; 8];
            }
            (4, Value::Varint(k)) => {
                s.kind = match k {
                    0 => None,
                    1 => Some(Kind::Client),
                    2 => Some(Kind::Server),
                    3 => Some(Kind::Producer),
                    4 => Some(Kind::Consumer),
                    k => return Err(err(n, format!("kind {k} is unknown"))),
                }
            }
            (5, Value::Bytes(b)) => s.name = Some(Cow::Borrowed(text(b, n, "name")?)).filter(|x| !x.is_empty()),
            (6, Value::Fixed64(t)) => s.timestamp_us = t,
            (7, Value::Varint(d)) => s.duration_us = d,
            (8, Value::Bytes(b)) => s.local = endpoint(b, n)?,
            (9, Value::Bytes(b)) => s.remote = endpoint(b, n)?,
            (10, Value::Bytes(b)) => s.annotations.push(annotation(b, n)?),
            (11, Value::Bytes(b)) => {
                let (k, v) = map_entry(b, n)?;
                s.tags.push((Cow::Borrowed(k), Cow::Borrowed(v)));
            }
            (12, Value::Varint(d)) => s.debug = d != 0,
            (13, Value::Varint(d)) => s.shared = d != 0,
            (1..=13, _) => return Err(err(n, format!("field {} has the wrong wire type", f.number))),
            _ => {}
        }
    }
    if !have_trace {
        return Err(err(n, "trace_id is missing or zero"));
    }
    if !have_id {
        return Err(err(n, "id is missing or zero"));
    }
    Ok(s)
}

fn endpoint(buf: &[u8], n: usize) -> Result<Option<Endpoint<'_>>, TranslateError> {
    let mut e = Endpoint::default();
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(|x| err(n, x))? {
        match (f.number, f.value) {
            (1, Value::Bytes(b)) => {
                e.service_name = Some(Cow::Borrowed(text(b, n, "service_name")?)).filter(|s| !s.is_empty())
            }
            (2, Value::Bytes(b)) if !b.is_empty() => {
                let a: [u8; 4] = b
                    .try_into()
                    .map_err(|_| err(n, format!("ipv4 has {} bytes, expected 4", b.len())))?;
                e.ipv4 = Some(a.into());
            }
            (3, Value::Bytes(b)) if !b.is_empty() => {
                let a: [u8; 16] = b
                    .try_into()
                    .map_err(|_| err(n, format!("ipv6 has {} bytes, expected 16", b.len())))?;
                e.ipv6 = Some(a.into());
            }
            (4, Value::Varint(p)) => e.port = u16::try_from(p).unwrap_or(0),
            _ => {}
        }
    }
    Ok((!e.is_empty()).then_some(e))
}

fn annotation(buf: &[u8], n: usize) -> Result<Annotation<'_>, TranslateError> {
    let mut a = Annotation {
        timestamp_us: 0,
        value: Cow::Borrowed(""),
    };
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(|x| err(n, x))? {
        match (f.number, f.value) {
            (1, Value::Fixed64(t)) => a.timestamp_us = t,
            (2, Value::Bytes(b)) => a.value = Cow::Borrowed(text(b, n, "annotation value")?),
            _ => {}
        }
    }
    Ok(a)
}

fn map_entry(buf: &[u8], n: usize) -> Result<(&str, &str), TranslateError> {
    let (mut k, mut v) = ("", "");
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(|x| err(n, x))? {
        match (f.number, f.value) {
            (1, Value::Bytes(b)) => k = text(b, n, "tag key")?,
            (2, Value::Bytes(b)) => v = text(b, n, "tag value")?,
            _ => {}
        }
    }
    Ok((k, v))
}
