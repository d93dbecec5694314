use super::*;
use prost::Message;
use weft_otlp::pb::common::{AnyValue, KeyValue, any_value::Value as V};

fn kv(k: &str, v: V) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

/// A span's attributes blob: repeated field 9.
fn blob(kvs: &[KeyValue]) -> Vec<u8> {
    let mut out = Vec::new();
    for kv in kvs {
        put_bytes(&mut out, SPAN_ATTRIBUTES, &kv.encode_to_vec());
    }
    out
}

fn decode(blob: &[u8]) -> Vec<KeyValue> {
    let mut out = Vec::new();
    each_key_value(blob, |kv| out.push(KeyValue::decode(kv).unwrap()));
    out
}

fn sorted(mut v: Vec<KeyValue>) -> Vec<KeyValue> {
    v.sort_by(|a, b| {
        a.key
            .cmp(&b.key)
            .then_with(|| format!("{:?}", a.value).cmp(&format!("{:?}", b.value)))
    });
    v
}

#[test]
fn split_then_append_reproduces_the_attributes() {
    let attrs = vec![
        kv("http.method", V::StringValue("GET".into())),
        kv("http.status_code", V::IntValue(-404)),
        kv("ratio", V::DoubleValue(0.25)),
        kv("ok", V::BoolValue(true)),
        kv("user.id", V::StringValue("u-1".into())),
        // The wrong type for its column: stays generic.
        kv("retries", V::StringValue("three".into())),
        // Repeated key: both stay generic, in order.
        kv("dup", V::IntValue(1)),
        kv("dup", V::IntValue(2)),
        kv("list", V::ArrayValue(Default::default())),
    ];
    let b = blob(&attrs);
    let keys: Vec<(&[u8], ValueType)> = vec![
        (b"http.method", ValueType::String),
        (b"http.status_code", ValueType::Int),
        (b"ratio", ValueType::Double),
        (b"ok", ValueType::Bool),
        (b"retries", ValueType::Int),
        (b"dup", ValueType::Int),
        (b"absent", ValueType::String),
    ];
    let mut rest = Vec::new();
    let mut left = vec![false; keys.len()];
    let mut vals = vec![None; keys.len()];
    Splitter::new(&keys).split(&b, &mut rest, &mut left, &mut vals);
    // `retries` (wrong type) and `dup` (repeated) stay in the blob; the others moved or absent.
    assert_eq!(left, [false, false, false, false, true, true, false]);
    assert_eq!(
        vals,
        vec![
            Some(Scalar::Str(b"GET")),
            Some(Scalar::Int(-404)),
            Some(Scalar::Double(0.25)),
            Some(Scalar::Bool(true)),
            None,
            None,
            None
        ]
    );
    let kept: Vec<String> = decode(&rest).into_iter().map(|k| k.key).collect();
    assert_eq!(kept, ["user.id", "retries", "dup", "dup", "list"]);
    for (v, (k, _)) in vals.iter().zip(&keys) {
        if let Some(v) = v {
            append_key_value(&mut rest, k, *v);
        }
    }
    assert_eq!(sorted(decode(&rest)), sorted(attrs.clone()));
    // The canonical encoding: exactly what prost writes for the same KeyValue.
    let mut one = Vec::new();
    append_key_value(&mut one, b"http.status_code", Scalar::Int(-404));
    assert_eq!(one, blob(&attrs[1..2]));
}

