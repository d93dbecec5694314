//! Hand-written evaluator cases over a small two-service trace.

use crate::ast::{Kind, Status};
use crate::{EvalError, Event, Link, Span, Spanset, Trace, Value, eval, parse};

pub(crate) const TRACE_ID: [u8; 16] = [
    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
];

pub(crate) fn id(n: u8) -> [u8; 8] {
    [0, 0, 0, 0, 0, 0, 0, n]
}

fn kv(key: &str, value: Value) -> (String, Value) {
    (key.to_owned(), value)
}

fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

/// Eight spans, indexes in brackets:
///
/// ```text
/// [0] GET /          frontend server ok     1000 +1000  http.method=GET http.status_code=200
/// ├─[1] auth         frontend internal      1100 +100   user.id=7 ratio=0.25 gone=nil
/// ├─[2] call backend frontend client error  1200 +700   http.status_code=500, events exception and retry
/// │ └─[3] handle     backend server ok      1250 +600   region=us (resource region=eu) deployment=nil
/// │   ├─[4] db query backend client error   1300 +400   db.system=postgresql tags=[a,b] codes=[1,2,3] empty=[]
/// │   └─[5] cache    backend internal       1310 +10    cache.hit=false ratio=0.5, one link
/// └─[6] render       frontend internal      1950 +40    flag=true msg="line1\nline2"
/// [7] late           backend internal        900 +50    http.status_code="500", parent not in the trace
/// ```
pub(crate) fn fixture() -> Trace {
    let frontend = vec![kv("service.name", s("frontend")), kv("region", s("eu-west"))];
    let backend = vec![
        kv("service.name", s("backend")),
        kv("region", s("eu")),
        kv("deployment", s("prod")),
    ];
    let span = |n: u8, parent: Option<u8>, name: &str, kind: Kind, status: Status, start: u64, dur: u64| Span {
        trace_id: TRACE_ID,
        span_id: id(n + 1),
        parent_span_id: parent.map(id),
        name: name.to_owned(),
        kind,
        status,
        start_unix_nano: start,
        duration_nano: dur,
        resource_attrs: if n == 3 || n == 4 || n == 5 || n == 7 {
            backend.clone()
        } else {
            frontend.clone()
        },
        scope_name: if n <= 2 || n == 6 {
            "io.otel.http"
        } else {
            "io.otel.jdbc"
        }
        .to_owned(),
        scope_version: "1.0".to_owned(),
        scope_attrs: if n <= 2 || n == 6 {
            vec![kv("owner", s("web"))]
        } else {
            Vec::new()
        },
        ..Span::default()
    };
    let mut spans = vec![
        span(0, None, "GET /", Kind::Server, Status::Ok, 1000, 1000),
        span(1, Some(1), "auth", Kind::Internal, Status::Unset, 1100, 100),
        span(2, Some(1), "call backend", Kind::Client, Status::Error, 1200, 700),
        span(3, Some(3), "handle", Kind::Server, Status::Ok, 1250, 600),
        span(4, Some(4), "db query", Kind::Client, Status::Error, 1300, 400),
        span(5, Some(4), "cache", Kind::Internal, Status::Unset, 1310, 10),
        span(6, Some(1), "render", Kind::Internal, Status::Unset, 1950, 40),
        span(7, Some(99), "late", Kind::Internal, Status::Unset, 900, 50),
    ];
    spans[0].span_attrs = vec![kv("http.method", s("GET")), kv("http.status_code", Value::Int(200))];
    spans[1].span_attrs = vec![
        kv("user.id", Value::Int(7)),
        kv("ratio", Value::Float(0.25)),
        kv("gone", Value::Nil),
    ];
    spans[2].span_attrs = vec![kv("http.status_code", Value::Int(500))];
    spans[2].events = vec![
        Event {
            name: "exception".to_owned(),
            time_unix_nano: 1300,
            attrs: vec![kv("exception.type", s("Timeout")), kv("retry", Value::Int(1))],
        },
        Event {
            name: "retry".to_owned(),
            time_unix_nano: 1400,
            attrs: vec![kv("retry", Value::Int(2))],
        },
    ];
    spans[3].span_attrs = vec![kv("region", s("us")), kv("deployment", Value::Nil)];
    spans[4].status_message = "conn refused".to_owned();
    spans[4].span_attrs = vec![
        kv("db.system", s("postgresql")),
        kv("tags", Value::Array(vec![s("a"), s("b")])),
        kv("codes", Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(3)])),
        kv("empty", Value::Array(Vec::new())),
    ];
    spans[5].span_attrs = vec![kv("cache.hit", Value::Bool(false)), kv("ratio", Value::Float(0.5))];
    spans[5].links = vec![Link {
        trace_id: [0xab; 16],
        span_id: [0xcd; 8],
        attrs: vec![kv("ref", s("follows_from"))],
    }];
    spans[6].span_attrs = vec![kv("flag", Value::Bool(true)), kv("msg", s("line1\nline2"))];
    spans[7].span_attrs = vec![kv("http.status_code", s("500"))];
    Trace { spans }
}

fn sets(q: &str, trace: &Trace) -> Vec<Spanset> {
    let query = parse(q).unwrap_or_else(|e| panic!("`{q}`: {e}"));
    eval(&query, trace).unwrap_or_else(|e| panic!("`{q}`: {e}"))
}

/// The spans of each spanset.
fn groups(q: &str, trace: &Trace) -> Vec<Vec<usize>> {
    sets(q, trace).into_iter().map(|s| s.spans).collect()
}

/// The spans of the only spanset, or none when there is no spanset.
fn spans(q: &str) -> Vec<usize> {
    spans_of(q, &fixture())
}

