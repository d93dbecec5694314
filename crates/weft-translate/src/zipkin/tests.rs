use super::*;
use prost::Message;
use weft_otlp::pb::collector::ExportTraceServiceRequest;

fn otlp(enc: Encoding, body: &[u8]) -> ExportTraceServiceRequest {
    let (b, _) = to_otlp_request(enc, body).unwrap();
    ExportTraceServiceRequest::decode(&b[..]).unwrap()
}

/// Every span of a request, back in Zipkin v2 JSON.
fn back(req: &ExportTraceServiceRequest) -> Vec<serde_json::Value> {
    let data = weft_otlp::pb::trace::TracesData {
        resource_spans: req.resource_spans.clone(),
    };
    query::convert(&data).iter().map(|s| s.span.to_json()).collect()
}

const V2: &str = r#"[
 {"traceId":"86154a4ba6e91385","parentId":"86154a4ba6e91385","id":"4d1e00c0db9010db","kind":"CLIENT",
  "name":"get /users","timestamp":1472470996199000,"duration":207000,
  "localEndpoint":{"serviceName":"frontend","ipv4":"192.168.99.1","port":8080},
  "remoteEndpoint":{"serviceName":"backend","ipv4":"172.19.0.2","port":9000},
  "annotations":[{"timestamp":1472470996238000,"value":"ws"},{"timestamp":1472470996403000,"value":"wr"}],
  "tags":{"http.path":"/api","clnt/finagle.version":"6.45.0"}},
 {"traceId":"86154a4ba6e91385","parentId":"86154a4ba6e91385","id":"4d1e00c0db9010db","kind":"SERVER",
  "name":"get /users","timestamp":1472470996250000,"duration":100000,"shared":true,
  "localEndpoint":{"serviceName":"backend","ipv6":"2001:db8::c001"},
  "tags":{"error":"boom"}}
]"#;

#[test]
fn v2_json_round_trips_through_otlp() {
    let req = otlp(Encoding::JsonV2, V2.as_bytes());
    assert_eq!(req.resource_spans.len(), 2, "one resource per service");
    let client = &req.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(client.kind, 3);
    assert_eq!(client.start_time_unix_nano, 1_472_470_996_199_000_000);
    assert_eq!(client.end_time_unix_nano - client.start_time_unix_nano, 207_000_000);
    assert_eq!(client.events.len(), 2);
    let keys: Vec<&str> = client.attributes.iter().map(|kv| kv.key.as_str()).collect();
    assert!(keys.contains(&"peer.service") && keys.contains(&"net.peer.port") && keys.contains(&"net.host.ip"));
    // The shared server span gets its own ID under the client span.
    let server = &req.resource_spans[1].scope_spans[0].spans[0];
    assert_eq!(server.parent_span_id, client.span_id);
    assert_ne!(server.span_id, client.span_id);
    assert_eq!(server.status.as_ref().unwrap().code, 2);
    assert_eq!(server.status.as_ref().unwrap().message, "boom");

    let input: Vec<serde_json::Value> = serde_json::from_str(V2).unwrap();
    assert_eq!(back(&req), input);
}

