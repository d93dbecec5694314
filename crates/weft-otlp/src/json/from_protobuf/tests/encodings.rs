//! Unusual but valid encodings render the same: rewrites of every field, fields in reverse
//! order, the last scalar winning, repeated singular messages merged, unknown fields skipped.

use super::rewrite::{Rewrites, rewrite};
use super::*;

/// Each kind of rewrite, alone and all together, changes nothing in the text, and prost agrees.
#[test]
fn unusual_encodings_of_every_field_render_the_same() {
    let pb = every_field_message().encode_to_vec();
    let expected = same(&pb);
    let kinds = [
        Rewrites {
            reorder: true,
            ..Default::default()
        },
        Rewrites {
            unknown: true,
            ..Default::default()
        },
        Rewrites {
            overridden: true,
            ..Default::default()
        },
        Rewrites {
            split: true,
            ..Default::default()
        },
        Rewrites {
            reorder: true,
            unknown: true,
            overridden: true,
            split: true,
            scramble: false,
        },
    ];
    for (k, what) in kinds.into_iter().enumerate() {
        for seed in 0..20 {
            let rewritten = rewrite(&pb, what, seed, 100);
            assert_ne!(rewritten, pb, "rewrite {k} changed nothing");
            assert_eq!(same(&rewritten), expected, "rewrite {k}, seed {seed}");
        }
    }
}

#[test]
fn fields_in_reverse_order() {
    let pb = span_pb(
        &[
            ld(15, &[vi(3, 1), ld(2, b"m")].concat()),
            ld(9, &[ld(2, &vi(3, 1)), ld(1, b"b")].concat()),
            f64_field(8, 2),
            ld(5, b"n"),
            ld(9, &ld(1, b"a")),
            f64_field(7, 1),
            ld(2, &[2; 8]),
            ld(1, &[1; 16]),
        ]
        .concat(),
    );
    let s = the_span(&same(&pb));
    assert_eq!(s["attributes"][0]["key"], "b");
    assert_eq!(s["attributes"][1], json!({"key": "a", "value": {}}));
    assert_eq!(s["status"], json!({"message": "m", "code": 1}));
    assert_eq!(
        (&s["startTimeUnixNano"], &s["endTimeUnixNano"]),
        (&json!("1"), &json!("2"))
    );
}

#[test]
fn the_last_scalar_wins_even_when_it_is_the_default() {
    let s = the_span(&same(&span_pb(
        &[
            ld(5, b"first"),
            vi(10, 9),
            vi(6, 2),
            f32_field(16, 3),
            ld(3, b"t"),
            ld(4, &[1; 8]),
            ld(5, b"second"),
            vi(10, 0),
            vi(6, 0),
            f32_field(16, 0),
            ld(3, b""),
            ld(4, b""),
        ]
        .concat(),
    )));
    assert_eq!(s["name"], "second");
    assert_eq!(s["kind"], 0);
    for gone in ["droppedAttributesCount", "flags", "traceState", "parentSpanId"] {
        assert_eq!(s.get(gone), None, "{gone}");
    }
}

