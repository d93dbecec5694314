//! Record batches, magic 2: the unit Kafka stores and the only one this crate writes or reads.
//!
//! ```text
//! baseOffset i64 · batchLength i32 · partitionLeaderEpoch i32 · magic i8 (2) · crc u32 (CRC-32C of
//! everything after it) · attributes i16 (bits 0-2 compression, 3 timestamp type, 4 transactional,
//! 5 control) · lastOffsetDelta i32 · baseTimestamp i64 · maxTimestamp i64 · producerId i64 ·
//! producerEpoch i16 · baseSequence i32 · recordCount i32 · records (compressed as one block)
//! record: length varint · attributes i8 · timestampDelta varint · offsetDelta varint ·
//!         key varbytes · value varbytes · headerCount varint · (key varstring, value varbytes)*
//! ```
//!
//! Writing copies each value's parts once, straight into the request buffer: a record's value is
//! handed over as slices of the bytes the caller already holds, never assembled first.

mod codec;

use crate::Error;
use crate::wire::{Get, Put};
use bytes::Bytes;
use codec::{Lz4Frame, MAX_INFLATED_BATCH, inflate, inflate_lz4, inflate_snappy};

/// How a batch's records are compressed. The codec ids are Kafka's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    /// LZ4 frames of independent 64 KiB blocks, as Kafka's own producer writes them.
    Lz4,
    /// zstd at the given level.
    Zstd(i32),
}

impl Compression {
    fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 3,
            Compression::Zstd(_) => 4,
        }
    }
}

/// A record to write. `value` is the concatenation of `value_parts`.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub key: Option<&'a [u8]>,
    pub value_parts: &'a [&'a [u8]],
    pub headers: &'a [(&'a str, &'a [u8])],
    pub timestamp_ms: i64,
}

/// Who writes a batch, for the broker's de-duplication of retried batches (idempotence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStamp {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

impl ProducerStamp {
    /// A batch from a producer without idempotence.
    pub const NONE: ProducerStamp = ProducerStamp {
        producer_id: -1,
        epoch: -1,
        base_sequence: -1,
    };
}

const HEADER_LEN: usize = 61; // baseOffset through recordCount
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const SEQUENCE_AT: usize = 53;

