#![no_main]

use weft_translate::thrift::{Protocol, Reader, Type};

// The Thrift readers (binary and compact) on any input: never a panic, never an unbounded
// allocation or recursion.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for proto in [Protocol::Binary, Protocol::Compact] {
        let _ = Reader::new(data, proto).skip(Type::Struct);
        let mut r = Reader::new(data, proto);
        if r.message_begin().is_ok() {
            let _ = r.skip(Type::Struct);
        }
    }
});