#[test]
fn repeated_singular_messages_merge() {
    // Resource: attributes append, the count's last value wins.
    let rs = [
        ld(1, &[ld(1, &ld(1, b"a")), vi(2, 5)].concat()),
        ld(2, b""),
        ld(1, &[ld(1, &ld(1, b"b")), vi(2, 6)].concat()),
    ]
    .concat();
    let v = parse(&same(&ld(1, &rs)));
    assert_eq!(
        v[0]["resource"],
        json!({"attributes": [{"key": "a", "value": {}}, {"key": "b", "value": {}}], "droppedAttributesCount": 6})
    );
    // Scope: name from one occurrence, version from another.
    let ss = [ld(1, &ld(1, b"lib")), ld(2, b""), ld(1, &ld(2, b"1.0"))].concat();
    let v = parse(&same(&ld(1, &ld(2, &ss))));
    assert_eq!(v[0]["scopeSpans"][0]["scope"], json!({"name": "lib", "version": "1.0"}));
    // Status: the code of one, the message of another, a later code wins.
    let st = [ld(15, &vi(3, 2)), ld(15, &ld(2, b"m")), ld(15, &vi(3, 1))].concat();
    assert_eq!(
        the_span(&same(&span_pb(&st)))["status"],
        json!({"message": "m", "code": 1})
    );
    // A key/value pair's value: its occurrences form one AnyValue, whose last member wins.
    let attr = |values: &[Vec<u8>]| {
        let kv: Vec<u8> = std::iter::once(ld(1, b"k"))
            .chain(values.iter().map(|v| ld(2, v)))
            .collect::<Vec<_>>()
            .concat();
        the_value(&same(&span_pb(&ld(9, &kv))))
    };
    assert_eq!(attr(&[ld(1, b"s"), vi(3, 4)]), json!({"intValue": "4"}));
    assert_eq!(attr(&[vi(3, 4), Vec::new()]), json!({"intValue": "4"}));
    assert_eq!(attr(&[Vec::new(), Vec::new()]), json!({}));
    let array = |items: &[i64]| {
        ld(
            5,
            &items
                .iter()
                .map(|i| ld(1, &vi(3, *i as u64)))
                .collect::<Vec<_>>()
                .concat(),
        )
    };
    let ints = |items: &[i64]| json!({"arrayValue": {"values": items.iter().map(|i| json!({"intValue": i.to_string()})).collect::<Vec<_>>()}});
    // Consecutive arrays merge, across occurrences of the value and unknown fields.
    assert_eq!(attr(&[array(&[1, 2]), array(&[3])]), ints(&[1, 2, 3]));
    assert_eq!(
        attr(&[[array(&[1]), vi(99, 0), array(&[2])].concat(), array(&[3])]),
        ints(&[1, 2, 3])
    );
    // Another member in between starts over.
    assert_eq!(attr(&[array(&[1]), ld(1, b"s"), array(&[2])]), ints(&[2]));
    assert_eq!(
        attr(&[array(&[1]), ld(1, b"s"), array(&[2]), array(&[3])]),
        ints(&[2, 3])
    );
    assert_eq!(
        attr(&[[array(&[1]), ld(1, b"s"), array(&[2]), array(&[3])].concat()]),
        ints(&[2, 3])
    );
    assert_eq!(attr(&[[array(&[1]), vi(2, 1)].concat(), array(&[2, 3])]), ints(&[2, 3]));
    assert_eq!(attr(&[array(&[1]), ld(6, b""), array(&[2])]), ints(&[2]));
    // Kvlists merge the same way.
    let kvlist = |keys: &[&str]| {
        ld(
            6,
            &keys
                .iter()
                .map(|k| ld(1, &ld(1, k.as_bytes())))
                .collect::<Vec<_>>()
                .concat(),
        )
    };
    assert_eq!(
        attr(&[kvlist(&["a"]), kvlist(&["b"])]),
        json!({"kvlistValue": {"values": [{"key": "a", "value": {}}, {"key": "b", "value": {}}]}})
    );
    // A merged array's elements with merged values of their own.
    let nested = ld(
        5,
        &ld(1, &[ld(5, &ld(1, &vi(3, 1))), ld(5, &ld(1, &vi(3, 2)))].concat()),
    );
    assert_eq!(
        attr(&[nested.clone(), nested]),
        json!({"arrayValue": {"values": [ints(&[1, 2]), ints(&[1, 2])]}})
    );
    // A key/value pair in a merged kvlist, with its own merged value.
    let pair = ld(
        6,
        &ld(1, &[ld(1, b"x"), ld(2, &array(&[1])), ld(2, &array(&[2]))].concat()),
    );
    assert_eq!(
        attr(&[pair.clone(), pair]),
        json!({"kvlistValue": {"values": [{"key": "x", "value": ints(&[1, 2])}, {"key": "x", "value": ints(&[1, 2])}]}})
    );
}

#[test]
fn unknown_fields_and_groups_are_skipped() {
    let unknowns = [
        vi(1000, 1),
        f64_field(999, 2),
        ld(77, b"\xff not UTF-8"),
        f32_field(536_870_911, 3),
        group(50, &[vi(1, 1), group(2, &ld(3, b"x")), group(2, b"")].concat()),
        group(51, b""),
    ]
    .concat();
    // In the TracesData, a span, a status (whose field 1 is reserved) and an AnyValue.
    let plain = same(&span_pb(&[ld(5, b"n"), ld(15, b""), ld(9, &ld(2, &vi(3, 1)))].concat()));
    let pb = [
        unknowns.clone(),
        span_pb(
            &[
                unknowns.clone(),
                ld(5, b"n"),
                ld(15, &[vi(1, 5), unknowns.clone()].concat()),
                ld(9, &ld(2, &[unknowns.clone(), vi(3, 1), unknowns.clone()].concat())),
            ]
            .concat(),
        ),
    ]
    .concat();
    assert_eq!(same(&pb), plain);
}
