//! A document written as OTLP by the rules of the Collector's X-Ray receiver: the resource
//! from the segment, then one span per (sub)segment.

use std::borrow::Cow;

use serde_json::Value as Json;

use super::{
    Annotation, Aws, Cause, Document, Exception, Http, Length, Segment, Sql, Text, err, parse_trace_id, seconds_to_ns,
    span_id,
};
use crate::TranslateError;
use crate::otlp::{RequestWriter, SpanWriter, Value, kind, status};

/// The Collector's split of `sql.url` (`^(.+//.+)/([^?]+)\??.*$`): the connection string and
/// the database name, at the last `/` that leaves a `scheme//host` before it and a name after.
fn split_sql_url(url: &str) -> Option<(&str, &str)> {
    if url.contains('\n') {
        return None;
    }
    let b = url.as_bytes();
    for p in (0..b.len()).rev().filter(|&p| b[p] == b'/') {
        let head = &url[..p];
        // `.+//.+`: a `//` with a character before it and one after it, within the head.
        let ok = (1..p.saturating_sub(2)).any(|i| &b[i..i + 2] == b"//");
        if ok && p + 1 < b.len() && b[p + 1] != b'?' {
            let rest = &url[p + 1..];
            let name = rest.split('?').next().unwrap_or("");
            return Some((head, name));
        }
    }
    None
}

/// A JSON text as Go's `encoding/json` writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped (the
/// map keys are already sorted, as Go sorts them).
fn go_json(v: &Json) -> String {
    let s = v.to_string();
    if !s.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return s;
    }
    s.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn text<'a>(v: &'a Text<'_>) -> Option<Value<'a>> {
    v.as_deref().map(|s| Value::Str(Cow::Borrowed(s)))
}

impl Document<'_> {
    /// Writes the document (the segment and every nested subsegment; nothing for a segment
    /// still in progress, whose complete form follows) as one OTLP request. Returns the request
    /// and its span count.
    pub fn to_otlp(&self) -> Result<(Vec<u8>, usize), TranslateError> {
        let trace_id = self.trace_id()?;
        let d = &self.root;
        let mut w = RequestWriter::with_capacity(1024);
        let mut res: Vec<(&'static str, Value<'_>)> = Vec::with_capacity(8);
        // A segment names its service. An independent subsegment belongs to its segment's
        // service, which its datagram does not say, so it names none (the Collector would
        // name the subsegment's own name, such as `DynamoDB`, as the service).
        if d.kind.as_deref() != Some("subsegment")
            && let Some(v) = text(&d.name)
        {
            res.push(("service.name", v));
        }
        // A later value of a key replaces an earlier one, as in a pcommon.Map.
        fn put<'v>(res: &mut Vec<(&'static str, Value<'v>)>, k: &'static str, v: Option<Value<'v>>) {
            if let Some(v) = v {
                res.retain(|(rk, _)| *rk != k);
                res.push((k, v));
            }
        }
        // Owned texts for the resource, kept alive while it is written.
        let (mut arns, mut groups) = (Vec::new(), Vec::new());
        let deployment = d
            .aws
            .as_ref()
            .and_then(|a| a.elastic_beanstalk.as_ref())
            .and_then(|b| b.deployment_id)
            .map(|i| i.to_string());
        match &d.aws {
            None => put(&mut res, "cloud.provider", Some(Value::Str(Cow::Borrowed("unknown")))),
            Some(aws) => {
                put(&mut res, "cloud.provider", Some(Value::Str(Cow::Borrowed("aws"))));
                put(&mut res, "cloud.account.id", text(&aws.account_id));
                for g in &aws.cloudwatch_logs {
                    if let Some(a) = &g.arn {
                        arns.push(Value::Str(Cow::Borrowed(a.as_ref())));
                    }
                    if let Some(n) = &g.log_group {
                        groups.push(Value::Str(Cow::Borrowed(n.as_ref())));
                    }
                }
                if let Some(ec2) = &aws.ec2 {
                    put(&mut res, "cloud.availability_zone", text(&ec2.availability_zone));
                    put(&mut res, "host.id", text(&ec2.instance_id));
                    put(&mut res, "host.type", text(&ec2.instance_size));
                    put(&mut res, "host.image.id", text(&ec2.ami_id));
                }
                if let Some(ecs) = &aws.ecs {
                    put(&mut res, "container.name", text(&ecs.container));
                    put(&mut res, "cloud.availability_zone", text(&ecs.availability_zone));
                    put(&mut res, "container.id", text(&ecs.container_id));
                }
                if let Some(bs) = &aws.elastic_beanstalk {
                    put(&mut res, "service.namespace", text(&bs.environment_name));
                    put(
                        &mut res,
                        "service.instance.id",
                        deployment.as_deref().map(|s| Value::Str(Cow::Borrowed(s))),
                    );
                    put(&mut res, "service.version", text(&bs.version_label));
                }
                if let Some(eks) = &aws.eks {
                    put(&mut res, "container.id", text(&eks.container_id));
                    put(&mut res, "k8s.cluster.name", text(&eks.cluster_name));
                    put(&mut res, "k8s.pod.name", text(&eks.pod));
                }
                if let Some(x) = &aws.xray {
                    put(&mut res, "telemetry.sdk.version", text(&x.sdk_version));
                    if let Some(sdk) = x.sdk.as_deref() {
                        put(&mut res, "telemetry.sdk.name", Some(Value::Str(Cow::Borrowed(sdk))));
                        // The Collector's guess at the language: Java when the root carries
                        // exceptions, else what follows "for " in the SDK's name.
                        let java = matches!(&d.cause, Some(Cause::Object(c)) if !c.exceptions.is_empty());
                        let lang = if java {
                            Some("java")
                        } else {
                            sdk.find("for ").map(|i| &sdk[i + 4..])
                        };
                        put(
                            &mut res,
                            "telemetry.sdk.language",
                            lang.map(|l| Value::Str(Cow::Borrowed(l))),
                        );
                    }
                }
            }
        }
        let arns = (!arns.is_empty()).then_some(Value::Array(arns));
        let groups = (!groups.is_empty()).then_some(Value::Array(groups));
        put(&mut res, "aws.log.group.arns", arns);
        put(&mut res, "aws.log.group.names", groups);
        if let Some(svc) = &d.service {
            put(&mut res, "service.version", text(&svc.version));
        }
        put(&mut res, "aws.xray.resource_arn", text(&d.resource_arn));
        w.resource(res.iter().map(|(k, v)| (*k, v)));
        w.scope("", "");
        let mut n = 0;
        write(&mut w, d, &trace_id, None, &mut n)?;
        Ok((w.finish(), n))
    }
}

