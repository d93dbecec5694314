//! The Kafka record format between distributors and block builders (spec/kafka-record.md).
//!
//! A record carries one tenant's spans of one request that route to one partition:
//! - **key**: the tenant ID, UTF-8;
//! - **value**: an OTLP `ExportTraceServiceRequest` in protobuf, the request's own resource,
//!   scope and span bytes, copied verbatim ([`weft_otlp::request::SplitRequest`]);
//! - **header** [`FORMAT_HEADER`] = [`FORMAT_VERSION`]: readers refuse other versions by name;
//! - **timestamp**: when the distributor received the request (ms).
//!
//! A trace's partition is [`partition_of`]: XXH3-64 (seed 0) of the 16 trace-ID bytes, modulo
//! the topic's partition count, so every span of a trace meets in one block builder.

/// The header that names the record format.
pub const FORMAT_HEADER: &str = "weft-format";
/// The only record format version so far.
pub const FORMAT_VERSION: &[u8] = b"1";

/// The partition of a trace among `partitions`.
#[inline]
pub fn partition_of(trace_id: &[u8; 16], partitions: usize) -> usize {
    (xxhash_rust::xxh3::xxh3_64(trace_id) % partitions.max(1) as u64) as usize
}

/// Checks a record's format header and key; returns the tenant.
pub fn read_record<'a>(key: Option<&'a [u8]>, format: Option<&[u8]>) -> Result<&'a str, String> {
    match format {
        Some(FORMAT_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "record format {:?} is not one this weft reads (it reads {:?})",
                String::from_utf8_lossy(v),
                String::from_utf8_lossy(FORMAT_VERSION)
            ));
        }
        None => {
            return Err(format!(
                "record has no {FORMAT_HEADER} header: not written by a weft distributor"
            ));
        }
    }
    let key = key.ok_or("record has no key (the tenant)")?;
    std::str::from_utf8(key).map_err(|_| "record key (the tenant) is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of spec/formats/kafka-record.md (checked with Python's `xxhash` too).
    #[test]
    fn partition_vectors() {
        let id: [u8; 16] = *b"\x5b\x8e\xfb\xf5\x03\x5f\x4b\x5e\x8f\x6e\x2b\x27\x2b\x6a\x90\x01";
        let zeros = [0u8; 16];
        assert_eq!(xxhash_rust::xxh3::xxh3_64(&id), 0x58d6_83af_d418_7e60);
        let got: Vec<usize> = [1, 2, 3, 16, 64].iter().map(|&n| partition_of(&id, n)).collect();
        assert_eq!(got, [0, 0, 1, 0, 32]);
        let got: Vec<usize> = [1, 2, 3, 16, 64].iter().map(|&n| partition_of(&zeros, n)).collect();
        assert_eq!(got, [0, 0, 2, 8, 40]);
    }

    #[test]
    fn records_name_what_is_wrong() {
        assert_eq!(read_record(Some(b"acme"), Some(b"1")), Ok("acme"));
        assert!(read_record(Some(b"acme"), Some(b"2")).unwrap_err().contains("\"2\""));
        assert!(read_record(Some(b"acme"), None).unwrap_err().contains("weft-format"));
        assert!(read_record(None, Some(b"1")).unwrap_err().contains("tenant"));
    }
}
