use super::*;
use std::sync::Mutex;

struct VecSink(Arc<Mutex<Vec<Record>>>);

impl CommitSink for VecSink {
    fn committed(&mut self, records: Vec<Record>) {
        self.0.lock().unwrap().extend(records);
    }
}

fn open(dir: &Path, seen: &Arc<Mutex<Vec<Record>>>) -> (Wal, Vec<Record>) {
    let mut replayed = Vec::new();
    let (wal, _) = Wal::open(
        dir,
        WalOptions {
            segment_bytes: 4096,
            ..Default::default()
        },
        |r| replayed.push(r),
        Box::new(VecSink(seen.clone())),
    )
    .unwrap();
    (wal, replayed)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn appends_reach_sink_in_order_and_replay_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rt = rt();
    rt.block_on(async {
        let (wal, replayed) = open(dir.path(), &seen);
        assert!(replayed.is_empty());
        let mut handles = Vec::new();
        for i in 0..200u32 {
            let w = wal.clone();
            handles.push(tokio::spawn(async move {
                w.append(Arc::from("t1"), KIND_OTLP, Bytes::from(vec![i as u8; 100 + i as usize]))
                    .await
                    .unwrap()
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        wal.shutdown().await;
    });
    let sink = seen.lock().unwrap().clone();
    assert_eq!(sink.len(), 200);
    assert!(
        sink.windows(2).all(|w| w[0].pos < w[1].pos),
        "sink order follows log order"
    );
    let (_wal2, replayed) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
    assert_eq!(replayed.len(), 200);
    for (a, b) in sink.iter().zip(&replayed) {
        assert_eq!(a.pos, b.pos);
        assert_eq!(a.payload, b.payload);
        assert_eq!(&*b.tenant, "t1");
    }
}

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
    let seg = list_segments(dir.path()).unwrap().last().unwrap().path.clone();
    let mut half = Vec::new();
    encode_record(&mut half, KIND_OTLP, "t", &[9; 50]);
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

#[test]
fn truncate_before_deletes_only_covered_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rt = rt();
    rt.block_on(async {
        let (wal, _) = open(dir.path(), &seen);
        let mut last = WalPos::default();
        for i in 0..50u8 {
            last = wal
                .append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; 500]))
                .await
                .unwrap();
        }
        let before = list_segments(dir.path()).unwrap().len();
        assert!(before > 3, "small segments roll");
        wal.truncate_before(last);
        wal.shutdown().await;
        let after = list_segments(dir.path()).unwrap();
        assert!(after.len() < before);
        assert!(after.iter().all(|s| s.seq >= last.segment));
    });
    let (_w, replayed) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
    assert!(
        replayed.iter().any(|r| r.payload[0] == 49),
        "the last record is still there"
    );
}

#[test]
fn positions_grow_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let a = rt.block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        let p = wal
            .append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"x"))
            .await
            .unwrap();
        wal.shutdown().await;
        p
    });
    let b = rt.block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        let p = wal
            .append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"y"))
            .await
            .unwrap();
        wal.shutdown().await;
        p
    });
    assert!(b > a);
}

mod model {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever prefix of the newest segment survives a crash, replay returns exactly a
        /// prefix of the appended records, never garbage and never a panic.
        #[test]
        fn replay_after_any_cut_is_a_prefix(sizes in proptest::collection::vec(0usize..300, 1..40), cut in 0usize..20_000) {
            let dir = tempfile::tempdir().unwrap();
            let rt = rt();
            let payloads: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
            rt.block_on(async {
                let (wal, _) = Wal::open(dir.path(), WalOptions { segment_bytes: 1 << 30, ..Default::default() }, |_| {}, Box::new(VecSink(Arc::new(Mutex::new(Vec::new()))))).unwrap();
                for p in &payloads {
                    wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(p.clone())).await.unwrap();
                }
                wal.shutdown().await;
            });
            let seg = list_segments(dir.path()).unwrap().last().unwrap().path.clone();
            let data = fs::read(&seg).unwrap();
            let keep = cut.min(data.len());
            fs::write(&seg, &data[..keep]).unwrap();
            let mut got = Vec::new();
            let res = Wal::open(dir.path(), WalOptions::default(), |r| got.push(r.payload.to_vec()), Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))));
            if keep < HEADER_LEN {
                prop_assert!(res.is_ok());
                prop_assert!(got.is_empty());
            } else {
                prop_assert!(res.is_ok());
                prop_assert!(got.len() <= payloads.len());
                prop_assert_eq!(&got[..], &payloads[..got.len()]);
            }
        }
    }
}
