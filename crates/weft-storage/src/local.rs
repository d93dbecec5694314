use super::*;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Objects as files under a root directory.
///
/// `put` writes `<dir>/.tmp-<uuid>`, syncs it, renames it over the target and syncs the
/// directory, so a crash leaves the old object or the new one. Leftover `.tmp-` files from a
/// crash are ignored by `list` and removed by [`LocalStorage::new`].
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StorageError + '_ {
    move |source| StorageError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl LocalStorage {
    /// Opens (creating) a store rooted at `root`, and removes temporary files left by a crash.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, StorageError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_err(&root))?;
        let s = LocalStorage { root };
        s.sweep_tmp(&s.root.clone());
        Ok(s)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn sweep_tmp(&self, dir: &Path) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with(".tmp-") {
                let _ = fs::remove_file(&p);
            } else if p.is_dir() {
                self.sweep_tmp(&p);
            }
        }
    }

    fn full(&self, path: &str) -> Result<PathBuf, StorageError> {
        validate_path(path)?;
        Ok(self.root.join(path))
    }

    /// Writes `data` to a new temporary file beside `full`, synced. Returns its path.
    fn write_tmp(full: &Path, data: &[u8]) -> Result<PathBuf, StorageError> {
        let dir = full.parent().expect("object paths have a parent");
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        let res = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            f.sync_all()
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res.map(|()| tmp).map_err(io_err(full))
    }

    fn put_sync(full: &Path, data: &[u8]) -> Result<(), StorageError> {
        let tmp = Self::write_tmp(full, data)?;
        let dir = full.parent().expect("object paths have a parent");
        let res = fs::rename(&tmp, full).and_then(|()| File::open(dir)?.sync_all());
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res.map_err(io_err(full))
    }

    /// Writes a temporary file, then hard-links it to `full`: the link fails if `full`
    /// exists, atomically, also against other processes on the same filesystem.
    fn put_if_absent_sync(full: &Path, data: &[u8]) -> Result<bool, StorageError> {
        let tmp = Self::write_tmp(full, data)?;
        let dir = full.parent().expect("object paths have a parent");
        let res = (|| {
            let created = match fs::hard_link(&tmp, full) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                Err(e) => return Err(e),
            };
            fs::remove_file(&tmp)?;
            File::open(dir)?.sync_all()?;
            Ok(created)
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res.map_err(io_err(full))
    }

    fn list_sync(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        // Walk only the deepest directory the prefix names.
        let dir_part = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let start = if dir_part.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir_part)
        };
        let mut out = Vec::new();
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&dir)(e)),
            };
            for e in rd {
                let e = e.map_err(io_err(&dir))?;
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(".tmp-") {
                    continue;
                }
                let p = e.path();
                let ft = e.file_type().map_err(io_err(&p))?;
                if ft.is_dir() {
                    stack.push(p);
                } else if ft.is_file() {
                    let rel = p
                        .strip_prefix(&self.root)
                        .expect("under root")
                        .to_string_lossy()
                        .replace('\\', "/");
                    if rel.starts_with(prefix) {
                        let size = e.metadata().map_err(io_err(&p))?.len();
                        out.push(ObjectMeta { path: rel, size });
                    }
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

fn not_found(path: &str) -> impl Fn(std::io::Error) -> StorageError + '_ {
    move |e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            StorageError::NotFound(path.to_string())
        } else {
            StorageError::Io {
                path: path.to_string(),
                source: e,
            }
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    if crate::io_inline() {
        return f();
    }
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StorageError::Io {
            path: String::new(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

#[async_trait]
impl Storage for LocalStorage {
    fn reads_are_local(&self) -> bool {
        true
    }

    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError> {
        let full = self.full(path)?;
        blocking(move || Self::put_sync(&full, &data)).await
    }

    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError> {
        let full = self.full(path)?;
        blocking(move || Self::put_if_absent_sync(&full, &data)).await
    }

    async fn get(&self, path: &str) -> Result<Bytes, StorageError> {
        let full = self.full(path)?;
        let p = path.to_string();
        blocking(move || fs::read(&full).map(Bytes::from).map_err(not_found(&p))).await
    }

    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let full = self.full(path)?;
        let p = path.to_string();
        blocking(move || {
            let mut f = File::open(&full).map_err(not_found(&p))?;
            let size = f.metadata().map_err(not_found(&p))?.len();
            if range.start > range.end || range.end > size {
                return Err(StorageError::BadRange {
                    path: p,
                    start: range.start,
                    end: range.end,
                    size,
                });
            }
            // Read into uninitialised capacity: `read_to_end` on a `File` does not zero it first.
            // Zeroing a multi-megabyte column chunk only to overwrite it cost a second pass
            // over freshly mapped pages on every row-group read.
            let len = range.end - range.start;
            let mut buf = Vec::with_capacity(len as usize);
            f.seek(SeekFrom::Start(range.start))
                .and_then(|_| (&mut f).take(len).read_to_end(&mut buf))
                .map_err(not_found(&p))?;
            if buf.len() as u64 != len {
                return Err(StorageError::Io {
                    path: p,
                    source: std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("read {} of {len} bytes (the file shrank)", buf.len()),
                    ),
                });
            }
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let s = self.clone();
        let prefix = prefix.to_string();
        blocking(move || s.list_sync(&prefix)).await
    }

    async fn delete(&self, path: &str) -> Result<(), StorageError> {
        let full = self.full(path)?;
        let p = path.to_string();
        blocking(move || match fs::remove_file(&full) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::Io { path: p, source: e }),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_storage_conforms() {
        let dir = tempfile::tempdir().unwrap();
        conformance::run(&LocalStorage::new(dir.path()).unwrap()).await;
    }

    #[tokio::test]
    async fn leftover_tmp_files_are_swept_and_never_listed() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("x")).unwrap();
        fs::write(dir.path().join("x/.tmp-crashed"), b"partial").unwrap();
        let s = LocalStorage::new(dir.path()).unwrap();
        assert!(s.list("").await.unwrap().is_empty());
        assert!(!dir.path().join("x/.tmp-crashed").exists());
    }
}
