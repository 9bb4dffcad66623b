//! The storage seam: where the corpus keeps documents, chunk vectors and jobs, and
//! how it searches them. The corpus core (chunking, embedding, jobs, rerank,
//! citations) is written once against [`CorpusStore`]; an engine is chosen once at
//! start (`--store`) and the core never asks which one it holds.
//!
//! # Layout
//! - [`records`]: the plain records every engine stores (documents, chunks, jobs).
//! - [`embedded`]: the default: one redb file plus an in-memory exact or HNSW index,
//!   private to this server.
//! - [`weaviate`]: a Weaviate cluster over its gRPC API, shared by any number of
//!   servers.
//! - [`postgres`]: a PostgreSQL database with pgvector (a primary and its replicas),
//!   shared by any number of servers.
//!
//! Failures an engine cannot hide come back as the server's [`Error`]: a store that
//! cannot be reached is `Unavailable` naming the store, a request the engine cannot
//! express is `InvalidArgument` naming the field.

pub mod embedded;
pub mod postgres;
pub mod records;
pub mod weaviate;

use std::collections::BTreeMap;

use async_trait::async_trait;

pub use records::{DocumentRecord, IndexedDocument, JobRecord, JobRetry, JobState, NewDocument, StoredChunk};

use crate::corpus::filter::Filter;
use crate::corpus::text::ContentHash;
use crate::error::Result;

/// A change to a job, applied by the store inside its read-change-write.
pub type JobChange = Box<dyn FnOnce(&mut JobRecord) + Send>;

/// What a store is, fixed for its lifetime (Info and `/healthz` report it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDescription {
    /// "embedded", "weaviate" or "postgres".
    pub kind: &'static str,
    /// Whether other servers read and write the same index.
    pub shared: bool,
    /// Names the index: the same on every server sharing it.
    pub index_id: String,
    /// How the index searches: "exact", "hnsw", or the engine's own.
    pub index_kind: &'static str,
}

/// One node of a store cluster, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreNode {
    pub name: String,
    pub address: String,
    pub healthy: bool,
}

/// Whether the store can be used now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreHealth {
    /// Whether it can serve at all (some node answers). A cluster missing one node
    /// is still healthy; [`StoreHealth::missing_nodes`] names what it lacks.
    pub healthy: bool,
    /// Why not, when unhealthy.
    pub detail: String,
    /// Every node the server has known since it started, a missing one included
    /// (unhealthy), so that losing a node never shortens the list silently.
    pub nodes: Vec<StoreNode>,
}

impl StoreHealth {
    /// Names of the nodes not answering as healthy now.
    pub fn missing_nodes(&self) -> Vec<&str> {
        self.nodes.iter().filter(|n| !n.healthy).map(|n| n.name.as_str()).collect()
    }
}

/// How far a store's counts can be trusted. A shared store that cannot count over
/// the whole index now keeps its last exact counts and says how old they are,
/// rather than report a count over part of it (see the Weaviate store).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CountAccuracy {
    /// Counted over the whole index just now (a local store: always).
    #[default]
    Exact,
    /// The counts are the last exact ones, taken at `counted_at`; `reason` says why
    /// the store cannot count exactly now.
    LastExact { counted_at: std::time::Instant, reason: String },
    /// No exact count since the server started (`reason`): the counts are zero and
    /// mean nothing.
    Unknown { reason: String },
}

impl CountAccuracy {
    pub fn is_exact(&self) -> bool {
        matches!(self, CountAccuracy::Exact)
    }

    /// Why the counts are not exact now; None when they are.
    pub fn reason(&self) -> Option<&str> {
        match self {
            CountAccuracy::Exact => None,
            CountAccuracy::LastExact { reason, .. } | CountAccuracy::Unknown { reason } => Some(reason),
        }
    }
}

/// Counts for GetIndexStats.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexStats {
    pub documents: u64,
    pub chunks: u64,
    pub unique_vectors: u64,
    pub pending_documents: u64,
    /// Whether the counts are exact now (see [`CountAccuracy`]).
    pub accuracy: CountAccuracy,
}

