//! OTLP/JSON ⇄ protobuf messages.
//!
//! Large payloads skip the message trees: [`request_json_to_protobuf`] reads JSON straight into
//! protobuf bytes, and [`write_resource_spans_json`] writes protobuf straight as JSON text.
//!
//! Follows the OTLP/JSON rules: lowerCamelCase keys (snake_case is accepted on input), trace and
//! span IDs as hex, 64-bit integers as decimal strings (numbers accepted on input), enums as
//! integers (names accepted on input), bytes as base64.

use crate::pb::collector::{ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse};
use crate::pb::common::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value};
use crate::pb::resource::Resource;
use crate::pb::trace::{ResourceSpans, ScopeSpans, Span, Status, span};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

#[cfg(test)]
mod fixtures;
mod from_protobuf;
mod to_protobuf;

pub use from_protobuf::{ProtobufError, ProtobufProblem, write_resource_spans_json};
pub use to_protobuf::request_json_to_protobuf;

/// A JSON document that is not a valid OTLP request. The message names the path and problem.
#[derive(Debug, thiserror::Error)]
#[error("invalid OTLP JSON at {path}: {problem}")]
pub struct JsonError {
    pub path: String,
    pub problem: String,
}

fn err(path: &str, problem: impl Into<String>) -> JsonError {
    JsonError {
        path: path.to_string(),
        problem: problem.into(),
    }
}

fn get<'a>(obj: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel).or_else(|| obj.get(snake)).filter(|v| !v.is_null())
}

fn as_obj<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, JsonError> {
    v.as_object().ok_or_else(|| err(path, "expected an object"))
}

fn as_arr<'a>(v: Option<&'a Value>, path: &str) -> Result<&'a [Value], JsonError> {
    match v {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(err(path, "expected an array")),
    }
}

fn as_str(v: Option<&Value>, path: &str) -> Result<String, JsonError> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(err(path, "expected a string")),
    }
}

fn as_u64(v: Option<&Value>, path: &str) -> Result<u64, JsonError> {
    match v {
        None => Ok(0),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| err(path, "expected a non-negative integer")),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| err(path, format!("expected an integer, got {s:?}"))),
        Some(_) => Err(err(path, "expected an integer")),
    }
}

fn as_i64(v: Option<&Value>, path: &str) -> Result<i64, JsonError> {
    match v {
        None => Ok(0),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| err(path, "expected an integer")),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| err(path, format!("expected an integer, got {s:?}"))),
        Some(_) => Err(err(path, "expected an integer")),
    }
}

fn as_f64(v: Option<&Value>, path: &str) -> Result<f64, JsonError> {
    match v {
        None => Ok(0.0),
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| err(path, "expected a number")),
        Some(Value::String(s)) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => s
                .parse()
                .map_err(|_| err(path, format!("expected a number, got {s:?}"))),
        },
        Some(_) => Err(err(path, "expected a number")),
    }
}

fn as_enum(v: Option<&Value>, path: &str, names: &[&str]) -> Result<i32, JsonError> {
    match v {
        None => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| err(path, "expected an enum integer")),
        Some(Value::String(s)) => names
            .iter()
            .position(|n| n == s)
            .map(|i| i as i32)
            .ok_or_else(|| err(path, format!("unknown enum value {s:?}"))),
        Some(_) => Err(err(path, "expected an enum integer")),
    }
}

fn hex_id(v: Option<&Value>, path: &str, len: usize, allow_empty: bool) -> Result<Vec<u8>, JsonError> {
    let s = as_str(v, path)?;
    if s.is_empty() && allow_empty {
        return Ok(Vec::new());
    }
    let b = hex::decode(&s).map_err(|_| err(path, format!("expected {} hex characters, got {s:?}", len * 2)))?;
    if b.len() != len {
        return Err(err(
            path,
            format!("expected {} hex characters, got {}", len * 2, s.len()),
        ));
    }
    Ok(b)
}

const KINDS: &[&str] = &[
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
];
const STATUS_CODES: &[&str] = &["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];

/// Parses an OTLP/JSON `ExportTraceServiceRequest`.
pub fn request_from_json(body: &[u8]) -> Result<ExportTraceServiceRequest, JsonError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| err("$", format!("invalid JSON: {e}")))?;
    let root = as_obj(&v, "$")?;
    let mut req = ExportTraceServiceRequest::default();
    for (i, rs) in as_arr(get(root, "resourceSpans", "resource_spans"), "$.resourceSpans")?
        .iter()
        .enumerate()
    {
        let p = format!("$.resourceSpans[{i}]");
        req.resource_spans.push(resource_spans_from_json(rs, &p)?);
    }
    Ok(req)
}

