//! Fills a gateway's index through the /v1 contract itself: POST /v1/ingest in
//! batches (each answers a job at once), then GET /v1/jobs/{id} until every job is
//! completed, then /healthz must count every document: the searches that follow
//! never run on an empty or half-built index.

use std::time::{Duration, Instant};

use anyhow::Context;
use embedwire_bench::corpus::Paragraph;
use embedwire_bench::http_process::HttpServerProcess;
use embedwire_bench::wire_count::ByteCounters;
use serde::Deserialize;
use serde_json::json;

/// Job polling interval: small against the minutes an ingest takes.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Longest an ingest may take before the bench gives up on the gateway.
const INGEST_TIMEOUT: Duration = Duration::from_secs(1800);
/// Progress line interval.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(15);

/// A job as the /v1 contract describes it (the fields the bench reads).
#[derive(Debug, Deserialize)]
struct Job {
    job_id: String,
    status: String,
    total_documents: u64,
    processed_documents: u64,
    #[serde(default)]
    error: Option<String>,
}

/// What an ingest took.
#[derive(Debug, Clone, Copy)]
pub struct IngestRun {
    pub documents: usize,
    pub requests: usize,
    /// From the first POST to the last job completed.
    pub elapsed: Duration,
}

impl IngestRun {
    pub fn rate(&self) -> f64 {
        self.documents as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Ingests `documents` in batches of `batch` and waits until all are searchable.
pub async fn ingest(gateway: &HttpServerProcess, documents: &[Paragraph], batch: usize) -> anyhow::Result<IngestRun> {
    let mut connection = gateway.connect(ByteCounters::new()).await?;
    let started = Instant::now();
    let mut jobs = Vec::new();
    for (number, chunk) in documents.chunks(batch).enumerate() {
        let body = json!({
            "documents": chunk.iter().enumerate().map(|(i, p)| json!({
                "id": format!("doc-{}", number * batch + i),
                "text": p.text,
                "metadata": {"source": p.source},
            })).collect::<Vec<_>>()
        });
        let job: Job = connection.post_json("/v1/ingest", &body).await?.json().context("POST /v1/ingest")?;
        anyhow::ensure!(
            job.total_documents == chunk.len() as u64,
            "job {} counts {} documents",
            job.job_id,
            job.total_documents
        );
        jobs.push(job.job_id);
    }
    let requests = jobs.len();
    let mut last_progress = Instant::now();
    while let Some(job_id) = jobs.first() {
        anyhow::ensure!(started.elapsed() < INGEST_TIMEOUT, "{} did not finish ingesting in time", gateway.name);
        let job: Job = connection.get(&format!("/v1/jobs/{job_id}")).await?.json().context("GET /v1/jobs")?;
        match job.status.as_str() {
            "completed" => {
                jobs.remove(0);
                continue;
            }
            "failed" => anyhow::bail!("{} failed job {job_id}: {}", gateway.name, job.error.unwrap_or_default()),
            _ => {}
        }
        if last_progress.elapsed() >= PROGRESS_INTERVAL {
            println!(
                "  {}: {} of {requests} jobs to go, the current one at {}/{} ({:.0} s)",
                gateway.name,
                jobs.len(),
                job.processed_documents,
                job.total_documents,
                started.elapsed().as_secs_f64()
            );
            last_progress = Instant::now();
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let elapsed = started.elapsed();
    let health = gateway.health().await?;
    anyhow::ensure!(
        health.document_count >= documents.len() as u64,
        "{} counts {} documents after ingesting {}",
        gateway.name,
        health.document_count,
        documents.len()
    );
    Ok(IngestRun { documents: documents.len(), requests, elapsed })
}
