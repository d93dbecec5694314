//! Segment documents read by the JSON scanner ([`crate::scan`]): the receiver's hot path.
//! serde_json's derive-based reader ([`super::parse_serde`], kept as the reference the tests
//! and the fuzz target compare this one with) was about a quarter of the receiver's CPU: it
//! checked every string as UTF-8 again, moved each subsegment's large struct as the vector of
//! subsegments grew, and built a map of owned strings for annotations and metadata.
//!
//! It reads the same typed model and accepts what the reference accepts, with documented
//! differences that no SDK produces (`spec/formats/xray.md`): a field given twice takes its
//! last value (as the Collector's Go reader does; serde refuses it); a block written as a JSON
//! array instead of an object is refused (serde reads it as the fields in order); bytes that
//! are not UTF-8, and `\u` escapes of lone surrogates, are refused wherever they are (serde
//! lets them pass inside a field it skips); nesting is bounded per value (64 levels below a
//! skipped field, 63 levels of subsegments) where serde counts 128 containers in the document
//! and skips unknown fields without a bound; and numbers are read to the nearest double
//! (serde's default reader may be one unit off in the last place).

use std::borrow::Cow;

use super::{
    Annotation, Aws, Beanstalk, Cause, CauseObject, Ec2, Ecs, Eks, Exception, Frame, Http, HttpRequest, HttpResponse,
    Length, LogGroup, Pairs, Segment, Service, Sql, Text, XRayData,
};
use crate::TranslateError;
use crate::scan::Scanner;

/// How deep subsegments may nest: serde_json's limit of 128 containers, at two per level.
const MAX_LEVELS: usize = 63;

mod key {
    use crate::scan::pack;
    pub const NAME: u128 = pack(b"name");
    pub const ID: u128 = pack(b"id");
    pub const START_TIME: u128 = pack(b"start_time");
    pub const END_TIME: u128 = pack(b"end_time");
    pub const SERVICE: u128 = pack(b"service");
    pub const USER: u128 = pack(b"user");
    pub const RESOURCE_ARN: u128 = pack(b"resource_arn");
    pub const TRACE_ID: u128 = pack(b"trace_id");
    pub const IN_PROGRESS: u128 = pack(b"in_progress");
    pub const HTTP: u128 = pack(b"http");
    pub const CAUSE: u128 = pack(b"cause");
    pub const AWS: u128 = pack(b"aws");
    pub const ANNOTATIONS: u128 = pack(b"annotations");
    pub const METADATA: u128 = pack(b"metadata");
    pub const SUBSEGMENTS: u128 = pack(b"subsegments");
    pub const NAMESPACE: u128 = pack(b"namespace");
    pub const PARENT_ID: u128 = pack(b"parent_id");
    pub const TYPE: u128 = pack(b"type");
    pub const TRACED: u128 = pack(b"traced");
    pub const SQL: u128 = pack(b"sql");
    pub const ORIGIN: u128 = pack(b"origin");
    pub const FAULT: u128 = pack(b"fault");
    pub const ERROR: u128 = pack(b"error");
    pub const THROTTLE: u128 = pack(b"throttle");
    pub const PRECURSOR_IDS: u128 = pack(b"precursor_ids");
    pub const VERSION: u128 = pack(b"version");
    pub const REQUEST: u128 = pack(b"request");
    pub const RESPONSE: u128 = pack(b"response");
    pub const X_FORWARDED_FOR: u128 = pack(b"x_forwarded_for");
    pub const METHOD: u128 = pack(b"method");
    pub const URL: u128 = pack(b"url");
    pub const USER_AGENT: u128 = pack(b"user_agent");
    pub const CLIENT_IP: u128 = pack(b"client_ip");
    pub const STATUS: u128 = pack(b"status");
    pub const CONTENT_LENGTH: u128 = pack(b"content_length");
    pub const EXCEPTIONS: u128 = pack(b"exceptions");
    pub const MESSAGE: u128 = pack(b"message");
    pub const REMOTE: u128 = pack(b"remote");
    pub const TRUNCATED: u128 = pack(b"truncated");
    pub const SKIPPED: u128 = pack(b"skipped");
    pub const STACK: u128 = pack(b"stack");
    pub const PATH: u128 = pack(b"path");
    pub const LINE: u128 = pack(b"line");
    pub const LABEL: u128 = pack(b"label");
    pub const CLOUDWATCH_LOGS: u128 = pack(b"cloudwatch_logs");
    pub const ECS: u128 = pack(b"ecs");
    pub const EC2: u128 = pack(b"ec2");
    pub const EKS: u128 = pack(b"eks");
    pub const XRAY: u128 = pack(b"xray");
    pub const ACCOUNT_ID: u128 = pack(b"account_id");
    pub const OPERATION: u128 = pack(b"operation");
    pub const REGION: u128 = pack(b"region");
    pub const REQUEST_ID: u128 = pack(b"request_id");
    pub const QUEUE_URL: u128 = pack(b"queue_url");
    pub const TABLE_NAME: u128 = pack(b"table_name");
    pub const TABLE_NAMES: u128 = pack(b"table_names");
    pub const RETRIES: u128 = pack(b"retries");
    pub const VERSION_LABEL: u128 = pack(b"version_label");
    pub const DEPLOYMENT_ID: u128 = pack(b"deployment_id");
    pub const LOG_GROUP: u128 = pack(b"log_group");
    pub const ARN: u128 = pack(b"arn");
    pub const CONTAINER: u128 = pack(b"container");
    pub const CONTAINER_ID: u128 = pack(b"container_id");
    pub const INSTANCE_ID: u128 = pack(b"instance_id");
    pub const INSTANCE_SIZE: u128 = pack(b"instance_size");
    pub const AMI_ID: u128 = pack(b"ami_id");
    pub const CLUSTER_NAME: u128 = pack(b"cluster_name");
    pub const POD: u128 = pack(b"pod");
    pub const SDK: u128 = pack(b"sdk");
    pub const SDK_VERSION: u128 = pack(b"sdk_version");
    pub const SANITIZED_QUERY: u128 = pack(b"sanitized_query");
    pub const DATABASE_TYPE: u128 = pack(b"database_type");
}

