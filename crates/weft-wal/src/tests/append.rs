//! Appending: records reach the sink in log order and replay after a restart, positions grow,
//! segments roll and are truncated, and appends close together share a sync.

use super::*;

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

/// Regression (issue 13, point 2): a leftover header-less next segment made every later roll
/// fail with "File exists", so the active segment grew without bound.
#[test]
fn leftover_empty_next_segment_does_not_block_rolling() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let (wal, _) = open(dir.path(), &Arc::new(Mutex::new(Vec::new())));
        let first = wal
            .append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![1; 100]))
            .await
            .unwrap();
        // What a failed roll of an older build left behind.
        fs::write(segment_path(dir.path(), first.segment + 1), b"WEF").unwrap();
        let mut last = first;
        for i in 0..30u8 {
            last = wal
                .append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; 500]))
                .await
                .unwrap();
        }
        assert!(last.segment > first.segment + 2, "segments keep rolling: {last:?}");
        wal.shutdown().await;
    });
}

/// A WAL in `dir` with the given group wait, and the records its sink has been handed.
fn open_with_group_wait(dir: &Path, group_wait: Duration) -> (Arc<Wal>, Arc<Mutex<Vec<Record>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let opts = WalOptions {
        group_wait,
        ..Default::default()
    };
    let (wal, _) = Wal::open(dir, opts, |_| {}, Box::new(VecSink(seen.clone()))).unwrap();
    (Arc::new(wal), seen)
}

/// Requests close together share one fsync (the group waits for them), and a lone request is
/// not held back by the wait.
#[test]
fn close_appends_share_a_sync_and_a_lone_one_does_not_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, seen) = open_with_group_wait(dir.path(), Duration::from_millis(100));
    let rt = rt();
    rt.block_on(async {
        // A lone append, long after any other: answered without the 100 ms wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        wal.append(Arc::from("t"), 1, Bytes::from_static(b"alone"))
            .await
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(60),
            "a lone append waited {:?}",
            t.elapsed()
        );
        // An announced append holds the group open until it arrives.
        let syncs = wal.stats.syncs.load(Ordering::Relaxed);
        let coming = wal.announce();
        let first = {
            let wal = wal.clone();
            tokio::spawn(async move { wal.append(Arc::from("t"), 1, Bytes::from_static(b"a")).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        wal.append_announced(coming, Arc::from("t"), 1, Bytes::from_static(b"b"))
            .await
            .unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(wal.stats.syncs.load(Ordering::Relaxed) - syncs, 1, "both in one sync");
        // Appends arriving faster than the wait: once the stream is seen (its first ten), the
        // rest share syncs.
        let mut syncs = 0;
        let mut tasks = Vec::new();
        for i in 0..40u8 {
            if i == 10 {
                syncs = wal.stats.syncs.load(Ordering::Relaxed);
            }
            let wal = wal.clone();
            tasks.push(tokio::spawn(async move {
                wal.append(Arc::from("t"), 1, Bytes::from(vec![i])).await
            }));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let used = wal.stats.syncs.load(Ordering::Relaxed) - syncs;
        assert!(used <= 15, "30 appends 2 ms apart took {used} syncs");
    });
    assert_eq!(seen.lock().unwrap().len(), 43);
}

/// A busy writer sleeps through its group's wait without being woken by each append, but a
/// queue that reaches a group's worth of bytes wakes it: a large group is not held back.
#[test]
fn busy_group_is_written_early_once_a_megabyte_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    // A wait longer than the writer's starting estimate of the gap between appends (1 s), so
    // the writer counts as busy from the first append.
    let (wal, seen) = open_with_group_wait(dir.path(), Duration::from_secs(5));
    rt().block_on(async {
        let t = Instant::now();
        let syncs = wal.stats.syncs.load(Ordering::Relaxed);
        let small = {
            let wal = wal.clone();
            tokio::spawn(async move { wal.append(Arc::from("t"), 1, Bytes::from_static(b"small")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let big = {
            let wal = wal.clone();
            tokio::spawn(async move { wal.append(Arc::from("t"), 1, Bytes::from(vec![7u8; 1 << 20])).await })
        };
        small.await.unwrap().unwrap();
        big.await.unwrap().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a megabyte queued did not end the 5 s wait: {:?}",
            t.elapsed()
        );
        assert_eq!(wal.stats.syncs.load(Ordering::Relaxed) - syncs, 1, "both in one group");
    });
    assert_eq!(seen.lock().unwrap().len(), 2);
}
