//! Strategies from a file, in the format of Jaeger's `--sampling.strategies-file`:
//!
//! ```json
//! {"service_strategies": [
//!    {"service": "checkout", "type": "probabilistic", "param": 0.8,
//!     "operation_strategies": [{"operation": "GET /health", "type": "probabilistic", "param": 0.0}]},
//!    {"service": "search", "type": "ratelimiting", "param": 5}],
//!  "default_strategy": {"type": "probabilistic", "param": 0.5,
//!     "operation_strategies": [{"operation": "/metrics", "type": "probabilistic", "param": 0.0}]}}
//! ```
//!
//! As in Jaeger: a service without an entry gets the default strategy; the default's operation
//! strategies apply to every probabilistic service, below the service's own for the same
//! operation; operation strategies must be probabilistic; without `default_strategy` the
//! default is probabilistic 0.001.

use std::collections::HashMap;

use serde_json::Value;

use crate::strategy::{Base, PerOperation, Strategy};

/// Jaeger's default when a file names no default strategy.
pub const DEFAULT_PROBABILITY: f64 = 0.001;

/// The strategies of one file.
#[derive(Debug, Clone, PartialEq)]
pub struct Strategies {
    default: Strategy,
    services: HashMap<String, Strategy>,
}

impl Strategies {
    /// Parses a strategies file. The error names the member at fault.
    pub fn parse(text: &str) -> Result<Strategies, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let doc = doc.as_object().ok_or("the file must be a JSON object")?;
        let default_ops = match doc.get("default_strategy") {
            None | Some(Value::Null) => (Base::Probabilistic(DEFAULT_PROBABILITY), Vec::new()),
            Some(d) => entry(d, "default_strategy")?,
        };
        let mut services = HashMap::new();
        match doc.get("service_strategies") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, s) in list.iter().enumerate() {
                    let what = format!("service_strategies[{i}]");
                    let name = s
                        .get("service")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| format!("{what}: \"service\" must be a non-empty string"))?;
                    let (base, ops) = entry(s, &what)?;
                    if services
                        .insert(name.to_owned(), strategy(base, ops, &default_ops.1))
                        .is_some()
                    {
                        return Err(format!("{what}: service {name:?} is listed twice"));
                    }
                }
            }
            Some(_) => return Err("\"service_strategies\" must be a list".into()),
        }
        Ok(Strategies {
            default: strategy(default_ops.0, default_ops.1.clone(), &[]),
            services,
        })
    }

    /// What `service` is told.
    pub fn for_service(&self, service: &str) -> &Strategy {
        self.services.get(service).unwrap_or(&self.default)
    }
}

/// A service's strategy: its own operations first, then the default's it does not name.
fn strategy(base: Base, mut ops: Vec<(String, f64)>, defaults: &[(String, f64)]) -> Strategy {
    let Base::Probabilistic(rate) = base else {
        return Strategy {
            base,
            per_operation: None,
        };
    };
    for (name, p) in defaults {
        if !ops.iter().any(|(n, _)| n == name) {
            ops.push((name.clone(), *p));
        }
    }
    if ops.is_empty() {
        return Strategy::probabilistic(rate);
    }
    Strategy {
        base,
        per_operation: Some(PerOperation {
            default_probability: rate,
            lower_bound_tps: 0.0,
            upper_bound_tps: 0.0,
            operations: ops,
        }),
    }
}

/// One `{"type", "param", "operation_strategies"}` object.
fn entry(v: &Value, what: &str) -> Result<(Base, Vec<(String, f64)>), String> {
    let base = base(v, what)?;
    let mut ops = Vec::new();
    match v.get("operation_strategies") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (i, o) in list.iter().enumerate() {
                let what = format!("{what}.operation_strategies[{i}]");
                let name = o
                    .get("operation")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{what}: \"operation\" must be a string"))?;
                match base_of(o, &what)? {
                    Base::Probabilistic(p) => ops.push((name.to_owned(), p)),
                    Base::RateLimiting(_) => {
                        return Err(format!(
                            "{what}: operation strategies must be \"probabilistic\" (Jaeger's remote samplers have no per-operation rate limit)"
                        ));
                    }
                }
            }
        }
        Some(_) => return Err(format!("{what}: \"operation_strategies\" must be a list")),
    }
    Ok((base, ops))
}