/// Keys longer than 15 bytes, which pack to 0, are matched by their text.
const ELASTIC_BEANSTALK: &str = "elastic_beanstalk";
const AVAILABILITY_ZONE: &str = "availability_zone";
const ENVIRONMENT_NAME: &str = "environment_name";

/// Parses a segment or independent subsegment document into the model serde reads.
pub(super) fn segment_document(body: &[u8]) -> Result<Segment<'_>, TranslateError> {
    let mut s = Scanner::new(body, "X-Ray segment document")?;
    let seg = segment(&mut s, 0)?;
    s.end()?;
    Ok(seg)
}

type R<T> = Result<T, TranslateError>;

fn text<'a>(s: &mut Scanner<'a>) -> R<Text<'a>> {
    s.opt_string()
}

fn opt_f64(s: &mut Scanner<'_>) -> R<Option<f64>> {
    if s.null()? { Ok(None) } else { s.f64().map(Some) }
}

fn opt_i64(s: &mut Scanner<'_>) -> R<Option<i64>> {
    if s.null()? { Ok(None) } else { s.i64().map(Some) }
}

/// `null` or an object read by `f`.
fn opt_object<'a, T: Default>(
    s: &mut Scanner<'a>,
    mut f: impl FnMut(&mut Scanner<'a>, &mut T, u128, &str) -> R<()>,
) -> R<Option<T>> {
    if s.null()? {
        return Ok(None);
    }
    let mut v = T::default();
    s.object(|s, k| {
        let name = s.last_key()?;
        f(s, &mut v, k, &name)
    })?;
    Ok(Some(v))
}

/// An array (not `null`, as serde refuses `null` for a vector) of what `f` reads.
fn vec<'a, T>(s: &mut Scanner<'a>, mut f: impl FnMut(&mut Scanner<'a>) -> R<T>) -> R<Vec<T>> {
    let mut out = Vec::new();
    if s.peek() == Some(b'n') {
        return Err(s.malformed("expected an array, found null", s.i));
    }
    s.array(|s| {
        out.push(f(s)?);
        Ok(())
    })?;
    Ok(out)
}

/// An array of strings, or `null`.
fn opt_strings<'a>(s: &mut Scanner<'a>) -> R<Option<Vec<Cow<'a, str>>>> {
    if s.null()? {
        return Ok(None);
    }
    vec(s, |s| s.string()).map(Some)
}

