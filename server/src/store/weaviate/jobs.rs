//! Jobs in Weaviate. Weaviate has no transactions, so a job is kept as two objects
//! with one writer each, and nothing depends on a read-modify-write being atomic:
//! - the header (total, next sequence, still receiving): written only by the server
//!   that took the ingest;
//! - the progress (state, counts, first error, lease): written by whichever server
//!   holds the job's lease.
//!
//! A document counts as processed when the server that indexed it deletes its
//! pending object (the delete says whether it still existed, so a batch indexed
//! twice is counted once), and `settle` recounts from the pending objects before a
//! job ends. Leases are best effort: two servers may briefly work on one job, which
//! only repeats idempotent writes.

use serde::{Deserialize, Serialize};

use embedwire_proto::weaviate::v1 as pb;
use pb::filters::Operator;

use super::convert::{self, PropertiesBuilder, PropertiesReader};
use super::{MAX_RESULTS, WeaviateStore};
use crate::config::Consistency;
use crate::corpus::unix_now;
use crate::error::{Error, Result};
use crate::store::{Claim, JobChange, JobRecord, JobState, NewDocument};

const HEADER: &str = "header";
const PROGRESS: &str = "progress";

/// The part of a job its ingesting server writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Header {
    total: u64,
    next_sequence: u64,
    receiving: bool,
    started_at: f64,
    revision: u64,
}

/// The part of a job its running server writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Progress {
    state: JobState,
    processed: u64,
    failed: u64,
    error: Option<String>,
    finished_at: Option<f64>,
    revision: u64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress { state: JobState::Pending, processed: 0, failed: 0, error: None, finished_at: None, revision: 0 }
    }
}

/// A job as stored.
#[derive(Debug, Clone)]
pub struct JobParts {
    header: Header,
    progress: Progress,
    lease_owner: String,
    lease_until: f64,
}

impl JobParts {
    /// The job record the corpus sees.
    pub fn record(&self, id: &str) -> JobRecord {
        JobRecord {
            id: id.to_string(),
            state: self.progress.state,
            total: self.header.total,
            processed: self.progress.processed,
            failed: self.progress.failed,
            error: self.progress.error.clone(),
            started_at: self.header.started_at,
            finished_at: self.progress.finished_at,
            next_sequence: self.header.next_sequence,
            receiving: self.header.receiving,
            revision: self.header.revision + self.progress.revision,
        }
    }

    fn split(record: &JobRecord, previous: &JobParts) -> (Header, Progress) {
        let header = Header {
            total: record.total,
            next_sequence: record.next_sequence,
            receiving: record.receiving,
            started_at: record.started_at,
            revision: previous.header.revision,
        };
        let progress = Progress {
            state: record.state,
            processed: record.processed,
            failed: record.failed,
            error: record.error.clone(),
            finished_at: record.finished_at,
            revision: previous.progress.revision,
        };
        (header, progress)
    }
}

/// Job and pending reads see every acknowledged write: they use the write level.
fn job_consistency(store: &WeaviateStore) -> Consistency {
    store.settings.write_consistency
}

fn header_object(store: &WeaviateStore, id: &str, header: &Header) -> pb::BatchObject {
    pb::BatchObject {
        uuid: convert::job_uuid(id, HEADER),
        collection: store.names.jobs.clone(),
        properties: Some(
            PropertiesBuilder::default()
                .text("job_id", id)
                .text("part", HEADER)
                .text("state", "")
                .text("record_json", serde_json::to_string(header).expect("header serializes"))
                .text("lease_owner", "")
                .number("lease_until", 0.0)
                .build(),
        ),
        ..Default::default()
    }
}

fn progress_object(store: &WeaviateStore, id: &str, progress: &Progress, owner: &str, until: f64) -> pb::BatchObject {
    pb::BatchObject {
        uuid: convert::job_uuid(id, PROGRESS),
        collection: store.names.jobs.clone(),
        properties: Some(
            PropertiesBuilder::default()
                .text("job_id", id)
                .text("part", PROGRESS)
                .text("state", progress.state.name())
                .text("record_json", serde_json::to_string(progress).expect("progress serializes"))
                .text("lease_owner", owner)
                .number("lease_until", until)
                .build(),
        ),
        ..Default::default()
    }
}

