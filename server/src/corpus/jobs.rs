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
//!
//! Every retry waits an exponential pause with jitter (from [`RETRY_PAUSE`] up to
//! [`JOB_RETRY_MAX`]), so servers sharing a store do not retry in step. A job that
//! cannot progress says why: the runner logs once when it starts failing, when its
//! error changes and when it progresses again (not once per try), and the job's
//! `retrying` (last error, since when) shows in GetJob, WatchJob and the HTTP API
//! until it progresses. The runner writes that state into the job record, best
//! effort, so that with a shared store any server answers with it; its own memory
//! overrides the store's (a write that failed, a store that keeps no such field).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use tokio::sync::{Notify, watch};

use super::chunker::{ChunkSettings, chunk_spans};
use super::settles::Settles;
use super::text::content_hash;
use super::{Corpus, unix_now};
use crate::batcher::Priority;
use crate::engine::{EmbedOptions, EmbeddingEngine};
use crate::error::{Error, Result};
use crate::store::{
    Claim, CorpusStore, DocumentRecord, IndexedDocument, JobRecord, JobRetry, JobState, NewDocument, StoredChunk,
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
        retrying: None,
    }
}

/// Every job's latest state, each behind a watch channel so WatchJob can follow it.
pub struct JobBoard {
    jobs: Mutex<HashMap<String, watch::Sender<JobRecord>>>,
    /// This server's runner's word on its jobs' retries (`None`: progressing again),
    /// laid over every state published: the store's copy may lack it (a store that
    /// keeps no such field, a best-effort write that failed) or be stale.
    retries: Mutex<HashMap<String, Option<JobRetry>>>,
    /// How reads of a shared store's job list went lately (see `follow_shared_jobs`).
    list_reads: Mutex<ListReads>,
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
        Ok(JobBoard {
            jobs: Mutex::new(jobs),
            retries: Mutex::new(HashMap::new()),
            list_reads: Mutex::new(ListReads { succeeded: Instant::now(), failing: false }),
            work: Notify::new(),
        })
    }

    /// Notes how a read of the shared store's job list went.
    fn list_read(&self, ok: bool) {
        let mut reads = self.list_reads.lock().unwrap_or_else(|p| p.into_inner());
        reads.failing = !ok;
        if ok {
            reads.succeeded = Instant::now();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<JobRecord>>> {
        self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_retries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<JobRetry>>> {
        self.retries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records what this server's runner knows of a job's retries and shows it to
    /// GetJob and WatchJob at once (without a store write: see [`Corpus::set_retrying`]).
    fn set_retrying(&self, job_id: &str, retrying: Option<JobRetry>) {
        self.lock_retries().insert(job_id.to_string(), retrying.clone());
        if let Some(sender) = self.lock().get(job_id) {
            sender.send_if_modified(|job| {
                let changed = job.retrying != retrying && !job.is_finished();
                if changed {
                    job.retrying = retrying;
                }
                changed
            });
        }
    }

    /// Lets the store's word on a job's retries count again (the runner's clear is stored).
    fn forget_retrying(&self, job_id: &str) {
        let mut retries = self.lock_retries();
        if retries.get(job_id).is_some_and(Option::is_none) {
            retries.remove(job_id);
        }
    }

    /// Records a job's new state (unless a newer one is already known: concurrent
    /// writers may publish out of order) and wakes the runner.
    pub fn publish(&self, mut job: JobRecord) {
        {
            let mut retries = self.lock_retries();
            if job.is_finished() {
                retries.remove(&job.id);
                job.retrying = None;
            } else if let Some(known) = retries.get(&job.id) {
                job.retrying = known.clone();
            }
        }
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

/// First pause before retrying work the engine refused for overload or the store failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Longest pause before failed work is tried again; the pause doubles from
/// [`RETRY_PAUSE`] with each failure in a row.
const JOB_RETRY_MAX: Duration = Duration::from_secs(5);

/// How often a server with a shared store reads the store's unfinished jobs: to find
/// work whose server died, and to show other servers' progress to its watchers. At
/// least this long between reads, and at least as long as the last read took: a
/// backlog of thousands of jobs makes each read slow, and reading back to back would
/// take the store's time from indexing them.
const SHARED_JOBS_REFRESH: Duration = Duration::from_secs(1);

/// A job list read that has not succeeded for this long is taken as hung (a store
/// call waiting out its timeout), and GetJob reads unfinished jobs by id meanwhile.
const LIST_HUNG_AFTER: Duration = Duration::from_secs(15);

/// How the reads of a shared store's job list went lately.
#[derive(Debug, Clone, Copy)]
struct ListReads {
    /// When the last read succeeded (or the board was loaded).
    succeeded: Instant,
    /// Whether the last read failed.
    failing: bool,
}

impl ListReads {
    /// Whether the board's copies of unfinished jobs may be stale for want of list
    /// reads. Not "older than a few seconds": under a backlog a list read takes that
    /// long, and reading every polled job by id then (measured: 40% of the store
    /// reads while 300 jobs drained) slowed the reads further.
    fn stale(&self) -> bool {
        self.failing || self.succeeded.elapsed() > LIST_HUNG_AFTER
    }
}

/// Batches being chunked and embedded at once: one committing while the next embeds,
/// plus one more so the model has queued work the moment a batch finishes.
const PIPELINE_DEPTH: usize = 3;

/// The pause after `failures` failures in a row: doubling from [`RETRY_PAUSE`], capped
/// at [`JOB_RETRY_MAX`], then scaled by `jitter` (in [0.5, 1]: "equal jitter", so
/// servers and jobs that failed together spread out yet never retry at once).
fn retry_pause(failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let pause = RETRY_PAUSE.saturating_mul(1 << doublings).min(JOB_RETRY_MAX);
    pause.mul_f64(jitter.clamp(0.5, 1.0))
}

/// A random factor for [`retry_pause`].
fn jitter() -> f64 {
    rand::random_range(0.5..=1.0)
}

/// What one more failure changed, for the log-once rule: a line when work starts
/// failing or fails differently, not one per try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// It was progressing.
    Started,
    /// It was failing with another error.
    ErrorChanged,
    /// It fails as before.
    Same,
}

/// A run of failures in a row of one piece of work (a job, or the runner as a whole).
#[derive(Debug, Clone)]
struct Streak {
    failures: u32,
    /// The last error, as text (what GetJob shows and what "changed" compares).
    error: String,
    /// When the run began, in Unix seconds.
    since: f64,
    /// Not tried again before this.
    until: Instant,
    /// The pause that led to `until`.
    pause: Duration,
}

impl Streak {
    /// Counts one more failure in `streak` (starting one if `None`); returns what
    /// changed. The pause grows with every failure, whatever the error.
    fn record(streak: &mut Option<Streak>, error: String, now: Instant, jitter: f64) -> Change {
        let change = match streak {
            None => Change::Started,
            Some(current) if !same_failure(&current.error, &error) => Change::ErrorChanged,
            Some(_) => Change::Same,
        };
        let failures = streak.as_ref().map_or(0, |s| s.failures) + 1;
        let since = streak.as_ref().map_or_else(unix_now, |s| s.since);
        let pause = retry_pause(failures, jitter);
        *streak = Some(Streak { failures, error, since, until: now + pause, pause });
        change
    }

    fn retry(&self) -> JobRetry {
        JobRetry { error: self.error.clone(), since: self.since }
    }
}

/// Whether two failures' texts tell the same news: they may differ in the shards they
/// name. As a dead Weaviate node's loss spreads through the cluster's view, each read
/// names more shards ("shard A: 1 of 2 replicas reachable, shard B: ..."), and a log
/// line for each new list was a flood of one piece of news (8 lines in 17 s, measured).
pub fn same_failure(a: &str, b: &str) -> bool {
    fn without_shards(text: &str) -> (&str, &str) {
        match (text.find("shard "), text.rfind("; ")) {
            (Some(start), Some(end)) if start < end => (&text[..start], &text[end..]),
            _ => (text, ""),
        }
    }
    without_shards(a) == without_shards(b)
}

/// Jobs whose last store call failed, each with its run of failures (when it may be
/// tried again). Owned by the runner task.
#[derive(Debug, Default)]
struct JobBackoff {
    jobs: HashMap<String, Streak>,
}

impl JobBackoff {
    /// Puts a job aside for its next pause; returns what changed and the streak.
    fn failed(&mut self, job_id: &str, error: &Error, now: Instant, jitter: f64) -> (Change, &Streak) {
        let mut streak = self.jobs.remove(job_id);
        let change = Streak::record(&mut streak, error.to_string(), now, jitter);
        let streak = self.jobs.entry(job_id.to_string()).or_insert(streak.expect("recorded"));
        (change, streak)
    }

    /// Ends a job's run of failures; true when it had one (it recovered).
    fn succeeded(&mut self, job_id: &str) -> bool {
        self.jobs.remove(job_id).is_some()
    }

    fn ready(&self, job_id: &str, now: Instant) -> bool {
        self.jobs.get(job_id).is_none_or(|streak| streak.until <= now)
    }

    /// When the next job put aside may be tried again.
    fn next_ready(&self, now: Instant) -> Option<Instant> {
        self.jobs.values().map(|streak| streak.until).filter(|until| *until > now).min()
    }
}

/// What one job gave the pipeline.
enum Fed {
    /// A batch of its pending documents.
    Batch,
    /// Nothing: it was done and is now being settled (see [`Settles`]).
    Settling,
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
        // Failures in a row of the runner as a whole (dropped pipelines).
        let mut runner: Option<Streak> = None;
        let mut settles = Settles::default();
        if self.store.description().shared {
            tokio::spawn(self.clone().follow_shared_jobs(shutdown.clone()));
        }
        loop {
            if *shutdown.borrow() {
                return;
            }
            let wake = self.jobs.work.notified();
            while let Some((job_id, settled)) = settles.try_next() {
                self.settle_ended(&mut backoff, &job_id, settled).await;
            }
            if let Err(error) = self.fill_pipeline(&mut pipeline, &mut cursor, &mut backoff, &mut settles).await {
                self.recover_from(&error, true, &mut runner, &mut pipeline, &mut cursor).await;
                continue;
            }
            let Some(embedded) = pipeline.next().await else {
                let now = Instant::now();
                let retry = [backoff.next_ready(now), settles.next_ready(now)].into_iter().flatten().min();
                tokio::select! {
                    () = wake => {}
                    _ = shutdown.changed() => {}
                    Some((job_id, settled)) = settles.next(), if !settles.is_empty() => {
                        self.settle_ended(&mut backoff, &job_id, settled).await;
                    }
                    // Jobs held by other servers are tried again when their lease may have run out.
                    () = tokio::time::sleep(SHARED_JOBS_REFRESH), if self.store.description().shared => {}
                    () = tokio::time::sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {}
                }
                continue;
            };
            let (committed, logged) = match embedded {
                Ok(batch) => {
                    let job_id = batch.job_id.clone();
                    let committed = self.commit_batch(batch).await;
                    match &committed {
                        Ok(()) => {
                            self.job_progressed(&mut backoff, &job_id).await;
                            if runner.take().is_some() {
                                tracing::info!("indexing progresses again");
                            }
                        }
                        Err(error) => self.job_failed(&mut backoff, &job_id, error).await,
                    }
                    (committed, true)
                }
                // Embedding failures (overload) are no job's fault.
                Err(error) => (Err(error), false),
            };
            if let Err(error) = committed {
                self.recover_from(&error, logged, &mut runner, &mut pipeline, &mut cursor).await;
            }
        }
    }

    /// Empties the pipeline and pauses (the runner's own backoff) before the work is
    /// read again. Logs once per change of the runner's failure, unless the failure
    /// was already logged as its job's (`logged`).
    async fn recover_from(
        &self,
        error: &Error,
        logged: bool,
        runner: &mut Option<Streak>,
        pipeline: &mut FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>>,
        cursor: &mut Option<(String, u64)>,
    ) {
        let change = Streak::record(runner, error.to_string(), Instant::now(), jitter());
        let pause = runner.as_ref().map_or(RETRY_PAUSE, |streak| streak.pause);
        if change == Change::Same || logged {
            tracing::debug!(%error, retry_in = ?pause, "indexing failed again; retrying from the pending documents");
        } else {
            tracing::warn!(%error, retry_in = ?pause, "indexing failed; retrying from the pending documents, with backoff");
        }
        *pipeline = FuturesOrdered::new();
        *cursor = None;
        tokio::time::sleep(pause).await;
    }

    /// Counts a failure of `job_id`: puts it aside for its next pause, and when it has
    /// just started failing or fails differently, says so once (a log line, and the
    /// job's `retrying` for GetJob and WatchJob).
    async fn job_failed(self: &Arc<Self>, backoff: &mut JobBackoff, job_id: &str, error: &Error) {
        let (change, streak) = backoff.failed(job_id, error, Instant::now(), jitter());
        let (failures, pause, retry) = (streak.failures, streak.pause, streak.retry());
        match change {
            Change::Same => {
                tracing::debug!(job = job_id, %error, failures, retry_in = ?pause, "job still cannot progress");
                return;
            }
            Change::Started => {
                tracing::warn!(job = job_id, %error, retry_in = ?pause, "job cannot progress; retrying it with backoff")
            }
            Change::ErrorChanged => {
                tracing::warn!(job = job_id, %error, failures, retry_in = ?pause, "job still cannot progress, now for another reason")
            }
        }
        self.set_retrying(job_id, Some(retry)).await;
    }

    /// Ends `job_id`'s run of failures, if it had one: logs and clears its `retrying`.
    async fn job_progressed(self: &Arc<Self>, backoff: &mut JobBackoff, job_id: &str) {
        if backoff.succeeded(job_id) {
            tracing::info!(job = job_id, "job progresses again");
            self.set_retrying(job_id, None).await;
        }
    }

    /// Shows a job's retry state at once on this server, then writes it into the job
    /// record, best effort: with a shared store, GetJob may reach a server that does
    /// not run the job, and the record is all that server can read. Stored only when
    /// it changes (a few writes per outage, not one per try); a failed write is
    /// logged at debug level (the store is failing already: that is the news).
    async fn set_retrying(self: &Arc<Self>, job_id: &str, retrying: Option<JobRetry>) {
        self.jobs.set_retrying(job_id, retrying.clone());
        let clearing = retrying.is_none();
        let stored = self
            .update_job(job_id, move |job| {
                if !job.is_finished() {
                    job.retrying = retrying;
                }
            })
            .await;
        match stored {
            Ok(_) if clearing => self.jobs.forget_retrying(job_id),
            Ok(_) => {}
            Err(error) => tracing::debug!(job = job_id, %error, "cannot store the job's retry state"),
        }
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
        settles: &mut Settles,
    ) -> Result<()> {
        while pipeline.len() < PIPELINE_DEPTH {
            let fresh = pipeline.is_empty();
            let Some(job) = self.claimed_job_with_work(fresh, backoff, settles).await else { return Ok(()) };
            let job_id = job.id.clone();
            match self.feed_job(job, pipeline, cursor, settles).await {
                Ok(Fed::Batch | Fed::Settling) => {}
                Ok(Fed::Idle) => return Ok(()),
                Err(error) if fresh => {
                    self.job_failed(backoff, &job_id, &error).await;
                    *cursor = None;
                }
                Err(error) => {
                    self.job_failed(backoff, &job_id, &error).await;
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Starts one batch of `job`'s pending documents, or (on a task of its own) settles
    /// and finishes the job when none is left.
    async fn feed_job(
        self: &Arc<Self>,
        job: JobRecord,
        pipeline: &mut FuturesOrdered<BoxFuture<'static, Result<EmbeddedBatch>>>,
        cursor: &mut Option<(String, u64)>,
        settles: &mut Settles,
    ) -> Result<Fed> {
        let from = match cursor {
            Some((id, next)) if *id == job.id => *next,
            _ => 0,
        };
        let limit = self.settings.ingest_batch_documents;
        let pending = self.store.pending_documents(&job.id, from, limit).await?;
        let Some((last_sequence, _)) = pending.last() else {
            if pipeline.is_empty() && !job.receiving && !settles.full() {
                *cursor = None;
                let corpus = self.clone();
                let job_id = job.id.clone();
                settles.start(&job.id, async move { corpus.settle_and_finish(&job_id).await });
                return Ok(Fed::Settling);
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
    async fn claimed_job_with_work(
        self: &Arc<Self>,
        fresh: bool,
        backoff: &mut JobBackoff,
        settles: &Settles,
    ) -> Option<JobRecord> {
        let now = Instant::now();
        let candidates: Vec<JobRecord> = self
            .jobs
            .unfinished()
            .into_iter()
            .filter(|job| job.processed + job.failed < job.total || !job.receiving)
            .filter(|job| backoff.ready(&job.id, now) && !settles.busy(&job.id, now))
            .collect();
        for job in candidates {
            let claim = match self.store.claim_job(&job.id).await {
                Ok(claim) => claim,
                Err(error) => {
                    self.job_failed(backoff, &job.id, &error).await;
                    continue;
                }
            };
            match claim {
                Claim::Granted => return Some(job),
                Claim::TakenOver => {
                    // A lapsed lease: its server stopped, or (in a backlog) the server
                    // that created the job had not reached it within the lease.
                    tracing::info!(job = %job.id, "took over a job whose lease ran out");
                    if !job.receiving {
                        return Some(job);
                    }
                    // Its IngestStream died with that server: nothing more will come.
                    match self.update_job(&job.id, |job| job.receiving = false).await {
                        Ok(job) => return Some(job),
                        Err(error) => self.job_failed(backoff, &job.id, &error).await,
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
        let mut last_read = Duration::ZERO;
        loop {
            tokio::select! {
                () = tokio::time::sleep(SHARED_JOBS_REFRESH.max(last_read)) => {}
                _ = shutdown.changed() => return,
            }
            let started = Instant::now();
            let listed = self.store.jobs(true).await;
            last_read = started.elapsed();
            self.jobs.list_read(listed.is_ok());
            let unfinished = match listed {
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
    ///
    /// With a shared store whose job list cannot be read lately (a search over every
    /// shard fails while a shard is short of replicas, though a read by id works), an
    /// unfinished job is read again by id: the copy here may be stale, and the job's
    /// record is where its running server left its reason for not progressing.
    pub async fn job(&self, id: &str) -> Result<JobRecord> {
        if let Ok(job) = self.jobs.get(id) {
            let stale = self.store.description().shared
                && !job.is_finished()
                && self.jobs.list_reads.lock().unwrap_or_else(|p| p.into_inner()).stale();
            if stale && let Ok(Some(latest)) = self.store.job(id).await {
                self.jobs.publish(latest);
                return self.jobs.get(id);
            }
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

    /// Settles a job with nothing left to index and finishes it when its settled count
    /// says every document is done; true when it ended. The counts along the way may be
    /// off (two servers counted one batch, a search missed documents): only the settled
    /// count may end the job.
    async fn settle_and_finish(self: &Arc<Self>, job_id: &str) -> Result<bool> {
        let settled = self.store.settle_job(job_id).await?;
        self.jobs.publish(settled.clone());
        Ok(!settled.receiving && self.finish(settled).await?.is_finished())
    }

    /// What the runner does when a settle ends: a job that ended progressed; a failed
    /// settle counts as the job's failure (its backoff, its `retrying`).
    async fn settle_ended(self: &Arc<Self>, backoff: &mut JobBackoff, job_id: &str, settled: Result<bool>) {
        match settled {
            Ok(true) => self.job_progressed(backoff, job_id).await,
            Ok(false) => {}
            Err(error) => self.job_failed(backoff, job_id, &error).await,
        }
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
                    job.retrying = None;
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
        sentence_tolerance: ((settings.sentence_tolerance as f32) * units_per_token) as usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable(text: &str) -> Error {
        Error::Unavailable(text.to_string())
    }

    #[test]
    fn a_slow_job_list_is_not_stale_but_a_failing_or_hung_one_is() {
        let now = Instant::now();
        assert!(!ListReads { succeeded: now, failing: false }.stale());
        assert!(ListReads { succeeded: now, failing: true }.stale());
        let long_ago = now.checked_sub(LIST_HUNG_AFTER + Duration::from_secs(1));
        if let Some(long_ago) = long_ago {
            assert!(ListReads { succeeded: long_ago, failing: false }.stale());
        }
        let slow = now.checked_sub(SHARED_JOBS_REFRESH * 5).expect("seconds after boot");
        assert!(!ListReads { succeeded: slow, failing: false }.stale(), "a slow list read is still fresh");
    }

    #[test]
    fn failures_naming_more_shards_are_the_same_news_and_other_texts_are_not() {
        let one = "weaviate store: read_pending: shard A: 1 of 2 replicas reachable; consistency QUORUM needs 2";
        let two = "weaviate store: read_pending: shard A: 1 of 2 replicas reachable, shard B: 1 of 2 replicas reachable; consistency QUORUM needs 2";
        let elsewhere = "weaviate store: claim_job: shard A: 1 of 2 replicas reachable; consistency QUORUM needs 2";
        assert!(same_failure(one, two));
        assert!(!same_failure(one, elsewhere), "another call failing is news");
        assert!(!same_failure("store timed out", "store refused the connection"));
        let mut streak = None;
        assert_eq!(Streak::record(&mut streak, one.into(), Instant::now(), 1.0), Change::Started);
        assert_eq!(Streak::record(&mut streak, two.into(), Instant::now(), 1.0), Change::Same);
        assert_eq!(Streak::record(&mut streak, elsewhere.into(), Instant::now(), 1.0), Change::ErrorChanged);
    }

    #[test]
    fn the_pause_doubles_from_the_first_and_stops_at_the_cap() {
        let full: Vec<Duration> = (1..=7).map(|failures| retry_pause(failures, 1.0)).collect();
        let ms: Vec<u128> = full.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, vec![200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(retry_pause(u32::MAX, 1.0), JOB_RETRY_MAX, "no overflow after many failures");
        assert_eq!(retry_pause(3, 0.5), Duration::from_millis(400), "jitter takes off at most half");
    }

    #[test]
    fn jittered_pauses_spread_within_half_and_all_of_the_pause() {
        let pauses: Vec<Duration> = (0..200).map(|_| retry_pause(10, jitter())).collect();
        assert!(pauses.iter().all(|p| *p >= JOB_RETRY_MAX / 2 && *p <= JOB_RETRY_MAX), "{pauses:?}");
        let (min, max) = (pauses.iter().min().unwrap(), pauses.iter().max().unwrap());
        assert!(*max - *min > Duration::from_millis(500), "200 jitters spread: {min:?}..{max:?}");
    }

    #[test]
    fn a_failing_job_is_news_when_it_starts_failing_or_fails_differently_not_on_every_try() {
        let mut backoff = JobBackoff::default();
        let now = Instant::now();
        let error = unavailable("shard s1: 1 of 2 replicas reachable");
        let (change, streak) = backoff.failed("j1", &error, now, 1.0);
        assert_eq!(change, Change::Started);
        let since = streak.since;
        for _ in 0..5 {
            assert_eq!(backoff.failed("j1", &error, now, 1.0).0, Change::Same);
        }
        let (change, streak) = backoff.failed("j1", &unavailable("no node answered"), now, 1.0);
        assert_eq!(change, Change::ErrorChanged);
        assert_eq!((streak.failures, streak.since), (7, since), "one run of failures, since its first");
        assert_eq!(streak.retry().error, "no node answered", "the last error is shown");
        assert!(backoff.succeeded("j1"), "the job recovered");
        assert!(!backoff.succeeded("j1"), "a job that was not failing did not recover");
        assert_eq!(backoff.failed("j1", &error, now, 1.0).0, Change::Started, "a new run of failures");
    }

    #[test]
    fn a_job_put_aside_waits_for_its_pause_and_others_do_not() {
        let mut backoff = JobBackoff::default();
        let now = Instant::now();
        backoff.failed("j1", &unavailable("down"), now, 1.0);
        backoff.failed("j1", &unavailable("down"), now, 1.0);
        assert!(!backoff.ready("j1", now + Duration::from_millis(399)));
        assert!(backoff.ready("j1", now + Duration::from_millis(400)), "second failure: 400 ms");
        assert!(backoff.ready("j2", now));
        assert_eq!(backoff.next_ready(now), Some(now + Duration::from_millis(400)));
    }
}
