//! Property tests over arbitrary input: nothing panics, and whatever parses prints back to text
//! that parses to the same tree (and prints identically).

use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use weft_traceql::{parse, supported, validate};

/// Pieces of TraceQL, so random inputs reach deep into the grammar instead of failing at the
/// first character.
const FRAGMENTS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "|",
    ",",
    "&&",
    "||",
    "=",
    "!=",
    "=~",
    "!~",
    ">",
    ">=",
    "<",
    "<=",
    ">>",
    "<<",
    "~",
    "!>",
    "!>>",
    "!<",
    "!<<",
    "&>",
    "&>>",
    "&<",
    "&<<",
    "&~",
    "!",
    "-",
    "+",
    "*",
    "/",
    "%",
    "^",
    ".",
    ".a",
    "span.",
    "span.http.method",
    "resource.service.name",
    "parent.",
    "parent.span.x",
    "parent.\"span.x\"",
    "event.e",
    "link.l",
    "instrumentation.i",
    "span.\"a b\"",
    ".\"5\"",
    "name",
    "status",
    "duration",
    "kind",
    "span:name",
    "span:foo",
    "trace:id",
    "event:timeSinceStart",
    "nestedSetLeft",
    "error",
    "ok",
    "server",
    "client",
    "nil",
    "true",
    "false",
    "0",
    "1",
    "-1",
    "1.5",
    ".5",
    "1e3",
    "2e-7",
    "9223372036854775807",
    "1s",
    "1.5ms",
    "250µs",
    "1h30m",
    "5d",
    "\"str\"",
    "\"a\\\"b\"",
    "\"\\d\"",
    "`a\\d+`",
    "\"é\"",
    "count()",
    "count(",
    "avg(",
    "min(",
    "max(",
    "sum(",
    "by(",
    "select(",
    "coalesce()",
    "rate()",
    "count_over_time()",
    "quantile_over_time(",
    "histogram_over_time(",
    "avg_over_time(",
    "by (",
    "topk(",
    "bottomk(",
    "compare(",
    "with(",
    "sample=",
    " ",
    "\n",
    "\t",
];

fn valid_corpus_queries() -> &'static [String] {
    #[derive(serde::Deserialize)]
    struct Corpus {
        valid: Vec<String>,
    }
    static QUERIES: OnceLock<Vec<String>> = OnceLock::new();
    QUERIES.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/traceql/queries.yaml");
        let text = std::fs::read_to_string(&path).expect("corpus is readable");
        serde_yaml::from_str::<Corpus>(&text).expect("corpus is YAML").valid
    })
}

/// Everything that parses must validate, support-check and round-trip without panicking.
fn check(input: &str) -> Result<(), TestCaseError> {
    let Ok(query) = parse(input) else {
        return Ok(());
    };
    let _ = validate(&query);
    let _ = supported(&query);
    let printed = query.to_string();
    let reparsed = parse(&printed);
    prop_assert!(
        reparsed.is_ok(),
        "`{input}` printed as `{printed}`, which fails: {:?}",
        reparsed.err()
    );
    let reparsed = reparsed.unwrap_or_else(|_| unreachable!());
    prop_assert_eq!(&reparsed, &query, "`{}` printed as `{}`", input, printed);
    prop_assert_eq!(reparsed.to_string(), printed);
    Ok(())
}

const LEAVES: &[&str] = &[
    ".a",
    "span.http.method",
    "resource.service.name",
    "span.\"a b\"",
    "parent.span.x",
    "event.e",
    "link.l",
    "name",
    "status",
    "kind",
    "duration",
    "traceDuration",
    "span:id",
    "event:name",
    "nestedSetLeft",
    "error",
    "server",
    "nil",
    "true",
    "false",
    "0",
    "7",
    "-3",
    "1.5",
    ".25",
    "-2e-7",
    "1s",
    "1500ms",
    "-250us",
    "1h30m",
    "\"GET\"",
    "\"\"",
    "`a\\d+`",
    "\"tab\\there\"",
    "\"caf\u{e9}\"",
];

const FIELD_OPS: &[&str] = &[
    "||", "&&", "=", "!=", "<", "<=", ">", ">=", "=~", "!~", "+", "-", "*", "/", "%", "^",
];

const SPANSET_OPS: &[&str] = &[
    "&&", "||", ">", ">>", "<", "<<", "~", "!>", "!>>", "!<", "!<<", "!~", "&>", "&>>", "&<", "&<<", "&~",
];

