//! Where the embedded store keeps named collections: one directory each under
//! `<data-dir>/collections/`, holding the same files as the default collection's
//! (a redb file and a keyword index), so each is crash-safe as the default one is.
//!
//! A collection exists once its `collection.json` is durable: it is written (to a
//! temporary file, renamed) after the collection's store is created, and removed
//! first when the collection is deleted. A directory without it is what a crash left
//! mid-create or mid-delete, and is removed at the next start.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::{CollectionPlaces, CollectionRecord};
use crate::error::{Error, Result};
use crate::index::IndexKind;
use crate::store::CorpusStore;
use crate::store::embedded::{EmbeddedSettings, EmbeddedStore};

/// The collections' directory in the data directory.
const COLLECTIONS_DIR: &str = "collections";
/// The file whose presence makes a collection exist.
const RECORD_FILE: &str = "collection.json";

/// Named collections of the embedded store.
pub struct EmbeddedPlaces {
    root: PathBuf,
    /// The default collection's settings: each collection's start from them.
    base: EmbeddedSettings,
    model: String,
    dim: usize,
}

impl EmbeddedPlaces {
    pub fn new(base: EmbeddedSettings, model: String, dim: usize) -> Self {
        EmbeddedPlaces { root: base.data_dir.join(COLLECTIONS_DIR), base, model, dim }
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn settings(&self, record: &CollectionRecord) -> EmbeddedSettings {
        EmbeddedSettings {
            data_dir: self.dir(&record.name),
            index_kind: if record.hnsw { IndexKind::Hnsw } else { IndexKind::Exact },
            keyword_index: record.keyword_index,
            ..self.base.clone()
        }
    }

    async fn open_store(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        let (settings, model, dim) = (self.settings(record), self.model.clone(), self.dim);
        let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(&settings, &model, dim))
            .await
            .map_err(|e| Error::Storage(format!("collection store loader: {e}")))??;
        Ok(Arc::new(store))
    }
}

fn io_error(what: &str, path: &Path, error: std::io::Error) -> Error {
    Error::Storage(format!("{what} {}: {error}", path.display()))
}

/// Makes a directory entry's creation, rename or removal durable.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("sync", dir, e))
}

#[async_trait]
impl CollectionPlaces for EmbeddedPlaces {
    async fn list(&self) -> Result<Vec<CollectionRecord>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(io_error("read", &self.root, error)),
        };
        let mut records = Vec::new();
        for entry in entries {
            let dir = entry.map_err(|e| io_error("read", &self.root, e))?.path();
            match std::fs::read(dir.join(RECORD_FILE)) {
                Ok(bytes) => records.push(serde_json::from_slice(&bytes).map_err(|e| {
                    Error::Storage(format!("collection record {}: {e}", dir.join(RECORD_FILE).display()))
                })?),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    tracing::info!(dir = %dir.display(), "removing a collection left half created or deleted");
                    std::fs::remove_dir_all(&dir).map_err(|e| io_error("remove", &dir, e))?;
                }
                Err(error) => return Err(io_error("read", &dir, error)),
            }
        }
        records.sort_by(|a: &CollectionRecord, b| a.name.cmp(&b.name));
        Ok(records)
    }

    async fn create(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        let dir = self.dir(&record.name);
        if dir.join(RECORD_FILE).exists() {
            return Err(Error::AlreadyExists(format!("collection {} exists already", record.name)));
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io_error("remove", &dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| io_error("create", &dir, e))?;
        sync_dir(&self.root)?;
        let store = self.open_store(record).await?;
        let temporary = dir.join(format!("{RECORD_FILE}.new"));
        let bytes = serde_json::to_vec_pretty(record).expect("a record serializes");
        std::fs::write(&temporary, bytes)
            .and_then(|()| std::fs::File::open(&temporary)?.sync_all())
            .map_err(|e| io_error("write", &temporary, e))?;
        std::fs::rename(&temporary, dir.join(RECORD_FILE)).map_err(|e| io_error("rename", &temporary, e))?;
        sync_dir(&dir)?;
        Ok(store)
    }

    async fn open(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        self.open_store(record).await
    }

    async fn delete(&self, name: &str) -> Result<()> {
        let dir = self.dir(name);
        let record = dir.join(RECORD_FILE);
        match std::fs::remove_file(&record) {
            Ok(()) => sync_dir(&dir)?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io_error("remove", &record, error)),
        }
        // From here the collection is gone, even if a crash leaves its files: the next
        // start removes them.
        std::fs::remove_dir_all(&dir).map_err(|e| io_error("remove", &dir, e))?;
        sync_dir(&self.root)
    }
}
