//! Direct I/O: writes padded to a block and replayed exactly, zeros past the padding as a torn
//! tail, failed direct writes, and buffered writes when direct I/O is off.

use super::*;
use crate::direct_io::DIRECT_CHUNK;

/// Appends that end exactly on a block, exactly on a direct write's 4 MiB, cross blocks, or
/// exceed one direct write replay exactly, both from a copy taken while the writer runs (as a
/// crash leaves the segment: padded with zeros to a block) and after a clean shutdown (padding
/// trimmed). Replay reads the padding as the end, not as a torn tail.
#[test]
fn direct_writes_and_their_padding_replay_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let direct = direct_supported(dir.path());
    padding_roundtrip(dir.path(), direct);
}

/// The same on ext4, which certainly takes direct I/O.
#[test]
fn direct_writes_on_ext4_replay_exactly() {
    with_ext4(32, |root| {
        assert!(direct_supported(root));
        padding_roundtrip(root, true);
    });
}

fn padding_roundtrip(dir: &Path, direct: bool) {
    let crash = tempfile::tempdir().unwrap();
    // Records take 18 bytes besides the payload (tenant "tenant"); the header is 8.
    let sizes = [
        4096 - 8 - 18,     // ends on the first block's end: nothing left to rewrite
        DIRECT_CHUNK - 18, // fills one direct write exactly
        1,
        4000,
        DIRECT_CHUNK + 5000, // two direct writes, the first starting mid-block
        3,
        8192,
    ];
    let payloads: Vec<Bytes> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| Bytes::from((0..n).map(|j| (i * 31 + j) as u8).collect::<Vec<u8>>()))
        .collect();
    let rt = rt();
    let end = rt.block_on(async {
        let wal = one_segment_wal(dir, None);
        assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), direct as u64);
        let seg = list_segments(dir).unwrap().pop().unwrap().path;
        let mut end = HEADER_LEN as u64;
        for p in &payloads {
            wal.append(Arc::from("tenant"), KIND_OTLP, p.clone()).await.unwrap();
            end += record_len("tenant", p);
            let len = fs::metadata(&seg).unwrap().len();
            if direct {
                assert_eq!(len, end.next_multiple_of(BLOCK as u64), "whole blocks, padded");
            } else {
                assert_eq!(len, end);
            }
        }
        let data = fs::read(&seg).unwrap();
        assert!(data[end as usize..].iter().all(|&b| b == 0));
        fs::write(crash.path().join(seg.file_name().unwrap()), &data).unwrap();
        wal.shutdown().await;
        assert_eq!(fs::metadata(&seg).unwrap().len(), end, "shutdown trims the padding");
        end
    });
    for d in [crash.path(), dir] {
        let (got, report) = replay(d);
        let got: Vec<Bytes> = got.into_iter().map(|r| r.payload).collect();
        assert!(got == payloads, "replay differs");
        assert_eq!(report.torn_bytes, 0, "padding is not a torn tail");
        assert_eq!(report.damaged_ranges, 0);
        assert_eq!(report.bytes + HEADER_LEN as u64, end);
    }
}

/// Zeros after the last record are padding only up to the end of its block, in a file that
/// ends on a block. More zeros than that (a lost write, an extent never written) are reported
/// as a torn tail, as before direct I/O.
#[test]
fn zeros_beyond_a_blocks_padding_are_a_torn_tail() {
    for (file_len, torn) in [(4096usize, false), (8192, true), (4000, true)] {
        let dir = tempfile::tempdir().unwrap();
        append_n(dir.path(), 3, 100);
        let seg = list_segments(dir.path()).unwrap().pop().unwrap().path;
        let mut data = fs::read(&seg).unwrap();
        let end = data.len();
        assert_eq!(end, HEADER_LEN + 3 * record_len("t", &[0; 100]) as usize);
        data.resize(file_len, 0);
        fs::write(&seg, &data).unwrap();
        let (got, report) = replay(dir.path());
        assert_eq!(got.len(), 3, "{file_len}");
        let expect = if torn { (file_len - end) as u64 } else { 0 };
        assert_eq!(report.torn_bytes, expect, "{file_len}");
    }
}

fn no_failure() -> Arc<Inject> {
    let i = Inject::default();
    i.fail_write.store(u64::MAX, Ordering::Relaxed);
    Arc::new(i)
}

