//! Jobs in PostgreSQL: one row per job and one row per document still waiting to be
//! indexed, changed in transactions on the primary. A job is created with its
//! documents in one transaction, committed before the client's acknowledgement.
//!
//! Work on a job is claimed with a lease (`lease_owner`, `lease_until`, both judged
//! by the database's clock): a server takes a free or expired lease under
//! `FOR UPDATE SKIP LOCKED`, so of two servers claiming at once one wins and the
//! other is told at once that the job is held elsewhere, and a dead server's job is
//! taken over when its lease runs out. A document counts as processed when the
//! transaction that stores it deletes its pending row, so a batch indexed twice
//! (after a takeover) is counted once.

use std::pin::pin;

use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;
use tokio_postgres::{Row, Transaction};

use super::PostgresStore;
use crate::error::{Error, Result};
use crate::store::{Claim, JobChange, JobRecord, JobState, NewDocument};

/// The columns of a job, in [`job_from_row`]'s order.
pub const JOB_COLUMNS: &str =
    "job_id, state, total, processed, failed, error, started_at, finished_at, next_sequence, receiving, revision";

pub fn job_from_row(row: &Row) -> JobRecord {
    let count = |i: usize| row.get::<_, i64>(i).max(0) as u64;
    JobRecord {
        id: row.get(0),
        state: JobState::from_name(row.get(1)),
        total: count(2),
        processed: count(3),
        failed: count(4),
        error: row.get(5),
        started_at: row.get(6),
        finished_at: row.get(7),
        next_sequence: count(8),
        receiving: row.get(9),
        revision: count(10),
        // Not kept in PostgreSQL: only the primary takes writes, and while it cannot no
        // server could record the reason either; the running server's memory shows it.
        retrying: None,
    }
}

/// Writes every field of `job` (all but its id) to its row.
async fn write_job(tx: &Transaction<'_>, s: &str, job: &JobRecord) -> std::result::Result<u64, tokio_postgres::Error> {
    let sql = format!(
        "UPDATE {s}.jobs SET state = $2, total = $3, processed = $4, failed = $5, error = $6, started_at = $7,
                finished_at = $8, next_sequence = $9, receiving = $10, revision = $11
         WHERE job_id = $1"
    );
    let n = |v: u64| v as i64;
    tx.execute(
        &sql,
        &[
            &job.id,
            &job.state.name(),
            &n(job.total),
            &n(job.processed),
            &n(job.failed),
            &job.error,
            &job.started_at,
            &job.finished_at,
            &n(job.next_sequence),
            &job.receiving,
            &n(job.revision),
        ],
    )
    .await
}

/// Adds documents to a job's pending rows by binary COPY, numbering them from the
/// job's next sequence; updates the job's total and next sequence (not stored).
async fn copy_pending(
    tx: &Transaction<'_>,
    s: &str,
    job: &mut JobRecord,
    documents: &[NewDocument],
) -> std::result::Result<(), tokio_postgres::Error> {
    if documents.is_empty() {
        return Ok(());
    }
    let sink = tx.copy_in(&format!("COPY {s}.pending (job_id, sequence, document) FROM STDIN (FORMAT binary)")).await?;
    let mut writer = pin!(BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::INT8, Type::JSONB]));
    for document in documents {
        let json = serde_json::to_value(document).expect("documents serialize");
        writer.as_mut().write(&[&job.id, &(job.next_sequence as i64), &json]).await?;
        job.next_sequence += 1;
        job.total += 1;
    }
    writer.finish().await?;
    Ok(())
}

pub async fn create(store: &PostgresStore, mut job: JobRecord, documents: Vec<NewDocument>) -> Result<JobRecord> {
    let s = store.schema.clone();
    store
        .write("create_job", move |tx| {
            Box::pin(async move {
                let sql = format!(
                    "INSERT INTO {s}.jobs ({JOB_COLUMNS}) VALUES ($1, 'pending', 0, 0, 0, NULL, 0, NULL, 0, false, 0)"
                );
                tx.execute(&sql, &[&job.id]).await?;
                copy_pending(tx, &s, &mut job, &documents).await?;
                write_job(tx, &s, &job).await?;
                Ok(job)
            })
        })
        .await
}

/// The job's row, locked for this transaction; NOT_FOUND if there is none.
async fn locked(
    tx: &Transaction<'_>,
    s: &str,
    id: &str,
) -> std::result::Result<Option<JobRecord>, tokio_postgres::Error> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM {s}.jobs WHERE job_id = $1 FOR UPDATE");
    Ok(tx.query_opt(&sql, &[&id]).await?.as_ref().map(job_from_row))
}

fn missing(id: &str) -> Error {
    Error::NotFound(format!("job {id} does not exist"))
}

