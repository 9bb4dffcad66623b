//! Jobs in Weaviate. Weaviate has no transactions, so a job is kept as two objects
//! with one writer each, and nothing depends on a read-modify-write being atomic:
//! - the header (total, next sequence, still receiving): written only by the server
//!   that took the ingest;
//! - the progress (state, counts, first error, lease): written by whichever server
//!   holds the job's lease.
//!
//! A document counts as processed when the server that indexed it deletes its
//! pending object. That running count is an estimate (two servers deleting the same
//! objects at once both count them), kept within the total; before a job ends,
//! `settle` recounts it by object id at a read level that overlaps every
//! acknowledged write, and only that recount may end the job. Leases are best
//! effort: two servers may briefly work on one job, which only repeats idempotent
//! writes.
//!
//! Job records are read leniently: a part whose `record_json` is missing or broken
//! (a chaos run found a progress object holding only `job_id` after its node was
//! SIGKILLed) is read again at ALL, and a progress part still unreadable counts as
//! fresh, since settlement recounts it anyway. Only a job without a readable header
//! is an error, and it is that job's error alone.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::{StreamExt, TryStreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use embedwire_proto::weaviate::v1 as pb;
use pb::filters::Operator;

use super::convert::{self, PropertiesBuilder, PropertiesReader, level_name};
use super::{MAX_RESULTS, WeaviateStore, indexing};
use crate::config::Consistency;
use crate::corpus::unix_now;
use crate::error::{Error, Result};
use crate::store::{Claim, JobChange, JobRecord, JobRetry, JobState, NewDocument};

const HEADER: &str = "header";
const PROGRESS: &str = "progress";

/// By-id reads of pending objects in flight at once while a job settles.
const SETTLE_READS_IN_FLIGHT: usize = 16;

/// The part of a job its ingesting server writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Header {
    total: u64,
    next_sequence: u64,
    receiving: bool,
    started_at: f64,
    revision: u64,
}

/// The part of a job its running server writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Progress {
    state: JobState,
    processed: u64,
    failed: u64,
    error: Option<String>,
    finished_at: Option<f64>,
    revision: u64,
    /// Why the job cannot progress, written (best effort) by its running server when
    /// that changes, so that every server's GetJob shows it.
    retrying: Option<JobRetry>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            state: JobState::Pending,
            processed: 0,
            failed: 0,
            error: None,
            finished_at: None,
            revision: 0,
            retrying: None,
        }
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
        // Records written before the counts were kept within the total may exceed it.
        let failed = self.progress.failed.min(self.header.total);
        JobRecord {
            id: id.to_string(),
            state: self.progress.state,
            total: self.header.total,
            processed: self.progress.processed.min(self.header.total - failed),
            failed,
            error: self.progress.error.clone(),
            started_at: self.header.started_at,
            finished_at: self.progress.finished_at,
            next_sequence: self.header.next_sequence,
            receiving: self.header.receiving,
            revision: self.header.revision + self.progress.revision,
            retrying: self.progress.retrying.clone(),
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
            retrying: record.retrying.clone(),
        };
        (header, progress)
    }
}

/// The level of reads that decide a job (its record, its pending documents): R with
/// R + W > RF, so that the replicas read overlap those of every acknowledged write.
/// This holds for any replication factor: ONE writes are read at ALL, QUORUM at
/// QUORUM, ALL at ONE.
fn job_consistency(store: &WeaviateStore) -> Consistency {
    match store.settings.write_consistency {
        Consistency::One => Consistency::All,
        Consistency::Quorum => Consistency::Quorum,
        Consistency::All => Consistency::One,
    }
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

/// The stored fields of one job part, from a search result or a REST object.
#[derive(Debug, Clone, Default)]
struct PartFields {
    json: String,
    lease_owner: String,
    lease_until: f64,
}

impl PartFields {
    fn of_result(result: &pb::SearchResult) -> Self {
        let properties = PropertiesReader::of(result);
        PartFields {
            json: properties.text("record_json"),
            lease_owner: properties.text("lease_owner"),
            lease_until: properties.number("lease_until"),
        }
    }

    fn of_object(properties: &serde_json::Value) -> Self {
        PartFields {
            json: text(properties, "record_json"),
            lease_owner: text(properties, "lease_owner"),
            lease_until: properties.get("lease_until").and_then(serde_json::Value::as_f64).unwrap_or(0.0),
        }
    }

    fn parse<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(&self.json).ok()
    }
}