fn resource_spans_from_json(v: &Value, p: &str) -> Result<ResourceSpans, JsonError> {
    let o = as_obj(v, p)?;
    let mut rs = ResourceSpans {
        schema_url: as_str(get(o, "schemaUrl", "schema_url"), &format!("{p}.schemaUrl"))?,
        ..Default::default()
    };
    if let Some(r) = get(o, "resource", "resource") {
        let rp = format!("{p}.resource");
        let ro = as_obj(r, &rp)?;
        rs.resource = Some(Resource {
            attributes: attrs_from_json(get(ro, "attributes", "attributes"), &format!("{rp}.attributes"))?,
            dropped_attributes_count: as_u64(
                get(ro, "droppedAttributesCount", "dropped_attributes_count"),
                &format!("{rp}.droppedAttributesCount"),
            )? as u32,
        });
    }
    for (i, ss) in as_arr(get(o, "scopeSpans", "scope_spans"), &format!("{p}.scopeSpans"))?
        .iter()
        .enumerate()
    {
        let sp = format!("{p}.scopeSpans[{i}]");
        let so = as_obj(ss, &sp)?;
        let mut out = ScopeSpans {
            schema_url: as_str(get(so, "schemaUrl", "schema_url"), &format!("{sp}.schemaUrl"))?,
            ..Default::default()
        };
        if let Some(s) = get(so, "scope", "scope") {
            let scp = format!("{sp}.scope");
            let sco = as_obj(s, &scp)?;
            out.scope = Some(InstrumentationScope {
                name: as_str(get(sco, "name", "name"), &format!("{scp}.name"))?,
                version: as_str(get(sco, "version", "version"), &format!("{scp}.version"))?,
                attributes: attrs_from_json(get(sco, "attributes", "attributes"), &format!("{scp}.attributes"))?,
                dropped_attributes_count: as_u64(
                    get(sco, "droppedAttributesCount", "dropped_attributes_count"),
                    &format!("{scp}.droppedAttributesCount"),
                )? as u32,
            });
        }
        for (j, s) in as_arr(get(so, "spans", "spans"), &format!("{sp}.spans"))?
            .iter()
            .enumerate()
        {
            out.spans.push(span_from_json(s, &format!("{sp}.spans[{j}]"))?);
        }
        rs.scope_spans.push(out);
    }
    Ok(rs)
}