#[test]
fn choice_prefers_frequent_low_cardinality_keys() {
    let mut blobs = Vec::new();
    for i in 0..1000u32 {
        let mut attrs = vec![
            kv("http.method", V::StringValue(["GET", "POST"][i as usize % 2].into())),
            kv("http.status_code", V::IntValue(200 + i64::from(i % 3))),
            kv("user.id", V::StringValue(format!("user-{i}"))),
        ];
        if i % 200 == 0 {
            attrs.push(kv("rare", V::BoolValue(true)));
        }
        if i % 50 == 0 {
            attrs.push(kv("sometimes", V::DoubleValue(1.5)));
        }
        // Mostly ints, sometimes strings: an int column.
        attrs.push(if i % 10 == 0 {
            kv("mixed", V::StringValue("x".into()))
        } else {
            kv("mixed", V::IntValue(7))
        });
        blobs.push(blob(&attrs));
    }
    let res = {
        let mut h = Vec::new();
        let r = weft_otlp::pb::resource::Resource {
            attributes: vec![
                kv("service.name", V::StringValue("svc".into())),
                kv("host.name", V::StringValue("h1".into())),
            ],
            ..Default::default()
        };
        put_bytes(&mut h, RS_RESOURCE, &r.encode_to_vec());
        h
    };
    let cols = choose(1000, blobs.iter().map(|b| (b.as_slice(), 1)), [(res.as_slice(), 1000)]);
    let got: Vec<(DedicatedScope, &str, ValueType, &str)> = cols
        .iter()
        .map(|c| (c.scope, c.name.as_str(), c.value_type, c.column.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                DedicatedScope::Span,
                "http.method",
                ValueType::String,
                "span_dedicated_0"
            ),
            (
                DedicatedScope::Span,
                "http.status_code",
                ValueType::Int,
                "span_dedicated_1"
            ),
            (DedicatedScope::Span, "mixed", ValueType::Int, "span_dedicated_2"),
            (DedicatedScope::Span, "sometimes", ValueType::Double, "span_dedicated_3"),
            (
                DedicatedScope::Resource,
                "host.name",
                ValueType::String,
                "resource_dedicated_0"
            ),
            (
                DedicatedScope::Resource,
                "service.name",
                ValueType::String,
                "resource_dedicated_1"
            ),
        ],
        "user.id has too many values and `rare` is in under 1% of spans"
    );
    let many: Vec<Vec<u8>> = (0..30)
        .map(|k| blob(&[kv(&format!("k{k:02}"), V::IntValue(k))]))
        .collect();
    let cols = choose(30, many.iter().map(|b| (b.as_slice(), 1)), []);
    assert_eq!(cols.len(), MAX_PER_SCOPE);
}

#[test]
fn a_key_repeated_within_a_span_is_not_counted_there() {
    // "twice" occurs twice in every span: never counted, never chosen. "half" occurs twice
    // in the first 990 spans and once in the last 10: counted in 10 of 1,000 spans (1 %).
    let blobs: Vec<Vec<u8>> = (0..1000)
        .map(|i| {
            let mut attrs = vec![
                kv("twice", V::IntValue(1)),
                kv("once", V::IntValue(2)),
                kv("twice", V::IntValue(3)),
                kv("half", V::IntValue(4)),
            ];
            if i < 990 {
                attrs.push(kv("half", V::IntValue(5)));
            }
            blob(&attrs)
        })
        .collect();
    let names = |cols: Vec<DedicatedColumn>| cols.into_iter().map(|c| c.name).collect::<Vec<_>>();
    let cols = choose(1000, blobs.iter().map(|b| (b.as_slice(), 1)), []);
    assert_eq!(names(cols), vec!["once", "half"]);
    // With one span fewer counted, "half" falls under 1 %.
    let cols = choose(1001, blobs.iter().map(|b| (b.as_slice(), 1)).skip(1), []);
    assert_eq!(names(cols), vec!["once"]);
}

#[test]
fn resource_values_are_read_from_headers() {
    let mut h = Vec::new();
    let r = weft_otlp::pb::resource::Resource {
        attributes: vec![
            kv("service.name", V::StringValue("svc".into())),
            kv("pid", V::IntValue(42)),
        ],
        ..Default::default()
    };
    put_bytes(&mut h, RS_RESOURCE, &r.encode_to_vec());
    let keys: Vec<(&[u8], ValueType)> = vec![
        (b"service.name", ValueType::String),
        (b"pid", ValueType::Int),
        (b"pid", ValueType::String),
    ];
    assert_eq!(
        resource_values(&h, &keys),
        vec![Some(Scalar::Str(b"svc")), Some(Scalar::Int(42)), None]
    );
}

