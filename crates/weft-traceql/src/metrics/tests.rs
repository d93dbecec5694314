//! Hand-written metrics cases over the evaluator's fixture trace.
//!
//! With steps of 500ns from 0 to 2500, the fixture's spans fall in these steps:
//! step 1 `[500, 1000)`: [7]; step 2 `[1000, 1500)`: [0] [1] [2] [3] [4] [5]; step 3: [6].

use crate::ast::Status;
use crate::eval::tests::fixture;
use crate::{EvalError, MAX_METRICS_STEPS, Series, Trace, Value, eval_metrics, parse};

/// A series as (labels, values).
type Row = (Vec<(String, Value)>, Vec<Option<f64>>);

fn run_on(q: &str, traces: &[Trace], start: u64, end: u64, step: u64) -> Vec<Series> {
    let query = parse(q).unwrap_or_else(|e| panic!("`{q}`: {e}"));
    eval_metrics(&query, traces, start, end, step).unwrap_or_else(|e| panic!("`{q}`: {e}"))
}

fn run(q: &str) -> Vec<Series> {
    run_on(q, &[fixture()], 0, 2500, 500)
}

fn label(name: &str, value: Value) -> (String, Value) {
    (name.to_owned(), value)
}

fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

fn counts(values: &[f64]) -> Vec<Option<f64>> {
    values.iter().map(|&v| Some(v)).collect()
}

/// Compares step values with a relative tolerance (seconds are fractions of nanoseconds).
fn assert_close(got: &[Option<f64>], want: &[Option<f64>]) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        match (g, w) {
            (Some(g), Some(w)) => assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1e-300),
                "got {got:?}, want {want:?}"
            ),
            _ => assert_eq!(g, w, "got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn count_and_rate() {
    assert_eq!(
        run("{ } | count_over_time()"),
        vec![Series {
            labels: vec![label("__name__", s("count_over_time"))],
            values: counts(&[0.0, 1.0, 6.0, 1.0, 0.0]),
            exemplars: Vec::new(),
        }]
    );
    let rate = run("{ } | rate()");
    assert_eq!(rate[0].labels, vec![label("__name__", s("rate"))]);
    // 500ns steps: one span is 2,000,000 spans per second.
    assert_close(&rate[0].values, &counts(&[0.0, 2e6, 12e6, 2e6, 0.0]));
    let errors = run("{ status = error } | rate()");
    assert_close(&errors[0].values, &counts(&[0.0, 0.0, 4e6, 0.0, 0.0]));
    // A structural query counts the spans it returns.
    let children = run("{ kind = server } > { } | count_over_time()");
    assert_eq!(children[0].values, counts(&[0.0, 0.0, 4.0, 1.0, 0.0]));
    // No span matches: no series.
    assert!(run("{ span.nope } | rate()").is_empty());
}

#[test]
fn by_labels() {
    assert_eq!(
        run("{ } | count_over_time() by (resource.service.name)"),
        vec![
            Series {
                labels: vec![label("resource.service.name", s("backend"))],
                values: counts(&[0.0, 1.0, 3.0, 0.0, 0.0]),
                exemplars: Vec::new(),
            },
            Series {
                labels: vec![label("resource.service.name", s("frontend"))],
                values: counts(&[0.0, 0.0, 3.0, 1.0, 0.0]),
                exemplars: Vec::new(),
            },
        ]
    );
    // Spans lacking the field form the nil series; series are sorted by label value.
    let got = run("{ } | count_over_time() by (span.http.status_code)");
    let labels: Vec<_> = got.iter().map(|s| s.labels.clone()).collect();
    assert_eq!(
        labels,
        vec![
            vec![label("span.http.status_code", Value::Nil)],
            vec![label("span.http.status_code", Value::Int(200))],
            vec![label("span.http.status_code", Value::Int(500))],
            vec![label("span.http.status_code", s("500"))],
        ]
    );
    assert_eq!(got[0].values, counts(&[0.0, 0.0, 4.0, 1.0, 0.0]));
    // Nil values are left out of the labels; the rest keep their order.
    let got = run("{ } | count_over_time() by (resource.service.name, span.http.status_code)");
    let labels: Vec<_> = got.iter().map(|s| s.labels.clone()).collect();
    assert_eq!(
        labels,
        vec![
            vec![label("resource.service.name", s("backend"))],
            vec![
                label("resource.service.name", s("backend")),
                label("span.http.status_code", s("500")),
            ],
            vec![label("resource.service.name", s("frontend"))],
            vec![
                label("resource.service.name", s("frontend")),
                label("span.http.status_code", Value::Int(200)),
            ],
            vec![
                label("resource.service.name", s("frontend")),
                label("span.http.status_code", Value::Int(500)),
            ],
        ]
    );
    let got = run("{ } | rate() by (status)");
    assert_eq!(got.len(), 3);
    let got = run("{ } | rate() by (event:name)");
    assert_eq!(got[0].labels, vec![label("event:name", Value::Nil)]);
    assert_eq!(got[1].labels, vec![label("event:name", s("exception"))]);
}