fn span_from_json(v: &Value, p: &str) -> Result<Span, JsonError> {
    let o = as_obj(v, p)?;
    let f = |c: &str, s: &str| get(o, c, s);
    let mut sp = Span {
        trace_id: hex_id(f("traceId", "trace_id"), &format!("{p}.traceId"), 16, false)?.into(),
        span_id: hex_id(f("spanId", "span_id"), &format!("{p}.spanId"), 8, false)?.into(),
        trace_state: as_str(f("traceState", "trace_state"), &format!("{p}.traceState"))?,
        parent_span_id: hex_id(
            f("parentSpanId", "parent_span_id"),
            &format!("{p}.parentSpanId"),
            8,
            true,
        )?
        .into(),
        flags: as_u64(f("flags", "flags"), &format!("{p}.flags"))? as u32,
        name: as_str(f("name", "name"), &format!("{p}.name"))?,
        kind: as_enum(f("kind", "kind"), &format!("{p}.kind"), KINDS)?,
        start_time_unix_nano: as_u64(
            f("startTimeUnixNano", "start_time_unix_nano"),
            &format!("{p}.startTimeUnixNano"),
        )?,
        end_time_unix_nano: as_u64(
            f("endTimeUnixNano", "end_time_unix_nano"),
            &format!("{p}.endTimeUnixNano"),
        )?,
        attributes: attrs_from_json(f("attributes", "attributes"), &format!("{p}.attributes"))?,
        dropped_attributes_count: as_u64(
            f("droppedAttributesCount", "dropped_attributes_count"),
            &format!("{p}.droppedAttributesCount"),
        )? as u32,
        dropped_events_count: as_u64(
            f("droppedEventsCount", "dropped_events_count"),
            &format!("{p}.droppedEventsCount"),
        )? as u32,
        dropped_links_count: as_u64(
            f("droppedLinksCount", "dropped_links_count"),
            &format!("{p}.droppedLinksCount"),
        )? as u32,
        ..Default::default()
    };
    for (i, e) in as_arr(f("events", "events"), &format!("{p}.events"))?
        .iter()
        .enumerate()
    {
        let ep = format!("{p}.events[{i}]");
        let eo = as_obj(e, &ep)?;
        sp.events.push(span::Event {
            time_unix_nano: as_u64(get(eo, "timeUnixNano", "time_unix_nano"), &format!("{ep}.timeUnixNano"))?,
            name: as_str(get(eo, "name", "name"), &format!("{ep}.name"))?,
            attributes: attrs_from_json(get(eo, "attributes", "attributes"), &format!("{ep}.attributes"))?,
            dropped_attributes_count: as_u64(
                get(eo, "droppedAttributesCount", "dropped_attributes_count"),
                &format!("{ep}.droppedAttributesCount"),
            )? as u32,
        });
    }
    for (i, l) in as_arr(f("links", "links"), &format!("{p}.links"))?.iter().enumerate() {
        let lp = format!("{p}.links[{i}]");
        let lo = as_obj(l, &lp)?;
        sp.links.push(span::Link {
            trace_id: hex_id(get(lo, "traceId", "trace_id"), &format!("{lp}.traceId"), 16, false)?.into(),
            span_id: hex_id(get(lo, "spanId", "span_id"), &format!("{lp}.spanId"), 8, false)?.into(),
            trace_state: as_str(get(lo, "traceState", "trace_state"), &format!("{lp}.traceState"))?,
            attributes: attrs_from_json(get(lo, "attributes", "attributes"), &format!("{lp}.attributes"))?,
            dropped_attributes_count: as_u64(
                get(lo, "droppedAttributesCount", "dropped_attributes_count"),
                &format!("{lp}.droppedAttributesCount"),
            )? as u32,
            flags: as_u64(get(lo, "flags", "flags"), &format!("{lp}.flags"))? as u32,
        });
    }
    if let Some(s) = f("status", "status") {
        let sp2 = format!("{p}.status");
        let so = as_obj(s, &sp2)?;
        sp.status = Some(Status {
            message: as_str(get(so, "message", "message"), &format!("{sp2}.message"))?,
            code: as_enum(get(so, "code", "code"), &format!("{sp2}.code"), STATUS_CODES)?,
        });
    }
    Ok(sp)
}

fn attrs_from_json(v: Option<&Value>, p: &str) -> Result<Vec<KeyValue>, JsonError> {
    let mut out = Vec::new();
    for (i, kv) in as_arr(v, p)?.iter().enumerate() {
        out.push(kv_from_json(kv, &format!("{p}[{i}]"), 0)?);
    }
    Ok(out)
}

fn kv_from_json(v: &Value, p: &str, depth: u32) -> Result<KeyValue, JsonError> {
    let o = as_obj(v, p)?;
    let value = match get(o, "value", "value") {
        None => None,
        Some(av) => Some(any_from_json(av, &format!("{p}.value"), depth + 1)?),
    };
    Ok(KeyValue {
        key: as_str(get(o, "key", "key"), &format!("{p}.key"))?,
        value,
    })
}

