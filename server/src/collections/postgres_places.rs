//! Where the postgres store keeps named collections: a schema each, listed in a
//! registry table of the default schema (see `store::postgres::collections`). Every
//! server sharing the database sees the same collections.

use std::sync::Arc;

use async_trait::async_trait;

use super::{CollectionPlaces, CollectionRecord, FixedIndex};
use crate::error::Result;
use crate::store::CorpusStore;
use crate::store::postgres::PostgresStore;

/// Named collections of the postgres store, over the default collection's store.
pub struct PostgresPlaces {
    root: Arc<PostgresStore>,
}

impl PostgresPlaces {
    /// Places beside `root`'s schema, its registry created if missing.
    pub async fn new(root: Arc<PostgresStore>) -> Result<Self> {
        root.ensure_collection_registry().await?;
        Ok(PostgresPlaces { root })
    }
}

#[async_trait]
impl CollectionPlaces for PostgresPlaces {
    async fn list(&self) -> Result<Vec<CollectionRecord>> {
        self.root.collection_records().await
    }

    async fn create(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        Ok(self.root.create_collection(record).await?)
    }

    async fn open(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        Ok(self.root.open_collection(record).await?)
    }

    /// HNSW and a keyword index for every collection, as for the default one.
    fn fixed_index(&self) -> Option<FixedIndex> {
        Some(FixedIndex { store_kind: "postgres", hnsw: true, keyword_index: true })
    }

    async fn delete(&self, name: &str) -> Result<()> {
        self.root.delete_collection(name).await
    }
}
