//! Ingestion jobs: their progress (in memory, mirrored from the store, watchable) and
//! the background runner that indexes pending documents.
//!
//! The runner takes the oldest unfinished job and indexes its pending documents a
//! batch at a time: chunk, look up chunks already embedded (by content hash), embed
//! the others through the engine (so ingestion shares model batches with live
//! traffic), then commit the batch and update the index. A document counts as
//! processed only in the commit that stores it. After a crash, pending documents are
//! still in the store and the job resumes where it was.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use tokio::sync::{Notify, watch};

use super::chunker::{ChunkSettings, chunk_spans};
use super::store::{DocumentRecord, IndexedDocument, JobRecord, JobState, NewDocument, Store, StoredChunk};
use super::text::content_hash;
use super::{Corpus, blocking, unix_now};
use crate::batcher::Priority;
use crate::engine::{EmbedOptions, EmbeddingEngine};
use crate::error::{Error, Result};

/// A fresh job record.
pub fn new_job(receiving: bool) -> JobRecord {
    JobRecord {
        id: uuid::Uuid::new_v4().to_string(),
        state: JobState::Pending,
        total: 0,
        processed: 0,
        failed: 0,
        error: None,
        started_at: unix_now(),
        finished_at: None,
        next_sequence: 0,
        receiving,
        revision: 0,
    }
}

/// Every job's latest state, each behind a watch channel so WatchJob can follow it.
pub struct JobBoard {
    jobs: Mutex<HashMap<String, watch::Sender<JobRecord>>>,
    /// Wakes the runner when a job gets work.
    work: Notify,
}

impl JobBoard {
    /// Loads the jobs of the store. Jobs interrupted by a stop resume: a stream that
    /// was still sending is closed (its sender is gone), running jobs go back to
    /// pending.
    pub fn recover(store: &Store) -> Result<Self> {
        let mut jobs = HashMap::new();
        for mut job in store.jobs()? {
            if !job.is_finished() && (job.receiving || job.state == JobState::Running) {
                job = store.update_job(&job.id, |job, _| {
                    job.receiving = false;
                    job.state = JobState::Pending;
                    Ok(())
                })?;
            }
            jobs.insert(job.id.clone(), watch::Sender::new(job));
        }
        Ok(JobBoard { jobs: Mutex::new(jobs), work: Notify::new() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<JobRecord>>> {
        self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a job's new state (unless a newer one is already known: concurrent
    /// writers may publish out of order) and wakes the runner.
    pub fn publish(&self, job: JobRecord) {
        let mut jobs = self.lock();
        match jobs.get(&job.id) {
            Some(sender) => {
                sender.send_if_modified(|current| {
                    let newer = job.revision > current.revision;
                    if newer {
                        *current = job;
                    }
                    newer
                });
            }
            None => {
                jobs.insert(job.id.clone(), watch::Sender::new(job));
            }
        }
        drop(jobs);
        self.work.notify_one();
    }

    /// A job's state, or NOT_FOUND.
    pub fn get(&self, id: &str) -> Result<JobRecord> {
        self.lock()
            .get(id)
            .map(|s| s.borrow().clone())
            .ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))
    }

    /// A receiver that sees every change of the job.
    pub fn watch(&self, id: &str) -> Result<watch::Receiver<JobRecord>> {
        self.lock().get(id).map(|s| s.subscribe()).ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))
    }

    /// Unfinished jobs, oldest first.
    pub fn unfinished(&self) -> Vec<JobRecord> {
        let mut jobs: Vec<JobRecord> =
            self.lock().values().map(|s| s.borrow().clone()).filter(|job| !job.is_finished()).collect();
        jobs.sort_by(|a, b| a.started_at.total_cmp(&b.started_at).then_with(|| a.id.cmp(&b.id)));
        jobs
    }
}

/// Pause before retrying work the engine refused for overload or the store failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Batches being chunked and embedded at once: one committing while the next embeds,
/// plus one more so the model has queued work the moment a batch finishes.
const PIPELINE_DEPTH: usize = 3;

/// A batch ready to commit.
struct EmbeddedBatch {
    job_id: String,
    indexed: Vec<IndexedDocument>,
    failed: Vec<(u64, String)>,
}

