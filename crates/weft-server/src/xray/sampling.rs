//! X-Ray centralized sampling as the daemon answers it: `POST /GetSamplingRules` and
//! `POST /SamplingTargets` on the daemon's TCP port, from local rules.

use std::sync::Arc;

use axum::Extension;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

/// Seconds between the SDKs' target refreshes.
const INTERVAL: u64 = 10;

/// One sampling rule as the daemon hands it to SDKs.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: String,
    pub priority: u32,
    pub fixed_rate: f64,
    pub reservoir: u64,
    pub service_name: String,
    pub host: String,
    pub http_method: String,
    pub url_path: String,
}

/// The rules the daemon port answers with: X-Ray's default rule (the first request each second
/// and 5% of the others) unless `--xray-sampling-rules` names a file of local rules.
#[derive(Debug, Clone)]
pub struct SamplingRules {
    pub rules: Vec<Rule>,
    /// When the rules were read (seconds since the epoch): their creation and modification time.
    pub loaded_at: f64,
}

fn default_rule(rate: f64, reservoir: u64) -> Rule {
    Rule {
        name: "Default".into(),
        priority: 10000,
        fixed_rate: rate,
        reservoir,
        service_name: "*".into(),
        host: "*".into(),
        http_method: "*".into(),
        url_path: "*".into(),
    }
}

impl Default for SamplingRules {
    fn default() -> Self {
        SamplingRules {
            rules: vec![default_rule(0.05, 1)],
            loaded_at: weft_core::now_ns() as f64 / 1e9,
        }
    }
}

impl SamplingRules {
    /// Reads the X-Ray SDKs' local sampling-rules document (version 1 or 2):
    /// `{"version": 2, "rules": [{"description", "host", "http_method", "url_path",
    /// "fixed_target", "rate"}], "default": {"fixed_target", "rate"}}`; version 1 names
    /// `service_name` where version 2 names `host`, and either may carry both. Rules keep their
    /// order as priorities 1, 2, …; the default rule comes last.
    pub fn parse(text: &str) -> Result<SamplingRules, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let version = doc.get("version").and_then(Value::as_u64);
        if !matches!(version, Some(1 | 2)) {
            return Err("\"version\" must be 1 or 2".into());
        }
        let target = |v: &Value, what: &str| -> Result<(f64, u64), String> {
            let rate = v
                .get("rate")
                .and_then(Value::as_f64)
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("{what}: \"rate\" must be a number from 0 to 1"))?;
            let fixed = v
                .get("fixed_target")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("{what}: \"fixed_target\" must be a whole number of requests per second"))?;
            Ok((rate, fixed))
        };
        let default = doc.get("default").ok_or("the \"default\" rule is missing")?;
        let (rate, fixed) = target(default, "default")?;
        let mut rules = Vec::new();
        let list = match doc.get("rules") {
            None => Vec::new(),
            Some(Value::Array(a)) => a.clone(),
            Some(_) => return Err("\"rules\" must be a list".into()),
        };
        for (i, r) in list.iter().enumerate() {
            let what = format!("rule {}", i + 1);
            let (rate, fixed) = target(r, &what)?;
            let text = |k: &str| -> Result<String, String> {
                match r.get(k) {
                    None => Ok("*".into()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(_) => Err(format!("{what}: \"{k}\" must be text")),
                }
            };
            rules.push(Rule {
                name: format!("weft-local-{}", i + 1),
                priority: i as u32 + 1,
                fixed_rate: rate,
                reservoir: fixed,
                service_name: text("service_name")?,
                host: text("host")?,
                http_method: text("http_method")?,
                url_path: text("url_path")?,
            });
        }
        rules.push(default_rule(rate, fixed));
        Ok(SamplingRules {
            rules,
            loaded_at: weft_core::now_ns() as f64 / 1e9,
        })
    }

    /// Reads `--xray-sampling-rules`, or X-Ray's default rule without it.
    pub fn load(path: Option<&std::path::Path>) -> anyhow::Result<SamplingRules> {
        let Some(p) = path else {
            return Ok(SamplingRules::default());
        };
        let text = std::fs::read_to_string(p)
            .map_err(|e| anyhow::anyhow!("reading X-Ray sampling rules {}: {e}", p.display()))?;
        SamplingRules::parse(&text).map_err(|e| anyhow::anyhow!("X-Ray sampling rules {}: {e}", p.display()))
    }
}