fn pending_object(store: &WeaviateStore, job_id: &str, sequence: u64, document: &NewDocument) -> pb::BatchObject {
    pb::BatchObject {
        uuid: convert::pending_uuid(job_id, sequence),
        collection: store.names.pending.clone(),
        properties: Some(
            PropertiesBuilder::default()
                .text("job_id", job_id)
                .number("sequence", sequence as f64)
                .boolean("failed", false)
                .text("reason", "")
                .text("document_json", serde_json::to_string(document).expect("documents serialize"))
                .build(),
        ),
        ..Default::default()
    }
}

fn lease_end(store: &WeaviateStore) -> f64 {
    unix_now() + store.settings.job_lease.as_secs_f64()
}

/// Parses job objects (any mix of parts and jobs) into (id, parts).
fn parse_jobs(results: &[pb::SearchResult]) -> Result<Vec<(String, JobParts)>> {
    let mut headers = std::collections::HashMap::new();
    let mut progress = std::collections::HashMap::new();
    for result in results {
        let properties = PropertiesReader::of(result);
        let id = properties.text("job_id");
        let json = properties.text("record_json");
        let corrupt = |e: serde_json::Error| Error::Storage(format!("weaviate store: job {id}: {e}"));
        match properties.text("part").as_str() {
            HEADER => {
                headers.insert(id.clone(), serde_json::from_str::<Header>(&json).map_err(corrupt)?);
            }
            PROGRESS => {
                let parsed: Progress = serde_json::from_str(&json).map_err(corrupt)?;
                progress.insert(id.clone(), (parsed, properties.text("lease_owner"), properties.number("lease_until")));
            }
            _ => {}
        }
    }
    // A job exists once its header does (it is written first); progress may lag.
    Ok(headers
        .into_iter()
        .map(|(id, header)| {
            let (progress, lease_owner, lease_until) = progress.remove(&id).unwrap_or_default();
            (id, JobParts { header, progress, lease_owner, lease_until })
        })
        .collect())
}

/// A job's parts, or None. Read by object id, not by a filtered search: Weaviate
/// answers a search from one replica per shard and only checks the objects that
/// replica found, so a job written a moment before by another server (acknowledged
/// by a quorum the searched replica was not in) could be missing. A read by id asks
/// as many replicas as the write level, which overlaps every acknowledged write.
pub async fn read(store: &WeaviateStore, id: &str) -> Result<Option<JobParts>> {
    let (header, progress) = tokio::try_join!(read_part(store, id, HEADER), read_part(store, id, PROGRESS))?;
    // A job exists once its header does (it is written first); progress may lag.
    let Some(header) = header else { return Ok(None) };
    let corrupt = |e: serde_json::Error| Error::Storage(format!("weaviate store: job {id}: {e}"));
    let header: Header = serde_json::from_str(&text(&header, "record_json")).map_err(corrupt)?;
    let (progress, lease_owner, lease_until) = match progress {
        Some(part) => (
            serde_json::from_str(&text(&part, "record_json")).map_err(corrupt)?,
            text(&part, "lease_owner"),
            part.get("lease_until").and_then(serde_json::Value::as_f64).unwrap_or(0.0),
        ),
        None => Default::default(),
    };
    Ok(Some(JobParts { header, progress, lease_owner, lease_until }))
}

/// One part's properties through the REST object API, or None where it does not exist.
async fn read_part(store: &WeaviateStore, id: &str, part: &str) -> Result<Option<serde_json::Value>> {
    let level = match job_consistency(store) {
        Consistency::One => "ONE",
        Consistency::Quorum => "QUORUM",
        Consistency::All => "ALL",
    };
    let path = format!("/v1/objects/{}/{}?consistency_level={level}", store.names.jobs, convert::job_uuid(id, part));
    let object = store.connection.get_json(&path).await?;
    Ok(object.and_then(|mut object| object.get_mut("properties").map(serde_json::Value::take)))
}

fn text(properties: &serde_json::Value, name: &str) -> String {
    properties.get(name).and_then(serde_json::Value::as_str).unwrap_or_default().to_string()
}

