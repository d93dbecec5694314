//! Zipkin v1 thrift: a `list<Span>` in Thrift's binary protocol (`zipkinCore.thrift`).

use std::borrow::Cow;

use super::Endpoint;
use super::v1::{V1Annotation, V1BinaryAnnotation, V1Span};
use crate::TranslateError;
use crate::thrift::{Protocol, Reader, Type};

/// `AnnotationType` values of `BinaryAnnotation.annotation_type`.
const BOOL: i32 = 0;
const STRING: i32 = 6;

/// Decodes a binary-protocol `list<Span>`.
pub fn decode(body: &[u8]) -> Result<Vec<V1Span<'_>>, TranslateError> {
    let mut r = Reader::new(body, Protocol::Binary);
    let (ty, n) = r.list_begin()?;
    if ty != Type::Struct {
        return Err(TranslateError::new(format!(
            "Zipkin thrift: expected a list of Span structs, got a list of {ty:?}"
        )));
    }
    let mut out = Vec::with_capacity(n.min(4096));
    for i in 0..n {
        out.push(span(&mut r).map_err(|e| TranslateError::new(format!("Zipkin thrift span {i}: {e}")))?);
    }
    if r.remaining() != 0 {
        return Err(TranslateError::new(format!(
            "Zipkin thrift: {} bytes after the list of spans",
            r.remaining()
        )));
    }
    Ok(out)
}

fn expect(ty: Type, want: Type, what: &str) -> Result<(), TranslateError> {
    if ty == want {
        Ok(())
    } else {
        Err(TranslateError::new(format!(
            "{what} has type {ty:?}, expected {want:?}"
        )))
    }
}

pub(crate) fn span<'a>(r: &mut Reader<'a>) -> Result<V1Span<'a>, TranslateError> {
    let mut s = V1Span::default();
    let (mut trace_low, mut trace_high, mut id, mut parent) = (0i64, 0i64, 0i64, 0i64);
    r.struct_begin()?;
    while let Some((ty, fid)) = r.field()? {
        match fid {
            1 => {
                expect(ty, Type::I64, "trace_id")?;
                trace_low = r.i64()?;
            }
            3 => {
                expect(ty, Type::Binary, "name")?;
                s.name = Some(Cow::Borrowed(r.string()?)).filter(|n| !n.is_empty());
            }
            4 => {
                expect(ty, Type::I64, "id")?;
                id = r.i64()?;
            }
            5 => {
                expect(ty, Type::I64, "parent_id")?;
                parent = r.i64()?;
            }
            6 => {
                expect(ty, Type::List, "annotations")?;
                let (et, n) = r.list_begin()?;
                expect(et, Type::Struct, "an annotation")?;
                for _ in 0..n {
                    s.annotations.push(annotation(r)?);
                }
                r.list_end();
            }
            8 => {
                expect(ty, Type::List, "binary_annotations")?;
                let (et, n) = r.list_begin()?;
                expect(et, Type::Struct, "a binary annotation")?;
                for _ in 0..n {
                    if let Some(b) = binary_annotation(r)? {
                        s.binary_annotations.push(b);
                    }
                }
                r.list_end();
            }
            9 => {
                expect(ty, Type::Bool, "debug")?;
                s.debug = r.bool()?;
            }
            10 => {
                expect(ty, Type::I64, "timestamp")?;
                s.timestamp_us = r.i64()?.max(0) as u64;
            }
            11 => {
                expect(ty, Type::I64, "duration")?;
                s.duration_us = r.i64()?.max(0) as u64;
            }
            12 => {
                expect(ty, Type::I64, "trace_id_high")?;
                trace_high = r.i64()?;
            }
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    if trace_low == 0 && trace_high == 0 {
        return Err(TranslateError::new("trace_id is missing or zero"));
    }
    if id == 0 {
        return Err(TranslateError::new("id is missing or zero"));
    }
    s.trace_id[..8].copy_from_slice(&trace_high.to_be_bytes());
    s.trace_id[8..].copy_from_slice(&trace_low.to_be_bytes());
    s.id = id.to_be_bytes();
    s.parent_id = (parent != 0).then(|| parent.to_be_bytes());
    Ok(s)
}

fn endpoint<'a>(r: &mut Reader<'a>) -> Result<Option<Endpoint<'a>>, TranslateError> {
    let mut e = Endpoint::default();
    r.struct_begin()?;
    while let Some((ty, fid)) = r.field()? {
        match (fid, ty) {
            (1, Type::I32) => {
                let v = r.i32()? as u32;
                e.ipv4 = (v != 0).then(|| std::net::Ipv4Addr::from(v));
            }
            (2, Type::I16) => e.port = r.i16()? as u16,
            (3, Type::Binary) => e.service_name = Some(Cow::Borrowed(r.string()?)).filter(|s| !s.is_empty()),
            (4, Type::Binary) => {
                let b = r.binary()?;
                if let Ok(a) = <[u8; 16]>::try_from(b) {
                    e.ipv6 = Some(std::net::Ipv6Addr::from(a));
                }
            }
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    Ok((!e.is_empty()).then_some(e))
}

fn annotation<'a>(r: &mut Reader<'a>) -> Result<V1Annotation<'a>, TranslateError> {
    let mut a = V1Annotation {
        timestamp_us: 0,
        value: Cow::Borrowed(""),
        endpoint: None,
    };
    r.struct_begin()?;
    while let Some((ty, fid)) = r.field()? {
        match (fid, ty) {
            (1, Type::I64) => a.timestamp_us = r.i64()?.max(0) as u64,
            (2, Type::Binary) => a.value = Cow::Borrowed(r.string()?),
            (3, Type::Struct) => a.endpoint = endpoint(r)?,
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    Ok(a)
}

/// A binary annotation: strings become tags, `true` bools on `ca`/`sa`/`ma` addresses; other
/// types (bytes, numbers) are dropped, as Zipkin drops them.
fn binary_annotation<'a>(r: &mut Reader<'a>) -> Result<Option<V1BinaryAnnotation<'a>>, TranslateError> {
    let (mut key, mut value, mut ty_code, mut ep) = ("", &[][..], -1, None);
    r.struct_begin()?;
    while let Some((ty, fid)) = r.field()? {
        match (fid, ty) {
            (1, Type::Binary) => key = r.string()?,
            (2, Type::Binary) => value = r.binary()?,
            (3, Type::I32) => ty_code = r.i32()?,
            (4, Type::Struct) => ep = endpoint(r)?,
            _ => r.skip(ty)?,
        }
    }
    r.struct_end();
    let mut b = V1BinaryAnnotation {
        key: Cow::Borrowed(key),
        string_value: None,
        bool_value: None,
        endpoint: ep,
    };
    match ty_code {
        STRING => match std::str::from_utf8(value) {
            Ok(s) => b.string_value = Some(Cow::Borrowed(s)),
            Err(_) => return Err(TranslateError::new(format!("binary annotation {key:?} is not UTF-8"))),
        },
        BOOL if value.len() == 1 => b.bool_value = Some(value[0] == 1),
        _ => return Ok(None),
    }
    Ok(Some(b))
}
