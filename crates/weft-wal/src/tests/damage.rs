//! Replay of damaged segments: torn tails, flipped bytes, damaged lengths and headers, newer
//! formats, and records forged in payloads, with the property tests over cuts and flips.

use super::*;
use crate::segment::HEADER_LEN_V1;
use std::fs::OpenOptions;

#[test]
fn torn_tail_is_dropped_and_earlier_records_survive() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rt = rt();
    rt.block_on(async {
        let (wal, _) = open(dir.path(), &seen);
        for i in 0..5u8 {
            wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; 10]))
                .await
                .unwrap();
        }
        wal.shutdown().await;
    });
    // Simulate a torn write: half a record at the end of the newest segment.
    let last = list_segments(dir.path()).unwrap().last().unwrap().clone();
    let seg = last.path;
    let mut half = Vec::new();
    encode_record(&mut half, 0, KIND_OTLP, "t", &[9; 50]);
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&half[..30]).unwrap();
    drop(f);
    let len_before = fs::metadata(&seg).unwrap().len();
    let (_w, replayed) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
    assert_eq!(replayed.len(), 5);
    assert_eq!(
        fs::metadata(&seg).unwrap().len(),
        len_before - 30,
        "torn bytes truncated"
    );
}

#[test]
fn corrupted_checksum_stops_replay_at_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        for i in 0..3u8 {
            wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; 10]))
                .await
                .unwrap();
        }
        wal.shutdown().await;
    });
    let seg = list_segments(dir.path()).unwrap().last().unwrap().path.clone();
    let mut data = fs::read(&seg).unwrap();
    let n = data.len();
    data[n - 1] ^= 0xff; // flip a payload byte of the last record
    fs::write(&seg, &data).unwrap();
    let (_w, replayed) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
    assert_eq!(replayed.len(), 2);
}

/// Regression (issue 13, point 3): one flipped byte in an older segment lost every record after
/// it in that segment. Replay now skips only the damaged record.
#[test]
fn damaged_record_in_older_segment_skips_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    append_n(dir.path(), 40, 300);
    let segs = list_segments(dir.path()).unwrap();
    assert!(segs.len() >= 3);
    let older = &segs[1].path;
    let mut data = fs::read(older).unwrap();
    data[HEADER_LEN + 8 + 100] ^= 0x5a; // a payload byte of the segment's first record
    fs::write(older, &data).unwrap();
    let (got, report) = replay(dir.path());
    assert_eq!(got.len(), 39, "only the damaged record is lost");
    assert_eq!(report.damaged_ranges, 1);
    assert_eq!(report.damaged_bytes, record_len("t", &[0; 300]));
    let firsts: Vec<u8> = got.iter().map(|r| r.payload[0]).collect();
    assert!(firsts.windows(2).all(|w| w[0] < w[1]), "order kept: {firsts:?}");
}

/// A corrupted length field cannot be skipped by length: replay finds the next record byte by
/// byte.
#[test]
fn damaged_length_resynchronises_byte_by_byte() {
    let dir = tempfile::tempdir().unwrap();
    append_n(dir.path(), 5, 50);
    let seg = list_segments(dir.path()).unwrap()[0].path.clone();
    let mut data = fs::read(&seg).unwrap();
    let second = HEADER_LEN + record_len("t", &[0; 50]) as usize;
    data[second + 1] ^= 0x40; // length of record 2 now points far away
    fs::write(&seg, &data).unwrap();
    let (got, report) = replay(dir.path());
    let firsts: Vec<u8> = got.iter().map(|r| r.payload[0]).collect();
    assert_eq!(firsts, vec![0, 2, 3, 4]);
    assert_eq!(report.damaged_ranges, 1);
    assert_eq!(
        fs::metadata(&seg).unwrap().len(),
        data.len() as u64,
        "a damaged range with records after it is not truncated"
    );
}

/// Regression (issue 13, point 3): a bad magic or an empty older segment stopped the server
/// from starting.
#[test]
fn bad_magic_and_empty_segments_do_not_stop_replay() {
    let dir = tempfile::tempdir().unwrap();
    append_n(dir.path(), 30, 300);
    let segs = list_segments(dir.path()).unwrap();
    let mut data = fs::read(&segs[0].path).unwrap();
    data[2] = b'X';
    fs::write(&segs[0].path, &data).unwrap();
    fs::write(&segs[2].path, b"").unwrap();
    let before: usize = segs.len();
    let (got, report) = replay(dir.path());
    assert_eq!(report.removed_segments, 1);
    assert_eq!(
        report.damaged_ranges, 1,
        "the damaged header is skipped, its records kept"
    );
    assert_eq!(report.damaged_bytes, HEADER_LEN as u64);
    let lost_in_empty = 30 - got.len();
    assert!(
        lost_in_empty > 0 && lost_in_empty < 6,
        "only the emptied segment's records are gone"
    );
    assert_eq!(
        list_segments(dir.path()).unwrap().len(),
        before,
        "emptied segment removed, a new one started"
    );
}