const STAGES: &[&str] = &[
    "count() > 2",
    "avg(duration) >= 1s",
    "max(span.size) < -1",
    "sum(.a) = 1.5",
    "by(.a)",
    "by(span.x * 2)",
    "select(name, .a)",
    "coalesce()",
    "{ .b }",
    "{ }",
];

const TAILS: &[&str] = &[
    "",
    " | rate()",
    " | rate() by (resource.service.name)",
    " | count_over_time() by (.a, name)",
    " | quantile_over_time(duration, 0.5, .99)",
    " | histogram_over_time(duration)",
    " | avg_over_time(span.x) | topk(3)",
    " | rate() | bottomk(1)",
    " | compare({ status = error }, 5)",
    " with(sample=true)",
    " | rate() with(sample=0.1, most_recent=false)",
];

/// Field expressions built from the grammar, with random spacing.
fn field_text() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(LEAVES).prop_map(str::to_string);
    leaf.prop_recursive(5, 40, 2, |inner| {
        prop_oneof![
            (
                inner.clone(),
                prop::sample::select(FIELD_OPS),
                inner.clone(),
                any::<bool>()
            )
                .prop_map(|(a, op, b, tight)| if tight {
                    format!("{a}{op}{b}")
                } else {
                    format!("{a} {op} {b}")
                }),
            (prop::sample::select(&["-", "!"][..]), inner.clone()).prop_map(|(op, a)| format!("{op}{a}")),
            inner.prop_map(|a| format!("({a})")),
        ]
    })
}

/// Spanset expressions (and parenthesised pipelines) built from the grammar.
fn spanset_text() -> impl Strategy<Value = String> {
    let filter = prop_oneof![Just("{ }".to_string()), field_text().prop_map(|f| format!("{{ {f} }}"))];
    filter.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), prop::sample::select(SPANSET_OPS), inner.clone())
                .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
            inner.clone().prop_map(|a| format!("({a})")),
            (inner, prop::sample::select(STAGES)).prop_map(|(a, stage)| format!("({a} | {stage})")),
        ]
    })
}

/// Whole queries: a spanset expression, some pipeline stages, and maybe a metrics tail or hints.
fn query_text() -> impl Strategy<Value = String> {
    (
        spanset_text(),
        prop::collection::vec(prop::sample::select(STAGES), 0..3),
        prop::sample::select(TAILS),
    )
        .prop_map(|(first, stages, tail)| {
            let mut q = first;
            for stage in stages {
                q.push_str(" | ");
                q.push_str(stage);
            }
            q.push_str(tail);
            q
        })
}

/// A mutation applied at a relative position of a query.
#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: f64, len: usize },
    Insert { at: f64, text: String },
    Duplicate { at: f64, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0.0..1.0f64, 1usize..6).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (0.0..1.0f64, prop::sample::select(FRAGMENTS)).prop_map(|(at, text)| Mutation::Insert {
            at,
            text: text.to_string()
        }),
        (0.0..1.0f64, 1usize..12).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
    ]
}

fn apply(query: &str, mutations: &[Mutation]) -> String {
    let mut chars: Vec<char> = query.chars().collect();
    for m in mutations {
        let index = |at: f64, n: usize| ((at * n as f64) as usize).min(n);
        match m {
            Mutation::Delete { at, len } => {
                let start = index(*at, chars.len());
                let end = (start + len).min(chars.len());
                chars.drain(start..end);
            }
            Mutation::Insert { at, text } => {
                let start = index(*at, chars.len());
                chars.splice(start..start, text.chars());
            }
            Mutation::Duplicate { at, len } => {
                let start = index(*at, chars.len());
                let end = (start + len).min(chars.len());
                let copy: Vec<char> = chars[start..end].to_vec();
                chars.splice(end..end, copy);
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        // Integration tests have no lib.rs beside them, so name the regressions file directly.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/arbitrary_input.txt"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_strings_never_panic(input in "\\PC{0,60}") {
        check(&input)?;
    }

    #[test]
    fn fragment_soup_never_panics(parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..24)) {
        check(&parts.concat())?;
    }

    #[test]
    fn generated_queries_round_trip(query in query_text()) {
        check(&query)?;
    }

    #[test]
    fn mutated_corpus_queries_never_panic(
        index in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let query = index.get(valid_corpus_queries());
        check(&apply(query, &mutations))?;
    }
}