/// Spans as the OpenTelemetry Zipkin exporters write them (`debug`, scope tags in both
/// spellings, `otel.status_code` beside `error`, `peer.service` as a tag with and without a
/// remote endpoint) read back through the Zipkin API as sent, while their OTLP has the
/// Collector's scope, status and `peer.service`.
#[test]
fn opentelemetry_exporter_spans_read_back_as_sent() {
    let sent = r#"[
      {"traceId":"074c5518c3f27f0eb30dcff1a1c9a5c7","parentId":"9d73c3edfafd6dca","id":"6949842c0fddc925",
       "kind":"CLIENT","name":"insert cart","timestamp":1795831197302273,"duration":20,
       "localEndpoint":{"serviceName":"shop"},"debug":true,
       "tags":{"error":"deadlock","otel.library.name":"lib","otel.library.version":"2.1",
               "otel.scope.name":"lib","otel.scope.version":"2.1","otel.status_code":"ERROR",
               "peer.service":"postgres"}},
      {"traceId":"074c5518c3f27f0eb30dcff1a1c9a5c7","id":"9d73c3edfafd6dca","kind":"CLIENT","name":"get",
       "timestamp":1795831197302211,"duration":30,"localEndpoint":{"serviceName":"shop"},
       "remoteEndpoint":{"serviceName":"redis","port":6379},
       "tags":{"otel.library.name":"lib","peer.service":"Redis-Main","otel.status_code":"OK"}}
    ]"#;
    let req = otlp(Encoding::JsonV2, sent.as_bytes());
    let scope = req.resource_spans[0].scope_spans[0].scope.as_ref().unwrap();
    assert_eq!((scope.name.as_str(), scope.version.as_str()), ("lib", "2.1"));
    let spans: Vec<_> = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    let attr = |s: &weft_otlp::pb::trace::Span, k: &str| {
        let v: Vec<_> = s.attributes.iter().filter(|kv| kv.key == k).collect();
        assert!(v.len() <= 1, "{k} once");
        v.first().map(|kv| super::out::value_text(kv.value.as_ref()))
    };
    let failed = spans.iter().find(|s| s.name == "insert cart").unwrap();
    assert_eq!(
        failed.status.as_ref().map(|s| (s.code, s.message.as_str())),
        Some((2, "deadlock"))
    );
    assert_eq!(attr(failed, "peer.service").as_deref(), Some("postgres"));
    assert_eq!(attr(failed, "otel.status_code"), None);
    let get = spans.iter().find(|s| s.name == "get").unwrap();
    assert_eq!(get.status.as_ref().map(|s| s.code), Some(1));
    assert_eq!(
        attr(get, "peer.service").as_deref(),
        Some("redis"),
        "the remote endpoint's name"
    );

    let mut input: Vec<serde_json::Value> = serde_json::from_str(sent).unwrap();
    let mut out = back(&req);
    let by_id = |v: &mut Vec<serde_json::Value>| v.sort_by_key(|s| s["id"].as_str().unwrap().to_owned());
    by_id(&mut input);
    by_id(&mut out);
    assert_eq!(out, input);
    // Brave's spans (no scope or status tags, no debug) carry no such attribute.
    let plain = otlp(Encoding::JsonV2, V2.as_bytes());
    let keys = plain
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans);
    assert!(
        keys.flat_map(|s| &s.attributes)
            .all(|kv| kv.key != super::keys::ORIGINAL)
    );
}

/// `without_original` takes out exactly the `zipkin.original` attribute of a stored span's
/// attribute fields, keeping every other one in order, and leaves spans without it alone.
#[test]
fn without_original_removes_only_that_attribute() {
    let sent = r#"[{"traceId":"074c5518c3f27f0eb30dcff1a1c9a5c7","id":"6949842c0fddc925","kind":"CLIENT",
        "name":"insert cart","timestamp":1795831197302273,"duration":20,"debug":true,
        "localEndpoint":{"serviceName":"shop"},
        "tags":{"a":"1","otel.status_code":"ERROR","error":"deadlock","zipkin.originally":"z","z":"2"}}]"#;
    let req = otlp(Encoding::JsonV2, sent.as_bytes());
    let span = &req.resource_spans[0].scope_spans[0].spans[0];
    // The span's attribute fields as a stored row holds them: field 9 entries.
    let fields = |kvs: &[weft_otlp::pb::common::KeyValue]| {
        let mut b = Vec::new();
        for kv in kvs {
            weft_otlp::wire::put_bytes(&mut b, 9, &kv.encode_to_vec());
        }
        b
    };
    assert!(span.attributes.iter().any(|kv| kv.key == keys::ORIGINAL));
    let kept: Vec<_> = span
        .attributes
        .iter()
        .filter(|kv| kv.key != keys::ORIGINAL)
        .cloned()
        .collect();
    assert!(
        kept.iter().any(|kv| kv.key == "zipkin.originally"),
        "a longer key stays"
    );
    assert_eq!(without_original(&fields(&span.attributes)), Some(fields(&kept)));
    assert_eq!(without_original(&fields(&kept)), None, "nothing to take out");
    // A value that merely contains the key's text is not the key.
    let lookalike = weft_otlp::pb::common::KeyValue {
        key: "note".into(),
        value: Some(weft_otlp::pb::common::AnyValue {
            value: Some(weft_otlp::pb::common::any_value::Value::StringValue(
                keys::ORIGINAL.into(),
            )),
        }),
    };
    assert_eq!(without_original(&fields(&[lookalike])), None);
    // Bytes that do not parse are left alone.
    assert_eq!(without_original(b"\x4a\x0fzipkin.original"), None);
}