/// How an HNSW index searches: its width and, when the width is picked by measured
/// recall (`--hnsw-target-recall`), the target and the last measurement.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HnswSearch {
    pub ef_search: usize,
    /// None when `--hnsw-ef-search` fixes the width.
    pub target_recall: Option<f64>,
    /// Recall@10 measured at `ef_search` (see `probe`); None before the first
    /// measurement.
    pub estimated_recall: Option<f64>,
    /// Vectors in the index when it was measured.
    pub measured_at_vectors: u64,
    /// What the measurement's queries were; None before the first.
    pub probe: Option<crate::index::recall::Probe>,
}

/// Sizes of the searchable index, known without a round trip (for metrics).
#[derive(Debug, Clone, Default)]
pub struct ViewCounts {
    pub documents: u64,
    pub chunks: u64,
    /// Whether they are exact now: metrics export no count that is not.
    pub accuracy: CountAccuracy,
}

/// One vector query as the store runs it.
#[derive(Debug, Clone)]
pub struct StoreQuery<'a> {
    pub vector: &'a [f32],
    /// Best hits wanted (offset already added by the core).
    pub count: usize,
    pub score_threshold: Option<f32>,
    pub filter: &'a Filter,
    pub with_text: bool,
    pub with_metadata: bool,
    pub with_vector: bool,
}

/// One keyword query as the store runs it (BM25 over the chunks' text).
#[derive(Debug, Clone)]
pub struct KeywordQuery<'a> {
    pub text: &'a str,
    /// Best hits wanted.
    pub count: usize,
    pub filter: &'a Filter,
    pub with_text: bool,
    pub with_metadata: bool,
    pub with_vector: bool,
}

/// What a hit carries besides its citation and score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HitContent {
    pub with_text: bool,
    pub with_metadata: bool,
    pub with_vector: bool,
}

impl StoreQuery<'_> {
    pub fn content(&self) -> HitContent {
        HitContent { with_text: self.with_text, with_metadata: self.with_metadata, with_vector: self.with_vector }
    }
}

impl KeywordQuery<'_> {
    pub fn content(&self) -> HitContent {
        HitContent { with_text: self.with_text, with_metadata: self.with_metadata, with_vector: self.with_vector }
    }

    /// The part of the text a store's own keyword engine is sent: its first words, so
    /// that a 100,000-character query costs what a long sentence does (the embedded
    /// store bounds its distinct terms the same way).
    pub fn leading_words(&self) -> String {
        self.text.split_whitespace().take(embedded::keyword::MAX_QUERY_TERMS * 2).collect::<Vec<_>>().join(" ")
    }
}

/// One matching chunk, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredHit {
    pub document_id: String,
    pub chunk_index: u32,
    pub start_char: u32,
    pub end_char: u32,
    /// Cosine similarity to the query (a vector search), or the chunk's BM25 score (a
    /// keyword search: the engine's own, unbounded above).
    pub score: f32,
    /// The chunk's text (when asked for; empty if its document is gone since).
    pub text: Option<String>,
    /// The document's metadata (when asked for).
    pub metadata: BTreeMap<String, String>,
    pub vector: Option<Vec<f32>>,
}

/// Whether this server may work on a job now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Yes; nobody else held it.
    Granted,
    /// Yes, taken over from a server whose lease ran out (it may have died).
    TakenOver,
    /// No: another server holds a live lease.
    HeldElsewhere,
}

