use super::*;
use bytes::Bytes;
use weft_block::row::SpanRow;

fn row(name: &str, duration: i64, status: u8, attrs: &[u8]) -> SpanRow {
    SpanRow {
        trace_id: [1; 16],
        span_id: [2; 8],
        parent_span_id: [0; 8],
        name: name.into(),
        kind: 2,
        start_unix_nano: 100,
        duration_nano: duration,
        status_code: status,
        status_message: String::new(),
        resource: Bytes::new(),
        scope: Bytes::new(),
        attributes: Bytes::copy_from_slice(attrs),
        events: Bytes::new(),
        links: Bytes::new(),
        extra: Bytes::new(),
    }
}

fn pf(q: &str) -> Prefilter {
    Prefilter::new(&weft_traceql::parse(q).unwrap())
}

#[test]
fn leaves_test_the_simple_conjuncts() {
    let slow_error = row("db", 2_000_000_000, 2, b"user-42");
    let fast_ok = row("db", 1_000, 1, b"");
    let p = pf(r#"{ duration > 1s && status = error && span.user = "user-42" }"#);
    assert!(p.piece_may_match([&slow_error]));
    assert!(!p.piece_may_match([&fast_ok]));
    // `||` inside a filter is not extracted: everything may match.
    assert!(pf("{ duration > 1s || status = ok }").piece_may_match([&fast_ok]));
    assert!(pf("{ }").is_trivial());
}

#[test]
fn structure_needs_both_sides_and_negation_only_the_right() {
    let a = row("a", 1, 0, b"");
    let b = row("b", 1, 0, b"");
    let p = pf(r#"{ name = "a" } >> { name = "b" }"#);
    assert!(p.piece_may_match([&a]), "a piece with either side is a candidate");
    assert!(!p.trace_may_match([&a]));
    assert!(p.trace_may_match([&a, &b]));
    let n = pf(r#"{ name = "a" } !>> { name = "b" }"#);
    assert!(n.trace_may_match([&b]));
    assert!(!n.trace_may_match([&a]));
}

#[test]
fn row_group_blooms_and_stats_prune() {
    let p = pf(r#"{ span.user.id = "needle" }"#);
    let mut bloom = Bloom::with_capacity(10);
    bloom.insert_bytes(b"other");
    let stats = RowGroupStats::default();
    assert!(!p.row_group_may_match(&stats, Some(&bloom)));
    bloom.insert_bytes(b"needle");
    assert!(p.row_group_may_match(&stats, Some(&bloom)));
    assert!(p.row_group_may_match(&stats, None), "no bloom: cannot prune");
    let slow = pf("{ duration > 1s }");
    let short = RowGroupStats {
        start: None,
        duration: Some((0, 500_000_000)),
    };
    assert!(!slow.row_group_may_match(&short, None));
}

/// A span's `attributes` field (tag 9) holding `key` = the integer `v`, as OTLP encodes it.
fn int_attribute(key: &str, v: u64) -> Vec<u8> {
    let mut any = vec![0x18];
    let mut x = v;
    while x >= 0x80 {
        any.push((x as u8) | 0x80);
        x >>= 7;
    }
    any.push(x as u8);
    let mut kv = vec![0x0a, key.len() as u8];
    kv.extend_from_slice(key.as_bytes());
    kv.extend_from_slice(&[0x12, any.len() as u8]);
    kv.extend_from_slice(&any);
    let mut out = vec![0x4a, kv.len() as u8];
    out.extend_from_slice(&kv);
    out
}

#[test]
fn comparisons_need_the_attribute_key() {
    let with = row("get", 1, 0, &int_attribute("http.status_code", 500));
    let without = row("get", 1, 0, &int_attribute("rpc.code", 500));
    for q in [
        "{ span.http.status_code = 500 }",
        "{ span.http.status_code != 200 }",
        "{ span.http.status_code >= 500 }",
        "{ .http.status_code < 600 }",
        r#"{ span.http.status_code =~ "5.." }"#,
        r#"{ span.http.status_code !~ "2.." }"#,
    ] {
        let p = pf(q);
        assert!(p.piece_may_match([&with]), "{q}: a span with the key may match");
        assert!(!p.piece_may_match([&without]), "{q}: a span without the key cannot");
        assert!(p.needs().attributes, "{q}");
    }
    // A resource attribute is looked for in the resource only.
    assert!(!pf("{ resource.http.status_code = 500 }").piece_may_match([&with]));
    // `nil` comparisons and `parent.` are not derived: anything may match.
    assert!(pf("{ span.http.status_code = nil }").piece_may_match([&without]));
    assert!(pf("{ parent.span.http.status_code = 500 }").piece_may_match([&without]));
}

#[test]
fn root_tests_read_the_parent() {
    let root = row("a", 1, 2, b"");
    let child = SpanRow {
        parent_span_id: [3; 8],
        ..root.clone()
    };
    for (q, root_passes, child_passes) in [
        ("{ nestedSetParent < 0 && status = error }", true, false),
        ("{ -1 = nestedSetParent }", true, false),
        ("{ span:parentID = nil }", true, false),
        ("{ nestedSetParent >= 0 }", false, true),
        ("{ nil != span:parentID }", false, true),
        ("{ nestedSetParent < -1 }", false, false),
        ("{ nestedSetParent > -5 }", true, true),
    ] {
        let p = pf(q);
        assert_eq!(p.piece_may_match([&root]), root_passes, "{q} on a root");
        assert_eq!(p.piece_may_match([&child]), child_passes, "{q} on a child");
    }
    assert!(pf("{ nestedSetParent < 0 }").needs().parent);
    assert!(
        !pf("{ nestedSetParent < 1 }").needs().parent,
        "0 is not a root: not derived"
    );
    // Structure needs a root error and a descendant: a trace whose error is not at the root
    // cannot match.
    let p = pf("{ nestedSetParent < 0 } >> { nestedSetParent < 0 && status = error }");
    let ok_root = row("a", 1, 1, b"");
    let error_child = SpanRow {
        parent_span_id: [3; 8],
        ..root.clone()
    };
    assert!(!p.trace_may_match([&ok_root, &error_child]));
    assert!(p.trace_may_match([&root, &error_child]));
    // A never-true leaf prunes row groups too.
    assert!(!pf("{ nestedSetParent < -1 }").row_group_may_match(&RowGroupStats::default(), None));
}
