//! Where blocks live.
//!
//! [`Storage`] is shaped like object storage, so the local filesystem and S3-compatible stores
//! fit it alike: whole-object writes, whole and ranged reads, prefix listing, deletes. There is
//! no rename, append or directory concept. Paths are `/`-separated keys without a leading `/`.
//!
//! Every backend must pass [`conformance::run`]. Wrappers such as [`CountingStorage`] compose
//! around any backend and are themselves a [`Storage`].
//!
//! Backends: [`LocalStorage`] (files under a directory), [`MemoryStorage`] (tests) and
//! [`S3Storage`] (any S3-compatible object store, through the `object_store` crate).

use async_trait::async_trait;
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

mod counting;
mod local;
mod memory;
mod s3;
pub use counting::{CountingStorage, StorageMetrics};
pub use local::LocalStorage;
pub use memory::MemoryStorage;
pub use s3::{S3Config, S3ConfigError, S3Retry, S3Storage};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("object not found: {0}")]
    NotFound(String),
    #[error("invalid object path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("range {start}..{end} is outside object {path} of {size} bytes")]
    BadRange {
        path: String,
        start: u64,
        end: u64,
        size: u64,
    },
    #[error("storage i/o error on {path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A remote store failed: a server error that outlasted the retries, a refused request, a
    /// network failure. The object is as the [`Storage`] contract says for an `Err`.
    #[error("storage backend error in {op} of {path:?}: {}", with_causes(&**.source))]
    Backend {
        op: &'static str,
        path: String,
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// An error and its chain of causes, each once: "error sending request" alone does not say
/// that the server's certificate was untrusted, its cause does.
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

impl StorageError {
    /// A short stable name of the variant, for metric labels and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StorageError::NotFound(_) => "not_found",
            StorageError::InvalidPath { .. } => "invalid_path",
            StorageError::BadRange { .. } => "bad_range",
            StorageError::Io { .. } => "io",
            StorageError::Backend { .. } => "backend",
        }
    }

    /// Whether a later attempt may succeed: the store could not be reached or failed on its
    /// side (a server error that outlasted the retries, a timeout, a reset connection, a local
    /// I/O error other than a short read). A missing object, a range past its end, a short
    /// read and an invalid path are final: the object is not what the caller expected, and
    /// asking again gives the same answer.
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Io { source, .. } => source.kind() != std::io::ErrorKind::UnexpectedEof,
            StorageError::Backend { .. } => true,
            StorageError::NotFound(_) | StorageError::InvalidPath { .. } | StorageError::BadRange { .. } => false,
        }
    }
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub path: String,
    pub size: u64,
}

/// An object store.
///
/// Contract for every method: on `Ok` the operation is complete and durable (a later call, in
/// this process or after a crash, observes it); on `Err` the object is either unchanged or, for
/// `put`, absent or complete — never partially written. Methods are cancel safe in the same
/// sense: dropping a future leaves each object either as before or as after the call.
#[async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug + 'static {
    /// Writes a whole object, replacing any object at `path`. Readers see the old object, or the
    /// new one complete, never a mix.
    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError>;

    /// Reads a whole object. Returns [`StorageError::NotFound`] if it does not exist.
    async fn get(&self, path: &str) -> Result<Bytes, StorageError>;

    /// Reads `range` of an object. A range reaching past the end is [`StorageError::BadRange`].
    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError>;

    /// Lists every object whose path starts with `prefix`, in lexicographic path order.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError>;

    /// Deletes an object. Returns `Ok(())` if the object did not exist.
    async fn delete(&self, path: &str) -> Result<(), StorageError>;

    /// Writes a whole object only if none exists at `path` (S3's `If-None-Match: *`). Returns
    /// `true` if this call created it, `false` if an object was already there (left as it
    /// was). Of several concurrent calls, from any number of processes, exactly one returns
    /// `true`. Compactors build their leases on it.
    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError>;

    /// Whether a read is work for this machine's CPU (a page-cache copy from local disk, or
    /// memory) rather than waiting on a remote store. The query workers count local reads
    /// against their cores and let remote ones wait without a core. By default, false.
    fn reads_are_local(&self) -> bool {
        false
    }
}

/// A shared store is a store, so wrappers compose around `Arc<dyn Storage>` too.
#[async_trait]
impl<S: Storage + ?Sized> Storage for Arc<S> {
    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError> {
        (**self).put(path, data).await
    }
    async fn get(&self, path: &str) -> Result<Bytes, StorageError> {
        (**self).get(path).await
    }
    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        (**self).get_range(path, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        (**self).list(prefix).await
    }
    async fn delete(&self, path: &str) -> Result<(), StorageError> {
        (**self).delete(path).await
    }
    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError> {
        (**self).put_if_absent(path, data).await
    }
    fn reads_are_local(&self) -> bool {
        (**self).reads_are_local()
    }
}

/// Rejects paths that could escape a root or that object stores treat specially.
pub fn validate_path(path: &str) -> Result<(), StorageError> {
    let bad = |reason| {
        Err(StorageError::InvalidPath {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("empty");
    }
    if path.starts_with('/') || path.ends_with('/') {
        return bad("leading or trailing '/'");
    }
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad("empty, '.' or '..' segment");
        }
        if part.starts_with(".tmp-") {
            return bad("'.tmp-' prefix is reserved");
        }
    }
    Ok(())
}

