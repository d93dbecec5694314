//! Model-based tests of the evaluator.
//!
//! `eval` is checked against a deliberately naive reference evaluator on random traces (random
//! parent links, so forests, orphans, duplicate ids and cycles all occur) and random queries
//! from a small grammar. The reference interprets the syntax tree directly: structural
//! operators check every pair of spans, ancestors come from walking parent links at most
//! `spans.len()` steps, parents are found by scanning all spans, and aggregates use plain `f64`
//! arithmetic. Every supported query of the shared corpus must also evaluate on random traces
//! without an error (or a panic).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::FileFailurePersistence;
use serde::Deserialize;
use weft_traceql::ast::{Kind, Query, Stage, Status};
use weft_traceql::{Event, Link, Span, Trace, Value, eval, eval_metrics, parse, supported, validate};

// The reference evaluator, in `tests/model/` so that Cargo does not build it as a test of its own.
#[path = "model/reference.rs"]
mod reference;

use reference::Model;

// ---------------------------------------------------------------------------------------------
// Random traces

fn id(n: u8) -> [u8; 8] {
    [0, 0, 0, 0, 0, 0, 0, n]
}

fn value() -> BoxedStrategy<Value> {
    let scalar = prop_oneof![
        select(vec!["x", "y", ""]).prop_map(|s| Value::Str(s.to_owned())),
        (-1i64..=2).prop_map(Value::Int),
        select(vec![-0.5, 0.0, 1.0, 1.5]).prop_map(Value::Float),
        any::<bool>().prop_map(Value::Bool),
        (0i64..=60).prop_map(Value::Duration),
    ];
    prop_oneof![
        8 => scalar.clone(),
        1 => Just(Value::Nil),
        1 => prop::collection::vec(scalar, 0..3).prop_map(Value::Array),
    ]
    .boxed()
}