fn spans_of(q: &str, trace: &Trace) -> Vec<usize> {
    let mut g = groups(q, trace);
    assert!(g.len() <= 1, "`{q}`: {} spansets", g.len());
    g.pop().unwrap_or_default()
}

fn check(cases: &[(&str, &[usize])]) {
    let trace = fixture();
    let mut failures = Vec::new();
    for (q, want) in cases {
        let got = spans_of(q, &trace);
        if got != *want {
            failures.push(format!("`{q}`: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const ALL: &[usize] = &[0, 1, 2, 3, 4, 5, 6, 7];

#[test]
fn trace_helpers() {
    let t = fixture();
    assert_eq!(
        t.parents(),
        vec![None, Some(0), Some(0), Some(2), Some(3), Some(3), Some(0), None]
    );
    // [7] starts earlier but has a parent id; the span without one wins.
    assert_eq!(t.root(), Some(0));
    assert_eq!(t.root_name(), Some("GET /"));
    assert_eq!(t.root_service_name(), Some("frontend"));
    assert_eq!(t.start_unix_nano(), Some(900));
    assert_eq!(t.end_unix_nano(), Some(2000));
    assert_eq!(t.duration_nano(), 1100);
    // Without a span lacking a parent id, the earliest span whose parent is missing is the root.
    let mut orphans = t.clone();
    orphans.spans[0].parent_span_id = Some(id(42));
    assert_eq!(orphans.root(), Some(7));
    assert_eq!(Trace::default().root(), None);
    assert_eq!(Trace::default().duration_nano(), 0);
}

#[test]
fn intrinsics() {
    check(&[
        (r#"{ name = "auth" }"#, &[1]),
        (r#"{ span:name != "auth" }"#, &[0, 2, 3, 4, 5, 6, 7]),
        ("{ status = error }", &[2, 4]),
        ("{ status != unset }", &[0, 2, 3, 4]),
        (r#"{ statusMessage = "conn refused" }"#, &[4]),
        (r#"{ statusMessage = "" }"#, &[0, 1, 2, 3, 5, 6, 7]),
        ("{ kind = server }", &[0, 3]),
        ("{ kind = client || kind = internal }", &[1, 2, 4, 5, 6, 7]),
        ("{ duration > 500 }", &[0, 2, 3]),
        ("{ duration >= 1us }", &[0]),
        ("{ duration = 1000 }", &[0]),
        ("{ duration < 10.5 }", &[5]),
        (r#"{ rootName = "GET /" }"#, ALL),
        (r#"{ rootServiceName = "frontend" && traceDuration = 1100ns }"#, ALL),
        ("{ traceDuration > 1us }", ALL),
        (r#"{ span:id = "0000000000000001" }"#, &[0]),
        (r#"{ span:id = "000000000000000A" }"#, &[]),
        (r#"{ span:id = "000000000000000a" }"#, &[]),
        (r#"{ span:id = "0000000000000008" }"#, &[7]),
        (r#"{ span:parentID = "0000000000000001" }"#, &[1, 2, 6]),
        ("{ span:parentID = nil }", &[0]),
        ("{ span:parentID != nil }", &[1, 2, 3, 4, 5, 6, 7]),
        (r#"{ trace:id = "0af7651916cd43dd8448eb211c80319c" }"#, ALL),
        (r#"{ trace:id =~ "0af7.*" }"#, ALL),
        (r#"{ span:id > "0000000000000006" }"#, &[6, 7]),
        (r#"{ instrumentation:name = "io.otel.jdbc" }"#, &[3, 4, 5, 7]),
        (r#"{ instrumentation:version = "1.0" }"#, ALL),
    ]);
}

#[test]
fn missing_attributes_and_nil() {
    check(&[
        (r#"{ span.http.method = "GET" }"#, &[0]),
        // `!=` needs the attribute.
        (r#"{ span.http.method != "POST" }"#, &[0]),
        ("{ span.nope = nil }", ALL),
        ("{ span.nope != nil }", &[]),
        ("{ span.http.status_code != nil }", &[0, 2, 7]),
        ("{ span.http.status_code = nil }", &[1, 3, 4, 5, 6]),
        ("{ span.nope > 1 || span.nope < 1 }", &[]),
        ("{ !(span.nope = 1) }", ALL),
        // An attribute stored as nil is missing.
        ("{ span.gone = nil }", ALL),
        ("{ span.gone != nil }", &[]),
        // ... and an unscoped lookup falls through it to the resource.
        (r#"{ .deployment = "prod" }"#, &[3, 4, 5, 7]),
        (r#"{ span.deployment = "prod" }"#, &[]),
    ]);
}

#[test]
fn types_do_not_mix() {
    check(&[
        ("{ span.http.status_code = 500 }", &[2]),
        (r#"{ span.http.status_code = "500" }"#, &[7]),
        // Different types compare false, `!=` included.
        ("{ span.http.status_code != 500 }", &[0]),
        (r#"{ span.http.status_code != "500" }"#, &[]),
        ("{ span.http.status_code >= 200 }", &[0, 2]),
        // Integers, floats and durations compare numerically.
        ("{ span.user.id = 7.0 }", &[1]),
        ("{ span.user.id > 6.5 }", &[1]),
        ("{ span.ratio > 0.3 }", &[5]),
        ("{ span.ratio = .25 }", &[1]),
        ("{ span.user.id < 1s }", &[1]),
        ("{ span.user.id = 7ns }", &[1]),
        ("{ span.cache.hit = false }", &[5]),
        ("{ span.cache.hit != true }", &[5]),
        ("{ span.cache.hit = 0 }", &[]),
        (r#"{ span.flag = "true" }"#, &[]),
        ("{ span.region = ok }", &[]),
    ]);
}

#[test]
fn strings_order_and_regex() {
    check(&[
        // Byte-wise: uppercase sorts before lowercase.
        (r#"{ name > "h" }"#, &[3, 6, 7]),
        (r#"{ name <= "auth" }"#, &[0, 1]),
        (r#"{ name >= "GET /" && name < "a" }"#, &[0]),
        // Anchored at both ends.
        (r#"{ name =~ "ca" }"#, &[]),
        (r#"{ name =~ "ca.*" }"#, &[2, 5]),
        (r#"{ name =~ ".*end" }"#, &[2]),
        (r#"{ name !~ "ca.*" }"#, &[0, 1, 3, 4, 6, 7]),
        (r#"{ name =~ "a|ca" }"#, &[]),
        (r#"{ name =~ "auth|cache" }"#, &[1, 5]),
        // `.` matches a newline.
        (r#"{ span.msg =~ "line1.line2" }"#, &[6]),
        // Non-strings match neither way.
        (r#"{ span.http.status_code =~ "5.*" }"#, &[7]),
        (r#"{ span.http.status_code !~ "2.*" }"#, &[7]),
        (r#"{ span.nope !~ "x" }"#, &[]),
    ]);
}

#[test]
fn unscoped_lookup_prefers_span() {
    check(&[
        (r#"{ .region = "us" }"#, &[3]),
        (r#"{ .region = "eu" }"#, &[4, 5, 7]),
        (r#"{ .region = "eu-west" }"#, &[0, 1, 2, 6]),
        (r#"{ resource.region = "eu" }"#, &[3, 4, 5, 7]),
        (r#"{ span.region = "eu" }"#, &[]),
        (r#"{ .service.name = "backend" }"#, &[3, 4, 5, 7]),
        (r#"{ span.service.name = "backend" }"#, &[]),
        (r#"{ instrumentation.owner = "web" }"#, &[0, 1, 2, 6]),
        (r#"{ .owner = "web" }"#, &[]),
    ]);
}

#[test]
fn arrays() {
    check(&[
        (r#"{ span.tags = "a" }"#, &[4]),
        (r#"{ span.tags = "c" }"#, &[]),
        // `!=` holds when no element equals.
        (r#"{ span.tags != "a" }"#, &[]),
        (r#"{ span.tags != "c" }"#, &[4]),
        ("{ span.codes > 2 }", &[4]),
        ("{ span.codes < 1 }", &[]),
        ("{ 2 < span.codes }", &[4]),
        ("{ span.codes = 2.0 }", &[4]),
        (r#"{ span.tags =~ "b" }"#, &[4]),
        (r#"{ span.tags !~ "a|b" }"#, &[]),
        (r#"{ span.tags !~ "c" }"#, &[4]),
        ("{ span.tags = span.codes }", &[]),
        ("{ span.tags != nil }", &[4]),
        // Regression (found by tests/model.rs): a nil operand made `!=` against an empty array
        // vacuously true.
        ("{ span.nope != span.empty }", &[]),
        ("{ span.empty != span.nope }", &[]),
        (r#"{ span.empty != "a" }"#, &[4]),
        (r#"{ span.empty = "a" }"#, &[]),
    ]);
}

#[test]
fn events_and_links() {
    check(&[
        (r#"{ event:name = "retry" }"#, &[2]),
        (r#"{ event:name != "exception" }"#, &[2]),
        (r#"{ event.exception.type = "Timeout" }"#, &[2]),
        ("{ event.retry = 2 }", &[2]),
        ("{ event.retry > 1 && event.retry < 2 }", &[2]),
        // One comparison reads one event at a time.
        ("{ event.retry > 1 }", &[2]),
        ("{ event.retry = 3 }", &[]),
        (r#"{ event:name = "retry" && event.exception.type = "Timeout" }"#, &[2]),
        // The per-event binding: the `exception` event has retry = 1, the `retry` event retry = 2.
        ("{ (event:name = \"exception\") = (event.retry = 1) }", &[2]),
        ("{ event.retry = nil }", &[0, 1, 3, 4, 5, 6, 7]),
        ("{ event.retry != nil }", &[2]),
        ("{ event:name = nil }", &[0, 1, 3, 4, 5, 6, 7]),
        (r#"{ link.ref = "follows_from" }"#, &[5]),
        ("{ link.ref = nil }", &[0, 1, 2, 3, 4, 6, 7]),
        (r#"{ link:traceID = "abababababababababababababababab" }"#, &[5]),
        (r#"{ link:spanID = "cdcdcdcdcdcdcdcd" }"#, &[5]),
        (r#"{ link:spanID != "" }"#, &[5]),
    ]);
}

#[test]
fn logic_and_arithmetic() {
    check(&[
        ("{ span.flag }", &[6]),
        ("{ !span.flag }", &[]),
        ("{ !!span.flag }", &[6]),
        ("{ !span.cache.hit }", &[5]),
        ("{ !(span.flag = true) }", &[0, 1, 2, 3, 4, 5, 7]),
        ("{ span.flag && true }", &[6]),
        ("{ span.nope || kind = server }", &[0, 3]),
        ("{ true }", ALL),
        ("{ !true }", &[]),
        ("{ true && false || true }", ALL),
        ("{ span.user.id * 2 = 14 }", &[1]),
        ("{ span.user.id / 2 = 3 }", &[1]),
        ("{ span.user.id % 4 = 3 }", &[1]),
        ("{ span.user.id ^ 2 = 49 }", &[1]),
        ("{ span.user.id - 10 = -3 }", &[1]),
        ("{ -span.user.id = -7 }", &[1]),
        ("{ span.user.id / 0 = 0 }", &[]),
        ("{ span.ratio * 4 = 1 }", &[1]),
        ("{ duration * 2 > 1500 }", &[0]),
        ("{ duration - 100ns > 500 }", &[0, 2]),
        ("{ 2 ^ 3 ^ 2 = 512 }", ALL),
        ("{ 1 + 2 * 3 = 7 }", ALL),
        ("{ 2 ^ -1 = 0.5 }", ALL),
        // Integer overflow falls back to floats.
        ("{ 9223372036854775807 * 2 > 1e19 }", ALL),
        ("{ 9223372036854775807 + 1 = 9223372036854775808.0 }", ALL),
        (r#"{ span.http.method * 2 = 2 }"#, &[]),
    ]);
}

#[test]
fn spanset_operators() {
    check(&[
        ("{ kind = server } && { status = error }", &[0, 2, 3, 4]),
        ("{ kind = server } && { span.nope }", &[]),
        ("{ span.nope } && { kind = server }", &[]),
        ("{ kind = server } || { span.nope }", &[0, 3]),
        ("{ kind = server } || { status = error }", &[0, 2, 3, 4]),
        ("{ span.nope } || { span.nope }", &[]),
    ]);
}

#[test]
fn structural_operators() {
    check(&[
        ("{ kind = server } > { }", &[1, 2, 4, 5, 6]),
        (
            r#"{ name = "GET /" } >> { resource.service.name = "backend" }"#,
            &[3, 4, 5],
        ),
        ("{ status = error } < { }", &[0, 3]),
        (r#"{ name = "db query" } << { }"#, &[0, 2, 3]),
        ("{ } >> { status = error }", &[2, 4]),
        ("{ } > { }", &[1, 2, 3, 4, 5, 6]),
        ("{ } < { }", &[0, 2, 3]),
        // Negated forms: the right-hand spans for which the relation does not hold.
        ("{ kind = server } !> { }", &[0, 3, 7]),
        (r#"{ name = "GET /" } !>> { }"#, &[0, 7]),
        ("{ status = error } !< { }", &[1, 2, 4, 5, 6, 7]),
        (r#"{ name = "db query" } !<< { }"#, &[1, 4, 5, 6, 7]),
        // An empty left side: nothing relates, so negated forms keep all of the right side.
        ("{ span.nope } !> { kind = server }", &[0, 3]),
        ("{ span.nope } !<< { kind = server }", &[0, 3]),
        ("{ span.nope } > { }", &[]),
        ("{ } > { span.nope }", &[]),
        ("{ } !> { span.nope }", &[]),
        // A span is not its own relative.
        (r#"{ name = "handle" } >> { name = "handle" }"#, &[]),
        (r#"{ name = "handle" } !>> { name = "handle" }"#, &[3]),
        // The orphan [7] has no parent and no ancestors.
        (r#"{ } >> { name = "late" }"#, &[]),
        // Chains group left to right; the result is the right-hand side.
        ("{ kind = server } > { kind = client } > { }", &[3]),
        (
            "{ kind = server } >> ({ status = error } && { kind = client })",
            &[2, 4],
        ),
        (r#"({ name = "auth" } || { name = "handle" }) < { }"#, &[0, 2]),
        // Relations see the whole trace even when a stage narrows the spans.
        (
            r#"{ resource.service.name = "backend" } | { kind = server } > { }"#,
            &[4, 5],
        ),
        (r#"{ resource.service.name = "backend" } | { } > { }"#, &[4, 5]),
    ]);
}

/// Spans [0] and [1] name each other as parent, [2] hangs below [1], [3] is a root, [4] names
/// itself, [5] hangs below [4].
fn cyclic() -> Trace {
    let span = |n: u8, parent: u8, name: &str| Span {
        span_id: id(n),
        parent_span_id: (parent != 0).then(|| id(parent)),
        name: name.to_owned(),
        start_unix_nano: u64::from(n),
        ..Span::default()
    };
    Trace {
        spans: vec![
            span(1, 2, "a"),
            span(2, 1, "b"),
            span(3, 2, "c"),
            span(4, 0, "d"),
            span(5, 5, "e"),
            span(6, 5, "f"),
        ],
    }
}

#[test]
fn parent_cycles_terminate() {
    let t = cyclic();
    assert_eq!(t.parents(), vec![Some(1), Some(0), Some(1), None, None, Some(4)]);
    assert_eq!(t.root(), Some(3));
    let cases: &[(&str, &[usize])] = &[
        // In a cycle, every other span of the cycle is an ancestor.
        (r#"{ name = "a" } >> { }"#, &[1, 2]),
        (r#"{ name = "a" } << { }"#, &[1]),
        (r#"{ name = "c" } << { }"#, &[0, 1]),
        (r#"{ } >> { name = "a" }"#, &[0]),
        (r#"{ name = "a" } !>> { name = "a" }"#, &[0]),
        (r#"{ name = "a" } > { }"#, &[1]),
        (r#"{ name = "b" } > { }"#, &[0, 2]),
        (r#"{ name = "a" } < { }"#, &[1]),
        ("{ } >> { }", &[0, 1, 2, 5]),
        ("{ } << { }", &[0, 1, 4]),
        ("{ } !<< { }", &[2, 3, 5]),
        // A span naming itself as parent has no parent.
        (r#"{ name = "e" } > { name = "e" }"#, &[]),
        (r#"{ name = "e" } > { }"#, &[5]),
        (r#"{ rootName = "d" }"#, &[0, 1, 2, 3, 4, 5]),
    ];
    let mut failures = Vec::new();
    for (q, want) in cases {
        let got = spans_of(q, &t);
        if got != *want {
            failures.push(format!("`{q}`: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Only a cycle: no root, so trace-level root fields are nil.
    let only_cycle = Trace {
        spans: t.spans[..2].to_vec(),
    };
    assert_eq!(only_cycle.root(), None);
    assert_eq!(spans_of("{ rootName = nil }", &only_cycle), vec![0, 1]);
    assert_eq!(spans_of("{ rootServiceName != nil }", &only_cycle), Vec::<usize>::new());
}

#[test]
fn scalar_filters() {
    let t = fixture();
    check(&[
        ("{ } | count() > 7", ALL),
        ("{ } | count() > 8", &[]),
        ("{ status = error } | count() = 2", &[2, 4]),
        ("{ status = error } | count() != 2", &[]),
        ("count() >= 8.0 | { kind = server }", &[0, 3]),
        // Durations 1000 100 700 600 400 10 40 50: the average 362.5 is compared exactly.
        ("{ } | avg(duration) > 362", ALL),
        ("{ } | avg(duration) > 363", &[]),
        ("{ } | avg(duration) = 362.5", ALL),
        ("{ } | avg(duration) < 363ns", ALL),
        // The string "500" of [7] is skipped.
        ("{ } | avg(span.http.status_code) = 350", ALL),
        ("{ } | min(span.ratio) = 0.25", ALL),
        ("{ } | max(span.ratio) = 0.5", ALL),
        ("{ } | max(duration) = 1us", ALL),
        ("{ } | min(duration) = 10", ALL),
        ("{ } | sum(span.user.id) = 7", ALL),
        ("{ } | sum(span.ratio) = 0.75", ALL),
        ("{ } | sum(span.ratio * 4) = 3", ALL),
        // No span has the field: the spanset is dropped whatever the comparison.
        ("{ } | sum(span.nope) >= 0", &[]),
        ("{ } | avg(span.nope) != 1", &[]),
    ]);
    let got = sets("{ status = error } | count() = 2 | avg(duration) > 1", &t);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].attributes,
        vec![
            ("count()".to_owned(), Value::Int(2)),
            ("avg(duration)".to_owned(), Value::Duration(550)),
        ]
    );
    let got = sets("{ } | avg(span.ratio) > 0 | count() > 1 | count() > 2", &t);
    assert_eq!(
        got[0].attributes,
        vec![
            ("avg(span.ratio)".to_owned(), Value::Float(0.375)),
            ("count()".to_owned(), Value::Int(8)),
        ]
    );
}

#[test]
fn pipeline_filters() {
    check(&[
        ("{ } | { status = error }", &[2, 4]),
        ("{ kind = server } | { status = error }", &[]),
        ("{ .region != nil } | { kind = client } | { status = error }", &[2, 4]),
        (r#"{ .a } | { .b } | { .c }"#, &[]),
        ("{ } | { kind = server } >> { status = error }", &[2, 4]),
    ]);
}

#[test]
fn by_splits_spansets() {
    let t = fixture();
    assert_eq!(
        groups("{ } | by(resource.service.name)", &t),
        vec![vec![0, 1, 2, 6], vec![3, 4, 5, 7]]
    );
    let got = sets("{ } | by(resource.service.name)", &t);
    assert_eq!(
        got[1].attributes,
        vec![("by(resource.service.name)".to_owned(), s("backend"))]
    );
    // Spans lacking the field form a nil group; groups come in order of their first span.
    let got = sets("{ } | by(span.http.status_code)", &t);
    let summary: Vec<(Vec<usize>, Value)> = got.into_iter().map(|s| (s.spans, s.attributes[0].1.clone())).collect();
    assert_eq!(
        summary,
        vec![
            (vec![0], Value::Int(200)),
            (vec![1, 3, 4, 5, 6], Value::Nil),
            (vec![2], Value::Int(500)),
            (vec![7], s("500")),
        ]
    );
    assert_eq!(
        groups("{ } | by(resource.service.name) | count() > 3", &t),
        vec![vec![0, 1, 2, 6], vec![3, 4, 5, 7]]
    );
    assert_eq!(
        groups("{ status = error } | by(resource.service.name) | count() > 1", &t),
        Vec::<Vec<usize>>::new()
    );
    assert_eq!(
        groups("by(resource.service.name) | { status = error }", &t),
        vec![vec![2], vec![4]]
    );
    // Structural operators relate spans within each group (a server's child is in another
    // kind's group, so none remain).
    assert_eq!(
        groups("{ } | by(resource.service.name) | { } > { }", &t),
        vec![vec![1, 2, 6], vec![4, 5]]
    );
    assert!(groups("{ } | by(kind) | { } > { }", &t).is_empty());
    // An arithmetic key.
    assert_eq!(groups("{ } | by(duration / 100)", &t)[0], vec![0]);
    // Nested by() keeps both keys.
    let got = sets("{ } | by(resource.service.name) | by(status)", &t);
    assert_eq!(got.len(), 6);
    assert_eq!(
        got[0].attributes,
        vec![
            ("by(resource.service.name)".to_owned(), s("frontend")),
            ("by(status)".to_owned(), Value::Status(Status::Ok)),
        ]
    );
}

#[test]
fn select_reports_values() {
    let t = fixture();
    let got = sets(
        "{ status = error } | select(span.http.status_code, resource.service.name)",
        &t,
    );
    assert_eq!(
        got,
        vec![Spanset {
            spans: vec![2, 4],
            attributes: Vec::new(),
            selected: vec!["span.http.status_code".to_owned(), "resource.service.name".to_owned()],
            selected_values: vec![vec![Value::Int(500), s("frontend")], vec![Value::Nil, s("backend")],],
        }]
    );
    // Rows follow the spans through later filters; repeated fields are reported once.
    let got = sets("select(name, span:id) | { kind = server } | select(name, duration)", &t);
    assert_eq!(got[0].spans, vec![0, 3]);
    assert_eq!(got[0].selected, vec!["name", "span:id", "duration"]);
    assert_eq!(
        got[0].selected_values,
        vec![
            vec![s("GET /"), s("0000000000000001"), Value::Duration(1000)],
            vec![s("handle"), s("0000000000000004"), Value::Duration(600)],
        ]
    );
    // Outside comparisons, event fields read the first event that has them.
    let got = sets(
        r#"{ name = "call backend" } | select(event:name, event.retry, link.ref)"#,
        &t,
    );
    assert_eq!(
        got[0].selected_values,
        vec![vec![s("exception"), Value::Int(1), Value::Nil]]
    );
    let got = sets("{ } | by(resource.service.name) | select(.region)", &t);
    assert_eq!(got[1].selected_values[0], vec![s("us")]);
}

#[test]
fn empty_trace_gives_no_spansets() {
    assert!(groups("{ }", &Trace::default()).is_empty());
    assert!(groups("{ } | count() = 0", &Trace::default()).is_empty());
    assert!(groups("{ } !> { }", &Trace::default()).is_empty());
}

#[test]
fn errors() {
    let t = fixture();
    let err = |q: &str| eval(&parse(q).expect(q), &t).expect_err(q);
    assert!(matches!(err("{ } | rate()"), EvalError::MetricsQuery { .. }));
    assert_eq!(
        err("{ } | rate()").to_string(),
        "`{ } | rate()` is a metrics query: run it with /api/metrics/query_range"
    );
    // An invalid pattern is a validation error, as in Tempo.
    let e = err(r#"{ name =~ "(" }"#);
    assert!(matches!(&e, EvalError::Invalid(_)), "{e}");
    assert!(
        e.to_string()
            .contains("invalid regular expression `(` in `name =~ \"(\"`: "),
        "{e}"
    );
    assert_eq!(
        err("{ parent.span.a = 1 }").to_string(),
        "unsupported TraceQL feature: parent-scoped attributes (parent.)"
    );
    assert!(matches!(err("{ status = 3 }"), EvalError::Invalid(_)));
    assert!(matches!(
        err("{ } | rate() with(sample=true)"),
        EvalError::MetricsQuery { .. }
    ));
    assert!(matches!(err("({ } | by(name)) > { }"), EvalError::Invalid(_)));
}

#[test]
fn corpus_examples_on_the_fixture() {
    check(&[
        (
            r#"{ resource.service.name = "frontend" } > { resource.service.name = "backend" }"#,
            &[3],
        ),
        (
            r#"{ span.db.system != nil } !<< { resource.service.name = "backend" }"#,
            &[4, 5, 7],
        ),
        (r#"{ kind = server } !> { kind = client }"#, &[]),
        (r#"{ kind = server } !> { kind = internal }"#, &[7]),
        (r#"{ status = error } !< { kind = server }"#, &[]),
        (r#"{ status = error } !< { kind = internal }"#, &[1, 5, 6, 7]),
        (
            r#"{ span.http.status_code >= 200 && span.http.status_code < 300 } | count() > 2"#,
            &[],
        ),
        (r#"{ status = error } | count() >= 1"#, &[2, 4]),
        ("{ } | max(duration) > 1", ALL),
    ]);
    assert_eq!(spans(r#"{ span.db.system = "postgresql" }"#), vec![4]);
}

#[test]
fn child_count_and_nil_on_either_side() {
    check(&[
        ("{ span:childCount = 3 }", &[0]),
        ("{ span:childCount = 2 }", &[3]),
        ("{ span:childCount > 0 }", &[0, 2, 3]),
        ("{ span:childCount = 0 && kind = internal }", &[1, 5, 6, 7]),
        ("{ nil = span.http.status_code }", &[1, 3, 4, 5, 6]),
        ("{ nil != span.http.status_code }", &[0, 2, 7]),
        ("{ (span.user.id + 1) != nil }", &[1]),
        ("{ nil = nil }", &[]),
        ("{ nil != nil }", &[]),
        ("{ span:parentID = nil }", &[0]),
    ]);
    let err = |q: &str| eval(&parse(q).expect(q), &fixture()).expect_err(q).to_string();
    assert_eq!(
        err("{ span:status = nil }"),
        "invalid query: `status = nil` is not valid because the intrinsic status cannot be nil"
    );
}

#[test]
fn sibling_operators() {
    check(&[
        // [1], [2] and [6] share the parent [0]; [4] and [5] share [3].
        (r#"{ name = "auth" } ~ { }"#, &[2, 6]),
        ("{ } ~ { }", &[1, 2, 4, 5, 6]),
        // A span is not its own sibling.
        (r#"{ name = "auth" } ~ { name = "auth" }"#, &[]),
        ("{ kind = client } ~ { }", &[1, 5, 6]),
        ("{ kind = client } ~ { kind = client }", &[]),
        // The orphan [7] (parent not in the trace) and the lone root have no siblings.
        (r#"{ } ~ { name = "late" }"#, &[]),
        (r#"{ name = "late" } ~ { }"#, &[]),
        // Negated: the right-hand spans without a sibling on the left.
        ("{ } !~ { }", &[0, 3, 7]),
        (r#"{ name = "auth" } !~ { }"#, &[0, 1, 3, 4, 5, 7]),
        (r#"{ name = "auth" } !~ { name = "auth" }"#, &[1]),
        ("{ span.nope } !~ { kind = server }", &[0, 3]),
        // Union: both sides' spans that have a sibling on the other side.
        (r#"{ name = "auth" } &~ { kind = internal }"#, &[1, 6]),
        (r#"{ name = "cache" } &~ { status = error }"#, &[4, 5]),
        (r#"{ name = "auth" } &~ { name = "auth" }"#, &[]),
        ("{ span.nope } &~ { }", &[]),
    ]);
    // Spans without a parent id are siblings of each other (Tempo gives every root the same
    // nested-set parent).
    let mut two_roots = fixture();
    two_roots.spans[7].parent_span_id = None;
    assert_eq!(spans_of(r#"{ name = "late" } ~ { }"#, &two_roots), vec![0]);
    assert_eq!(spans_of("{ } !~ { }", &two_roots), vec![3]);
    // A parent cycle: [0] and [2] share the parent [1]; [4] names itself and has no siblings.
    let t = cyclic();
    assert_eq!(spans_of(r#"{ name = "a" } ~ { }"#, &t), vec![2]);
    assert_eq!(spans_of(r#"{ name = "e" } ~ { }"#, &t), Vec::<usize>::new());
    assert_eq!(spans_of("{ } ~ { }", &t), vec![0, 2]);
}

#[test]
fn union_structural_operators() {
    check(&[
        // `&>`: the children on the right and their parents on the left.
        ("{ kind = server } &> { }", &[0, 1, 2, 3, 4, 5, 6]),
        ("{ kind = server } &> { status = error }", &[0, 2, 3, 4]),
        (r#"{ kind = server } &> { name = "late" }"#, &[]),
        // `&>>`: descendants and their ancestors.
        (
            r#"{ name = "GET /" } &>> { resource.service.name = "backend" }"#,
            &[0, 3, 4, 5],
        ),
        (r#"{ } &>> { name = "cache" }"#, &[0, 2, 3, 5]),
        // `&<`: the parents on the right and their children on the left.
        ("{ status = error } &< { kind = server }", &[0, 2, 3, 4]),
        (r#"{ name = "db query" } &< { }"#, &[3, 4]),
        // `&<<`: the ancestors on the right and their descendants on the left.
        (r#"{ name = "db query" } &<< { }"#, &[0, 2, 3, 4]),
        (r#"{ name = "db query" } &<< { kind = server }"#, &[0, 3, 4]),
        ("{ span.nope } &> { }", &[]),
        ("{ } &> { span.nope }", &[]),
        // A span is not its own relative.
        (r#"{ name = "handle" } &>> { name = "handle" }"#, &[]),
        // Chains group left to right: the first gives [0, 2, 3, 4], whose child [3] is a server.
        ("{ kind = server } &> { kind = client } &> { }", &[0, 1, 2, 3, 4, 5, 6]),
        ("{ kind = server } &> { kind = client } &> { kind = server }", &[2, 3]),
    ]);
    // Per by() group, as the other structural operators.
    assert_eq!(
        groups("{ } | by(resource.service.name) | { } &> { }", &fixture()),
        vec![vec![0, 1, 2, 6], vec![3, 4, 5]]
    );
}

#[test]
fn event_time_since_start() {
    // [2] starts at 1200; its events are at 1300 and 1400.
    check(&[
        ("{ event:timeSinceStart = 100ns }", &[2]),
        ("{ event:timeSinceStart > 150ns }", &[2]),
        ("{ event:timeSinceStart > 200ns }", &[]),
        ("{ event:timeSinceStart >= 200 }", &[2]),
        ("{ event:timeSinceStart < 1ms }", &[2]),
        ("{ event:timeSinceStart != nil }", &[2]),
        ("{ event:timeSinceStart = nil }", &[0, 1, 3, 4, 5, 6, 7]),
        // Each comparison reads one event: the retry event is 200ns in.
        (r#"{ (event:name = "retry") = (event:timeSinceStart = 200ns) }"#, &[2]),
        ("{ event:timeSinceStart * 2 = 400 }", &[2]),
    ]);
    let t = fixture();
    let got = sets(r#"{ name = "call backend" } | select(event:timeSinceStart)"#, &t);
    assert_eq!(got[0].selected_values, vec![vec![Value::Duration(100)]]);
    // An event before its span's start is a negative duration, as Tempo reads it.
    let mut early = fixture();
    early.spans[0].events = vec![Event {
        name: "early".to_owned(),
        time_unix_nano: 900,
        attrs: Vec::new(),
    }];
    assert_eq!(spans_of("{ event:timeSinceStart < 0 }", &early), vec![0]);
    assert_eq!(spans_of("{ event:timeSinceStart = -100ns }", &early), vec![0]);
    // Outside comparisons, the first event counts: -100ns for [0], 100ns for [2].
    assert_eq!(
        groups("{ } | max(event:timeSinceStart) = 100ns", &early),
        vec![ALL.to_vec()]
    );
    assert_eq!(
        groups("{ } | min(event:timeSinceStart) = -100ns", &early),
        vec![ALL.to_vec()]
    );
}

#[test]
fn coalesce_merges_spansets() {
    let t = fixture();
    let got = sets("{ } | by(resource.service.name) | coalesce()", &t);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spans, ALL);
    // Tempo's coalesce() starts a new spanset: earlier attributes are gone.
    assert!(got[0].attributes.is_empty());
    let got = sets(
        "{ status = error } | by(resource.service.name) | count() = 1 | coalesce() | count() = 2",
        &t,
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spans, vec![2, 4]);
    assert_eq!(got[0].attributes, vec![("count()".to_owned(), Value::Int(2))]);
    // Structural operators relate across the former groups again.
    assert_eq!(
        groups("{ } | by(kind) | coalesce() | { } > { }", &t),
        vec![vec![1, 2, 3, 4, 5, 6]]
    );
    // Selected fields survive.
    let got = sets(r#"{ kind = server } | select(name) | by(status) | coalesce()"#, &t);
    assert_eq!(got[0].selected, vec!["name"]);
    assert_eq!(got[0].selected_values, vec![vec![s("GET /")], vec![s("handle")]]);
    // Nothing to merge: no spanset.
    assert!(groups("{ span.nope } | by(kind) | coalesce()", &t).is_empty());
}

#[test]
fn pipelines_as_spanset_operands() {
    let t = fixture();
    check(&[
        ("({ } | count() > 1) && { span.http.status_code = 200 }", ALL),
        ("({ status = error } | count() > 2) && { }", &[]),
        ("({ status = error } | count() = 2) || { kind = server }", &[0, 2, 3, 4]),
        // Every spanset the operand yields contributes its spans.
        (
            r#"({ } | by(resource.service.name) | count() = 4) && { name = "auth" }"#,
            ALL,
        ),
        (
            r#"({ status = error } | by(resource.service.name) | count() > 1) || { name = "auth" }"#,
            &[1],
        ),
        (
            "({ } | by(resource.service.name) | coalesce()) > { status = error }",
            &[2, 4],
        ),
        // avg(duration) is 362.5, so the operand keeps every span.
        ("{ kind = server } > ({ } | avg(duration) > 300)", &[1, 2, 4, 5, 6]),
        ("{ kind = server } > ({ } | avg(duration) > 400)", &[]),
        (
            "({ kind = server } | { status = ok }) &> ({ } | { kind = client })",
            &[0, 2, 3, 4],
        ),
    ]);
    // The operand sees its input spanset only: each by() group on its own.
    assert_eq!(
        groups(
            "{ } | by(resource.service.name) | ({ } | count() > 3) && { status = error }",
            &t
        ),
        vec![vec![0, 1, 2, 6], vec![3, 4, 5, 7]]
    );
    assert_eq!(
        groups(
            r#"{ } | by(resource.service.name) | ({ status = error } | count() = 1) && { name = "auth" }"#,
            &t
        ),
        vec![vec![1, 2]]
    );
    // Attributes set inside the operand stay there, as in Tempo; select() fields are reported.
    let got = sets("({ } | count() > 1) && { }", &t);
    assert!(got[0].attributes.is_empty());
    let got = sets(
        "({ status = error } | select(span.http.status_code)) && { kind = server }",
        &t,
    );
    assert_eq!(got[0].spans, vec![0, 2, 3, 4]);
    assert_eq!(got[0].selected, vec!["span.http.status_code"]);
    assert_eq!(got[0].selected_values[1], vec![Value::Int(500)]);
    // A structural operand that by() may split is refused, as Tempo fails such queries.
    let err = eval(&parse("({ } | by(kind)) > { }").unwrap(), &t).unwrap_err();
    assert!(
        err.to_string().contains("end that pipeline with '| coalesce()'"),
        "{err}"
    );
}

#[test]
fn hints_are_accepted() {
    check(&[
        ("{ status = error } with(most_recent=true)", &[2, 4]),
        ("{ } with(sample=0.1)", ALL),
        ("{ } with(sample=true, trace_sample=0.5, span_sample=0.5)", ALL),
        (r#"{ kind = server } with(no_such_hint="x")"#, &[0, 3]),
    ]);
}

/// Nested sets of the fixture: a depth-first walk by start time from the root; `late` [7],
/// whose parent is missing, gets zeros.
///
/// ```text
/// [0] 1..14 ─ [1] 2..3, [2] 4..11 ─ [3] 5..10 ─ [4] 6..7, [5] 8..9; [6] 12..13
/// ```
#[test]
fn nested_sets() {
    check(&[
        ("{ nestedSetParent = -1 }", &[0]),
        (
            "{ nestedSetLeft = 0 && nestedSetRight = 0 && nestedSetParent = 0 }",
            &[7],
        ),
        ("{ nestedSetParent = 5 }", &[4, 5]),
        ("{ nestedSetParent = 1 }", &[1, 2, 6]),
        ("{ nestedSetRight - nestedSetLeft = 1 }", &[1, 4, 5, 6]),
        ("{ nestedSetLeft > 5 && nestedSetRight < 10 }", &[4, 5]),
        ("{ nestedSetLeft = 12 && nestedSetRight = 13 }", &[6]),
        ("{ nestedSetRight = 14 }", &[0]),
    ]);
}

/// Arithmetic between fields: numbers mix as `f64` (durations in nanoseconds); a nil or
/// non-numeric operand makes the comparison false.
#[test]
fn arithmetic_between_fields() {
    check(&[
        ("{ span.ratio * span.user.id > 1 }", &[1]),
        ("{ duration - span.http.status_code > 500 }", &[0]),
        ("{ duration - span.http.status_code != 0 }", &[0, 2]),
        ("{ span.http.status_code / span.http.status_code = 1 }", &[0, 2]),
        ("{ span.http.status_code % (span.http.status_code - 100) = 100 }", &[2]),
        ("{ duration + duration = 2000 }", &[0]),
        ("{ -span.ratio = 0 - span.ratio }", &[1, 5]),
    ]);
}
