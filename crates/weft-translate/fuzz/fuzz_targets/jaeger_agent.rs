#![no_main]

use weft_translate::jaeger::{AgentPayload, decode_agent};
use weft_translate::thrift::Protocol;

// A Jaeger agent datagram in either protocol: never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for proto in [Protocol::Compact, Protocol::Binary] {
        match decode_agent(data, proto) {
            Ok(AgentPayload::Jaeger(b)) => drop(weft_translate::jaeger::to_otlp(&b)),
            Ok(AgentPayload::Zipkin(s)) => drop(weft_translate::zipkin::to_otlp(&s)),
            Err(_) => {}
        }
    }
});
