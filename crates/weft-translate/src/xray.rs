//! AWS X-Ray: segment documents as the X-Ray SDKs send them to the daemon over UDP (a header
//! line `{"format":"json","version":1}`, a newline, then one segment or independent subsegment
//! document), written as OTLP by the rules of the OpenTelemetry Collector's X-Ray receiver, and
//! X-Ray trace IDs mapped to and from 128-bit IDs as its X-Ray exporter does
//! (`1-5759e988-bd862e3fe1be46a994272793` is the 16 bytes `5759e988bd862e3fe1be46a994272793`),
//! so a trace crossing X-Ray- and OpenTelemetry-instrumented services stays one trace.

use std::borrow::Cow;

use serde_json::{Map, Value as Json};

use crate::TranslateError;
use crate::otlp::{RequestWriter, SpanWriter, Value, kind, status};

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
    let id = crate::parse_hex_id::<16>(&format!("{epoch}{random}"))?;
    (id != [0; 16]).then_some(id)
}

/// The X-Ray form of a 128-bit trace ID.
pub fn format_trace_id(id: &[u8; 16]) -> String {
    let h = weft_core::hex(id);
    format!("1-{}-{}", &h[..8], &h[8..])
}

/// Splits a daemon datagram into its header and its document, checking the header.
pub fn split_datagram(d: &[u8]) -> Result<&[u8], TranslateError> {
    let nl = d
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| err("X-Ray: no header line (expected {\"format\":\"json\",\"version\":1} and a newline)"))?;
    let header: Json = serde_json::from_slice(&d[..nl]).map_err(|e| err(format!("X-Ray: malformed header: {e}")))?;
    if header.get("format").and_then(Json::as_str) != Some("json")
        || header.get("version").and_then(Json::as_i64) != Some(1)
    {
        return Err(err(format!("X-Ray: unsupported header {header}")));
    }
    Ok(&d[nl + 1..])
}

/// A segment document, parsed.
#[derive(Debug)]
pub struct Document {
    doc: Map<String, Json>,
}

/// Parses one segment or independent subsegment document.
pub fn parse(body: &[u8]) -> Result<Document, TranslateError> {
    let v: Json = serde_json::from_slice(body).map_err(|e| err(format!("X-Ray: malformed segment document: {e}")))?;
    let Json::Object(doc) = v else {
        return Err(err("X-Ray: a segment document must be a JSON object"));
    };
    let d = Document { doc };
    d.check(&d.doc, "segment")?;
    Ok(d)
}

fn str_of<'a>(m: &'a Map<String, Json>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Json::as_str)
}

fn obj<'a>(m: &'a Map<String, Json>, k: &str) -> Option<&'a Map<String, Json>> {
    m.get(k).and_then(Json::as_object)
}

/// Epoch seconds (a float) as nanoseconds, rounded to the microsecond: an f64 holds today's
/// epoch seconds to about 0.2 µs, and the SDKs write microseconds, so the microsecond is exact
/// and the nanoseconds below it are noise.
fn seconds_to_ns(v: Option<&Json>) -> Option<u64> {
    let f = v?.as_f64()?;
    (0.0..1e11).contains(&f).then(|| (f * 1e6).round() as u64 * 1000)
}

impl Document {
    /// Checks the fields the conversion relies on, in this (sub)segment and those it nests.
    fn check(&self, m: &Map<String, Json>, what: &str) -> Result<(), TranslateError> {
        let name = str_of(m, "name").ok_or_else(|| err(format!("X-Ray {what}: \"name\" is missing")))?;
        let id = str_of(m, "id").ok_or_else(|| err(format!("X-Ray {what} {name:?}: \"id\" is missing")))?;
        if id.len() != 16 || crate::parse_hex_id::<8>(id).is_none_or(|i| i == [0; 8]) {
            return Err(err(format!("X-Ray {what} {name:?}: id {id:?} is not 16 hex digits")));
        }
        if seconds_to_ns(m.get("start_time")).is_none() {
            return Err(err(format!(
                "X-Ray {what} {name:?}: start_time is missing or not a number"
            )));
        }
        let in_progress = m.get("in_progress").and_then(Json::as_bool) == Some(true);
        if !in_progress && seconds_to_ns(m.get("end_time")).is_none() {
            return Err(err(format!(
                "X-Ray {what} {name:?}: end_time is missing or not a number"
            )));
        }
        for s in m.get("subsegments").and_then(Json::as_array).into_iter().flatten() {
            let s = s
                .as_object()
                .ok_or_else(|| err(format!("X-Ray {what} {name:?}: a subsegment is not an object")))?;
            self.check(s, "subsegment")?;
        }
        Ok(())
    }

    /// The trace ID of the document.
    pub fn trace_id(&self) -> Result<[u8; 16], TranslateError> {
        let t = str_of(&self.doc, "trace_id").ok_or_else(|| err("X-Ray: trace_id is missing"))?;
        parse_trace_id(t).ok_or_else(|| err(format!("X-Ray: trace_id {t:?} is not 1-{{8 hex}}-{{24 hex}}")))
    }

