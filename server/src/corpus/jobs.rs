//! Ingestion jobs: their progress (in memory, mirrored from the store, watchable) and
//! the background runner that indexes pending documents.
//!
//! The runner takes the oldest unfinished job and indexes its pending documents a
//! batch at a time: chunk, look up chunks already embedded (by content hash), embed
//! the others through the engine (so ingestion shares model batches with live
//! traffic), then commit the batch and update the index. A document counts as
//! processed only in the commit that stores it. After a crash, pending documents are
//! still in the store and the job resumes where it was.
//!
//! With a shared store, every server runs a runner: before each batch it claims the
//! job (a lease in the store), so one server works on a job at a time and another
//! takes it over when that server dies. A refresher follows the store's jobs, so any
//! server answers for any job and finds work orphaned by a dead server.
//!
//! A job ends only on the count its store's `settle_job` makes (in a shared store the
//! counts kept along the way are estimates). A job whose store calls fail (a record a
//! crashed node left unreadable, say) is retried on its own backoff while the runner
//! goes on with the other jobs: one broken job must not stall every newer one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use tokio::sync::{Notify, watch};

use super::chunker::{ChunkSettings, chunk_spans};
use super::text::content_hash;
use super::{Corpus, unix_now};
use crate::batcher::Priority;
use crate::engine::{EmbedOptions, EmbeddingEngine};
use crate::error::{Error, Result};
use crate::store::{
    Claim, CorpusStore, DocumentRecord, IndexedDocument, JobRecord, JobState, NewDocument, StoredChunk,
};

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
    /// Loads the jobs of the store. With a private store, jobs interrupted by a stop
    /// resume: a stream that was still sending is closed (its sender is gone), running
    /// jobs go back to pending. A shared store's unfinished jobs may be running on
    /// other servers: they are left alone (leases decide who works on them).
    pub async fn recover(store: &dyn CorpusStore) -> Result<Self> {
        let shared = store.description().shared;
        let mut jobs = HashMap::new();
        for mut job in store.jobs(shared).await? {
            if !shared && !job.is_finished() && (job.receiving || job.state == JobState::Running) {
                job = store
                    .update_job(
                        &job.id,
                        Box::new(|job| {
                            job.receiving = false;
                            job.state = JobState::Pending;
                        }),
                    )
                    .await?;
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
                    // A finished state is final, whatever its revision: a record rebuilt
                    // from a damaged one counts its revisions again from lower.
                    let newer = job.revision > current.revision || (job.is_finished() && !current.is_finished());
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

/// Longest pause before a job whose store calls keep failing is tried again; the
/// pause doubles from [`RETRY_PAUSE`] with each failure in a row.
const JOB_RETRY_MAX: Duration = Duration::from_secs(5);

/// How often a server with a shared store reads the store's unfinished jobs: to find
/// work whose server died, and to show other servers' progress to its watchers.
const SHARED_JOBS_REFRESH: Duration = Duration::from_secs(1);

/// Batches being chunked and embedded at once: one committing while the next embeds,
/// plus one more so the model has queued work the moment a batch finishes.
const PIPELINE_DEPTH: usize = 3;

/// Jobs whose last store call failed, each with when it may be tried again and its
/// current pause. Owned by the runner task.
#[derive(Debug, Default)]
struct JobBackoff {
    jobs: HashMap<String, (Instant, Duration)>,
}

impl JobBackoff {
    /// Puts a job aside for twice its last pause (at least [`RETRY_PAUSE`], at most
    /// [`JOB_RETRY_MAX`]).
    fn failed(&mut self, job_id: &str, error: &Error) {
        let pause = self.jobs.get(job_id).map_or(RETRY_PAUSE, |(_, last)| (*last * 2).min(JOB_RETRY_MAX));
        tracing::warn!(job = job_id, %error, retry_in = ?pause, "job failed; going on with the other jobs");
        self.jobs.insert(job_id.to_string(), (Instant::now() + pause, pause));
    }

    fn succeeded(&mut self, job_id: &str) {
        self.jobs.remove(job_id);
    }

    fn ready(&self, job_id: &str) -> bool {
        self.jobs.get(job_id).is_none_or(|(until, _)| *until <= Instant::now())
    }

    /// When the next job put aside may be tried again.
    fn next_ready(&self) -> Option<Instant> {
        self.jobs.values().map(|(until, _)| *until).filter(|until| *until > Instant::now()).min()
    }
}

/// What one job gave the pipeline.
enum Fed {
    /// A batch of its pending documents.
    Batch,
    /// Nothing: it was done and is now finished.
    Finished,
    /// Nothing now: its documents are in flight, still arriving, or not found yet.
    Idle,
}

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
        let mut backoff = JobBackoff::default();
        if self.store.description().shared {
            tokio::spawn(self.clone().follow_shared_jobs(shutdown.clone()));
        }
        loop {
            if *shutdown.borrow() {
                return;
            }
            let wake = self.jobs.work.notified();
            if let Err(error) = self.fill_pipeline(&mut pipeline, &mut cursor, &mut backoff).await {
                self.recover_from(&error, &mut pipeline, &mut cursor).await;
                continue;
            }
            let Some(embedded) = pipeline.next().await else {
                let retry = backoff.next_ready();
                tokio::select! {
                    () = wake => {}
                    _ = shutdown.changed() => {}
                    // Jobs held by other servers are tried again when their lease may have run out.
                    () = tokio::time::sleep(SHARED_JOBS_REFRESH), if self.store.description().shared => {}
                    () = tokio::time::sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {}
                }
                continue;
            };
            let committed = match embedded {
                Ok(batch) => {
                    let job_id = batch.job_id.clone();
                    let committed = self.commit_batch(batch).await;
                    match &committed {
                        Ok(()) => backoff.succeeded(&job_id),
                        Err(error) => backoff.failed(&job_id, error),
                    }
                    committed
                }
                // Embedding failures (overload) are no job's fault.
                Err(error) => Err(error),
            };
            if let Err(error) = committed {
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
    /// jobs with nothing left. A job that fails while nothing is in flight is put aside
    /// (see [`JobBackoff`]) and the next one is tried; a failure with batches in flight
    /// is returned, to drop the pipeline.
    async fn fill_pipeline(
        self: &Arc<Self>,
        pipeline: &mut FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>>,
        cursor: &mut Option<(String, u64)>,
        backoff: &mut JobBackoff,
    ) -> Result<()> {
        while pipeline.len() < PIPELINE_DEPTH {
            let fresh = pipeline.is_empty();
            let Some(job) = self.claimed_job_with_work(fresh, backoff).await else { return Ok(()) };
            let job_id = job.id.clone();
            match self.feed_job(job, pipeline, cursor).await {
                Ok(Fed::Batch | Fed::Finished) => {}
                Ok(Fed::Idle) => return Ok(()),
                Err(error) if fresh => {
                    backoff.failed(&job_id, &error);
                    *cursor = None;
                }
                Err(error) => {
                    backoff.failed(&job_id, &error);
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Starts one batch of `job`'s pending documents, or settles and finishes the job
    /// when none is left.
    async fn feed_job(
        self: &Arc<Self>,
        job: JobRecord,
        pipeline: &mut FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>>,
        cursor: &mut Option<(String, u64)>,
    ) -> Result<Fed> {
        let from = match cursor {
            Some((id, next)) if *id == job.id => *next,
            _ => 0,
        };
        let limit = self.settings.ingest_batch_documents;
        let pending = self.store.pending_documents(&job.id, from, limit).await?;
        let Some((last_sequence, _)) = pending.last() else {
            if pipeline.is_empty() && !job.receiving {
                // The counts along the way may be off (two servers counted one batch,
                // a search missed documents); only the settled count may end the job.
                let settled = self.store.settle_job(&job.id).await?;
                self.jobs.publish(settled.clone());
                if !settled.receiving && self.finish(settled).await?.is_finished() {
                    return Ok(Fed::Finished);
                }
            }
            // Nothing after the cursor, yet the job is not done: a read of a shared
            // store can miss documents acknowledged a moment before (Weaviate answers
            // from one replica per shard, which may not have applied the write yet),
            // and the cursor has passed them. Without this the job never ends
            // (tests/weaviate_faults.rs saw 20 of 200 left pending for good). Read
            // from the start next time: indexed documents are no longer pending.
            if pipeline.is_empty() {
                *cursor = None;
            }
            return Ok(Fed::Idle);
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
        Ok(Fed::Batch)
    }

    /// The oldest job that has documents to index or can be finished and that this
    /// server may work on (with a shared store: holds the lease of), leaving out jobs
    /// put aside after failures. While batches are in flight (`fresh` false) it stays
    /// with the job it is on. A job whose claim fails is put aside, not the runner.
    async fn claimed_job_with_work(self: &Arc<Self>, fresh: bool, backoff: &mut JobBackoff) -> Option<JobRecord> {
        let candidates: Vec<JobRecord> = self
            .jobs
            .unfinished()
            .into_iter()
            .filter(|job| job.processed + job.failed < job.total || !job.receiving)
            .filter(|job| backoff.ready(&job.id))
            .collect();
        for job in candidates {
            let claim = match self.store.claim_job(&job.id).await {
                Ok(claim) => claim,
                Err(error) => {
                    backoff.failed(&job.id, &error);
                    continue;
                }
            };
            match claim {
                Claim::Granted => return Some(job),
                Claim::TakenOver => {
                    tracing::info!(job = %job.id, "took over a job whose server stopped renewing its lease");
                    if !job.receiving {
                        return Some(job);
                    }
                    // Its IngestStream died with that server: nothing more will come.
                    match self.update_job(&job.id, |job| job.receiving = false).await {
                        Ok(job) => return Some(job),
                        Err(error) => backoff.failed(&job.id, &error),
                    }
                }
                Claim::HeldElsewhere if fresh => continue,
                Claim::HeldElsewhere => return None,
            }
        }
        None
    }

    /// Follows a shared store's jobs until `shutdown`: new unfinished jobs (from any
    /// server) and the progress of those this server knows, for GetJob and WatchJob.
    async fn follow_shared_jobs(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(SHARED_JOBS_REFRESH) => {}
                _ = shutdown.changed() => return,
            }
            let unfinished = match self.store.jobs(true).await {
                Ok(jobs) => jobs,
                Err(error) => {
                    tracing::debug!(%error, "cannot read the shared store's jobs");
                    continue;
                }
            };
            let still_open: std::collections::HashSet<String> = unfinished.iter().map(|j| j.id.clone()).collect();
            for job in unfinished {
                self.jobs.publish(job);
            }
            // Jobs this server saw unfinished that finished elsewhere.
            for job in self.jobs.unfinished() {
                if !still_open.contains(&job.id)
                    && let Ok(Some(latest)) = self.store.job(&job.id).await
                {
                    self.jobs.publish(latest);
                }
            }
        }
    }

    /// A job's state: this server's view, or the store's for a job it has not seen
    /// (another server with a shared store took it).
    pub async fn job(&self, id: &str) -> Result<JobRecord> {
        if let Ok(job) = self.jobs.get(id) {
            return Ok(job);
        }
        match self.store.job(id).await? {
            Some(job) => {
                self.jobs.publish(job.clone());
                Ok(job)
            }
            None => Err(Error::NotFound(format!("job {id} does not exist"))),
        }
    }

    /// A receiver that sees every change of the job.
    pub async fn watch_job(&self, id: &str) -> Result<watch::Receiver<JobRecord>> {
        self.job(id).await?;
        self.jobs.watch(id)
    }

    /// Commits one embedded batch and shows it in the index.
    async fn commit_batch(self: &Arc<Self>, batch: EmbeddedBatch) -> Result<()> {
        let EmbeddedBatch { job_id, indexed, failed } = batch;
        let stored = indexed.len() as u64;
        let job = self.store.commit_indexed(&job_id, indexed, failed).await?;
        crate::stats::Stats::add(&self.engine.stats().ingested_documents, stored);
        self.jobs.publish(job);
        Ok(())
    }

    /// Ends a job whose settled count (from [`CorpusStore::settle_job`]) has every
    /// document done, unless more arrived meanwhile. The job is ended with that count,
    /// not with the one it holds when this runs: a concurrent estimate could be off.
    async fn finish(self: &Arc<Self>, settled: JobRecord) -> Result<JobRecord> {
        if settled.processed + settled.failed < settled.total {
            tracing::warn!(job = %settled.id, "job has uncounted documents but none pending");
            return Ok(settled);
        }
        let (total, processed, failed) = (settled.total, settled.processed, settled.failed);
        let job = self
            .update_job(&settled.id, move |job| {
                if !job.receiving && !job.is_finished() && job.total == total {
                    job.processed = processed;
                    job.failed = failed;
                    job.state = if failed > 0 { JobState::Failed } else { JobState::Completed };
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
        let job = self.store.update_job(job_id, Box::new(change)).await?;
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
        let known = self.store.existing_vectors(hashes.clone()).await?;
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
                Err(
                    error @ (Error::ResourceExhausted(_)
                    | Error::Overloaded { .. }
                    | Error::Unavailable(_)
                    | Error::Storage(_)),
                ) => {
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