#[test]
fn proto3_matches_json() {
    // ListOfSpans with one span: trace_id (8), id, kind SERVER, name, timestamp, duration,
    // local endpoint, one tag.
    let mut span = Vec::new();
    weft_otlp::wire::put_bytes(&mut span, 1, &[0, 0, 0, 0, 0, 0, 0, 7]);
    weft_otlp::wire::put_bytes(&mut span, 3, &[0, 0, 0, 0, 0, 0, 0, 9]);
    weft_otlp::wire::put_varint_field(&mut span, 4, 2);
    weft_otlp::wire::put_bytes(&mut span, 5, b"op");
    weft_otlp::wire::put_fixed64(&mut span, 6, 1_000_000);
    weft_otlp::wire::put_varint_field(&mut span, 7, 5);
    let mut ep = Vec::new();
    weft_otlp::wire::put_bytes(&mut ep, 1, b"svc");
    weft_otlp::wire::put_bytes(&mut ep, 2, &[10, 0, 0, 1]);
    weft_otlp::wire::put_bytes(&mut span, 8, &ep);
    let mut tag = Vec::new();
    weft_otlp::wire::put_bytes(&mut tag, 1, b"k");
    weft_otlp::wire::put_bytes(&mut tag, 2, b"v");
    weft_otlp::wire::put_bytes(&mut span, 11, &tag);
    let mut list = Vec::new();
    weft_otlp::wire::put_bytes(&mut list, 1, &span);
    let from_proto = back(&otlp(Encoding::Proto3, &list));
    let json = r#"[{"traceId":"7","id":"9","kind":"SERVER","name":"op","timestamp":1000000,"duration":5,
        "localEndpoint":{"serviceName":"svc","ipv4":"10.0.0.1"},"tags":{"k":"v"}}]"#;
    let from_json = back(&otlp(Encoding::JsonV2, json.as_bytes()));
    assert_eq!(from_proto, from_json);
    assert_eq!(from_json[0]["traceId"], "0000000000000007");
}

/// A v1 timestamp past what u64 microseconds hold (read as the largest) next to a duration
/// and an `ss` annotation: converted without overflow (found by fuzzing).
#[test]
fn v1_timestamp_at_the_limit_does_not_overflow() {
    let v1 = r#"[{"annotations":[{"endpoint":{"ipv4":"0.1.0.1"},"value":"ss"}],"duration":3,"id":"2",
        "timestamp":70000000000000888880,"traceId":"5"}]"#;
    let spans = decode(Encoding::JsonV1, v1.as_bytes()).unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!((spans[0].timestamp_us, spans[0].duration_us), (u64::MAX, 3));
    let (otlp, n) = to_otlp_request(Encoding::JsonV1, v1.as_bytes()).unwrap();
    assert_eq!(n, 1);
    assert!(!otlp.is_empty());
}

#[test]
fn v1_shared_span_splits_into_client_and_server() {
    let v1 = r#"[{"traceId":"1","id":"2","name":"get","timestamp":100,"duration":50,
      "annotations":[
        {"timestamp":100,"value":"cs","endpoint":{"serviceName":"web","ipv4":"10.0.0.1"}},
        {"timestamp":110,"value":"sr","endpoint":{"serviceName":"api","ipv4":"10.0.0.2"}},
        {"timestamp":140,"value":"ss","endpoint":{"serviceName":"api","ipv4":"10.0.0.2"}},
        {"timestamp":150,"value":"cr","endpoint":{"serviceName":"web","ipv4":"10.0.0.1"}},
        {"timestamp":120,"value":"cache.miss","endpoint":{"serviceName":"api","ipv4":"10.0.0.2"}}],
      "binaryAnnotations":[
        {"key":"http.path","value":"/x","endpoint":{"serviceName":"api","ipv4":"10.0.0.2"}},
        {"key":"sa","value":true,"endpoint":{"serviceName":"api","ipv4":"10.0.0.2","port":80}}]}]"#;
    let spans = decode(Encoding::JsonV1, v1.as_bytes()).unwrap();
    assert_eq!(spans.len(), 2);
    let (c, s) = (&spans[0], &spans[1]);
    assert_eq!((c.kind, c.timestamp_us, c.duration_us), (Some(Kind::Client), 100, 50));
    assert_eq!(c.remote.as_ref().unwrap().port, 80);
    assert_eq!(
        (s.kind, s.timestamp_us, s.duration_us, s.shared),
        (Some(Kind::Server), 110, 30, true)
    );
    assert_eq!(s.annotations.len(), 1);
    assert_eq!(s.tags, vec![(Cow::Borrowed("http.path"), Cow::Borrowed("/x"))]);
}