fn json_reply(v: Value) -> Response {
    let mut r = v.to_string().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `POST /GetSamplingRules`.
pub async fn sampling_rules(Extension(rules): Extension<Arc<SamplingRules>>) -> Response {
    let records: Vec<Value> = rules
        .rules
        .iter()
        .map(|r| {
            json!({
                "SamplingRule": {
                    "RuleName": r.name,
                    "RuleARN": format!("arn:aws:xray:us-east-1:000000000000:sampling-rule/{}", r.name),
                    "ResourceARN": "*",
                    "Priority": r.priority,
                    "FixedRate": r.fixed_rate,
                    "ReservoirSize": r.reservoir,
                    "ServiceName": r.service_name,
                    "ServiceType": "*",
                    "Host": r.host,
                    "HTTPMethod": r.http_method,
                    "URLPath": r.url_path,
                    "Version": 1,
                    "Attributes": {}
                },
                "CreatedAt": rules.loaded_at,
                "ModifiedAt": rules.loaded_at
            })
        })
        .collect();
    json_reply(json!({ "SamplingRuleRecords": records }))
}

/// `POST /SamplingTargets`: each statistics document of a known rule gets that rule's rate and
/// its whole reservoir back as this client's quota (one daemon answers for one host, where the
/// X-Ray service would split a reservoir between the hosts that use it); an unknown rule is
/// returned as unprocessed.
pub async fn sampling_targets(Extension(rules): Extension<Arc<SamplingRules>>, body: Bytes) -> Response {
    let body: Option<Value> = serde_json::from_slice(&body).ok();
    let now = weft_core::now_ns() as f64 / 1e9;
    let mut docs = Vec::new();
    let mut unprocessed = Vec::new();
    let stats = body
        .as_ref()
        .and_then(|b| b.get("SamplingStatisticsDocuments"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for s in stats {
        let name = s.get("RuleName").and_then(Value::as_str).unwrap_or("");
        match rules.rules.iter().find(|r| r.name == name) {
            Some(r) => docs.push(json!({
                "RuleName": r.name,
                "FixedRate": r.fixed_rate,
                "ReservoirQuota": r.reservoir,
                "ReservoirQuotaTTL": now + INTERVAL as f64,
                "Interval": INTERVAL
            })),
            None => unprocessed.push(json!({"RuleName": name, "ErrorCode": "400", "Message": "unknown sampling rule"})),
        }
    }
    json_reply(json!({
        "SamplingTargetDocuments": docs,
        "LastRuleModification": rules.loaded_at,
        "UnprocessedStatistics": unprocessed
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_rules_in_order_then_the_default() {
        let r = SamplingRules::parse(
            r#"{"version": 2, "rules": [{"description": "moves", "host": "*", "http_method": "POST",
                "url_path": "/api/move/*", "fixed_target": 0, "rate": 0.5}],
                "default": {"fixed_target": 2, "rate": 0.1}}"#,
        )
        .unwrap();
        assert_eq!(r.rules.len(), 2);
        assert_eq!(
            (r.rules[0].priority, r.rules[0].fixed_rate, r.rules[0].reservoir),
            (1, 0.5, 0)
        );
        assert_eq!(
            (r.rules[0].http_method.as_str(), r.rules[0].url_path.as_str()),
            ("POST", "/api/move/*")
        );
        assert_eq!(
            (r.rules[1].name.as_str(), r.rules[1].fixed_rate, r.rules[1].reservoir),
            ("Default", 0.1, 2)
        );
        let v1 = SamplingRules::parse(
            r#"{"version": 1, "rules": [{"service_name": "api", "http_method": "*", "url_path": "*",
                "fixed_target": 1, "rate": 1}], "default": {"fixed_target": 1, "rate": 0}}"#,
        )
        .unwrap();
        assert_eq!(v1.rules[0].service_name, "api");
    }

    #[test]
    fn bad_rules_name_the_problem() {
        for (text, words) in [
            ("{", "not JSON"),
            (r#"{"version": 3, "default": {}}"#, "version"),
            (r#"{"version": 2}"#, "default"),
            (r#"{"version": 2, "default": {"fixed_target": 1, "rate": 2}}"#, "rate"),
            (
                r#"{"version": 2, "default": {"fixed_target": 1, "rate": 0.1}, "rules": [{"rate": 0.1}]}"#,
                "rule 1: \"fixed_target\"",
            ),
        ] {
            let e = SamplingRules::parse(text).unwrap_err();
            assert!(e.contains(words), "{text}: {e}");
        }
    }
}
