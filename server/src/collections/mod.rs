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
pub mod postgres_places;
pub mod weaviate_places;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::corpus::chunker::ChunkSettings;
use crate::corpus::jobs::same_failure;
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
    /// Collection `name`'s record if it exists. By default from the listing; a store
    /// whose listing can lag another server's create reads the one record surely.
    async fn find(&self, name: &str) -> Result<Option<CollectionRecord>> {
        Ok(self.list().await?.into_iter().find(|record| record.name == name))
    }
    /// Creates a collection's store, durably; ALREADY_EXISTS if the name is taken.
    async fn create(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>>;
    /// Opens an existing collection's store.
    async fn open(&self, record: &CollectionRecord) -> Result<Arc<dyn CorpusStore>>;
    /// Deletes a collection's store with everything in it, durably.
    async fn delete(&self, name: &str) -> Result<()>;

    /// A collection's store if it has jobs to finish (then it opens at the start, and
    /// they resume), else None. By default its store is opened to ask.
    async fn open_if_unfinished(&self, record: &CollectionRecord) -> Result<Option<Arc<dyn CorpusStore>>> {
        let store = self.open(record).await?;
        let unfinished = !store.jobs(true).await?.is_empty();
        Ok(unfinished.then_some(store))
    }

    /// The index kind and keyword index every collection of this store has, when the
    /// store decides them (None: each collection chooses).
    fn fixed_index(&self) -> Option<FixedIndex> {
        None
    }

    /// The documents of a collection not open here (what its deletion reports).
    async fn document_count(&self, record: &CollectionRecord) -> Result<u64> {
        Ok(self.open(record).await?.stats().await?.documents)
    }
}

/// How a store that decides them indexes every collection.
#[derive(Debug, Clone, Copy)]
pub struct FixedIndex {
    pub store_kind: &'static str,
    pub hnsw: bool,
    pub keyword_index: bool,
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

/// How often a server of a shared store looks for collections other servers created
/// or deleted.
const SHARED_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// An open named collection.
struct Open {
    /// Stops its runner (and the runner's end is awaited before its files go).
    stop: Arc<watch::Sender<bool>>,
    runner: tokio::task::JoinHandle<()>,
}

impl Open {
    /// Stops its runner and waits for the end of its current commit.
    async fn close(self) {
        let _ = self.stop.send(true);
        let _ = self.runner.await;
    }
}

/// A named collection: its record, and its store and runner once something used it.
struct Slot {
    record: CollectionRecord,
    state: tokio::sync::RwLock<SlotState>,
}

enum SlotState {
    Closed,
    Open(Arc<Corpus>, Open),
    /// Deleted while a request held the slot: it must not open again.
    Deleted,
}

/// Every collection of the server. Named collections open at their first use (a
/// request, or unfinished jobs found after the start), so a server of many collections
/// pays for those it serves, not for every one it holds.
pub struct Collections {
    default: Arc<Corpus>,
    named: RwLock<BTreeMap<String, Arc<Slot>>>,
    places: Box<dyn CollectionPlaces>,
    parts: CorpusParts,
    /// Creates and deletes one at a time.
    changes: tokio::sync::Mutex<()>,
    /// The server's shutdown, which stops every collection's runner.
    shutdown: watch::Receiver<bool>,
}

impl Collections {
    /// The named collections as the store lists them, none opened yet; a task then
    /// opens those with unfinished jobs (they resume) in the background.
    pub async fn open(
        default: Arc<Corpus>,
        places: Box<dyn CollectionPlaces>,
        parts: CorpusParts,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<Self>> {
        let records = places.list().await?;
        let count = records.len();
        let named = records.into_iter().map(|record| (record.name.clone(), Slot::closed(record))).collect();
        let collections = Arc::new(Collections {
            default,
            named: RwLock::new(named),
            places,
            parts,
            changes: tokio::sync::Mutex::new(()),
            shutdown,
        });
        if count > 0 {
            tracing::info!(collections = count, "named collections found");
            tokio::spawn(collections.clone().resume_unfinished_jobs());
        }
        if collections.is_shared() {
            tokio::spawn(collections.clone().follow_other_servers());
        }
        Ok(collections)
    }

    /// Whether other servers share the store, and may create and delete collections.
    fn is_shared(&self) -> bool {
        self.default.store_description().shared
    }

    /// In a shared store: takes in the collections other servers created or deleted,
    /// now and then (a request naming one this server has not seen looks at once).
    /// While the store cannot be read (a node down at RF 2, say) it logs once when that
    /// starts, when the reason changes and when it reads again: a warning every
    /// refresh was 12 lines a minute of one piece of news.
    async fn follow_other_servers(self: Arc<Self>) {
        let mut shutdown = self.shutdown.clone();
        let mut failing: Option<String> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(SHARED_REFRESH) => {}
                _ = shutdown.wait_for(|down| *down) => return,
            }
            match self.refresh().await {
                Ok(()) => {
                    if failing.take().is_some() {
                        tracing::info!("the store's collections can be read again");
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    if failing.as_deref().is_none_or(|last| !same_failure(last, &text)) {
                        tracing::warn!(%error, every = ?SHARED_REFRESH, "cannot read the store's collections; trying again");
                    } else {
                        tracing::debug!(%error, "still cannot read the store's collections");
                    }
                    failing = Some(text);
                }
            }
        }
    }

