//! Ingestion over gRPC: documents sent with `SearchService/Ingest` in calls of a fixed size, one after the other, each
//! job followed with `WatchJob` from the moment it exists, and timed from the first call to the last job COMPLETED.

use std::{collections::HashMap, time::Duration, time::Instant};

use anyhow::Context;
use embedwire_proto::v1::{
    Document, GetIndexStatsRequest, GetIndexStatsResponse, IngestRequest, Job, JobStatus, WatchJobRequest,
    search_service_client::SearchServiceClient,
};
use tonic::transport::Channel;

use crate::corpus::Paragraph;

/// What one ingest did.
#[derive(Debug, Clone)]
pub struct IngestRun {
    /// Documents sent.
    pub documents: usize,
    /// Ingest calls (= jobs).
    pub calls: usize,
    /// First call leaving to the last call answered: every document on disk.
    pub stored: Duration,
    /// First call leaving to the last job COMPLETED: every document searchable.
    pub completed: Duration,
}

impl IngestRun {
    /// Documents per second, to COMPLETED.
    pub fn rate(&self) -> f64 {
        self.documents as f64 / self.completed.as_secs_f64()
    }

    /// Ingests of consecutive slices as one: counts and times added up.
    pub fn combine(parts: &[IngestRun]) -> Self {
        IngestRun {
            documents: parts.iter().map(|part| part.documents).sum(),
            calls: parts.iter().map(|part| part.calls).sum(),
            stored: parts.iter().map(|part| part.stored).sum(),
            completed: parts.iter().map(|part| part.completed).sum(),
        }
    }
}

/// Ingests `documents` (ids `{id_prefix}{first_id + index}`, metadata `source`) in calls of `per_call`, and waits until
/// every job completed. A job that fails fails the run: it would have measured something else than indexing.
pub async fn ingest(
    channel: Channel,
    documents: &[Paragraph],
    ids: (&str, usize),
    per_call: usize,
) -> anyhow::Result<IngestRun> {
    ingest_into(channel, "", documents, ids, per_call).await
}

/// [`ingest`] into `collection` (empty: the default one).
pub async fn ingest_into(
    channel: Channel,
    collection: &str,
    documents: &[Paragraph],
    (id_prefix, first_id): (&str, usize),
    per_call: usize,
) -> anyhow::Result<IngestRun> {
    anyhow::ensure!(!documents.is_empty() && per_call > 0, "nothing to ingest");
    let all: Vec<Document> = Vec::from_iter((first_id..).zip(documents).map(|(id, paragraph)| Document {
        id: format!("{id_prefix}{id:05}"),
        text: paragraph.text.clone(),
        metadata: HashMap::from([("source".to_string(), paragraph.source.clone())]),
    }));
    let requests: Vec<_> = all
        .chunks(per_call)
        .map(|chunk| IngestRequest { documents: chunk.to_vec(), collection: collection.into() })
        .collect();
    let calls = requests.len();
    let mut client = SearchServiceClient::new(channel);
    let started = Instant::now();
    let mut watchers = Vec::with_capacity(calls);
    for (call, request) in requests.into_iter().enumerate() {
        let response = client.ingest(request).await.with_context(|| format!("Ingest call {call} failed"))?.into_inner();
        let job = response.job.context("Ingest answered without a job")?;
        watchers.push(tokio::spawn(watch_to_end(client.clone(), collection.to_string(), job.job_id, started)));
    }
    let stored = started.elapsed();
    let mut completed = Duration::ZERO;
    for watcher in watchers {
        let (job, ended) = watcher.await.context("job watcher")??;
        anyhow::ensure!(
            job.status() == JobStatus::Completed && job.processed_documents == job.total_documents,
            "job {} ended {:?} with {} of {} documents processed, {} failed: {}",
            job.job_id,
            job.status(),
            job.processed_documents,
            job.total_documents,
            job.failed_documents,
            job.error
        );
        completed = completed.max(ended);
    }
    Ok(IngestRun { documents: documents.len(), calls, stored, completed })
}

/// Follows a job until its terminal update; returns it and when it arrived.
async fn watch_to_end(
    mut client: SearchServiceClient<Channel>,
    collection: String,
    job_id: String,
    started: Instant,
) -> anyhow::Result<(Job, Duration)> {
    let mut updates = client
        .watch_job(WatchJobRequest { job_id: job_id.clone(), collection })
        .await
        .with_context(|| format!("WatchJob {job_id}"))?
        .into_inner();
    while let Some(update) = updates.message().await.with_context(|| format!("WatchJob {job_id} stream"))? {
        let job = update.job.context("WatchJob update without a job")?;
        if matches!(job.status(), JobStatus::Completed | JobStatus::Failed) {
            return Ok((job, started.elapsed()));
        }
    }
    anyhow::bail!("WatchJob {job_id} ended before the job did")
}

/// What the index holds now.
pub async fn index_stats(channel: Channel) -> anyhow::Result<GetIndexStatsResponse> {
    let mut client = SearchServiceClient::new(channel);
    Ok(client.get_index_stats(GetIndexStatsRequest::default()).await.context("GetIndexStats")?.into_inner())
}
