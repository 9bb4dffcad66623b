//! The embedded store, the default: everything durable in one redb file in the data
//! directory ([`redb_file`]), an in-memory index rebuilt from it at start
//! ([`view`]: exact SIMD scan or HNSW, plus chunk and metadata lookups), and a BM25
//! keyword index on disk beside the file ([`keyword`]). Private to this server:
//! another server has another index.
//!
//! Writes (indexing, deletes) commit to the file first and then update the view and
//! the keyword index, one at a time under `write_gate`. Searches only take the view's
//! read lock, held for the index scan alone: never across a disk write. An HNSW index
//! picks its search width by measured recall in the background ([`ef_tuning`]).

mod ef_tuning;
pub mod keyword;
pub mod redb_file;
mod scan_together;
pub mod view;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use self::ef_tuning::EfTuner;
use self::keyword::{KeywordChanges, KeywordChunk, KeywordIndex};
use self::redb_file::{IndexChanges, Store};
use self::scan_together::ScanTogether;
use self::view::IndexView;
use super::HitContent;
use super::{
    Claim, CorpusStore, CountAccuracy, DocumentRecord, HnswSearch, IndexStats, IndexedDocument, JobChange, JobRecord,
    KeywordQuery, NewDocument, StoreDescription, StoreHealth, StoreQuery, StoredHit, ViewCounts,
};
use crate::corpus::filter::Filter;
use crate::corpus::text::ContentHash;
use crate::error::{Error, Result};
use crate::index::{ChunkId, IndexKind, IndexParams};

/// Where and how the embedded store keeps its data.
#[derive(Debug, Clone)]
pub struct EmbeddedSettings {
    pub data_dir: PathBuf,
    pub index_kind: IndexKind,
    pub index_params: IndexParams,
    /// Memory the file may use as page cache.
    pub cache_bytes: usize,
    /// Whether to keep the keyword index (`--keyword-index`).
    pub keyword_index: bool,
    /// HNSW: the recall@10 its search width is picked for (`--hnsw-target-recall`);
    /// None when `--hnsw-ef-search` fixes the width.
    pub hnsw_target_recall: Option<f64>,
}

/// The keyword index's directory in the data directory.
const KEYWORD_DIR: &str = "keyword";

/// redb file + in-memory index + keyword index.
pub struct EmbeddedStore {
    file: Arc<Store>,
    view: Arc<RwLock<IndexView>>,
    /// Unfiltered searches, scanned together when they arrive together (the exact
    /// index only: HNSW walks a graph per query, with nothing to share).
    scans: Option<Arc<ScanTogether>>,
    /// None with `--keyword-index false`.
    keywords: Option<Arc<KeywordIndex>>,
    /// Serializes file commits with the view updates that follow them, so the view
    /// applies changes in commit order.
    write_gate: tokio::sync::Mutex<()>,
    description: StoreDescription,
    /// Picks HNSW's search width by measured recall (HNSW with a target only).
    ef_tuner: Option<Arc<EfTuner>>,
}

