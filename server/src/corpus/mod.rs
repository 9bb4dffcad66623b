//! The document corpus: durable documents, their chunk vectors, and the in-memory
//! index that search reads.
//!
//! # Layout
//! - [`store`]: the redb database (documents, vectors, jobs, pending documents).
//! - [`text`]: normalization and content hashes.
//! - [`chunker`]: token windows with overlap.
//! - [`filter`]: metadata filters.
//! - [`view`]: the in-memory index and chunk lookup, rebuilt from the store at start.
//! - [`jobs`]: the ingestion jobs and the background runner that indexes them.
//! - [`search`]: queries: embed, search the index, rerank, resolve hits.
//!
//! Writes (indexing, deletes) commit to the store first and then update the view,
//! one at a time under `write_gate`. Searches only take the view's read lock, held for
//! the index scan alone: never across a model call or a disk write.

pub mod chunker;
pub mod filter;
pub mod jobs;
pub mod search;
pub mod store;
pub mod text;
pub mod view;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::engine::EmbeddingEngine;
use crate::error::{Error, Result};
use crate::index::{IndexKind, IndexParams};
use crate::model::cross_encoder::Reranker;
use chunker::ChunkSettings;
use filter::Filter;
use jobs::JobBoard;
use store::{DocumentRecord, IndexChanges, JobRecord, NewDocument, Store};
use view::IndexView;

/// Settings of the corpus.
#[derive(Debug, Clone)]
pub struct CorpusSettings {
    /// Where the database lives.
    pub data_dir: PathBuf,
    /// Exact or approximate search.
    pub index_kind: IndexKind,
    /// HNSW parameters.
    pub index_params: IndexParams,
    /// Chunk size and overlap.
    pub chunking: ChunkSettings,
    /// Most documents per Ingest call (and per IngestStream message).
    pub max_documents_per_request: usize,
    /// Most bytes of metadata (keys and values) per document.
    pub max_metadata_bytes: usize,
    /// Most hits per query of Search.
    pub max_top_k: usize,
    /// Most hits per query of SearchStream.
    pub max_stream_top_k: usize,
    /// Most queries per Search call.
    pub max_queries_per_request: usize,
    /// Documents indexed per commit.
    pub ingest_batch_documents: usize,
    /// Candidates the cross-encoder re-scores per query.
    pub rerank_candidates: usize,
    /// Memory the store may use as page cache.
    pub store_cache_bytes: usize,
}

/// Sizes of the searchable view.
#[derive(Debug, Clone, Copy)]
pub struct ViewCounts {
    pub documents: u64,
    pub chunks: u64,
}

/// Counts for GetIndexStats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexStats {
    pub documents: u64,
    pub chunks: u64,
    pub unique_vectors: u64,
    pub pending_documents: u64,
}

/// Documents, vectors, index, jobs.
pub struct Corpus {
    store: Store,
    view: RwLock<IndexView>,
    /// Serializes store commits with the view updates that follow them, so the view
    /// applies changes in commit order.
    write_gate: tokio::sync::Mutex<()>,
    jobs: JobBoard,
    engine: Arc<EmbeddingEngine>,
    reranker: Option<Reranker>,
    settings: CorpusSettings,
}

