//! AWS X-Ray: segment documents as the X-Ray SDKs send them to the daemon over UDP (a header
//! line `{"format":"json","version":1}`, a newline, then one segment or independent subsegment
//! document), written as OTLP by the rules of the OpenTelemetry Collector's X-Ray receiver
//! (`awsxrayreceiver`'s translator) except where `spec/formats/xray.md` marks a difference, and
//! X-Ray trace IDs mapped to and from 128-bit IDs as its X-Ray exporter does
//! (`1-5759e988-bd862e3fe1be46a994272793` is the 16 bytes `5759e988bd862e3fe1be46a994272793`),
//! so a trace crossing X-Ray- and OpenTelemetry-instrumented services stays one trace.
//!
//! The document is read into a typed model that borrows its strings from the datagram, as the
//! Collector reads it into its `Segment` type: a known field of the wrong type refuses the
//! document, unknown fields are ignored. The receiver reads it with `read.rs`, a reader written
//! for this shape; serde_json's derive-based reader ([`parse_serde`]) is the reference its tests
//! compare with.

mod convert;
mod read;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value as Json};

use crate::TranslateError;

fn err(msg: impl Into<String>) -> TranslateError {
    TranslateError::new(msg)
}

/// `1-{8 hex epoch}-{24 hex}` as 16 bytes.
pub fn parse_trace_id(s: &str) -> Option<[u8; 16]> {
    let rest = s.strip_prefix("1-")?;
    let (epoch, random) = rest.split_once('-')?;
    if epoch.len() != 8 || random.len() != 24 {
        return None;
    }
    let mut hex = [0u8; 32];
    hex[..8].copy_from_slice(epoch.as_bytes());
    hex[8..].copy_from_slice(random.as_bytes());
    let id = crate::parse_hex_id::<16>(std::str::from_utf8(&hex).ok()?)?;
    (id != [0; 16]).then_some(id)
}

/// The X-Ray form of a 128-bit trace ID.
pub fn format_trace_id(id: &[u8; 16]) -> String {
    let h = weft_core::hex(id);
    format!("1-{}-{}", &h[..8], &h[8..])
}

#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    format: Option<Cow<'a, str>>,
    version: Option<i64>,
}

/// Splits a daemon datagram into its header and its document, checking the header.
pub fn split_datagram(d: &[u8]) -> Result<&[u8], TranslateError> {
    let nl = d
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| err("X-Ray: no header line (expected {\"format\":\"json\",\"version\":1} and a newline)"))?;
    // The header every SDK writes, without a JSON reader.
    if &d[..nl] == br#"{"format":"json","version":1}"# {
        return Ok(&d[nl + 1..]);
    }
    let header: Header<'_> =
        serde_json::from_slice(&d[..nl]).map_err(|e| err(format!("X-Ray: malformed header: {e}")))?;
    if header.format.as_deref() != Some("json") || header.version != Some(1) {
        return Err(err(format!(
            "X-Ray: unsupported header {} (expected {{\"format\":\"json\",\"version\":1}})",
            String::from_utf8_lossy(&d[..nl])
        )));
    }
    Ok(&d[nl + 1..])
}

type Text<'a> = Option<Cow<'a, str>>;