/// Writes a (sub)segment and the subsegments it nests (skipping those in progress).
fn write(
    w: &mut RequestWriter,
    m: &Segment<'_>,
    trace_id: &[u8; 16],
    parent: Option<[u8; 8]>,
    n: &mut usize,
) -> Result<(), TranslateError> {
    if m.in_progress == Some(true) {
        return Ok(());
    }
    let id = span_id(m.id.as_deref().unwrap_or("")).unwrap_or([0; 8]);
    // An embedded subsegment may carry its own trace ID (the Collector reads it).
    let own;
    let trace_id = match m.trace_id.as_deref() {
        Some(t) if parent.is_some() => {
            own =
                parse_trace_id(t).ok_or_else(|| err(format!("X-Ray: trace_id {t:?} is not 1-{{8 hex}}-{{24 hex}}")))?;
            &own
        }
        _ => trace_id,
    };
    let parent = match parent {
        Some(p) => Some(p),
        None => match m.parent_id.as_deref() {
            Some(p) => Some(span_id(p).ok_or_else(|| err(format!("X-Ray: parent_id {p:?} is not 16 hex digits")))?),
            None => None,
        },
    }
    .filter(|p| *p != [0; 8]);
    {
        let mut sw = w.span();
        write_span(&mut sw, m, trace_id, &id, parent.as_ref())?;
    }
    *n += 1;
    for s in m.subsegments.iter().flatten() {
        write(w, s, trace_id, Some(id), n)?;
    }
    Ok(())
}

fn write_span(
    sw: &mut SpanWriter<'_>,
    m: &Segment<'_>,
    trace_id: &[u8; 16],
    id: &[u8; 8],
    parent: Option<&[u8; 8]>,
) -> Result<(), TranslateError> {
    let name = m.name.as_deref().unwrap_or("");
    sw.ids(trace_id, id, parent);
    sw.name(name);
    write_kind(sw, m, name, parent.is_some())?;
    let start = seconds_to_ns(m.start_time).unwrap_or(0);
    sw.times(start, seconds_to_ns(m.end_time).unwrap_or(start).max(start));
    if let Some(p) = m.in_progress {
        sw.attr("aws.xray.inprogress", &Value::Bool(p));
    }
    if let Some(u) = m.user.as_deref() {
        sw.str_attr("enduser.id", u);
    }
    let mut code = match &m.http {
        Some(http) => write_http(sw, http),
        None => status::UNSET,
    };
    // A cause makes the span an error; an exception ID (a text cause) is the message.
    let mut message = "";
    if let Some(c) = &m.cause {
        if code == status::UNSET {
            code = status::ERROR;
        }
        match c {
            Cause::Id(id) => message = id,
            Cause::Object(o) => {
                for e in &o.exceptions {
                    write_exception(sw, e, start);
                }
            }
        }
    }
    if let Some(aws) = &m.aws {
        write_aws(sw, aws);
    }
    if let Some(sql) = &m.sql {
        write_sql(sw, sql)?;
    }
    if let Some(t) = m.traced {
        sw.attr("aws.xray.traced", &Value::Bool(t));
    }
    write_annotations_and_metadata(sw, m, name)?;
    if code != status::UNSET {
        sw.status(code, message);
    }
    Ok(())
}