#[test]
fn over_time_aggregates() {
    // Step 2 durations: 1000 100 700 600 400 10 ns; step 1: 50; step 3: 40 (in seconds).
    let ns = |x: f64| Some(x * 1e-9);
    let min = run("{ } | min_over_time(duration)");
    assert_eq!(min[0].labels, vec![label("__name__", s("min_over_time"))]);
    assert_close(&min[0].values, &[None, ns(50.0), ns(10.0), ns(40.0), None]);
    let max = run("{ } | max_over_time(duration)");
    assert_close(&max[0].values, &[None, ns(50.0), ns(1000.0), ns(40.0), None]);
    let sum = run("{ } | sum_over_time(duration)");
    assert_close(&sum[0].values, &[None, ns(50.0), ns(2810.0), ns(40.0), None]);
    let avg = run("{ } | avg_over_time(duration)");
    assert_close(&avg[0].values, &[None, ns(50.0), ns(2810.0 / 6.0), ns(40.0), None]);
    // Integers stay as they are; strings are skipped and start no series.
    let sum = run("{ } | sum_over_time(span.http.status_code) by (resource.service.name)");
    assert_eq!(
        sum,
        vec![Series {
            labels: vec![label("resource.service.name", s("frontend"))],
            values: vec![None, None, Some(700.0), None, None],
            exemplars: Vec::new(),
        }]
    );
    let avg = run("{ } | avg_over_time(span.ratio)");
    assert_close(&avg[0].values, &[None, None, Some(0.375), None, None]);
    assert!(run("{ } | max_over_time(span.nope)").is_empty());
}

#[test]
fn quantiles_are_exact() {
    // Step 2, ascending: 10 100 400 600 700 1000 ns.
    let got = run("{ } | quantile_over_time(duration, 0.9, 0.5, 0, 1)");
    let labels: Vec<_> = got.iter().map(|s| s.labels.clone()).collect();
    assert_eq!(
        labels,
        vec![
            vec![label("p", Value::Float(0.0))],
            vec![label("p", Value::Float(0.5))],
            vec![label("p", Value::Float(0.9))],
            vec![label("p", Value::Float(1.0))],
        ]
    );
    let ns = |x: f64| Some(x * 1e-9);
    assert_close(&got[0].values, &[None, ns(50.0), ns(10.0), ns(40.0), None]);
    // Rank 2.5: halfway between 400 and 600.
    assert_close(&got[1].values, &[None, ns(50.0), ns(500.0), ns(40.0), None]);
    // Rank 4.5: halfway between 700 and 1000.
    assert_close(&got[2].values, &[None, ns(50.0), ns(850.0), ns(40.0), None]);
    assert_close(&got[3].values, &[None, ns(50.0), ns(1000.0), ns(40.0), None]);
    let by = run("{ } | quantile_over_time(duration, 0.5) by (resource.service.name)");
    assert_eq!(
        by.iter().map(|s| s.labels.clone()).collect::<Vec<_>>(),
        vec![
            vec![
                label("resource.service.name", s("backend")),
                label("p", Value::Float(0.5))
            ],
            vec![
                label("resource.service.name", s("frontend")),
                label("p", Value::Float(0.5))
            ],
        ]
    );
    // Backend step 2: 10 400 600 ns.
    assert_close(&by[0].values, &[None, ns(50.0), ns(400.0), None, None]);
    // Floats are included.
    let ratio = run("{ } | quantile_over_time(span.ratio, 0.5)");
    assert_close(&ratio[0].values, &[None, None, Some(0.375), None, None]);
}

#[test]
fn histograms() {
    let got = run("{ } | histogram_over_time(duration)");
    let rows: Vec<Row> = got.into_iter().map(|s| (s.labels, s.values)).collect();
    let bucket = |ns: f64| vec![label("__bucket", Value::Float(ns / 1e9))];
    assert_eq!(
        rows,
        vec![
            (bucket(16.0), counts(&[0.0, 0.0, 1.0, 0.0, 0.0])),
            (bucket(64.0), counts(&[0.0, 1.0, 0.0, 1.0, 0.0])),
            (bucket(128.0), counts(&[0.0, 0.0, 1.0, 0.0, 0.0])),
            (bucket(512.0), counts(&[0.0, 0.0, 1.0, 0.0, 0.0])),
            (bucket(1024.0), counts(&[0.0, 0.0, 3.0, 0.0, 0.0])),
        ]
    );
    // Integers bucket as themselves; strings are skipped; by() labels come first.
    let got = run("{ } | histogram_over_time(span.http.status_code) by (resource.service.name)");
    assert_eq!(
        got,
        vec![
            Series {
                labels: vec![
                    label("resource.service.name", s("frontend")),
                    label("__bucket", Value::Float(256.0)),
                ],
                values: counts(&[0.0, 0.0, 1.0, 0.0, 0.0]),
                exemplars: Vec::new(),
            },
            Series {
                labels: vec![
                    label("resource.service.name", s("frontend")),
                    label("__bucket", Value::Float(512.0)),
                ],
                values: counts(&[0.0, 0.0, 1.0, 0.0, 0.0]),
                exemplars: Vec::new(),
            },
        ]
    );
    // Exact powers of two are their own bucket; floats are skipped.
    assert_eq!(
        run("{ } | histogram_over_time(span.user.id)")[0].labels,
        vec![label("__bucket", Value::Float(8.0))]
    );
    assert!(run("{ } | histogram_over_time(span.ratio)").is_empty());
    // A missing by() field is left out, not labelled nil, for histograms.
    let got = run("{ } | histogram_over_time(span.user.id) by (span.nope)");
    assert_eq!(got[0].labels, vec![label("__bucket", Value::Float(8.0))]);
}

