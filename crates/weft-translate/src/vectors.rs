//! The runner of `spec/formats/vectors/*.json` (tests only): each vector's input goes through
//! `convert`, whose answer must equal `expected`, or, for a refusal, whose error must contain
//! `expected.error`. `WEFT_REGEN_VECTORS=1` writes the answers as the expectations (review the
//! diff before committing).

use serde_json::{Value, json};

use crate::TranslateError;

/// The input of a vector: `input_hex` decoded, else `input` (a string as its text, any other
/// JSON as its serialisation).
pub fn input(v: &Value) -> Vec<u8> {
    if let Some(h) = v.get("input_hex").and_then(Value::as_str) {
        return (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex input"))
            .collect();
    }
    match &v["input"] {
        Value::String(s) => s.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

/// Runs every vector of `file` (a name in `spec/formats/vectors/`).
pub fn run(file: &str, convert: impl Fn(&Value) -> Result<Value, TranslateError>) {
    let path = format!("{}/../../spec/formats/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("vector file")).expect("JSON");
    let regen = std::env::var("WEFT_REGEN_VECTORS").is_ok();
    let mut failures = Vec::new();
    for v in doc["vectors"].as_array_mut().expect("vectors") {
        let name = v["name"].as_str().expect("name").to_owned();
        let got = match convert(v) {
            Ok(g) => g,
            Err(e) => json!({ "error": e.0 }),
        };
        let want = &mut v["expected"];
        if let Some(err) = want.get("error").and_then(Value::as_str) {
            if !got["error"].as_str().is_some_and(|g| g.contains(err)) {
                failures.push(format!("{name}: expected an error containing {err:?}, got {got}"));
            }
        } else if regen {
            *want = got;
        } else if *want != got {
            failures.push(format!("{name}:\n  want {want}\n  got  {got}"));
        }
    }
    if regen {
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON") + "\n").expect("write");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
