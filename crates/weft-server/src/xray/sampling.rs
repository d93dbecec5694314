//! X-Ray centralized sampling as the daemon answers it: `POST /GetSamplingRules` and
//! `POST /SamplingTargets` on the daemon's TCP port, from local rules.

use std::collections::HashMap;
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

/// Each rule's reservoir shared between the SDK instances (`ClientID`s) that report using it,
/// as the X-Ray service shares it: a client's `ReservoirQuota` is its share of the rule's
/// reservoir by its request rate among the clients that reported in the last three intervals,
/// in whole traces a second (largest remainders first). A quota is granted until its TTL (two
/// intervals, so that it does not lapse between the SDK's reports), and never more than the
/// reservoir minus what other clients hold: the clients of a rule together never sample more
/// than its reservoir a second from it, also while a newcomer joins.
///
/// Behind several distributors, the clients are those of every distributor: each writes its
/// own ([`Quotas::snapshot`]) to the others through Kafka (`xray::share`), and counts theirs
/// ([`Quotas::peer`]) among the rule's clients and what they hold.
#[derive(Default)]
pub struct Quotas {
    rules: parking_lot::Mutex<HashMap<String, HashMap<String, Client>>>,
    /// Other distributors' clients, by distributor: when their last snapshot came (this
    /// server's clock) and its clients by rule.
    peers: parking_lot::Mutex<HashMap<String, (f64, ClientsByRule)>>,
}

/// Clients by rule, then by `ClientID`.
type ClientsByRule = HashMap<String, HashMap<String, Client>>;

#[derive(Debug, Clone, Copy)]
struct Client {
    /// Requests a second, from its last report.
    rate: f64,
    /// The SDK's timestamp of its last report.
    reported: f64,
    /// When it last reported, by this server's clock.
    seen: f64,
    /// The quota granted, and until when (Unix seconds).
    quota: u64,
    until: f64,
}

impl Quotas {
    /// Records `client`'s report for `rule` (of `reservoir` a second) at `now`, and returns its
    /// quota.
    fn report(&self, rule: &str, reservoir: u64, client: &str, at: f64, requests: f64, now: f64) -> u64 {
        // Other distributors' clients of the rule (a client that moved here counts here).
        let remote: HashMap<String, Client> = {
            let mut peers = self.peers.lock();
            peers.retain(|_, (seen, _)| now - *seen <= 3.0 * INTERVAL as f64);
            peers
                .values()
                .filter_map(|(_, rules)| rules.get(rule))
                .flatten()
                .filter(|(id, _)| id.as_str() != client)
                .map(|(id, c)| (id.clone(), *c))
                .collect()
        };
        let mut rules = self.rules.lock();
        let clients = rules.entry(rule.to_owned()).or_default();
        clients.retain(|_, c| now - c.seen <= 3.0 * INTERVAL as f64);
        let prev = clients.get(client).copied();
        let elapsed = prev
            .map(|p| at - p.reported)
            .filter(|e| e.is_finite() && *e > 0.0)
            .unwrap_or(INTERVAL as f64)
            .clamp(1.0, 6.0 * INTERVAL as f64);
        let rate = (requests.max(0.0) / elapsed).min(1e12);
        let me = clients.entry(client.to_owned()).or_insert(Client {
            rate,
            reported: at,
            seen: now,
            quota: 0,
            until: 0.0,
        });
        me.rate = rate;
        me.reported = at;
        me.seen = now;
        let mut all = remote;
        for (id, c) in clients.iter() {
            all.insert(id.clone(), *c);
        }
        let fair = shares(&all, reservoir);
        let held: u64 = all
            .iter()
            .filter(|(id, c)| id.as_str() != client && c.until > now)
            .map(|(_, c)| c.quota)
            .sum();
        let quota = fair
            .get(client)
            .copied()
            .unwrap_or(0)
            .min(reservoir.saturating_sub(held));
        let me = clients.get_mut(client).expect("inserted above");
        me.quota = quota;
        me.until = now + 2.0 * INTERVAL as f64;
        quota
    }