fn any_from_json(v: &Value, p: &str, depth: u32) -> Result<AnyValue, JsonError> {
    if depth > crate::request::MAX_DEPTH {
        return Err(err(p, "attribute nesting too deep"));
    }
    let o = as_obj(v, p)?;
    use any_value::Value as V;
    let value = if let Some(s) = get(o, "stringValue", "string_value") {
        Some(V::StringValue(as_str(Some(s), &format!("{p}.stringValue"))?))
    } else if let Some(b) = get(o, "boolValue", "bool_value") {
        Some(V::BoolValue(
            b.as_bool()
                .ok_or_else(|| err(&format!("{p}.boolValue"), "expected a boolean"))?,
        ))
    } else if let Some(i) = get(o, "intValue", "int_value") {
        Some(V::IntValue(as_i64(Some(i), &format!("{p}.intValue"))?))
    } else if let Some(d) = get(o, "doubleValue", "double_value") {
        Some(V::DoubleValue(as_f64(Some(d), &format!("{p}.doubleValue"))?))
    } else if let Some(a) = get(o, "arrayValue", "array_value") {
        let ap = format!("{p}.arrayValue");
        let ao = as_obj(a, &ap)?;
        let mut values = Vec::new();
        for (i, x) in as_arr(get(ao, "values", "values"), &format!("{ap}.values"))?
            .iter()
            .enumerate()
        {
            values.push(any_from_json(x, &format!("{ap}.values[{i}]"), depth + 1)?);
        }
        Some(V::ArrayValue(ArrayValue { values }))
    } else if let Some(k) = get(o, "kvlistValue", "kvlist_value") {
        let kp = format!("{p}.kvlistValue");
        let ko = as_obj(k, &kp)?;
        let mut values = Vec::new();
        for (i, x) in as_arr(get(ko, "values", "values"), &format!("{kp}.values"))?
            .iter()
            .enumerate()
        {
            values.push(kv_from_json(x, &format!("{kp}.values[{i}]"), depth + 1)?);
        }
        Some(V::KvlistValue(KeyValueList { values }))
    } else if let Some(b) = get(o, "bytesValue", "bytes_value") {
        let s = as_str(Some(b), &format!("{p}.bytesValue"))?;
        Some(V::BytesValue(
            B64.decode(s.as_bytes())
                .map_err(|e| err(&format!("{p}.bytesValue"), format!("invalid base64: {e}")))?
                .into(),
        ))
    } else {
        None
    };
    Ok(AnyValue { value })
}

/// Renders resource spans as OTLP/JSON values.
///
/// [`write_resource_spans_json`] writes the same text straight from protobuf bytes, without
/// this tree or the message tree.
pub fn resource_spans_to_json(batches: &[ResourceSpans]) -> Value {
    Value::Array(batches.iter().map(rs_to_json).collect())
}

fn rs_to_json(rs: &ResourceSpans) -> Value {
    let mut o = Map::new();
    if let Some(r) = &rs.resource {
        let mut ro = Map::new();
        ro.insert("attributes".into(), attrs_to_json(&r.attributes));
        if r.dropped_attributes_count > 0 {
            ro.insert("droppedAttributesCount".into(), json!(r.dropped_attributes_count));
        }
        o.insert("resource".into(), Value::Object(ro));
    }
    let scopes: Vec<Value> = rs
        .scope_spans
        .iter()
        .map(|ss| {
            let mut so = Map::new();
            if let Some(s) = &ss.scope {
                let mut sco = Map::new();
                sco.insert("name".into(), json!(s.name));
                if !s.version.is_empty() {
                    sco.insert("version".into(), json!(s.version));
                }
                if !s.attributes.is_empty() {
                    sco.insert("attributes".into(), attrs_to_json(&s.attributes));
                }
                if s.dropped_attributes_count > 0 {
                    sco.insert("droppedAttributesCount".into(), json!(s.dropped_attributes_count));
                }
                so.insert("scope".into(), Value::Object(sco));
            }
            so.insert(
                "spans".into(),
                Value::Array(ss.spans.iter().map(span_to_json).collect()),
            );
            if !ss.schema_url.is_empty() {
                so.insert("schemaUrl".into(), json!(ss.schema_url));
            }
            Value::Object(so)
        })
        .collect();
    o.insert("scopeSpans".into(), Value::Array(scopes));
    if !rs.schema_url.is_empty() {
        o.insert("schemaUrl".into(), json!(rs.schema_url));
    }
    Value::Object(o)
}