#[test]
fn v1_thrift_reads_like_v1_json() {
    // list<Span> of one span: trace_id 1, name "n", id 2, one annotation "sr" with endpoint,
    // one string binary annotation.
    fn field(out: &mut Vec<u8>, ty: u8, id: i16) {
        out.push(ty);
        out.extend_from_slice(&id.to_be_bytes());
    }
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as i32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut ep = Vec::new();
    field(&mut ep, 8, 1);
    ep.extend_from_slice(&0x0a00_0002u32.to_be_bytes());
    field(&mut ep, 6, 2);
    ep.extend_from_slice(&8080i16.to_be_bytes());
    field(&mut ep, 11, 3);
    string(&mut ep, "api");
    ep.push(0);
    let mut b = vec![12];
    b.extend_from_slice(&1i32.to_be_bytes());
    field(&mut b, 10, 1);
    b.extend_from_slice(&1i64.to_be_bytes());
    field(&mut b, 11, 3);
    string(&mut b, "n");
    field(&mut b, 10, 4);
    b.extend_from_slice(&2i64.to_be_bytes());
    field(&mut b, 15, 6);
    b.push(12);
    b.extend_from_slice(&2i32.to_be_bytes());
    for (ts, v) in [(10i64, "sr"), (30, "ss")] {
        field(&mut b, 10, 1);
        b.extend_from_slice(&ts.to_be_bytes());
        field(&mut b, 11, 2);
        string(&mut b, v);
        field(&mut b, 12, 3);
        b.extend_from_slice(&ep);
        b.push(0);
    }
    field(&mut b, 15, 8);
    b.push(12);
    b.extend_from_slice(&1i32.to_be_bytes());
    field(&mut b, 11, 1);
    string(&mut b, "k");
    field(&mut b, 11, 2);
    string(&mut b, "v");
    field(&mut b, 8, 3);
    b.extend_from_slice(&6i32.to_be_bytes());
    field(&mut b, 12, 4);
    b.extend_from_slice(&ep);
    b.push(0);
    b.push(0);
    let from_thrift = decode(Encoding::ThriftV1, &b).unwrap();
    let json = r#"[{"traceId":"1","id":"2","name":"n","annotations":[
        {"timestamp":10,"value":"sr","endpoint":{"serviceName":"api","ipv4":"10.0.0.2","port":8080}},
        {"timestamp":30,"value":"ss","endpoint":{"serviceName":"api","ipv4":"10.0.0.2","port":8080}}],
        "binaryAnnotations":[{"key":"k","value":"v","endpoint":{"serviceName":"api","ipv4":"10.0.0.2","port":8080}}]}]"#;
    let from_json = decode(Encoding::JsonV1, json.as_bytes()).unwrap();
    assert_eq!(from_thrift, from_json);
    assert_eq!(from_json[0].kind, Some(Kind::Server));
    assert_eq!((from_json[0].timestamp_us, from_json[0].duration_us), (10, 20));
    // No span timestamp: the server side was shared (v1's convention).
    assert!(from_json[0].shared);
}