/// Whether a job's parts can be read as they are (a missing progress is fine: it is
/// written after the header).
fn readable(header: &PartFields, progress: Option<&PartFields>) -> bool {
    header.parse::<Header>().is_some() && progress.is_none_or(|p| p.parse::<Progress>().is_some())
}

/// A job from its parts. A progress part that is missing (written after the header)
/// or unreadable counts as fresh, with a free lease: its counts are recounted by
/// [`settle`] before the job ends. A header that cannot be read is this job's error.
fn assemble(id: &str, header: &PartFields, progress: Option<&PartFields>) -> Result<JobParts> {
    let header: Header = header.parse().ok_or_else(|| {
        Error::Storage(format!("weaviate store: job {id}: its header is unreadable: {:?}", header.json))
    })?;
    let (progress, lease_owner, lease_until) = match progress {
        Some(part) => match part.parse::<Progress>() {
            Some(progress) => (progress, part.lease_owner.clone(), part.lease_until),
            None => {
                tracing::warn!(job = id, json = %part.json, "unreadable job progress; counting it again from the start");
                Default::default()
            }
        },
        None => Default::default(),
    };
    Ok(JobParts { header, progress, lease_owner, lease_until })
}

/// Parses job objects (any mix of parts and jobs) into (id, parts). A job whose
/// header cannot be read is left out (logged): one broken record must not hide the
/// others.
fn parse_jobs(results: &[pb::SearchResult]) -> Vec<(String, JobParts)> {
    let mut headers = std::collections::HashMap::new();
    let mut progress = std::collections::HashMap::new();
    for result in results {
        let properties = PropertiesReader::of(result);
        let id = properties.text("job_id");
        match properties.text("part").as_str() {
            HEADER => {
                headers.insert(id, PartFields::of_result(result));
            }
            PROGRESS => {
                progress.insert(id, PartFields::of_result(result));
            }
            _ => {}
        }
    }
    headers
        .into_iter()
        .filter_map(|(id, header)| match assemble(&id, &header, progress.get(&id)) {
            Ok(parts) => Some((id, parts)),
            Err(error) => {
                tracing::warn!(%error, "job left out of the list");
                None
            }
        })
        .collect()
}

/// A job's parts, or None. Read by object id, not by a filtered search: Weaviate
/// answers a search from one replica per shard and only checks the objects that
/// replica found, so a job written a moment before by another server (acknowledged
/// by a quorum the searched replica was not in) could be missing. A read by id asks
/// as many replicas as [`job_consistency`], which overlap every acknowledged write.
/// A part that comes back unreadable is read once more at ALL (the newest intact copy
/// wins there), then [`assemble`] decides.
pub async fn read(store: &WeaviateStore, id: &str) -> Result<Option<JobParts>> {
    let level = job_consistency(store);
    let (mut header, mut progress) =
        tokio::try_join!(read_part(store, id, HEADER, level), read_part(store, id, PROGRESS, level))?;
    // A job exists once its header does (it is written first); progress may lag.
    if header.as_ref().is_some_and(|h| !readable(h, progress.as_ref())) && level != Consistency::All {
        match tokio::try_join!(
            read_part(store, id, HEADER, Consistency::All),
            read_part(store, id, PROGRESS, Consistency::All)
        ) {
            Ok((Some(h), p)) => (header, progress) = (Some(h), p),
            Ok((None, _)) => {}
            Err(error) => tracing::warn!(job = id, %error, "cannot read a damaged job record again at ALL"),
        }
    }
    let Some(header) = header else { return Ok(None) };
    assemble(id, &header, progress.as_ref()).map(Some)
}

