//! Property tests: parse/format round trips for every header format, no panic on any input
//! (through the same bodies the cargo-fuzz targets run), and OTLP encodings that decode with the
//! official `opentelemetry-proto` types.

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use proptest::prelude::*;
use prost::Message;
use weft_sdk::baggage::Baggage;
use weft_sdk::context::{FullSpanContext, SpanContext};
use weft_sdk::id::{SpanId, TraceId};
use weft_sdk::propagation::{
    B3Encoding, B3Propagator, BaggagePropagator, HeaderVec, JaegerPropagator, PropagatedContext, Propagator,
    TraceContextPropagator, XrayPropagator, traceparent,
};
use weft_sdk::trace::SpanData;
use weft_sdk::tracestate::TraceState;

fn span_context() -> impl Strategy<Value = SpanContext> {
    (1u128.., 1u64.., any::<u8>())
        .prop_map(|(t, s, f)| SpanContext::new(TraceId::from(t), SpanId::from(s), f & 0x03, true))
}

fn ts_key() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_*/@-]{0,20}"
}

fn ts_value() -> impl Strategy<Value = String> {
    // 0x20–0x7E except ',' and '=', not ending in a space, not starting with space (OWS is
    // trimmed from the whole member on parse).
    "[!-+\\--<>-~]([ !-+\\--<>-~]{0,30}[!-+\\--<>-~])?"
}

fn trace_state() -> impl Strategy<Value = TraceState> {
    proptest::collection::btree_map(ts_key(), ts_value(), 0..8).prop_map(|m| {
        TraceState::from_members(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))).expect("generated state is valid")
    })
}