/// Wall-clock Unix seconds, as jobs report times.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Corpus {
    /// Opens the store, rebuilds the index from it, and resumes interrupted jobs
    /// (the caller starts the runner). Blocking: reads the whole store.
    pub fn open(
        mut settings: CorpusSettings,
        engine: Arc<EmbeddingEngine>,
        reranker: Option<Reranker>,
    ) -> Result<Arc<Self>> {
        let info = engine.info()?.clone();
        // A chunk plus [CLS] and [SEP] must fit the model, or its tail would be cut.
        settings.chunking.max_tokens = settings.chunking.max_tokens.min(info.max_input_tokens.saturating_sub(2)).max(1);
        settings.chunking.overlap_tokens = settings.chunking.overlap_tokens.min(settings.chunking.max_tokens - 1);
        let store = Store::open(
            &settings.data_dir,
            &format!("{} dim={}", info.model_id, info.dim),
            settings.store_cache_bytes,
        )?;
        let mut view = IndexView::new(settings.index_kind, info.dim, settings.index_params)?;
        let mut stored = Vec::new();
        store.for_each_document(|id, record, vectors| stored.push((id, record, vectors)))?;
        view.load(stored)?;
        let jobs = JobBoard::recover(&store)?;
        tracing::info!(
            documents = view.document_count(),
            chunks = view.chunk_count(),
            jobs_to_resume = jobs.unfinished().len(),
            "corpus loaded"
        );
        Ok(Arc::new(Corpus {
            store,
            view: RwLock::new(view),
            write_gate: tokio::sync::Mutex::new(()),
            jobs,
            engine,
            reranker,
            settings,
        }))
    }

    /// The settings.
    pub fn settings(&self) -> &CorpusSettings {
        &self.settings
    }

    /// The job board (status, watchers).
    pub fn jobs(&self) -> &JobBoard {
        &self.jobs
    }

    /// Validates and normalizes documents of one request, assigning missing ids.
    pub fn prepare_documents(&self, documents: Vec<NewDocument>, field: &str) -> Result<Vec<NewDocument>> {
        if documents.len() > self.settings.max_documents_per_request {
            return Err(Error::invalid(
                field,
                format!(
                    "has {} documents, more than the limit of {} per request",
                    documents.len(),
                    self.settings.max_documents_per_request
                ),
            ));
        }
        documents
            .into_iter()
            .enumerate()
            .map(|(index, mut document)| {
                let at = format!("{field}[{index}]");
                document.text = text::normalize_text(&document.text);
                if document.text.is_empty() {
                    return Err(Error::invalid(format!("{at}.text"), "is empty"));
                }
                let limit = self.engine.limits().max_input_chars * 100;
                if document.text.len() > limit {
                    return Err(Error::invalid(format!("{at}.text"), format!("is longer than {limit} bytes")));
                }
                let metadata_bytes: usize = document.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
                if metadata_bytes > self.settings.max_metadata_bytes {
                    return Err(Error::invalid(
                        format!("{at}.metadata"),
                        format!(
                            "has {metadata_bytes} bytes, more than the limit of {}",
                            self.settings.max_metadata_bytes
                        ),
                    ));
                }
                if document.id.is_empty() {
                    document.id = uuid::Uuid::new_v4().to_string();
                }
                Ok(document)
            })
            .collect()
    }

    /// Stores documents as a new job, durably, and wakes the runner.
    pub async fn ingest(self: &Arc<Self>, documents: Vec<NewDocument>) -> Result<JobRecord> {
        if documents.is_empty() {
            return Err(Error::invalid("documents", "must contain at least one document"));
        }
        let job = jobs::new_job(false);
        let corpus = self.clone();
        let job = blocking(move || corpus.store.create_job(&job, &documents)).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Opens a job that an IngestStream fills.
    pub async fn open_stream_job(self: &Arc<Self>) -> Result<JobRecord> {
        let job = jobs::new_job(true);
        let corpus = self.clone();
        let job = blocking(move || corpus.store.create_job(&job, &[])).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Appends documents to a streaming job, durably.
    pub async fn append_to_stream_job(
        self: &Arc<Self>,
        job_id: &str,
        documents: Vec<NewDocument>,
    ) -> Result<JobRecord> {
        let corpus = self.clone();
        let id = job_id.to_string();
        let job = blocking(move || corpus.store.append_to_job(&id, &documents)).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Marks a streaming job complete on the sending side.
    pub async fn close_stream_job(self: &Arc<Self>, job_id: &str) -> Result<JobRecord> {
        self.update_job(job_id, |job| job.receiving = false).await
    }

    /// Stored documents by id.
    pub async fn get_documents(self: &Arc<Self>, ids: Vec<String>) -> Result<Vec<(String, Option<DocumentRecord>)>> {
        let corpus = self.clone();
        blocking(move || {
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let records = corpus.store.documents(&refs)?;
            Ok(ids.into_iter().zip(records).collect())
        })
        .await
    }

    /// Deletes documents by id and by filter; returns how many existed.
    pub async fn delete(self: &Arc<Self>, ids: Vec<String>, filter: Option<Filter>) -> Result<usize> {
        let _gate = self.write_gate.lock().await;
        let mut targets = ids;
        if let Some(filter) = filter {
            targets.extend(self.read_view().document_ids_matching(&filter));
        }
        targets.sort();
        targets.dedup();
        let corpus = self.clone();
        let changes = blocking(move || corpus.store.delete_documents(&targets)).await?;
        let deleted = changes.removed_documents.len();
        self.apply(changes);
        Ok(deleted)
    }

    /// Documents and chunks in the searchable view (no disk access, for metrics).
    pub fn view_counts(&self) -> ViewCounts {
        let view = self.read_view();
        ViewCounts { documents: view.document_count() as u64, chunks: view.chunk_count() as u64 }
    }

    /// What the index holds.
    pub async fn stats(self: &Arc<Self>) -> Result<IndexStats> {
        let ViewCounts { documents, chunks } = self.view_counts();
        let corpus = self.clone();
        let (unique_vectors, pending_documents) =
            blocking(move || Ok((corpus.store.vector_count()?, corpus.store.pending_count()?))).await?;
        Ok(IndexStats { documents, chunks, unique_vectors, pending_documents })
    }

    /// The index kind's name.
    pub fn index_kind_name(&self) -> &'static str {
        match self.settings.index_kind {
            IndexKind::Exact => "exact",
            IndexKind::Hnsw => "hnsw",
        }
    }

    /// Follows a commit in the view.
    fn apply(&self, changes: IndexChanges) {
        let mut view = self.view.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(error) = view.apply(changes) {
            tracing::error!(%error, "the index refused committed vectors; it is rebuilt from the store at the next start");
        }
    }

    fn read_view(&self) -> std::sync::RwLockReadGuard<'_, IndexView> {
        self.view.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Runs blocking store work off the async runtime.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Error::Storage(format!("store task: {e}")))?
}