fn attrs() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::vec((select(vec!["a", "b", "c"]), value()), 0..3)
        .prop_map(|v| v.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

type SpanSeed = (
    u8,
    (u8, u8),
    usize,
    (usize, usize),
    (u64, u64),
    Vec<(String, Value)>,
    (usize, Vec<(String, Value)>),
    Vec<(usize, Vec<(String, Value)>)>,
    Vec<(u8, Vec<(String, Value)>)>,
    Vec<(String, Value)>,
);

fn span_seed() -> impl Strategy<Value = SpanSeed> {
    (
        0u8..12,
        (0u8..4, 0u8..16),
        0usize..3,
        (0usize..6, 0usize..3),
        (0u64..100, 0u64..100),
        attrs(),
        (0usize..2, attrs()),
        prop::collection::vec((0usize..2, attrs()), 0..3),
        prop::collection::vec((0u8..3, attrs()), 0..2),
        attrs(),
    )
}

fn trace() -> impl Strategy<Value = Trace> {
    prop::collection::vec(span_seed(), 0..9).prop_map(|seeds| {
        let n = seeds.len() as u8;
        let ids: Vec<u8> = seeds.iter().map(|s| s.0 % (n + 2) + 1).collect();
        let kinds = [
            Kind::Unspecified,
            Kind::Internal,
            Kind::Server,
            Kind::Client,
            Kind::Producer,
            Kind::Consumer,
        ];
        let statuses = [Status::Unset, Status::Ok, Status::Error];
        let spans = seeds
            .into_iter()
            .enumerate()
            .map(
                |(
                    i,
                    (_, (mode, k), name, (kind, status), (start, dur), span_attrs, (svc, res), events, links, scope),
                )| {
                    let parent = match mode {
                        0 => None,
                        1 | 2 if i > 0 => Some(id(ids[usize::from(k) % i])),
                        1 | 2 => None,
                        // Any id: missing from the trace, the span itself, or one that closes a cycle.
                        _ => Some(id(k % (n + 3) + 1)),
                    };
                    let mut resource_attrs =
                        vec![("service.name".to_owned(), Value::Str(["api", "db"][svc].to_owned()))];
                    resource_attrs.extend(res);
                    Span {
                        trace_id: [0x0a; 16],
                        span_id: id(ids[i]),
                        parent_span_id: parent,
                        name: ["a", "b", "c"][name].to_owned(),
                        kind: kinds[kind],
                        status: statuses[status],
                        status_message: if status == 2 { "boom" } else { "" }.to_owned(),
                        start_unix_nano: start,
                        duration_nano: dur,
                        span_attrs,
                        resource_attrs,
                        scope_name: ["lib1", "lib2"][svc].to_owned(),
                        scope_version: "1".to_owned(),
                        scope_attrs: scope,
                        events: events
                            .into_iter()
                            .enumerate()
                            .map(|(e, (name, attrs))| Event {
                                name: ["exception", "retry"][name].to_owned(),
                                time_unix_nano: start + e as u64,
                                attrs,
                            })
                            .collect(),
                        links: links
                            .into_iter()
                            .map(|(s, attrs)| Link {
                                trace_id: [0xab; 16],
                                span_id: [s; 8],
                                attrs,
                            })
                            .collect(),
                    }
                },
            )
            .collect();
        Trace { spans }
    })
}

// ---------------------------------------------------------------------------------------------
// Random queries

const ATTRS: &[&str] = &[
    ".a",
    ".b",
    ".c",
    "span.a",
    "span.b",
    "resource.a",
    "resource.c",
    "event.a",
    "event.b",
    "link.a",
    "instrumentation.b",
];
const STRING_FIELDS: &[&str] = &[
    "name",
    "statusMessage",
    "rootName",
    "rootServiceName",
    "event:name",
    "span:parentID",
    "span:id",
    "instrumentation:name",
    "link:spanID",
    "resource.service.name",
];
const ORDER_OPS: &[&str] = &["=", "!=", "<", "<=", ">", ">="];

fn comparison() -> BoxedStrategy<String> {
    let join3 = |(a, b, c): (&str, &str, &str)| format!("{a} {b} {c}");
    prop_oneof![
        (
            select(ATTRS),
            select(ORDER_OPS),
            select(vec![
                "\"x\"", "\"y\"", "\"\"", "-1", "0", "1", "2", "0.5", "1.5", "20ns", "-0.5"
            ]),
        )
            .prop_map(join3),
        (
            select(ATTRS),
            select(vec!["=", "!="]),
            select(vec!["true", "false", "error", "ok", "server", "nil"]),
        )
            .prop_map(join3),
        (
            select([ATTRS, STRING_FIELDS].concat()),
            select(vec!["=~", "!~"]),
            select(vec![
                "\"x\"", "\"x|y\"", "\".*\"", "\"a.*\"", "\"\"", "\"[ab]\"", "\"0.*1\""
            ]),
        )
            .prop_map(join3),
        (
            select(STRING_FIELDS),
            select(ORDER_OPS),
            select(vec![
                "\"a\"",
                "\"b\"",
                "\"api\"",
                "\"\"",
                "\"0000000000000001\"",
                "\"boom\"",
                "\"retry\""
            ]),
        )
            .prop_map(join3),
        (select(STRING_FIELDS), select(vec!["=", "!="]), Just("nil")).prop_map(join3),
        (
            Just("nil"),
            select(vec!["=", "!="]),
            select([ATTRS, STRING_FIELDS, &["nil"]].concat())
        )
            .prop_map(join3),
        (
            Just("span:childCount"),
            select(ORDER_OPS),
            select(vec!["0", "1", "2", "1.5"]),
        )
            .prop_map(join3),
        (
            select(vec!["duration", "traceDuration"]),
            select(ORDER_OPS),
            select(vec!["30ns", "50", "1.5", "0", "60ns"]),
        )
            .prop_map(join3),
        (
            Just("event:timeSinceStart"),
            select(ORDER_OPS),
            select(vec!["0", "1ns", "2", "1.5", "-1ns"]),
        )
            .prop_map(join3),
        (Just("event:timeSinceStart"), select(vec!["=", "!="]), Just("nil")).prop_map(join3),
        (
            Just("status"),
            select(vec!["=", "!="]),
            select(vec!["error", "ok", "unset"])
        )
            .prop_map(join3),
        (
            Just("kind"),
            select(vec!["=", "!="]),
            select(vec!["server", "client", "internal"])
        )
            .prop_map(join3),
        (
            select(vec![".a", "span.b", "duration", "event.a"]),
            select(vec!["* 2", "+ 1", "- 1", "^ 2"]),
            select(ORDER_OPS),
            select(vec!["0", "1", "2", "40", "0.5"]),
        )
            .prop_map(|(f, a, op, v)| format!("{f} {a} {op} {v}")),
        (select(ATTRS), select(ORDER_OPS), select(ATTRS)).prop_map(join3),
        // Arithmetic between fields.
        (
            select(vec![".a", "span.b", "duration", "span:childCount"]),
            select(vec!["+", "-", "*", "/", "%", "^"]),
            select(vec![".a", "span.b", "duration", "nestedSetLeft"]),
            select(ORDER_OPS),
            select(vec!["0", "1", "2", "40", "0.5", "span.b", "10ns"]),
        )
            .prop_map(|(f, a, g, op, v)| format!("{f} {a} {g} {op} {v}")),
        // Either side first. A comparison of `nestedSetParent` whose result depends only on
        // root-ness is evaluated from the parent ID alone (`ast::root_test`).
        (
            select(vec!["nestedSetLeft", "nestedSetRight", "nestedSetParent"]),
            select(ORDER_OPS),
            select(vec!["-2", "-1", "0", "1", "2", "3", "5"]),
            any::<bool>(),
        )
            .prop_map(|(f, op, v, literal_first)| {
                if literal_first {
                    format!("{v} {op} {f}")
                } else {
                    format!("{f} {op} {v}")
                }
            }),
        Just("nestedSetRight - nestedSetLeft > 1".to_owned()),
    ]
    .boxed()
}

fn field_filter() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        6 => comparison(),
        1 => select(ATTRS).prop_map(str::to_owned),
        1 => Just("true".to_owned()),
    ];
    leaf.prop_recursive(2, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), select(vec!["&&", "||"]), inner.clone()).prop_map(|(a, op, b)| format!("({a}) {op} ({b})")),
            inner.prop_map(|a| format!("!({a})")),
        ]
    })
    .boxed()
}