#[test]
fn a_newer_format_is_refused_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    append_n(dir.path(), 3, 10);
    let seg = list_segments(dir.path()).unwrap()[0].path.clone();
    let mut data = fs::read(&seg).unwrap();
    // A later format's header: another version digit, and not format 2's header checksum.
    data[7] = b'3';
    data[16] ^= 0xff;
    fs::write(&seg, &data).unwrap();
    let res = Wal::open(
        dir.path(),
        WalOptions::default(),
        |_| {},
        Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
    );
    assert!(matches!(res, Err(WalError::NewerFormat { .. })));
}

mod model {
    use super::*;
    use proptest::prelude::*;

    /// Appends `payloads` to a new log in `dir`, all in one segment.
    fn write_one_segment(dir: &Path, payloads: &[Vec<u8>]) {
        rt().block_on(async {
            let wal = one_segment_wal(dir, None);
            for p in payloads {
                wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(p.clone()))
                    .await
                    .unwrap();
            }
            wal.shutdown().await;
        });
    }

    /// Opens the log in `dir`: whether it opened, and the payloads replayed.
    fn replay_payloads(dir: &Path) -> (bool, Vec<Vec<u8>>) {
        let mut got = Vec::new();
        let res = Wal::open(
            dir,
            WalOptions::default(),
            |r| got.push(r.payload.to_vec()),
            Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
        );
        (res.is_ok(), got)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever prefix of the newest segment survives a crash, replay returns exactly a
        /// prefix of the appended records, never garbage and never a panic.
        #[test]
        fn replay_after_any_cut_is_a_prefix(sizes in proptest::collection::vec(0usize..300, 1..40), cut in 0usize..20_000) {
            let dir = tempfile::tempdir().unwrap();
            let payloads: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
            write_one_segment(dir.path(), &payloads);
            let seg = list_segments(dir.path()).unwrap().last().unwrap().path.clone();
            let data = fs::read(&seg).unwrap();
            let keep = cut.min(data.len());
            fs::write(&seg, &data[..keep]).unwrap();
            let (opened, got) = replay_payloads(dir.path());
            if keep < HEADER_LEN {
                prop_assert!(opened);
                prop_assert!(got.is_empty());
            } else {
                prop_assert!(opened);
                prop_assert!(got.len() <= payloads.len());
                prop_assert_eq!(&got[..], &payloads[..got.len()]);
            }
        }

        /// A flipped byte anywhere in a segment loses at most the record it lands in (two when
        /// it lands in a header field another record's resynchronisation depends on), never the
        /// records after it, and replay never panics or returns garbage.
        #[test]
        fn a_flipped_byte_loses_only_what_it_touches(sizes in proptest::collection::vec(1usize..200, 2..30), at in 0usize..10_000, bit in 0u8..8) {
            let dir = tempfile::tempdir().unwrap();
            let payloads: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
            write_one_segment(dir.path(), &payloads);
            let seg = list_segments(dir.path()).unwrap()[0].path.clone();
            let mut data = fs::read(&seg).unwrap();
            let at = at % data.len();
            data[at] ^= 1 << bit;
            fs::write(&seg, &data).unwrap();
            let (opened, got) = replay_payloads(dir.path());
            prop_assert!(opened);
            // Every replayed record is one that was appended, in order.
            let mut next = 0;
            for g in &got {
                let found = payloads[next..].iter().position(|p| p == g);
                prop_assert!(found.is_some(), "garbage or out-of-order record replayed");
                next += found.unwrap() + 1;
            }
            prop_assert!(got.len() + 2 >= payloads.len(), "lost {} of {}", payloads.len() - got.len(), payloads.len());
        }
    }
}

