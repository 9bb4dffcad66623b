//! Where the weaviate store keeps named collections: a set of classes each, listed in
//! a registry class (see `store::weaviate::collections`). Every server sharing the
//! cluster sees the same collections.

use std::sync::Arc;

use async_trait::async_trait;

use super::{CollectionPlaces, CollectionRecord, FixedIndex};
use crate::error::{Error, Result};
use crate::store::CorpusStore;
use crate::store::weaviate::WeaviateStore;

/// Named collections of the weaviate store, over the default collection's store.
pub struct WeaviatePlaces {
    root: Arc<WeaviateStore>,
}

impl WeaviatePlaces {
    /// Places beside `root`'s classes, its registry created if missing.
    pub async fn new(root: Arc<WeaviateStore>) -> Result<Self> {
        root.ensure_collection_registry().await?;
        Ok(WeaviatePlaces { root })
    }
}

#[async_trait]
impl CollectionPlaces for WeaviatePlaces {
    async fn list(&self) -> Result<Vec<CollectionRecord>> {
        self.root.collection_records().await
    }

    async fn find(&self, name: &str) -> Result<Option<CollectionRecord>> {
        self.root.collection_record(name).await
    }

    /// On a task of its own: a create may wait for leftovers to age (see
    /// `WeaviateStore::create_collection`), and one whose caller gave up still finishes,
    /// so that the collection is made (and listed) rather than left half made.
    async fn create(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        let (root, record) = (self.root.clone(), record.clone());
        let made = tokio::spawn(async move { root.create_collection(&record).await });
        let store =
            made.await.map_err(|e| Error::Storage(format!("weaviate store: a collection create failed: {e}")))??;
        Ok(Arc::new(store))
    }

    async fn open(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        Ok(Arc::new(self.root.open_collection(record).await?))
    }

    /// HNSW and a keyword index for every collection, as for the default one.
    fn fixed_index(&self) -> Option<FixedIndex> {
        Some(FixedIndex { store_kind: "weaviate", hnsw: true, keyword_index: true })
    }

    async fn delete(&self, name: &str) -> Result<()> {
        self.root.delete_collection(name).await
    }
}