#[test]
fn range_and_traces() {
    let t = fixture();
    // Spans starting at or after the end are ignored; a partial last step still counts.
    let got = run_on("{ } | count_over_time()", std::slice::from_ref(&t), 1000, 1300, 200);
    assert_eq!(got[0].values, counts(&[2.0, 2.0]));
    // Every trace contributes.
    let got = run_on("{ } | count_over_time()", &[t.clone(), t.clone()], 0, 2500, 2500);
    assert_eq!(got[0].values, counts(&[16.0]));
    // Empty input: no series.
    assert!(run_on("{ } | rate()", &[], 0, 10, 1).is_empty());
    assert!(run_on("{ } | rate()", &[Trace::default()], 0, 10, 1).is_empty());
}

#[test]
fn errors() {
    let err = |q: &str, start: u64, end: u64, step: u64| {
        eval_metrics(&parse(q).expect(q), [&fixture()], start, end, step).expect_err(q)
    };
    assert_eq!(
        err("{ }", 0, 10, 1).to_string(),
        "`{ }` is not a metrics query: it has no rate(), count_over_time() or other metrics function"
    );
    assert_eq!(
        err("{ } | rate()", 0, 10, 0).to_string(),
        "invalid metrics range: step must be positive, found 0"
    );
    assert_eq!(
        err("{ } | rate()", 10, 10, 1).to_string(),
        "invalid metrics range: end 10 must be after start 10"
    );
    assert!(matches!(
        err("{ } | rate()", 0, MAX_METRICS_STEPS + 1, 1),
        EvalError::Range { .. }
    ));
    let ok = eval_metrics(&parse("{ } | rate()").unwrap(), [&fixture()], 0, MAX_METRICS_STEPS, 1);
    assert!(ok.is_ok());
    assert!(matches!(
        err(
            "{ } | rate() by (resource.service.name) | compare({ status = error })",
            0,
            10,
            1
        ),
        EvalError::Invalid(_)
    ));
    assert!(matches!(
        err("{ } | compare({ status = error }, 0)", 0, 10, 1),
        EvalError::Range { .. }
    ));
    assert!(matches!(
        err("{ } | compare({ status = error }, 10, 20, 10)", 0, 10, 1),
        EvalError::Range { .. }
    ));
}

