//! Runs every query in the shared corpus `spec/traceql/queries.yaml` through the parser, printer,
//! validator and support check, and checks each lands in its bucket.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Deserialize;
use weft_traceql::{Query, parse, supported, validate};

#[derive(Deserialize)]
struct Corpus {
    valid: Vec<String>,
    parse_fails: Vec<Case>,
    validate_fails: Vec<Case>,
    unsupported: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    query: String,
    error: String,
}

fn corpus_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/traceql/queries.yaml")
}

fn corpus() -> Corpus {
    let path = corpus_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Checks `parse(print(q)) == q` and that printing is idempotent; returns a failure description.
fn round_trip(query: &Query) -> Result<(), String> {
    let printed = query.to_string();
    let reparsed = parse(&printed).map_err(|e| format!("printed form `{printed}` does not parse: {e}"))?;
    if reparsed != *query {
        return Err(format!("printed form `{printed}` parses to a different tree"));
    }
    let reprinted = reparsed.to_string();
    if reprinted != printed {
        return Err(format!("printing is not idempotent: `{printed}` then `{reprinted}`"));
    }
    Ok(())
}

/// Fails with every message in `failures`, so one run shows all broken entries.
fn report(bucket: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} {bucket} entries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_has_enough_entries() {
    let corpus = corpus();
    assert!(corpus.valid.len() >= 120, "valid: {}", corpus.valid.len());
    assert!(
        corpus.parse_fails.len() >= 40,
        "parse_fails: {}",
        corpus.parse_fails.len()
    );
    assert!(
        corpus.validate_fails.len() >= 25,
        "validate_fails: {}",
        corpus.validate_fails.len()
    );
    // `parent.` is the one feature left (Tempo refuses it too), in each of its forms.
    assert!(
        corpus.unsupported.len() >= 3,
        "unsupported: {}",
        corpus.unsupported.len()
    );
}

#[test]
fn valid_queries_parse_validate_and_round_trip() {
    let corpus = corpus();
    let unsupported: HashSet<&str> = corpus.unsupported.iter().map(|c| c.query.as_str()).collect();
    let mut failures = Vec::new();
    for q in &corpus.valid {
        let query = match parse(q) {
            Ok(query) => query,
            Err(e) => {
                failures.push(format!("`{q}`: {e}"));
                continue;
            }
        };
        if let Err(e) = validate(&query) {
            failures.push(format!("`{q}`: {e}"));
        }
        if let Err(e) = round_trip(&query) {
            failures.push(format!("`{q}`: {e}"));
        }
        match supported(&query) {
            Ok(()) if unsupported.contains(q.as_str()) => {
                failures.push(format!("`{q}`: listed as unsupported but supported() accepts it"));
            }
            Err(e) if !unsupported.contains(q.as_str()) => {
                failures.push(format!("`{q}`: {e} (list it under `unsupported` if that is intended)"));
            }
            _ => {}
        }
    }
    report("valid", failures);
}

#[test]
fn parse_failures_name_the_problem() {
    let mut failures = Vec::new();
    for case in corpus().parse_fails {
        match parse(&case.query) {
            Ok(query) => failures.push(format!("`{}`: parsed as `{query}`", case.query)),
            Err(e) => {
                let text = e.to_string();
                if !text.contains(&case.error) {
                    failures.push(format!("`{}`: error `{text}` lacks `{}`", case.query, case.error));
                }
                if !text.starts_with("parse error at line ") {
                    failures.push(format!("`{}`: error `{text}` lacks a position", case.query));
                }
            }
        }
    }
    report("parse_fails", failures);
}

#[test]
fn validate_failures_parse_and_name_the_problem() {
    let mut failures = Vec::new();
    for case in corpus().validate_fails {
        let query = match parse(&case.query) {
            Ok(query) => query,
            Err(e) => {
                failures.push(format!("`{}`: {e}", case.query));
                continue;
            }
        };
        if let Err(e) = round_trip(&query) {
            failures.push(format!("`{}`: {e}", case.query));
        }
        match validate(&query) {
            Ok(()) => failures.push(format!("`{}`: validates", case.query)),
            Err(e) if !e.to_string().contains(&case.error) => {
                failures.push(format!("`{}`: error `{e}` lacks `{}`", case.query, case.error));
            }
            Err(_) => {}
        }
    }
    report("validate_fails", failures);
}

#[test]
fn unsupported_queries_are_valid_and_name_the_feature() {
    let mut failures = Vec::new();
    for case in corpus().unsupported {
        let query = match parse(&case.query) {
            Ok(query) => query,
            Err(e) => {
                failures.push(format!("`{}`: {e}", case.query));
                continue;
            }
        };
        if let Err(e) = validate(&query) {
            failures.push(format!("`{}`: {e}", case.query));
        }
        if let Err(e) = round_trip(&query) {
            failures.push(format!("`{}`: {e}", case.query));
        }
        match supported(&query) {
            Ok(()) => failures.push(format!("`{}`: supported() accepts it", case.query)),
            Err(e) if !e.to_string().contains(&case.error) => {
                failures.push(format!("`{}`: error `{e}` lacks `{}`", case.query, case.error));
            }
            Err(_) => {}
        }
    }
    report("unsupported", failures);
}