proptest::proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(b in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
        let keys: Vec<(&[u8], ValueType)> = vec![(b"a", ValueType::String)];
        let mut rest = Vec::new();
        Splitter::new(&keys).split(&b, &mut rest, &mut vec![false; keys.len()], &mut vec![None; keys.len()]);
        let _ = resource_values(&b, &keys);
        let _ = choose(1, [(b.as_slice(), 1)], [(b.as_slice(), 1)]);
    }
}

fn any_scalar() -> impl proptest::strategy::Strategy<Value = V> {
    use proptest::prelude::*;
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..140)
            .prop_map(|b| V::StringValue(String::from_utf8_lossy(&b).into_owned())),
        any::<bool>().prop_map(V::BoolValue),
        any::<i64>().prop_map(V::IntValue),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1),
            Just(127),
            Just(128),
            Just(i64::MIN),
            Just(i64::MAX)
        ]
        .prop_map(V::IntValue),
        any::<f64>().prop_map(V::DoubleValue),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// The fast path answers only for the layout it knows, and then as the general walk does.
    #[test]
    fn the_fast_key_value_reader_agrees_with_the_general_one(
        key in proptest::collection::vec(proptest::num::u8::ANY, 0..140),
        value in any_scalar(),
        cut in 0usize..200,
        flip in proptest::option::of((0usize..200, proptest::num::u8::ANY)),
        noise in proptest::collection::vec(proptest::num::u8::ANY, 0..24),
    ) {
        let any = AnyValue { value: Some(value) };
        let kv = KeyValue { key: String::from_utf8_lossy(&key).into_owned(), value: Some(any.clone()) };
        let good = kv.encode_to_vec();
        // The encoded key/value itself (prost leaves an empty key out: not canonical).
        let general = canonical_general(&good);
        proptest::prop_assert_eq!(general.is_some(), !kv.key.is_empty());
        match canonical_fast(&good) {
            Some(fast) => proptest::prop_assert_eq!(Some(fast), general),
            // Only longer lengths, or the empty key's other layout, take the general walk.
            None => proptest::prop_assert!(
                kv.key.is_empty() || kv.key.len() >= 0x80 || any.encoded_len() >= 0x80,
                "the usual layout was not read fast: {:?}",
                good
            ),
        }
        proptest::prop_assert_eq!(canonical_key_value(&good), general);
        // Damaged: truncated, one byte changed, or noise appended.
        let mut bad = good.clone();
        bad.truncate(cut.min(bad.len()));
        if let Some((at, b)) = flip && !good.is_empty() {
            let mut f = good.clone();
            let at = at % f.len();
            f[at] = b;
            for x in [&f, &bad] {
                if let Some(fast) = canonical_fast(x) {
                    proptest::prop_assert_eq!(Some(fast), canonical_general(x));
                }
            }
        }
        let mut long = good.clone();
        long.extend_from_slice(&noise);
        for x in [&bad, &long, &noise] {
            if let Some(fast) = canonical_fast(x) {
                proptest::prop_assert_eq!(Some(fast), canonical_general(x));
            }
            proptest::prop_assert_eq!(canonical_key_value(x), canonical_general(x));
        }
    }
}

