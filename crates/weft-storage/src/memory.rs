use super::*;
use parking_lot::RwLock;
use std::collections::BTreeMap;

/// An in-process store, for tests and as a reference for the contract.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    objects: RwLock<BTreeMap<String, Bytes>>,
}

impl MemoryStorage {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    fn reads_are_local(&self) -> bool {
        true
    }

    async fn put(&self, path: &str, data: Bytes) -> Result<(), StorageError> {
        validate_path(path)?;
        self.objects.write().insert(path.to_string(), data);
        Ok(())
    }

    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<bool, StorageError> {
        validate_path(path)?;
        let mut objects = self.objects.write();
        if objects.contains_key(path) {
            return Ok(false);
        }
        objects.insert(path.to_string(), data);
        Ok(true)
    }

    async fn get(&self, path: &str) -> Result<Bytes, StorageError> {
        self.objects
            .read()
            .get(path)
            .cloned()
            .ok_or_else(|| StorageError::NotFound(path.to_string()))
    }

    async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let obj = self.get(path).await?;
        if range.start > range.end || range.end > obj.len() as u64 {
            return Err(StorageError::BadRange {
                path: path.into(),
                start: range.start,
                end: range.end,
                size: obj.len() as u64,
            });
        }
        Ok(obj.slice(range.start as usize..range.end as usize))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        Ok(self
            .objects
            .read()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| ObjectMeta {
                path: k.clone(),
                size: v.len() as u64,
            })
            .collect())
    }

    async fn delete(&self, path: &str) -> Result<(), StorageError> {
        self.objects.write().remove(path);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn memory_storage_conforms() {
        super::conformance::run(&super::MemoryStorage::new()).await;
    }
}