/// The conformance suite. Call [`conformance::run`] from each backend's tests.
pub mod conformance {
    use super::*;

    /// Exercises the whole [`Storage`] contract. Panics with a message on the first violation.
    /// `store` must be empty.
    pub async fn run(store: &dyn Storage) {
        // create-only writes: the first wins, the object stays the first one's.
        assert!(
            store
                .put_if_absent("lease/t/1", Bytes::from_static(b"first"))
                .await
                .unwrap()
        );
        assert!(
            !store
                .put_if_absent("lease/t/1", Bytes::from_static(b"second"))
                .await
                .unwrap()
        );
        assert_eq!(store.get("lease/t/1").await.unwrap(), Bytes::from_static(b"first"));
        store.delete("lease/t/1").await.unwrap();
        assert!(
            store
                .put_if_absent("lease/t/1", Bytes::from_static(b"third"))
                .await
                .unwrap()
        );
        assert_eq!(store.get("lease/t/1").await.unwrap(), Bytes::from_static(b"third"));
        store.delete("lease/t/1").await.unwrap();

        // put / get round trip, overwrite.
        store.put("a/b/one", Bytes::from_static(b"hello world")).await.unwrap();
        assert_eq!(store.get("a/b/one").await.unwrap(), Bytes::from_static(b"hello world"));
        store.put("a/b/one", Bytes::from_static(b"replaced")).await.unwrap();
        assert_eq!(store.get("a/b/one").await.unwrap(), Bytes::from_static(b"replaced"));

        // empty objects are objects.
        store.put("a/empty", Bytes::new()).await.unwrap();
        assert_eq!(store.get("a/empty").await.unwrap().len(), 0);

        // ranged reads.
        store.put("r", Bytes::from_static(b"0123456789")).await.unwrap();
        assert_eq!(store.get_range("r", 2..5).await.unwrap(), Bytes::from_static(b"234"));
        assert_eq!(
            store.get_range("r", 0..10).await.unwrap(),
            Bytes::from_static(b"0123456789")
        );
        assert_eq!(store.get_range("r", 10..10).await.unwrap().len(), 0);
        assert!(matches!(
            store.get_range("r", 5..11).await,
            Err(StorageError::BadRange { .. })
        ));

        // missing objects.
        assert!(matches!(store.get("nope").await, Err(StorageError::NotFound(_))));
        assert!(matches!(
            store.get_range("nope", 0..1).await,
            Err(StorageError::NotFound(_))
        ));

        // listing: prefix, order, sizes, no directories.
        store.put("a/c", Bytes::from_static(b"xy")).await.unwrap();
        let listed = store.list("a/").await.unwrap();
        let paths: Vec<&str> = listed.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(paths, vec!["a/b/one", "a/c", "a/empty"]);
        assert_eq!(listed[1].size, 2);
        assert_eq!(store.list("zzz").await.unwrap(), vec![]);
        let all = store.list("").await.unwrap();
        assert_eq!(all.len(), 4);

        // delete, idempotent.
        store.delete("a/c").await.unwrap();
        store.delete("a/c").await.unwrap();
        assert!(matches!(store.get("a/c").await, Err(StorageError::NotFound(_))));
        assert_eq!(store.list("a/").await.unwrap().len(), 2);

        // invalid paths are refused, never resolved outside the root.
        for bad in ["", "/abs", "x/../y", "x//y", "trail/"] {
            assert!(
                matches!(
                    store.put(bad, Bytes::new()).await,
                    Err(StorageError::InvalidPath { .. })
                ),
                "put({bad:?}) must be refused"
            );
        }

        // larger objects and concurrent writers to distinct keys.
        let big = Bytes::from((0..(3 << 20)).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        store.put("big", big.clone()).await.unwrap();
        assert_eq!(
            store.get_range("big", 1_000_000..1_000_100).await.unwrap(),
            big.slice(1_000_000..1_000_100)
        );
        let mut tasks = Vec::new();
        for i in 0..16 {
            tasks.push(store.put(
                Box::leak(format!("c/{i:02}").into_boxed_str()),
                Bytes::from(vec![i as u8; 1000]),
            ));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(store.list("c/").await.unwrap().len(), 16);
    }
}

thread_local! {
    static IO_INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with local-disk I/O done inline on this thread rather than handed to the blocking
/// pool: for a thread that is itself a blocking-pool thread driving storage futures with
/// `Handle::block_on` (the query runners). A hand-off costs a context switch each way, and
/// on a VM each one leaves a core idle for a while (docs/benchmarks/query-parallelism.md).
pub fn with_io_inline<R>(f: impl FnOnce() -> R) -> R {
    let before = IO_INLINE.with(|c| c.replace(true));
    let out = f();
    IO_INLINE.with(|c| c.set(before));
    out
}

/// Whether [`with_io_inline`] is in effect on this thread.
pub(crate) fn io_inline() -> bool {
    IO_INLINE.with(|c| c.get())
}
