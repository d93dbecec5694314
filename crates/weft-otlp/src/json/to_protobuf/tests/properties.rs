//! Property tests: styled, tree-rendered, mutated, edited and arbitrary bodies, on which both
//! decoders agree.

use super::strategies::request;
use super::styler::{Rng, Styler, mutate};
use super::*;

/// Checks that both decoders agree on `body`: same message, or the same error.
fn agree(body: &[u8]) -> Result<bool, TestCaseError> {
    let old = request_from_json(body);
    let new = request_json_to_protobuf(body);
    match (old, new) {
        (Ok(old), Ok(bytes)) => {
            let new = ExportTraceServiceRequest::decode(bytes.as_slice())
                .map_err(|e| TestCaseError::fail(format!("output does not decode: {e}")))?;
            prop_assert_eq!(new.encode_to_vec(), old.encode_to_vec());
            prop_assert_eq!(bytes.len(), old.encoded_len());
            Ok(true)
        }
        (Err(old), Err(new)) => {
            prop_assert_eq!((old.path, old.problem), (new.path, new.problem));
            Ok(false)
        }
        (old, new) => Err(TestCaseError::fail(format!(
            "request_from_json: {:?}\nrequest_json_to_protobuf: {:?}\nbody: {}",
            old.map(|_| ()),
            new.map(|_| ()),
            String::from_utf8_lossy(body)
        ))),
    }
}

/// What `resource_spans_to_json` loses: it always writes a status and a key/value pair's value.
fn as_tree_renderer_writes_it(mut req: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    fn kvs(list: &mut [KeyValue]) {
        for kv in list {
            let v = kv.value.get_or_insert_default();
            match &mut v.value {
                Some(V::KvlistValue(l)) => kvs(&mut l.values),
                Some(V::ArrayValue(a)) => values(&mut a.values),
                _ => {}
            }
        }
    }
    fn values(vs: &mut [AnyValue]) {
        for v in vs {
            match &mut v.value {
                Some(V::KvlistValue(l)) => kvs(&mut l.values),
                Some(V::ArrayValue(a)) => values(&mut a.values),
                _ => {}
            }
        }
    }
    for rs in &mut req.resource_spans {
        if let Some(r) = &mut rs.resource {
            kvs(&mut r.attributes);
        }
        for ss in &mut rs.scope_spans {
            if let Some(s) = &mut ss.scope {
                kvs(&mut s.attributes);
            }
            for s in &mut ss.spans {
                s.status.get_or_insert_default();
                kvs(&mut s.attributes);
                for e in &mut s.events {
                    kvs(&mut e.attributes);
                }
                for l in &mut s.links {
                    kvs(&mut l.attributes);
                }
            }
        }
    }
    req
}

const JSONISH: &[u8] = b"{}[]\":,0123456789-+.eEtrufalsn \\uxAZ";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every style of a valid request decodes to that request, and to what `request_from_json` returns.
    #[test]
    fn styled_json_matches_tree_decoder_and_original(req in request(), seed in any::<u64>()) {
        let json = Styler::render(&req, seed);
        let old = request_from_json(json.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        let bytes = request_json_to_protobuf(json.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        let new = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("output decodes");
        prop_assert_eq!(new.encode_to_vec(), old.encode_to_vec(), "{}", json);
        prop_assert_eq!(new.encode_to_vec(), req.encode_to_vec(), "{}", json);
        prop_assert_eq!(bytes.len(), req.encoded_len());
    }

    /// `resource_spans_to_json` output decodes to the original, give or take what that renderer adds.
    #[test]
    fn tree_rendered_json_round_trips(req in request()) {
        let json = json!({ "resourceSpans": resource_spans_to_json(&req.resource_spans) }).to_string();
        prop_assert!(agree(json.as_bytes())?, "rejected: {}", json);
        let bytes = request_json_to_protobuf(json.as_bytes()).expect("accepted");
        let new = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("output decodes");
        prop_assert_eq!(new.encode_to_vec(), as_tree_renderer_writes_it(req).encode_to_vec());
    }

    /// Valid JSON with one to three nodes replaced, removed, renamed or nulled: same outcome.
    #[test]
    fn mutated_documents_agree(req in request(), seed in any::<u64>(), mutations in 1..4usize) {
        let mut v = json!({ "resourceSpans": resource_spans_to_json(&req.resource_spans) });
        let mut rng = Rng(seed);
        let mut styler = Styler { rng: Rng(seed ^ 1) };
        for _ in 0..mutations {
            mutate(&mut v, &mut rng, &mut styler);
        }
        agree(&serde_json::to_vec(&v).unwrap())?;
    }

    /// Byte edits of styled documents (mostly invalid JSON): same outcome, no panic.
    #[test]
    fn edited_bytes_agree(
        req in request(),
        seed in any::<u64>(),
        edits in vec((any::<prop::sample::Index>(), 0..4u8, any::<u8>()), 1..4),
    ) {
        let mut body = Styler::render(&req, seed).into_bytes();
        for (at, op, b) in edits {
            let i = at.index(body.len() + 1);
            let c = if b < 200 { JSONISH[b as usize % JSONISH.len()] } else { b };
            match op {
                0 => body.insert(i, c),
                1 if i < body.len() => { body.remove(i); }
                2 if i < body.len() => body[i] = c,
                _ => {
                    let end = (i + (b as usize % 16)).min(body.len());
                    let chunk = body[i.min(end)..end].to_vec();
                    body.splice(i..i, chunk);
                }
            }
        }
        agree(&body)?;
    }

    #[test]
    fn arbitrary_bytes_agree(body in vec(any::<u8>(), 0..256)) {
        agree(&body)?;
    }

    #[test]
    fn arbitrary_jsonish_bytes_agree(body in vec(prop::sample::select(JSONISH), 0..64)) {
        agree(&body)?;
    }
}
