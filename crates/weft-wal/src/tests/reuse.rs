//! Reused segment files: a segment written in a freed file replays only its own records, after
//! a crash or a clean stop, whatever byte is flipped; free files kept and deleted.

use super::*;
use crate::record::{Decoded, decode_record};
use crate::segment::{free_path, header_stamp};

/// A log in `dir` of 16 KiB segments (so that they fill, are freed and are reused quickly).
fn small_segment_wal(dir: &Path, direct_io: bool) -> Wal {
    let opts = WalOptions {
        segment_bytes: 16 << 10,
        direct_io,
        ..Default::default()
    };
    Wal::open(dir, opts, |_| {}, Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))))
        .unwrap()
        .0
}

/// A log in `dir` of 16 KiB segments, written until its active segment is a reused file
/// holding a few records of its own, then a previous incarnation's: returns the open log and
/// every acknowledged record with its position. Needs direct I/O (segments are reused only
/// under it).
fn reused_segment_log(dir: &Path) -> (Wal, Vec<(WalPos, Bytes)>) {
    assert!(
        direct_supported(dir),
        "these tests need a filesystem that takes O_DIRECT"
    );
    let wal = small_segment_wal(dir, true);
    let mut acked = Vec::new();
    rt().block_on(async {
        let mut n = 0u32;
        let mut append = |size: usize| {
            n += 1;
            let payload = Bytes::from((0..size).map(|j| (n as usize * 7 + j) as u8).collect::<Vec<u8>>());
            let wal = &wal;
            async move {
                (
                    wal.append(Arc::from("t"), KIND_OTLP, payload.clone()).await.unwrap(),
                    payload,
                )
            }
        };
        for _ in 0..60 {
            acked.push(append(1000).await);
        }
        // Everything before the 50th record is in blocks: its older segments are freed.
        wal.truncate_before(acked[49].0);
        // Smaller records, so a reused file's old records do not line up with the new ones.
        while wal.stats.reused_segments.load(Ordering::Relaxed) < 2 {
            acked.push(append(300).await);
        }
        for _ in 0..3 {
            acked.push(append(300).await);
        }
    });
    (wal, acked)
}

/// The acknowledged records in segments that `dir` still holds, in log order.
fn kept_records(dir: &Path, acked: &[(WalPos, Bytes)]) -> Vec<(WalPos, Bytes)> {
    let segs: Vec<u64> = list_segments(dir).unwrap().iter().map(|s| s.seq).collect();
    acked
        .iter()
        .filter(|(p, _)| segs.contains(&p.segment))
        .cloned()
        .collect()
}

/// Copies the log's files as a crash would leave them (the writer still running).
fn crash_copy(from: &Path, to: &Path) {
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A segment written in the file of an older one replays exactly its own records, after a
/// crash (its previous incarnation's records still after them) and after a clean stop: none of
/// the old records, nothing reported as torn or damaged. Freed files are kept (at most two)
/// and reused across a restart, and a new segment's number is above every free file's.
#[test]
fn reused_segments_replay_only_their_own_records() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let (wal, acked) = reused_segment_log(dir.path());
    crash_copy(dir.path(), crash.path());
    let active = list_segments(crash.path()).unwrap().pop().unwrap();
    let (last, payload) = acked.last().unwrap();
    assert_eq!(last.segment, active.seq);
    let end = last.offset + record_len("t", payload);
    let len = fs::metadata(&active.path).unwrap().len();
    assert!(
        len > end.next_multiple_of(BLOCK as u64) + 1000,
        "the active segment holds an older incarnation's records after its own ({len} bytes, log ends at {end})"
    );
    rt().block_on(wal.shutdown());
    for d in [crash.path(), dir.path()] {
        let (got, report) = replay(d);
        let got: Vec<(WalPos, Bytes)> = got.into_iter().map(|r| (r.pos, r.payload)).collect();
        let want = kept_records(d, &acked);
        assert!(want.len() > 10);
        assert!(
            got == want,
            "replay of {} differs: {} records, want {}",
            d.display(),
            got.len(),
            want.len()
        );
        assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0), "{}", d.display());
        assert!(list_free(d).unwrap().len() <= FREE_SEGMENTS);
    }

    // Across a restart the free files are still reused, and numbers keep growing past them.
    let wal = small_segment_wal(dir.path(), true);
    wal.truncate_before(acked.last().unwrap().0);
    rt().block_on(wal.shutdown());
    let free = list_free(dir.path()).unwrap();
    assert!(!free.is_empty(), "a freed segment is kept for reuse");
    let high = free[0].0 + 1000;
    fs::rename(&free[0].1, free_path(dir.path(), high)).unwrap();
    let wal = small_segment_wal(dir.path(), true);
    let mut positions = Vec::new();
    rt().block_on(async {
        for i in 0..60u8 {
            positions.push(
                wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; 900]))
                    .await
                    .unwrap(),
            );
        }
        wal.shutdown().await;
    });
    assert!(
        positions[0].segment > high,
        "{:?} is not above the free file {high}",
        positions[0]
    );
    assert!(wal.stats.reused_segments.load(Ordering::Relaxed) >= 1);
    let (got, report) = replay(dir.path());
    let tail: Vec<u8> = got
        .iter()
        .filter(|r| r.pos.segment > high)
        .map(|r| r.payload[0])
        .collect();
    assert_eq!(tail, (0..60u8).collect::<Vec<u8>>());
    assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0));
}