/// Documents, chunk vectors, jobs and search, behind one interface.
///
/// Every write is durable when the call returns (and, for a shared store, visible to
/// every server). Writes of indexed documents are idempotent, so a batch that two
/// servers both finish (after a lease ran out) is stored once.
#[async_trait]
pub trait CorpusStore: Send + Sync + 'static {
    /// What the store is.
    fn description(&self) -> &StoreDescription;

    /// Whether it answers now, with its nodes (cheap: cached by engines with a network).
    async fn health(&self) -> StoreHealth;

    /// Stores a new job with its documents, durably, before the caller acknowledges.
    async fn create_job(&self, job: JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord>;

    /// Appends documents to a job that is receiving (IngestStream), durably.
    async fn append_to_job(&self, job_id: &str, documents: Vec<NewDocument>) -> Result<JobRecord>;

    /// Changes a job (read, change, write); NOT_FOUND for an unknown job.
    async fn update_job(&self, job_id: &str, change: JobChange) -> Result<JobRecord>;

    /// A job by id.
    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>>;

    /// Every job not finished yet (and, at start of an embedded store, every job).
    async fn jobs(&self, unfinished_only: bool) -> Result<Vec<JobRecord>>;

    /// Asks to work on a job for a while; a shared store grants it to one server at a
    /// time by lease. Called before each batch, so it also renews the lease.
    async fn claim_job(&self, job_id: &str) -> Result<Claim>;

    /// Recounts a job's progress from what is still pending (shared stores, where two
    /// servers may have counted the same batch), then returns it.
    async fn settle_job(&self, job_id: &str) -> Result<JobRecord>;

    /// Up to `limit` documents of a job still waiting, from sequence `from` on.
    async fn pending_documents(&self, job_id: &str, from: u64, limit: usize) -> Result<Vec<(u64, NewDocument)>>;

    /// The stored vectors of those chunk `hashes` that exist (dedup).
    async fn existing_vectors(&self, hashes: Vec<ContentHash>) -> Result<Vec<Option<Vec<f32>>>>;

    /// Stores indexed documents (replacing earlier versions of the same ids), takes
    /// them and the `failed` ones out of the job's pending documents, and counts them.
    async fn commit_indexed(
        &self,
        job_id: &str,
        documents: Vec<IndexedDocument>,
        failed: Vec<(u64, String)>,
    ) -> Result<JobRecord>;

    /// Deletes documents by id and those matching `filter`; returns how many existed.
    async fn delete_documents(&self, ids: Vec<String>, filter: Option<Filter>) -> Result<usize>;

    /// Stored documents by id (None for unknown ids), in order.
    async fn documents(&self, ids: Vec<String>) -> Result<Vec<Option<DocumentRecord>>>;

    /// What the index holds.
    async fn stats(&self) -> Result<IndexStats>;

    /// Sizes known without a round trip (the last seen, for a remote store).
    fn cached_counts(&self) -> ViewCounts;

    /// How its HNSW index searches; None for exact search and for stores that keep
    /// their index elsewhere (Weaviate and PostgreSQL tune their own).
    fn hnsw_search(&self) -> Option<HnswSearch> {
        None
    }

    /// The best chunks for one query vector, best first.
    async fn search(&self, query: StoreQuery<'_>) -> Result<Vec<StoredHit>>;

    /// The best chunks for one query's words by BM25, best first; none when the text
    /// has no indexable word.
    async fn keyword_search(&self, query: KeywordQuery<'_>) -> Result<Vec<StoredHit>>;

    /// Whether a search's hits carry their text and metadata at little extra cost (the
    /// rows it ranks hold them): hybrid search then has both sides bring the content
    /// instead of reading the page's after fusion, one round trip fewer.
    fn ranks_with_content(&self) -> bool {
        false
    }

    /// Gives `hits` (found without them) their text and metadata, as `content` asks.
    /// Hybrid search ranks each side's candidates without either and fills only the
    /// page it returns. By default from the hits' documents: a chunk's text is its
    /// span of the document's; a hit whose document is gone since gets empty text.
    async fn fill_content(&self, hits: Vec<&mut StoredHit>, content: HitContent) -> Result<()> {
        if !content.with_text && !content.with_metadata || hits.is_empty() {
            return Ok(());
        }
        let mut ids: Vec<String> = hits.iter().map(|hit| hit.document_id.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        let records = self.documents(ids.clone()).await?;
        let by_id: std::collections::HashMap<&str, &DocumentRecord> =
            ids.iter().zip(&records).filter_map(|(id, record)| Some((id.as_str(), record.as_ref()?))).collect();
        for hit in hits {
            let record = by_id.get(hit.document_id.as_str());
            if content.with_text {
                // A document replaced since may have other chunks: its text is not the hit's.
                let text = record.and_then(|record| {
                    let chunk = record.chunks.get(hit.chunk_index as usize)?;
                    let same_span = (chunk.start_char, chunk.end_char) == (hit.start_char, hit.end_char);
                    same_span.then(|| record.text.get(chunk.start_byte as usize..chunk.end_byte as usize))?
                });
                hit.text = Some(text.unwrap_or_default().to_string());
            }
            if content.with_metadata {
                hit.metadata = record.map(|record| record.metadata.clone()).unwrap_or_default();
            }
        }
        Ok(())
    }
}
