//! A full disk (a small tmpfs or ext4 mount): appends refused and rolled back, the log opened
//! and recovering once space returns, and every acknowledged record kept.

use super::*;

/// Runs `f` with a tmpfs of `kib` KiB mounted at a fresh directory; the disk-full tests need
/// root (CI and the dev machines run as root) and fail loudly without it.
fn with_tmpfs(kib: u64, f: impl FnOnce(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
        .arg(dir.path())
        .status()
        .expect("run mount");
    assert!(
        st.success(),
        "mounting a tmpfs for the disk-full test failed (needs root)"
    );
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(dir.path())));
    let _ = std::process::Command::new("umount").arg(dir.path()).status();
    if let Err(p) = res {
        std::panic::resume_unwind(p);
    }
}

/// Regression (issue 13, points 1 and 2): after ENOSPC, the WAL appended acknowledged records
/// after torn bytes, and replay cut them. Now a failed write is rolled back, appends are
/// refused while the disk is full, the log recovers once space returns, and every
/// acknowledged record replays.
#[test]
fn disk_full_refuses_then_recovers_and_loses_nothing_acknowledged() {
    with_tmpfs(256, |root| {
        fs::write(root.join("filler"), vec![7u8; 150 << 10]).unwrap();
        // tmpfs takes O_DIRECT since Linux 6.6.
        let direct = direct_supported(root);
        fill_then_free(root, direct);
    });
}

/// The same on ext4, where the WAL writes with direct I/O: a failed direct write is rolled
/// back like a buffered one.
#[test]
fn disk_full_with_direct_io_loses_nothing_acknowledged() {
    with_ext4(4, |root| {
        // Leave about 100 KiB free.
        let st = free_bytes(root);
        fs::write(root.join("filler"), vec![7u8; st.saturating_sub(100 << 10) as usize]).unwrap();
        fill_then_free(root, true);
    });
}

fn free_bytes(dir: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .expect("run df");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df's free bytes")
}

/// Appends to a WAL in `root/wal` until the disk (already nearly full, with `root/filler`)
/// refuses 20 of them, deletes the filler, appends 20 more, and checks that every
/// acknowledged record replays and that the log was written with direct I/O if `direct`.
fn fill_then_free(root: &Path, direct: bool) {
    let wal_dir = root.join("wal");
    let filler = root.join("filler");
    let rt = rt();
    let acked = rt.block_on(async {
        let (wal, _) = Wal::open(
            &wal_dir,
            WalOptions {
                segment_bytes: 32 << 10,
                ..Default::default()
            },
            |_| {},
            Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
        )
        .unwrap();
        assert_eq!(wal.stats.direct_io.load(Ordering::Relaxed), direct as u64);
        let mut acked = Vec::new();
        let mut refused = 0;
        let mut i = 0u32;
        while refused < 20 {
            i += 1;
            let payload = Bytes::from(format!("{i:08}").repeat(300));
            match wal.append(Arc::from("t"), KIND_OTLP, payload.clone()).await {
                Ok(_) => acked.push(payload),
                Err(_) => refused += 1,
            }
            assert!(i < 10_000, "the disk never filled");
        }
        assert!(
            wal.stats.write_errors.load(Ordering::Relaxed) > 0,
            "writes failed part-way and were rolled back"
        );
        // Space returns: the WAL recovers by itself.
        fs::remove_file(&filler).unwrap();
        for _ in 0..20 {
            i += 1;
            let payload = Bytes::from(format!("{i:08}").repeat(300));
            wal.append(Arc::from("t"), KIND_OTLP, payload.clone())
                .await
                .expect("appends succeed once space returns");
            acked.push(payload);
        }
        assert_eq!(wal.stats.unwritable.load(Ordering::Relaxed), 0);
        wal.shutdown().await;
        acked
    });
    let mut got = Vec::new();
    let (_w, report) = Wal::open(
        &wal_dir,
        WalOptions::default(),
        |r| got.push(r.payload),
        Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
    )
    .unwrap();
    assert_eq!(report.damaged_ranges, 0, "no record follows torn bytes");
    assert_eq!(got, acked, "every acknowledged record replays, in order");
}

/// Regression (issue 13, point 4): weft could not start on a full disk. The log opens, refuses
/// appends as unavailable, and starts writing once space returns.
#[test]
fn opens_on_a_full_disk_and_becomes_writable_when_space_returns() {
    with_tmpfs(64, |root| {
        let wal_dir = root.join("wal");
        append_n(&wal_dir, 3, 100);
        let filler = root.join("filler");
        // Fill the disk to the last byte.
        let mut f = File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let mut one = [0u8; 1];
        while f.write_all(&one[..]).is_ok() {
            one[0] = 1;
        }
        drop(f);
        let rt = rt();
        rt.block_on(async {
            let mut got = 0;
            let (wal, _) = Wal::open(
                &wal_dir,
                WalOptions::default(),
                |_| got += 1,
                Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
            )
            .unwrap();
            assert_eq!(got, 3, "replay works on a full disk");
            assert_eq!(wal.stats.unwritable.load(Ordering::Relaxed), 1);
            let err = wal
                .append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"x"))
                .await
                .unwrap_err();
            assert!(matches!(err, WalError::Unavailable(_)), "{err}");
            fs::remove_file(&filler).unwrap();
            wal.append(Arc::from("t"), KIND_OTLP, Bytes::from_static(b"y"))
                .await
                .unwrap();
            assert_eq!(wal.stats.unwritable.load(Ordering::Relaxed), 0);
            wal.shutdown().await;
        });
        let (got, _) = replay(&wal_dir);
        assert_eq!(got.len(), 4);
    });
}
