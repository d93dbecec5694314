//! Jaeger's protobuf model (`jaeger.api_v2`, `model.proto`), read in place: the collector's
//! gRPC `CollectorService/PostSpans` (port 14250), which the Jaeger agent, Jaeger clients'
//! gRPC reporters and other collectors send to. The request becomes the same [`Batch`] the
//! thrift readers produce, with nanosecond times and per-span processes, and is written as
//! OTLP by [`super::to_otlp_grouped`].

use std::borrow::Cow;

use weft_otlp::wire::{Reader, Value};

use super::{Batch, Log, Process, Span, SpanRef, Tag, TagValue};
use crate::TranslateError;

/// The gRPC method this decodes the request of.
pub const POST_SPANS_PATH: &str = "/jaeger.api_v2.CollectorService/PostSpans";

fn err(msg: impl std::fmt::Display) -> TranslateError {
    TranslateError::new(format!("Jaeger protobuf: {msg}"))
}

fn fields<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u32, Value<'a>) -> Result<(), TranslateError>,
) -> Result<(), TranslateError> {
    let mut r = Reader::new(buf);
    while let Some(field) = r.next().map_err(err)? {
        f(field.number, field.value)?;
    }
    Ok(())
}

fn text<'a>(b: &'a [u8], what: &str) -> Result<&'a str, TranslateError> {
    std::str::from_utf8(b).map_err(|_| err(format!("{what} is not UTF-8")))
}

fn wrong(what: &str) -> TranslateError {
    err(format!("{what} has the wrong wire type"))
}

/// Decodes a `PostSpansRequest` (its one field is the `Batch`).
pub fn decode_post_spans(body: &[u8]) -> Result<Batch<'_>, TranslateError> {
    let mut batch = None;
    let mut r = Reader::new(body);
    while let Some(f) = r.next().map_err(err)? {
        match (f.number, f.value) {
            (1, Value::Bytes(b)) => batch = Some(decode_batch(b)?),
            (1, _) => return Err(wrong("PostSpansRequest.batch")),
            _ => {}
        }
    }
    batch.ok_or_else(|| err("the request has no batch"))
}

/// Decodes a `jaeger.api_v2.Batch` (spans, then the process they share unless they carry
/// their own).
pub fn decode_batch(buf: &[u8]) -> Result<Batch<'_>, TranslateError> {
    let mut b = Batch::default();
    let mut r = Reader::new(buf);
    while let Some(f) = r.next().map_err(err)? {
        match (f.number, f.value) {
            (1, Value::Bytes(s)) => {
                let i = b.spans.len();
                b.spans
                    .push(span(s).map_err(|e| TranslateError::new(format!("span {i}: {e}")))?);
            }
            (2, Value::Bytes(p)) => b.process = process(p)?,
            (1, _) => return Err(wrong("Batch.spans")),
            (2, _) => return Err(wrong("Batch.process")),
            _ => {}
        }
    }
    Ok(b)
}

fn process(buf: &[u8]) -> Result<Process<'_>, TranslateError> {
    let mut p = Process::default();
    fields(buf, |n, v| {
        match (n, v) {
            (1, Value::Bytes(b)) => p.service_name = text(b, "Process.service_name")?,
            (2, Value::Bytes(b)) => p.tags.push(key_value(b)?),
            (1 | 2, _) => return Err(wrong("a Process field")),
            _ => {}
        }
        Ok(())
    })?;
    Ok(p)
}