/// Stores the documents, then the job (its header first): the job exists, with
/// every document, before the caller acknowledges it.
pub async fn create(store: &WeaviateStore, job: JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord> {
    let pending: Vec<pb::BatchObject> =
        documents.iter().enumerate().map(|(i, d)| pending_object(store, &job.id, i as u64, d)).collect();
    store.put("write_pending", pending).await?;
    let header = Header {
        total: documents.len() as u64,
        next_sequence: documents.len() as u64,
        receiving: job.receiving,
        started_at: job.started_at,
        revision: 1,
    };
    let progress = Progress { revision: 1, ..Progress::default() };
    let until = lease_end(store);
    store
        .put(
            "write_job",
            vec![
                header_object(store, &job.id, &header),
                progress_object(store, &job.id, &progress, &store.server_id, until),
            ],
        )
        .await?;
    Ok(JobParts { header, progress, lease_owner: store.server_id.clone(), lease_until: until }.record(&job.id))
}

/// Appends documents to a receiving job; the appending server keeps the lease.
pub async fn append(store: &WeaviateStore, id: &str, documents: Vec<NewDocument>) -> Result<JobRecord> {
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    let first = parts.header.next_sequence;
    let pending: Vec<pb::BatchObject> =
        documents.iter().enumerate().map(|(i, d)| pending_object(store, id, first + i as u64, d)).collect();
    store.put("write_pending", pending).await?;
    parts.header.next_sequence += documents.len() as u64;
    parts.header.total += documents.len() as u64;
    parts.header.revision += 1;
    parts.lease_owner = store.server_id.clone();
    parts.lease_until = lease_end(store);
    store
        .put(
            "write_job",
            vec![
                header_object(store, id, &parts.header),
                progress_object(store, id, &parts.progress, &parts.lease_owner, parts.lease_until),
            ],
        )
        .await?;
    Ok(parts.record(id))
}

/// Changes a job, writing only the part that changed.
pub async fn update(store: &WeaviateStore, id: &str, change: JobChange) -> Result<JobRecord> {
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    let mut record = parts.record(id);
    change(&mut record);
    let (header, progress) = JobParts::split(&record, &parts);
    let mut objects = Vec::new();
    if header != parts.header {
        parts.header = Header { revision: header.revision + 1, ..header };
        objects.push(header_object(store, id, &parts.header));
    }
    if progress != parts.progress {
        parts.progress = Progress { revision: progress.revision + 1, ..progress };
        objects.push(progress_object(store, id, &parts.progress, &parts.lease_owner, parts.lease_until));
    }
    store.put("write_job", objects).await?;
    Ok(parts.record(id))
}

/// Every (unfinished) job.
pub async fn list(store: &WeaviateStore, unfinished_only: bool) -> Result<Vec<JobRecord>> {
    let mut selection = vec![convert::text_equals("part", PROGRESS)];
    if unfinished_only {
        selection.push(convert::text_any("state", vec!["pending".into(), "running".into()]));
    }
    let request =
        store.lookup(&store.names.jobs, convert::all_of(selection), &["job_id"], MAX_RESULTS, job_consistency(store));
    let ids: Vec<String> =
        store.query("list_jobs", request).await?.iter().map(|r| PropertiesReader::of(r).text("job_id")).collect();
    let mut jobs = Vec::new();
    for group in ids.chunks(200) {
        let request = store.lookup(
            &store.names.jobs,
            Some(convert::text_any("job_id", group.to_vec())),
            &["job_id", "part", "record_json", "lease_owner", "lease_until"],
            group.len() * 2,
            job_consistency(store),
        );
        let results = store.query("read_jobs", request).await?;
        jobs.extend(parse_jobs(&results)?.into_iter().map(|(id, parts)| parts.record(&id)));
    }
    Ok(jobs)
}

/// Takes or renews a job's lease.
pub async fn claim(store: &WeaviateStore, id: &str) -> Result<Claim> {
    let Some(parts) = read(store, id).await? else { return Ok(Claim::HeldElsewhere) };
    let now = unix_now();
    let lease = store.settings.job_lease.as_secs_f64();
    let mine = parts.lease_owner == store.server_id;
    let free = parts.lease_owner.is_empty() || parts.lease_until < now;
    if !mine && !free {
        return Ok(Claim::HeldElsewhere);
    }
    // Renew when half the lease is gone; no write per batch.
    if mine && parts.lease_until - now > lease / 2.0 {
        return Ok(Claim::Granted);
    }
    store.put("claim_job", vec![progress_object(store, id, &parts.progress, &store.server_id, now + lease)]).await?;
    if mine {
        return Ok(Claim::Granted);
    }
    // Another server may have claimed at the same moment: the last write won.
    let confirmed = read(store, id).await?.is_some_and(|p| p.lease_owner == store.server_id);
    Ok(match (confirmed, parts.lease_owner.is_empty()) {
        (false, _) => Claim::HeldElsewhere,
        (true, true) => Claim::Granted,
        (true, false) => Claim::TakenOver,
    })
}

/// Up to `limit` documents of a job not yet indexed, from `from` on.
pub async fn pending(store: &WeaviateStore, id: &str, from: u64, limit: usize) -> Result<Vec<(u64, NewDocument)>> {
    let selection = convert::all_of(vec![
        convert::text_equals("job_id", id),
        convert::number_compare(Operator::GreaterThanEqual, "sequence", from as f64),
        convert::boolean_equals("failed", false),
    ]);
    let mut request =
        store.lookup(&store.names.pending, selection, &["sequence", "document_json"], limit, job_consistency(store));
    request.sort_by = vec![pb::SortBy { ascending: true, path: vec!["sequence".into()] }];
    let mut documents = Vec::new();
    for result in store.query("read_pending", request).await? {
        let properties = PropertiesReader::of(&result);
        let document: NewDocument = serde_json::from_str(&properties.text("document_json"))
            .map_err(|e| Error::Storage(format!("weaviate store: a pending document of job {id}: {e}")))?;
        documents.push((properties.number("sequence") as u64, document));
    }
    documents.sort_by_key(|(sequence, _)| *sequence);
    Ok(documents)
}

/// Takes indexed documents out of the job's pending ones, marks the failed ones,
/// and counts both in the job's progress.
pub async fn finish_documents(
    store: &WeaviateStore,
    id: &str,
    indexed: &[u64],
    failed: &[(u64, String)],
) -> Result<JobRecord> {
    if !failed.is_empty() {
        let marked = failed
            .iter()
            .map(|(sequence, reason)| pb::BatchObject {
                uuid: convert::pending_uuid(id, *sequence),
                collection: store.names.pending.clone(),
                properties: Some(
                    PropertiesBuilder::default()
                        .text("job_id", id)
                        .number("sequence", *sequence as f64)
                        .boolean("failed", true)
                        .text("reason", reason)
                        .text("document_json", "")
                        .build(),
                ),
                ..Default::default()
            })
            .collect();
        store.put("mark_failed", marked).await?;
    }
    let mut removed = 0;
    for group in indexed.chunks(512) {
        let selection = convert::all_of(vec![
            convert::text_equals("job_id", id),
            pb::Filters {
                operator: Operator::ContainsAny as i32,
                test_value: Some(pb::filters::TestValue::ValueNumberArray(pb::NumberArray {
                    values: group.iter().map(|s| *s as f64).collect(),
                })),
                target: Some(pb::FilterTarget { target: Some(pb::filter_target::Target::Property("sequence".into())) }),
                ..Default::default()
            },
        ])
        .expect("two parts");
        removed += store.delete_where("delete_pending", &store.names.pending, selection).await?;
    }
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    parts.progress.processed += removed;
    parts.progress.failed += failed.len() as u64;
    if parts.progress.error.is_none() {
        parts.progress.error = failed.first().map(|(_, reason)| reason.clone());
    }
    parts.progress.revision += 1;
    parts.lease_owner = store.server_id.clone();
    parts.lease_until = lease_end(store);
    store
        .put("write_job", vec![progress_object(store, id, &parts.progress, &parts.lease_owner, parts.lease_until)])
        .await?;
    Ok(parts.record(id))
}

/// Recounts a job's progress from its pending objects: what is gone was indexed,
/// what is marked failed failed.
pub async fn settle(store: &WeaviateStore, id: &str) -> Result<JobRecord> {
    let request = store.lookup(
        &store.names.pending,
        Some(convert::text_equals("job_id", id)),
        &["failed"],
        MAX_RESULTS,
        job_consistency(store),
    );
    let results = store.query("settle_job", request).await?;
    let failed = results.iter().filter(|r| PropertiesReader::of(r).boolean("failed")).count() as u64;
    let waiting = results.len() as u64 - failed;
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    let processed = parts.header.total.saturating_sub(waiting + failed);
    if (processed, failed) != (parts.progress.processed, parts.progress.failed) {
        parts.progress.processed = processed;
        parts.progress.failed = failed;
        parts.progress.revision += 1;
        store
            .put("write_job", vec![progress_object(store, id, &parts.progress, &parts.lease_owner, parts.lease_until)])
            .await?;
    }
    Ok(parts.record(id))
}
