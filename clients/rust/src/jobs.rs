//! Ingestion jobs: their state ([`Job`]), one look ([`Client::get_job`]), a stream
//! of updates ([`Client::watch_job`]) and waiting for the end ([`Client::wait_job`]).

use embedwire_proto::v1 as pb;
use futures::{Stream, StreamExt};

use crate::Client;
use crate::error::{Error, Result};
use crate::policy::Hedge;
use crate::pool::Route;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    /// Stored, waiting for the embedder.
    Pending,
    /// Being embedded and indexed.
    Running,
    /// Every document is searchable.
    Completed,
    /// At least one document could not be indexed (the others are).
    Failed,
}

impl JobStatus {
    /// The upper-case name, as the proto enum spells it without its prefix.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Completed => "COMPLETED",
            JobStatus::Failed => "FAILED",
        }
    }

    /// True once the job will not change any more.
    pub fn is_finished(self) -> bool {
        matches!(self, JobStatus::Completed | JobStatus::Failed)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The progress of one ingestion.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: String,
    pub status: JobStatus,
    /// Documents of the job (grows while an IngestStream is open).
    pub total_documents: u32,
    /// Documents durably indexed and searchable.
    pub processed_documents: u32,
    /// Documents that could not be indexed.
    pub failed_documents: u32,
    /// Why the job failed.
    pub error: Option<String>,
    /// Unix seconds.
    pub started_at: f64,
    /// Unix seconds, once finished.
    pub finished_at: Option<f64>,
    /// Why the job cannot progress right now while the server retries it; `None` while
    /// it progresses.
    pub last_error: Option<String>,
    /// Unix seconds since the job has been retrying; `None` while it progresses.
    pub retrying_since: Option<f64>,
}

impl Job {
    /// The job of a response, which the server always sets.
    pub(crate) fn from_response(job: Option<pb::Job>, address: &str) -> Result<Job> {
        let job = job.ok_or_else(|| Error::Protocol { address: address.to_string(), reason: "no job".to_string() })?;
        let status = match pb::JobStatus::try_from(job.status) {
            Ok(pb::JobStatus::Pending) => JobStatus::Pending,
            Ok(pb::JobStatus::Running) => JobStatus::Running,
            Ok(pb::JobStatus::Completed) => JobStatus::Completed,
            Ok(pb::JobStatus::Failed) => JobStatus::Failed,
            _ => {
                return Err(Error::Protocol {
                    address: address.to_string(),
                    reason: format!("job {} has status {}", job.job_id, job.status),
                });
            }
        };
        Ok(Job {
            id: job.job_id,
            status,
            total_documents: job.total_documents,
            processed_documents: job.processed_documents,
            failed_documents: job.failed_documents,
            error: (!job.error.is_empty()).then_some(job.error),
            started_at: job.started_at,
            finished_at: job.finished_at,
            last_error: (!job.last_error.is_empty()).then_some(job.last_error),
            retrying_since: job.retrying_since,
        })
    }
}

impl Client {
    /// The job's current state; an unknown id is NOT_FOUND.
    pub async fn get_job(&self, job_id: &str) -> Result<Job> {
        let request = pb::GetJobRequest { job_id: job_id.to_string(), collection: self.collection.to_string() };
        let caller = &self.inner.caller;
        let (address, response) = caller
            .unary(Route::Primary, Hedge::Allowed, |backend| {
                let request = caller.request(request.clone());
                async move {
                    let response = backend.search().get_job(request).await?;
                    Ok((backend.address.clone(), response.into_inner()))
                }
            })
            .await?;
        Job::from_response(response.job, &address)
    }

    /// The job each time its progress changes; the stream ends after a finished one.
    pub async fn watch_job(&self, job_id: &str) -> Result<impl Stream<Item = Result<Job>> + use<>> {
        let pool = &self.inner.caller.pool;
        let backend = pool.pick(Route::Primary);
        let request = pb::WatchJobRequest { job_id: job_id.to_string(), collection: self.collection.to_string() };
        let response = pool.observe(&backend, backend.search().watch_job(request).await);
        let updates = response.map_err(|status| Error::from_status(status, &backend.address, None))?.into_inner();
        let address = backend.address.clone();
        Ok(updates.map(move |update| match update {
            Ok(update) => Job::from_response(update.job, &address),
            Err(status) => Err(Error::from_status(status, &address, None)),
        }))
    }

    /// Follows the job until it finishes and returns its last state, calling
    /// `progress` with each update on the way.
    pub async fn wait_job(&self, job_id: &str, mut progress: impl FnMut(&Job)) -> Result<Job> {
        let updates = self.watch_job(job_id).await?;
        futures::pin_mut!(updates);
        while let Some(job) = updates.next().await {
            let job = job?;
            progress(&job);
            if job.status.is_finished() {
                return Ok(job);
            }
        }
        // The stream ended without a final state (e.g. the server is shutting
        // down); one last look says where the job stands.
        let job = self.get_job(job_id).await?;
        progress(&job);
        Ok(job)
    }
}