/// Writes records into `wal` (of small segments, direct I/O) until they fill segments, then
/// frees them all: the active one rolls into a free file, which the next segment reuses.
/// Returns when a segment has been reused, with every acknowledged record and its position.
fn start_a_reused_segment(wal: &Wal) -> Vec<(WalPos, Bytes)> {
    let mut acked = Vec::new();
    rt().block_on(async {
        for i in 0..60u8 {
            let p = Bytes::from(vec![i; 1500]);
            acked.push((wal.append(Arc::from("t"), KIND_OTLP, p.clone()).await.unwrap(), p));
        }
        let last = acked.last().unwrap().0;
        wal.truncate_before(last);
        // Covering the active segment rolls it, into a free file.
        wal.truncate_before(WalPos {
            segment: last.segment,
            offset: u64::MAX,
        });
        // A no-op to wait for: the writer handles commands in order.
        wal.truncate_before(WalPos { segment: 0, offset: 0 });
        while wal.stats.reused_segments.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    acked
}

/// A crash right after a free file became the next segment, before anything was written to
/// it: the segment replays no record (its header has a new stamp; the old records do not
/// carry it) and nothing is reported torn or damaged.
#[test]
fn a_reused_segment_with_no_record_yet_replays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    assert!(direct_supported(dir.path()));
    let wal = small_segment_wal(dir.path(), true);
    let acked = start_a_reused_segment(&wal);
    crash_copy(dir.path(), crash.path());
    rt().block_on(wal.shutdown());
    let newest = list_segments(crash.path()).unwrap().pop().unwrap();
    assert!(
        fs::metadata(&newest.path).unwrap().len() > 10_000,
        "the new segment is a reused file"
    );
    let (got, report) = replay(crash.path());
    let got: Vec<(WalPos, Bytes)> = got.into_iter().map(|r| (r.pos, r.payload)).collect();
    assert!(
        got.iter().all(|(p, _)| p.segment < newest.seq),
        "an old record replayed into the new segment"
    );
    assert!(got == kept_records(crash.path(), &acked));
    assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0));
}

