//! Jaeger's Service Performance Monitoring API, which Jaeger UI's Monitor tab calls:
//! `GET /api/metrics/{calls,errors,latencies}` on the Jaeger query port. Jaeger answers from the
//! series the Collector's spanmetrics connector writes to Prometheus; weft computes the same
//! figures from the spans with its TraceQL metrics (`run_metrics`), so nothing else is needed.
//!
//! Parameters, as Jaeger reads them: `service` (repeated, required), `spanKind` (repeated:
//! `server`, `client`, …; default server), `groupByOperation`, `endTs` (ms; default now),
//! `lookback` (ms; default 1 h), `step` (ms; default 5 s), `ratePer` (ms; default 10 min) and,
//! for latencies, `quantile`. The answer is a `MetricFamily` as Jaeger's jsonpb writes it: one
//! series per service (and operation), labels `service_name` and `operation`, a point per
//! step from `endTs - lookback` to `endTs`.
//!
//! Calls and errors are rates over the `ratePer` before each point, as Prometheus' `rate()`
//! over `[ratePer]`; the error rate is errors over calls. Latencies are the quantile of the
//! durations (ms) of the spans in the step before each point (Jaeger's is over `ratePer`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};
use weft_traceql::Value;

use super::query::{error, query_pairs as pairs, unauthorized};
use crate::app::AppState;
use crate::query::foreign::{query_with_tenant, quote};
use crate::tempo::metrics::Form;

/// Which figure a route answers.
#[derive(Clone, Copy)]
enum Figure {
    Calls,
    Errors,
    Latencies(f64),
}

/// The parameters, parsed and with Jaeger's defaults.
struct Params {
    services: Vec<String>,
    kinds: Vec<&'static str>,
    by_operation: bool,
    end_ms: u64,
    lookback_ms: u64,
    step_ms: u64,
    rate_ms: u64,
}

/// Jaeger's span kind names (`server` or `SPAN_KIND_SERVER`) as TraceQL's.
fn kind(v: &str) -> Option<&'static str> {
    let v = v.to_ascii_lowercase();
    Some(match v.strip_prefix("span_kind_").unwrap_or(&v) {
        "server" => "server",
        "client" => "client",
        "producer" => "producer",
        "consumer" => "consumer",
        "internal" => "internal",
        "unspecified" => "unspecified",
        _ => return None,
    })
}

fn parse(pairs: &[(String, String)]) -> Result<Params, String> {
    fn all<'a>(pairs: &'a [(String, String)], k: &'a str) -> impl Iterator<Item = &'a str> {
        pairs.iter().filter(move |(pk, _)| pk == k).map(|(_, v)| v.as_str())
    }
    let one = |k: &'static str| all(pairs, k).find(|v| !v.is_empty());
    let ms = |k: &'static str, default: u64| -> Result<u64, String> {
        match one(k) {
            None => Ok(default),
            Some(v) => v
                .parse::<u64>()
                .map_err(|_| format!("unable to parse param '{k}': {v:?} is not a whole number of milliseconds")),
        }
    };
    let services: Vec<String> = all(pairs, "service")
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect();
    if services.is_empty() {
        return Err("unable to parse param 'service': please provide at least one service name".into());
    }
    let mut kinds = Vec::new();
    for v in all(pairs, "spanKind").filter(|v| !v.is_empty()) {
        kinds.push(kind(v).ok_or_else(|| format!("unable to parse param 'spanKind': unsupported span kind {v:?}"))?);
    }
    if kinds.is_empty() {
        kinds.push("server");
    }
    let by_operation = match one("groupByOperation") {
        None => false,
        Some(v) => weft_translate::jaeger::v3::go_parse_bool(v)
            .ok_or_else(|| format!("unable to parse param 'groupByOperation': {v:?} is not a boolean"))?,
    };
    let now_ms = weft_core::now_ns() / 1_000_000;
    let p = Params {
        services,
        kinds,
        by_operation,
        end_ms: ms("endTs", now_ms)?,
        lookback_ms: ms("lookback", 3_600_000)?,
        step_ms: ms("step", 5_000)?,
        rate_ms: ms("ratePer", 600_000)?,
    };
    if p.step_ms == 0 {
        return Err("unable to parse param 'step': must be positive".into());
    }
    if p.lookback_ms / p.step_ms > 11_000 {
        return Err(format!(
            "lookback {} ms at step {} ms is more than 11,000 points",
            p.lookback_ms, p.step_ms
        ));
    }
    Ok(p)
}

