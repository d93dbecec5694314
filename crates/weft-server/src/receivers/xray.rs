//! The AWS X-Ray daemon's protocol on its port (default 2000): segment documents over UDP
//! ([`weft_translate::xray`], counted as every UDP port is, [`super::udp`]), and on TCP the two
//! calls X-Ray SDKs make to the daemon for centralized sampling, answered from a local rule so
//! that SDKs run without errors: X-Ray's default rule, the first request each second and 5% of
//! the others.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::AppState;

/// Serves the UDP port until `stop` fires.
pub async fn serve_udp(
    st: Arc<AppState>,
    socket: tokio::net::UdpSocket,
    stats: Arc<super::udp::UdpStats>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let decode = |d: &[u8]| {
        let doc = weft_translate::xray::parse(weft_translate::xray::split_datagram(d)?)?;
        doc.to_otlp()
    };
    super::udp::serve(st, socket, decode, stats, stop).await;
}

/// X-Ray's default sampling rule.
const RULE_NAME: &str = "Default";
const FIXED_RATE: f64 = 0.05;
const RESERVOIR: u64 = 1;
/// Seconds between the SDKs' target refreshes.
const INTERVAL: u64 = 10;

fn json_reply(v: Value) -> Response {
    let mut r = v.to_string().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `POST /GetSamplingRules`.
pub async fn sampling_rules(State(_st): State<Arc<AppState>>) -> Response {
    json_reply(json!({
        "SamplingRuleRecords": [{
            "SamplingRule": {
                "RuleName": RULE_NAME,
                "RuleARN": "arn:aws:xray:us-east-1:000000000000:sampling-rule/Default",
                "ResourceARN": "*",
                "Priority": 10000,
                "FixedRate": FIXED_RATE,
                "ReservoirSize": RESERVOIR,
                "ServiceName": "*",
                "ServiceType": "*",
                "Host": "*",
                "HTTPMethod": "*",
                "URLPath": "*",
                "Version": 1,
                "Attributes": {}
            },
            "CreatedAt": 0.0,
            "ModifiedAt": 0.0
        }]
    }))
}

/// `POST /SamplingTargets`: every statistics document of the default rule gets its quota back.
pub async fn sampling_targets(State(_st): State<Arc<AppState>>, body: Bytes) -> Response {
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
        if name == RULE_NAME {
            docs.push(json!({
                "RuleName": RULE_NAME,
                "FixedRate": FIXED_RATE,
                "ReservoirQuota": RESERVOIR,
                "ReservoirQuotaTTL": now + INTERVAL as f64,
                "Interval": INTERVAL
            }));
        } else {
            unprocessed.push(json!({"RuleName": name, "ErrorCode": "400", "Message": "unknown sampling rule"}));
        }
    }
    json_reply(json!({
        "SamplingTargetDocuments": docs,
        "LastRuleModification": 0.0,
        "UnprocessedStatistics": unprocessed
    }))
}