/// `compare()`: per group (selection: the error spans [2] and [4]; baseline: the rest), the
/// most frequent values of each attribute and each attribute's total, counted per step.
#[test]
fn compare_counts_attribute_values_of_selection_and_baseline() {
    let got = run_on("{ } | compare({ status = error })", &[fixture()], 0, 2500, 1250);
    let find = |meta: &str, key: &str, value: Value| {
        got.iter()
            .find(|s| {
                s.labels
                    == vec![
                        ("__meta_type".to_owned(), Value::Str(meta.to_owned())),
                        (key.to_owned(), value.clone()),
                    ]
            })
            .unwrap_or_else(|| panic!("no {meta} {key}={value:?} in {got:#?}"))
            .values
            .clone()
    };
    let str = |v: &str| Value::Str(v.to_owned());
    // Starts: [2] 1200, [4] 1300 are in steps 0 and 1.
    assert_eq!(find("selection", "name", str("call backend")), counts(&[1.0, 0.0]));
    assert_eq!(find("selection_total", "name", str("nil")), counts(&[1.0, 1.0]));
    assert_eq!(
        find("selection", "resource.service.name", str("backend")),
        counts(&[0.0, 1.0])
    );
    assert_eq!(
        find("selection", "status", Value::Status(Status::Error)),
        counts(&[1.0, 1.0])
    );
    assert_eq!(
        find("selection", "span.db.system", str("postgresql")),
        counts(&[0.0, 1.0])
    );
    // Baseline: [0] 1000, [1] 1100, [3] 1250, [5] 1310, [6] 1950, [7] 900.
    assert_eq!(
        find("baseline", "resource.service.name", str("frontend")),
        counts(&[2.0, 1.0])
    );
    assert_eq!(
        find("baseline", "resource.service.name", str("backend")),
        counts(&[1.0, 2.0])
    );
    assert_eq!(find("baseline_total", "kind", str("nil")), counts(&[3.0, 3.0]));
    assert_eq!(
        find("baseline", "span.http.status_code", Value::Int(200)),
        counts(&[1.0, 0.0])
    );
    // Arrays, nils and durations are not counted; the error spans are not in the baseline.
    assert!(
        !got.iter()
            .any(|s| s.labels.iter().any(|(k, _)| k == "span.tags" || k == "span.gone"))
    );
    assert!(
        !got.iter()
            .any(|s| s.labels[0].1 == str("baseline") && s.labels[1].0 == "span.db.system")
    );

    // Top N per attribute, by spans over the range: the 2 most frequent names of the baseline.
    let top = run_on("{ } | compare({ status = error }, 1)", &[fixture()], 0, 2500, 2500);
    let names: Vec<_> = top
        .iter()
        .filter(|s| s.labels[0].1 == str("baseline") && s.labels[1].0 == "resource.service.name")
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    // A window selects only spans starting in (start, end]: [4] starts at 1300.
    let w = run_on(
        "{ } | compare({ status = error }, 10, 1250, 1300)",
        &[fixture()],
        0,
        2500,
        2500,
    );
    let sel = |k: &str| {
        w.iter()
            .filter(|s| s.labels[0].1 == str("selection") && s.labels[1].0 == k)
            .map(|s| s.labels[1].1.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(sel("name"), vec![str("db query")]);
}

/// Span-at-a-time evaluation (`resolve` + `record`) gives the same series as whole traces for
/// span-local queries, and `span_local` rejects the queries where it would not.
#[test]
fn span_at_a_time_matches_whole_traces() {
    use crate::MetricsRun;
    let local = [
        "{ } | rate()",
        "{ } | rate() by (resource.service.name)",
        "{ status = error } | count_over_time() by (name)",
        "{ duration > 100ns && kind = server } | rate() by (resource.service.name, status)",
        "{ span.foo = \"bar\" || name =~ \"db.*\" } | count_over_time()",
        "{ } | quantile_over_time(duration, .5, .9) by (name)",
        "{ } | histogram_over_time(duration)",
        "{ } | avg_over_time(duration) by (kind)",
        "{ resource.service.name != \"none\" } | max_over_time(span.n)",
        // A window that leaves spans out: groups seen only outside it make no series.
        "{ } | count_over_time() by (span:id)",
    ];
    let traces = [fixture()];
    for q in local {
        let query = parse(q).unwrap();
        let want = eval_metrics(&query, &traces, 900, 2500, 300).unwrap();
        let mut run = MetricsRun::new(&query, 900, 2500, 300).unwrap();
        assert!(run.span_local(), "`{q}` is span-local");
        for t in &traces {
            for span in &t.spans {
                let one = Trace {
                    spans: vec![span.clone()],
                };
                if let Some((series, value)) = run.resolve(&one) {
                    run.record(series, span.start_unix_nano, value);
                }
            }
        }
        assert_eq!(run.finish(), want, "`{q}`");
    }
    for q in [
        "{ } >> { } | rate()",
        "{ rootName = \"x\" } | rate()",
        "{ } | rate() by (rootServiceName)",
        "{ traceDuration > 1s } | rate()",
        "{ } | count() > 1 | rate()",
        "({ .a = 1 } && { .b = 2 }) | rate()",
        "{ } | avg_over_time(traceDuration)",
    ] {
        let query = parse(q).unwrap();
        let run = MetricsRun::new(&query, 0, 10, 1).unwrap();
        assert!(!run.span_local(), "`{q}` is not span-local");
    }
}

/// Regression (issue 13, point 6): memory was series × steps and only steps were capped, so
/// one query by a high-cardinality attribute took gigabytes. The run refuses past its limits.
#[test]
fn series_and_points_are_bounded() {
    use crate::MetricsRun;
    let q = parse("{ } | count_over_time() by (span.user)").unwrap();
    let trace = |i: u64| {
        let mut span = fixture().spans[0].clone();
        span.start_unix_nano = 1_000_000_000 + i;
        span.span_attrs = vec![("user".into(), Value::Str(format!("u{i}")))];
        Trace { spans: vec![span] }
    };
    // Within the limits: exact.
    let mut run = MetricsRun::new(&q, 0, 100_000_000_000, 1_000_000_000).unwrap();
    run.limit(10, 1_000).unwrap();
    for i in 0..10 {
        run.add(&trace(i));
    }
    assert!(run.over_limit().is_none());
    assert_eq!(run.finish().len(), 10);
    // One series too many.
    let mut run = MetricsRun::new(&q, 0, 100_000_000_000, 1_000_000_000).unwrap();
    run.limit(10, 1_000_000).unwrap();
    for i in 0..1000 {
        run.add(&trace(i));
    }
    let e = run.over_limit().unwrap().to_string();
    assert!(e.contains("max_metrics_series") && e.contains("10"), "{e}");
    // Points: 100 steps allow 5 series under 500 points.
    let mut run = MetricsRun::new(&q, 0, 100_000_000_000, 1_000_000_000).unwrap();
    run.limit(1000, 500).unwrap();
    for i in 0..6 {
        run.add(&trace(i));
    }
    let e = run.over_limit().unwrap().to_string();
    assert!(e.contains("max_metrics_points") && e.contains("500"), "{e}");
    // Steps alone over the points limit: refused before any work.
    let mut run = MetricsRun::new(&q, 0, 100_000_000_000, 1_000_000_000).unwrap();
    let e = run.limit(1000, 99).unwrap_err().to_string();
    assert!(e.contains("100 steps") && e.contains("max_metrics_points"), "{e}");
}

fn values_of(series: &[Series]) -> Vec<Vec<Option<f64>>> {
    series.iter().map(|s| s.values.clone()).collect()
}

#[test]
fn comparisons_keep_points_and_series() {
    // Counts by service: backend [0 1 3 0 0], frontend [0 0 3 1 0].
    let q = "{ } | count_over_time() by (resource.service.name)";
    let got = run(&format!("{q} > 0"));
    assert_eq!(
        values_of(&got),
        vec![
            vec![None, Some(1.0), Some(3.0), None, None],
            vec![None, None, Some(3.0), Some(1.0), None],
        ]
    );
    // A series left with no point is dropped.
    let got = run(&format!("{q} >= 1 | topk(5) < 1"));
    assert!(got.is_empty(), "{got:?}");
    let got = run(&format!("{q} = 1"));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].values, vec![None, Some(1.0), None, None, None]);
    // Durations compare in seconds.
    let got = run("{ } | max_over_time(duration) > 500ns");
    assert_close(&got[0].values, &[None, None, Some(1e-6), None, None]);
    // Constant arithmetic is folded: `> 2 * 1` is `> 2`.
    let got = run(&format!("{q} > 2 * 1"));
    assert_eq!(values_of(&got), vec![vec![None, None, Some(3.0), None, None]; 2]);
}

