#![no_main]

use prost::Message;

// A Jaeger collector payload (binary thrift Batch): never a panic, and an accepted batch becomes
// a well-formed OTLP request, which validation accepts, with one span per Jaeger span.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(b) = weft_translate::jaeger::decode_http(data) {
        let otlp = weft_translate::jaeger::to_otlp(&b);
        weft_translate::assert_valid_conversion(&otlp);
        let req = weft_otlp::pb::collector::ExportTraceServiceRequest::decode(&otlp[..]).expect("valid OTLP");
        let n: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
        assert_eq!(n, b.spans.len());
    }
});
