#![no_main]

use weft_translate::jaeger::{AgentPayload, decode_agent};
use weft_translate::thrift::Protocol;

// A Jaeger agent datagram in either protocol: never a panic, and what is accepted becomes
// OTLP that validation accepts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for proto in [Protocol::Compact, Protocol::Binary] {
        match decode_agent(data, proto) {
            Ok(AgentPayload::Jaeger(b)) => weft_translate::assert_valid_conversion(&weft_translate::jaeger::to_otlp(&b)),
            Ok(AgentPayload::Zipkin(s)) => weft_translate::assert_valid_conversion(&weft_translate::zipkin::to_otlp(&s)),
            Err(_) => {}
        }
    }
});