/// The split as first written: every key compared with every column and every other key.
/// The reference for [`Splitter`].
fn split_reference<'a>(
    blob: &'a [u8],
    keys: &[(&[u8], ValueType)],
    rest: &mut Vec<u8>,
    left: &mut [bool],
) -> Vec<Option<Scalar<'a>>> {
    let mut vals = vec![None; keys.len()];
    let mut kvs = Vec::new();
    key_values(blob, false, &mut kvs);
    for &(key, value, kv) in &kvs {
        let unique = || kvs.iter().filter(|(k, _, _)| *k == key).count() == 1;
        if let Some(v) = value
            && let Some(c) = keys.iter().position(|&(k, t)| k == key && t == v.value_type())
            && unique()
        {
            vals[c] = Some(v);
            continue;
        }
        if let Some(c) = keys.iter().position(|&(k, _)| k == key) {
            left[c] = true;
        }
        put_bytes(rest, SPAN_ATTRIBUTES, kv);
    }
    vals
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// One splitter reused over many blobs splits each as the reference does: keys of equal
    /// length, repeated keys, values of the wrong type, key/values that are not canonical and
    /// damaged blobs.
    #[test]
    fn the_splitter_agrees_with_the_reference(
        blobs in proptest::collection::vec(
            (
                proptest::collection::vec((0usize..7, any_scalar(), proptest::bool::weighted(0.1)), 0..12),
                proptest::option::of(0usize..400),
            ),
            1..12,
        ),
        columns in proptest::sample::subsequence(vec![0usize, 1, 2, 3, 4, 5, 6], 0..=7),
        types in proptest::collection::vec(0usize..4, 7),
    ) {
        // Names 1 and 2 share a length, as do 3 and 4; 6 is longer than the splitter's
        // length table and 5 is empty.
        let long = "k".repeat(70);
        let names: [&str; 7] = ["a", "bb", "cc", "http.method", "http.status", "", &long];
        let keys: Vec<(&[u8], ValueType)> =
            columns.iter().map(|&c| (names[c].as_bytes(), TYPES[types[c]])).collect();
        let encoded: Vec<Vec<u8>> = blobs
            .iter()
            .map(|(kvs, cut)| {
                let mut b = Vec::new();
                for (name, value, odd) in kvs {
                    let mut kv = kv(names[*name], value.clone()).encode_to_vec();
                    if *odd {
                        // Not canonical: the value's field before the key's.
                        let v = kv.split_off(names[*name].len() + 2);
                        kv = [v, kv].concat();
                    }
                    put_bytes(&mut b, SPAN_ATTRIBUTES, &kv);
                }
                if let Some(c) = cut {
                    b.truncate(*c);
                }
                b
            })
            .collect();
        let mut splitter = Splitter::new(&keys);
        let mut vals = vec![Some(Scalar::Bool(true)); keys.len()];
        for b in &encoded {
            let (mut rest, mut left) = (Vec::new(), vec![false; keys.len()]);
            splitter.split(b, &mut rest, &mut left, &mut vals);
            let (mut want_rest, mut want_left) = (Vec::new(), vec![false; keys.len()]);
            let want = split_reference(b, &keys, &mut want_rest, &mut want_left);
            // By their debug form: NaN is not equal to itself.
            proptest::prop_assert_eq!(format!("{vals:?}"), format!("{want:?}"));
            proptest::prop_assert_eq!(&rest, &want_rest);
            proptest::prop_assert_eq!(&left, &want_left);
        }
    }
}

#[test]
fn key_value_len_is_what_append_key_value_appends() {
    let long = "x".repeat(300);
    let key200 = "k".repeat(200);
    let keys: [&[u8]; 3] = [b"", b"http.route", key200.as_bytes()];
    let values = [
        Scalar::Str(b""),
        Scalar::Str(long.as_bytes()),
        Scalar::Int(0),
        Scalar::Int(-1),
        Scalar::Int(1 << 40),
        Scalar::Double(0.5),
        Scalar::Bool(true),
    ];
    for key in keys {
        for value in values {
            let mut out = vec![7];
            append_key_value(&mut out, key, value);
            assert_eq!(out.len() - 1, key_value_len(key, value), "{key:?} {value:?}");
        }
    }
}
