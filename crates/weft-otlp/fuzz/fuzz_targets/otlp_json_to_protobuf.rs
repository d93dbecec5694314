#![no_main]

// OTLP/JSON request bodies: the streaming converter never panics, and it agrees with the tree
// decoder on what it accepts and on the message it produces. Its fields come out in input order
// (JSON keys in any order), so the bytes are compared as the message they decode to.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use prost::Message;
    use weft_otlp::pb::collector::ExportTraceServiceRequest;
    let streamed = weft_otlp::json::request_json_to_protobuf(data);
    let tree = weft_otlp::json::request_from_json(data);
    match (streamed, tree) {
        (Ok(pb), Ok(req)) => {
            assert_eq!(pb.len(), req.encoded_len());
            assert_eq!(ExportTraceServiceRequest::decode(&pb[..]).expect("the converter's output decodes"), req);
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("converters disagree: {:?} vs {:?}", a.is_ok(), b.is_ok()),
    }
});
