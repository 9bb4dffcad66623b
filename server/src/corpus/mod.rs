//! The document corpus: the core every store shares. It validates and chunks
//! documents, embeds chunks (sharing the model with live traffic), runs ingestion
//! jobs, plans searches, reranks and resolves citations; where documents, vectors and
//! jobs live is the store's business ([`crate::store::CorpusStore`], chosen at start).
//!
//! # Layout
//! - [`text`]: normalization and content hashes.
//! - [`chunker`]: token windows with overlap.
//! - [`filter`]: metadata filters.
//! - [`jobs`]: the ingestion jobs and the background runner that indexes them.
//! - [`search`]: queries: embed, ask the store, rerank, resolve hits.
//! - [`fusion`]: hybrid search's merge of the vector and keyword rankings.
//! - [`grouping`]: hits grouped by document.
//! - [`highlight`]: the words of a hit that match the query's.

pub mod chunker;
pub mod filter;
pub mod fusion;
pub mod grouping;
pub mod highlight;
pub mod jobs;
pub mod search;
mod settles;
pub mod text;

use std::sync::Arc;

use crate::engine::EmbeddingEngine;
use crate::error::{Error, Result};
use crate::rerank::RerankEngine;
use crate::store::{CorpusStore, DocumentRecord, JobRecord, NewDocument, StoreDescription, StoreHealth};
pub use crate::store::{IndexStats, ViewCounts};
use chunker::ChunkSettings;
use filter::Filter;
use jobs::JobBoard;

/// Settings of the corpus.
#[derive(Debug, Clone)]
pub struct CorpusSettings {
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
}

/// The corpus core over one store.
pub struct Corpus {
    store: Arc<dyn CorpusStore>,
    jobs: JobBoard,
    engine: Arc<EmbeddingEngine>,
    /// Re-scores candidates when a search asks for it.
    reranker: Arc<RerankEngine>,
    settings: CorpusSettings,
}

/// Wall-clock Unix seconds, as jobs report times.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Corpus {
    /// The chunk limits the model allows: a chunk plus [CLS] and [SEP] must fit the
    /// model, or its tail would be cut.
    pub fn fit_chunking(settings: &mut CorpusSettings, max_input_tokens: usize) {
        settings.chunking.max_tokens = settings.chunking.max_tokens.min(max_input_tokens.saturating_sub(2)).max(1);
        settings.chunking.overlap_tokens = settings.chunking.overlap_tokens.min(settings.chunking.max_tokens - 1);
    }

    /// The corpus over an opened store; loads its jobs (the caller starts the runner).
    pub async fn open(
        mut settings: CorpusSettings,
        store: Arc<dyn CorpusStore>,
        engine: Arc<EmbeddingEngine>,
        reranker: Arc<RerankEngine>,
    ) -> Result<Arc<Self>> {
        let info = engine.info()?.clone();
        Self::fit_chunking(&mut settings, info.max_input_tokens);
        let jobs = JobBoard::recover(store.as_ref()).await?;
        tracing::info!(
            store = store.description().kind,
            index = %store.description().index_id,
            jobs_to_resume = jobs.unfinished().len(),
            "corpus open"
        );
        Ok(Arc::new(Corpus { store, jobs, engine, reranker, settings }))
    }

    /// The precision queries and documents are embedded at.
    pub fn model_precision(&self) -> crate::model::Precision {
        self.engine.info().map(|info| info.precision).unwrap_or_default()
    }

    /// What the store is.
    pub fn store_description(&self) -> &StoreDescription {
        self.store.description()
    }

    /// Whether the store answers, with its nodes.
    pub async fn store_health(&self) -> StoreHealth {
        self.store.health().await
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
        let job = self.store.create_job(jobs::new_job(false), documents).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Opens a job that an IngestStream fills.
    pub async fn open_stream_job(self: &Arc<Self>) -> Result<JobRecord> {
        let job = self.store.create_job(jobs::new_job(true), Vec::new()).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Appends documents to a streaming job, durably.
    pub async fn append_to_stream_job(
        self: &Arc<Self>,
        job_id: &str,
        documents: Vec<NewDocument>,
    ) -> Result<JobRecord> {
        let job = self.store.append_to_job(job_id, documents).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Marks a streaming job complete on the sending side.
    pub async fn close_stream_job(self: &Arc<Self>, job_id: &str) -> Result<JobRecord> {
        self.update_job(job_id, |job| job.receiving = false).await
    }

    /// Stored documents by id.
    pub async fn get_documents(self: &Arc<Self>, ids: Vec<String>) -> Result<Vec<(String, Option<DocumentRecord>)>> {
        let records = self.store.documents(ids.clone()).await?;
        Ok(ids.into_iter().zip(records).collect())
    }

    /// Deletes documents by id and by filter; returns how many existed.
    pub async fn delete(self: &Arc<Self>, ids: Vec<String>, filter: Option<Filter>) -> Result<usize> {
        self.store.delete_documents(ids, filter).await
    }

    /// Documents and chunks in the index, known without a round trip (for metrics).
    pub fn view_counts(&self) -> ViewCounts {
        self.store.cached_counts()
    }

    /// How its HNSW index searches (None for exact search and shared stores).
    pub fn hnsw_search(&self) -> Option<crate::store::HnswSearch> {
        self.store.hnsw_search()
    }

    /// What the index holds.
    pub async fn stats(self: &Arc<Self>) -> Result<IndexStats> {
        self.store.stats().await
    }

    /// The index kind's name.
    pub fn index_kind_name(&self) -> &'static str {
        self.store.description().index_kind
    }
}