    /// Makes the registry what the store lists: new collections closed, gone ones
    /// closed and forgotten.
    async fn refresh(&self) -> Result<()> {
        let _changing = self.changes.lock().await;
        self.refresh_locked().await
    }

    /// [`Collections::refresh`], its caller holding `changes`.
    async fn refresh_locked(&self) -> Result<()> {
        let mut records = self.places.list().await?;
        let known: Vec<String> = self.named.read().expect("lock").keys().cloned().collect();
        let unlisted: Vec<&String> =
            known.iter().filter(|name| !records.iter().any(|record| &record.name == *name)).collect();
        for name in unlisted {
            // A collection this server serves is not listed: read it by name before
            // taking it for deleted, so that one late replica cannot close a live one.
            if let Some(record) = self.places.find(name).await? {
                records.push(record);
            }
        }
        let listed: std::collections::BTreeSet<&str> = records.iter().map(|record| record.name.as_str()).collect();
        let gone: Vec<Arc<Slot>> = {
            let mut named = self.named.write().expect("lock");
            let gone_names: Vec<String> =
                named.keys().filter(|name| !listed.contains(name.as_str())).cloned().collect();
            let gone = gone_names.iter().filter_map(|name| named.remove(name)).collect();
            for record in &records {
                if !named.contains_key(&record.name) {
                    named.insert(record.name.clone(), Slot::closed(record.clone()));
                }
            }
            gone
        };
        for slot in gone {
            tracing::info!(collection = %slot.record.name, "collection deleted through another server");
            if let SlotState::Open(_, open) = std::mem::replace(&mut *slot.state.write().await, SlotState::Deleted) {
                open.close().await;
            }
        }
        Ok(())
    }

    /// Opens each collection that has unfinished jobs, so they resume without waiting
    /// for a request. One collection at a time: this runs beside serving.
    async fn resume_unfinished_jobs(self: Arc<Self>) {
        let slots: Vec<Arc<Slot>> = self.named.read().expect("lock").values().cloned().collect();
        let mut resumed = 0usize;
        for slot in slots {
            if *self.shutdown.borrow() {
                return;
            }
            match self.resume(&slot).await {
                Ok(opened) => resumed += usize::from(opened),
                Err(error) => tracing::error!(collection = %slot.record.name, %error, "cannot resume its jobs"),
            }
        }
        if resumed > 0 {
            tracing::info!(collections = resumed, "collections with unfinished jobs resumed");
        }
    }

    /// Opens the slot if it is closed and has unfinished jobs; whether it did. Under
    /// the slot's lock: a store is opened once at a time (redb refuses a second open).
    async fn resume(&self, slot: &Slot) -> Result<bool> {
        let mut state = slot.state.write().await;
        if !matches!(*state, SlotState::Closed) {
            return Ok(false);
        }
        let Some(store) = self.places.open_if_unfinished(&slot.record).await? else {
            return Ok(false);
        };
        let (corpus, open) = self.start(&slot.record, store).await?;
        *state = SlotState::Open(corpus, open);
        Ok(true)
    }