/// Appends one batch holding `records` to `out`. Returns its length in bytes.
pub fn write_batch(
    out: &mut Vec<u8>,
    records: &[Record<'_>],
    stamp: ProducerStamp,
    compression: Compression,
) -> Result<usize, Error> {
    assert!(!records.is_empty(), "a batch holds at least one record");
    let start = out.len();
    let base_ts = records.iter().map(|r| r.timestamp_ms).min().unwrap_or(0);
    let max_ts = records.iter().map(|r| r.timestamp_ms).max().unwrap_or(0);
    out.i64(0); // baseOffset: the broker assigns it
    out.i32(0); // batchLength, patched below
    out.i32(-1); // partitionLeaderEpoch
    out.i8(2); // magic
    out.extend_from_slice(&[0; 4]); // crc, patched below
    out.i16(compression.id()); // attributes: create time, not transactional, not control
    out.i32(records.len() as i32 - 1);
    out.i64(base_ts);
    out.i64(max_ts);
    out.i64(stamp.producer_id);
    out.i16(stamp.epoch);
    out.i32(stamp.base_sequence);
    out.i32(records.len() as i32);
    debug_assert_eq!(out.len() - start, HEADER_LEN);
    match compression {
        Compression::None => write_records(out, records, base_ts),
        Compression::Lz4 => {
            let mut frame = Lz4Frame::begin(out);
            stream_records(records, base_ts, |b| {
                frame.write(b);
                Ok(())
            })
            .map_err(|e| Error::Protocol(format!("lz4 compression failed: {e}")))?;
            frame.finish();
        }
        Compression::Zstd(level) => {
            let mut plain = Vec::new();
            write_records(&mut plain, records, base_ts);
            let packed = zstd::bulk::compress(&plain, level)
                .map_err(|e| Error::Protocol(format!("zstd compression failed: {e}")))?;
            out.extend_from_slice(&packed);
        }
    }
    let len = out.len() - start;
    out[start + 8..start + 12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[start + ATTRIBUTES_AT..]);
    out[start + CRC_AT..start + CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(len)
}

/// Rewrites the producer stamp of a batch written by [`write_batch`] (and its CRC), so a batch
/// can be encoded before its sequence number is known.
pub fn restamp(batch: &mut [u8], stamp: ProducerStamp) {
    batch[SEQUENCE_AT - 10..SEQUENCE_AT - 2].copy_from_slice(&stamp.producer_id.to_be_bytes());
    batch[SEQUENCE_AT - 2..SEQUENCE_AT].copy_from_slice(&stamp.epoch.to_be_bytes());
    batch[SEQUENCE_AT..SEQUENCE_AT + 4].copy_from_slice(&stamp.base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn write_records(out: &mut Vec<u8>, records: &[Record<'_>], base_ts: i64) {
    let written = stream_records(records, base_ts, |b| {
        out.extend_from_slice(b);
        Ok(())
    });
    debug_assert!(written.is_ok(), "writing to a Vec cannot fail");
}

/// Hands the records' bytes to `emit` in order: each record's fields before its value, the
/// value's parts as given (never joined), then its headers. A compressor fed this way reads
/// each value straight from the caller's bytes.
fn stream_records(
    records: &[Record<'_>],
    base_ts: i64,
    mut emit: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut scratch = Vec::with_capacity(64);
    for (i, r) in records.iter().enumerate() {
        let value_len: usize = r.value_parts.iter().map(|p| p.len()).sum();
        let ts_delta = r.timestamp_ms - base_ts;
        let key_len = r.key.map_or(0, |k| k.len());
        let mut body = 1 + varint_len(ts_delta) + varint_len(i as i64);
        body += varint_len(r.key.map_or(-1, |k| k.len() as i64)) + key_len;
        body += varint_len(value_len as i64) + value_len;
        body += varint_len(r.headers.len() as i64);
        for (k, v) in r.headers {
            body += varint_len(k.len() as i64) + k.len() + varint_len(v.len() as i64) + v.len();
        }
        scratch.clear();
        scratch.varint(body as i64);
        scratch.i8(0);
        scratch.varint(ts_delta);
        scratch.varint(i as i64);
        scratch.varbytes(r.key);
        scratch.varint(value_len as i64);
        emit(&scratch)?;
        for p in r.value_parts {
            emit(p)?;
        }
        scratch.clear();
        scratch.varint(r.headers.len() as i64);
        for (k, v) in r.headers {
            scratch.varbytes(Some(k.as_bytes()));
            scratch.varbytes(Some(v));
        }
        emit(&scratch)?;
    }
    Ok(())
}

/// A record read back from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Bytes,
    pub headers: Vec<(String, Bytes)>,
}

impl FetchedRecord {
    /// The value of the first header named `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| &v[..])
    }
}

/// Reads the batches of a fetch response's record set, keeping records at `min_offset` or later.
/// A partial batch at the end (brokers cut record sets at the byte limit) is ignored. Control
/// batches are skipped. Uncompressed values are slices of `data`, not copies.
///
/// Returns the records and the offset after the last complete batch (where the next fetch
/// starts), which may be past the last record when batches end with skipped records. Any
/// batch that cannot be read fails the whole set; [`RecordBatches`] reads one batch at a time.
pub fn read_batches(data: &Bytes, min_offset: i64) -> Result<(Vec<FetchedRecord>, Option<i64>), Error> {
    let mut out = Vec::new();
    let mut next = None;
    for batch in RecordBatches::new(data.clone(), min_offset) {
        let batch = batch?;
        out.extend(batch.records);
        next = Some(batch.next_offset);
    }
    Ok((out, next))
}

/// The records of one batch, and the offset after it.
#[derive(Debug, Clone)]
pub struct ReadBatch {
    pub records: Vec<FetchedRecord>,
    pub next_offset: i64,
}

/// A fetch response's record set, read one batch at a time: each batch is checked (CRC) and
/// decompressed only when the iterator reaches it, so a consumer that handles each batch's
/// records before asking for the next keeps one inflated batch in cache at a time, not the
/// whole response (a block builder's fetch of 8 MiB of LZ4 is about 48 MiB inflated).
///
/// Yields every complete batch in order (control batches with no records), keeping records
/// at `min_offset` or later; stops at a partial batch at the end. After an error it yields
/// nothing more: records of the batches before it were good, and the failed batch starts at
/// the last `next_offset` yielded (or the fetch's offset).
#[derive(Debug, Clone)]
pub struct RecordBatches {
    data: Bytes,
    pos: usize,
    min_offset: i64,
}

impl RecordBatches {
    pub fn new(data: Bytes, min_offset: i64) -> RecordBatches {
        RecordBatches {
            data,
            pos: 0,
            min_offset,
        }
    }

    /// Whether no bytes are left to read.
    pub fn is_empty(&self) -> bool {
        self.data.len() - self.pos < 12
    }

    fn read_one(&mut self) -> Result<Option<ReadBatch>, Error> {
        let data = &self.data;
        let pos = self.pos;
        if data.len() - pos < 12 {
            return Ok(None);
        }
        let mut g = Get::new(&data[pos..]);
        let base_offset = g.i64()?;
        let batch_len = g.i32()?;
        if batch_len < 0 {
            return Err(Error::Protocol(format!("negative batch length {batch_len}")));
        }
        let total = 12 + batch_len as usize;
        if data.len() - pos < total {
            return Ok(None); // partial batch at the end
        }
        let batch = data.slice(pos..pos + total);
        if total < HEADER_LEN {
            return Err(Error::Protocol(format!(
                "batch of {total} bytes is shorter than its header"
            )));
        }
        let mut g = Get::new(&batch[12..]);
        let _leader_epoch = g.i32()?;
        let magic = g.i8()?;
        if magic != 2 {
            return Err(Error::Protocol(format!(
                "record batch at offset {base_offset} has magic {magic}; only magic 2 is read"
            )));
        }
        let crc = g.u32()?;
        if crc32c::crc32c(&batch[ATTRIBUTES_AT..]) != crc {
            return Err(Error::Protocol(format!(
                "record batch at offset {base_offset} fails its CRC"
            )));
        }
        let attributes = g.i16()?;
        let last_delta = g.i32()?;
        let base_ts = g.i64()?;
        let _max_ts = g.i64()?;
        let _pid = g.i64()?;
        let _epoch = g.i16()?;
        let _seq = g.i32()?;
        let count = g.i32()?;
        let next_offset = base_offset.checked_add(i64::from(last_delta) + 1).ok_or_else(|| {
            Error::Protocol(format!(
                "record batch at offset {base_offset} ends past the largest offset"
            ))
        })?;
        let mut records = Vec::new();
        if attributes & 0x20 == 0 {
            // Not a control batch (transaction markers have no records for us).
            let body = batch.slice(HEADER_LEN..);
            let body = match attributes & 0x7 {
                0 => body,
                1 => inflate(
                    flate2::read::GzDecoder::new(&body[..]),
                    MAX_INFLATED_BATCH,
                    "gzip",
                    base_offset,
                )?,
                2 => inflate_snappy(&body, MAX_INFLATED_BATCH, base_offset)?,
                3 => inflate_lz4(&body, MAX_INFLATED_BATCH, base_offset)?,
                4 => inflate(
                    zstd::stream::read::Decoder::new(&body[..])
                        .map_err(|e| Error::Protocol(format!("zstd batch at offset {base_offset}: {e}")))?,
                    MAX_INFLATED_BATCH,
                    "zstd",
                    base_offset,
                )?,
                c => {
                    return Err(Error::Protocol(format!(
                        "record batch at offset {base_offset} uses compression codec {c}; weft reads none, gzip, snappy, lz4 and zstd"
                    )));
                }
            };
            read_records(&body, count, base_offset, base_ts, self.min_offset, &mut records)?;
        }
        self.pos = pos + total;
        Ok(Some(ReadBatch { records, next_offset }))
    }
}

impl Iterator for RecordBatches {
    type Item = Result<ReadBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.read_one() {
            Ok(b) => b.map(Ok),
            Err(e) => {
                self.pos = self.data.len(); // nothing after an unreadable batch
                Some(Err(e))
            }
        }
    }
}

fn read_records(
    body: &Bytes,
    count: i32,
    base_offset: i64,
    base_ts: i64,
    min_offset: i64,
    out: &mut Vec<FetchedRecord>,
) -> Result<(), Error> {
    let mut g = Get::new(body);
    for _ in 0..count.max(0) {
        let len = g.varint()?;
        if len < 0 {
            return Err(Error::Protocol("negative record length".into()));
        }
        let start = g.pos;
        let rec = g.bytes(len as usize)?;
        let mut r = Get::new(rec);
        let _attrs = r.i8()?;
        let ts_delta = r.varint()?;
        let offset_delta = r.varint()?;
        let slice = |s: &[u8]| body.slice_ref(s);
        let key = r.varbytes()?.map(slice);
        let value = r.varbytes()?.map(slice).unwrap_or_default();
        let n_headers = r.varint()?;
        let mut headers = Vec::with_capacity(n_headers.clamp(0, 16) as usize);
        for _ in 0..n_headers.max(0) {
            let k = r.varbytes()?.unwrap_or_default();
            let k = String::from_utf8_lossy(k).into_owned();
            let v = r.varbytes()?.map(slice).unwrap_or_default();
            headers.push((k, v));
        }
        debug_assert!(g.pos == start + len as usize);
        // Offsets and timestamps are read as sent; a batch whose deltas overflow is refused.
        let (Some(offset), Some(timestamp_ms)) = (base_offset.checked_add(offset_delta), base_ts.checked_add(ts_delta))
        else {
            return Err(Error::Protocol(format!(
                "a record of the batch at offset {base_offset} has an offset or timestamp out of range"
            )));
        };
        if offset >= min_offset {
            out.push(FetchedRecord {
                offset,
                timestamp_ms,
                key,
                value,
                headers,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::codec::tests::xerial;
    use super::*;

    fn sample(compression: Compression) -> Vec<u8> {
        let parts: [&[u8]; 2] = [b"hello ", b"world"];
        let one: [&[u8]; 1] = [b"second"];
        let headers: [(&str, &[u8]); 1] = [("v", b"1")];
        let records = [
            Record {
                key: Some(b"tenant-a"),
                value_parts: &parts,
                headers: &headers,
                timestamp_ms: 1_700_000_000_123,
            },
            Record {
                key: None,
                value_parts: &one,
                headers: &[],
                timestamp_ms: 1_700_000_000_100,
            },
        ];
        let mut out = Vec::new();
        let stamp = ProducerStamp {
            producer_id: 7,
            epoch: 0,
            base_sequence: 0,
        };
        write_batch(&mut out, &records, stamp, compression).unwrap();
        out
    }

    #[test]
    fn batches_round_trip_and_offsets_follow_the_base() {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(1)] {
            let mut b = sample(c);
            b[..8].copy_from_slice(&40i64.to_be_bytes()); // as the broker assigns it
            let (recs, next) = read_batches(&Bytes::from(b), 0).unwrap();
            assert_eq!(next, Some(42));
            assert_eq!(recs.len(), 2);
            assert_eq!(recs[0].offset, 40);
            assert_eq!(&recs[0].value[..], b"hello world");
            assert_eq!(recs[0].key.as_deref(), Some(&b"tenant-a"[..]));
            assert_eq!(recs[0].header("v"), Some(&b"1"[..]));
            assert_eq!(recs[0].timestamp_ms, 1_700_000_000_123);
            assert_eq!(recs[1].offset, 41);
            assert_eq!(recs[1].key, None);
            assert_eq!(recs[1].timestamp_ms, 1_700_000_000_100);
        }
    }

    #[test]
    fn records_before_the_wanted_offset_and_partial_batches_are_left_out() {
        let mut two = sample(Compression::None);
        let mut second = sample(Compression::None);
        second[..8].copy_from_slice(&2i64.to_be_bytes());
        two.extend_from_slice(&second[..second.len() - 3]); // cut short
        let (recs, next) = read_batches(&Bytes::from(two), 1).unwrap();
        assert_eq!(recs.iter().map(|r| r.offset).collect::<Vec<_>>(), [1]);
        assert_eq!(next, Some(2));
    }

    #[test]
    fn batches_are_read_one_at_a_time_and_stop_at_a_damaged_one() {
        let mut set = Vec::new();
        for (base, compression) in [
            (10i64, Compression::Lz4),
            (12, Compression::None),
            (14, Compression::Zstd(1)),
        ] {
            let mut b = sample(compression);
            b[..8].copy_from_slice(&base.to_be_bytes());
            set.extend_from_slice(&b);
        }
        let n = set.len();
        set[n - 10] ^= 1; // the third batch fails its CRC
        let mut it = RecordBatches::new(Bytes::from(set), 11);
        let first = it.next().unwrap().unwrap();
        assert_eq!(first.records.iter().map(|r| r.offset).collect::<Vec<_>>(), [11]);
        assert_eq!(first.next_offset, 12);
        let second = it.next().unwrap().unwrap();
        assert_eq!(second.records.len(), 2);
        assert_eq!(second.next_offset, 14);
        assert!(
            it.next()
                .unwrap()
                .unwrap_err()
                .to_string()
                .contains("offset 14 fails its CRC")
        );
        assert!(it.next().is_none(), "nothing after an unreadable batch");
    }

    #[test]
    fn a_damaged_batch_is_refused_by_its_crc() {
        let mut b = sample(Compression::None);
        let n = b.len();
        b[n - 10] ^= 1;
        let err = read_batches(&Bytes::from(b), 0).unwrap_err();
        assert!(err.to_string().contains("CRC"), "{err}");
    }

    #[test]
    fn restamping_sets_the_sequence_and_keeps_the_crc_valid() {
        let mut b = sample(Compression::None);
        restamp(
            &mut b,
            ProducerStamp {
                producer_id: 99,
                epoch: 3,
                base_sequence: 12,
            },
        );
        let mut g = Get::new(&b[43..]);
        assert_eq!(g.i64().unwrap(), 99);
        assert_eq!(g.i16().unwrap(), 3);
        assert_eq!(g.i32().unwrap(), 12);
        assert!(read_batches(&Bytes::from(b), 0).is_ok());
    }

    /// `batch` (uncompressed, from `write_batch`) with its records compressed by `pack` under
    /// codec `id`, its length and CRC rewritten: batches in codecs weft does not write.
    fn recompressed(batch: &[u8], id: i16, pack: impl Fn(&[u8]) -> Vec<u8>) -> Bytes {
        let mut b = batch[..HEADER_LEN].to_vec();
        b.extend_from_slice(&pack(&batch[HEADER_LEN..]));
        b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&id.to_be_bytes());
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn snappy_batches_read_in_both_framings() {
        let plain = sample(Compression::None);
        let raw = |b: &[u8]| snap::raw::Encoder::new().compress_vec(b).unwrap();
        for batch in [
            recompressed(&plain, 2, raw),
            recompressed(&plain, 2, |b| xerial(b, 32 << 10)),
            recompressed(&plain, 2, |b| xerial(b, 7)), // records split across blocks
            recompressed(&plain, 2, |b| [xerial(b, 32 << 10), vec![0; 4]].concat()), // an empty block
        ] {
            let (recs, next) = read_batches(&batch, 0).unwrap();
            assert_eq!(next, Some(2));
            assert_eq!(recs.len(), 2);
            assert_eq!(&recs[0].value[..], b"hello world");
            assert_eq!(recs[0].header("v"), Some(&b"1"[..]));
            assert_eq!(&recs[1].value[..], b"second");
        }
    }

    #[test]
    fn offsets_that_overflow_are_refused() {
        let mut b = sample(Compression::None);
        b[..8].copy_from_slice(&i64::MAX.to_be_bytes());
        fix_length_and_crc(&mut b);
        let err = read_batches(&Bytes::from(b), 0).unwrap_err();
        assert!(err.to_string().contains("largest offset"), "{err}");
    }

    /// Sets a batch's length and CRC to match its bytes, as a broker relaying it would see them.
    fn fix_length_and_crc(b: &mut [u8]) {
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    }

    type OwnedRecord = (Option<Vec<u8>>, Vec<Vec<u8>>, Vec<(String, Vec<u8>)>, i64);

    fn owned_record() -> impl proptest::strategy::Strategy<Value = OwnedRecord> {
        use proptest::prelude::*;
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
            proptest::collection::vec(("[a-z-]{0,8}", proptest::collection::vec(any::<u8>(), 0..8)), 0..3),
            0i64..4_000_000_000_000,
        )
    }

    proptest::proptest! {
        /// Fetched record sets come from whatever wrote to the topic: no bytes may panic the reader.
        #[test]
        fn any_bytes_are_read_or_refused_without_panic(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            min_offset in proptest::prelude::any::<i64>(),
        ) {
            let _ = read_batches(&Bytes::from(data), min_offset);
        }

        /// Damage that passes the CRC (a writer's bug, not the wire's) reaches the record reader.
        #[test]
        fn damaged_batches_with_a_valid_crc_are_read_or_refused_without_panic(
            codec in 0usize..5,
            flips in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 1u8..=255), 0..4),
            cut in proptest::option::of(proptest::prelude::any::<proptest::sample::Index>()),
            base in proptest::prop_oneof![
                proptest::prelude::any::<i64>(),
                i64::MAX - 3..=i64::MAX,
                i64::MIN..i64::MIN + 3,
            ],
            last_delta in proptest::prop_oneof![proptest::prelude::any::<i32>(), -3i32..3],
            base_ts in proptest::prop_oneof![
                proptest::prelude::any::<i64>(),
                i64::MAX - 3..=i64::MAX,
                i64::MIN..i64::MIN + 3,
            ],
        ) {
            let mut b = match codec {
                0..=2 => sample([Compression::None, Compression::Lz4, Compression::Zstd(1)][codec]),
                3 => recompressed(&sample(Compression::None), 2, |b| snap::raw::Encoder::new().compress_vec(b).unwrap()).to_vec(),
                _ => recompressed(&sample(Compression::None), 2, |b| xerial(b, 16)).to_vec(),
            };
            b[..8].copy_from_slice(&base.to_be_bytes());
            b[ATTRIBUTES_AT + 2..ATTRIBUTES_AT + 6].copy_from_slice(&last_delta.to_be_bytes());
            b[ATTRIBUTES_AT + 6..ATTRIBUTES_AT + 14].copy_from_slice(&base_ts.to_be_bytes());
            for (at, x) in flips {
                let i = ATTRIBUTES_AT + at.index(b.len() - ATTRIBUTES_AT);
                b[i] ^= x;
            }
            if let Some(cut) = cut {
                b.truncate(HEADER_LEN + cut.index(b.len() - HEADER_LEN + 1));
            }
            fix_length_and_crc(&mut b);
            let _ = read_batches(&Bytes::from(b), 0);
        }

        /// What `write_batch` writes, `read_batches` reads back unchanged, compressed or not.
        #[test]
        fn written_records_read_back_unchanged(
            records in proptest::collection::vec(owned_record(), 1..6),
            codec in 0usize..3,
            base in 0i64..1 << 40,
        ) {
            let parts: Vec<Vec<&[u8]>> = records.iter().map(|r| r.1.iter().map(|p| &p[..]).collect()).collect();
            let headers: Vec<Vec<(&str, &[u8])>> =
                records.iter().map(|r| r.2.iter().map(|(k, v)| (k.as_str(), &v[..])).collect()).collect();
            let input: Vec<Record<'_>> = records
                .iter()
                .enumerate()
                .map(|(i, r)| Record {
                    key: r.0.as_deref(),
                    value_parts: &parts[i],
                    headers: &headers[i],
                    timestamp_ms: r.3,
                })
                .collect();
            let mut b = Vec::new();
            let compression = [Compression::None, Compression::Lz4, Compression::Zstd(1)][codec];
            write_batch(&mut b, &input, ProducerStamp::NONE, compression).unwrap();
            b[..8].copy_from_slice(&base.to_be_bytes());
            let (got, next) = read_batches(&Bytes::from(b), 0).unwrap();
            proptest::prop_assert_eq!(next, Some(base + records.len() as i64));
            proptest::prop_assert_eq!(got.len(), records.len());
            for (i, (g, r)) in got.iter().zip(&records).enumerate() {
                proptest::prop_assert_eq!(g.offset, base + i as i64);
                proptest::prop_assert_eq!(g.timestamp_ms, r.3);
                proptest::prop_assert_eq!(g.key.as_deref(), r.0.as_deref());
                proptest::prop_assert_eq!(&g.value[..], &r.1.concat()[..]);
                let want: Vec<(String, Bytes)> =
                    r.2.iter().map(|(k, v)| (k.clone(), Bytes::from(v.clone()))).collect();
                proptest::prop_assert_eq!(&g.headers, &want);
            }
        }
    }
}