/// The version digit of a header is one byte a flip can change. A format-2 header whose
/// checksum holds is read as format 2 whatever the digit says; a format-1 header whose digit
/// now says 2 is read as damaged, and its records are kept.
#[test]
fn a_damaged_version_digit_loses_nothing() {
    for digit in [b'1', b'3', b'6', b'0'] {
        let dir = tempfile::tempdir().unwrap();
        append_n(dir.path(), 5, 40);
        let seg = list_segments(dir.path()).unwrap()[0].path.clone();
        let mut data = fs::read(&seg).unwrap();
        data[7] = digit;
        fs::write(&seg, &data).unwrap();
        let (got, report) = replay(dir.path());
        assert_eq!(got.len(), 5, "digit {}", digit as char);
        assert_eq!(report.damaged_ranges, 0);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut v1 = fs::read(golden_dir().join("buffered.wal")).unwrap();
    v1[7] = b'2';
    fs::write(segment_path(dir.path(), 1), &v1).unwrap();
    let (got, report) = replay(dir.path());
    assert_eq!(got.len(), golden_records().len(), "a format-1 segment read as format 2");
    assert_eq!((report.damaged_ranges, report.damaged_bytes), (1, HEADER_LEN_V1 as u64));
}

/// A client's payload can hold what looks like a record: of format 1, or of format 2 with any
/// stamp but the segment's own (which is random). When damage makes replay search inside such a
/// payload, none of it is taken for a record or for the end of the log: only the damaged record
/// is lost, and the records after it are kept.
#[test]
fn a_record_forged_in_a_payload_neither_replays_nor_cuts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut forged = vec![0xabu8; 37];
    for stamp in [1u64, 2, 12345, u64::MAX] {
        encode_record(&mut forged, stamp, KIND_OTLP, "evil", b"forged record");
    }
    let mut v1 = Vec::new();
    encode_record(&mut v1, 0, KIND_OTLP, "evil", b"forged record");
    v1[8] = 1; // format 1's version; its body has no stamp
    v1.drain(12..20);
    let body_len = (v1.len() - 8) as u32;
    v1[..4].copy_from_slice(&body_len.to_le_bytes());
    let crc = crc32c::crc32c(&v1[8..]);
    v1[4..8].copy_from_slice(&crc.to_le_bytes());
    forged.extend_from_slice(&v1);
    forged.extend_from_slice(&[0xcd; 50]);
    rt().block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(forged.clone()))
            .await
            .unwrap();
        for i in 0..3u8 {
            wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; 60]))
                .await
                .unwrap();
        }
        wal.shutdown().await;
    });
    let seg = list_segments(dir.path()).unwrap()[0].path.clone();
    let mut data = fs::read(&seg).unwrap();
    data[HEADER_LEN + 2] ^= 0x10; // the forging record's length now points far past its end
    fs::write(&seg, &data).unwrap();
    let (got, report) = replay(dir.path());
    let got: Vec<Bytes> = got.into_iter().map(|r| r.payload).collect();
    assert_eq!(got, (0..3u8).map(|i| Bytes::from(vec![i; 60])).collect::<Vec<_>>());
    assert_eq!((report.damaged_ranges, report.torn_bytes), (1, 0));
}

/// A damaged length that grows by exactly the next record's size points at the record after
/// it, which is intact: replay still takes the earliest record after the damage, so only the
/// damaged one is lost.
#[test]
fn a_length_grown_by_the_next_records_size_skips_only_the_damaged_record() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [100usize, 512 - record_len("t", b"") as usize, 50, 50];
    rt().block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        for (i, &n) in sizes.iter().enumerate() {
            wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i as u8; n]))
                .await
                .unwrap();
        }
        wal.shutdown().await;
    });
    let seg = list_segments(dir.path()).unwrap()[0].path.clone();
    let mut data = fs::read(&seg).unwrap();
    assert_eq!(data[HEADER_LEN + 1] & 0x02, 0);
    data[HEADER_LEN + 1] ^= 0x02; // the first record's length, plus 512: the third's start
    fs::write(&seg, &data).unwrap();
    let (got, report) = replay(dir.path());
    let firsts: Vec<u8> = got.iter().map(|r| r.payload[0]).collect();
    assert_eq!(firsts, vec![1, 2, 3]);
    assert_eq!(report.damaged_ranges, 1);
}

/// When a header and the first record's start are both damaged, the segment's stamp is not
/// guessed from a record found further on, which could be one a client put in a payload: no
/// record is replayed from the segment, and the file is left as it is for an operator.
#[test]
fn a_damaged_header_and_first_record_replay_no_guessed_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut forged = vec![0x11u8; 64];
    encode_record(&mut forged, 0x5eed, KIND_OTLP, "evil", b"forged record");
    forged.extend_from_slice(&[0x22; 64]);
    rt().block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(forged))
            .await
            .unwrap();
        wal.append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"second"))
            .await
            .unwrap();
        wal.shutdown().await;
    });
    let seg = list_segments(dir.path()).unwrap()[0].path.clone();
    let mut data = fs::read(&seg).unwrap();
    data[..HEADER_LEN + 8].fill(0x99);
    fs::write(&seg, &data).unwrap();
    let (got, report) = replay(dir.path());
    assert!(
        got.iter().all(|r| &r.payload[..] != b"forged record"),
        "a forged record replayed"
    );
    assert!(got.is_empty());
    assert_eq!(report.damaged_bytes, data.len() as u64);
    assert_eq!(fs::metadata(&seg).unwrap().len(), data.len() as u64, "not truncated");
}
