#![no_main]

// Stored spans rendered as OTLP/JSON: any bytes either render or give an error, never a panic,
// and they render exactly when prost decodes them.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use prost::Message;
    let mut out = Vec::new();
    let mut first = true;
    let rendered = weft_otlp::json::write_resource_spans_json(data, &mut first, &mut out);
    let decoded = weft_otlp::pb::trace::TracesData::decode(data);
    assert_eq!(rendered.is_ok(), decoded.is_ok());
});
