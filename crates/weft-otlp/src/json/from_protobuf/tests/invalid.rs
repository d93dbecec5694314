//! Invalid input is an error, as prost reports it: invalid UTF-8, malformed fields, varints,
//! truncations, and nesting past the recursion limit.

use super::rewrite::{Rewrites, rewrite};
use super::*;

#[test]
fn invalid_utf8_in_any_string_is_an_error() {
    let bad = b"a\xffb";
    let cases = [
        ld(1, &ld(3, bad)),                            // ResourceSpans.schema_url
        ld(1, &ld(2, &ld(3, bad))),                    // ScopeSpans.schema_url
        ld(1, &ld(2, &ld(1, &ld(1, bad)))),            // InstrumentationScope.name
        ld(1, &ld(2, &ld(1, &ld(2, bad)))),            // InstrumentationScope.version
        span_pb(&ld(3, bad)),                          // Span.trace_state
        span_pb(&ld(5, bad)),                          // Span.name
        span_pb(&ld(11, &ld(2, bad))),                 // Event.name
        span_pb(&ld(13, &ld(3, bad))),                 // Link.trace_state
        span_pb(&ld(15, &ld(2, bad))),                 // Status.message
        span_pb(&ld(9, &ld(1, bad))),                  // KeyValue.key
        value_pb(&ld(1, bad)),                         // AnyValue.string_value
        ld(1, &ld(1, &ld(1, &ld(1, bad)))),            // a resource attribute's key
        value_pb(&ld(5, &ld(1, &ld(1, bad)))),         // in an array
        value_pb(&ld(6, &ld(1, &ld(1, bad)))),         // in a kvlist
        span_pb(&[ld(5, bad), ld(5, b"ok")].concat()), // overridden
        value_pb(&[ld(1, bad), vi(3, 1)].concat()),    // an overridden oneof member
        value_pb(&[ld(5, &ld(1, &ld(1, bad))), vi(3, 1)].concat()),
    ];
    for pb in cases {
        assert!(matches!(rejected(&pb).problem, ProtobufProblem::Utf8(_)), "{pb:02x?}");
    }
    // Bytes fields hold anything.
    same(&span_pb(&[ld(1, bad), ld(2, bad), ld(4, bad)].concat()));
    same(&value_pb(&ld(7, bad)));
}

#[test]
fn malformed_input_is_an_error() {
    rejected_as(&[0x0a], ProtobufProblem::Varint);
    rejected_as(&[0x0a, 0x05, 1, 2], ProtobufProblem::Overrun);
    rejected_as(&[0x0a, 0x80], ProtobufProblem::Varint);
    rejected_as(&[0x00], ProtobufProblem::Key);
    rejected_as(&[0x07], ProtobufProblem::Key);
    rejected_as(&[0x0e], ProtobufProblem::WireType(6));
    rejected_as(&[0x0f, 0x00], ProtobufProblem::WireType(7));
    // A key above 32 bits.
    rejected_as(&[0x80, 0x80, 0x80, 0x80, 0x10], ProtobufProblem::Key);
    // End of a group that did not start, a group that does not end, or ends as another.
    rejected_as(&[0x0c], ProtobufProblem::EndGroup);
    rejected_as(&group(9, b"")[..1], ProtobufProblem::Overrun);
    rejected_as(&[0x4b, 0x54], ProtobufProblem::EndGroup);
    // A known field with the wrong wire type; a group as a known field.
    rejected_as(
        &vi(1, 1),
        ProtobufProblem::Mismatch {
            field: 1,
            expected: 2,
            found: 0,
        },
    );
    rejected_as(
        &span_pb(&ld(6, b"")),
        ProtobufProblem::Mismatch {
            field: 6,
            expected: 0,
            found: 2,
        },
    );
    rejected_as(
        &span_pb(&vi(7, 1)),
        ProtobufProblem::Mismatch {
            field: 7,
            expected: 1,
            found: 0,
        },
    );
    rejected_as(
        &span_pb(&f64_field(16, 1)),
        ProtobufProblem::Mismatch {
            field: 16,
            expected: 5,
            found: 1,
        },
    );
    rejected_as(
        &group(1, b""),
        ProtobufProblem::Mismatch {
            field: 1,
            expected: 2,
            found: 3,
        },
    );
    // A nested message whose last field runs past its end.
    rejected_as(&span_pb(&[0x2a, 0x03, b'a']), ProtobufProblem::Overrun);
}