fn spanset_expr() -> BoxedStrategy<String> {
    let filter = prop_oneof![
        2 => Just("{ }".to_owned()),
        5 => field_filter().prop_map(|f| format!("{{ {f} }}")),
    ];
    // Pipelines as operands: an aggregate filter, by() (merged by `&&`/`||`, refused by
    // structural operators unless coalesce() follows), and plain filter chains.
    let operand_pipeline = (
        filter.clone(),
        select(vec![
            "count() > 1",
            "count() = 1",
            "avg(duration) > 30",
            "by(resource.service.name) | count() > 1",
            "by(.a) | coalesce()",
            "by(kind) | count() = 1 | coalesce() | count() > 1",
            "{ status = error }",
        ]),
    )
        .prop_map(|(f, rest)| format!("({f} | {rest})"));
    let leaf = prop_oneof![
        8 => filter,
        1 => operand_pipeline,
    ];
    leaf.prop_recursive(3, 8, 2, |inner| {
        (
            inner.clone(),
            select(vec![
                "&&", "||", ">", ">>", "<", "<<", "~", "!>", "!>>", "!<", "!<<", "!~", "&>", "&>>", "&<", "&<<", "&~",
            ]),
            inner,
        )
            .prop_map(|(a, op, b)| format!("({a}) {op} ({b})"))
    })
    .boxed()
}

fn stage() -> BoxedStrategy<String> {
    prop_oneof![
        (select(ORDER_OPS), 0u8..5).prop_map(|(op, n)| format!("count() {op} {n}")),
        (
            select(vec!["avg", "min", "max", "sum"]),
            select(vec!["duration", "span.a", ".b", "event.a", "span.b * 2"]),
            select(ORDER_OPS),
            select(vec!["0", "1", "30", "30ns", "0.5"]),
        )
            .prop_map(|(f, x, op, v)| format!("{f}({x}) {op} {v}")),
        field_filter().prop_map(|f| format!("{{ {f} }}")),
        select(vec![
            "resource.service.name",
            ".a",
            "span.b",
            "kind",
            "event:name",
            "span.a * 2"
        ])
        .prop_map(|f| format!("by({f})")),
        prop::collection::vec(
            select(vec![".a", "span.b", "name", "event.a", "span:id", "link:spanID"]),
            1..3
        )
        .prop_map(|fields| format!("select({})", fields.join(", "))),
        Just("coalesce()".to_owned()),
    ]
    .boxed()
}