/// The spans the figures count: the services' spans of the kinds asked.
fn filter(p: &Params, extra: &str) -> String {
    let services: Vec<String> = p
        .services
        .iter()
        .map(|s| format!("resource.service.name = {}", quote(s)))
        .collect();
    let kinds: Vec<String> = p.kinds.iter().map(|k| format!("kind = {k}")).collect();
    format!("{{ ({}) && ({}){extra} }}", services.join(" || "), kinds.join(" || "))
}

fn by(p: &Params) -> &'static str {
    if p.by_operation {
        "by (resource.service.name, name)"
    } else {
        "by (resource.service.name)"
    }
}

/// A series' key: its service and operation.
type Key = (String, String);

fn key_of(labels: &[(String, Value)]) -> Key {
    let text = |want: &str| {
        labels
            .iter()
            .find(|(k, _)| k == want)
            .map(|(_, v)| match v {
                Value::Str(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default()
    };
    (text("resource.service.name"), text("name"))
}

/// One metrics query over `buckets` steps ending at the last point: per key, a value per step.
async fn run(
    st: &AppState,
    tenant: &str,
    q: String,
    start_ns: u64,
    step_ns: u64,
    buckets: u64,
) -> Result<BTreeMap<Key, Vec<Option<f64>>>, Response> {
    let params: HashMap<String, String> = [
        ("q".to_owned(), q),
        ("start".to_owned(), start_ns.to_string()),
        ("end".to_owned(), (start_ns + buckets * step_ns).to_string()),
        ("step".to_owned(), format!("{step_ns}ns")),
    ]
    .into_iter()
    .collect();
    let (series, _, _, _) = crate::tempo::metrics::run_metrics(st, tenant, &params, Form::Exact, None).await?;
    Ok(series
        .into_iter()
        .map(|s| {
            let mut v = s.values;
            v.resize(buckets as usize, None);
            (key_of(&s.labels), v)
        })
        .collect())
}

/// Unix ms as jsonpb writes a `Timestamp`: RFC 3339 in UTC, fractions only when present.
fn timestamp(ms: u64) -> String {
    let (secs, frac) = (ms / 1000, ms % 1000);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let frac = if frac == 0 {
        String::new()
    } else {
        format!(".{frac:03}")
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

async fn figure(st: &AppState, tenant: &str, p: &Params, f: Figure) -> Result<Json, Response> {
    let step = p.step_ms * 1_000_000;
    let points = p.lookback_ms / p.step_ms + 1;
    // Each point is over the `window` steps before it (`ratePer` for rates; one for latencies).
    let window = match f {
        Figure::Latencies(_) => 1,
        _ => (p.rate_ms.div_ceil(p.step_ms)).max(1),
    };
    let last_ns = p.end_ms * 1_000_000;
    let first_ns = last_ns.saturating_sub((points - 1) * step);
    let start = first_ns.saturating_sub(window * step);
    let buckets = points - 1 + window;
    let rolled = |counts: &[Option<f64>], j: usize| -> f64 {
        // Rates are per second over each step: back to counts, summed over the window.
        counts[j..j + window as usize].iter().flatten().sum::<f64>() * (step as f64 / 1e9)
    };
    let secs = (window * step) as f64 / 1e9;
    let mut out: BTreeMap<Key, Vec<(u64, f64)>> = BTreeMap::new();
    let at = |j: u64| (first_ns + j * step) / 1_000_000;
    // The services' spans of the kinds asked, through a metrics function, by series.
    let series = |function: &str| {
        let q = format!("{}{function} {}", filter(p, ""), by(p));
        run(st, tenant, q, start, step, buckets)
    };
    match f {
        Figure::Calls => {
            for (k, v) in series(" | rate()").await? {
                let pts = (0..points).map(|j| (at(j), rolled(&v, j as usize) / secs)).collect();
                out.insert(k, pts);
            }
        }
        Figure::Errors => {
            let calls = series(" | rate()").await?;
            let errors = run(
                st,
                tenant,
                format!("{} | rate() {}", filter(p, " && status = error"), by(p)),
                start,
                step,
                buckets,
            )
            .await?;
            for (k, c) in calls {
                let e = errors.get(&k);
                let pts = (0..points as usize)
                    .filter_map(|j| {
                        let n = rolled(&c, j);
                        // No calls in the window: no rate, as Prometheus' division by zero.
                        (n > 0.0).then(|| (at(j as u64), e.map_or(0.0, |e| rolled(e, j)) / n))
                    })
                    .collect();
                out.insert(k, pts);
            }
        }
        Figure::Latencies(q) => {
            let lat = series(&format!(" | quantile_over_time(duration, {q})")).await?;
            for (k, v) in lat {
                // Seconds to milliseconds.
                let pts = (0..points as usize)
                    .filter_map(|j| v[j].map(|s| (at(j as u64), s * 1000.0)))
                    .collect();
                out.insert(k, pts);
            }
        }
    }
    let (mut name, mut help) = match f {
        Figure::Calls => (
            "service_call_rate".to_owned(),
            "calls/sec, grouped by service".to_owned(),
        ),
        Figure::Errors => (
            "service_error_rate".to_owned(),
            "error rate, computed as a fraction of errors/sec over calls/sec, grouped by service".to_owned(),
        ),
        Figure::Latencies(q) => (
            "service_latencies".to_owned(),
            format!("{:.2}th quantile latency, grouped by service", q),
        ),
    };
    if p.by_operation {
        name = name.replacen("service", "service_operation", 1);
        help.push_str(" & operation");
    }
    let metrics: Vec<Json> = out
        .into_iter()
        .map(|((svc, op), pts)| {
            let mut labels = vec![json!({"name": "service_name", "value": svc})];
            if p.by_operation {
                labels.push(json!({"name": "operation", "value": op}));
            }
            let points: Vec<Json> = pts
                .into_iter()
                .map(|(ms, v)| json!({"gaugeValue": {"doubleValue": v}, "timestamp": timestamp(ms)}))
                .collect();
            json!({"labels": labels, "metricPoints": points})
        })
        .collect();
    Ok(json!({"name": name, "type": "GAUGE", "help": help, "metrics": metrics}))
}

async fn answer(st: Arc<AppState>, headers: HeaderMap, raw: Option<String>, latencies: bool, f: Figure) -> Response {
    query_with_tenant(st, headers, unauthorized, move |s, tenant| async move {
        let pairs = pairs(raw.as_deref());
        let f = if latencies {
            let q = pairs
                .iter()
                .find(|(k, v)| k == "quantile" && !v.is_empty())
                .map(|(_, v)| v.as_str());
            match q.map(str::parse::<f64>) {
                Some(Ok(q)) if q > 0.0 && q < 1.0 => Figure::Latencies(q),
                Some(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "unable to parse param 'quantile': expected a number between 0 and 1",
                    );
                }
                None => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "unable to parse param 'quantile': please provide a quantile",
                    );
                }
            }
        } else {
            f
        };
        let p = match parse(&pairs) {
            Ok(p) => p,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        };
        match figure(&s, &tenant, &p, f).await {
            Ok(body) => (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response(),
            Err(r) => r,
        }
    })
    .await
}

/// `GET /api/metrics/calls`.
pub async fn calls(State(st): State<Arc<AppState>>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    answer(st, headers, raw, false, Figure::Calls).await
}

/// `GET /api/metrics/errors`.
pub async fn errors(State(st): State<Arc<AppState>>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    answer(st, headers, raw, false, Figure::Errors).await
}

/// `GET /api/metrics/latencies`.
pub async fn latencies(State(st): State<Arc<AppState>>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    answer(st, headers, raw, true, Figure::Calls).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_as_jsonpb_writes_them() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(1_622_711_526_000), "2021-06-03T09:12:06Z");
        assert_eq!(timestamp(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }

    #[test]
    fn parameters_as_jaeger_reads_them() {
        let p = parse(&pairs(Some(
            "service=a&service=b%20c&spanKind=client&spanKind=SPAN_KIND_SERVER&groupByOperation=true&endTs=1000000&lookback=60000&step=1000&ratePer=5000",
        )))
        .unwrap();
        assert_eq!(p.services, vec!["a", "b c"]);
        assert_eq!(p.kinds, vec!["client", "server"]);
        assert!(p.by_operation);
        assert_eq!(
            (p.end_ms, p.lookback_ms, p.step_ms, p.rate_ms),
            (1_000_000, 60_000, 1000, 5000)
        );
        assert_eq!(
            filter(&p, " && status = error"),
            r#"{ (resource.service.name = "a" || resource.service.name = "b c") && (kind = client || kind = server) && status = error }"#
        );
        let d = parse(&pairs(Some("service=a"))).unwrap();
        assert_eq!(
            (d.kinds.clone(), d.lookback_ms, d.step_ms, d.rate_ms),
            (vec!["server"], 3_600_000, 5000, 600_000)
        );
        for bad in [
            "",
            "spanKind=server",
            "service=a&spanKind=nope",
            "service=a&step=0",
            "service=a&endTs=x",
        ] {
            assert!(parse(&pairs(Some(bad))).is_err(), "{bad}");
        }
    }
}
