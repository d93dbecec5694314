#![no_main]

use prost::Message;
use weft_translate::zipkin::{Encoding, to_otlp_request};

// A Zipkin payload (JsonV2): never a panic, and what is accepted becomes a well-formed OTLP
// request, which validation accepts, with one span per decoded span.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok((otlp, n)) = to_otlp_request(Encoding::JsonV2, data) {
        weft_translate::assert_valid_conversion(&otlp);
        let req = weft_otlp::pb::collector::ExportTraceServiceRequest::decode(&otlp[..]).expect("valid OTLP");
        let spans: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(spans, n);
    }
});