/// The span's kind, as the Collector: a client IP makes a server; an `aws` or `remote`
/// namespace a client (`aws` also names the service, `aws.service`); no namespace or `local`
/// internal; any other namespace refuses the document; and a span without a parent is a
/// server.
fn write_kind(sw: &mut SpanWriter<'_>, m: &Segment<'_>, name: &str, has_parent: bool) -> Result<(), TranslateError> {
    let req = m.http.as_ref().and_then(|h| h.request.as_ref());
    let mut k = if req.is_some_and(|r| r.client_ip.is_some()) {
        kind::SERVER
    } else {
        kind::UNSPECIFIED
    };
    match m.namespace.as_deref() {
        None | Some("local") => {
            if k == kind::UNSPECIFIED {
                k = kind::INTERNAL;
            }
        }
        Some("aws") => {
            k = kind::CLIENT;
            sw.str_attr("aws.service", name);
        }
        Some("remote") => k = kind::CLIENT,
        Some(other) => return Err(err(format!("X-Ray: unexpected namespace {other:?} of {name:?}"))),
    }
    if !has_parent {
        k = kind::SERVER;
    }
    sw.kind(k);
    Ok(())
}

/// The request and response attributes of `http`; returns the span's status as the response
/// sets it.
fn write_http(sw: &mut SpanWriter<'_>, http: &Http<'_>) -> u8 {
    let mut code = status::UNSET;
    if let Some(r) = &http.request {
        for (v, key) in [
            (&r.method, "http.method"),
            (&r.client_ip, "http.client_ip"),
            (&r.user_agent, "http.user_agent"),
            (&r.url, "http.url"),
        ] {
            if let Some(v) = v.as_deref() {
                sw.str_attr(key, v);
            }
        }
        if let Some(x) = r.x_forwarded_for {
            sw.attr("aws.xray.x_forwarded_for", &Value::Bool(x));
        }
    }
    if let Some(r) = &http.response {
        if let Some(st) = r.status {
            // The Collector's StatusCodeFromHTTP: 100 to 398 leave the status unset.
            if !(100..399).contains(&st) {
                code = status::ERROR;
            }
            sw.attr("http.status_code", &Value::Int(st));
        }
        match &r.content_length {
            Some(Length::Number(x)) => {
                sw.attr("http.response_content_length", &Value::Int(*x as i64));
            }
            Some(Length::Text(t)) => {
                sw.str_attr("http.response_content_length", t);
            }
            _ => {}
        }
    }
    code
}

/// The attributes of the `aws` block of a (sub)segment.
fn write_aws(sw: &mut SpanWriter<'_>, aws: &Aws<'_>) {
    for (v, key) in [
        (&aws.account_id, "aws.account_id"),
        (&aws.operation, "aws.operation"),
        (&aws.region, "aws.region"),
        (&aws.request_id, "aws.request_id"),
        (&aws.queue_url, "aws.queue_url"),
        (&aws.table_name, "aws.table_name"),
    ] {
        if let Some(v) = v.as_deref() {
            sw.str_attr(key, v);
        }
    }
    if let Some(r) = aws.retries {
        sw.attr("aws.xray.retries", &Value::Int(r));
    }
}

/// The database attributes of the `sql` block; refuses a `sql.url` without a database name.
fn write_sql(sw: &mut SpanWriter<'_>, sql: &Sql<'_>) -> Result<(), TranslateError> {
    if let Some(url) = sql.url.as_deref() {
        let (conn, db) = split_sql_url(url).ok_or_else(|| {
            err(format!(
                "X-Ray: the database name cannot be read from sql.url {url:?} (expected scheme://host/database)"
            ))
        })?;
        sw.str_attr("db.connection_string", conn);
        sw.str_attr("db.name", db);
    }
    for (v, key) in [
        (&sql.database_type, "db.system"),
        (&sql.sanitized_query, "db.statement"),
        (&sql.user, "db.user"),
    ] {
        if let Some(v) = v.as_deref() {
            sw.str_attr(key, v);
        }
    }
    Ok(())
}

