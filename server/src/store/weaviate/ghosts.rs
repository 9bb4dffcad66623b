//! Pending documents that come back after their job ended ("ghosts"), and their
//! removal.
//!
//! Weaviate does not repair deletes reliably (weaviate/weaviate#5276, #6472: async
//! replication cannot tell a deleted object from one never received). Seen in
//! `tests/weaviate/weaviate_faults.rs`: a job ingested while one of three nodes was
//! down completed (its pending objects deleted at QUORUM), and about 40 s after the
//! node returned its 5 pending objects were back on every node, with their original
//! creation time. Nothing runs them again (their job ended), but they are counted as
//! pending documents, for ever.
//!
//! A completed job was settled by reading each of its pending objects by id at a
//! level that overlaps every acknowledged write (see [`jobs::settle`]): each was gone
//! or marked failed then. So an unfailed pending object of a completed job is a ghost,
//! and the health follower deletes the ghosts it finds now and then. It also says how
//! many of their documents are not stored (deleted since, or, if settlement were
//! wrong, never indexed), so an operator can tell the two apart.
//!
//! Pending objects of a job that does not exist are left by a refused ingest whose
//! take-back failed too (see `jobs::create`). A create writes its pending objects
//! before its job, so such objects count as orphans only once they are older than any
//! create could take ([`ORPHAN_AFTER`]); the sweep deletes those as well.

use std::collections::BTreeMap;
use std::time::Duration;

use super::convert::{self, PropertiesReader};
use super::{WeaviateStore, jobs};
use crate::config::Consistency;
use crate::corpus::unix_now;
use crate::error::Result;
use crate::store::{CorpusStore, JobState, NewDocument};

/// Pending objects examined per sweep; the rest wait for the next one.
const SWEEP_LIMIT: usize = 1_000;

/// Pending objects without a job are orphans once this old: far longer than a create
/// takes between writing its pending documents and its job (one batch write per
/// thousand documents, each bounded by `--weaviate-timeout-secs`).
pub const ORPHAN_AFTER: Duration = Duration::from_secs(3600);

/// What one sweep found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Ghosts deleted.
    pub deleted: u64,
    /// Of those, how many had no stored document.
    pub without_document: u64,
    /// Orphans deleted: pending objects of a job that does not exist.
    pub orphans: u64,
}

/// Deletes the unfailed pending objects of completed jobs.
pub async fn sweep(store: &WeaviateStore) -> Result<Swept> {
    // Leave out the jobs still running, whose pending documents are no ghosts: a big
    // ingest's would fill every page.
    let mut selection = vec![convert::boolean_equals("failed", false)];
    for job in jobs::list(store, true).await? {
        selection.push(convert::text_not_equals("job_id", &job.id));
    }
    let mut request = store.lookup(
        &store.names.pending,
        convert::all_of(selection),
        &["job_id", "sequence", "document_json"],
        SWEEP_LIMIT,
        Consistency::One,
    );
    if let Some(metadata) = request.metadata.as_mut() {
        metadata.creation_time_unix = true;
    }
    // Weaviate's creation times are in milliseconds.
    let orphan_before = ((unix_now() - ORPHAN_AFTER.as_secs_f64()) * 1000.0) as i64;
    let mut by_job: BTreeMap<String, Vec<(u64, Option<String>, i64)>> = BTreeMap::new();
    for result in store.query("find_ghosts", request).await? {
        let properties = PropertiesReader::of(&result);
        let document = serde_json::from_str::<NewDocument>(&properties.text("document_json")).ok();
        let created = result.metadata.as_ref().map_or(i64::MAX, |m| m.creation_time_unix);
        by_job.entry(properties.text("job_id")).or_default().push((
            properties.number("sequence") as u64,
            document.map(|d| d.id),
            created,
        ));
    }
    let mut swept = Swept::default();
    for (job_id, pending) in by_job {
        // Read at the job consistency: only a job that surely completed counts.
        let Some(job) = jobs::read(store, &job_id).await? else {
            let orphans: Vec<u64> = pending
                .iter()
                .filter(|(_, _, created)| *created < orphan_before)
                .map(|(sequence, ..)| *sequence)
                .collect();
            if !orphans.is_empty() {
                swept.orphans += jobs::delete_pending(store, &job_id, &orphans).await?;
            }
            continue;
        };
        if job.record(&job_id).state != JobState::Completed {
            continue;
        }
        let pending: Vec<(u64, Option<String>)> =
            pending.into_iter().map(|(sequence, doc_id, _)| (sequence, doc_id)).collect();
        let doc_ids: Vec<String> = pending.iter().filter_map(|(_, doc_id)| doc_id.clone()).collect();
        let stored = store.documents(doc_ids.clone()).await?;
        swept.without_document += (pending.len() - doc_ids.len()) as u64;
        swept.without_document += stored.iter().filter(|record| record.is_none()).count() as u64;
        let sequences: Vec<u64> = pending.iter().map(|(sequence, _)| *sequence).collect();
        swept.deleted += jobs::delete_pending(store, &job_id, &sequences).await?;
    }
    Ok(swept)
}