#[test]
fn topk_and_bottomk_per_step() {
    let q = "{ } | count_over_time() by (name)";
    // Step 2 holds one span of each of six names; ties go to the names that sort first.
    let got = run(&format!("{q} | topk(2)"));
    let names: Vec<_> = got.iter().map(|s| s.labels[0].1.clone()).collect();
    // Step 0 and 4 are all zeros: the two first names win there too.
    assert_eq!(names, vec![s("GET /"), s("auth"), s("late"), s("render")]);
    let late = &got[2];
    assert_eq!(late.values, vec![None, Some(1.0), None, None, None]);
    let render = &got[3];
    assert_eq!(render.values, vec![None, None, None, Some(1.0), None]);
    // bottomk: the zeros; ties go to the names that sort last.
    let got = run(&format!("{q} | bottomk(1)"));
    let names: Vec<_> = got.iter().map(|s| s.labels[0].1.clone()).collect();
    assert_eq!(names, vec![s("late"), s("render")]);
    // `render` has 1 at step 3, so `late` (0) is lowest there.
    assert_eq!(got[0].values, vec![None, None, None, Some(0.0), None]);
    assert_eq!(got[1].values, vec![Some(0.0), Some(0.0), Some(0.0), None, Some(0.0)]);
    // With at most k series, everything is kept unchanged.
    let by_service = "{ } | count_over_time() by (resource.service.name)";
    assert_eq!(run(&format!("{by_service} | topk(2)")), run(by_service));
}

#[test]
fn arithmetic_with_numbers() {
    let rate = run("{ } | count_over_time()");
    assert_eq!(rate[0].values, counts(&[0.0, 1.0, 6.0, 1.0, 0.0]));
    let got = run("({ } | count_over_time()) * 100");
    assert_eq!(got[0].values, counts(&[0.0, 100.0, 600.0, 100.0, 0.0]));
    assert_eq!(got[0].labels, rate[0].labels);
    let got = run("100 / ({ } | count_over_time())");
    // Division by zero has no value.
    assert_eq!(
        got[0].values,
        vec![None, Some(100.0), Some(100.0 / 6.0), Some(100.0), None]
    );
    let got = run("1 - ({ } | count_over_time()) / 2");
    assert_eq!(got[0].values, counts(&[1.0, 0.5, -2.0, 0.5, 1.0]));
    // Constants fold with Tempo's integer arithmetic: 1 / 2 is 0.
    let got = run("({ } | count_over_time()) + 1 / 2");
    assert_eq!(got[0].values, counts(&[0.0, 1.0, 6.0, 1.0, 0.0]));
    // Comparisons after arithmetic see the computed values.
    let got = run("({ } | count_over_time()) * 10 > 20");
    assert_eq!(got[0].values, vec![None, None, Some(60.0), None, None]);
}