pub async fn append(store: &PostgresStore, id: &str, documents: Vec<NewDocument>) -> Result<JobRecord> {
    let (s, key) = (store.schema.clone(), id.to_string());
    store
        .write("append_to_job", move |tx| {
            Box::pin(async move {
                let Some(mut job) = locked(tx, &s, &key).await? else { return Ok(None) };
                copy_pending(tx, &s, &mut job, &documents).await?;
                job.revision += 1;
                write_job(tx, &s, &job).await?;
                Ok(Some(job))
            })
        })
        .await?
        .ok_or_else(|| missing(id))
}

pub async fn update(store: &PostgresStore, id: &str, change: JobChange) -> Result<JobRecord> {
    let (s, key) = (store.schema.clone(), id.to_string());
    store
        .write("update_job", move |tx| {
            Box::pin(async move {
                let Some(mut job) = locked(tx, &s, &key).await? else { return Ok(None) };
                change(&mut job);
                job.revision += 1;
                write_job(tx, &s, &job).await?;
                Ok(Some(job))
            })
        })
        .await?
        .ok_or_else(|| missing(id))
}

pub async fn read(store: &PostgresStore, id: &str) -> Result<Option<JobRecord>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM {}.jobs WHERE job_id = $1", store.schema);
    let rows = store.query_primary("read_job", &sql, &[&id]).await?;
    Ok(rows.first().map(job_from_row))
}

pub async fn list(store: &PostgresStore, unfinished_only: bool) -> Result<Vec<JobRecord>> {
    let filter = if unfinished_only { "WHERE state IN ('pending', 'running')" } else { "" };
    let sql = format!("SELECT {JOB_COLUMNS} FROM {}.jobs {filter} ORDER BY started_at", store.schema);
    Ok(store.query_primary("read_jobs", &sql, &[]).await?.iter().map(job_from_row).collect())
}

pub async fn claim(store: &PostgresStore, id: &str) -> Result<Claim> {
    let s = &store.schema;
    let lease = store.settings.job_lease.as_secs_f64();
    let me = store.server_id.clone();
    let sql = format!(
        "SELECT coalesce(lease_owner, ''), coalesce(extract(epoch FROM lease_until - now())::float8, -1)
         FROM {s}.jobs WHERE job_id = $1"
    );
    let rows = store.query_primary("claim_job", &sql, &[&id]).await?;
    let Some(row) = rows.first() else { return Ok(Claim::HeldElsewhere) };
    let (owner, remaining): (String, f64) = (row.get(0), row.get(1));
    let mine = owner == me;
    let key = id.to_string();
    // Renew when half the lease is gone: no write per batch.
    if mine && remaining > lease / 2.0 {
        return Ok(Claim::Granted);
    }
    if !mine && remaining > 0.0 {
        return Ok(Claim::HeldElsewhere);
    }
    let locked = format!(
        "SELECT coalesce(lease_owner, ''), coalesce(lease_until > now(), false)
         FROM {s}.jobs WHERE job_id = $1 FOR UPDATE SKIP LOCKED"
    );
    let take = format!(
        "UPDATE {s}.jobs SET lease_owner = $2, lease_until = now() + make_interval(secs => $3) WHERE job_id = $1"
    );
    store
        .write("claim_job", move |tx| {
            Box::pin(async move {
                // Locked by another transaction: another server is claiming it right
                // now, or this server is committing a batch of it (its own lease).
                let Some(row) = tx.query_opt(&locked, &[&key]).await? else {
                    return Ok(if mine { Claim::Granted } else { Claim::HeldElsewhere });
                };
                let (owner, live): (String, bool) = (row.get(0), row.get(1));
                if owner != me && live {
                    return Ok(Claim::HeldElsewhere);
                }
                tx.execute(&take, &[&key, &me, &lease]).await?;
                Ok(if owner.is_empty() || owner == me { Claim::Granted } else { Claim::TakenOver })
            })
        })
        .await
}

pub async fn pending(store: &PostgresStore, id: &str, from: u64, limit: usize) -> Result<Vec<(u64, NewDocument)>> {
    let sql = format!(
        "SELECT sequence, document FROM {}.pending WHERE job_id = $1 AND sequence >= $2 ORDER BY sequence LIMIT $3",
        store.schema
    );
    let rows = store.query_primary("read_pending", &sql, &[&id, &(from as i64), &(limit as i64)]).await?;
    rows.iter()
        .map(|row| {
            let document: NewDocument = serde_json::from_value(row.get(1))
                .map_err(|e| Error::Storage(format!("postgres store: a pending document of job {id}: {e}")))?;
            Ok((row.get::<_, i64>(0) as u64, document))
        })
        .collect()
}

/// A job as it is; the counts are kept exact by the transactions that change them.
pub async fn settle(store: &PostgresStore, id: &str) -> Result<JobRecord> {
    read(store, id).await?.ok_or_else(|| missing(id))
}