impl Corpus {
    /// Indexes pending documents until `shutdown` fires. Runs as one background task.
    ///
    /// A pipeline `PIPELINE_DEPTH` batches deep: while one batch commits (fsync), the
    /// next ones are chunked and embedded, so the model never idles on the disk.
    /// Batches commit in order; a retryable failure drops the pipeline and starts again
    /// from what is still pending (committed documents are no longer pending, so none
    /// is indexed twice).
    pub async fn run_jobs(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut pipeline: FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>> = FuturesOrdered::new();
        // The next pending sequence to read, per job being fed into the pipeline.
        let mut cursor: Option<(String, u64)> = None;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let wake = self.jobs.work.notified();
            if let Err(error) = self.fill_pipeline(&mut pipeline, &mut cursor).await {
                self.recover_from(&error, &mut pipeline, &mut cursor).await;
                continue;
            }
            let Some(embedded) = pipeline.next().await else {
                tokio::select! {
                    () = wake => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            };
            if let Err(error) = async { self.commit_batch(embedded?).await }.await {
                self.recover_from(&error, &mut pipeline, &mut cursor).await;
            }
        }
    }

    /// Logs a failure, empties the pipeline and pauses before the work is read again.
    async fn recover_from(
        &self,
        error: &Error,
        pipeline: &mut FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>>,
        cursor: &mut Option<(String, u64)>,
    ) {
        tracing::warn!(%error, "indexing failed; retrying from the pending documents");
        *pipeline = FuturesOrdered::new();
        *cursor = None;
        tokio::time::sleep(RETRY_PAUSE).await;
    }

    /// Starts batches of the oldest unfinished job until the pipeline is full; finishes
    /// jobs with nothing left.
    async fn fill_pipeline(
        self: &Arc<Self>,
        pipeline: &mut FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>>,
        cursor: &mut Option<(String, u64)>,
    ) -> Result<()> {
        while pipeline.len() < PIPELINE_DEPTH {
            let Some(job) = self.unfinished_job_with_work() else { return Ok(()) };
            let from = match cursor {
                Some((id, next)) if *id == job.id => *next,
                _ => 0,
            };
            let corpus = self.clone();
            let (id, limit) = (job.id.clone(), self.settings.ingest_batch_documents);
            let pending = blocking(move || corpus.store.pending_documents(&id, from, limit)).await?;
            let Some((last_sequence, _)) = pending.last() else {
                if pipeline.is_empty() && !job.receiving && self.finish(job).await?.is_finished() {
                    continue;
                }
                return Ok(());
            };
            *cursor = Some((job.id.clone(), last_sequence + 1));
            if job.state == JobState::Pending {
                self.update_job(&job.id, |job| {
                    if job.state == JobState::Pending {
                        job.state = JobState::Running;
                    }
                })
                .await?;
            }
            let corpus = self.clone();
            let job_id = job.id.clone();
            pipeline.push_back(Box::pin(async move {
                let (indexed, failed) = corpus.embed_documents(pending).await?;
                Ok(EmbeddedBatch { job_id, indexed, failed })
            }));
        }
        Ok(())
    }

    /// The oldest job that has documents to index or can be finished.
    fn unfinished_job_with_work(&self) -> Option<JobRecord> {
        self.jobs.unfinished().into_iter().find(|job| job.processed + job.failed < job.total || !job.receiving)
    }

    /// Commits one embedded batch and shows it in the index.
    async fn commit_batch(self: &Arc<Self>, batch: EmbeddedBatch) -> Result<()> {
        let _gate = self.write_gate.lock().await;
        let corpus = self.clone();
        let EmbeddedBatch { job_id, indexed, failed } = batch;
        let stored = indexed.len() as u64;
        let (changes, job) = blocking(move || corpus.store.commit_indexed(&job_id, indexed, &failed)).await?;
        self.apply(changes);
        crate::stats::Stats::add(&self.engine.stats().ingested_documents, stored);
        self.jobs.publish(job);
        Ok(())
    }

    /// Ends a job whose documents are all done, unless more arrived meanwhile.
    async fn finish(self: &Arc<Self>, job: JobRecord) -> Result<JobRecord> {
        let job = self
            .update_job(&job.id, |job| {
                if !job.receiving && job.processed + job.failed >= job.total {
                    job.state = if job.failed > 0 { JobState::Failed } else { JobState::Completed };
                    job.finished_at = Some(unix_now());
                }
            })
            .await?;
        if !job.is_finished() && !job.receiving {
            tracing::warn!(job = %job.id, "job has uncounted documents but none pending");
        }
        Ok(job)
    }

    /// Changes a job durably and publishes the result.
    pub(super) async fn update_job(
        self: &Arc<Self>,
        job_id: &str,
        change: impl FnOnce(&mut JobRecord) + Send + 'static,
    ) -> Result<JobRecord> {
        let corpus = self.clone();
        let id = job_id.to_string();
        let job = blocking(move || corpus.store.update_job(&id, |job, _| Ok(change(job)))).await?;
        self.jobs.publish(job.clone());
        Ok(job)
    }