/// A `KeyValue`. Its `ValueType` numbers differ from thrift's `TagType` (protobuf: STRING,
/// BOOL, INT64, FLOAT64, BINARY).
fn key_value(buf: &[u8]) -> Result<Tag<'_>, TranslateError> {
    let (mut key, mut vtype) = ("", 0u64);
    let (mut s, mut b, mut l, mut d, mut bin) = ("", false, 0i64, 0f64, &[][..]);
    fields(buf, |n, v| {
        match (n, v) {
            (1, Value::Bytes(x)) => key = text(x, "KeyValue.key")?,
            (2, Value::Varint(x)) => vtype = x,
            (3, Value::Bytes(x)) => s = text(x, "KeyValue.v_str")?,
            (4, Value::Varint(x)) => b = x != 0,
            (5, Value::Varint(x)) => l = x as i64,
            (6, Value::Fixed64(x)) => d = f64::from_bits(x),
            (7, Value::Bytes(x)) => bin = x,
            (1..=7, _) => return Err(wrong("a KeyValue field")),
            _ => {}
        }
        Ok(())
    })?;
    let value = match vtype {
        0 => TagValue::Str(Cow::Borrowed(s)),
        1 => TagValue::Bool(b),
        2 => TagValue::Long(l),
        3 => TagValue::Double(d),
        4 => TagValue::Binary(bin),
        // As the Collector: the value says it is unknown.
        t => TagValue::Str(Cow::Owned(format!("<Unknown Jaeger TagType \"{t}\">"))),
    };
    Ok(Tag { key, value })
}

/// A `google.protobuf.Timestamp` or `Duration` as nanoseconds.
fn nanos(buf: &[u8]) -> Result<i64, TranslateError> {
    let (mut secs, mut ns) = (0i64, 0i64);
    fields(buf, |n, v| {
        match (n, v) {
            (1, Value::Varint(x)) => secs = x as i64,
            (2, Value::Varint(x)) => ns = i64::from(x as i32),
            (1 | 2, _) => return Err(wrong("a Timestamp or Duration field")),
            _ => {}
        }
        Ok(())
    })?;
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(ns))
}

/// A 16-byte trace ID (high, low); the 8-byte form older writers used is the low half.
fn trace_id(b: &[u8]) -> Result<(i64, i64), TranslateError> {
    match b.len() {
        16 => Ok((
            i64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            i64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
        )),
        8 => Ok((0, i64::from_be_bytes(b.try_into().expect("8 bytes")))),
        0 => Ok((0, 0)),
        n => Err(err(format!("trace_id has {n} bytes, expected 16"))),
    }
}

fn span_id(b: &[u8]) -> Result<i64, TranslateError> {
    match b.len() {
        8 => Ok(i64::from_be_bytes(b.try_into().expect("8 bytes"))),
        0 => Ok(0),
        n => Err(err(format!("span_id has {n} bytes, expected 8"))),
    }
}