    /// Writes the document (the segment and every nested subsegment; nothing for a segment
    /// still in progress, whose complete form follows) as one OTLP request. Returns the request
    /// and its span count.
    pub fn to_otlp(&self) -> Result<(Vec<u8>, usize), TranslateError> {
        let trace_id = self.trace_id()?;
        let d = &self.doc;
        let mut w = RequestWriter::with_capacity(1024);
        let mut res: Vec<(&str, Value<'_>)> = Vec::new();
        // A segment names its service; an independent subsegment belongs to its segment's
        // service, which the datagram does not say, so it names none.
        let independent = str_of(d, "type") == Some("subsegment");
        if !independent {
            res.push((
                "service.name",
                Value::Str(Cow::Borrowed(str_of(d, "name").unwrap_or(""))),
            ));
        }
        if let Some(v) = obj(d, "service").and_then(|s| str_of(s, "version")) {
            res.push(("service.version", Value::Str(Cow::Borrowed(v))));
        }
        if let Some(aws) = obj(d, "aws") {
            res.push(("cloud.provider", Value::Str(Cow::Borrowed("aws"))));
            if let Some(x) = obj(aws, "xray") {
                if let Some(v) = str_of(x, "sdk") {
                    res.push(("telemetry.sdk.name", Value::Str(Cow::Borrowed(v))));
                }
                if let Some(v) = str_of(x, "sdk_version") {
                    res.push(("telemetry.sdk.version", Value::Str(Cow::Borrowed(v))));
                }
            }
            if let Some(ec2) = obj(aws, "ec2") {
                if let Some(v) = str_of(ec2, "instance_id") {
                    res.push(("host.id", Value::Str(Cow::Borrowed(v))));
                }
                if let Some(v) = str_of(ec2, "availability_zone") {
                    res.push(("cloud.availability_zone", Value::Str(Cow::Borrowed(v))));
                }
            }
        }
        if let Some(origin) = str_of(d, "origin") {
            let platform = match origin {
                "AWS::EC2::Instance" => Some("aws_ec2"),
                "AWS::ECS::Container" => Some("aws_ecs"),
                "AWS::ElasticBeanstalk::Environment" => Some("aws_elastic_beanstalk"),
                "AWS::EKS::Container" => Some("aws_eks"),
                "AWS::Lambda::Function" | "AWS::Lambda" => Some("aws_lambda"),
                _ => None,
            };
            if let Some(p) = platform {
                res.push(("cloud.platform", Value::Str(Cow::Borrowed(p))));
            }
        }
        w.resource(res.iter().map(|(k, v)| (*k, v)));
        w.scope("", "");
        let mut n = 0;
        self.write(&mut w, d, &trace_id, None, !independent, &mut n);
        Ok((w.finish(), n))
    }

    fn write(
        &self,
        w: &mut RequestWriter,
        m: &Map<String, Json>,
        trace_id: &[u8; 16],
        parent: Option<[u8; 8]>,
        segment: bool,
        n: &mut usize,
    ) {
        if m.get("in_progress").and_then(Json::as_bool) == Some(true) {
            return;
        }
        let id = crate::parse_hex_id::<8>(str_of(m, "id").unwrap_or("")).unwrap_or([0; 8]);
        let parent = parent.or_else(|| str_of(m, "parent_id").and_then(crate::parse_hex_id::<8>));
        {
            let mut sw = w.span();
            write_span(&mut sw, m, trace_id, &id, parent.as_ref(), segment);
        }
        *n += 1;
        for s in m.get("subsegments").and_then(Json::as_array).into_iter().flatten() {
            if let Some(s) = s.as_object() {
                self.write(w, s, trace_id, Some(id), false, n);
            }
        }
    }
}

fn json_value(v: &Json) -> Option<Value<'_>> {
    Some(match v {
        Json::String(s) => Value::Str(Cow::Borrowed(s)),
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(x) => match x.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Double(x.as_f64()?),
        },
        _ => return None,
    })
}