/// One part's fields through the REST object API, or None where it does not exist.
async fn read_part(store: &WeaviateStore, id: &str, part: &str, level: Consistency) -> Result<Option<PartFields>> {
    let path = format!(
        "/v1/objects/{}/{}?consistency_level={}",
        store.names.jobs,
        convert::job_uuid(id, part),
        level_name(level)
    );
    let object = store.connection.get_json(&path).await?;
    Ok(object.and_then(|object| object.get("properties").map(PartFields::of_object)))
}

fn text(properties: &serde_json::Value, name: &str) -> String {
    properties.get(name).and_then(serde_json::Value::as_str).unwrap_or_default().to_string()
}

/// Stores the documents, then the job (its header first): the job exists, with
/// every document, before the caller acknowledges it.
///
/// A create can be refused after part of it was stored: with a node just lost, its
/// pending documents may go whole to shards whose replicas all answer while its job's
/// write is refused at the write consistency. So a refused create takes back what it
/// wrote (see [`take_back_refused`]): otherwise its pending documents, of a job that
/// never existed, stay pending for ever.
pub async fn create(store: &WeaviateStore, job: JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord> {
    store.note_write();
    let sequences: Vec<u64> = (0..documents.len() as u64).collect();
    let written = write_new_job(store, &job, documents).await;
    if written.is_err() {
        take_back_refused(store, &job.id, &sequences, true).await;
    }
    written
}

async fn write_new_job(store: &WeaviateStore, job: &JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord> {
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
/// A refused append takes back the pending documents it wrote, as a refused create does:
/// the job's runner would otherwise index documents its caller was told were refused.
pub async fn append(store: &WeaviateStore, id: &str, documents: Vec<NewDocument>) -> Result<JobRecord> {
    store.note_write();
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    let first = parts.header.next_sequence;
    let sequences: Vec<u64> = (first..first + documents.len() as u64).collect();
    let written = write_appended(store, id, &mut parts, documents).await;
    if written.is_err() {
        take_back_refused(store, id, &sequences, false).await;
    }
    written
}

async fn write_appended(
    store: &WeaviateStore,
    id: &str,
    parts: &mut JobParts,
    documents: Vec<NewDocument>,
) -> Result<JobRecord> {
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

/// Deletes at once while taking back a refused ingest.
const TAKE_BACK_CALLS: usize = 8;

/// Best effort after a refused create or append: deletes, by id, the pending documents
/// it may have written (and, for a create, the job's parts). The caller was told the ingest
/// failed, so these documents were never acknowledged; what cannot be deleted now
/// (the same replicas are still missing) is logged.
///
/// A write that timed out may still have landed at the write consistency: then a
/// created job goes too, and an appended job counts the taken-back documents as done,
/// though its caller retries them.
async fn take_back_refused(store: &WeaviateStore, id: &str, sequences: &[u64], job_too: bool) {
    let mut objects: Vec<(String, String)> =
        sequences.iter().map(|sequence| (store.names.pending.clone(), convert::pending_uuid(id, *sequence))).collect();
    if job_too {
        objects.extend([HEADER, PROGRESS].map(|part| (store.names.jobs.clone(), convert::job_uuid(id, part))));
    }
    // By id, a few at a time: each delete needs only its own shard's replicas, which
    // just took the write (a batch delete by filter needs every shard's).
    let level = level_name(store.settings.write_consistency);
    let paths: Vec<String> = objects
        .into_iter()
        .map(|(collection, uuid)| format!("/v1/objects/{collection}/{uuid}?consistency_level={level}"))
        .collect();
    let connection = &store.connection;
    let results: Vec<Result<()>> = futures::stream::iter(paths)
        .map(|path| async move { connection.delete(&path).await })
        .buffer_unordered(TAKE_BACK_CALLS)
        .collect()
        .await;
    let failed: Vec<&Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    // A delete fails where the refused write failed: a shard missing a replica. Weaviate
    // writes replicas in two phases and aborts a write that cannot reach the level, so
    // there is usually nothing there to delete; what stays is the ghost sweep's.
    if let Some(error) = failed.first() {
        tracing::debug!(job = id, not_deleted = failed.len(), %error, "taking back a refused ingest");
    }
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

/// Every (unfinished) job: their progress parts (which the state filter selects),
/// then the headers of those jobs not known final (see [`FinalHeaders`]). Leases of
/// other servers seen on the way are noted for claims (see [`ForeignLeases`]).
pub async fn list(store: &WeaviateStore, unfinished_only: bool) -> Result<Vec<JobRecord>> {
    const FIELDS: [&str; 5] = ["job_id", "part", "record_json", "lease_owner", "lease_until"];
    let mut selection = vec![convert::text_equals("part", PROGRESS)];
    if unfinished_only {
        selection.push(convert::text_any("state", vec!["pending".into(), "running".into()]));
    }
    let request =
        store.lookup(&store.names.jobs, convert::all_of(selection), &FIELDS, MAX_RESULTS, job_consistency(store));
    let progress = store.query("list_jobs", request).await?;
    let ids: Vec<String> = progress.iter().map(|r| PropertiesReader::of(r).text("job_id")).collect();
    let (mut parts, unknown) = store.final_headers.take(&ids, unfinished_only);
    parts.extend(progress);
    for group in unknown.chunks(200) {
        let selection =
            convert::all_of(vec![convert::text_equals("part", HEADER), convert::text_any("job_id", group.to_vec())]);
        let request = store.lookup(&store.names.jobs, selection, &FIELDS, group.len(), job_consistency(store));
        let headers = store.query("read_jobs", request).await?;
        store.final_headers.keep(&headers);
        parts.extend(headers);
    }
    let now = unix_now();
    let mut jobs = Vec::with_capacity(ids.len());
    for (id, parts) in parse_jobs(&parts) {
        if !parts.lease_owner.is_empty() && parts.lease_owner != store.server_id && parts.lease_until > now {
            store.foreign_leases.saw(&id, parts.lease_until, now);
        }
        jobs.push(parts.record(&id));
    }
    Ok(jobs)
}

/// Job headers that no longer change, kept from one job-list read to the next. A
/// header is written only by the server taking the ingest, and once it says the job
/// no longer receives, its total and sequences are final. In a backlog of thousands
/// of jobs, reading every header again at each list read (once a second per server)
/// was about a third of the store time the list cost and grew with the backlog,
/// slowing the drain as it grew. Entries leave when their job leaves the unfinished list.
#[derive(Debug, Default)]
pub struct FinalHeaders {
    /// Job id to its header object as a list read returned it.
    headers: Mutex<HashMap<String, pb::SearchResult>>,
}

impl FinalHeaders {
    /// The kept headers among jobs `ids`, and the ids whose header must be read.
    /// When `ids` are all the unfinished jobs (`complete`), the others are dropped.
    fn take(&self, ids: &[String], complete: bool) -> (Vec<pb::SearchResult>, Vec<String>) {
        let mut headers = self.headers.lock().unwrap_or_else(|p| p.into_inner());
        if complete {
            let listed: std::collections::HashSet<&String> = ids.iter().collect();
            headers.retain(|id, _| listed.contains(id));
        }
        let mut kept = Vec::new();
        let mut unknown = Vec::new();
        for id in ids {
            match headers.get(id) {
                Some(header) => kept.push(header.clone()),
                None => unknown.push(id.clone()),
            }
        }
        (kept, unknown)
    }

    /// Keeps the headers read that say their job no longer receives.
    fn keep(&self, results: &[pb::SearchResult]) {
        let mut headers = self.headers.lock().unwrap_or_else(|p| p.into_inner());
        for result in results {
            let header = PartFields::of_result(result).parse::<Header>();
            if header.is_some_and(|header| !header.receiving) {
                headers.insert(PropertiesReader::of(result).text("job_id"), result.clone());
            }
        }
    }
}

/// Leases of other servers seen by claims: until one lapses its job is theirs, and
/// reading it again at every claim only costs the store (a runner passing over the
/// other server's older jobs read each of them before every job of its own). Only
/// other servers' leases are kept: this server's own are read at every claim, so that
/// a take-over is seen at the next batch.
#[derive(Debug, Default)]
pub struct ForeignLeases {
    /// Job id to the lease's end, in Unix seconds.
    until: Mutex<HashMap<String, f64>>,
}

impl ForeignLeases {
    /// Entries kept before the lapsed ones are swept out.
    const SWEEP_ABOVE: usize = 4096;

    fn held(&self, id: &str, now: f64) -> bool {
        self.until.lock().unwrap_or_else(|p| p.into_inner()).get(id).is_some_and(|until| *until > now)
    }

    fn saw(&self, id: &str, until: f64, now: f64) {
        let mut leases = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if leases.len() >= Self::SWEEP_ABOVE {
            leases.retain(|_, until| *until > now);
        }
        leases.insert(id.to_string(), until);
    }
}

/// Takes or renews a job's lease. The lease is in the job's progress part, which is
/// all a claim reads (the whole job only when that part is missing or unreadable).
pub async fn claim(store: &WeaviateStore, id: &str) -> Result<Claim> {
    if store.foreign_leases.held(id, unix_now()) {
        return Ok(Claim::HeldElsewhere);
    }
    store.note_write();
    let Some(lease) = read_lease(store, id).await? else { return Ok(Claim::HeldElsewhere) };
    let now = unix_now();
    let term = store.settings.job_lease.as_secs_f64();
    let mine = lease.owner == store.server_id;
    let free = lease.owner.is_empty() || lease.until < now;
    if !mine && !free {
        store.foreign_leases.saw(id, lease.until, now);
        return Ok(Claim::HeldElsewhere);
    }
    // Renew when half the lease is gone; no write per batch.
    if mine && lease.until - now > term / 2.0 {
        return Ok(Claim::Granted);
    }
    store.put("claim_job", vec![progress_object(store, id, &lease.progress, &store.server_id, now + term)]).await?;
    if mine {
        return Ok(Claim::Granted);
    }
    // Another server may have claimed at the same moment: the last write won.
    let confirmed = read_lease(store, id).await?.is_some_and(|l| l.owner == store.server_id);
    Ok(match (confirmed, lease.owner.is_empty()) {
        (false, _) => Claim::HeldElsewhere,
        (true, true) => Claim::Granted,
        (true, false) => Claim::TakenOver,
    })
}

/// A job's lease and the progress it is stored with.
struct Lease {
    progress: Progress,
    owner: String,
    until: f64,
}

/// A job's lease, or None when the job does not exist. One read of the progress part
/// by id; a progress part missing (not written yet, or a deleted job) or unreadable
/// is settled by reading the whole job (see [`read`]).
async fn read_lease(store: &WeaviateStore, id: &str) -> Result<Option<Lease>> {
    if let Some(part) = read_part(store, id, PROGRESS, job_consistency(store)).await?
        && let Some(progress) = part.parse::<Progress>()
    {
        return Ok(Some(Lease { progress, owner: part.lease_owner, until: part.lease_until }));
    }
    Ok(read(store, id).await?.map(|parts| Lease {
        progress: parts.progress,
        owner: parts.lease_owner,
        until: parts.lease_until,
    }))
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
    let removed = delete_pending(store, id, indexed).await?;
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    // Two servers deleting the same objects at once (after a lease takeover) both
    // count them: keep the estimate within the total; `settle` counts by id.
    let total = parts.header.total;
    parts.progress.failed = (parts.progress.failed + failed.len() as u64).min(total);
    parts.progress.processed = (parts.progress.processed + removed).min(total - parts.progress.failed);
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

/// Deletes the pending objects of job `id` with these sequences; returns how many
/// were deleted.
pub async fn delete_pending(store: &WeaviateStore, id: &str, sequences: &[u64]) -> Result<u64> {
    let mut removed = 0;
    for group in sequences.chunks(512) {
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
    Ok(removed)
}

/// Recounts a job's progress from its pending objects: what is gone was indexed,
/// what is marked failed failed, what is left waits.
///
/// The count that can end a job is made by object id. A filtered search is answered
/// from one replica per shard, which can miss pending objects it did not receive (a
/// node restarted while they were written): counting what it returns marked jobs
/// completed with documents still pending, never indexed. So the search only serves
/// to see cheaply that documents still wait; when it finds none, every sequence of
/// the job not seen failed is read by id at [`job_consistency`] (R + W > RF: some
/// replica read took part in each acknowledged write and delete; a replica that
/// missed the object is repaired by the read). Processed + failed reach the total
/// only when that recount found nothing waiting.
pub async fn settle(store: &WeaviateStore, id: &str) -> Result<JobRecord> {
    let mut parts = read(store, id).await?.ok_or_else(|| Error::NotFound(format!("job {id} does not exist")))?;
    let request = store.lookup(
        &store.names.pending,
        Some(convert::text_equals("job_id", id)),
        &["sequence", "failed"],
        MAX_RESULTS,
        job_consistency(store),
    );
    let results = store.query("settle_job", request).await?;
    let mut seen_failed = std::collections::HashSet::new();
    let mut seen_waiting = 0u64;
    for result in &results {
        let properties = PropertiesReader::of(result);
        if properties.boolean("failed") {
            seen_failed.insert(properties.number("sequence") as u64);
        } else {
            seen_waiting += 1;
        }
    }
    let total = parts.header.total;
    let (processed, failed) = if seen_waiting > 0 {
        // Not done: no need to read every object to say so.
        let failed = seen_failed.len() as u64;
        (total.saturating_sub(seen_waiting + failed).min(parts.progress.processed), failed)
    } else {
        let unseen: Vec<u64> = (0..parts.header.next_sequence).filter(|s| !seen_failed.contains(s)).collect();
        let states: Vec<PendingState> = futures::stream::iter(unseen)
            .map(|sequence| pending_state(store, id, sequence))
            .buffer_unordered(SETTLE_READS_IN_FLIGHT)
            .try_collect()
            .await?;
        let count = |state: PendingState| states.iter().filter(|s| **s == state).count() as u64;
        let (processed, failed, waiting) = (
            count(PendingState::Gone),
            seen_failed.len() as u64 + count(PendingState::Failed),
            count(PendingState::Waiting),
        );
        if waiting > 0 {
            tracing::warn!(job = id, waiting, "documents pending that a search did not find; the job goes on");
        } else {
            // Every document is stored: the job may end once they can be found.
            indexing::wait_until_indexed(
                &store.queue_looks,
                &store.connection,
                &store.names.chunks,
                store.settings.timeout,
            )
            .await;
        }
        (processed, failed)
    };
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

/// What became of one pending document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingState {
    /// Still to index.
    Waiting,
    /// Marked failed.
    Failed,
    /// Indexed: its pending object was deleted.
    Gone,
}

/// One pending object read by id at [`job_consistency`].
async fn pending_state(store: &WeaviateStore, id: &str, sequence: u64) -> Result<PendingState> {
    let path = format!(
        "/v1/objects/{}/{}?consistency_level={}",
        store.names.pending,
        convert::pending_uuid(id, sequence),
        level_name(job_consistency(store))
    );
    Ok(match store.connection.get_json(&path).await? {
        None => PendingState::Gone,
        Some(object) if object["properties"]["failed"].as_bool() == Some(true) => PendingState::Failed,
        Some(_) => PendingState::Waiting,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_servers_lease_is_theirs_until_it_lapses() {
        let leases = ForeignLeases::default();
        assert!(!leases.held("job", 100.0));
        leases.saw("job", 115.0, 100.0);
        assert!(leases.held("job", 114.9));
        assert!(!leases.held("job", 115.0), "a lapsed lease is read again");
        assert!(!leases.held("other", 100.0));
    }

    /// A search result of one job part with these text properties.
    fn result(fields: &[(&str, &str)]) -> pb::SearchResult {
        let fields = fields
            .iter()
            .map(|(name, value)| {
                (name.to_string(), pb::Value { kind: Some(pb::value::Kind::TextValue(value.to_string())) })
            })
            .collect();
        pb::SearchResult {
            properties: Some(pb::PropertiesResult {
                non_ref_props: Some(pb::Properties { fields }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn header_json(total: u64) -> String {
        serde_json::to_string(&Header { total, next_sequence: total, receiving: false, started_at: 1.0, revision: 3 })
            .unwrap()
    }

    #[test]
    fn only_headers_of_jobs_no_longer_receiving_are_kept_until_their_job_leaves_the_list() {
        let receiving = serde_json::to_string(&Header {
            total: 2,
            next_sequence: 2,
            receiving: true,
            started_at: 1.0,
            revision: 1,
        })
        .unwrap();
        let (done, open) = (header_json(8), receiving);
        let headers = FinalHeaders::default();
        headers.keep(&[
            result(&[("job_id", "done"), ("part", HEADER), ("record_json", &done)]),
            result(&[("job_id", "open"), ("part", HEADER), ("record_json", &open)]),
            result(&[("job_id", "broken"), ("part", HEADER), ("record_json", "{not json")]),
        ]);
        let ids = |list: &[&str]| list.iter().map(|id| id.to_string()).collect::<Vec<_>>();
        let (kept, unknown) = headers.take(&ids(&["done", "open", "broken"]), true);
        assert_eq!(parse_jobs(&kept).into_iter().map(|(id, _)| id).collect::<Vec<_>>(), ["done"]);
        assert_eq!(unknown, ids(&["open", "broken"]));
        // A partial list keeps the others; the full list without "done" drops it.
        assert_eq!(headers.take(&ids(&["open"]), false).0.len(), 0);
        assert_eq!(headers.take(&ids(&["done"]), false).0.len(), 1);
        headers.take(&ids(&["open"]), true);
        assert_eq!(headers.take(&ids(&["done"]), true).1, ids(&["done"]));
    }

    #[test]
    fn a_progress_part_holding_only_its_job_id_reads_as_fresh_progress() {
        // What a chaos run found after SIGKILLing a node: the progress object of a
        // job with only `job_id` left. Reading the job failed, which stalled every
        // newer job behind it.
        let header = header_json(8);
        let results = vec![
            result(&[("job_id", "j1"), ("part", HEADER), ("record_json", &header)]),
            result(&[("job_id", "j1"), ("part", PROGRESS)]),
        ];
        let jobs = parse_jobs(&results);
        assert_eq!(jobs.len(), 1, "the job is listed");
        let record = jobs[0].1.record("j1");
        assert_eq!((record.state, record.total, record.processed, record.failed), (JobState::Pending, 8, 0, 0));
        assert!(jobs[0].1.lease_owner.is_empty(), "a damaged progress holds no lease");
    }

    #[test]
    fn a_progress_part_with_missing_fields_keeps_those_it_has() {
        let header = PartFields { json: header_json(8), ..Default::default() };
        let progress = PartFields {
            json: r#"{"state":"Running","processed":5}"#.into(),
            lease_owner: "server-a".into(),
            lease_until: 9.0,
        };
        let parts = assemble("j1", &header, Some(&progress)).unwrap();
        let record = parts.record("j1");
        assert_eq!((record.state, record.processed, record.failed), (JobState::Running, 5, 0));
        assert_eq!((parts.lease_owner.as_str(), parts.lease_until), ("server-a", 9.0));
    }

    #[test]
    fn a_job_without_a_readable_header_is_left_out_not_the_list() {
        let header = header_json(2);
        let results = vec![
            result(&[("job_id", "broken"), ("part", HEADER)]),
            result(&[("job_id", "broken"), ("part", PROGRESS)]),
            result(&[("job_id", "fine"), ("part", HEADER), ("record_json", &header)]),
        ];
        let ids: Vec<String> = parse_jobs(&results).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec!["fine".to_string()]);
        let error = assemble("broken", &PartFields::default(), None).unwrap_err();
        assert!(error.to_string().contains("job broken"), "{error}");
    }

    #[test]
    fn counts_never_exceed_the_total() {
        // One job reported 14 of 8 documents processed after a lease takeover.
        let header = PartFields { json: header_json(8), ..Default::default() };
        let progress =
            PartFields { json: r#"{"state":"Running","processed":14,"failed":1}"#.into(), ..Default::default() };
        let record = assemble("j1", &header, Some(&progress)).unwrap().record("j1");
        assert_eq!((record.total, record.processed, record.failed), (8, 7, 1));
    }
}
