//! Collections: separate indexes on one server. Each is a [`Corpus`] over its own
//! store (documents, jobs, vectors, keyword index) with its own job runner; requests
//! name one by `collection`, and the empty name is the default collection, the one
//! index of servers before collections.
//!
//! # Layout
//! - [`name`]: what a collection may be called.
//! - [`embedded_places`]: where the embedded store keeps them.
//!
//! Where a store keeps its collections is behind [`CollectionPlaces`]; this module
//! keeps the open ones and their runners.

pub mod embedded_places;
pub mod name;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::corpus::chunker::ChunkSettings;
use crate::corpus::{Corpus, CorpusSettings, unix_now};
use crate::engine::EmbeddingEngine;
use crate::error::{Error, Result};
use crate::rerank::RerankEngine;
use crate::store::CorpusStore;

/// A collection as created: its name and its own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionRecord {
    pub name: String,
    pub chunk_tokens: usize,
    pub chunk_overlap_tokens: usize,
    /// The vector index: HNSW, else exact.
    pub hnsw: bool,
    pub keyword_index: bool,
    /// Unix seconds.
    pub created_at: f64,
}

/// A new collection's settings; None takes the server's.
#[derive(Debug, Clone, Default)]
pub struct CollectionRequest {
    pub chunk_tokens: Option<usize>,
    pub chunk_overlap_tokens: Option<usize>,
    pub hnsw: Option<bool>,
    pub keyword_index: Option<bool>,
}