/// A segment or subsegment (the Collector's `awsxray.Segment`).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Segment<'a> {
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    id: Text<'a>,
    start_time: Option<f64>,
    end_time: Option<f64>,
    #[serde(borrow)]
    service: Option<Service<'a>>,
    #[serde(borrow)]
    user: Text<'a>,
    #[serde(borrow)]
    resource_arn: Text<'a>,
    #[serde(borrow)]
    trace_id: Text<'a>,
    in_progress: Option<bool>,
    #[serde(borrow)]
    http: Option<Http<'a>>,
    #[serde(borrow)]
    cause: Option<Cause<'a>>,
    #[serde(borrow)]
    aws: Option<Box<Aws<'a>>>,
    #[serde(deserialize_with = "annotations_serde")]
    annotations: Option<Vec<(Cow<'a, str>, Annotation<'a>)>>,
    /// Each namespace's value as JSON text.
    #[serde(deserialize_with = "metadata_serde")]
    metadata: Option<Vec<(Cow<'a, str>, Cow<'a, str>)>>,
    #[serde(borrow)]
    subsegments: Option<Vec<Segment<'a>>>,
    #[serde(borrow)]
    namespace: Text<'a>,
    #[serde(borrow)]
    parent_id: Text<'a>,
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    traced: Option<bool>,
    #[serde(borrow)]
    sql: Option<Sql<'a>>,
    // Typed as the Collector types them (a wrong type refuses the document), not mapped.
    #[serde(borrow)]
    origin: Text<'a>,
    fault: Option<bool>,
    error: Option<bool>,
    throttle: Option<bool>,
    #[serde(borrow)]
    precursor_ids: Option<Vec<Cow<'a, str>>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Service<'a> {
    #[serde(borrow)]
    version: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Http<'a> {
    #[serde(borrow)]
    request: Option<HttpRequest<'a>>,
    #[serde(borrow)]
    response: Option<HttpResponse<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HttpRequest<'a> {
    x_forwarded_for: Option<bool>,
    #[serde(borrow)]
    method: Text<'a>,
    #[serde(borrow)]
    url: Text<'a>,
    #[serde(borrow)]
    user_agent: Text<'a>,
    #[serde(borrow)]
    client_ip: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HttpResponse<'a> {
    status: Option<i64>,
    #[serde(borrow)]
    content_length: Option<Length<'a>>,
}

/// `content_length`: the Collector keeps text as text and a number as an integer.
#[derive(Deserialize)]
#[serde(untagged)]
enum Length<'a> {
    Number(f64),
    Text(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
}

/// `cause`: an exception ID (text) or an object of exceptions.
#[derive(Deserialize)]
#[serde(untagged)]
enum Cause<'a> {
    Id(#[serde(borrow)] Cow<'a, str>),
    Object(#[serde(borrow)] CauseObject<'a>),
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CauseObject<'a> {
    #[serde(borrow)]
    exceptions: Vec<Exception<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Exception<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    message: Text<'a>,
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    remote: Option<bool>,
    truncated: Option<i64>,
    skipped: Option<i64>,
    #[serde(borrow)]
    cause: Text<'a>,
    #[serde(borrow)]
    stack: Vec<Frame<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Frame<'a> {
    #[serde(borrow)]
    path: Text<'a>,
    line: Option<i64>,
    #[serde(borrow)]
    label: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Aws<'a> {
    #[serde(borrow)]
    elastic_beanstalk: Option<Beanstalk<'a>>,
    #[serde(borrow)]
    cloudwatch_logs: Vec<LogGroup<'a>>,
    #[serde(borrow)]
    ecs: Option<Ecs<'a>>,
    #[serde(borrow)]
    ec2: Option<Ec2<'a>>,
    #[serde(borrow)]
    eks: Option<Eks<'a>>,
    #[serde(borrow)]
    xray: Option<XRayData<'a>>,
    #[serde(borrow)]
    account_id: Text<'a>,
    #[serde(borrow)]
    operation: Text<'a>,
    #[serde(borrow)]
    region: Text<'a>,
    #[serde(borrow)]
    request_id: Text<'a>,
    #[serde(borrow)]
    queue_url: Text<'a>,
    #[serde(borrow)]
    table_name: Text<'a>,
    #[serde(borrow)]
    table_names: Option<Vec<Cow<'a, str>>>,
    retries: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Beanstalk<'a> {
    #[serde(borrow)]
    environment_name: Text<'a>,
    #[serde(borrow)]
    version_label: Text<'a>,
    deployment_id: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LogGroup<'a> {
    #[serde(borrow)]
    log_group: Text<'a>,
    #[serde(borrow)]
    arn: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ecs<'a> {
    #[serde(borrow)]
    container: Text<'a>,
    #[serde(borrow)]
    container_id: Text<'a>,
    #[serde(borrow)]
    availability_zone: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ec2<'a> {
    #[serde(borrow)]
    instance_id: Text<'a>,
    #[serde(borrow)]
    availability_zone: Text<'a>,
    #[serde(borrow)]
    instance_size: Text<'a>,
    #[serde(borrow)]
    ami_id: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Eks<'a> {
    #[serde(borrow)]
    cluster_name: Text<'a>,
    #[serde(borrow)]
    pod: Text<'a>,
    #[serde(borrow)]
    container_id: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct XRayData<'a> {
    #[serde(borrow)]
    sdk: Text<'a>,
    #[serde(borrow)]
    sdk_version: Text<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Sql<'a> {
    #[serde(borrow)]
    url: Text<'a>,
    #[serde(borrow)]
    sanitized_query: Text<'a>,
    #[serde(borrow)]
    database_type: Text<'a>,
    #[serde(borrow)]
    user: Text<'a>,
}

/// An annotation's value as the writer uses it: a JSON number is a double, as Go reads it;
/// other types (`null`, arrays, objects) are not written.
#[derive(Debug, Clone, PartialEq)]
enum Annotation<'a> {
    Str(Cow<'a, str>),
    Bool(bool),
    Double(f64),
    Other,
}

/// Pairs in key order with the last value of a repeated key: the order and the values of
/// serde_json's map, which the Collector's Go map sorted the same way.
fn sorted_last_wins<T>(mut v: Vec<(Cow<'_, str>, T)>) -> Vec<(Cow<'_, str>, T)> {
    // Reversed, a stable sort puts the last of equal keys first, which `dedup_by` keeps.
    v.reverse();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.dedup_by(|a, b| a.0 == b.0);
    v
}

type Pairs<'a, T> = Option<Vec<(Cow<'a, str>, T)>>;

fn annotations_serde<'de, 'a, D: serde::Deserializer<'de>>(d: D) -> Result<Pairs<'a, Annotation<'a>>, D::Error> {
    let m: Option<Map<String, Json>> = Deserialize::deserialize(d)?;
    Ok(m.map(|m| {
        m.into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Json::String(s) => Annotation::Str(Cow::Owned(s)),
                    Json::Bool(b) => Annotation::Bool(b),
                    Json::Number(x) => x.as_f64().map_or(Annotation::Other, Annotation::Double),
                    _ => Annotation::Other,
                };
                (Cow::Owned(k), v)
            })
            .collect()
    }))
}