impl EmbeddedStore {
    /// Opens (or creates) the file for `model` (id and dimension) and loads the index
    /// from it. Blocking: reads the whole file.
    pub fn open(settings: &EmbeddedSettings, model: &str, dim: usize) -> Result<Self> {
        let file = Store::open(&settings.data_dir, model, settings.cache_bytes)?;
        let mut view = IndexView::new(settings.index_kind, dim, settings.index_params)?;
        let mut stored = Vec::new();
        file.for_each_document(|id, record, vectors| stored.push((id, record, vectors)))?;
        let keyword_dir = settings.data_dir.join(KEYWORD_DIR);
        let keywords = if settings.keyword_index {
            Some(KeywordIndex::open(&keyword_dir, file.generation()?, |add| {
                for (id, record, _) in &stored {
                    add(id, keyword_chunks(record));
                }
                Ok(())
            })?)
        } else {
            // Stale from now on: a later start with the index rebuilds it.
            if keyword_dir.exists() {
                std::fs::remove_dir_all(&keyword_dir).map_err(|e| Error::Storage(format!("keyword index: {e}")))?;
            }
            None
        };
        view.load(stored)?;
        let (documents, chunks) = (view.document_count(), view.chunk_count());
        let keyword_chunks = keywords.as_ref().map(KeywordIndex::chunk_count);
        // An empty one quietly: a server of many collections opens each at its start.
        if documents > 0 {
            tracing::info!(documents, chunks, keyword_chunks, "embedded store loaded");
        } else {
            tracing::debug!(documents, chunks, keyword_chunks, "embedded store loaded");
        }
        let description = StoreDescription {
            kind: "embedded",
            shared: false,
            index_id: file.index_id()?,
            index_kind: match settings.index_kind {
                IndexKind::Exact => "exact",
                IndexKind::Hnsw => "hnsw",
            },
        };
        let vectors = view.index.len();
        let view = Arc::new(RwLock::new(view));
        let ef_tuner = match (settings.index_kind, settings.hnsw_target_recall) {
            (IndexKind::Hnsw, Some(target)) => Some(EfTuner::new(target)),
            _ => None,
        };
        if let Some(tuner) = &ef_tuner {
            tuner.maybe_pick(&view, vectors);
        }
        Ok(EmbeddedStore {
            file: Arc::new(file),
            view,
            keywords: keywords.map(Arc::new),
            scans: (settings.index_kind == IndexKind::Exact).then(Arc::default),
            write_gate: tokio::sync::Mutex::new(()),
            description,
            ef_tuner,
        })
    }

    /// Runs blocking file work off the async runtime.
    async fn with_file<T: Send + 'static>(&self, work: impl FnOnce(&Store) -> Result<T> + Send + 'static) -> Result<T> {
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || work(&file))
            .await
            .map_err(|e| Error::Storage(format!("store task: {e}")))?
    }

    /// Follows a commit in the keyword index, then in the view. A keyword index that
    /// fails stays at its older generation, so the next start rebuilds it.
    async fn apply(&self, changes: IndexChanges) {
        let Some(keywords) = self.keywords.clone() else {
            return self.apply_to_view(changes);
        };
        let (changes, applied) = tokio::task::spawn_blocking(move || {
            let applied = keywords.apply(KeywordChanges {
                removed_documents: changes.removed_documents.iter().map(String::as_str).collect(),
                added: changes.upserted.iter().map(|(id, record, _)| (id.as_str(), keyword_chunks(record))).collect(),
                generation: changes.generation,
            });
            (changes, applied)
        })
        .await
        .expect("the keyword index does not panic");
        if let Err(error) = applied {
            tracing::error!(%error, "the keyword index refused a commit; it is rebuilt from the store at the next start");
        }
        self.apply_to_view(changes);
    }

    fn apply_to_view(&self, changes: IndexChanges) {
        let mut view = self.view.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(error) = view.apply(changes) {
            tracing::error!(%error, "the index refused committed vectors; it is rebuilt from the store at the next start");
        }
        let vectors = view.index.len();
        drop(view);
        if let Some(tuner) = &self.ef_tuner {
            tuner.maybe_pick(&self.view, vectors);
        }
    }

    /// Hits for scored chunks, with metadata and vectors as asked, then texts.
    async fn hits(&self, scored: Vec<(ChunkId, f32)>, query: HitContent) -> Result<Vec<StoredHit>> {
        let mut candidates = {
            let view = self.read_view();
            scored
                .into_iter()
                .filter_map(|(chunk_id, score)| {
                    let chunk = view.chunk(chunk_id)?;
                    Some(Candidate {
                        hit: StoredHit {
                            document_id: chunk.document.id.clone(),
                            chunk_index: chunk.index,
                            start_char: chunk.start_char,
                            end_char: chunk.end_char,
                            score,
                            text: None,
                            metadata: if query.with_metadata {
                                chunk.document.metadata.clone()
                            } else {
                                Default::default()
                            },
                            vector: if query.with_vector { view.index.get(chunk_id).map(|v| v.to_vec()) } else { None },
                        },
                        byte_range: (chunk.start_byte, chunk.end_byte),
                    })
                })
                .collect::<Vec<_>>()
        };
        if query.with_text && !candidates.is_empty() {
            let wanted: Vec<(String, (u32, u32))> =
                candidates.iter().map(|c| (c.hit.document_id.clone(), c.byte_range)).collect();
            let texts = self
                .with_file(move |file| {
                    let ids: Vec<&str> = wanted.iter().map(|(id, _)| id.as_str()).collect();
                    let records = file.documents(&ids)?;
                    Ok(wanted
                        .iter()
                        .zip(records)
                        .map(|((_, (start, end)), record)| {
                            // A document deleted since the scan has no text any more.
                            record
                                .and_then(|r| r.text.get(*start as usize..*end as usize).map(str::to_string))
                                .unwrap_or_default()
                        })
                        .collect::<Vec<_>>())
                })
                .await?;
            for (candidate, text) in candidates.iter_mut().zip(texts) {
                candidate.hit.text = Some(text);
            }
        }
        Ok(candidates.into_iter().map(|c| c.hit).collect())
    }

    fn read_view(&self) -> std::sync::RwLockReadGuard<'_, IndexView> {
        self.view.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A document's chunks as the keyword index takes them.
