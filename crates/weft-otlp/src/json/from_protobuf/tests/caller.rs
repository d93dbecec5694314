//! The caller's side: the comma flag carried across calls, output and flag left alone on an
//! error, and errors that say where.

use super::*;

#[test]
fn comma_flag_carries_across_calls() {
    let td = every_field_message();
    let one = td.resource_spans[0].clone();
    let pb = TracesData {
        resource_spans: vec![one.clone(), one.clone()],
    }
    .encode_to_vec();
    let single = TracesData {
        resource_spans: vec![one],
    }
    .encode_to_vec();
    let mut out = b"[".to_vec();
    let mut first = true;
    write_resource_spans_json(&single, &mut first, &mut out).unwrap();
    assert!(!first);
    // Nothing to write: neither a comma nor a change to the flag.
    write_resource_spans_json(b"", &mut first, &mut out).unwrap();
    write_resource_spans_json(&single, &mut first, &mut out).unwrap();
    out.push(b']');
    assert_eq!(String::from_utf8(out).unwrap(), same(&pb));
    let mut first = true;
    let mut out = Vec::new();
    write_resource_spans_json(b"", &mut first, &mut out).unwrap();
    assert!(first && out.is_empty());
}

#[test]
fn an_error_leaves_the_output_and_flag_as_they_were() {
    let pb = [every_field_message().encode_to_vec(), span_pb(&ld(5, b"\xff"))].concat();
    for first in [true, false] {
        let mut flag = first;
        let mut out = b"[{}".to_vec();
        let e = write_resource_spans_json(&pb, &mut flag, &mut out).unwrap_err();
        assert_eq!(e.problem, ProtobufProblem::Utf8(5));
        assert_eq!((out.as_slice(), flag), (&b"[{}"[..], first));
    }
}

#[test]
fn errors_say_where() {
    let ok = every_field_message().encode_to_vec();
    let pb = [ok.clone(), span_pb(&ld(5, b"\xff"))].concat();
    let e = new_text(&pb).unwrap_err();
    // The span's name field: after the first resource spans, three tags and lengths in.
    assert_eq!(e.at, ok.len() + 6);
    assert_eq!(
        e.to_string(),
        format!(
            "invalid protobuf TracesData at byte {}: string field 5 is not valid UTF-8",
            ok.len() + 6
        )
    );
}