fn metadata_serde<'de, 'a, D: serde::Deserializer<'de>>(d: D) -> Result<Pairs<'a, Cow<'a, str>>, D::Error> {
    let m: Option<Map<String, Json>> = Deserialize::deserialize(d)?;
    Ok(m.map(|m| {
        m.into_iter()
            .map(|(k, v)| (Cow::Owned(k), Cow::Owned(v.to_string())))
            .collect()
    }))
}

/// A segment document, parsed; it borrows from the datagram.
pub struct Document<'a> {
    root: Segment<'a>,
}

impl std::fmt::Debug for Document<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("name", &self.root.name)
            .field("id", &self.root.id)
            .finish()
    }
}

/// Parses one segment or independent subsegment document.
pub fn parse(body: &[u8]) -> Result<Document<'_>, TranslateError> {
    let root = read::segment_document(body)?;
    check(&root, "segment")?;
    Ok(Document { root })
}

/// [`parse`] by serde_json's derive-based reader: the reference the tests and the fuzz target
/// compare the receiver's reader with.
pub fn parse_serde(body: &[u8]) -> Result<Document<'_>, TranslateError> {
    let root: Segment<'_> =
        serde_json::from_slice(body).map_err(|e| err(format!("malformed X-Ray segment document: {e}")))?;
    check(&root, "segment")?;
    Ok(Document { root })
}

/// Epoch seconds (a float) as nanoseconds, rounded to the microsecond: an f64 holds today's
/// epoch seconds to about 0.2 µs, and the SDKs write microseconds, so the microsecond is exact
/// and the nanoseconds below it are noise (the Collector truncates, which turns `.271` into
/// `.270999808`). `None` for a time before 1970 or one that u64 nanoseconds cannot hold (after
/// the year 2554), which the document is refused for, rather than wrapped into another time.
fn seconds_to_ns(v: Option<f64>) -> Option<u64> {
    let us = (v? * 1e6).round();
    (0.0..MAX_MICROS).contains(&us).then(|| us as u64 * 1000)
}

/// From this many microseconds on, the nanoseconds overflow a u64.
const MAX_MICROS: f64 = (u64::MAX / 1000 + 1) as f64;

fn span_id(s: &str) -> Option<[u8; 8]> {
    if s.len() != 16 {
        return None;
    }
    crate::parse_hex_id::<8>(s)
}