fn base(v: &Value, what: &str) -> Result<Base, String> {
    if !v.is_object() {
        return Err(format!("{what} must be an object"));
    }
    base_of(v, what)
}

fn base_of(v: &Value, what: &str) -> Result<Base, String> {
    let param = v
        .get("param")
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("{what}: \"param\" must be a number"))?;
    match v.get("type").and_then(Value::as_str) {
        Some("probabilistic") if (0.0..=1.0).contains(&param) => Ok(Base::Probabilistic(param)),
        Some("probabilistic") => Err(format!(
            "{what}: a probabilistic \"param\" must be from 0 to 1, got {param}"
        )),
        Some("ratelimiting") if param >= 0.0 && param.fract() == 0.0 && param <= f64::from(i32::MAX) => {
            Ok(Base::RateLimiting(param as u32))
        }
        Some("ratelimiting") => Err(format!(
            "{what}: a ratelimiting \"param\" must be a whole number of traces a second, got {param}"
        )),
        _ => Err(format!(
            "{what}: \"type\" must be \"probabilistic\" or \"ratelimiting\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{
      "service_strategies": [
        {"service": "checkout", "type": "probabilistic", "param": 0.8,
         "operation_strategies": [{"operation": "GET /health", "type": "probabilistic", "param": 0.0},
                                  {"operation": "/metrics", "type": "probabilistic", "param": 0.5}]},
        {"service": "search", "type": "ratelimiting", "param": 5}],
      "default_strategy": {"type": "probabilistic", "param": 0.25,
        "operation_strategies": [{"operation": "/metrics", "type": "probabilistic", "param": 0.0}]}
    }"#;

    #[test]
    fn services_get_their_own_strategy_and_the_defaults_operations() {
        let s = Strategies::parse(FILE).unwrap();
        let checkout = s.for_service("checkout");
        assert_eq!(checkout.base, Base::Probabilistic(0.8));
        let ops = checkout.per_operation.as_ref().unwrap();
        assert_eq!(ops.default_probability, 0.8);
        // The service's own "/metrics" wins over the default's.
        assert_eq!(
            ops.operations,
            vec![("GET /health".to_owned(), 0.0), ("/metrics".to_owned(), 0.5)]
        );
        assert_eq!(
            s.for_service("search"),
            &Strategy {
                base: Base::RateLimiting(5),
                per_operation: None
            }
        );
        let other = s.for_service("unknown");
        assert_eq!(other.base, Base::Probabilistic(0.25));
        assert_eq!(
            other.per_operation.as_ref().unwrap().operations,
            vec![("/metrics".to_owned(), 0.0)]
        );
    }

    #[test]
    fn an_empty_file_serves_jaegers_default() {
        let s = Strategies::parse("{}").unwrap();
        assert_eq!(s.for_service("x"), &Strategy::probabilistic(DEFAULT_PROBABILITY));
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("[", "not JSON"),
            ("[]", "must be a JSON object"),
            (
                r#"{"default_strategy": {"type": "probabilistic", "param": 1.5}}"#,
                "from 0 to 1",
            ),
            (
                r#"{"default_strategy": {"type": "always", "param": 1}}"#,
                "\"type\" must be",
            ),
            (
                r#"{"default_strategy": {"type": "ratelimiting", "param": 2.5}}"#,
                "whole number",
            ),
            (
                r#"{"service_strategies": [{"type": "probabilistic", "param": 1}]}"#,
                "service_strategies[0]: \"service\"",
            ),
            (
                r#"{"service_strategies": [{"service": "a", "type": "probabilistic", "param": 1,
                   "operation_strategies": [{"operation": "x", "type": "ratelimiting", "param": 1}]}]}"#,
                "service_strategies[0].operation_strategies[0]: operation strategies must be",
            ),
            (
                r#"{"service_strategies": [{"service": "a", "type": "probabilistic", "param": 1},
                                           {"service": "a", "type": "probabilistic", "param": 1}]}"#,
                "listed twice",
            ),
        ] {
            let e = Strategies::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