#[test]
fn arithmetic_between_queries() {
    // Errors: [2] frontend and [4] backend, both in step 2.
    let got = run("({ status = error } | count_over_time()) / ({ } | count_over_time())");
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].labels,
        vec![label("__name__", s("(count_over_time / count_over_time)"))]
    );
    assert_eq!(got[0].values, vec![None, Some(0.0), Some(2.0 / 6.0), Some(0.0), None]);
    // By labels: series pair up by their labels.
    let by = "by (resource.service.name)";
    let got = run(&format!(
        "({{ status = error }} | count_over_time() {by}) / ({{ }} | count_over_time() {by})"
    ));
    assert_eq!(
        got.iter().map(|s| s.labels.clone()).collect::<Vec<_>>(),
        vec![
            vec![label("resource.service.name", s("backend"))],
            vec![label("resource.service.name", s("frontend"))],
        ]
    );
    assert_eq!(got[0].values, vec![None, Some(0.0), Some(1.0 / 3.0), None, None]);
    assert_eq!(got[1].values, vec![None, None, Some(1.0 / 3.0), Some(0.0), None]);
    // A series without labels pairs with every series of the other side.
    let got = run(&format!(
        "({{ }} | count_over_time() {by}) / ({{ }} | count_over_time())"
    ));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].values, vec![None, Some(1.0), Some(0.5), Some(0.0), None]);
    // Unpaired series are dropped.
    let got = run(&format!(
        "({{ }} | count_over_time() by (name)) - ({{ }} | count_over_time() {by})"
    ));
    assert!(got.is_empty(), "{got:?}");
    // Scalars, comparisons and topk on the combined series, and nested arithmetic.
    let got = run(&format!(
        "(({{ }} | count_over_time() {by}) + ({{ }} | count_over_time() {by})) * 10 > 20 | topk(1)"
    ));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].labels, vec![label("resource.service.name", s("backend"))]);
    assert_eq!(got[0].values, vec![None, None, Some(60.0), None, None]);
    let got = run("({ } | count_over_time()) + ({ } | count_over_time()) * ({ } | count_over_time())");
    assert_eq!(got[0].values, counts(&[0.0, 2.0, 42.0, 2.0, 0.0]));
    assert_eq!(
        got[0].labels,
        vec![label(
            "__name__",
            s("(count_over_time + (count_over_time * count_over_time))")
        )]
    );
    // Operand-level second stages apply before the arithmetic.
    let got = run("({ } | count_over_time() > 1) - ({ } | count_over_time())");
    assert_eq!(got[0].values, vec![None, None, Some(0.0), None, None]);
}

/// Exemplars: at most one per trace, at most two per bucket of the range (`limit / 2`
/// buckets), never more than the limit; a counting function's carry no value, the others the
/// span's.
#[test]
fn exemplars_one_per_trace_within_the_limit() {
    use crate::MetricsRun;
    let traces: Vec<Trace> = (0..6u8)
        .map(|k| {
            let mut t = fixture();
            for s in &mut t.spans {
                s.trace_id[0] = k;
            }
            t
        })
        .collect();
    let run = |q: &str, limit: usize| {
        let mut r = MetricsRun::new(&parse(q).unwrap(), 0, 2500, 500).unwrap();
        r.exemplars(limit);
        for t in &traces {
            r.add(t);
        }
        r.finish()
    };
    let all = |series: &[Series]| series.iter().flat_map(|s| s.exemplars.clone()).collect::<Vec<_>>();

    // The six traces' spans start in the same two buckets: each bucket takes the two smallest
    // trace IDs no earlier bucket took (0 and 1, then 2 and 3), a trace once.
    let got = run("{ } | count_over_time() by (resource.service.name)", 100);
    let ex = all(&got);
    assert_eq!(ex.len(), 4, "two per bucket, one per trace: {ex:?}");
    let mut traces_seen: Vec<u8> = ex.iter().map(|e| e.trace_id[0]).collect();
    traces_seen.sort();
    assert_eq!(traces_seen, [0, 1, 2, 3]);
    // The same whatever order the traces come in.
    let mut reversed = MetricsRun::new(
        &parse("{ } | count_over_time() by (resource.service.name)").unwrap(),
        0,
        2500,
        500,
    )
    .unwrap();
    reversed.exemplars(100);
    for t in traces.iter().rev() {
        reversed.add(t);
    }
    assert_eq!(all(&reversed.finish()), ex);
    for s in &got {
        for e in &s.exemplars {
            assert_eq!(e.value, None, "counts take the series value");
            let span = traces[0].spans.iter().find(|x| Some(x.span_id) == e.span_id).unwrap();
            assert_eq!(span.start_unix_nano, e.timestamp_ns);
            assert_eq!(s.labels[0].1, span.resource_attrs[0].1, "the exemplar is of its series");
        }
    }
    // Two per bucket: a limit of 2 is one bucket.
    assert_eq!(all(&run("{ } | rate()", 2)).len(), 2);
    assert!(all(&run("{ } | rate()", 0)).is_empty());
    // Other functions carry the span's value: durations in seconds.
    for e in all(&run("{ } | quantile_over_time(duration, .5, .9)", 10)) {
        let span = traces[0].spans.iter().find(|x| Some(x.span_id) == e.span_id).unwrap();
        assert_eq!(e.value, Some(span.duration_nano as f64 / 1e9));
    }
    // Arithmetic between queries and compare() make none.
    assert!(all(&run("({ } | rate()) * 2", 10)).len() <= 10);
    assert!(all(&run("({ } | rate()) / ({ } | count_over_time())", 10)).is_empty());
    assert!(all(&run("{ } | compare({ status = error })", 10)).is_empty());
}

