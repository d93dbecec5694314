#![no_main]

use prost::Message;

// An X-Ray daemon datagram: never a panic, and an accepted document becomes a well-formed OTLP
// request, which validation accepts, with the span count it reports.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(doc) = weft_translate::xray::split_datagram(data).and_then(weft_translate::xray::parse) else {
        return;
    };
    if let Ok((otlp, n)) = doc.to_otlp() {
        weft_translate::assert_valid_conversion(&otlp);
        let req = weft_otlp::pb::collector::ExportTraceServiceRequest::decode(&otlp[..]).expect("valid OTLP");
        let spans: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
        assert_eq!(spans, n);
    }
});