/// Where a store keeps its named collections.
#[async_trait]
pub trait CollectionPlaces: Send + Sync + 'static {
    /// Every collection that exists, by name.
    async fn list(&self) -> Result<Vec<CollectionRecord>>;
    /// Creates a collection's store, durably; ALREADY_EXISTS if the name is taken.
    async fn create(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>>;
    /// Opens an existing collection's store.
    async fn open(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>>;
    /// Deletes a collection's store with everything in it, durably.
    async fn delete(&self, name: &str) -> Result<()>;
}

/// A store that has no named collections (yet): every call says so.
pub struct NoPlaces {
    pub store_kind: &'static str,
}

impl NoPlaces {
    fn refusal(&self) -> Error {
        Error::FailedPrecondition(format!(
            "collection: named collections are not available with the {} store in this version \
             (the embedded store has them); the default collection (an empty name) is",
            self.store_kind
        ))
    }
}

#[async_trait]
impl CollectionPlaces for NoPlaces {
    async fn list(&self) -> Result<Vec<CollectionRecord>> {
        Ok(Vec::new())
    }
    async fn create(&self, _record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        Err(self.refusal())
    }
    async fn open(&self, _record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>> {
        Err(self.refusal())
    }
    async fn delete(&self, _name: &str) -> Result<()> {
        Err(self.refusal())
    }
}

/// What every collection's corpus is made with besides its store.
pub struct CorpusParts {
    /// The server's settings; a collection replaces the chunking.
    pub settings: CorpusSettings,
    pub engine: Arc<EmbeddingEngine>,
    pub reranker: Arc<RerankEngine>,
    /// The server's index kind and keyword index, for collections that set neither.
    pub hnsw: bool,
    pub keyword_index: bool,
}

/// An open named collection.
struct Open {
    record: CollectionRecord,
    corpus: Arc<Corpus>,
    /// Stops its runner (and the runner's end is awaited before its files go).
    stop: Arc<watch::Sender<bool>>,
    runner: tokio::task::JoinHandle<()>,
}

/// Every collection of the server.
pub struct Collections {
    default: Arc<Corpus>,
    named: RwLock<BTreeMap<String, Arc<Open>>>,
    places: Box<dyn CollectionPlaces>,
    parts: CorpusParts,
    /// Creates and deletes one at a time.
    changes: tokio::sync::Mutex<()>,
    /// The server's shutdown, which stops every collection's runner.
    shutdown: watch::Receiver<bool>,
}

impl Collections {
    /// Opens every named collection (their unfinished jobs resume) beside the default.
    pub async fn open(
        default: Arc<Corpus>,
        places: Box<dyn CollectionPlaces>,
        parts: CorpusParts,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<Self>> {
        let collections = Arc::new(Collections {
            default,
            named: RwLock::new(BTreeMap::new()),
            places,
            parts,
            changes: tokio::sync::Mutex::new(()),
            shutdown,
        });
        let records = collections.places.list().await?;
        let count = records.len();
        for record in records {
            let store = collections.places.open(&record).await?;
            collections.install(record, store).await?;
        }
        if count > 0 {
            tracing::info!(collections = count, "named collections open");
        }
        Ok(collections)
    }

    /// The collection `name` names (empty or `default`: the default); NOT_FOUND
    /// naming it.
    pub fn corpus(&self, name: &str) -> Result<Arc<Corpus>> {
        if name.is_empty() || name == name::DEFAULT {
            return Ok(self.default.clone());
        }
        let named = self.named.read().expect("lock");
        match named.get(name) {
            Some(open) => Ok(open.corpus.clone()),
            None => {
                name::validate(name, "collection")?;
                Err(Error::NotFound(format!("collection {name} does not exist")))
            }
        }
    }

    /// The named collections, by name.
    pub fn list(&self) -> Vec<CollectionRecord> {
        self.named.read().expect("lock").values().map(|open| open.record.clone()).collect()
    }

    /// Creates an empty collection, durably.
    pub async fn create(&self, name: &str, request: CollectionRequest) -> Result<CollectionRecord> {
        name::validate_new(name, "name")?;
        let record = self.record(name, request)?;
        let _changing = self.changes.lock().await;
        if self.named.read().expect("lock").contains_key(name) {
            return Err(Error::AlreadyExists(format!("collection {name} exists already")));
        }
        let store = self.places.create(&record).await?;
        self.install(record.clone(), store).await?;
        tracing::info!(collection = name, "collection created");
        Ok(record)
    }

    /// Deletes a collection with its documents, jobs and vectors; returns the number
    /// of documents it held.
    pub async fn delete(&self, name: &str) -> Result<u64> {
        name::validate_new(name, "name")?;
        let _changing = self.changes.lock().await;
        let Some(open) = self.named.write().expect("lock").remove(name) else {
            return Err(Error::NotFound(format!("collection {name} does not exist")));
        };
        // Nothing new reaches it from here; its runner ends after its current commit.
        let documents = open.corpus.stats().await.map(|stats| stats.documents).unwrap_or(0);
        let _ = open.stop.send(true);
        let open = Arc::into_inner(open).expect("the registry held the only reference");
        let _ = open.runner.await;
        self.places.delete(name).await?;
        tracing::info!(collection = name, documents, "collection deleted");
        Ok(documents)
    }

    /// Stops every named collection's runner and waits for each (the server's shutdown).
    pub async fn stop(&self) {
        let open: Vec<Arc<Open>> = std::mem::take(&mut *self.named.write().expect("lock")).into_values().collect();
        for open in open {
            let _ = open.stop.send(true);
            if let Some(open) = Arc::into_inner(open) {
                let _ = open.runner.await;
            }
        }
    }

    /// A record for `name`, the request's settings checked, the server's filling in.
    fn record(&self, name: &str, request: CollectionRequest) -> Result<CollectionRecord> {
        let server = self.parts.settings.chunking;
        let chunk_tokens = request.chunk_tokens.unwrap_or(server.max_tokens);
        let chunk_overlap_tokens = request.chunk_overlap_tokens.unwrap_or(server.overlap_tokens.min(chunk_tokens));
        if chunk_tokens == 0 {
            return Err(Error::invalid("settings.chunk_tokens", "must be at least 1"));
        }
        if chunk_overlap_tokens >= chunk_tokens {
            return Err(Error::invalid(
                "settings.chunk_overlap_tokens",
                format!("must be less than chunk_tokens ({chunk_tokens}), not {chunk_overlap_tokens}"),
            ));
        }
        Ok(CollectionRecord {
            name: name.to_string(),
            chunk_tokens,
            chunk_overlap_tokens,
            hnsw: request.hnsw.unwrap_or(self.parts.hnsw),
            keyword_index: request.keyword_index.unwrap_or(self.parts.keyword_index),
            created_at: unix_now(),
        })
    }

    /// Opens the corpus over `store` and starts its runner.
    async fn install(&self, record: CollectionRecord, store: Arc<dyn CorpusStore>) -> Result<()> {
        let mut settings = self.parts.settings.clone();
        settings.chunking = ChunkSettings {
            max_tokens: record.chunk_tokens,
            overlap_tokens: record.chunk_overlap_tokens,
            ..settings.chunking
        };
        let corpus = Corpus::open(settings, store, self.parts.engine.clone(), self.parts.reranker.clone()).await?;
        let (stop, stopped) = watch::channel(false);
        let stop = Arc::new(stop);
        // The server's shutdown stops it too.
        let (forward, mut server) = (stop.clone(), self.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = server.wait_for(|down| *down) => { let _ = forward.send(true); }
                () = forward.closed() => {}
            }
        });
        let runner = tokio::spawn(corpus.clone().run_jobs(stopped));
        let open = Open { record: record.clone(), corpus, stop, runner };
        self.named.write().expect("lock").insert(record.name, Arc::new(open));
        Ok(())
    }
}
