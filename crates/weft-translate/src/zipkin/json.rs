//! Zipkin JSON: v2 (`[{"traceId": …, "localEndpoint": …, "tags": {…}}]`) and v1
//! (`[{"traceId": …, "annotations": [...], "binaryAnnotations": [...]}]`). Unknown fields are
//! ignored, as Zipkin ignores them; strings borrow from the body unless escaped.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::v1::{V1Annotation, V1BinaryAnnotation, V1Span};
use super::{Annotation, Endpoint, Kind, Span};
use crate::{TranslateError, parse_hex_id};

/// A string, or a number or bool written as its JSON text (clients send tag values of every
/// JSON type; Zipkin reads numbers as strings).
#[derive(Debug)]
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(if v { "true" } else { "false" })))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Text<'a>, E> {
                // As JSON writes it (`1.0`, not `1`), the nearest to the text that was sent.
                Ok(Text(Cow::Owned(
                    serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string()),
                )))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A JSON object of string values, kept in order as pairs.
#[derive(Debug, Default)]
struct Tags<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Tags<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Tags<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of tags")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Tags<'a>, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(8).min(64));
                while let Some((k, v)) = m.next_entry::<Text<'a>, Option<Text<'a>>>()? {
                    if let Some(v) = v {
                        out.push((k.0, v.0));
                    }
                }
                Ok(Tags(out))
            }
            fn visit_unit<E>(self) -> Result<Tags<'a>, E> {
                Ok(Tags::default())
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Microseconds: an integer; a float is truncated (some clients write `1.6e15`).
#[derive(Debug, Default, Clone, Copy)]
struct Micros(u64);

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Micros;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative number of microseconds")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Micros, E> {
                Ok(Micros(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Micros, E> {
                u64::try_from(v)
                    .map(Micros)
                    .map_err(|_| E::custom(format!("negative microseconds {v}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Micros, E> {
                if v.is_finite() && v >= 0.0 {
                    Ok(Micros(v as u64))
                } else {
                    Err(E::custom(format!("invalid microseconds {v}")))
                }
            }
            fn visit_unit<E>(self) -> Result<Micros, E> {
                Ok(Micros(0))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JEndpoint<'a> {
    #[serde(borrow, default)]
    service_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    ipv4: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    ipv6: Option<Cow<'a, str>>,
    #[serde(default)]
    port: Option<i64>,
}

impl<'a> JEndpoint<'a> {
    fn into_endpoint(self, what: &str) -> Result<Option<Endpoint<'a>>, TranslateError> {
        let ipv4 = match self.ipv4.as_deref() {
            None | Some("") => None,
            Some(s) => Some(
                s.parse()
                    .map_err(|_| TranslateError::new(format!("{what}.ipv4 {s:?} is not an IPv4 address")))?,
            ),
        };
        let ipv6 = match self.ipv6.as_deref() {
            None | Some("") => None,
            Some(s) => Some(
                s.parse()
                    .map_err(|_| TranslateError::new(format!("{what}.ipv6 {s:?} is not an IPv6 address")))?,
            ),
        };
        // Zipkin reads ports as unsigned shorts; 0 and negative mean "no port".
        let port = match self.port {
            None => 0,
            Some(p) if p <= 0 => 0,
            Some(p) => u16::try_from(p).map_err(|_| TranslateError::new(format!("{what}.port {p} is out of range")))?,
        };
        let e = Endpoint {
            service_name: self.service_name.filter(|s| !s.is_empty()),
            ipv4,
            ipv6,
            port,
        };
        Ok((!e.is_empty()).then_some(e))
    }
}

#[derive(Deserialize)]
struct JAnnotation<'a> {
    #[serde(default)]
    timestamp: Micros,
    #[serde(borrow)]
    value: Text<'a>,
    #[serde(borrow, default)]
    endpoint: Option<JEndpoint<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpanV2<'a> {
    #[serde(borrow, default)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parent_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    timestamp: Micros,
    #[serde(default)]
    duration: Micros,
    #[serde(borrow, default)]
    local_endpoint: Option<JEndpoint<'a>>,
    #[serde(borrow, default)]
    remote_endpoint: Option<JEndpoint<'a>>,
    #[serde(borrow, default)]
    annotations: Option<Vec<JAnnotation<'a>>>,
    #[serde(borrow, default)]
    tags: Option<Tags<'a>>,
    #[serde(default)]
    debug: Option<bool>,
    #[serde(default)]
    shared: Option<bool>,
}

fn json_error(e: serde_json::Error) -> TranslateError {
    TranslateError::new(format!("malformed Zipkin JSON: {e}"))
}

pub(crate) fn trace_id(s: Option<&str>, n: usize) -> Result<[u8; 16], TranslateError> {
    let s = s.ok_or_else(|| TranslateError::new(format!("span {n}: traceId is missing")))?;
    match parse_hex_id::<16>(s) {
        Some(id) if id != [0; 16] => Ok(id),
        _ => Err(TranslateError::new(format!(
            "span {n}: traceId {s:?} is not 1 to 32 hex characters, or is zero"
        ))),
    }
}

pub(crate) fn span_id(s: Option<&str>, field: &str, n: usize) -> Result<[u8; 8], TranslateError> {
    let s = s.ok_or_else(|| TranslateError::new(format!("span {n}: {field} is missing")))?;
    match parse_hex_id::<8>(s) {
        Some(id) if id != [0; 8] => Ok(id),
        _ => Err(TranslateError::new(format!(
            "span {n}: {field} {s:?} is not 1 to 16 hex characters, or is zero"
        ))),
    }
}

/// Decodes a v2 JSON list of spans with serde_json: the reference for
/// [`super::fastjson::decode_v2`], which the receiver uses.
pub fn decode_v2_serde(body: &[u8]) -> Result<Vec<Span<'_>>, TranslateError> {
    let raw: Vec<JSpanV2<'_>> = serde_json::from_slice(body).map_err(json_error)?;
    let mut out = Vec::with_capacity(raw.len());
    for (n, j) in raw.into_iter().enumerate() {
        let parent_id = match j.parent_id.as_deref() {
            None | Some("") => None,
            Some(p) => Some(span_id(Some(p), "parentId", n)?),
        };
        let kind = match j.kind.as_deref() {
            None | Some("") => None,
            Some(k) => Some(Kind::parse(k).ok_or_else(|| {
                TranslateError::new(format!(
                    "span {n}: kind {k:?} is not one of CLIENT, SERVER, PRODUCER, CONSUMER"
                ))
            })?),
        };
        let local = match j.local_endpoint {
            Some(e) => e.into_endpoint(&format!("span {n}: localEndpoint"))?,
            None => None,
        };
        let remote = match j.remote_endpoint {
            Some(e) => e.into_endpoint(&format!("span {n}: remoteEndpoint"))?,
            None => None,
        };
        out.push(Span {
            trace_id: trace_id(j.trace_id.as_deref(), n)?,
            id: span_id(j.id.as_deref(), "id", n)?,
            parent_id,
            kind,
            name: j.name.filter(|s| !s.is_empty()),
            timestamp_us: j.timestamp.0,
            duration_us: j.duration.0,
            local,
            remote,
            annotations: j
                .annotations
                .unwrap_or_default()
                .into_iter()
                .map(|a| Annotation {
                    timestamp_us: a.timestamp.0,
                    value: a.value.0,
                })
                .collect(),
            tags: j.tags.unwrap_or_default().0,
            debug: j.debug.unwrap_or(false),
            shared: j.shared.unwrap_or(false),
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
struct JBinaryAnnotation<'a> {
    #[serde(borrow)]
    key: Text<'a>,
    #[serde(borrow, default)]
    value: Option<JBinaryValue<'a>>,
    #[serde(borrow, default)]
    endpoint: Option<JEndpoint<'a>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JBinaryValue<'a> {
    Bool(bool),
    #[serde(borrow)]
    Text(Text<'a>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpanV1<'a> {
    #[serde(borrow, default)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    trace_id_high: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parent_id: Option<Cow<'a, str>>,
    #[serde(default)]
    timestamp: Micros,
    #[serde(default)]
    duration: Micros,
    #[serde(default)]
    debug: Option<bool>,
    #[serde(borrow, default)]
    annotations: Option<Vec<JAnnotation<'a>>>,
    #[serde(borrow, default)]
    binary_annotations: Option<Vec<JBinaryAnnotation<'a>>>,
}

/// Decodes a v1 JSON list of spans.
pub fn decode_v1(body: &[u8]) -> Result<Vec<V1Span<'_>>, TranslateError> {
    let raw: Vec<JSpanV1<'_>> = serde_json::from_slice(body).map_err(json_error)?;
    let mut out = Vec::with_capacity(raw.len());
    for (n, j) in raw.into_iter().enumerate() {
        let mut tid = trace_id(j.trace_id.as_deref(), n)?;
        if let Some(high) = j.trace_id_high.as_deref().filter(|h| !h.is_empty()) {
            let h = parse_hex_id::<8>(high)
                .ok_or_else(|| TranslateError::new(format!("span {n}: traceIdHigh {high:?} is not hex")))?;
            tid[..8].copy_from_slice(&h);
        }
        let parent_id = match j.parent_id.as_deref() {
            None | Some("") => None,
            Some(p) => Some(span_id(Some(p), "parentId", n)?),
        };
        let mut annotations = Vec::new();
        for (i, a) in j.annotations.unwrap_or_default().into_iter().enumerate() {
            annotations.push(V1Annotation {
                timestamp_us: a.timestamp.0,
                value: a.value.0,
                endpoint: match a.endpoint {
                    Some(e) => e.into_endpoint(&format!("span {n}: annotation {i} endpoint"))?,
                    None => None,
                },
            });
        }
        let mut binary = Vec::new();
        for (i, b) in j.binary_annotations.unwrap_or_default().into_iter().enumerate() {
            let endpoint = match b.endpoint {
                Some(e) => e.into_endpoint(&format!("span {n}: binaryAnnotation {i} endpoint"))?,
                None => None,
            };
            let (string_value, bool_value) = match b.value {
                Some(JBinaryValue::Bool(v)) => (None, Some(v)),
                Some(JBinaryValue::Text(t)) => (Some(t.0), None),
                None => (None, None),
            };
            binary.push(V1BinaryAnnotation {
                key: b.key.0,
                string_value,
                bool_value,
                endpoint,
            });
        }
        out.push(V1Span {
            trace_id: tid,
            id: span_id(j.id.as_deref(), "id", n)?,
            parent_id,
            name: j.name.map(|t| t.0).filter(|s| !s.is_empty()),
            timestamp_us: j.timestamp.0,
            duration_us: j.duration.0,
            debug: j.debug.unwrap_or(false),
            annotations,
            binary_annotations: binary,
        });
    }
    Ok(out)
}