    /// The collection `name` names (empty or `default`: the default), opened if it
    /// was not yet; NOT_FOUND naming it.
    pub async fn corpus(&self, name: &str) -> Result<Arc<Corpus>> {
        if name.is_empty() || name == name::DEFAULT {
            return Ok(self.default.clone());
        }
        name::validate(name, "collection")?;
        let mut slot = self.named.read().expect("lock").get(name).cloned();
        if slot.is_none() && self.is_shared() {
            // Maybe created through another server a moment ago (and maybe not listed
            // yet: then it is read by name).
            self.refresh().await?;
            slot = self.named.read().expect("lock").get(name).cloned();
            if slot.is_none() {
                slot = self.adopt(name).await?;
            }
        }
        match slot {
            Some(slot) => self.opened(&slot).await,
            None => Err(not_found(name)),
        }
    }

    /// Collection `name`'s slot if the store has it though the last listing did not.
    async fn adopt(&self, name: &str) -> Result<Option<Arc<Slot>>> {
        let _changing = self.changes.lock().await;
        let Some(record) = self.places.find(name).await? else { return Ok(None) };
        let mut named = self.named.write().expect("lock");
        Ok(Some(named.entry(name.to_string()).or_insert_with(|| Slot::closed(record)).clone()))
    }

    /// The slot's corpus, opening its store and starting its runner at the first use.
    async fn opened(&self, slot: &Slot) -> Result<Arc<Corpus>> {
        if let SlotState::Open(corpus, _) = &*slot.state.read().await {
            return Ok(corpus.clone());
        }
        let mut state = slot.state.write().await;
        match &*state {
            SlotState::Open(corpus, _) => Ok(corpus.clone()),
            SlotState::Deleted => Err(not_found(&slot.record.name)),
            SlotState::Closed => {
                let store = self.places.open(&slot.record).await?;
                let (corpus, open) = self.start(&slot.record, store).await?;
                *state = SlotState::Open(corpus.clone(), open);
                Ok(corpus)
            }
        }
    }

    /// Named collections, and how many of them are open (what `/metrics` shows).
    pub fn counts(&self) -> (u64, u64) {
        let named = self.named.read().expect("lock");
        // A slot being opened or closed right now is not counted as open.
        let open =
            named.values().filter(|slot| matches!(slot.state.try_read().as_deref(), Ok(SlotState::Open(..)))).count();
        (named.len() as u64, open as u64)
    }

    /// The named collections, by name.
    /// In a shared store, as the store lists them now.
    pub async fn list(&self) -> Result<Vec<CollectionRecord>> {
        if self.is_shared() {
            self.refresh().await?;
        }
        Ok(self.named.read().expect("lock").values().map(|slot| slot.record.clone()).collect())
    }

    /// Creates an empty collection, durably, and opens it.
    pub async fn create(&self, name: &str, request: CollectionRequest) -> Result<CollectionRecord> {
        name::validate_new(name, "name")?;
        let record = self.record(name, request)?;
        let _changing = self.changes.lock().await;
        if self.named.read().expect("lock").contains_key(name) {
            return Err(Error::AlreadyExists(format!("collection {name} exists already")));
        }
        let store = self.places.create(&record).await?;
        let (corpus, open) = self.start(&record, store).await?;
        let slot = Slot { record: record.clone(), state: tokio::sync::RwLock::new(SlotState::Open(corpus, open)) };
        self.named.write().expect("lock").insert(name.to_string(), Arc::new(slot));
        tracing::info!(collection = name, "collection created");
        Ok(record)
    }