fn query_text() -> impl Strategy<Value = String> {
    (spanset_expr(), prop::collection::vec(stage(), 0..3))
        .prop_map(|(first, rest)| std::iter::once(first).chain(rest).collect::<Vec<_>>().join(" | "))
}

/// Parses, validates and support-checks a generated query; `None` if any step refuses it.
fn accept(text: &str) -> Option<Query> {
    let q = parse(text).ok()?;
    validate(&q).ok()?;
    supported(&q).ok()?;
    Some(q)
}

// ---------------------------------------------------------------------------------------------
// Properties

fn check(trace: &Trace, text: &str) -> Result<bool, TestCaseError> {
    let Some(query) = accept(text) else {
        return Ok(false);
    };
    let got = eval(&query, trace).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
    let want = Model::new(trace).eval(&query);
    if got != want {
        return Err(TestCaseError::fail(format!(
            "`{text}` (parsed as `{query}`)\n  eval:  {got:?}\n  model: {want:?}\n  trace: {trace:#?}"
        )));
    }
    Ok(true)
}

/// `eval_metrics` agrees with the spansets `eval` returns for the same spanset query: per step
/// of `[10, 90)` by 20ns, the span counts per service and the longest duration.
fn check_metrics(trace: &Trace, text: &str) -> Result<bool, TestCaseError> {
    let Some(query) = accept(text) else {
        return Ok(false);
    };
    let fail = |e: String| TestCaseError::fail(format!("`{text}`: {e}"));
    let spans: BTreeSet<usize> = eval(&query, trace)
        .map_err(|e| fail(e.to_string()))?
        .iter()
        .flat_map(|s| s.spans.iter().copied())
        .collect();
    let (start, end, step) = (10u64, 90u64, 20u64);
    let mut counts: std::collections::BTreeMap<String, Vec<Option<f64>>> = Default::default();
    let mut longest: Vec<Option<f64>> = vec![None; 4];
    for &i in &spans {
        let span = &trace.spans[i];
        if span.start_unix_nano < start || span.start_unix_nano >= end {
            continue;
        }
        let n = ((span.start_unix_nano - start) / step) as usize;
        let service = span.service_name().unwrap_or_default().to_owned();
        let row = counts.entry(service).or_insert_with(|| vec![Some(0.0); 4]);
        row[n] = row[n].map(|c| c + 1.0);
        let d = span.duration_nano as f64 / 1e9;
        longest[n] = Some(longest[n].map_or(d, |m: f64| m.max(d)));
    }
    let run = |metrics: &str| {
        let q = parse(&format!("{text} | {metrics}")).map_err(|e| fail(e.to_string()))?;
        eval_metrics(&q, [trace], start, end, step).map_err(|e| fail(e.to_string()))
    };
    let got: std::collections::BTreeMap<String, Vec<Option<f64>>> =
        run("count_over_time() by (resource.service.name)")?
            .into_iter()
            .map(|s| match &s.labels[..] {
                [(_, Value::Str(service))] => Ok((service.clone(), s.values)),
                other => Err(fail(format!("unexpected labels {other:?}"))),
            })
            .collect::<Result<_, _>>()?;
    prop_assert_eq!(&got, &counts, "`{}` counts", text);
    let max = run("max_over_time(duration)")?;
    let want: Vec<_> = if counts.is_empty() { Vec::new() } else { vec![longest] };
    let got: Vec<_> = max.into_iter().map(|s| s.values).collect();
    prop_assert_eq!(got, want, "`{}` max duration", text);

    // compare(): span names per step, for the error spans (selection) and the others, and
    // each group's total.
    type Counts = std::collections::BTreeMap<(String, String), Vec<Option<f64>>>;
    let mut want = Counts::new();
    for &i in &spans {
        let span = &trace.spans[i];
        if span.start_unix_nano < start || span.start_unix_nano >= end {
            continue;
        }
        let n = ((span.start_unix_nano - start) / step) as usize;
        let group = if span.status == Status::Error {
            "selection"
        } else {
            "baseline"
        };
        for key in [
            (group.to_owned(), span.name.clone()),
            (format!("{group}_total"), "nil".to_owned()),
        ] {
            let row = want.entry(key).or_insert_with(|| vec![Some(0.0); 4]);
            row[n] = row[n].map(|c| c + 1.0);
        }
    }
    let mut got = Counts::new();
    for s in run("compare({ status = error }, 1000)")? {
        if let [(_, Value::Str(meta)), (key, Value::Str(name))] = &s.labels[..]
            && key == "name"
        {
            got.insert((meta.clone(), name.clone()), s.values);
        }
    }
    prop_assert_eq!(got, want, "`{}` compare names", text);
    Ok(true)
}