/// The annotations (their keys, then each value of a plain type) and each metadata namespace
/// as JSON text; refuses a namespace that is not an object.
fn write_annotations_and_metadata(sw: &mut SpanWriter<'_>, m: &Segment<'_>, name: &str) -> Result<(), TranslateError> {
    if let Some(a) = &m.annotations
        && !a.is_empty()
    {
        // The keys, then each value of a plain type (JSON numbers are doubles, as Go reads them).
        let keys = Value::Array(a.iter().map(|(k, _)| Value::Str(Cow::Borrowed(k.as_ref()))).collect());
        sw.attr("aws.xray.annotations", &keys);
        for (k, v) in a {
            let v = match v {
                Annotation::Str(s) => Value::Str(Cow::Borrowed(s.as_ref())),
                Annotation::Bool(b) => Value::Bool(*b),
                Annotation::Double(f) => Value::Double(*f),
                Annotation::Other => continue,
            };
            sw.attr(k, &v);
        }
    }
    if let Some(meta) = &m.metadata {
        for (ns, raw) in meta {
            let v: Json = serde_json::from_str(raw).map_err(|e| err(format!("X-Ray: metadata {ns:?}: {e}")))?;
            if !v.is_object() {
                return Err(err(format!(
                    "X-Ray: metadata namespace {ns:?} of {name:?} is not an object"
                )));
            }
            sw.str_attr(&format!("aws.xray.metadata.{ns}"), &go_json(&v));
        }
    }
    Ok(())
}

/// One `exception` event, as the Collector writes it, at the span's start (the Collector
/// leaves the time at zero, 1970, which every UI draws far outside the trace).
fn write_exception(sw: &mut SpanWriter<'_>, e: &Exception<'_>, start: u64) {
    let mut attrs: Vec<(&str, Value<'_>)> = Vec::with_capacity(8);
    attrs.push((
        "aws.xray.exception.id",
        Value::Str(Cow::Borrowed(e.id.as_deref().unwrap_or(""))),
    ));
    if let Some(v) = text(&e.message) {
        attrs.push(("exception.message", v));
    }
    if let Some(v) = text(&e.kind) {
        attrs.push(("exception.type", v));
    }
    if let Some(r) = e.remote {
        attrs.push(("aws.xray.exception.remote", Value::Bool(r)));
    }
    if let Some(t) = e.truncated {
        attrs.push(("aws.xray.exception.truncated", Value::Int(t)));
    }
    if let Some(sk) = e.skipped {
        attrs.push(("aws.xray.exception.skipped", Value::Int(sk)));
    }
    if let Some(v) = text(&e.cause) {
        attrs.push(("aws.xray.exception.cause", v));
    }
    if !e.stack.is_empty() {
        // `{type}: {message}` then `\tat {label}({path}: {line})` per frame, as the Collector.
        let mut st = format!(
            "{}: {}\n",
            e.kind.as_deref().unwrap_or(""),
            e.message.as_deref().unwrap_or("")
        );
        for f in &e.stack {
            let line = f.line.map_or_else(|| "<unknown>".to_owned(), |l| l.to_string());
            st.push_str(&format!(
                "\tat {}({}: {line})\n",
                f.label.as_deref().unwrap_or(""),
                f.path.as_deref().unwrap_or("")
            ));
        }
        attrs.push(("exception.stacktrace", Value::Str(Cow::Owned(st))));
    }
    sw.event(start, "exception", attrs.iter().map(|(k, v)| (*k, v)), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_urls_split_as_the_collector_splits_them() {
        assert_eq!(
            split_sql_url("jdbc:postgresql://db/orders"),
            Some(("jdbc:postgresql://db", "orders"))
        );
        assert_eq!(
            split_sql_url("jdbc:mysql://h:3306/shop?useSSL=false"),
            Some(("jdbc:mysql://h:3306", "shop"))
        );
        assert_eq!(split_sql_url("mysql://h/a/b"), Some(("mysql://h/a", "b")));
        assert_eq!(split_sql_url("postgresql://db"), None);
        assert_eq!(split_sql_url("postgresql://db/"), None);
        assert_eq!(split_sql_url("//db/x"), None, "nothing before the //");
    }
}