    /// Deletes a collection with its documents, jobs and vectors; returns the number
    /// of documents it held.
    pub async fn delete(&self, name: &str) -> Result<u64> {
        name::validate_new(name, "name")?;
        let _changing = self.changes.lock().await;
        if self.is_shared() {
            // Maybe created through another server.
            self.refresh_locked().await?;
        }
        let Some(slot) = self.named.write().expect("lock").remove(name) else {
            return Err(not_found(name));
        };
        // Nothing new reaches it from here (an opening in progress finishes first); its
        // runner ends after its current commit.
        let mut state = slot.state.write().await;
        let documents = match std::mem::replace(&mut *state, SlotState::Deleted) {
            SlotState::Open(corpus, open) => {
                let documents = corpus.stats().await.map(|stats| stats.documents).unwrap_or(0);
                open.close().await;
                documents
            }
            SlotState::Closed | SlotState::Deleted => self.places.document_count(&slot.record).await.unwrap_or(0),
        };
        self.places.delete(name).await?;
        tracing::info!(collection = name, documents, "collection deleted");
        Ok(documents)
    }

    /// Stops every open collection's runner and waits for each (the server's shutdown).
    pub async fn stop(&self) {
        let slots: Vec<Arc<Slot>> = std::mem::take(&mut *self.named.write().expect("lock")).into_values().collect();
        for slot in slots {
            if let SlotState::Open(_, open) = std::mem::replace(&mut *slot.state.write().await, SlotState::Deleted) {
                open.close().await;
            }
        }
    }

    /// A record for `name`, the request's settings checked, the server's filling in.
    fn record(&self, name: &str, request: CollectionRequest) -> Result<CollectionRecord> {
        let server = self.parts.settings.chunking;
        let chunk_tokens = request.chunk_tokens.unwrap_or(server.max_tokens);
        // The server's overlap, but less than half a chunk of the collection's size.
        let chunk_overlap_tokens =
            request.chunk_overlap_tokens.unwrap_or(server.overlap_tokens.min(chunk_tokens.saturating_sub(1) / 2));
        if chunk_tokens == 0 {
            return Err(Error::invalid("settings.chunk_tokens", "must be at least 1"));
        }
        if chunk_overlap_tokens >= chunk_tokens {
            return Err(Error::invalid(
                "settings.chunk_overlap_tokens",
                format!("must be less than chunk_tokens ({chunk_tokens}), not {chunk_overlap_tokens}"),
            ));
        }
        let (hnsw, keyword_index) = self.index_settings(&request)?;
        Ok(CollectionRecord {
            name: name.to_string(),
            chunk_tokens,
            chunk_overlap_tokens,
            hnsw,
            keyword_index,
            created_at: unix_now(),
        })
    }

    /// The index kind and keyword index of a new collection: asked for, else the
    /// server's; a store that decides them refuses another choice (rather than record
    /// one it does not keep).
    fn index_settings(&self, request: &CollectionRequest) -> Result<(bool, bool)> {
        let Some(fixed) = self.places.fixed_index() else {
            let hnsw = request.hnsw.unwrap_or(self.parts.hnsw);
            return Ok((hnsw, request.keyword_index.unwrap_or(self.parts.keyword_index)));
        };
        if request.hnsw.is_some_and(|hnsw| hnsw != fixed.hnsw) {
            let kind = if fixed.hnsw { "HNSW" } else { "exact search" };
            let message = format!("the {} store indexes every collection with {kind}", fixed.store_kind);
            return Err(Error::invalid("settings.index", message));
        }
        if request.keyword_index.is_some_and(|keyword| keyword != fixed.keyword_index) {
            let has = if fixed.keyword_index { "keeps" } else { "keeps no" };
            let message = format!("the {} store {has} keyword index for every collection", fixed.store_kind);
            return Err(Error::invalid("settings.keyword_index", message));
        }
        Ok((fixed.hnsw, fixed.keyword_index))
    }

    /// Opens the corpus over `store` and starts its runner.
    async fn start(&self, record: &CollectionRecord, store: Arc<dyn CorpusStore>) -> Result<(Arc<Corpus>, Open)> {
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
        Ok((corpus, Open { stop, runner }))
    }
}

impl Slot {
    fn closed(record: CollectionRecord) -> Arc<Self> {
        Arc::new(Slot { record, state: tokio::sync::RwLock::new(SlotState::Closed) })
    }
}

fn not_found(name: &str) -> Error {
    Error::NotFound(format!("collection {name} does not exist"))
}