    /// This server's clients of every rule, for the other distributors: `{rule: {client:
    /// {"rate", "quota", "until"}}}`.
    pub fn snapshot(&self, now: f64) -> Value {
        let rules = self.rules.lock();
        let mut out = serde_json::Map::new();
        for (rule, clients) in rules.iter() {
            let live: serde_json::Map<String, Value> = clients
                .iter()
                .filter(|(_, c)| now - c.seen <= 3.0 * INTERVAL as f64)
                .map(|(id, c)| (id.clone(), json!({"rate": c.rate, "quota": c.quota, "until": c.until})))
                .collect();
            if !live.is_empty() {
                out.insert(rule.clone(), Value::Object(live));
            }
        }
        Value::Object(out)
    }

    /// Another distributor's [`Quotas::snapshot`], received at `now`; it replaces that
    /// distributor's last. Entries that do not parse are left out.
    pub fn peer(&self, node: &str, snapshot: &Value, now: f64) {
        let Some(rules) = snapshot.as_object() else { return };
        let mut parsed = ClientsByRule::new();
        for (rule, clients) in rules {
            let Some(clients) = clients.as_object() else { continue };
            for (id, c) in clients {
                let num = |k: &str| c.get(k).and_then(Value::as_f64).filter(|x| x.is_finite() && *x >= 0.0);
                let (Some(rate), Some(quota), Some(until)) = (num("rate"), num("quota"), num("until")) else {
                    continue;
                };
                parsed.entry(rule.clone()).or_default().insert(
                    id.clone(),
                    Client {
                        rate: rate.min(1e12),
                        reported: now,
                        seen: now,
                        quota: quota.min(u32::MAX as f64) as u64,
                        until,
                    },
                );
            }
        }
        self.peers.lock().insert(node.to_owned(), (now, parsed));
    }
}

/// `reservoir` split between `clients` by their rates (equally when none has requests), in
/// whole units, the remainders to the largest fractions (ties by client ID).
fn shares(clients: &HashMap<String, Client>, reservoir: u64) -> HashMap<String, u64> {
    let total: f64 = clients.values().map(|c| c.rate).sum();
    let n = clients.len() as f64;
    let mut parts: Vec<(&String, f64)> = clients
        .iter()
        .map(|(id, c)| {
            let share = if total > 0.0 { c.rate / total } else { 1.0 / n };
            (id, share * reservoir as f64)
        })
        .collect();
    let mut out: HashMap<String, u64> = parts.iter().map(|(id, x)| ((*id).clone(), x.floor() as u64)).collect();
    let mut left = reservoir.saturating_sub(out.values().sum());
    parts.sort_by(|a, b| {
        let fa = a.1 - a.1.floor();
        let fb = b.1 - b.1.floor();
        fb.total_cmp(&fa).then_with(|| a.0.cmp(b.0))
    });
    for (id, _) in parts {
        if left == 0 {
            break;
        }
        *out.get_mut(id).expect("every client has a share") += 1;
        left -= 1;
    }
    out
}