/// Prost accepts varints of up to 10 bytes whose value fits 64 bits; so does the writer.
#[test]
fn varints_as_prost_reads_them() {
    let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    let pb = span_pb(&[&[0x50][..], &max].concat());
    assert_eq!(the_span(&same(&pb))["droppedAttributesCount"], json!(u32::MAX));
    // Padded: 5 becomes 0x85 0x80 … 0x00.
    let padded = [0x85, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    let pb = span_pb(&[&[0x50][..], &padded].concat());
    assert_eq!(the_span(&same(&pb))["droppedAttributesCount"], json!(5));
    // Overflowing 64 bits, or longer than 10 bytes.
    let mut over = max;
    over[9] = 0x02;
    rejected_as(&span_pb(&[&[0x50][..], &over].concat()), ProtobufProblem::Varint);
    let long = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    rejected_as(&span_pb(&[&[0x50][..], &long].concat()), ProtobufProblem::Varint);
}

#[test]
fn every_truncation_agrees_with_prost() {
    let pb = every_field_message().encode_to_vec();
    let mut accepted = 0;
    for len in 0..pb.len() {
        if agree(&pb[..len]).expect("agrees") {
            accepted += 1;
        }
    }
    // The empty prefix is a valid, empty TracesData; every other prefix cuts the one field.
    assert_eq!(accepted, 1);
    let rewritten = rewrite(
        &pb,
        Rewrites {
            unknown: true,
            ..Default::default()
        },
        7,
        60,
    );
    for len in 0..rewritten.len() {
        agree(&rewritten[..len]).expect("agrees");
    }
}

/// `AnyValue`s nested `levels` arrays deep under a span attribute.
fn nested_arrays(levels: usize) -> Vec<u8> {
    let mut v = vi(3, 1);
    for _ in 0..levels {
        v = ld(5, &ld(1, &v));
    }
    value_pb(&v)
}

#[test]
fn nesting_is_limited_as_prost_limits_it() {
    // TracesData > ResourceSpans > ScopeSpans > Span > KeyValue > AnyValue is 5 levels, each
    // array 2 more: the deepest message, an ArrayValue, or its AnyValue, must be at most 100 deep.
    let limit = (RECURSION_LIMIT as usize - 5) / 2;
    same(&nested_arrays(limit));
    rejected_as(&nested_arrays(limit + 1), ProtobufProblem::TooDeep);
    // An empty ArrayValue at level 100 is fine, an unknown field in it is not.
    let last = ld(5, &[]);
    let mut deepest = last.clone();
    let mut deepest_unknown = ld(5, &vi(9, 1));
    for _ in 0..limit {
        deepest = ld(5, &ld(1, &deepest));
        deepest_unknown = ld(5, &ld(1, &deepest_unknown));
    }
    same(&value_pb(&deepest));
    rejected_as(&value_pb(&deepest_unknown), ProtobufProblem::TooDeep);
    // Groups in unknown fields count too: a span's fields (level 4) may hold 97 nested groups.
    let mut g = Vec::new();
    for _ in 0..(RECURSION_LIMIT as usize - 3) {
        g = group(17, &g);
    }
    same(&span_pb(&g));
    rejected_as(&span_pb(&group(17, &g)), ProtobufProblem::TooDeep);
}

/// The deepest nesting prost accepts renders, for arrays, kvlists and merged kvlists (the
/// deepest recursion and the most stack), and one level more is refused.
#[test]
fn the_deepest_nesting_of_every_shape_renders() {
    type Wrap = fn(Vec<u8>) -> Vec<u8>;
    let shapes: [(&str, Wrap); 3] = [
        ("arrays", |v| ld(5, &ld(1, &v))),
        ("kvlists", |v| ld(6, &ld(1, &[ld(1, b"k"), ld(2, &v)].concat()))),
        ("merged kvlists", |v| {
            let kv = [ld(1, b"k"), ld(2, b""), ld(2, &v), ld(2, b"")].concat();
            [ld(6, &ld(1, &kv)), ld(6, &[]), ld(6, &ld(1, b""))].concat()
        }),
    ];
    for (name, wrap) in shapes {
        let mut v = vi(3, 1);
        let mut levels = 0;
        while old_text(&value_pb(&wrap(v.clone()))).is_ok() {
            v = wrap(v);
            levels += 1;
        }
        assert!(levels > 25, "{name}: {levels}");
        same(&value_pb(&v));
        rejected_as(&value_pb(&wrap(v)), ProtobufProblem::TooDeep);
    }
}

/// Absurd nesting fails fast, without deep recursion.
#[test]
fn absurd_nesting_is_an_error() {
    // Kvlists in kvlists, 64 KiB of them, written from the inside out.
    let mut v = Vec::new();
    while v.len() < 1 << 16 {
        v = ld(6, &ld(1, &ld(2, &v)));
    }
    rejected_as(&value_pb(&v), ProtobufProblem::TooDeep);
    // Half a million nested groups of unknown field 17 that never end.
    rejected_as(&span_pb(&[0x8b, 0x01].repeat(500_000)), ProtobufProblem::TooDeep);
}
