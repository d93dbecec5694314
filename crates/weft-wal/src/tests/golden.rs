//! The committed golden segments (`testdata/golden`): read by every later build, and written
//! again for a new format.

use super::*;

/// The number the reused golden segment was written as (its records carry it).
const REUSED_GOLDEN_SEQ: u64 = 7;

/// Committed segments stay readable by later builds. Format 1: one written buffered and one as
/// a crash left it under direct I/O (padded with zeros to its block). Format 2: the same two,
/// and a reused segment as a crash leaves it (its records, the padding of its block, then the
/// records of the file's previous incarnation).
#[test]
fn golden_segments_replay() {
    for (name, seq) in [
        ("buffered.wal", 1),
        ("direct-padded.wal", 1),
        ("v2-buffered.wal", 1),
        ("v2-direct-padded.wal", 1),
        ("v2-reused.wal", REUSED_GOLDEN_SEQ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        fs::copy(golden_dir().join(name), segment_path(dir.path(), seq)).unwrap();
        let (got, report) = replay(dir.path());
        let got: Vec<(String, Bytes)> = got.into_iter().map(|r| (r.tenant.to_string(), r.payload)).collect();
        let want: Vec<(String, Bytes)> = golden_records().into_iter().map(|(t, p)| (t.to_string(), p)).collect();
        assert!(got == want, "{name} replays differently");
        assert_eq!((report.torn_bytes, report.damaged_ranges), (0, 0), "{name}");
    }
    for name in ["direct-padded.wal", "v2-direct-padded.wal"] {
        let padded = fs::metadata(golden_dir().join(name)).unwrap().len();
        assert_eq!(
            padded % BLOCK as u64,
            0,
            "the padded golden segment {name} ends on a block"
        );
    }
    let reused = fs::read(golden_dir().join("v2-reused.wal")).unwrap();
    let own: u64 = golden_records().iter().map(|(t, p)| record_len(t, p)).sum();
    assert!(
        reused.len() as u64 > (HEADER_LEN as u64 + own).next_multiple_of(BLOCK as u64) + 4096,
        "the reused golden segment holds older records after its own"
    );
}

/// Writes this format's golden segments again: `cargo test -p weft-wal write_golden --
/// --ignored`. Only for a new format; the committed files are what older builds wrote, and
/// format 1's (`buffered.wal`, `direct-padded.wal`) cannot be written any more.
#[test]
#[ignore]
fn write_golden() {
    let out = golden_dir();
    fs::create_dir_all(&out).unwrap();
    let sink = || Box::new(VecSink(Arc::new(Mutex::new(Vec::new()))));
    for (name, direct) in [("v2-buffered.wal", false), ("v2-direct-padded.wal", true)] {
        let dir = tempfile::tempdir().unwrap();
        assert!(!direct || direct_supported(dir.path()));
        rt().block_on(async {
            let opts = WalOptions {
                segment_bytes: 1 << 30,
                direct_io: direct,
                ..Default::default()
            };
            let (wal, _) = Wal::open(dir.path(), opts, |_| {}, sink()).unwrap();
            for (t, p) in golden_records() {
                wal.append(Arc::from(t), KIND_OTLP, p).await.unwrap();
            }
            let seg = list_segments(dir.path()).unwrap().pop().unwrap().path;
            fs::copy(&seg, out.join(name)).unwrap();
            wal.shutdown().await;
        });
    }
    // A reused segment: older segments are filled and freed, then covering the active one
    // rolls it into a free file, where the golden records go first.
    let dir = tempfile::tempdir().unwrap();
    assert!(direct_supported(dir.path()));
    rt().block_on(async {
        let opts = WalOptions {
            segment_bytes: 16 << 10,
            ..Default::default()
        };
        let (wal, _) = Wal::open(dir.path(), opts, |_| {}, sink()).unwrap();
        let mut last = None;
        for i in 0..60u32 {
            let filler = Bytes::from((0..1500).map(|j| (i * 13 + j) as u8).collect::<Vec<u8>>());
            last = Some(wal.append(Arc::from("old"), KIND_OTLP, filler).await.unwrap());
        }
        let last = last.unwrap();
        wal.truncate_before(last);
        wal.truncate_before(WalPos {
            segment: last.segment,
            offset: u64::MAX,
        });
        let mut seq = 0;
        for (t, p) in golden_records() {
            seq = wal.append(Arc::from(t), KIND_OTLP, p).await.unwrap().segment;
        }
        assert_eq!(seq, REUSED_GOLDEN_SEQ);
        assert_eq!(wal.stats.reused_segments.load(Ordering::Relaxed), 1);
        fs::copy(segment_path(dir.path(), seq), out.join("v2-reused.wal")).unwrap();
        wal.shutdown().await;
    });
}
