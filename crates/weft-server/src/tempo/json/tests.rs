use super::*;
use weft_engine::search::{Hit, HitSpan, HitSpanset, ServiceCount};
use weft_traceql::Value;

#[tokio::test]
async fn a_search_reply_written_trace_by_trace_is_the_same_bytes() {
    let h = a_hit();
    let m = Inspected {
        bytes: 7,
        traces: 2,
        ..Inspected::default()
    };
    // Up to 3,000 hits: more than one chunk of the streamed body.
    let many: Vec<Hit> = (0..3000u32)
        .map(|i| {
            let mut x = h.clone();
            x.trace_id[..4].copy_from_slice(&i.to_be_bytes());
            x
        })
        .collect();
    for hits in [vec![], vec![h.clone()], many] {
        let streamed = axum::body::to_bytes(search_response_body(hits.clone(), &m), usize::MAX)
            .await
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&streamed).unwrap(),
            search_response(&hits, &m).to_string(),
            "written a trace at a time, the same bytes"
        );
    }
}

#[test]
fn search_hits_use_tempos_types() {
    let h = a_hit();
    let j = hit(&h);
    assert_eq!(j["traceID"], "ab00000000000000", "leading zeros stripped");
    assert_eq!(j["rootServiceName"], "<root span not yet received>");
    assert_eq!(j["startTimeUnixNano"], "1700000000000000000");
    assert_eq!(j["durationMs"], 1500);
    assert_eq!(j["spanSets"][0]["matched"], 4);
    assert_eq!(j["spanSet"], j["spanSets"][0]);
    let span = &j["spanSets"][0]["spans"][0];
    assert_eq!(span["spanID"], "0000000000000007");
    assert_eq!(span["durationNanos"], "6");
    assert_eq!(span["attributes"][0]["value"]["intValue"], "500");
    assert_eq!(j["spanSets"][0]["attributes"][0]["key"], "count()");
    assert_eq!(
        j["serviceStats"],
        serde_json::json!({"api": {"spanCount": 3}, "db": {"spanCount": 2, "errorCount": 1}}),
        "Tempo's serviceStats, a zero errorCount left out as in proto3 JSON"
    );
}

#[test]
fn values_and_durations_print_like_tempo() {
    assert_eq!(duration_text(1_500_000_000), "1500ms");
    assert_eq!(duration_text(2_000_000_000), "2s");
    assert_eq!(duration_text(7), "7ns");
    assert_eq!(typed(&Value::Bool(true)), ("bool", "true".to_owned()));
    assert_eq!(
        typed(&Value::Status(weft_traceql::ast::Status::Error)),
        ("keyword", "error".to_owned())
    );
    assert_eq!(any_value(&Value::Float(0.5)), serde_json::json!({"doubleValue": 0.5}));
}

#[test]
fn metrics_samples_sit_at_step_starts() {
    let series = vec![weft_traceql::Series {
        labels: vec![("resource.service.name".into(), Value::Str("api".into()))],
        values: vec![Some(1.0), None, Some(3.0)],
        exemplars: Vec::new(),
    }];
    let text = query_range_response(&series, 10_000_000_000, 5_000_000_000, &Inspected::default(), None);
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["series"][0]["samples"][0]["value"], 1.0);
    assert_eq!(j["series"][0]["labels"][0]["value"]["stringValue"], "api");
    let samples = &j["series"][0]["samples"];
    assert_eq!(samples.as_array().unwrap().len(), 2);
    assert_eq!(samples[1]["timestampMs"], "20000");
    // Exactly Tempo 3's TimeSeries fields (promLabels was removed in Tempo 2.9).
    let keys: Vec<&String> = j["series"][0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["labels", "samples"]);
    let keys: Vec<&String> = j["metrics"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "completedJobs",
            "inspectedBytes",
            "inspectedSpans",
            "inspectedTraces",
            "totalBlockBytes",
            "totalBlocks",
            "totalJobs"
        ]
    );
}

fn a_hit() -> Hit {
    let mut id = [0u8; 16];
    id[8] = 0xab;
    Hit {
        trace_id: id,
        root_service_name: String::new(),
        root_trace_name: "GET /".into(),
        start_unix_nano: 1_700_000_000_000_000_000,
        duration_nano: 1_500_000_000,
        spansets: vec![HitSpanset {
            spans: vec![HitSpan {
                span_id: [0, 0, 0, 0, 0, 0, 0, 7],
                name: "db".into(),
                start_unix_nano: 5,
                duration_nano: 6,
                attributes: vec![("http.status_code".into(), Value::Int(500))],
            }],
            matched: 4,
            attributes: vec![("count()".into(), Value::Int(4))],
        }],
        service_stats: vec![
            ServiceCount {
                service: "api".into(),
                spans: 3,
                errors: 0,
            },
            ServiceCount {
                service: "db".into(),
                spans: 2,
                errors: 1,
            },
        ],
    }
}