fn segment<'a>(s: &mut Scanner<'a>, level: usize) -> R<Segment<'a>> {
    if level > MAX_LEVELS {
        return Err(s.malformed("subsegments nest too deep", s.i));
    }
    let mut m = Segment::default();
    if s.peek() != Some(b'{') {
        return Err(s.malformed("expected a segment object", s.i));
    }
    s.object(|s, k| {
        match k {
            key::NAME => m.name = text(s)?,
            key::ID => m.id = text(s)?,
            key::START_TIME => m.start_time = opt_f64(s)?,
            key::END_TIME => m.end_time = opt_f64(s)?,
            key::SERVICE => {
                m.service = opt_object(s, |s, v: &mut Service<'a>, k, _| {
                    match k {
                        key::VERSION => v.version = text(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::USER => m.user = text(s)?,
            key::RESOURCE_ARN => m.resource_arn = text(s)?,
            key::TRACE_ID => m.trace_id = text(s)?,
            key::IN_PROGRESS => m.in_progress = s.bool()?,
            key::HTTP => m.http = http(s)?,
            key::CAUSE => m.cause = cause(s)?,
            key::AWS => m.aws = aws(s)?.map(Box::new),
            key::ANNOTATIONS => m.annotations = annotations(s)?,
            key::METADATA => m.metadata = metadata(s)?,
            key::SUBSEGMENTS => {
                m.subsegments = if s.null()? {
                    None
                } else {
                    Some(vec(s, |s| segment(s, level + 1))?)
                }
            }
            key::NAMESPACE => m.namespace = text(s)?,
            key::PARENT_ID => m.parent_id = text(s)?,
            key::TYPE => m.kind = text(s)?,
            key::TRACED => m.traced = s.bool()?,
            key::SQL => m.sql = sql(s)?,
            key::ORIGIN => m.origin = text(s)?,
            key::FAULT => m.fault = s.bool()?,
            key::ERROR => m.error = s.bool()?,
            key::THROTTLE => m.throttle = s.bool()?,
            key::PRECURSOR_IDS => m.precursor_ids = opt_strings(s)?,
            _ => s.skip(0)?,
        }
        Ok(())
    })?;
    Ok(m)
}

fn http<'a>(s: &mut Scanner<'a>) -> R<Option<Http<'a>>> {
    opt_object(s, |s, h: &mut Http<'a>, k, _| {
        match k {
            key::REQUEST => {
                h.request = opt_object(s, |s, r: &mut HttpRequest<'a>, k, _| {
                    match k {
                        key::X_FORWARDED_FOR => r.x_forwarded_for = s.bool()?,
                        key::METHOD => r.method = text(s)?,
                        key::URL => r.url = text(s)?,
                        key::USER_AGENT => r.user_agent = text(s)?,
                        key::CLIENT_IP => r.client_ip = text(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::RESPONSE => {
                h.response = opt_object(s, |s, r: &mut HttpResponse<'a>, k, _| {
                    match k {
                        key::STATUS => r.status = opt_i64(s)?,
                        // Any JSON value: a number or a text is kept, anything else ignored.
                        key::CONTENT_LENGTH => {
                            r.content_length = match s.peek() {
                                Some(b'n') => s.null().map(|_| None)?,
                                Some(b'"') => Some(Length::Text(s.string()?)),
                                Some(b'-' | b'0'..=b'9') => Some(Length::Number(s.f64()?)),
                                _ => s.skip_kept(0).map(|_| Some(Length::Other(serde::de::IgnoredAny)))?,
                            }
                        }
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            _ => s.skip(0)?,
        }
        Ok(())
    })
}

/// An exception ID (text) or an object of exceptions.
fn cause<'a>(s: &mut Scanner<'a>) -> R<Option<Cause<'a>>> {
    match s.peek() {
        Some(b'n') => s.null().map(|_| None),
        Some(b'"') => Ok(Some(Cause::Id(s.string()?))),
        Some(b'{') => {
            let mut o = CauseObject::default();
            s.object(|s, k| {
                match k {
                    key::EXCEPTIONS => o.exceptions = vec(s, exception)?,
                    _ => s.skip_kept(0)?,
                }
                Ok(())
            })?;
            Ok(Some(Cause::Object(o)))
        }
        _ => Err(s.malformed("cause is neither an exception ID nor an object", s.i)),
    }
}

fn exception<'a>(s: &mut Scanner<'a>) -> R<Exception<'a>> {
    let mut e = Exception::default();
    if s.peek() != Some(b'{') {
        return Err(s.malformed("expected an exception object", s.i));
    }
    s.object(|s, k| {
        match k {
            key::ID => e.id = text(s)?,
            key::MESSAGE => e.message = text(s)?,
            key::TYPE => e.kind = text(s)?,
            key::REMOTE => e.remote = s.bool()?,
            key::TRUNCATED => e.truncated = opt_i64(s)?,
            key::SKIPPED => e.skipped = opt_i64(s)?,
            key::CAUSE => e.cause = text(s)?,
            key::STACK => {
                e.stack = vec(s, |s| {
                    let mut f = Frame::default();
                    if s.peek() != Some(b'{') {
                        return Err(s.malformed("expected a stack frame object", s.i));
                    }
                    s.object(|s, k| {
                        match k {
                            key::PATH => f.path = text(s)?,
                            key::LINE => f.line = opt_i64(s)?,
                            key::LABEL => f.label = text(s)?,
                            _ => s.skip_kept(0)?,
                        }
                        Ok(())
                    })?;
                    Ok(f)
                })?
            }
            _ => s.skip_kept(0)?,
        }
        Ok(())
    })?;
    Ok(e)
}

fn aws<'a>(s: &mut Scanner<'a>) -> R<Option<Aws<'a>>> {
    opt_object(s, |s, a: &mut Aws<'a>, k, name| {
        match k {
            0 if name == ELASTIC_BEANSTALK => {
                a.elastic_beanstalk = opt_object(s, |s, b: &mut Beanstalk<'a>, k, name| {
                    match k {
                        0 if name == ENVIRONMENT_NAME => b.environment_name = text(s)?,
                        key::VERSION_LABEL => b.version_label = text(s)?,
                        key::DEPLOYMENT_ID => b.deployment_id = opt_i64(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::CLOUDWATCH_LOGS => {
                a.cloudwatch_logs = vec(s, |s| {
                    let mut g = LogGroup::default();
                    if s.peek() != Some(b'{') {
                        return Err(s.malformed("expected a log group object", s.i));
                    }
                    s.object(|s, k| {
                        match k {
                            key::LOG_GROUP => g.log_group = text(s)?,
                            key::ARN => g.arn = text(s)?,
                            _ => s.skip(0)?,
                        }
                        Ok(())
                    })?;
                    Ok(g)
                })?
            }
            key::ECS => {
                a.ecs = opt_object(s, |s, e: &mut Ecs<'a>, k, name| {
                    match k {
                        key::CONTAINER => e.container = text(s)?,
                        key::CONTAINER_ID => e.container_id = text(s)?,
                        0 if name == AVAILABILITY_ZONE => e.availability_zone = text(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::EC2 => {
                a.ec2 = opt_object(s, |s, e: &mut Ec2<'a>, k, name| {
                    match k {
                        key::INSTANCE_ID => e.instance_id = text(s)?,
                        0 if name == AVAILABILITY_ZONE => e.availability_zone = text(s)?,
                        key::INSTANCE_SIZE => e.instance_size = text(s)?,
                        key::AMI_ID => e.ami_id = text(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::EKS => {
                a.eks = opt_object(s, |s, e: &mut Eks<'a>, k, _| {
                    match k {
                        key::CLUSTER_NAME => e.cluster_name = text(s)?,
                        key::POD => e.pod = text(s)?,
                        key::CONTAINER_ID => e.container_id = text(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::XRAY => {
                a.xray = opt_object(s, |s, x: &mut XRayData<'a>, k, _| {
                    match k {
                        key::SDK => x.sdk = text(s)?,
                        key::SDK_VERSION => x.sdk_version = text(s)?,
                        _ => s.skip(0)?,
                    }
                    Ok(())
                })?
            }
            key::ACCOUNT_ID => a.account_id = text(s)?,
            key::OPERATION => a.operation = text(s)?,
            key::REGION => a.region = text(s)?,
            key::REQUEST_ID => a.request_id = text(s)?,
            key::QUEUE_URL => a.queue_url = text(s)?,
            key::TABLE_NAME => a.table_name = text(s)?,
            key::TABLE_NAMES => a.table_names = opt_strings(s)?,
            key::RETRIES => a.retries = opt_i64(s)?,
            _ => s.skip(0)?,
        }
        Ok(())
    })
}

fn sql<'a>(s: &mut Scanner<'a>) -> R<Option<Sql<'a>>> {
    opt_object(s, |s, q: &mut Sql<'a>, k, _| {
        match k {
            key::URL => q.url = text(s)?,
            key::SANITIZED_QUERY => q.sanitized_query = text(s)?,
            key::DATABASE_TYPE => q.database_type = text(s)?,
            key::USER => q.user = text(s)?,
            _ => s.skip(0)?,
        }
        Ok(())
    })
}

/// Annotations: each value as the writer uses it, keys in order and the last of a repeated key,
/// as serde_json's map holds them.
fn annotations<'a>(s: &mut Scanner<'a>) -> R<Pairs<'a, Annotation<'a>>> {
    if s.null()? {
        return Ok(None);
    }
    let mut out = Vec::new();
    s.object(|s, _| {
        let k = s.last_key()?;
        let v = match s.peek() {
            Some(b'"') => Annotation::Str(s.string()?),
            Some(b't' | b'f') => Annotation::Bool(s.bool()?.unwrap_or_default()),
            Some(b'-' | b'0'..=b'9') => Annotation::Double(s.f64()?),
            _ => {
                s.skip_kept(1)?;
                Annotation::Other
            }
        };
        out.push((k, v));
        Ok(())
    })?;
    Ok(Some(super::sorted_last_wins(out)))
}

/// Metadata: each namespace's value as its JSON text, keys as [`annotations`] keeps them.
fn metadata<'a>(s: &mut Scanner<'a>) -> R<Pairs<'a, Cow<'a, str>>> {
    if s.null()? {
        return Ok(None);
    }
    let mut out = Vec::new();
    s.object(|s, _| {
        let k = s.last_key()?;
        let raw = s.raw(1)?;
        out.push((k, Cow::Borrowed(raw)));
        Ok(())
    })?;
    Ok(Some(super::sorted_last_wins(out)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::{parse, parse_serde, split_datagram};

    type S = BoxedStrategy<Value>;

    /// The conversion of both readers: equal when both accept, and both refuse when either does.
    fn agree(body: &[u8]) -> Result<(), TestCaseError> {
        let fast = parse(body).and_then(|d| d.to_otlp());
        if std::str::from_utf8(body).is_err() {
            // Not JSON (RFC 8259 text is UTF-8): serde_json lets it pass inside a skipped field.
            prop_assert!(fast.is_err());
            return Ok(());
        }
        let reference = parse_serde(body).and_then(|d| d.to_otlp());
        match (&fast, &reference) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{}", String::from_utf8_lossy(body)),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(
                false,
                "reader {:?} vs serde {:?} on {}",
                fast.as_ref().map(|x| x.1),
                reference.as_ref().map(|x| x.1),
                String::from_utf8_lossy(body)
            ),
        }
        Ok(())
    }

    fn txt() -> S {
        prop_oneof![
            "[a-z]{1,6}".prop_map(Value::from),
            Just(json!("a\"b\\c\u{e9}")),
            Just(json!("<&>\u{2028}")),
            Just(json!("")),
        ]
        .boxed()
    }

    fn int() -> S {
        prop_oneof![any::<i64>().prop_map(Value::from), (0i64..1000).prop_map(Value::from),].boxed()
    }

    fn boolean() -> S {
        any::<bool>().prop_map(Value::from).boxed()
    }

    /// A field: absent, the value, or `null`.
    fn field(good: S) -> BoxedStrategy<Option<Value>> {
        prop_oneof![10 => Just(None), 10 => good.prop_map(Some), 1 => Just(Some(Value::Null))].boxed()
    }

    /// A field always present (a segment's name, ID and times).
    fn required(good: S) -> BoxedStrategy<Option<Value>> {
        good.prop_map(Some).boxed()
    }

    /// A vector serde reads with a default: absent or the value (`null` is refused).
    fn vector(good: S) -> BoxedStrategy<Option<Value>> {
        prop_oneof![Just(None), good.prop_map(Some)].boxed()
    }

    /// Replaces the `n`th value of `v` (in a walk of every value) with `wrong`.
    fn replace_nth(v: &mut Value, n: &mut usize, wrong: &Value) -> bool {
        if *n == 0 {
            *v = wrong.clone();
            return true;
        }
        *n -= 1;
        match v {
            Value::Object(m) => m.values_mut().any(|c| replace_nth(c, n, wrong)),
            Value::Array(a) => a.iter_mut().any(|c| replace_nth(c, n, wrong)),
            _ => false,
        }
    }

    /// An object of the named fields, each as [`field`] or [`required`] makes it.
    fn obj(fields: Vec<(&'static str, S)>) -> S {
        let required_names = ["name", "id", "start_time", "end_time", "subsegments"];
        let vectors = ["cloudwatch_logs", "exceptions", "stack"];
        let segment = fields.iter().any(|(n, _)| *n == "start_time");
        let (names, values): (Vec<_>, Vec<_>) = fields
            .into_iter()
            .map(|(n, s)| {
                let f = if segment && required_names.contains(&n) {
                    required(s)
                } else if vectors.contains(&n) {
                    vector(s)
                } else {
                    field(s)
                };
                (n, f)
            })
            .unzip();
        values
            .prop_map(move |vs| {
                let m: serde_json::Map<String, Value> = names
                    .iter()
                    .zip(vs)
                    .filter_map(|(n, v)| v.map(|v| ((*n).to_owned(), v)))
                    .collect();
                Value::Object(m)
            })
            .boxed()
    }

    fn array(s: S, n: usize) -> S {
        proptest::collection::vec(s, 0..n).prop_map(Value::from).boxed()
    }

    fn any_value() -> S {
        prop_oneof![
            txt(),
            int(),
            boolean(),
            Just(Value::Null),
            (0u32..4_000_000).prop_map(|n| Value::from(f64::from(n) / 4.0)),
            Just(json!([1, "a", {"b": null}])),
            Just(json!({"z": {"y": [1.25, -3]}, "a": "<x>"})),
        ]
        .boxed()
    }

    fn http() -> S {
        let request = obj(vec![
            ("x_forwarded_for", boolean()),
            ("method", txt()),
            ("url", txt()),
            ("user_agent", txt()),
            ("client_ip", txt()),
        ]);
        let response = obj(vec![
            (
                "status",
                prop_oneof![(100i64..600).prop_map(Value::from), int()].boxed(),
            ),
            ("content_length", any_value()),
        ]);
        obj(vec![("request", request), ("response", response)])
    }

    fn cause() -> S {
        let frame = obj(vec![("path", txt()), ("line", int()), ("label", txt())]);
        let exception = obj(vec![
            ("id", txt()),
            ("message", txt()),
            ("type", txt()),
            ("remote", boolean()),
            ("truncated", int()),
            ("skipped", int()),
            ("cause", txt()),
            ("stack", array(frame, 3)),
        ]);
        prop_oneof![txt(), obj(vec![("exceptions", array(exception, 3))])].boxed()
    }

    fn aws() -> S {
        let group = obj(vec![("log_group", txt()), ("arn", txt())]);
        obj(vec![
            (
                "elastic_beanstalk",
                obj(vec![
                    ("environment_name", txt()),
                    ("version_label", txt()),
                    ("deployment_id", int()),
                ]),
            ),
            ("cloudwatch_logs", array(group, 3)),
            (
                "ecs",
                obj(vec![
                    ("container", txt()),
                    ("container_id", txt()),
                    ("availability_zone", txt()),
                ]),
            ),
            (
                "ec2",
                obj(vec![
                    ("instance_id", txt()),
                    ("availability_zone", txt()),
                    ("instance_size", txt()),
                    ("ami_id", txt()),
                ]),
            ),
            (
                "eks",
                obj(vec![("cluster_name", txt()), ("pod", txt()), ("container_id", txt())]),
            ),
            (
                "xray",
                obj(vec![
                    ("sdk", prop_oneof![Just(json!("X-Ray for Python")), txt()].boxed()),
                    ("sdk_version", txt()),
                ]),
            ),
            ("account_id", txt()),
            ("operation", txt()),
            ("region", txt()),
            ("request_id", txt()),
            ("queue_url", txt()),
            ("table_name", txt()),
            ("table_names", array(txt(), 3)),
            ("retries", int()),
        ])
    }

    fn segment_fields() -> Vec<(&'static str, S)> {
        let id = prop_oneof![40 => "[0-9a-f]{16}".prop_map(Value::from), 1 => Just(json!("xyz"))].boxed();
        // Microseconds, as the SDKs write them.
        let time = (1_400_000_000_000_000u64..1_800_000_000_000_000)
            .prop_map(|us| Value::from(us as f64 / 1e6))
            .boxed();
        let map = |v: S, n| {
            proptest::collection::btree_map("[a-d]{1,2}", v, 0..n)
                .prop_map(|m| json!(m))
                .boxed()
        };
        vec![
            ("name", txt()),
            ("id", id.clone()),
            ("parent_id", id),
            ("start_time", time.clone()),
            ("end_time", time),
            ("service", obj(vec![("version", txt())])),
            ("user", txt()),
            ("resource_arn", txt()),
            (
                "trace_id",
                prop_oneof![
                    20 => "1-[0-9a-f]{8}-[0-9a-f]{24}".prop_map(Value::from),
                    1 => Just(json!("nope"))
                ]
                .boxed(),
            ),
            ("in_progress", boolean()),
            ("http", http()),
            ("cause", cause()),
            ("aws", aws()),
            ("annotations", map(any_value(), 4)),
            (
                "metadata",
                map(
                    prop_oneof![20 => any_value().prop_map(|v| json!({"v": v})), 1 => Just(json!(3))].boxed(),
                    3,
                ),
            ),
            (
                "namespace",
                prop_oneof![
                    10 => Just(json!("aws")),
                    10 => Just(json!("remote")),
                    10 => Just(json!("local")),
                    1 => Just(json!("x"))
                ]
                .boxed(),
            ),
            ("type", prop_oneof![Just(json!("subsegment")), txt()].boxed()),
            ("traced", boolean()),
            (
                "sql",
                obj(vec![
                    (
                        "url",
                        prop_oneof![
                            20 => Just(json!("jdbc:postgresql://db/orders")),
                            20 => Just(json!("mysql://h:3306/shop?ssl=1")),
                            1 => txt()
                        ]
                        .boxed(),
                    ),
                    ("sanitized_query", txt()),
                    ("database_type", txt()),
                    ("user", txt()),
                ]),
            ),
            ("origin", txt()),
            ("fault", boolean()),
            ("error", boolean()),
            ("throttle", boolean()),
            ("precursor_ids", array(txt(), 2)),
            ("unknown_field", any_value()),
        ]
    }

    /// A segment whose subsegments nest `levels` deep.
    fn segment(levels: usize) -> S {
        let mut fields = segment_fields();
        if levels > 0 {
            fields.push(("subsegments", array(segment(levels - 1), 3)));
        }
        obj(fields)
    }

    /// A segment document: a segment with a trace ID, mostly valid.
    fn document() -> S {
        let trace_id = prop_oneof![
            20 => "1-[0-9a-f]{8}-[0-9a-f]{24}".prop_map(Value::from),
            1 => Just(json!("nope"))
        ];
        (segment(2), trace_id)
            .prop_map(|(mut seg, t)| {
                seg["trace_id"] = t;
                seg
            })
            .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Generated documents, every field of the model with values of the right and the wrong
        /// types: the two readers agree.
        #[test]
        fn readers_agree_on_generated_documents(seg in document(), pretty in any::<bool>()) {
            let body = if pretty { serde_json::to_vec_pretty(&seg).unwrap() } else { serde_json::to_vec(&seg).unwrap() };
            agree(&body)?;
        }

        /// The same with one value (an object, an array or a scalar anywhere) of another type.
        #[test]
        fn readers_agree_on_a_value_of_the_wrong_type(
            seg in document(),
            at in any::<usize>(),
            wrong in prop_oneof![Just(json!(7)), Just(json!("x")), Just(json!(true)), Just(json!(1.5)), Just(json!(u64::MAX))],
        ) {
            let mut seg = seg;
            let mut n = at % 200 + 1;
            replace_nth(&mut seg, &mut n, &wrong);
            agree(&serde_json::to_vec(&seg).unwrap())?;
        }

        /// The test document mangled: the same verdict, and the same spans when accepted.
        #[test]
        fn readers_agree_on_mangled_documents(
            cut in 0usize..2000,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        ) {
            let mut b = split_datagram(super::super::tests::SEGMENT.as_bytes()).unwrap().to_vec();
            for (at, v) in flips {
                let n = b.len();
                b[at % n] = v;
            }
            b.truncate(cut.max(1));
            agree(&b)?;
        }
    }

    #[test]
    fn the_documented_differences() {
        // A repeated field: the last value, as Go's reader takes it (serde refuses it).
        let doc = br#"{"name":"a","name":"b","id":"70de5b6f19ff9a0a","start_time":1,"end_time":2,"trace_id":"1-5759e988-bd862e3fe1be46a994272793"}"#;
        assert_eq!(parse(doc).unwrap().root.name.as_deref(), Some("b"));
        assert!(parse_serde(doc).is_err());
        // A block written as an array: refused (serde reads the fields in order).
        let doc = br#"{"name":"a","id":"70de5b6f19ff9a0a","start_time":1,"end_time":2,"http":[]}"#;
        assert!(parse(doc).unwrap_err().0.contains("malformed X-Ray segment document"));
        // Subsegments nested beyond serde_json's depth: refused by both, without a stack overflow.
        let mut deep = String::new();
        for _ in 0..200 {
            deep.push_str(r#"{"name":"a","id":"70de5b6f19ff9a0a","start_time":1,"end_time":2,"subsegments":["#);
        }
        assert!(parse(deep.as_bytes()).unwrap_err().0.contains("nest too deep"));
    }

    /// Inputs the generated documents never hold, found in review: the readers agree.
    #[test]
    fn readers_agree_on_numbers_serde_refuses() {
        let base = r#""name":"a","id":"70de5b6f19ff9a0a","start_time":1,"end_time":2,"trace_id":"1-5759e988-bd862e3fe1be46a994272793""#;
        for (extra, accepted) in [
            // `-0` is a double to serde, which an integer field refuses.
            (r#""http":{"response":{"status":-0}}"#, false),
            (r#""aws":{"retries":-0}"#, false),
            (r#""cause":{"exceptions":[{"truncated":-0}]}"#, false),
            // Beyond a double: refused where serde keeps the value, skipped where it skips it.
            (r#""annotations":{"a":[1e400]}"#, false),
            (r#""http":{"response":{"content_length":[1e400]}}"#, false),
            (r#""cause":{"x":1e400}"#, false),
            (r#""cause":{"exceptions":[{"x":{"y":1e400}}]}"#, false),
            (r#""unknown":[1e400]"#, true),
            (r#""http":{"unknown":1e400}"#, true),
            (r#""start_time":1e400"#, false),
        ] {
            let doc = format!("{{{base},{extra}}}");
            agree(doc.as_bytes()).unwrap();
            assert_eq!(parse(doc.as_bytes()).is_ok(), accepted, "{doc}");
        }
        // A documented difference: a lone surrogate in a skipped field.
        let doc = format!(r#"{{{base},"unknown":"\ud800"}}"#);
        assert!(parse(doc.as_bytes()).is_err() && parse_serde(doc.as_bytes()).is_ok());
    }

    #[test]
    fn annotations_and_metadata_are_sorted_with_the_last_value_kept() {
        let doc = br#"{"name":"a","id":"70de5b6f19ff9a0a","start_time":1,"end_time":2,
            "annotations":{"b":1,"a":"x","b":true},"metadata":{"z":{"k":1},"m":{"k":2}}}"#;
        let d = parse(doc).unwrap();
        let keys: Vec<_> = d
            .root
            .annotations
            .as_ref()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_ref(), v.clone()))
            .collect();
        assert_eq!(
            keys,
            [
                ("a", super::Annotation::Str("x".into())),
                ("b", super::Annotation::Bool(true))
            ]
        );
        let ns: Vec<_> = d
            .root
            .metadata
            .as_ref()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_ref())
            .collect();
        assert_eq!(ns, ["m", "z"]);
    }
}