#[test]
fn bad_input_names_the_problem() {
    let e = decode(Encoding::JsonV2, br#"[{"traceId":"xyz","id":"1"}]"#).unwrap_err();
    assert!(e.0.contains("traceId"), "{e}");
    let e = decode(Encoding::JsonV2, br#"[{"traceId":"1"}]"#).unwrap_err();
    assert!(e.0.contains("id is missing"), "{e}");
    let e = decode(Encoding::JsonV2, br#"[{"traceId":"1","id":"2","kind":"LOCAL"}]"#).unwrap_err();
    assert!(e.0.contains("kind"), "{e}");
    let e = decode(Encoding::JsonV2, b"{").unwrap_err();
    assert!(e.0.contains("malformed"), "{e}");
}

#[test]
fn otlp_spans_read_as_the_collector_exports_them() {
    use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};
    use weft_otlp::pb::trace::{Span as S, Status, span::Event};
    let kv = |k: &str, v: V| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    };
    let span = S {
        trace_id: vec![1; 16].into(),
        span_id: vec![2; 8].into(),
        name: "Internal Work".into(),
        kind: 1,
        start_time_unix_nano: 5_000,
        end_time_unix_nano: 5_400,
        attributes: vec![kv("n", V::IntValue(3)), kv("net.peer.ip", V::StringValue("::1".into()))],
        events: vec![Event {
            time_unix_nano: 5_100,
            name: "ev".into(),
            attributes: vec![kv("a", V::BoolValue(true))],
            ..Event::default()
        }],
        status: Some(Status {
            code: 2,
            message: "bad".into(),
        }),
        ..S::default()
    };
    let res = [
        kv("service.name", V::StringValue("Checkout".into())),
        kv("host.name", V::StringValue("h1".into())),
    ];
    let z = out::from_otlp(&res, ("lib", ""), &span).to_json();
    assert_eq!(
        z,
        serde_json::json!({
            "traceId": "01010101010101010101010101010101", "id": "0202020202020202",
            "name": "internal work", "timestamp": 5, "duration": 1,
            "localEndpoint": {"serviceName": "checkout"},
            "remoteEndpoint": {"ipv6": "::1"},
            "annotations": [{"timestamp": 5, "value": "{\"ev\":{\"a\":true}}"}],
            "tags": {"error": "bad", "host.name": "h1", "n": "3", "otel.scope.name": "lib", "span.kind": "internal"}
        })
    );
}

mod no_panic {
    use super::*;
    use proptest::prelude::*;

    fn mutate(seed: &[u8], flips: &[(usize, u8)], cut: usize) -> Vec<u8> {
        let mut b = seed.to_vec();
        for &(at, v) in flips {
            if !b.is_empty() {
                let n = b.len();
                b[at % n] = v;
            }
        }
        b.truncate(cut.min(b.len()));
        b
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Any bytes, and mangled valid payloads, in every encoding: an error or a valid OTLP
        /// request, never a panic.
        #[test]
        fn every_decoder_refuses_or_converts(
            raw in proptest::collection::vec(any::<u8>(), 0..300),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in 0usize..2000,
        ) {
            let seeds: [(Encoding, &[u8]); 4] = [
                (Encoding::JsonV2, V2.as_bytes()),
                (Encoding::JsonV1, br#"[{"traceId":"1","id":"2","annotations":[{"timestamp":1,"value":"cs","endpoint":{"serviceName":"a"}}],"binaryAnnotations":[{"key":"sa","value":true,"endpoint":{"serviceName":"b"}}]}]"#),
                (Encoding::Proto3, b"\x0a\x14\x0a\x08\x00\x00\x00\x00\x00\x00\x00\x07\x1a\x08\x00\x00\x00\x00\x00\x00\x00\x09"),
                (Encoding::ThriftV1, b"\x0c\x00\x00\x00\x01\x0a\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x0a\x00\x04\x00\x00\x00\x00\x00\x00\x00\x02\x00"),
            ];
            for (enc, seed) in seeds {
                for input in [raw.clone(), mutate(seed, &flips, cut)] {
                    if let Ok((otlp, n)) = to_otlp_request(enc, &input) {
                        crate::assert_valid_conversion(&otlp);
                        let req = ExportTraceServiceRequest::decode(&otlp[..]).expect("valid OTLP");
                        let spans: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
                        prop_assert_eq!(spans, n);
                    }
                }
            }
        }
    }

    #[test]
    fn seeds_are_valid() {
        assert_eq!(
            decode(
                Encoding::Proto3,
                b"\x0a\x14\x0a\x08\x00\x00\x00\x00\x00\x00\x00\x07\x1a\x08\x00\x00\x00\x00\x00\x00\x00\x09"
            )
            .unwrap()
            .len(),
            1
        );
        assert_eq!(decode(Encoding::ThriftV1, b"\x0c\x00\x00\x00\x01\x0a\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x0a\x00\x04\x00\x00\x00\x00\x00\x00\x00\x02\x00").unwrap().len(), 1);
    }
}

/// `spec/formats/vectors/zipkin.json`: each input becomes the expected OTLP (as OTLP/JSON)
/// and reads back as the expected Zipkin spans, or is refused with an error naming the problem.
#[test]
fn spec_vectors() {
    crate::vectors::run("zipkin.json", |v| {
        let enc = match v["encoding"].as_str().unwrap() {
            "json_v2" => Encoding::JsonV2,
            "json_v1" => Encoding::JsonV1,
            "proto3" => Encoding::Proto3,
            "thrift_v1" => Encoding::ThriftV1,
            e => panic!("unknown encoding {e}"),
        };
        let (otlp, _) = to_otlp_request(enc, &crate::vectors::input(v))?;
        let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
        Ok(serde_json::json!({
            "otlp": weft_otlp::json::resource_spans_to_json(&req.resource_spans),
            "zipkin": back(&req),
        }))
    });
}

mod fast_json_matches_serde {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z./_ -]{0,12}",
            "[\\u{0}-\\u{7f}]{0,6}",
            "[\\u{80}-\\u{10ffff}]{0,4}",
            Just("\"quoted\\\\back\nslash".to_owned()),
        ]
    }

    fn hex(n: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(0u8..16, 1..=n).prop_map(|v| v.iter().map(|d| format!("{d:x}")).collect())
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            text().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            // Exact binary fractions: serde_json reads them back exactly (it may be off by one
            // ulp on others, where the fast reader keeps the text as sent).
            (0u32..4_000_000).prop_map(|n| Value::from(f64::from(n) / 4.0)),
            any::<bool>().prop_map(Value::from),
            Just(Value::Null),
        ]
    }

    fn endpoint() -> impl Strategy<Value = Value> {
        (
            proptest::option::of(text()),
            proptest::option::of(prop_oneof![Just("10.0.0.1".to_owned()), Just("bad".to_owned())]),
            proptest::option::of(prop_oneof![Just("::1".to_owned()), Just("1.2.3.4".to_owned())]),
            proptest::option::of(-5i64..70000),
        )
            .prop_map(|(s, v4, v6, p)| {
                let mut m = serde_json::Map::new();
                if let Some(s) = s {
                    m.insert("serviceName".into(), s.into());
                }
                if let Some(v) = v4 {
                    m.insert("ipv4".into(), v.into());
                }
                if let Some(v) = v6 {
                    m.insert("ipv6".into(), v.into());
                }
                if let Some(p) = p {
                    m.insert("port".into(), p.into());
                }
                Value::Object(m)
            })
    }

    fn span() -> impl Strategy<Value = Value> {
        (
            (hex(32), hex(16), proptest::option::of(hex(16))),
            proptest::option::of(prop_oneof![
                Just("CLIENT"),
                Just("SERVER"),
                Just("CONSUMER"),
                Just("LOCAL")
            ]),
            proptest::option::of(text()),
            (
                proptest::option::of(0u64..u64::MAX / 2),
                proptest::option::of(0u64..1 << 40),
            ),
            (proptest::option::of(endpoint()), proptest::option::of(endpoint())),
            proptest::collection::vec((0u64..1 << 50, scalar()), 0..3),
            proptest::collection::btree_map("[a-z.]{1,8}", scalar(), 0..4),
            (proptest::option::of(any::<bool>()), proptest::option::of(scalar())),
        )
            .prop_map(|((t, i, p), k, n, (ts, d), (le, re), anns, tags, (shared, extra))| {
                let mut m = serde_json::Map::new();
                m.insert("traceId".into(), t.into());
                m.insert("id".into(), i.into());
                if let Some(p) = p {
                    m.insert("parentId".into(), p.into());
                }
                if let Some(k) = k {
                    m.insert("kind".into(), k.into());
                }
                if let Some(n) = n {
                    m.insert("name".into(), n.into());
                }
                if let Some(ts) = ts {
                    m.insert("timestamp".into(), ts.into());
                }
                if let Some(d) = d {
                    m.insert("duration".into(), d.into());
                }
                if let Some(e) = le {
                    m.insert("localEndpoint".into(), e);
                }
                if let Some(e) = re {
                    m.insert("remoteEndpoint".into(), e);
                }
                m.insert(
                    "annotations".into(),
                    Value::Array(
                        anns.into_iter()
                            .map(|(t, v)| json!({"timestamp": t, "value": v}))
                            .collect(),
                    ),
                );
                m.insert("tags".into(), Value::Object(tags.into_iter().collect()));
                if let Some(s) = shared {
                    m.insert("shared".into(), s.into());
                }
                if let Some(x) = extra {
                    m.insert("unknownField".into(), json!({"nested": [x, {"a": null}]}));
                }
                Value::Object(m)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// The hand-written reader and serde_json's agree on every generated payload: the same
        /// spans when both accept, and both refuse when either does.
        #[test]
        fn same_spans_or_both_refuse(spans in proptest::collection::vec(span(), 0..4), pretty in any::<bool>()) {
            let v = Value::Array(spans);
            let body = if pretty { serde_json::to_vec_pretty(&v).unwrap() } else { serde_json::to_vec(&v).unwrap() };
            let fast = fastjson::decode_v2(&body);
            let reference = json::decode_v2_serde(&body);
            match (&fast, &reference) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(_), Err(_)) => {}
                _ => prop_assert!(false, "fast {:?} vs serde {:?} on {}", fast, reference, String::from_utf8_lossy(&body)),
            }
        }

        /// Mangled payloads: the same verdict.
        #[test]
        fn mangled_payloads_agree(cut in 0usize..600, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
            let mut b = V2.as_bytes().to_vec();
            for (at, v) in flips {
                let n = b.len();
                b[at % n] = v;
            }
            b.truncate(cut.max(1));
            // The verdicts agree (a number's text may differ: the fast reader keeps it as sent).
            let fast = fastjson::decode_v2(&b);
            let reference = json::decode_v2_serde(&b);
            prop_assert_eq!(fast.is_ok(), reference.is_ok(), "fast {:?} vs serde {:?} on {:?}", fast, reference, String::from_utf8_lossy(&b));
        }
    }
}