fn span(buf: &[u8]) -> Result<Span<'_>, TranslateError> {
    let mut s = Span::default();
    fields(buf, |n, v| {
        match (n, v) {
            (1, Value::Bytes(b)) => (s.trace_id_high, s.trace_id_low) = trace_id(b)?,
            (2, Value::Bytes(b)) => s.span_id = span_id(b)?,
            (3, Value::Bytes(b)) => s.operation_name = text(b, "operation_name")?,
            (4, Value::Bytes(b)) => {
                let mut rf = SpanRef {
                    follows_from: false,
                    trace_id_low: 0,
                    trace_id_high: 0,
                    span_id: 0,
                };
                fields(b, |n, v| {
                    match (n, v) {
                        (1, Value::Bytes(x)) => (rf.trace_id_high, rf.trace_id_low) = trace_id(x)?,
                        (2, Value::Bytes(x)) => rf.span_id = span_id(x)?,
                        (3, Value::Varint(x)) => rf.follows_from = x == 1,
                        (1..=3, _) => return Err(wrong("a SpanRef field")),
                        _ => {}
                    }
                    Ok(())
                })?;
                s.references.push(rf);
            }
            (5, Value::Varint(x)) => s.flags = x as i32,
            (6, Value::Bytes(b)) => s.start_ns = nanos(b)?,
            (7, Value::Bytes(b)) => s.duration_ns = nanos(b)?,
            (8, Value::Bytes(b)) => s.tags.push(key_value(b)?),
            (9, Value::Bytes(b)) => {
                let mut log = Log::default();
                fields(b, |n, v| {
                    match (n, v) {
                        (1, Value::Bytes(x)) => log.timestamp_ns = nanos(x)?,
                        (2, Value::Bytes(x)) => log.fields.push(key_value(x)?),
                        (1 | 2, _) => return Err(wrong("a Log field")),
                        _ => {}
                    }
                    Ok(())
                })?;
                s.logs.push(log);
            }
            (10, Value::Bytes(b)) => s.process = Some(process(b)?),
            // process_id and warnings mean nothing on the way in.
            (11 | 12, Value::Bytes(_)) => {}
            (1..=12, _) => return Err(wrong(&format!("Span field {n}"))),
            _ => {}
        }
        Ok(())
    })?;
    if s.trace_id_high == 0 && s.trace_id_low == 0 {
        return Err(err("the trace ID is missing or zero"));
    }
    if s.span_id == 0 {
        return Err(err("the span ID is missing or zero"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;
    use weft_otlp::wire::{begin_nested, end_nested, put_bytes, put_fixed64, put_varint_field};

    fn kv(out: &mut Vec<u8>, field: u32, key: &str, vtype: u64, f: impl FnOnce(&mut Vec<u8>)) {
        let at = begin_nested(out, field);
        put_bytes(out, 1, key.as_bytes());
        put_varint_field(out, 2, vtype);
        f(out);
        end_nested(out, at);
    }

    fn ts(out: &mut Vec<u8>, field: u32, secs: u64, nanos: u64) {
        let at = begin_nested(out, field);
        put_varint_field(out, 1, secs);
        put_varint_field(out, 2, nanos);
        end_nested(out, at);
    }

    /// A request the way Jaeger's Go model marshals it: a batch process, one span of its own
    /// process, scope tags on one span, a CHILD_OF reference as the parent.
    fn request() -> Vec<u8> {
        let tid: Vec<u8> = (1..=16).collect();
        let mut batch = Vec::new();
        for (i, name) in ["GET /cart", "SELECT cart"].into_iter().enumerate() {
            let at = begin_nested(&mut batch, 1);
            put_bytes(&mut batch, 1, &tid);
            put_bytes(&mut batch, 2, &[0, 0, 0, 0, 0, 0, 0, 10 + i as u8]);
            put_bytes(&mut batch, 3, name.as_bytes());
            if i == 1 {
                let r = begin_nested(&mut batch, 4);
                put_bytes(&mut batch, 1, &tid);
                put_bytes(&mut batch, 2, &[0, 0, 0, 0, 0, 0, 0, 10]);
                end_nested(&mut batch, r);
            }
            ts(&mut batch, 6, 1_700_000_000, 123_456_789);
            ts(&mut batch, 7, 0, 2_500_000);
            kv(&mut batch, 8, "span.kind", 0, |o| {
                put_bytes(o, 3, if i == 0 { b"server" } else { b"client" })
            });
            kv(&mut batch, 8, "retries", 2, |o| put_varint_field(o, 5, 3));
            kv(&mut batch, 8, "ratio", 3, |o| put_fixed64(o, 6, 0.25f64.to_bits()));
            kv(&mut batch, 8, "cached", 1, |o| put_varint_field(o, 4, 1));
            if i == 0 {
                kv(&mut batch, 8, "otel.scope.name", 0, |o| put_bytes(o, 3, b"shop"));
                kv(&mut batch, 8, "otel.scope.version", 0, |o| put_bytes(o, 3, b"1.2"));
                let l = begin_nested(&mut batch, 9);
                ts(&mut batch, 1, 1_700_000_000, 124_000_000);
                kv(&mut batch, 2, "event", 0, |o| put_bytes(o, 3, b"cache miss"));
                kv(&mut batch, 2, "key", 0, |o| put_bytes(o, 3, b"cart:7"));
                end_nested(&mut batch, l);
            } else {
                kv(&mut batch, 8, "error", 1, |o| put_varint_field(o, 4, 1));
                let p = begin_nested(&mut batch, 10);
                put_bytes(&mut batch, 1, b"postgres");
                end_nested(&mut batch, p);
            }
            end_nested(&mut batch, at);
        }
        let p = begin_nested(&mut batch, 2);
        put_bytes(&mut batch, 1, b"shop");
        kv(&mut batch, 2, "hostname", 0, |o| put_bytes(o, 3, b"node-1"));
        end_nested(&mut batch, p);
        let mut req = Vec::new();
        put_bytes(&mut req, 1, &batch);
        req
    }

    #[test]
    fn post_spans_becomes_otlp_as_the_collector_writes_it() {
        let body = request();
        let b = decode_post_spans(&body).unwrap();
        let otlp = ExportTraceServiceRequest::decode(&super::super::to_otlp_grouped(&b)[..]).unwrap();
        assert_eq!(
            otlp.resource_spans.len(),
            2,
            "the span with its own process has its own resource"
        );
        let res = |i: usize| {
            otlp.resource_spans[i]
                .resource
                .as_ref()
                .unwrap()
                .attributes
                .iter()
                .map(|a| (a.key.clone(), format!("{:?}", a.value.as_ref().unwrap().value)))
                .collect::<Vec<_>>()
        };
        assert!(res(0).iter().any(|(k, v)| k == "host.name" && v.contains("node-1")));
        assert!(
            res(1)
                .iter()
                .any(|(k, v)| k == "service.name" && v.contains("postgres"))
        );
        let ss = &otlp.resource_spans[0].scope_spans[0];
        let scope = ss.scope.as_ref().unwrap();
        assert_eq!((scope.name.as_str(), scope.version.as_str()), ("shop", "1.2"));
        let root = &ss.spans[0];
        assert!(!root.attributes.iter().any(|a| a.key.starts_with("otel.scope")));
        assert_eq!(root.kind, 2);
        assert_eq!(
            root.start_time_unix_nano, 1_700_000_000_123_456_789,
            "nanoseconds are kept"
        );
        assert_eq!(root.end_time_unix_nano - root.start_time_unix_nano, 2_500_000);
        assert_eq!(root.events[0].name, "cache miss");
        assert_eq!(root.events[0].time_unix_nano, 1_700_000_000_124_000_000);
        let attr = |k: &str| {
            root.attributes
                .iter()
                .find(|a| a.key == k)
                .unwrap()
                .value
                .clone()
                .unwrap()
                .value
        };
        use weft_otlp::pb::common::any_value::Value as V;
        assert_eq!(attr("retries"), Some(V::IntValue(3)));
        assert_eq!(attr("ratio"), Some(V::DoubleValue(0.25)));
        assert_eq!(attr("cached"), Some(V::BoolValue(true)));
        let child = &otlp.resource_spans[1].scope_spans[0].spans[0];
        assert_eq!(
            child.parent_span_id, root.span_id,
            "the CHILD_OF reference is the parent"
        );
        assert!(child.links.is_empty(), "the parent reference is not also a link");
        assert_eq!(child.status.as_ref().unwrap().code, 2);
        assert_eq!(child.trace_id, (1..=16).collect::<Vec<u8>>());
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let e = decode_post_spans(&[]).unwrap_err().to_string();
        assert!(e.contains("no batch"), "{e}");
        let mut batch = Vec::new();
        let at = begin_nested(&mut batch, 1);
        put_bytes(&mut batch, 1, &[1, 2, 3]);
        end_nested(&mut batch, at);
        let mut req = Vec::new();
        put_bytes(&mut req, 1, &batch);
        let e = decode_post_spans(&req).unwrap_err().to_string();
        assert!(e.contains("span 0") && e.contains("trace_id has 3 bytes"), "{e}");
        let e = decode_post_spans(&[0x0a, 0x05, 0x01]).unwrap_err().to_string();
        assert!(e.contains("Jaeger protobuf"), "{e}");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// Random bytes and mangled valid requests: refused, or a valid OTLP request with
            /// one span per Jaeger span; never a panic.
            #[test]
            fn any_message_is_refused_or_converted(
                junk in proptest::collection::vec(any::<u8>(), 0..256),
                flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
                cut in any::<usize>(),
            ) {
                let mut mangled = request();
                for (at, b) in flips {
                    let n = mangled.len();
                    mangled[at % n] ^= b;
                }
                mangled.truncate(cut % (mangled.len() + 1));
                for body in [junk, mangled] {
                    if let Ok(b) = decode_post_spans(&body) {
                        let otlp = super::super::super::to_otlp_grouped(&b);
                        crate::assert_valid_conversion(&otlp);
                        let req = ExportTraceServiceRequest::decode(&otlp[..]).expect("valid OTLP");
                        let n: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
                        prop_assert_eq!(n, b.spans.len());
                    }
                }
            }
        }
    }
}
