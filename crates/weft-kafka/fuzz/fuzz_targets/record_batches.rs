//! Fetched record sets are written by whatever produced to the topic, so the reader of record
//! batches must refuse any bytes with an error, never panic or allocate without bound.
//!
//! Each input is read twice: as a raw record set, and as the body of one batch behind a valid
//! header (length and CRC-32C fixed up), so the fuzzer reaches the record reader and the
//! decompressors without having to find a CRC.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weft_kafka::read_batches(&Bytes::copy_from_slice(data), 0);

    let Some((&attributes, body)) = data.split_first() else {
        return;
    };
    let mut batch = Vec::with_capacity(61 + body.len());
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
    batch.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes()); // batch length
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&[0; 4]); // crc, set below
    batch.extend_from_slice(&i16::from(attributes & 0x27).to_be_bytes()); // codec bits, control bit
    batch.extend_from_slice(&7i32.to_be_bytes()); // last offset delta
    batch.extend_from_slice(&0i64.to_be_bytes()); // base timestamp
    batch.extend_from_slice(&0i64.to_be_bytes()); // max timestamp
    batch.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    batch.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    batch.extend_from_slice(&i32::from(attributes >> 3).to_be_bytes()); // record count
    batch.extend_from_slice(body);
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    let _ = weft_kafka::read_batches(&Bytes::from(batch), 0);
});