#[derive(Deserialize)]
struct Corpus {
    valid: Vec<String>,
    unsupported: Vec<Unsupported>,
}

#[derive(Deserialize)]
struct Unsupported {
    query: String,
}

/// The corpus queries the evaluator must run: `valid` minus `unsupported`.
fn runnable_corpus() -> &'static [Query] {
    static QUERIES: OnceLock<Vec<Query>> = OnceLock::new();
    QUERIES.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/traceql/queries.yaml");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let corpus: Corpus = serde_yaml::from_str(&text).unwrap();
        let unsupported: BTreeSet<String> = corpus.unsupported.into_iter().map(|u| u.query).collect();
        corpus
            .valid
            .iter()
            .filter(|q| !unsupported.contains(*q))
            .map(|q| parse(q).unwrap())
            .collect()
    })
}

#[test]
fn generator_mostly_produces_accepted_queries() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = query_text();
    let mut accepted = 0;
    for _ in 0..500 {
        let text = strategy.new_tree(&mut runner).unwrap().current();
        if accept(&text).is_some() {
            accepted += 1;
        }
    }
    assert!(
        accepted >= 400,
        "only {accepted} of 500 generated queries were accepted"
    );
}

#[test]
fn corpus_has_runnable_queries() {
    assert!(runnable_corpus().len() >= 100, "{}", runnable_corpus().len());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3000,
        // Integration tests have no lib.rs beside them, so name the regressions file directly.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn eval_matches_the_reference(trace in trace(), queries in prop::collection::vec(query_text(), 4)) {
        for text in &queries {
            check(&trace, text)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn metrics_agree_with_spansets(trace in trace(), queries in prop::collection::vec(query_text(), 2)) {
        for text in &queries {
            check_metrics(&trace, text)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 150,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn supported_corpus_queries_evaluate(trace in trace()) {
        for query in runnable_corpus() {
            let metrics = query.math.is_some()
                || query
                    .pipeline
                    .stages
                    .iter()
                    .any(|s| matches!(s, Stage::Metrics(_) | Stage::Compare(_)));
            if metrics {
                let result = eval_metrics(query, [&trace], 0, 200, 10);
                prop_assert!(result.is_ok(), "`{}`: {}", query, result.unwrap_err());
            } else {
                let result = eval(query, &trace);
                prop_assert!(result.is_ok(), "`{}`: {}", query, result.unwrap_err());
            }
        }
    }
}

/// Guards the property above against becoming vacuous: enough generated cases must select
/// spans, split into several spansets, and run on traces with parent cycles.
#[test]
fn generated_cases_exercise_the_evaluator() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (traces, queries) = (trace(), query_text());
    let (mut non_empty, mut several, mut cyclic) = (0, 0, 0);
    for _ in 0..1000 {
        let t = traces.new_tree(&mut runner).unwrap().current();
        let text = queries.new_tree(&mut runner).unwrap().current();
        let model = Model::new(&t);
        let on_cycle = |i: usize| {
            let mut at = model.parent[i];
            for _ in 0..t.spans.len() {
                match at {
                    Some(p) if p == i => return true,
                    Some(p) => at = model.parent[p],
                    None => return false,
                }
            }
            false
        };
        if (0..t.spans.len()).any(on_cycle) {
            cyclic += 1;
        }
        if let Some(q) = accept(&text) {
            let got = eval(&q, &t).unwrap();
            non_empty += usize::from(!got.is_empty());
            several += usize::from(got.len() > 1);
        }
    }
    assert!(non_empty >= 200, "{non_empty} of 1000 cases selected spans");
    assert!(several >= 15, "{several} of 1000 cases gave several spansets");
    assert!(cyclic >= 20, "{cyclic} of 1000 traces had a parent cycle");
}