fn span_to_json(s: &Span) -> Value {
    let mut o = Map::new();
    o.insert("traceId".into(), json!(hex::encode(&s.trace_id)));
    o.insert("spanId".into(), json!(hex::encode(&s.span_id)));
    if !s.trace_state.is_empty() {
        o.insert("traceState".into(), json!(s.trace_state));
    }
    if !s.parent_span_id.is_empty() {
        o.insert("parentSpanId".into(), json!(hex::encode(&s.parent_span_id)));
    }
    if s.flags != 0 {
        o.insert("flags".into(), json!(s.flags));
    }
    o.insert("name".into(), json!(s.name));
    o.insert("kind".into(), json!(s.kind));
    o.insert("startTimeUnixNano".into(), json!(s.start_time_unix_nano.to_string()));
    o.insert("endTimeUnixNano".into(), json!(s.end_time_unix_nano.to_string()));
    if !s.attributes.is_empty() {
        o.insert("attributes".into(), attrs_to_json(&s.attributes));
    }
    if s.dropped_attributes_count > 0 {
        o.insert("droppedAttributesCount".into(), json!(s.dropped_attributes_count));
    }
    if !s.events.is_empty() {
        let ev: Vec<Value> = s
            .events
            .iter()
            .map(|e| {
                let mut eo = Map::new();
                eo.insert("timeUnixNano".into(), json!(e.time_unix_nano.to_string()));
                eo.insert("name".into(), json!(e.name));
                if !e.attributes.is_empty() {
                    eo.insert("attributes".into(), attrs_to_json(&e.attributes));
                }
                if e.dropped_attributes_count > 0 {
                    eo.insert("droppedAttributesCount".into(), json!(e.dropped_attributes_count));
                }
                Value::Object(eo)
            })
            .collect();
        o.insert("events".into(), Value::Array(ev));
    }
    if s.dropped_events_count > 0 {
        o.insert("droppedEventsCount".into(), json!(s.dropped_events_count));
    }
    if !s.links.is_empty() {
        let ls: Vec<Value> = s
            .links
            .iter()
            .map(|l| {
                let mut lo = Map::new();
                lo.insert("traceId".into(), json!(hex::encode(&l.trace_id)));
                lo.insert("spanId".into(), json!(hex::encode(&l.span_id)));
                if !l.trace_state.is_empty() {
                    lo.insert("traceState".into(), json!(l.trace_state));
                }
                if !l.attributes.is_empty() {
                    lo.insert("attributes".into(), attrs_to_json(&l.attributes));
                }
                if l.dropped_attributes_count > 0 {
                    lo.insert("droppedAttributesCount".into(), json!(l.dropped_attributes_count));
                }
                if l.flags != 0 {
                    lo.insert("flags".into(), json!(l.flags));
                }
                Value::Object(lo)
            })
            .collect();
        o.insert("links".into(), Value::Array(ls));
    }
    if s.dropped_links_count > 0 {
        o.insert("droppedLinksCount".into(), json!(s.dropped_links_count));
    }
    let mut st = Map::new();
    if let Some(status) = &s.status {
        if !status.message.is_empty() {
            st.insert("message".into(), json!(status.message));
        }
        if status.code != 0 {
            st.insert("code".into(), json!(status.code));
        }
    }
    o.insert("status".into(), Value::Object(st));
    Value::Object(o)
}

fn attrs_to_json(attrs: &[KeyValue]) -> Value {
    Value::Array(attrs.iter().map(kv_to_json).collect())
}

fn kv_to_json(kv: &KeyValue) -> Value {
    let mut o = Map::new();
    o.insert("key".into(), json!(kv.key));
    o.insert(
        "value".into(),
        kv.value.as_ref().map(any_to_json).unwrap_or_else(|| json!({})),
    );
    Value::Object(o)
}

fn any_to_json(v: &AnyValue) -> Value {
    use any_value::Value as V;
    match &v.value {
        None => json!({}),
        Some(V::StringValue(s)) => json!({ "stringValue": s }),
        Some(V::BoolValue(b)) => json!({ "boolValue": b }),
        Some(V::IntValue(i)) => json!({ "intValue": i.to_string() }),
        Some(V::DoubleValue(d)) => {
            if d.is_finite() {
                json!({ "doubleValue": d })
            } else if d.is_nan() {
                json!({ "doubleValue": "NaN" })
            } else if *d > 0.0 {
                json!({ "doubleValue": "Infinity" })
            } else {
                json!({ "doubleValue": "-Infinity" })
            }
        }
        Some(V::ArrayValue(a)) => {
            json!({ "arrayValue": { "values": a.values.iter().map(any_to_json).collect::<Vec<_>>() } })
        }
        Some(V::KvlistValue(k)) => {
            json!({ "kvlistValue": { "values": k.values.iter().map(kv_to_json).collect::<Vec<_>>() } })
        }
        Some(V::BytesValue(b)) => json!({ "bytesValue": B64.encode(b) }),
    }
}

/// Renders an export response as OTLP/JSON.
pub fn response_to_json(resp: &ExportTraceServiceResponse) -> Value {
    match &resp.partial_success {
        None => json!({}),
        Some(ExportTracePartialSuccess {
            rejected_spans,
            error_message,
        }) => json!({
            "partialSuccess": { "rejectedSpans": rejected_spans.to_string(), "errorMessage": error_message }
        }),
    }
}
