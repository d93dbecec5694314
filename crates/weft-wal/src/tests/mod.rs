//! The WAL's tests, by topic, and the helpers they share: logs opened, written and replayed
//! in a temporary directory, an ext4 mount, direct I/O support, and the golden records.

mod append;
mod damage;
mod direct_writes;
mod disk_full;
mod golden;
mod reuse;

use super::*;
use crate::direct_io::{BLOCK, open_direct};
use crate::record::record_len;
use crate::segment::{HEADER_LEN, segment_path};
use std::fs::File;
use std::io::Write;
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

fn append_n(dir: &Path, n: u8, size: usize) -> Vec<WalPos> {
    let rt = rt();
    rt.block_on(async {
        let (wal, _) = open(dir, &Arc::new(Mutex::new(Vec::new())));
        let mut out = Vec::new();
        for i in 0..n {
            out.push(
                wal.append(Arc::from("t"), KIND_OTLP, Bytes::from(vec![i; size]))
                    .await
                    .unwrap(),
            );
        }
        wal.shutdown().await;
        out
    })
}

/// Opens a log in `dir` whose segments never roll (1 GiB), with `inject`'s failures if any.
fn one_segment_wal(dir: &Path, inject: Option<&Arc<Inject>>) -> Wal {
    Wal::open(
        dir,
        WalOptions {
            segment_bytes: 1 << 30,
            inject: inject.cloned(),
            ..Default::default()
        },
        |_| {},
        Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
    )
    .unwrap()
    .0
}

fn replay(dir: &Path) -> (Vec<Record>, ReplayReport) {
    let mut got = Vec::new();
    let (_w, report) = Wal::open(
        dir,
        WalOptions {
            segment_bytes: 1 << 30,
            ..Default::default()
        },
        |r| got.push(r),
        Box::new(VecSink(Arc::new(Mutex::new(Vec::new())))),
    )
    .unwrap();
    (got, report)
}

/// Runs `f` with a fresh ext4 filesystem of `mib` MiB (a loop-mounted image) at a fresh
/// directory, where the WAL writes with direct I/O. Needs root, `mkfs.ext4` and loop devices,
/// like the tmpfs tests' `mount`; fails loudly without them.
fn with_ext4(mib: u64, f: impl FnOnce(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    File::create(&img).unwrap().set_len(mib << 20).unwrap();
    let st = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .status()
        .expect("run mkfs.ext4");
    assert!(st.success(), "mkfs.ext4 failed");
    let st = std::process::Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .status()
        .expect("run mount");
    assert!(
        st.success(),
        "loop-mounting an ext4 image failed (needs root and loop devices)"
    );
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mnt)));
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(p) = res {
        std::panic::resume_unwind(p);
    }
}

/// Whether `dir`'s filesystem accepts `O_DIRECT` (tmpfs does only since Linux 6.6).
fn direct_supported(dir: &Path) -> bool {
    let p = dir.join("probe");
    File::create(&p).unwrap();
    let ok = open_direct(&p).is_ok();
    fs::remove_file(&p).unwrap();
    ok
}

/// The records of the committed golden segments (`testdata/golden`).
fn golden_records() -> Vec<(&'static str, Bytes)> {
    vec![
        ("t1", Bytes::from_static(b"golden record one")),
        (
            "tenant-b",
            Bytes::from((0..5000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>()),
        ),
        ("t1", Bytes::from_static(b"three")),
    ]
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden")
}
