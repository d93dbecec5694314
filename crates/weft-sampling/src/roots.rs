//! Reading what adaptive sampling needs from a root span and its resource, as slices of the
//! request: the service, the operation, and the probability the span was sampled with when
//! the span says so.

use weft_otlp::request::fields::*;
use weft_otlp::wire::next_field;

/// How a root span says it was sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampled {
    /// By a ratio of the trace ID at this probability (Jaeger clients' `sampler.type =
    /// probabilistic` with `sampler.param`, or OpenTelemetry's `th` in the `ot` tracestate
    /// member, OTEP 235).
    At(f64),
    /// Not by a probability: a rate limiter, a lower bound, a constant (`sampler.type` of
    /// `ratelimiting`, `lowerbound`, `const`).
    Otherwise,
    /// The span does not say.
    Unknown,
}

/// The fields of a root span adaptive sampling reads.
#[derive(Debug, Default)]
pub struct Root<'a> {
    pub name: &'a [u8],
    pub trace_id: [u8; 16],
    trace_state: &'a [u8],
    sampler_type: &'a [u8],
    sampler_param: Option<f64>,
}

impl<'a> Root<'a> {
    /// Reads a span of a valid request (one its validation accepted).
    pub fn read(span: &'a [u8]) -> Root<'a> {
        let mut r = Root::default();
        let mut p = 0;
        while p < span.len() {
            let Ok((n, wt, v)) = next_field(span, &mut p) else {
                break;
            };
            match (n, wt) {
                (SPAN_TRACE_ID, 2) if v.len() == 16 => r.trace_id.copy_from_slice(&span[v]),
                (SPAN_NAME, 2) => r.name = &span[v],
                (SPAN_TRACE_STATE, 2) => r.trace_state = &span[v],
                (SPAN_ATTRIBUTES, 2) => {
                    let kv = &span[v];
                    match key_of(kv) {
                        Some(b"sampler.type") => r.sampler_type = string_value(kv).unwrap_or_default(),
                        Some(b"sampler.param") => r.sampler_param = number_value(kv),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        r
    }

    /// How the span says it was sampled.
    pub fn sampled(&self) -> Sampled {
        match self.sampler_type {
            b"probabilistic" => {
                return match self.sampler_param {
                    Some(p) if p > 0.0 && p <= 1.0 => Sampled::At(p),
                    _ => Sampled::Unknown,
                };
            }
            b"ratelimiting" | b"lowerbound" | b"const" => return Sampled::Otherwise,
            _ => {}
        }
        match threshold(self.trace_state) {
            Some(t) => Sampled::At((THRESHOLD_ONE - t) as f64 / THRESHOLD_ONE as f64),
            None => Sampled::Unknown,
        }
    }

    /// Whether a ratio sampler at `p` samples this trace, by the rule of any of the
    /// OpenTelemetry SDKs (they differ: Go's and Rust's and weft's, `spec/sampling.md`;
    /// Java's absolute value of the signed low half; Python's low half against `p × 2^64`).
    pub fn ratio_samples(&self, p: f64) -> bool {
        if p >= 1.0 {
            return true;
        }
        if p <= 0.0 || p.is_nan() {
            return false;
        }
        let low = u64::from_be_bytes(self.trace_id[8..].try_into().expect("8 bytes"));
        let go = (low >> 1) < (p * 9_223_372_036_854_775_808.0) as u64;
        let java = (low as i64).unsigned_abs() < (p * i64::MAX as f64) as u64;
        let python = (low as f64) < (p * 18_446_744_073_709_551_616.0).round();
        go || java || python
    }
}

/// `2^56`: a rejection threshold of 0 keeps everything.
const THRESHOLD_ONE: u64 = 1 << 56;

/// The `th` sub-key of the `ot` tracestate member, as a 56-bit rejection threshold.
fn threshold(state: &[u8]) -> Option<u64> {
    let state = std::str::from_utf8(state).ok()?;
    let ot = state.split(',').map(str::trim).find_map(|m| m.strip_prefix("ot="))?;
    let th = ot.split(';').find_map(|kv| kv.strip_prefix("th:"))?;
    if th.is_empty() || th.len() > 14 || !th.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let t = u64::from_str_radix(th, 16).ok()?;
    Some(t << (4 * (14 - th.len())))
}

/// The `service.name` of a `ResourceSpans` (empty when it has none).
pub fn service_name(resource_spans: &[u8]) -> &[u8] {
    let mut p = 0;
    while p < resource_spans.len() {
        let Ok((n, wt, v)) = next_field(resource_spans, &mut p) else {
            break;
        };
        if n != RS_RESOURCE || wt != 2 {
            continue;
        }
        let res = &resource_spans[v];
        let mut q = 0;
        while q < res.len() {
            let Ok((n, wt, kv)) = next_field(res, &mut q) else {
                break;
            };
            if n == RESOURCE_ATTRIBUTES && wt == 2 && key_of(&res[kv.clone()]) == Some(b"service.name") {
                return string_value(&res[kv]).unwrap_or_default();
            }
        }
    }
    b""
}

/// The first length-delimited field `number` of a message.
fn bytes_field(msg: &[u8], number: u32) -> Option<&[u8]> {
    let mut p = 0;
    while p < msg.len() {
        let (n, wt, v) = next_field(msg, &mut p).ok()?;
        if n == number && wt == 2 {
            return Some(&msg[v]);
        }
    }
    None
}

/// A `KeyValue`'s key.
fn key_of(kv: &[u8]) -> Option<&[u8]> {
    bytes_field(kv, KV_KEY)
}

/// A `KeyValue`'s value: its `AnyValue` message.
fn value_of(kv: &[u8]) -> Option<&[u8]> {
    bytes_field(kv, KV_VALUE)
}

fn string_value(kv: &[u8]) -> Option<&[u8]> {
    bytes_field(value_of(kv)?, ANY_STRING)
}

/// A number attribute: a double (Jaeger's `sampler.param` for a probability), an integer, or
/// a string holding a number.
fn number_value(kv: &[u8]) -> Option<f64> {
    let any = value_of(kv)?;
    let mut p = 0;
    while p < any.len() {
        let (n, wt, v) = next_field(any, &mut p).ok()?;
        match (n, wt) {
            // AnyValue.double_value = 4 (fixed64), int_value = 3 (varint), string_value = 1.
            (4, 1) => return Some(f64::from_le_bytes(any[v].try_into().ok()?)),
            (3, 0) => {
                let mut q = v.start;
                return Some(weft_otlp::wire::read_varint(any, &mut q).ok()? as i64 as f64);
            }
            (1, 2) => return std::str::from_utf8(&any[v]).ok()?.parse().ok(),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};
    use weft_otlp::pb::trace::Span;

    fn kv(k: &str, v: V) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
    }

    fn span(attrs: Vec<KeyValue>, state: &str, low: u64) -> Vec<u8> {
        let mut trace_id = vec![1u8; 8];
        trace_id.extend_from_slice(&low.to_be_bytes());
        Span {
            trace_id: trace_id.into(),
            span_id: vec![2; 8].into(),
            trace_state: state.into(),
            name: "GET /".into(),
            attributes: attrs,
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn jaeger_tags_and_thresholds_say_the_probability() {
        let b = span(
            vec![
                kv("sampler.type", V::StringValue("probabilistic".into())),
                kv("sampler.param", V::DoubleValue(0.25)),
            ],
            "",
            0,
        );
        let r = Root::read(&b);
        assert_eq!(r.name, b"GET /");
        assert_eq!(r.sampled(), Sampled::At(0.25));
        let b = span(vec![kv("sampler.type", V::StringValue("lowerbound".into()))], "", 0);
        assert_eq!(Root::read(&b).sampled(), Sampled::Otherwise);
        // th:c = 0xc0000000000000: keeps a quarter.
        let b = span(vec![], "vendor=x,ot=rv:1234;th:c", 0);
        assert_eq!(Root::read(&b).sampled(), Sampled::At(0.25));
        assert_eq!(Root::read(&span(vec![], "ot=th:0", 0)).sampled(), Sampled::At(1.0));
        assert_eq!(Root::read(&span(vec![], "ot=th:xyz", 0)).sampled(), Sampled::Unknown);
        let b = span(vec![kv("sampler.param", V::StringValue("0.5".into()))], "", 0);
        assert_eq!(Root::read(&b).sampler_param, Some(0.5));
        let b = span(vec![kv("sampler.param", V::IntValue(1))], "", 0);
        assert_eq!(Root::read(&b).sampler_param, Some(1.0));
    }

    #[test]
    fn ratio_rule_of_any_sdk_classifies() {
        // Go's rule at 0.5: low64 >> 1 < 2^62.
        assert!(Root::read(&span(vec![], "", 0x7fff_ffff_ffff_ffff)).ratio_samples(0.5));
        let high = span(vec![], "", 0xc000_0000_0000_0001);
        let high = Root::read(&high);
        // Only Java's rule samples it: |signed| = 2^62 − 1 < (long)(0.5 × Long.MAX_VALUE).
        assert!(high.ratio_samples(0.5));
        assert!(!Root::read(&span(vec![], "", 0xa000_0000_0000_0000)).ratio_samples(0.5));
        assert!(!high.ratio_samples(0.0));
        assert!(high.ratio_samples(1.0));
    }

    #[test]
    fn service_name_is_read_from_the_resource() {
        use weft_otlp::pb::resource::Resource;
        use weft_otlp::pb::trace::ResourceSpans;
        let rs = ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("host.name", V::StringValue("h".into())),
                    kv("service.name", V::StringValue("checkout".into())),
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(service_name(&rs), b"checkout");
        assert_eq!(service_name(&ResourceSpans::default().encode_to_vec()), b"");
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the bytes, reading a root, its sampling and its service never panics.
        #[test]
        fn any_bytes_read_without_panicking(span in proptest::collection::vec(any::<u8>(), 0..256), p in any::<f64>()) {
            let r = Root::read(&span);
            let _ = r.sampled();
            let _ = r.ratio_samples(p);
            let _ = service_name(&span);
        }

        /// Strategies files and gRPC parameters from anywhere are refused with an error, never a panic.
        #[test]
        fn any_input_parses_or_is_refused(text in ".{0,200}", bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = crate::Strategies::parse(&text);
            let _ = crate::strategy::decode_parameters(&bytes);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                let _ = crate::Count::from_json(&v);
            }
        }
    }
}