/// Checks the fields the conversion relies on, in a (sub)segment and those it nests.
fn check(m: &Segment<'_>, what: &str) -> Result<(), TranslateError> {
    let name = m
        .name
        .as_deref()
        .ok_or_else(|| err(format!("X-Ray {what}: \"name\" is missing")))?;
    let id =
        m.id.as_deref()
            .ok_or_else(|| err(format!("X-Ray {what} {name:?}: \"id\" is missing")))?;
    if span_id(id).is_none_or(|i| i == [0; 8]) {
        return Err(err(format!("X-Ray {what} {name:?}: id {id:?} is not 16 hex digits")));
    }
    if seconds_to_ns(m.start_time).is_none() {
        return Err(err(format!(
            "X-Ray {what} {name:?}: start_time is missing or not a number of epoch seconds from 1970 to 2554"
        )));
    }
    if m.in_progress != Some(true) && seconds_to_ns(m.end_time).is_none() {
        return Err(err(format!(
            "X-Ray {what} {name:?}: end_time is missing or not a number of epoch seconds from 1970 to 2554"
        )));
    }
    for s in m.subsegments.iter().flatten() {
        check(s, "subsegment")?;
    }
    Ok(())
}

impl Document<'_> {
    /// The trace ID of the document.
    pub fn trace_id(&self) -> Result<[u8; 16], TranslateError> {
        let t = self
            .root
            .trace_id
            .as_deref()
            .ok_or_else(|| err("X-Ray: trace_id is missing"))?;
        parse_trace_id(t).ok_or_else(|| err(format!("X-Ray: trace_id {t:?} is not 1-{{8 hex}}-{{24 hex}}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;

    pub(super) const SEGMENT: &str = r#"{"format":"json","version":1}
{"name":"checkout","id":"70de5b6f19ff9a0a","trace_id":"1-5759e988-bd862e3fe1be46a994272793",
 "start_time":1.478293361271E9,"end_time":1.478293361449E9,"origin":"AWS::EC2::Instance",
 "http":{"request":{"method":"GET","url":"http://shop/cart","client_ip":"10.0.0.9"},"response":{"status":500}},
 "fault":true,"annotations":{"customer":"c-1","items":3},"metadata":{"debug":{"cart":{"size":3}}},
 "aws":{"xray":{"sdk":"X-Ray for Python","sdk_version":"2.15.0"},"ec2":{"instance_id":"i-1"}},
 "cause":{"exceptions":[{"id":"e1","type":"ValueError","message":"bad cart","stack":[{"label":"pay","path":"app.py","line":12}]}]},
 "subsegments":[{"name":"payments","id":"53995c3f42cd8ad8","start_time":1.478293361300E9,"end_time":1.478293361400E9,
   "namespace":"remote","http":{"request":{"method":"POST","url":"http://pay/charge"},"response":{"status":200}},
   "subsegments":[{"name":"serialize","id":"1111111111111111","start_time":1.4782933613E9,"end_time":1.4782933614E9}]},
  {"name":"later","id":"2222222222222222","start_time":1.4782933613E9,"in_progress":true}]}"#;

    #[test]
    fn segment_tree_becomes_spans() {
        let doc = parse(split_datagram(SEGMENT.as_bytes()).unwrap()).unwrap();
        let (otlp, n) = doc.to_otlp().unwrap();
        assert_eq!(n, 3, "the in-progress subsegment is left for its complete form");
        let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
        let rs = &req.resource_spans[0];
        let res: Vec<&str> = rs
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .collect();
        assert!(
            res.contains(&"service.name") && res.contains(&"host.id") && res.contains(&"telemetry.sdk.language"),
            "{res:?}"
        );
        let spans = &rs.scope_spans[0].spans;
        let (seg, pay, ser) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(weft_core::hex(&seg.trace_id), "5759e988bd862e3fe1be46a994272793");
        assert_eq!(seg.kind, 2);
        assert_eq!(seg.start_time_unix_nano, 1_478_293_361_271_000_000);
        // The 500 and the cause make an error; an exception object gives no message.
        assert_eq!(seg.status.as_ref().unwrap().code, 2);
        assert_eq!(seg.status.as_ref().unwrap().message, "");
        assert_eq!(seg.events[0].name, "exception");
        let keys: Vec<&str> = seg.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert!(
            keys.contains(&"customer")
                && keys.contains(&"aws.xray.annotations")
                && keys.contains(&"aws.xray.metadata.debug")
                && keys.contains(&"http.status_code")
        );
        assert_eq!((pay.kind, pay.parent_span_id.as_ref()), (3, &seg.span_id[..]));
        assert_eq!((ser.kind, ser.parent_span_id.as_ref()), (1, &pay.span_id[..]));
    }

    fn convert(doc: &str) -> Result<ExportTraceServiceRequest, TranslateError> {
        let d = parse(doc.as_bytes())?;
        let (otlp, _) = d.to_otlp()?;
        Ok(ExportTraceServiceRequest::decode(&otlp[..]).unwrap())
    }

    fn attr(s: &weft_otlp::pb::trace::Span, k: &str) -> Option<String> {
        s.attributes
            .iter()
            .find(|a| a.key == k)
            .map(|a| format!("{:?}", a.value.as_ref().unwrap().value.as_ref().unwrap()))
    }

    const BASE: &str = r#""trace_id":"1-5759e988-bd862e3fe1be46a994272793","start_time":1,"end_time":2"#;

    #[test]
    fn collector_rules_for_kinds_status_and_blocks() {
        // A subsegment in the aws namespace: a client, aws.service; an exception ID as cause
        // is the status message; retries; an in_progress false is kept.
        let r = convert(&format!(
            r#"{{"name":"web","id":"70de5b6f19ff9a0a",{BASE},"subsegments":[{{"name":"DynamoDB","id":"53995c3f42cd8ad8",
               "start_time":1,"end_time":2,"namespace":"aws","cause":"e-77","in_progress":false,
               "aws":{{"operation":"GetItem","retries":2}},
               "http":{{"request":{{"x_forwarded_for":true}},"response":{{"status":404,"content_length":"12"}}}}}},
               {{"name":"local","id":"1111111111111111","start_time":1,"end_time":2,"http":{{"request":{{"client_ip":"1.2.3.4"}}}},
                 "metadata":{{"m":{{"b":"<a&b>","a":1}}}}}}]}}"#
        ))
        .unwrap();
        let spans = &r.resource_spans[0].scope_spans[0].spans;
        let (ddb, local) = (&spans[1], &spans[2]);
        assert_eq!(ddb.kind, 3);
        assert_eq!(attr(ddb, "aws.service").unwrap(), r#"StringValue("DynamoDB")"#);
        assert_eq!(ddb.status.as_ref().unwrap().message, "e-77");
        assert_eq!(attr(ddb, "aws.xray.retries").unwrap(), "IntValue(2)");
        assert_eq!(attr(ddb, "aws.xray.inprogress").unwrap(), "BoolValue(false)");
        assert_eq!(attr(ddb, "aws.xray.x_forwarded_for").unwrap(), "BoolValue(true)");
        assert_eq!(
            attr(ddb, "http.response_content_length").unwrap(),
            r#"StringValue("12")"#
        );
        assert_eq!(local.kind, 2, "a client IP makes a server");
        assert_eq!(local.status, None);
        // Metadata as Go marshals it: sorted keys, HTML characters escaped.
        assert_eq!(
            attr(local, "aws.xray.metadata.m").unwrap(),
            r#"StringValue("{\"a\":1,\"b\":\"\\u003ca\\u0026b\\u003e\"}")"#
        );
        // Without an aws block the provider is unknown.
        let res = &r.resource_spans[0].resource.as_ref().unwrap().attributes;
        assert!(
            res.iter()
                .any(|a| a.key == "cloud.provider" && format!("{:?}", a.value).contains("unknown"))
        );
    }

    #[test]
    fn documents_the_collector_refuses_are_refused() {
        for (doc, words) in [
            (
                format!(r#"{{"name":"a","id":"70de5b6f19ff9a0a",{BASE},"namespace":"elsewhere"}}"#),
                "namespace",
            ),
            (
                format!(r#"{{"name":"a","id":"70de5b6f19ff9a0a",{BASE},"sql":{{"url":"nodb"}}}}"#),
                "sql.url",
            ),
            (
                format!(r#"{{"name":"a","id":"70de5b6f19ff9a0a",{BASE},"metadata":{{"m":3}}}}"#),
                "metadata",
            ),
            (
                format!(r#"{{"name":"a","id":"70de5b6f19ff9a0a",{BASE},"parent_id":"xyz"}}"#),
                "parent_id",
            ),
            (
                format!(r#"{{"name":"a","id":"70de5b6f19ff9a0a",{BASE},"http":{{"response":{{"status":"ok"}}}}}}"#),
                "malformed",
            ),
            (
                format!(r#"{{"name":"a","id":"70de5b6f19ff9a0a",{BASE},"user":7}}"#),
                "malformed",
            ),
        ] {
            let e = convert(&doc).unwrap_err();
            assert!(e.0.contains(words), "{doc}: {e}");
        }
    }

    #[test]
    fn trace_ids_map_both_ways() {
        let id = parse_trace_id("1-5759e988-bd862e3fe1be46a994272793").unwrap();
        assert_eq!(format_trace_id(&id), "1-5759e988-bd862e3fe1be46a994272793");
        assert!(parse_trace_id("1-5759e988-bd86").is_none());
        assert!(parse_trace_id("2-5759e988-bd862e3fe1be46a994272793").is_none());
    }

    #[test]
    fn bad_documents_are_refused() {
        assert!(split_datagram(b"{}").is_err());
        assert!(split_datagram(b"{\"format\":\"xml\",\"version\":1}\n{}").is_err());
        assert!(parse(b"{\"id\":\"70de5b6f19ff9a0a\"}").unwrap_err().0.contains("name"));
        assert!(
            parse(b"{\"name\":\"a\",\"id\":\"xyz\",\"start_time\":1,\"end_time\":2}")
                .unwrap_err()
                .0
                .contains("16 hex")
        );
        let d = parse(
            b"{\"name\":\"a\",\"id\":\"70de5b6f19ff9a0a\",\"start_time\":1,\"end_time\":2,\"trace_id\":\"nope\"}",
        )
        .unwrap();
        assert!(d.to_otlp().unwrap_err().0.contains("trace_id"));
        // Times that u64 nanoseconds cannot hold are refused, not wrapped (found by fuzzing).
        let at = |start: &str, end: &str| {
            format!(
                "{{\"name\":\"a\",\"id\":\"70de5b6f19ff9a0a\",\"trace_id\":\"1-5759e988-bd862e3fe1be46a994272793\",\"start_time\":{start},\"end_time\":{end}}}"
            )
        };
        for (start, end, field) in [
            ("21478293361", "21478293362", "start_time"),
            ("1", "1e300", "end_time"),
            ("-1", "2", "start_time"),
        ] {
            let e = parse(at(start, end).as_bytes()).unwrap_err().0;
            assert!(e.contains(field) && e.contains("1970 to 2554"), "{e}");
        }
        let doc = at("18000000000", "18000000000.5");
        let d = parse(doc.as_bytes()).unwrap();
        let (otlp, _) = d.to_otlp().unwrap();
        let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
        let s = &req.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(s.start_time_unix_nano, 18_000_000_000_000_000_000);
        assert_eq!(s.end_time_unix_nano, 18_000_000_000_500_000_000);
    }

    /// `spec/formats/vectors/xray.json`: each datagram becomes the expected OTLP (as OTLP/JSON),
    /// or is refused naming the problem.
    #[test]
    fn spec_vectors() {
        crate::vectors::run("xray.json", |v| {
            let input = crate::vectors::input(v);
            let doc = parse(split_datagram(&input)?)?;
            let (otlp, _) = doc.to_otlp()?;
            let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
            Ok(serde_json::json!({ "otlp": weft_otlp::json::resource_spans_to_json(&req.resource_spans) }))
        });
    }

    mod no_panic {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// Random and mangled datagrams: refused, or a valid request with the span count.
            #[test]
            fn refused_or_converted(
                raw in proptest::collection::vec(any::<u8>(), 0..300),
                flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
                cut in 0usize..2000,
            ) {
                let mut mangled = SEGMENT.as_bytes().to_vec();
                for (at, v) in flips {
                    let n = mangled.len();
                    mangled[at % n] = v;
                }
                mangled.truncate(cut.max(1));
                for input in [raw, mangled] {
                    let Ok(doc) = split_datagram(&input).and_then(parse) else { continue };
                    if let Ok((otlp, n)) = doc.to_otlp() {
                        crate::assert_valid_conversion(&otlp);
                        let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
                        let spans: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
                        prop_assert_eq!(spans, n);
                    }
                }
            }
        }
    }
}