/// A reused segment whose log ends exactly at a block's end has no padding after it: the next
/// bytes are its previous incarnation's, here in the middle of an old record. Replay ends the
/// log there without calling it torn, and leaves the file's length alone (it is still a
/// reusable file). A record of the segment's own that is damaged there is still a torn tail.
#[test]
fn a_reused_log_ending_on_a_block_boundary_is_not_torn() {
    let dir = tempfile::tempdir().unwrap();
    assert!(direct_supported(dir.path()));
    let wal = small_segment_wal(dir.path(), true);
    let mut acked = start_a_reused_segment(&wal);
    rt().block_on(async {
        // One record that fills the reused segment's first block exactly.
        let fill = BLOCK as u64 - HEADER_LEN as u64 - record_len("t", b"");
        let p = Bytes::from(vec![0xee; fill as usize]);
        let pos = wal.append(Arc::from("t"), KIND_OTLP, p.clone()).await.unwrap();
        assert_eq!(pos.offset + record_len("t", &p), BLOCK as u64);
        acked.push((pos, p));
    });
    let crash = tempfile::tempdir().unwrap();
    crash_copy(dir.path(), crash.path());
    rt().block_on(wal.shutdown());
    let newest = list_segments(crash.path()).unwrap().pop().unwrap();
    assert_eq!(newest.seq, acked.last().unwrap().0.segment);
    let len = fs::metadata(&newest.path).unwrap().len();
    let data = fs::read(&newest.path).unwrap();
    assert!(len > 2 * BLOCK as u64, "the new segment is a reused file");
    let stamp = header_stamp(&data).unwrap();
    assert!(
        matches!(
            decode_record(&Bytes::from(data.clone()), BLOCK, Some(stamp)),
            Decoded::Torn(_)
        ),
        "the old bytes after the block are the middle of an old record"
    );
    let (got, report) = replay(crash.path());
    let got: Vec<(WalPos, Bytes)> = got.into_iter().map(|r| (r.pos, r.payload)).collect();
    assert!(got == kept_records(crash.path(), &acked));
    assert_eq!(got.last().unwrap().0, acked.last().unwrap().0);
    assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0));
    assert_eq!(
        fs::metadata(&newest.path).unwrap().len(),
        len,
        "the reused file keeps its length"
    );

    // The same block end followed by a damaged record that carries the segment's stamp: a
    // write of its own that did not land whole, so a torn tail as before.
    let mut torn = data.clone();
    let mut rec = Vec::new();
    encode_record(&mut rec, stamp, KIND_OTLP, "t", &[7u8; 300]);
    rec[40] ^= 1;
    torn[BLOCK..BLOCK + rec.len()].copy_from_slice(&rec);
    fs::write(&newest.path, &torn).unwrap();
    let (got, report) = replay(crash.path());
    assert_eq!(got.last().unwrap().pos, acked.last().unwrap().0);
    assert_eq!(report.torn_bytes, len - BLOCK as u64);
}

/// Kept files are deleted once segments are no longer written with direct I/O (here: reopened
/// with it turned off), since only direct writes reuse them.
#[test]
fn free_files_go_when_writes_are_not_direct() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, acked) = reused_segment_log(dir.path());
    wal.truncate_before(acked.last().unwrap().0);
    rt().block_on(wal.shutdown());
    assert!(!list_free(dir.path()).unwrap().is_empty());
    let wal = small_segment_wal(dir.path(), false);
    rt().block_on(async {
        wal.append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"a"))
            .await
            .unwrap();
        wal.truncate_before(WalPos { segment: 0, offset: 0 });
        wal.append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"b"))
            .await
            .unwrap();
        wal.shutdown().await;
    });
    assert!(list_free(dir.path()).unwrap().is_empty());
}

mod reused_model {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// A flipped byte anywhere in a reused segment, in its own records or in the previous
        /// incarnation's after them, never brings back an old record, never panics, and loses
        /// at most the records it touches.
        #[test]
        fn a_flipped_byte_in_a_reused_segment_never_replays_an_old_record(at in 0usize..1 << 20, bit in 0u8..8) {
            let dir = tempfile::tempdir().unwrap();
            let crash = tempfile::tempdir().unwrap();
            let (wal, acked) = reused_segment_log(dir.path());
            crash_copy(dir.path(), crash.path());
            rt().block_on(wal.shutdown());
            let active = list_segments(crash.path()).unwrap().pop().unwrap();
            let mut data = fs::read(&active.path).unwrap();
            let at = at % data.len();
            data[at] ^= 1 << bit;
            fs::write(&active.path, &data).unwrap();
            let (got, _) = replay(crash.path());
            let want = kept_records(crash.path(), &acked);
            // Every replayed record is an acknowledged one, at its position, in order.
            let mut next = 0;
            for r in &got {
                let found = want[next..].iter().position(|(p, b)| *p == r.pos && *b == r.payload);
                prop_assert!(found.is_some(), "an old or garbled record replayed at {:?}", r.pos);
                next += found.unwrap() + 1;
            }
            prop_assert!(got.len() + 2 >= want.len(), "lost {} of {}", want.len() - got.len(), want.len());
        }
    }
}