fn write_span(
    sw: &mut SpanWriter<'_>,
    m: &Map<String, Json>,
    trace_id: &[u8; 16],
    id: &[u8; 8],
    parent: Option<&[u8; 8]>,
    segment: bool,
) {
    sw.ids(trace_id, id, parent);
    sw.name(str_of(m, "name").unwrap_or(""));
    let namespace = str_of(m, "namespace");
    let k = if segment {
        kind::SERVER
    } else if matches!(namespace, Some("remote" | "aws")) {
        kind::CLIENT
    } else {
        kind::INTERNAL
    };
    sw.kind(k);
    let start = seconds_to_ns(m.get("start_time")).unwrap_or(0);
    sw.times(start, seconds_to_ns(m.get("end_time")).unwrap_or(start).max(start));
    if let Some(ns) = namespace {
        sw.str_attr("aws.xray.namespace", ns);
    }
    if let Some(http) = obj(m, "http") {
        if let Some(req) = obj(http, "request") {
            for (from, to) in [
                ("method", "http.method"),
                ("url", "http.url"),
                ("user_agent", "http.user_agent"),
                ("client_ip", "http.client_ip"),
                ("x_forwarded_for", "http.x_forwarded_for"),
            ] {
                if let Some(v) = req.get(from).and_then(json_value) {
                    sw.attr(to, &v);
                }
            }
        }
        if let Some(resp) = obj(http, "response") {
            if let Some(v) = resp.get("status").and_then(json_value) {
                sw.attr("http.status_code", &v);
            }
            if let Some(v) = resp.get("content_length").and_then(json_value) {
                sw.attr("http.response_content_length", &v);
            }
        }
    }
    if let Some(sql) = obj(m, "sql") {
        for (from, to) in [
            ("url", "db.connection_string"),
            ("sanitized_query", "db.statement"),
            ("database_type", "db.system"),
            ("user", "db.user"),
            ("database_version", "db.version"),
            ("driver_version", "db.driver_version"),
        ] {
            if let Some(v) = sql.get(from).and_then(json_value) {
                sw.attr(to, &v);
            }
        }
    }
    if let Some(aws) = obj(m, "aws") {
        for (from, to) in [
            ("operation", "aws.operation"),
            ("region", "aws.region"),
            ("request_id", "aws.request_id"),
            ("queue_url", "aws.queue_url"),
            ("table_name", "aws.table_name"),
            ("account_id", "aws.account_id"),
        ] {
            if let Some(v) = aws.get(from).and_then(json_value) {
                sw.attr(to, &v);
            }
        }
    }
    if let Some(user) = str_of(m, "user") {
        sw.str_attr("enduser.id", user);
    }
    for (k, v) in obj(m, "annotations").into_iter().flatten() {
        if let Some(v) = json_value(v) {
            sw.attr(k, &v);
        }
    }
    for (ns, v) in obj(m, "metadata").into_iter().flatten() {
        sw.str_attr(&format!("aws.xray.metadata.{ns}"), &v.to_string());
    }
    let flag = |k: &str| m.get(k).and_then(Json::as_bool) == Some(true);
    if flag("throttle") {
        sw.attr("aws.xray.throttle", &Value::Bool(true));
    }
    // Exceptions: one `exception` event each; the first one's message is the status message.
    let mut message = String::new();
    if let Some(cause) = obj(m, "cause") {
        for e in cause.get("exceptions").and_then(Json::as_array).into_iter().flatten() {
            let Some(e) = e.as_object() else { continue };
            let ty = Value::Str(Cow::Borrowed(str_of(e, "type").unwrap_or("")));
            let msg = Value::Str(Cow::Borrowed(str_of(e, "message").unwrap_or("")));
            let stack: Vec<String> = e
                .get("stack")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| {
                    let f = f.as_object()?;
                    Some(format!(
                        "at {} ({}:{})",
                        str_of(f, "label").unwrap_or("?"),
                        str_of(f, "path").unwrap_or("?"),
                        f.get("line").and_then(Json::as_i64).unwrap_or(0)
                    ))
                })
                .collect();
            let stack = Value::Str(Cow::Owned(stack.join("\n")));
            if message.is_empty() {
                message = str_of(e, "message").unwrap_or("").to_owned();
            }
            sw.event(
                start,
                "exception",
                [
                    ("exception.type", &ty),
                    ("exception.message", &msg),
                    ("exception.stacktrace", &stack),
                ],
                0,
            );
        }
    }
    // fault (5xx) and error (4xx) are errors; a span without either, with a response, is OK
    // by its status code's class only if the SDK says so, so it stays unset.
    if flag("fault") || flag("error") {
        sw.status(status::ERROR, &message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;

    const SEGMENT: &str = r#"{"format":"json","version":1}
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
            res.contains(&"service.name") && res.contains(&"cloud.platform") && res.contains(&"host.id"),
            "{res:?}"
        );
        let spans = &rs.scope_spans[0].spans;
        let (seg, pay, ser) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(weft_core::hex(&seg.trace_id), "5759e988bd862e3fe1be46a994272793");
        assert_eq!(seg.kind, 2);
        assert_eq!(seg.start_time_unix_nano, 1_478_293_361_271_000_000);
        assert_eq!(seg.status.as_ref().unwrap().code, 2);
        assert_eq!(seg.status.as_ref().unwrap().message, "bad cart");
        assert_eq!(seg.events[0].name, "exception");
        let keys: Vec<&str> = seg.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert!(
            keys.contains(&"customer")
                && keys.contains(&"aws.xray.metadata.debug")
                && keys.contains(&"http.status_code")
        );
        assert_eq!((pay.kind, pay.parent_span_id.as_ref()), (3, &seg.span_id[..]));
        assert_eq!((ser.kind, ser.parent_span_id.as_ref()), (1, &pay.span_id[..]));
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
                        let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
                        let spans: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
                        prop_assert_eq!(spans, n);
                    }
                }
            }
        }
    }
}