mod inline_comparisons {
    use proptest::prelude::*;

    /// The old definitions, by `==` and `starts_with`.
    fn role_reference(k: &str) -> super::TagRole {
        use super::{TagRole, keys};
        match k {
            keys::SCOPE_NAME | keys::SCOPE_VERSION | keys::LIBRARY_NAME | keys::LIBRARY_VERSION => TagRole::Scope,
            keys::TRACESTATE => TagRole::TraceState,
            keys::SPAN_KIND => TagRole::SpanKind,
            keys::STATUS_CODE => TagRole::StatusCode,
            keys::STATUS_DESCRIPTION => TagRole::StatusDescription,
            keys::ERROR => TagRole::Error,
            _ if k.starts_with(keys::LINK_PREFIX) => TagRole::Link,
            _ => match k.split_once('.').map(|(ns, _)| ns) {
                Some("service") if k != keys::SERVICE_NAME => TagRole::Resource,
                Some(
                    "telemetry" | "host" | "os" | "process" | "container" | "k8s" | "cloud" | "faas" | "deployment"
                    | "device" | "webengine",
                ) => TagRole::Resource,
                Some("opencensus") if k == "opencensus.exporterversion" => TagRole::Resource,
                _ => TagRole::Attribute,
            },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        #[test]
        fn same_is_string_equality(a in "\\PC{0,20}", b in "\\PC{0,20}", copy in any::<bool>()) {
            let b = if copy { a.clone() } else { b };
            prop_assert_eq!(super::same(&a, &b), a == b);
        }

        /// Every key, including the special ones and their near misses, gets the role `==`
        /// and `starts_with` gave it.
        #[test]
        fn tag_roles_as_before(
            k in prop_oneof![
                "\\PC{0,24}",
                "(otel|otlp|w3c|span|service|telemetry|host|http|os|k8s|opencensus)\\.[a-z._é]{0,20}",
                Just("otlp.link.".to_owned()),
                Just("otlp.linké0".to_owned()),
                Just("service.name".to_owned()),
                Just("error".to_owned()),
                Just("span.kind".to_owned()),
                Just("http.status_code".to_owned()),
                Just("otel.status_code".to_owned()),
            ]
        ) {
            prop_assert!(super::tag_role(&k) == role_reference(&k), "{}", k);
        }
    }
}
