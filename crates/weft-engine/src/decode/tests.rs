use super::*;
use prost::Message;
use weft_block::columns::SpanColumns;
use weft_otlp::pb::collector::ExportTraceServiceRequest;
use weft_otlp::pb::common::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value};
use weft_otlp::pb::resource::Resource;
use weft_otlp::pb::trace::{ResourceSpans, ScopeSpans, Span as PbSpan, Status as PbStatus, span};

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

/// One request through the real ingest decoding (scan, then head columns), one row back.
fn stored(span: PbSpan) -> SpanRow {
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", s("checkout")),
                    kv("host.cpus", any_value::Value::IntValue(8)),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "io.weft.test".into(),
                    version: "1.2.3".into(),
                    attributes: vec![kv("lib.flavor", s("sync"))],
                    ..Default::default()
                }),
                spans: vec![span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let bytes = req.encode_to_vec();
    let mut summary = weft_otlp::request::RequestSummary::default();
    weft_otlp::request::validate_request(&bytes, &mut summary).unwrap();
    let mut cols = SpanColumns::default();
    cols.push_request(&bytes).unwrap();
    cols.row(0)
}

#[test]
fn every_field_and_value_type_decodes() {
    let array = any_value::Value::ArrayValue(ArrayValue {
        values: vec![
            AnyValue { value: Some(s("a")) },
            AnyValue {
                value: Some(any_value::Value::IntValue(2)),
            },
        ],
    });
    let kvlist = any_value::Value::KvlistValue(KeyValueList {
        values: vec![kv("inner", s("x"))],
    });
    let row = stored(PbSpan {
        trace_id: vec![1; 16].into(),
        span_id: vec![2; 8].into(),
        parent_span_id: vec![3; 8].into(),
        name: "POST /pay".into(),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: 1_000,
        end_time_unix_nano: 1_500,
        attributes: vec![
            kv("http.route", s("/pay")),
            kv("retry", any_value::Value::BoolValue(true)),
            kv("http.status_code", any_value::Value::IntValue(-503)),
            kv("ratio", any_value::Value::DoubleValue(0.25)),
            kv("tags", array),
            kv("nested", kvlist),
            kv("raw", any_value::Value::BytesValue(vec![0xff].into())),
        ],
        events: vec![span::Event {
            time_unix_nano: 1_200,
            name: "exception".into(),
            attributes: vec![kv("exception.type", s("Timeout"))],
            ..Default::default()
        }],
        links: vec![span::Link {
            trace_id: vec![9; 16].into(),
            span_id: vec![8; 8].into(),
            attributes: vec![kv("link.kind", s("follows"))],
            ..Default::default()
        }],
        status: Some(PbStatus {
            message: "card declined".into(),
            code: 2,
        }),
        ..Default::default()
    });
    let span = decode(&row);
    assert_eq!(span.trace_id, [1; 16]);
    assert_eq!(span.span_id, [2; 8]);
    assert_eq!(span.parent_span_id, Some([3; 8]));
    assert_eq!(span.name, "POST /pay");
    assert_eq!(span.kind, Kind::Server);
    assert_eq!(span.status, Status::Error);
    assert_eq!(span.status_message, "card declined");
    assert_eq!((span.start_unix_nano, span.duration_nano), (1_000, 500));
    assert_eq!(
        span.span_attrs,
        vec![
            ("http.route".to_string(), Value::Str("/pay".into())),
            ("retry".to_string(), Value::Bool(true)),
            ("http.status_code".to_string(), Value::Int(-503)),
            ("ratio".to_string(), Value::Float(0.25)),
            (
                "tags".to_string(),
                Value::Array(vec![Value::Str("a".into()), Value::Int(2)])
            ),
            ("nested".to_string(), Value::Nil),
            ("raw".to_string(), Value::Nil),
        ]
    );
    assert_eq!(
        span.resource_attrs,
        vec![
            ("service.name".to_string(), Value::Str("checkout".into())),
            ("host.cpus".to_string(), Value::Int(8)),
        ]
    );
    assert_eq!(
        (span.scope_name.as_str(), span.scope_version.as_str()),
        ("io.weft.test", "1.2.3")
    );
    assert_eq!(
        span.scope_attrs,
        vec![("lib.flavor".to_string(), Value::Str("sync".into()))]
    );
    assert_eq!(span.events.len(), 1);
    assert_eq!(span.events[0].name, "exception");
    assert_eq!(span.events[0].time_unix_nano, 1_200);
    assert_eq!(
        span.events[0].attrs,
        vec![("exception.type".to_string(), Value::Str("Timeout".into()))]
    );
    assert_eq!(span.links.len(), 1);
    assert_eq!((span.links[0].trace_id, span.links[0].span_id), ([9; 16], [8; 8]));
    assert_eq!(
        span.links[0].attrs,
        vec![("link.kind".to_string(), Value::Str("follows".into()))]
    );
    // The keys alone, without decoding values.
    let keys = |of: KeysOf, bytes: &[u8]| {
        let mut out = Vec::new();
        each_attribute_key(of, bytes, |k| out.push(String::from_utf8_lossy(k).into_owned()));
        out
    };
    let names = |attrs: &[(String, Value)]| attrs.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(KeysOf::Span, &row.attributes), names(&span.span_attrs));
    assert!(keys(KeysOf::Span, &row.attributes).len() >= 5);
    assert_eq!(keys(KeysOf::Resource, &row.resource), names(&span.resource_attrs));
    assert_eq!(keys(KeysOf::Scope, &row.scope), ["lib.flavor"]);
    assert_eq!(keys(KeysOf::Events, &row.events), ["exception.type"]);
    assert_eq!(keys(KeysOf::Links, &row.links), ["link.kind"]);
}