    /// Chunks and embeds documents; returns the indexable ones and the failed ones
    /// (sequence, reason). Errors only for what is worth retrying (overload, store).
    async fn embed_documents(
        self: &Arc<Self>,
        pending: Vec<(u64, NewDocument)>,
    ) -> Result<(Vec<IndexedDocument>, Vec<(u64, String)>)> {
        let engine = self.engine.clone();
        let chunking = self.settings.chunking;
        let chunked = tokio::task::spawn_blocking(move || {
            pending
                .into_iter()
                .map(|(sequence, document)| chunk_document(&engine, chunking, sequence, document))
                .collect()
        })
        .await
        .map_err(|e| Error::Model(format!("chunking task: {e}")))?;
        let chunked: Vec<Result<IndexedDocument, (u64, String)>> = chunked;

        // Vectors already stored (identical chunks seen before) are not embedded again.
        let hashes: Vec<_> = chunked.iter().flatten().flat_map(|d| d.record.chunks.iter().map(|c| c.hash)).collect();
        let corpus = self.clone();
        let lookup = hashes.clone();
        let known = blocking(move || corpus.store.existing_vectors(&lookup)).await?;
        let mut vectors: HashMap<[u8; 32], Vec<f32>> =
            hashes.iter().zip(known).filter_map(|(hash, vector)| vector.map(|v| (*hash, v))).collect();

        let mut to_embed: Vec<([u8; 32], String)> = Vec::new();
        let mut queued = std::collections::HashSet::new();
        for document in chunked.iter().flatten() {
            for chunk in &document.record.chunks {
                if !vectors.contains_key(&chunk.hash) && queued.insert(chunk.hash) {
                    let text = &document.record.text[chunk.start_byte as usize..chunk.end_byte as usize];
                    to_embed.push((chunk.hash, text.to_string()));
                }
            }
        }
        let mut failed: Vec<(u64, String)> = chunked.iter().filter_map(|r| r.as_ref().err().cloned()).collect();
        let mut embed_failure = None;
        let per_call = self.engine.limits().max_inputs_per_request;
        for group in to_embed.chunks(per_call) {
            let texts: Vec<String> = group.iter().map(|(_, text)| text.clone()).collect();
            let options = EmbedOptions { priority: Priority::Bulk, ..EmbedOptions::default() };
            match self.engine.embed(texts, options).await {
                Ok(embeddings) => {
                    for ((hash, _), row) in group.iter().zip(embeddings.values.chunks_exact(embeddings.dim)) {
                        vectors.insert(*hash, row.to_vec());
                    }
                }
                Err(error @ (Error::ResourceExhausted(_) | Error::Unavailable(_) | Error::Storage(_))) => {
                    return Err(error);
                }
                Err(error) => embed_failure = Some(error.to_string()),
            }
        }
        let mut indexed = Vec::new();
        for mut document in chunked.into_iter().flatten() {
            let found: Option<Vec<Vec<f32>>> =
                document.record.chunks.iter().map(|c| vectors.get(&c.hash).cloned()).collect();
            match found {
                Some(chunk_vectors) => {
                    document.vectors = chunk_vectors;
                    indexed.push(document);
                }
                None => failed.push((
                    document.sequence,
                    format!("document {}: {}", document.id, embed_failure.clone().unwrap_or_default()),
                )),
            }
        }
        Ok((indexed, failed))
    }
}

/// Splits one document into chunks with their spans and content hashes.
fn chunk_document(
    engine: &EmbeddingEngine,
    settings: ChunkSettings,
    sequence: u64,
    document: NewDocument,
) -> Result<IndexedDocument, (u64, String)> {
    let (units, units_per_token) = engine.chunking_units(&document.text).map_err(|e| (sequence, e.to_string()))?;
    let scaled = ChunkSettings {
        max_tokens: ((settings.max_tokens as f32) * units_per_token).max(1.0) as usize,
        overlap_tokens: ((settings.overlap_tokens as f32) * units_per_token) as usize,
    };
    let chunks = chunk_spans(&document.text, &units, scaled)
        .into_iter()
        .map(|span| StoredChunk {
            chunk_id: 0,
            start_byte: span.start_byte as u32,
            end_byte: span.end_byte as u32,
            start_char: span.start_char as u32,
            end_char: span.end_char as u32,
            hash: content_hash(&document.text[span.start_byte..span.end_byte]),
        })
        .collect::<Vec<_>>();
    if chunks.is_empty() {
        return Err((sequence, format!("document {} has no text to index", document.id)));
    }
    Ok(IndexedDocument {
        sequence,
        id: document.id,
        record: DocumentRecord { text: document.text, metadata: document.metadata, chunks, indexed_at: unix_now() },
        vectors: Vec::new(),
    })
}