fn keyword_chunks(record: &DocumentRecord) -> Vec<KeywordChunk<'_>> {
    record
        .chunks
        .iter()
        .map(|chunk| KeywordChunk {
            chunk_id: chunk.chunk_id,
            text: record.text.get(chunk.start_byte as usize..chunk.end_byte as usize).unwrap_or_default(),
        })
        .collect()
}

/// A hit before its text is read from the file.
struct Candidate {
    hit: StoredHit,
    byte_range: (u32, u32),
}

#[async_trait]
impl CorpusStore for EmbeddedStore {
    fn description(&self) -> &StoreDescription {
        &self.description
    }

    async fn health(&self) -> StoreHealth {
        StoreHealth { healthy: true, detail: String::new(), nodes: Vec::new() }
    }

    async fn create_job(&self, job: JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord> {
        self.with_file(move |file| file.create_job(&job, &documents)).await
    }

    async fn append_to_job(&self, job_id: &str, documents: Vec<NewDocument>) -> Result<JobRecord> {
        let id = job_id.to_string();
        self.with_file(move |file| file.append_to_job(&id, &documents)).await
    }

    async fn update_job(&self, job_id: &str, change: JobChange) -> Result<JobRecord> {
        let id = job_id.to_string();
        self.with_file(move |file| file.update_job(&id, |job, _| Ok(change(job)))).await
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        let id = job_id.to_string();
        self.with_file(move |file| Ok(file.jobs()?.into_iter().find(|job| job.id == id))).await
    }

    async fn jobs(&self, unfinished_only: bool) -> Result<Vec<JobRecord>> {
        let jobs = self.with_file(|file| file.jobs()).await?;
        Ok(jobs.into_iter().filter(|job| !unfinished_only || !job.is_finished()).collect())
    }

    async fn claim_job(&self, _job_id: &str) -> Result<Claim> {
        // One server, one runner: nobody to share with.
        Ok(Claim::Granted)
    }

    async fn settle_job(&self, job_id: &str) -> Result<JobRecord> {
        // Counted exactly in the commits that stored the documents.
        self.job(job_id).await?.ok_or_else(|| Error::NotFound(format!("job {job_id} does not exist")))
    }

    async fn pending_documents(&self, job_id: &str, from: u64, limit: usize) -> Result<Vec<(u64, NewDocument)>> {
        let id = job_id.to_string();
        self.with_file(move |file| file.pending_documents(&id, from, limit)).await
    }

    async fn existing_vectors(&self, hashes: Vec<ContentHash>) -> Result<Vec<Option<Vec<f32>>>> {
        self.with_file(move |file| file.existing_vectors(&hashes)).await
    }

    async fn commit_indexed(
        &self,
        job_id: &str,
        documents: Vec<IndexedDocument>,
        failed: Vec<(u64, String)>,
    ) -> Result<JobRecord> {
        let _gate = self.write_gate.lock().await;
        let id = job_id.to_string();
        let (changes, job) = self.with_file(move |file| file.commit_indexed(&id, documents, &failed)).await?;
        self.apply(changes).await;
        Ok(job)
    }

    async fn delete_documents(&self, ids: Vec<String>, filter: Option<Filter>) -> Result<usize> {
        let _gate = self.write_gate.lock().await;
        let mut targets = ids;
        if let Some(filter) = filter {
            targets.extend(self.read_view().document_ids_matching(&filter));
        }
        targets.sort();
        targets.dedup();
        let changes = self.with_file(move |file| file.delete_documents(&targets)).await?;
        let deleted = changes.removed_documents.len();
        self.apply(changes).await;
        Ok(deleted)
    }

    async fn documents(&self, ids: Vec<String>) -> Result<Vec<Option<DocumentRecord>>> {
        self.with_file(move |file| {
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            file.documents(&refs)
        })
        .await
    }

    async fn stats(&self) -> Result<IndexStats> {
        let ViewCounts { documents, chunks, accuracy } = self.cached_counts();
        let (unique_vectors, pending_documents) =
            self.with_file(|file| Ok((file.vector_count()?, file.pending_count()?))).await?;
        Ok(IndexStats { documents, chunks, unique_vectors, pending_documents, accuracy })
    }

    fn hnsw_search(&self) -> Option<HnswSearch> {
        let ef_search = self.read_view().index.ef_search()?;
        Some(match &self.ef_tuner {
            Some(tuner) => tuner.report(ef_search),
            None => HnswSearch { ef_search, ..HnswSearch::default() },
        })
    }

    fn cached_counts(&self) -> ViewCounts {
        let view = self.read_view();
        ViewCounts {
            documents: view.document_count() as u64,
            chunks: view.chunk_count() as u64,
            accuracy: CountAccuracy::Exact,
        }
    }

    async fn search(&self, query: StoreQuery<'_>) -> Result<Vec<StoredHit>> {
        if let Some(scans) = self.scans.as_ref().filter(|_| query.filter.is_empty()) {
            let scored = scans.search(&self.view, query.vector, query.count, query.score_threshold).await?;
            return self.hits(scored, query.content()).await;
        }
        let scored = {
            let view = self.read_view();
            let filter = query.filter;
            let passes = |id: ChunkId| view.chunk_matches(id, filter);
            let predicate: Option<&(dyn Fn(ChunkId) -> bool + Sync)> =
                if filter.is_empty() { None } else { Some(&passes) };
            let scored = view.index.search(query.vector, query.count, query.score_threshold, predicate)?;
            if let Some(tuner) = &self.ef_tuner {
                tuner.record_query(&self.view, query.vector, view.index.len());
            }
            scored
        };
        self.hits(scored, query.content()).await
    }

    async fn keyword_search(&self, query: KeywordQuery<'_>) -> Result<Vec<StoredHit>> {
        let Some(keywords) = self.keywords.clone() else {
            return Err(Error::invalid(
                "mode",
                "this server keeps no keyword index (--keyword-index false): only vector search is available",
            ));
        };
        let allowed = (!query.filter.is_empty()).then(|| self.read_view().chunk_ids_matching(query.filter));
        let (text, count) = (query.text.to_string(), query.count);
        let scored = tokio::task::spawn_blocking(move || keywords.search(&text, count, allowed))
            .await
            .map_err(|e| Error::Storage(format!("keyword search task: {e}")))??;
        self.hits(scored, query.content()).await
    }
}
