#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_sdk::fuzz::xray(data));