/// `POST /SamplingTargets`: each statistics document of a known rule gets the rule's fixed
/// rate and this client's share of its reservoir ([`Quotas`]); an unknown rule, or a document
/// without a `ClientID`, is returned as unprocessed.
pub async fn sampling_targets(
    Extension(rules): Extension<Arc<SamplingRules>>,
    Extension(quotas): Extension<Arc<Quotas>>,
    body: Bytes,
) -> Response {
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
        let client = s.get("ClientID").and_then(Value::as_str).unwrap_or("");
        let Some(r) = rules.rules.iter().find(|r| r.name == name) else {
            unprocessed.push(json!({"RuleName": name, "ErrorCode": "400", "Message": "unknown sampling rule"}));
            continue;
        };
        if client.is_empty() {
            unprocessed.push(json!({"RuleName": name, "ErrorCode": "400", "Message": "ClientID is missing"}));
            continue;
        }
        let at = s.get("Timestamp").and_then(Value::as_f64).unwrap_or(now);
        let requests = s.get("RequestCount").and_then(Value::as_f64).unwrap_or(0.0);
        let quota = quotas.report(&r.name, r.reservoir, client, at, requests, now);
        docs.push(json!({
            "RuleName": r.name,
            "FixedRate": r.fixed_rate,
            "ReservoirQuota": quota,
            "ReservoirQuotaTTL": now + 2.0 * INTERVAL as f64,
            "Interval": INTERVAL
        }));
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
    fn a_reservoir_is_shared_by_request_rate_and_never_oversubscribed() {
        let q = Quotas::default();
        // The first client alone gets the whole reservoir of 10.
        assert_eq!(q.report("r", 10, "a", 100.0, 300.0, 100.0), 10);
        // A newcomer at the same rate gets only what is not held until a holds less.
        assert_eq!(q.report("r", 10, "b", 100.0, 300.0, 101.0), 0);
        assert_eq!(q.report("r", 10, "a", 110.0, 300.0, 110.0), 5);
        assert_eq!(q.report("r", 10, "b", 110.0, 300.0, 111.0), 5);
        // By rate: c sends three times b's requests; a and b hold 5 each until they report.
        assert_eq!(q.report("r", 10, "c", 120.0, 900.0, 120.0), 0);
        let (a, b) = (
            q.report("r", 10, "a", 120.0, 100.0, 121.0),
            q.report("r", 10, "b", 120.0, 100.0, 121.5),
        );
        let c = q.report("r", 10, "c", 130.0, 900.0, 130.0);
        assert_eq!((a, b, c), (1, 1, 8));
        assert!(a + b + c <= 10);
        // Clients that stop reporting are forgotten after three intervals.
        assert_eq!(q.report("r", 10, "c", 200.0, 900.0, 200.0), 10);
        // A reservoir smaller than the clients: whole units, the largest shares first.
        let q = Quotas::default();
        q.report("s", 1, "x", 0.0, 10.0, 0.0);
        q.report("s", 1, "y", 0.0, 30.0, 0.0);
        let x = q.report("s", 1, "x", 10.0, 10.0, 10.0);
        let y = q.report("s", 1, "y", 10.0, 30.0, 10.0);
        assert_eq!(x + y, 1);
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

    #[test]
    fn distributors_split_a_reservoir_among_all_their_clients() {
        let (d1, d2) = (Quotas::default(), Quotas::default());
        let share = |from: &Quotas, to: &Quotas, node: &str, now: f64| {
            // Through JSON, as the Kafka records carry it.
            let text = from.snapshot(now).to_string();
            to.peer(node, &serde_json::from_str(&text).unwrap(), now);
        };
        // a alone, on d1: the whole reservoir.
        assert_eq!(d1.report("r", 10, "a", 100.0, 300.0, 100.0), 10);
        share(&d1, &d2, "d1", 101.0);
        // b on d2 at the same rate: nothing until a holds less.
        assert_eq!(d2.report("r", 10, "b", 101.0, 300.0, 101.0), 0);
        share(&d2, &d1, "d2", 102.0);
        assert_eq!(d1.report("r", 10, "a", 110.0, 300.0, 110.0), 5);
        share(&d1, &d2, "d1", 110.5);
        assert_eq!(d2.report("r", 10, "b", 111.0, 300.0, 111.0), 5);
        // c joins d2; after a round of reports and shares, 3/3/4 and never more than 10.
        let mut held = std::collections::BTreeMap::new();
        held.insert("c", d2.report("r", 10, "c", 112.0, 300.0, 112.0));
        for round in 0..3 {
            let t = 120.0 + 10.0 * round as f64;
            share(&d2, &d1, "d2", t);
            held.insert("a", d1.report("r", 10, "a", t, 300.0, t + 0.1));
            assert!(held.values().sum::<u64>() <= 10, "{held:?}");
            share(&d1, &d2, "d1", t + 0.2);
            held.insert("b", d2.report("r", 10, "b", t, 300.0, t + 0.3));
            assert!(held.values().sum::<u64>() <= 10, "{held:?}");
            held.insert("c", d2.report("r", 10, "c", t, 300.0, t + 0.4));
            assert!(held.values().sum::<u64>() <= 10, "{held:?}");
        }
        let mut q: Vec<u64> = held.values().copied().collect();
        q.sort();
        assert_eq!(q, vec![3, 3, 4], "{held:?}");
        // A distributor not heard from for three intervals is forgotten: its clients' share
        // comes back.
        assert_eq!(d1.report("r", 10, "a", 300.0, 300.0, 300.0), 10);
        // A snapshot that does not parse changes nothing.
        d1.peer("d3", &serde_json::json!({"r": {"z": {"rate": "x"}}, "s": 1}), 300.0);
        assert_eq!(d1.report("r", 10, "a", 310.0, 300.0, 310.0), 10);
    }
}