/// Makes the `nth` direct write from now fail with `errno`.
fn fail_in(i: &Inject, nth: u64, errno: i32) {
    i.errno.store(errno, Ordering::Relaxed);
    i.fail_write
        .store(i.writes.load(Ordering::Relaxed) + nth, Ordering::Relaxed);
}

/// Failed direct writes, on ext4: a filesystem that refuses a direct write part-way through a
/// group (EINVAL on its second write) gets the group written buffered; an I/O error part-way
/// refuses the group and rolls it back; a segment that cannot be reopened for buffered writes
/// is fenced. In each case exactly the acknowledged records replay.
#[test]
fn failed_direct_writes_lose_nothing_acknowledged() {
    with_ext4(32, |root| {
        let big = Bytes::from(vec![9u8; DIRECT_CHUNK + 100]);
        let a = Bytes::from_static(b"a");
        let c = Bytes::from_static(b"c");
        let t = || Arc::<str>::from("t");
        let rt = rt();

        // EINVAL on the second write of a group: written buffered instead.
        let dir = root.join("einval");
        let inject = no_failure();
        rt.block_on(async {
            let wal = one_segment_wal(&dir, Some(&inject));
            assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), 1);
            wal.append(t(), KIND_OTLP, a.clone()).await.unwrap();
            fail_in(&inject, 1, libc::EINVAL);
            wal.append(t(), KIND_OTLP, big.clone()).await.unwrap();
            assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), 0);
            wal.append(t(), KIND_OTLP, c.clone()).await.unwrap();
            wal.shutdown().await;
        });
        let (got, report) = replay(&dir);
        assert!(got.iter().map(|r| &r.payload).eq([&a, &big, &c]));
        assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0));

        // EIO on the second write of a group: refused and rolled back; later groups go on.
        let dir = root.join("eio");
        let inject = no_failure();
        rt.block_on(async {
            let wal = one_segment_wal(&dir, Some(&inject));
            wal.append(t(), KIND_OTLP, a.clone()).await.unwrap();
            fail_in(&inject, 1, libc::EIO);
            assert!(wal.append(t(), KIND_OTLP, big.clone()).await.is_err());
            assert_eq!(wal.stats.write_errors.load(Ordering::Relaxed), 1);
            wal.append(t(), KIND_OTLP, c.clone()).await.unwrap();
            assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), 1);
            wal.shutdown().await;
        });
        let (got, report) = replay(&dir);
        assert!(got.iter().map(|r| &r.payload).eq([&a, &c]));
        assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0));

        // EINVAL, and the segment cannot be reopened for buffered writes: fenced.
        let dir = root.join("fenced");
        let inject = no_failure();
        rt.block_on(async {
            let wal = one_segment_wal(&dir, Some(&inject));
            wal.append(t(), KIND_OTLP, a.clone()).await.unwrap();
            inject.fail_reopen.store(true, Ordering::Relaxed);
            fail_in(&inject, 1, libc::EINVAL);
            assert!(wal.append(t(), KIND_OTLP, big.clone()).await.is_err());
            assert_eq!(wal.stats.fenced_segments.load(Ordering::Relaxed), 1);
            wal.append(t(), KIND_OTLP, c.clone()).await.unwrap();
            assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), 0);
            wal.shutdown().await;
        });
        assert_eq!(
            list_segments(&dir).unwrap().len(),
            2,
            "a new segment after the fenced one"
        );
        let (got, report) = replay(&dir);
        assert!(got.iter().map(|r| &r.payload).eq([&a, &c]));
        assert_eq!(report.damaged_ranges, 0);
    });
}

/// `direct_io: false`, and policies other than `Always`, write buffered: no padding.
#[test]
fn direct_io_off_writes_buffered() {
    for opts in [
        WalOptions {
            direct_io: false,
            ..Default::default()
        },
        WalOptions {
            fsync: FsyncPolicy::Never,
            ..Default::default()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let (wal, _) = Wal::open(
                dir.path(),
                opts,
                |_| {},
                Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
            )
            .unwrap();
            assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), 0);
            wal.append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"abc"))
                .await
                .unwrap();
            let seg = list_segments(dir.path()).unwrap().pop().unwrap().path;
            assert_eq!(
                fs::metadata(&seg).unwrap().len(),
                HEADER_LEN as u64 + record_len("t", b"abc")
            );
            wal.shutdown().await;
        });
    }
}