/// Fuzz-style inputs: random bytes, and strings built from the characters the grammars use.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        "[0-9a-fA-F\\-:;=,%+ \\t.Rr@_*/?]{0,120}".prop_map(String::into_bytes),
        "(Root|Parent|Sampled|Lineage|Self)=[0-9a-f\\-?]{0,40}(;(Root|Parent|Sampled|Lineage)=[0-9a-f\\-?]{0,40}){0,4}"
            .prop_map(String::into_bytes),
        "[0-9a-f]{1,34}[-:][0-9a-f]{1,17}([-:][0-9a-fd]{0,17}){0,3}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn traceparent_round_trips(sc in span_context()) {
        let mut buf = [0u8; traceparent::LEN];
        let s = traceparent::format(&sc, &mut buf).to_owned();
        prop_assert_eq!(traceparent::parse_str(&s), Some(sc));
        prop_assert_eq!(traceparent::parse_str(&format!(" \t{s}\t ")), Some(sc));
    }

    #[test]
    fn traceparent_rejects_any_single_corruption(sc in span_context(), pos in 0usize..55, b in any::<u8>()) {
        let mut buf = [0u8; traceparent::LEN];
        let s = traceparent::format(&sc, &mut buf).as_bytes().to_vec();
        let mut bad = s.clone();
        bad[pos] = b;
        if let Some(parsed) = traceparent::parse(&bad) {
            // Only the unchanged value, or another lowercase hex digit in a hex position, parses.
            let lower_hex = bad[pos].is_ascii_digit() || (b'a'..=b'f').contains(&bad[pos]);
            prop_assert!((bad == s && parsed == sc) || lower_hex);
        }
    }

    #[test]
    fn tracestate_round_trips(ts in trace_state()) {
        prop_assert_eq!(TraceState::parse_str(ts.as_str()), Ok(ts.clone()));
        let header = ts.header_value();
        prop_assert!(header.len() <= 512);
    }

    #[test]
    fn tracecontext_extract_inject_round_trips(sc in span_context(), ts in trace_state()) {
        let p = TraceContextPropagator::new();
        let full = FullSpanContext::new(sc, ts);
        let mut out = HeaderVec::new();
        p.inject(&PropagatedContext { span: Some(full.clone()), baggage: Baggage::new() }, &mut out);
        let mut cx = PropagatedContext::default();
        p.extract(&out, &mut cx);
        prop_assert_eq!(cx.span, Some(full));
    }

    #[test]
    fn b3_xray_jaeger_round_trip(sc in span_context(), debug in any::<bool>(), lineage in proptest::option::of("[a-f0-9]{8}:[0-9]{1,2}")) {
        let sampled_only = SpanContext { trace_flags: sc.trace_flags & 0x01, ..sc };
        for (p, full) in [
            (Box::new(B3Propagator::new(B3Encoding::Single)) as Box<dyn Propagator>, FullSpanContext { b3_debug: debug, ..FullSpanContext::new(sampled_only, TraceState::EMPTY) }),
            (Box::new(B3Propagator::new(B3Encoding::Multi)), FullSpanContext { b3_debug: debug, ..FullSpanContext::new(sampled_only, TraceState::EMPTY) }),
            (Box::new(XrayPropagator::new()), FullSpanContext { xray_lineage: lineage.clone(), ..FullSpanContext::new(sampled_only, TraceState::EMPTY) }),
            (Box::new(JaegerPropagator::new()), FullSpanContext { jaeger_debug: debug, ..FullSpanContext::new(sampled_only, TraceState::EMPTY) }),
        ] {
            let mut out = HeaderVec::new();
            p.inject(&PropagatedContext { span: Some(full.clone()), baggage: Baggage::new() }, &mut out);
            let mut cx = PropagatedContext::default();
            p.extract(&out, &mut cx);
            let mut want = full.clone();
            // Debug implies sampled on the wire.
            if want.b3_debug || want.jaeger_debug {
                want.context.trace_flags = 1;
            }
            prop_assert_eq!(cx.span, Some(want));
        }
    }

    #[test]
    fn baggage_round_trips(entries in proptest::collection::btree_map("[A-Za-z0-9!#$&'*+.^_`|~-]{1,12}", "\\PC{0,20}", 0..10)) {
        let mut b = Baggage::new();
        for (k, v) in &entries {
            b.insert(k.clone(), v.trim_matches([' ', '\t']).to_owned(), "");
        }
        let p = BaggagePropagator::new();
        let mut out = HeaderVec::new();
        p.inject(&PropagatedContext { span: None, baggage: b.clone() }, &mut out);
        let mut cx = PropagatedContext::default();
        p.extract(&out, &mut cx);
        prop_assert_eq!(cx.baggage, b);
    }

    #[test]
    fn no_decoder_panics_on_any_input(data in header_bytes()) {
        for (_, body) in weft_sdk::fuzz::ALL {
            body(&data);
        }
    }

    #[test]
    fn otlp_encoding_decodes_with_opentelemetry_proto(
        spans in proptest::collection::vec(
            (1u128.., 1u64.., any::<u64>(), "\\PC{0,16}", proptest::collection::vec(("[a-z.]{1,8}", any::<i64>(), "\\PC{0,12}", any::<f64>(), any::<bool>()), 0..6), 0u32..3),
            1..6,
        )
    ) {
        let mut data = Vec::new();
        for (t, s, parent, name, attrs, scope) in &spans {
            let mut d: SpanData = SpanData::new(TraceId::from(*t), SpanId::from(*s), name.clone());
            d.parent_span_id = SpanId::from(*parent);
            d.kind = SpanKind::Client;
            d.start_time_unix_nano = *parent;
            d.end_time_unix_nano = parent.saturating_add(1);
            d.scope = *scope;
            d.status = if attrs.len() % 2 == 0 { Status::Ok } else { Status::error(name.clone()) };
            for (k, i, st, f, b) in attrs {
                d.attributes.push(KeyValue::new(k.clone(), *i));
                d.attributes.push(KeyValue::new(k.clone(), st.clone()));
                d.attributes.push(KeyValue::new(k.clone(), *f));
                d.attributes.push(KeyValue::new(k.clone(), *b));
            }
            data.push(d);
        }
        let scopes: Vec<_> = (0..3).map(|i| opentelemetry::InstrumentationScope::builder(format!("s{i}")).build()).collect();
        let mut buf = Vec::new();
        weft_sdk::otlp::Encoder::new().encode(&mut buf, &weft_sdk::Resource::new("p"), &scopes, &data);
        let req = ExportTraceServiceRequest::decode(buf.as_slice()).expect("decodes");
        let decoded: Vec<_> = req.resource_spans[0].scope_spans.iter().flat_map(|ss| ss.spans.iter().map(move |s| (ss.scope.as_ref().unwrap().name.clone(), s))).collect();
        prop_assert_eq!(decoded.len(), data.len());
        for d in &data {
            let (scope, s) = decoded.iter().find(|(_, s)| s.span_id == d.span_id.to_bytes() && s.trace_id == d.trace_id.to_bytes()).expect("span present");
            prop_assert_eq!(scope, &format!("s{}", d.scope));
            prop_assert_eq!(&s.name, &d.name.to_string());
            prop_assert_eq!(s.attributes.len(), d.attributes.len());
            for (pa, da) in s.attributes.iter().zip(&d.attributes) {
                prop_assert_eq!(&pa.key, &da.key.to_string());
                let v = pa.value.as_ref().unwrap().value.as_ref().unwrap();
                match (v, &da.value) {
                    (any_value::Value::IntValue(a), Value::I64(b)) => prop_assert_eq!(a, b),
                    (any_value::Value::StringValue(a), Value::String(b)) => prop_assert_eq!(a.as_str(), b.as_str()),
                    (any_value::Value::DoubleValue(a), Value::F64(b)) => prop_assert!(a.to_bits() == b.to_bits()),
                    (any_value::Value::BoolValue(a), Value::Bool(b)) => prop_assert_eq!(a, b),
                    (a, b) => prop_assert!(false, "value mismatch {:?} vs {:?}", a, b),
                }
            }
        }
        prop_assert_eq!(buf.len(), req.encoded_len(), "minimal encoding: prost re-encodes to the same length");
    }
}
