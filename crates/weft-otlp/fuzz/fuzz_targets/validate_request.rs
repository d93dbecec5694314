#![no_main]

// The ingest hot path's validation of an `ExportTraceServiceRequest`: never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut summary = weft_otlp::request::RequestSummary::default();
    let _ = weft_otlp::request::validate_request(data, &mut summary);
});