/// Traces made from the fixture: trace `k` has its own ID, its spans shifted by `shift[k]`
/// nanoseconds and their attribute `n` multiplied by `k + 1`.
fn shifted_traces(shift: &[u64]) -> Vec<Trace> {
    shift
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            let mut t = fixture();
            for s in &mut t.spans {
                s.trace_id[0] = k as u8;
                s.trace_id[1] = (k >> 8) as u8;
                s.start_unix_nano += d;
                for (name, v) in &mut s.span_attrs {
                    if name == "n"
                        && let Value::Int(i) = v
                    {
                        *i *= k as i64 + 1;
                    }
                }
            }
            t
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Splitting the traces of a metrics query into consecutive parts, each counted by a fork
    /// of the run, and merging the parts in order gives the series of one run over every
    /// trace: the same labels, counts, minimums, maximums and quantiles, sums within
    /// rounding, the same limit passed, and exemplars within the limit, one per trace.
    #[test]
    fn forks_merged_in_order_give_the_unsplit_series(
        shift in proptest::collection::vec(0u64..3000, 1..24),
        cuts in proptest::collection::vec(0usize..24, 0..6),
        max_series in proptest::prop_oneof![proptest::strategy::Just(usize::MAX), 1usize..8],
        exemplars in 0usize..8,
    ) {
        use crate::MetricsRun;
        let traces = shifted_traces(&shift);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(traces.len())).collect();
        cuts.push(0);
        cuts.push(traces.len());
        cuts.sort_unstable();
        for q in [
            "{ } | rate() by (resource.service.name)",
            "{ status = error } | count_over_time() by (name)",
            "{ } | quantile_over_time(duration, .5, .9) by (name)",
            "{ } | histogram_over_time(duration)",
            "{ } | avg_over_time(duration) by (kind)",
            "{ } | sum_over_time(span.n) by (resource.service.name)",
            "{ } | min_over_time(span.n)",
            "{ } | max_over_time(duration) by (span:id)",
            "{ kind = server } > { } | count_over_time() by (name)",
            "{ } | compare({ status = error })",
            "({ } | rate()) / ({ status = error } | count_over_time())",
            "{ } | rate() by (name) | topk(2)",
        ] {
            let query = parse(q).unwrap();
            let new_run = || {
                let mut r = MetricsRun::new(&query, 500, 5500, 700).unwrap();
                r.limit(max_series, 1_000_000).unwrap();
                r.exemplars(exemplars);
                r
            };
            let mut whole = new_run();
            for t in &traces {
                whole.add(t);
            }
            let mut merged = new_run();
            // The same parts, each run as another querier's job would (a run of its own,
            // exported as plain state) and added to the frontend's run.
            let mut from_jobs = new_run();
            for part in cuts.windows(2) {
                let mut fork = merged.fork();
                let mut job = new_run();
                for t in &traces[part[0]..part[1]] {
                    fork.add(t);
                    job.add(t);
                }
                merged.merge(fork);
                from_jobs.merge_state(job.into_state()).unwrap();
            }
            proptest::prop_assert_eq!(whole.is_over_limit(), from_jobs.is_over_limit(), "`{}`", q);
            proptest::prop_assert_eq!(whole.is_over_limit(), merged.is_over_limit(), "`{}`", q);
            if whole.is_over_limit() {
                continue;
            }
            let got_jobs = from_jobs.finish();
            let (want, got) = (whole.finish(), merged.finish());
            // Jobs' states merge as forks do, exemplars included: the choice does not depend
            // on how the spans were split or in what order the parts came.
            proptest::prop_assert_eq!(got_jobs.len(), got.len(), "`{}`", q);
            for (j, g) in got_jobs.iter().zip(&got) {
                proptest::prop_assert_eq!(&j.labels, &g.labels, "`{}`: jobs' states merge as forks do", q);
                proptest::prop_assert_eq!(&j.values, &g.values, "`{}`: jobs' states merge as forks do", q);
                proptest::prop_assert_eq!(&j.exemplars, &g.exemplars, "`{}`: the same exemplars", q);
            }
            proptest::prop_assert_eq!(want.len(), got.len(), "`{}`", q);
            let mut taken = std::collections::HashSet::new();
            for (w, g) in want.iter().zip(&got) {
                proptest::prop_assert_eq!(&w.labels, &g.labels, "`{}`", q);
                // Exactly: sums and averages add their values as integers (`ExactSum`).
                proptest::prop_assert_eq!(&g.values, &w.values, "`{}`: split or not, the same values", q);
                proptest::prop_assert_eq!(&w.exemplars, &g.exemplars, "`{}`: split or not, the same exemplars", q);
                for e in &g.exemplars {
                    proptest::prop_assert!(taken.insert(e.trace_id), "`{}`: one exemplar per trace", q);
                }
            }
            proptest::prop_assert!(taken.len() <= exemplars, "`{}`: {} exemplars", q, taken.len());
        }
    }
}