#[test]
fn root_span_without_status_or_lists() {
    let span = decode(&stored(PbSpan {
        trace_id: vec![1; 16].into(),
        span_id: vec![2; 8].into(),
        name: "root".into(),
        kind: 42,
        start_time_unix_nano: 5,
        end_time_unix_nano: 5,
        ..Default::default()
    }));
    assert_eq!(span.parent_span_id, None);
    assert_eq!(span.kind, Kind::Unspecified);
    assert_eq!(span.status, Status::Unset);
    assert!(span.span_attrs.is_empty() && span.events.is_empty() && span.links.is_empty());
}

#[test]
fn a_stored_span_answers_traceql() {
    let span = decode(&stored(PbSpan {
        trace_id: vec![1; 16].into(),
        span_id: vec![2; 8].into(),
        name: "GET /cart".into(),
        start_time_unix_nano: 0,
        end_time_unix_nano: 2_000_000_000,
        attributes: vec![kv("http.status_code", any_value::Value::IntValue(500))],
        ..Default::default()
    }));
    let trace = weft_traceql::Trace { spans: vec![span] };
    let hits = |q: &str| {
        weft_traceql::eval(&weft_traceql::parse(q).unwrap(), &trace)
            .unwrap()
            .len()
    };
    assert_eq!(
        hits(r#"{ resource.service.name = "checkout" && span.http.status_code >= 500 }"#),
        1
    );
    assert_eq!(
        hits(r#"{ .http.status_code = 500 && duration > 1s && instrumentation:name = "io.weft.test" }"#),
        1
    );
    assert_eq!(hits(r#"{ resource.service.name = "cart" }"#), 0);
}

#[test]
fn a_query_decodes_the_attributes_it_names_and_answers_as_with_all() {
    let row = stored(PbSpan {
        trace_id: vec![1; 16].into(),
        span_id: vec![2; 8].into(),
        name: "GET /cart".into(),
        start_time_unix_nano: 0,
        end_time_unix_nano: 2_000_000_000,
        attributes: vec![
            kv("http.status_code", any_value::Value::IntValue(500)),
            kv("http.route", s("/cart")),
            kv("user.id", s("u-42")),
            kv("host.cpus", any_value::Value::IntValue(4)),
        ],
        ..Default::default()
    });
    let keys = |span: &Span| {
        let mut k: Vec<String> = span.span_attrs.iter().map(|(k, _)| format!("span.{k}")).collect();
        k.extend(span.resource_attrs.iter().map(|(k, _)| format!("resource.{k}")));
        k
    };
    let parts = |q: &str| Parts::of(&weft_traceql::parse(q).unwrap());
    // Only what the query names; an unscoped name and `rootServiceName` read both scopes.
    let only = decode_parts(&row, parts("{ span.http.status_code = 500 }"));
    assert_eq!(keys(&only), ["span.http.status_code"]);
    let only = decode_parts(&row, parts(r#"{ .host.cpus = 4 } | by(resource.service.name)"#));
    assert_eq!(
        keys(&only),
        ["span.host.cpus", "resource.service.name", "resource.host.cpus"]
    );
    let only = decode_parts(&row, parts(r#"{ rootServiceName = "checkout" }"#));
    assert_eq!(keys(&only), ["resource.service.name"]);
    // A search's hits show each span's service.
    let search = decode_parts(
        &row,
        parts("{ span.user.id = \"u-42\" }").with_resource_key("service.name"),
    );
    assert_eq!(keys(&search), ["span.user.id", "resource.service.name"]);
    // compare() counts every attribute, and so does a query naming more keys than a list holds.
    assert_eq!(parts("{ } | compare({ status = error })").keys, None);
    assert_eq!(
        parts("{ .a=1 && .b=1 && .c=1 && .d=1 && .e=1 && .f=1 && .g=1 && .h=1 && .i=1 }").keys,
        None
    );
    assert!(
        parts("{ .a=1 && .b=1 && .c=1 && .d=1 && .e=1 && .f=1 && .g=1 && .h=1 }")
            .keys
            .is_some()
    );
    // Decoding less never changes an answer.
    let all = weft_traceql::Trace {
        spans: vec![decode(&row)],
    };
    for q in [
        "{ span.http.status_code = 500 }",
        r#"{ .http.route = "/cart" && resource.service.name = "checkout" }"#,
        r#"{ span.user.id != "u-42" }"#,
        "{ span.missing = nil }",
        "{ } | by(span.http.route) | count() > 0",
        r#"{ resource.host.cpus = 8 } | select(span.user.id)"#,
    ] {
        let query = weft_traceql::parse(q).unwrap();
        let some = weft_traceql::Trace {
            spans: vec![decode_parts(&row, Parts::of(&query))],
        };
        assert_eq!(
            weft_traceql::eval(&query, &some).unwrap(),
            weft_traceql::eval(&query, &all).unwrap(),
            "{q}"
        );
    }
}

#[test]
fn key_prints_tell_keys_apart_by_length_and_ends() {
    let mut k = Keys::default();
    for key in ["a", "http.status_code", "http.request.method", "service.name"] {
        assert!(k.add(key));
    }
    for key in ["a", "http.status_code", "http.request.method", "service.name"] {
        assert!(k.holds(key.as_bytes()), "{key}");
    }
    for key in [
        "",
        "b",
        "aa",
        "http.status_codes",
        "http.status_cade",
        "service.names",
        "http.response.method",
    ] {
        assert!(!k.holds(key.as_bytes()), "{key}");
    }
    let mut full = Keys::default();
    for i in 0..Keys::MAX {
        assert!(full.add(&format!("key{i}")));
    }
    assert!(full.add("key0"), "a key already held fits");
    assert!(!full.add("one.more"));
}

proptest::proptest! {
    /// Corrupt stored bytes never panic the decoder.
    #[test]
    fn arbitrary_bytes_never_panic(
        a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
    ) {
        let row = SpanRow {
            trace_id: [0; 16],
            span_id: [0; 8],
            parent_span_id: [0; 8],
            name: String::new(),
            kind: 0,
            start_unix_nano: 0,
            duration_nano: 0,
            status_code: 0,
            status_message: String::new(),
            resource: a.clone().into(),
            scope: b.clone().into(),
            attributes: a.clone().into(),
            events: b.clone().into(),
            links: a.into(),
            extra: b.into(),
        };
        let span = decode(&row);
        // The keys read without values are the decoded attributes' keys, whatever the bytes.
        let keys = |of: KeysOf, bytes: &[u8]| {
            let mut out = Vec::new();
            each_attribute_key(of, bytes, |k| out.push(String::from_utf8_lossy(k).into_owned()));
            out
        };
        let names = |attrs: &[(String, weft_traceql::Value)]| attrs.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        proptest::prop_assert_eq!(keys(KeysOf::Span, &row.attributes), names(&span.span_attrs));
        proptest::prop_assert_eq!(keys(KeysOf::Resource, &row.resource), names(&span.resource_attrs));
        proptest::prop_assert_eq!(keys(KeysOf::Scope, &row.scope), names(&span.scope_attrs));
        let events: Vec<String> = span.events.iter().flat_map(|e| names(&e.attrs)).collect();
        proptest::prop_assert_eq!(keys(KeysOf::Events, &row.events), events);
        let links: Vec<String> = span.links.iter().flat_map(|l| names(&l.attrs)).collect();
        proptest::prop_assert_eq!(keys(KeysOf::Links, &row.links), links);
    }
}

/// `each_span_attribute` and `is_scalar` give what `key_values` decodes, without decoding:
/// the same keys in order, values that decode alike, and "scalar" exactly where the value is
/// neither nil nor an array. Blobs are raw bytes with odd shapes: repeated keys and values in
/// one `KeyValue`, no key, no value, arrays, kvlists, bytes, wrong wire types, truncation.
#[test]
fn raw_span_attributes_match_the_decoder() {
    use proptest::prelude::*;
    fn field(out: &mut Vec<u8>, number: u32, wire: u8, payload: &[u8]) {
        out.push((number << 3) as u8 | wire);
        if wire == 2 {
            out.push(payload.len() as u8);
        }
        out.extend_from_slice(payload);
    }
    let any_value = prop_oneof![
        Just((1u32, 2u8, b"ab".to_vec())),
        Just((2, 0, vec![1])),
        Just((3, 0, vec![7])),
        Just((4, 1, 2.5f64.to_le_bytes().to_vec())),
        Just((5, 2, vec![0x0a, 0x02, 0x08, 0x01])),
        Just((6, 2, vec![])),
        Just((7, 2, b"zz".to_vec())),
        Just((1, 0, vec![3])),
        Just((3, 2, b"x".to_vec())),
    ];
    let encoded_value = proptest::collection::vec(any_value, 0..3).prop_map(|fields| {
        let mut v = Vec::new();
        for (n, w, p) in fields {
            field(&mut v, n, w, &p);
        }
        v
    });
    let kv = proptest::collection::vec(
        prop_oneof![
            prop_oneof![Just(b"k".to_vec()), Just(b"j".to_vec()), Just(vec![0xff])].prop_map(|k| (1u32, k)),
            encoded_value.prop_map(|v| (2u32, v)),
        ],
        0..4,
    )
    .prop_map(|fields| {
        let mut v = Vec::new();
        for (n, p) in fields {
            field(&mut v, n, 2, &p);
        }
        v
    });
    let blob = (proptest::collection::vec(kv, 0..4), 0..3usize).prop_map(|(kvs, cut)| {
        let mut b = Vec::new();
        for kv in kvs {
            field(&mut b, SPAN_ATTRIBUTES, 2, &kv);
        }
        b.truncate(b.len().saturating_sub(cut));
        b
    });
    proptest!(|(b in blob)| {
        let want = key_values_of(&b, SPAN_ATTRIBUTES, None);
        let mut got = Vec::new();
        each_span_attribute(&b, |k, v| got.push((text(k), value(v), is_scalar(v))));
        prop_assert_eq!(got.len(), want.len());
        for ((k, v, scalar), (wk, wv)) in got.iter().zip(&want) {
            prop_assert_eq!(k, wk);
            prop_assert_eq!(v, wv);
            prop_assert_eq!(*scalar, !matches!(wv, Value::Nil | Value::Array(_)));
        }
    });
}