/// An [`ExactSum`](super::ExactSum) is the same bits whatever order or grouping its values
/// are added in, where a float sum is not: durations in seconds (fractions below 2^10), whole
/// numbers, and the rest (fractions of 2^10 or more) kept apart.
#[test]
fn exact_sums_do_not_depend_on_order_or_grouping() {
    use super::ExactSum;
    let values: Vec<f64> = (0..2000u64)
        .map(|i| match i % 4 {
            0 => (i * 7919 % 100_000) as f64 / 1e9, // durations of up to 100 µs, in seconds
            1 => (i * 104_729 % 3_000_000_000) as f64 / 1e9, // up to 3 s
            2 => (i % 600) as f64,                  // status codes, counts
            _ => 0.1 + i as f64 * 1e-7,
        })
        .collect();
    let sum_of = |vals: &mut dyn Iterator<Item = f64>| {
        let mut s = ExactSum::default();
        vals.for_each(|v| s.add(v));
        s
    };
    let forward = sum_of(&mut values.iter().copied()).value();
    let backward = sum_of(&mut values.iter().rev().copied()).value();
    let mut grouped = ExactSum::default();
    for chunk in values.chunks(37).rev() {
        grouped.merge(sum_of(&mut chunk.iter().copied()));
    }
    assert_eq!(forward.to_bits(), backward.to_bits());
    assert_eq!(forward.to_bits(), grouped.value().to_bits());
    let float = |vals: &mut dyn Iterator<Item = f64>| vals.fold(0.0, |a, v| a + v);
    let (f, b) = (
        float(&mut values.iter().copied()),
        float(&mut values.iter().rev().copied()),
    );
    assert_ne!(
        f.to_bits(),
        b.to_bits(),
        "a float sum of these values depends on the order"
    );
    assert!((forward - f).abs() <= 1e-12 * f.abs(), "{forward} against {f}");
    // Fractions of 2^10 or more are a float sum, and wholes past 2^63 too.
    let mut s = ExactSum::default();
    for v in [2048.5, 1e30, -3.0, 1e-9] {
        s.add(v);
    }
    assert_eq!(s.int, -3);
    assert_eq!(s.wide, 2048.5 + 1e30);
    assert!((s.value() - (1e30 + 2045.5 + 1e-9)).abs() <= 1e15);
}

/// A streamed query's partial answers: a snapshot is what the traces added so far give, and
/// the run goes on to the answer of all of them.
#[test]
fn a_snapshot_is_the_answer_so_far_and_the_run_goes_on() {
    use crate::MetricsRun;
    let traces: Vec<Trace> = (0..6u64)
        .map(|i| {
            let mut t = fixture();
            for s in &mut t.spans {
                s.start_unix_nano += i * 250;
                s.trace_id[0] = i as u8;
            }
            t
        })
        .collect();
    for q in [
        "{ } | count_over_time() by (resource.service.name)",
        "{ } | quantile_over_time(duration, .5, .9)",
        "({ } | count_over_time()) / ({ } | count_over_time() by (kind))",
        "{ } >> { } | rate()",
    ] {
        let query = parse(q).unwrap();
        let mut run = MetricsRun::new(&query, 900, 2500, 300).unwrap();
        for t in &traces[..3] {
            run.add(t);
        }
        let half = eval_metrics(&query, &traces[..3], 900, 2500, 300).unwrap();
        assert_eq!(run.snapshot().unwrap(), half, "`{q}` after half");
        assert_eq!(
            run.snapshot().unwrap(),
            half,
            "`{q}`: a snapshot leaves the run as it was"
        );
        for t in &traces[3..] {
            run.add(t);
        }
        let all = eval_metrics(&query, &traces, 900, 2500, 300).unwrap();
        assert_ne!(half, all, "`{q}`: the fixture must change the answer");
        assert_eq!(run.finish(), all, "`{q}`");
    }
}
