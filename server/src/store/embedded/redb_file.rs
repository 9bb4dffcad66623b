//! The embedded store's durable half: one redb database file in the data directory. redb commits
//! are atomic and fsynced, so what a commit wrote survives a crash, and a crash
//! mid-commit leaves the previous state.
//!
//! Tables:
//! - `meta`: the model the vectors belong to, and the chunk id counter.
//! - `documents`: document id -> text, metadata and its chunks (ids, spans, hashes).
//! - `vectors`: chunk content hash -> reference count and f32 vector; identical
//!   chunks, in one document or many, share one entry.
//! - `jobs`: job id -> job progress.
//! - `pending`: (job id, sequence) -> a document acknowledged but not yet indexed.
//!   Ingest writes here before it answers; indexing moves documents from here into
//!   `documents` in the same commit that counts them processed.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

use super::super::{DocumentRecord, IndexedDocument, JobRecord, NewDocument};
use crate::corpus::text::ContentHash;
use crate::error::{Error, Result};

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const DOCUMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("documents");
const VECTORS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("vectors");
const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
const PENDING: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("pending");

const META_MODEL: &str = "model";
const META_NEXT_CHUNK_ID: &str = "next_chunk_id";
/// Bumped by every commit that changes searchable documents, in the same transaction:
/// the keyword index records the generation it applied, and a difference at start
/// means it missed a commit (see `keyword.rs`).
const META_GENERATION: &str = "index_generation";
const META_INDEX_ID: &str = "index_id";

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "embedwire.redb";

/// What a commit changed, for the in-memory index to follow.
#[derive(Debug, Default)]
pub struct IndexChanges {
    /// Chunks that no longer exist.
    pub removed_chunks: Vec<u64>,
    /// Documents now stored, with their chunk vectors (in chunk order).
    pub upserted: Vec<(String, DocumentRecord, Vec<Vec<f32>>)>,
    /// Ids of documents removed entirely.
    pub removed_documents: Vec<String>,
    /// The file's index generation after the commit.
    pub generation: u64,
}

/// The redb database.
pub struct Store {
    db: Database,
}

fn storage(error: impl std::fmt::Display) -> Error {
    Error::Storage(error.to_string())
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(value).map_err(storage)
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(storage)
}

/// A stored vector: reference count (u32 LE) then the f32 values (LE).
fn encode_vector(references: u32, vector: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + vector.len() * 4);
    bytes.extend_from_slice(&references.to_le_bytes());
    bytes.extend_from_slice(&embedwire_proto::vectors::f32_to_le_bytes(vector));
    bytes
}

fn decode_vector(bytes: &[u8]) -> (u32, Vec<f32>) {
    let references = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    (references, embedwire_proto::vectors::f32_from_le_bytes(&bytes[4..]))
}

fn read_generation(meta: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<u64> {
    match meta.get(META_GENERATION).map_err(storage)? {
        Some(bytes) => Ok(u64::from_le_bytes(bytes.value().try_into().map_err(storage)?)),
        None => Ok(0),
    }
}

fn bump_generation(meta: &mut redb::Table<&'static str, &'static [u8]>) -> Result<u64> {
    let next = read_generation(meta)? + 1;
    meta.insert(META_GENERATION, next.to_le_bytes().as_slice()).map_err(storage)?;
    Ok(next)
}

impl Store {
    /// Opens (or creates) the store in `data_dir` for `model` (id and dimension).
    /// A store built with another model is refused: its vectors would be meaningless.
    pub fn open(data_dir: &Path, model: &str, cache_bytes: usize) -> Result<Self> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| Error::Config(format!("--data-dir {}: {e}", data_dir.display())))?;
        let path = data_dir.join(DATABASE_FILE);
        // redb caches up to 1 GiB by default; the index keeps its own copy of every
        // vector in memory, so the store's cache only needs to hold hot documents.
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create(&path)
            .map_err(|e| Error::Config(format!("opening {}: {e}", path.display())))?;
        let store = Store { db };
        let txn = store.db.begin_write().map_err(storage)?;
        {
            let mut meta = txn.open_table(META).map_err(storage)?;
            let existing =
                meta.get(META_MODEL).map_err(storage)?.map(|v| String::from_utf8_lossy(v.value()).into_owned());
            match existing {
                Some(stored) if stored != model => {
                    return Err(Error::Config(format!(
                        "{} holds vectors of model {stored:?}, not {model:?}: use another --data-dir",
                        path.display()
                    )));
                }
                Some(_) => {}
                None => {
                    meta.insert(META_MODEL, model.as_bytes()).map_err(storage)?;
                }
            }
            // A name for this index that survives restarts, so a gateway can tell
            // whether an answer still comes from the index that holds the data.
            if meta.get(META_INDEX_ID).map_err(storage)?.is_none() {
                let id = format!("embedded-{}", uuid::Uuid::new_v4());
                meta.insert(META_INDEX_ID, id.as_bytes()).map_err(storage)?;
            }
            // Create every table so that readers never meet a missing one.
            txn.open_table(DOCUMENTS).map_err(storage)?;
            txn.open_table(VECTORS).map_err(storage)?;
            txn.open_table(JOBS).map_err(storage)?;
            txn.open_table(PENDING).map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        Ok(store)
    }

    /// The index's stable name (written at creation).
    pub fn index_id(&self) -> Result<String> {
        let txn = self.db.begin_read().map_err(storage)?;
        let meta = txn.open_table(META).map_err(storage)?;
        let id = meta.get(META_INDEX_ID).map_err(storage)?.map(|v| String::from_utf8_lossy(v.value()).into_owned());
        id.ok_or_else(|| Error::Storage("the store has no index id".into()))
    }

    /// The index generation of the last commit (0 for a file that never had one).
    pub fn generation(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(storage)?;
        let meta = txn.open_table(META).map_err(storage)?;
        read_generation(&meta)
    }

    /// Stores a new job and its documents in one durable commit.
    pub fn create_job(&self, job: &JobRecord, documents: &[NewDocument]) -> Result<JobRecord> {
        let txn = self.db.begin_write().map_err(storage)?;
        let job = {
            let mut jobs = txn.open_table(JOBS).map_err(storage)?;
            let mut pending = txn.open_table(PENDING).map_err(storage)?;
            let mut job = job.clone();
            for document in documents {
                pending.insert((job.id.as_str(), job.next_sequence), encode(document)?.as_slice()).map_err(storage)?;
                job.next_sequence += 1;
                job.total += 1;
            }
            jobs.insert(job.id.as_str(), encode(&job)?.as_slice()).map_err(storage)?;
            job
        };
        txn.commit().map_err(storage)?;
        Ok(job)
    }

    /// Appends documents to a job that is receiving (IngestStream), durably.
    pub fn append_to_job(&self, job_id: &str, documents: &[NewDocument]) -> Result<JobRecord> {
        self.update_job(job_id, |job, pending| {
            for document in documents {
                pending.insert((job_id, job.next_sequence), encode(document)?.as_slice()).map_err(storage)?;
                job.next_sequence += 1;
                job.total += 1;
            }
            Ok(())
        })
    }

    /// Changes a job in one transaction (read, change, write), so concurrent changes
    /// (a stream appending, the runner counting) never overwrite each other.
    pub fn update_job(
        &self,
        job_id: &str,
        change: impl FnOnce(&mut JobRecord, &mut redb::Table<(&str, u64), &[u8]>) -> Result<()>,
    ) -> Result<JobRecord> {
        let txn = self.db.begin_write().map_err(storage)?;
        let job = {
            let mut jobs = txn.open_table(JOBS).map_err(storage)?;
            let mut pending = txn.open_table(PENDING).map_err(storage)?;
            let mut job: JobRecord = match jobs.get(job_id).map_err(storage)? {
                Some(bytes) => decode(bytes.value())?,
                None => return Err(Error::NotFound(format!("job {job_id} does not exist"))),
            };
            change(&mut job, &mut pending)?;
            job.revision += 1;
            jobs.insert(job_id, encode(&job)?.as_slice()).map_err(storage)?;
            job
        };
        txn.commit().map_err(storage)?;
        Ok(job)
    }

    /// Every job.
    pub fn jobs(&self) -> Result<Vec<JobRecord>> {
        let txn = self.db.begin_read().map_err(storage)?;
        let jobs = txn.open_table(JOBS).map_err(storage)?;
        let mut all = Vec::new();
        for entry in jobs.iter().map_err(storage)? {
            let (_, value) = entry.map_err(storage)?;
            all.push(decode(value.value())?);
        }
        Ok(all)
    }

    /// Up to `limit` documents of `job_id` still waiting, from sequence `from` on,
    /// oldest first.
    pub fn pending_documents(&self, job_id: &str, from: u64, limit: usize) -> Result<Vec<(u64, NewDocument)>> {
        let txn = self.db.begin_read().map_err(storage)?;
        let pending = txn.open_table(PENDING).map_err(storage)?;
        let mut documents = Vec::new();
        for entry in pending.range((job_id, from)..=(job_id, u64::MAX)).map_err(storage)?.take(limit) {
            let (key, value) = entry.map_err(storage)?;
            documents.push((key.value().1, decode(value.value())?));
        }
        Ok(documents)
    }

    /// Documents waiting in every job.
    pub fn pending_count(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(storage)?;
        txn.open_table(PENDING).map_err(storage)?.len().map_err(storage)
    }

    /// The stored vectors of those `hashes` that exist.
    pub fn existing_vectors(&self, hashes: &[ContentHash]) -> Result<Vec<Option<Vec<f32>>>> {
        let txn = self.db.begin_read().map_err(storage)?;
        let vectors = txn.open_table(VECTORS).map_err(storage)?;
        hashes.iter().map(|hash| Ok(vectors.get(hash).map_err(storage)?.map(|v| decode_vector(v.value()).1))).collect()
    }

    /// Indexes documents of a job in one commit: replaces earlier versions of the same
    /// ids, stores vectors (shared by hash), removes the documents from `pending`, and
    /// counts them (and `failed` others, whose reasons are given) in the job.
    pub fn commit_indexed(
        &self,
        job_id: &str,
        documents: Vec<IndexedDocument>,
        failed: &[(u64, String)],
    ) -> Result<(IndexChanges, JobRecord)> {
        let mut txn = self.db.begin_write().map_err(storage)?;
        txn.set_durability(Durability::Immediate).map_err(storage)?;
        let mut changes = IndexChanges::default();
        let job = {
            let mut meta = txn.open_table(META).map_err(storage)?;
            let mut stored = txn.open_table(DOCUMENTS).map_err(storage)?;
            let mut vectors = txn.open_table(VECTORS).map_err(storage)?;
            let mut pending = txn.open_table(PENDING).map_err(storage)?;
            let mut jobs = txn.open_table(JOBS).map_err(storage)?;
            let mut next_chunk_id = match meta.get(META_NEXT_CHUNK_ID).map_err(storage)? {
                Some(bytes) => u64::from_le_bytes(bytes.value().try_into().map_err(storage)?),
                None => 1,
            };
            let mut job: JobRecord = match jobs.get(job_id).map_err(storage)? {
                Some(bytes) => decode(bytes.value())?,
                None => return Err(Error::NotFound(format!("job {job_id} does not exist"))),
            };
            job.revision += 1;
            for mut document in documents {
                let previous: Option<DocumentRecord> =
                    stored.get(document.id.as_str()).map_err(storage)?.map(|v| decode(v.value())).transpose()?;
                if let Some(previous) = previous {
                    for chunk in &previous.chunks {
                        release_vector(&mut vectors, &chunk.hash)?;
                        changes.removed_chunks.push(chunk.chunk_id);
                    }
                }
                for (chunk, vector) in document.record.chunks.iter_mut().zip(&document.vectors) {
                    chunk.chunk_id = next_chunk_id;
                    next_chunk_id += 1;
                    retain_vector(&mut vectors, &chunk.hash, vector)?;
                }
                stored.insert(document.id.as_str(), encode(&document.record)?.as_slice()).map_err(storage)?;
                pending.remove((job.id.as_str(), document.sequence)).map_err(storage)?;
                job.processed += 1;
                changes.upserted.push((document.id, document.record, document.vectors));
            }
            for (sequence, reason) in failed {
                pending.remove((job.id.as_str(), *sequence)).map_err(storage)?;
                job.failed += 1;
                job.error.get_or_insert_with(|| reason.clone());
            }
            meta.insert(META_NEXT_CHUNK_ID, next_chunk_id.to_le_bytes().as_slice()).map_err(storage)?;
            changes.generation = bump_generation(&mut meta)?;
            jobs.insert(job.id.as_str(), encode(&job)?.as_slice()).map_err(storage)?;
            job
        };
        txn.commit().map_err(storage)?;
        Ok((changes, job))
    }

    /// Deletes documents by id, durably; unknown ids are skipped.
    pub fn delete_documents(&self, ids: &[String]) -> Result<IndexChanges> {
        let txn = self.db.begin_write().map_err(storage)?;
        let mut changes = IndexChanges::default();
        {
            let mut meta = txn.open_table(META).map_err(storage)?;
            let mut stored = txn.open_table(DOCUMENTS).map_err(storage)?;
            let mut vectors = txn.open_table(VECTORS).map_err(storage)?;
            changes.generation = bump_generation(&mut meta)?;
            for id in ids {
                let removed = stored.remove(id.as_str()).map_err(storage)?.map(|v| decode::<DocumentRecord>(v.value()));
                if let Some(record) = removed.transpose()? {
                    for chunk in &record.chunks {
                        release_vector(&mut vectors, &chunk.hash)?;
                        changes.removed_chunks.push(chunk.chunk_id);
                    }
                    changes.removed_documents.push(id.clone());
                }
            }
        }
        txn.commit().map_err(storage)?;
        Ok(changes)
    }

    /// Stored documents by id (None for unknown ids), in order.
    pub fn documents(&self, ids: &[&str]) -> Result<Vec<Option<DocumentRecord>>> {
        let txn = self.db.begin_read().map_err(storage)?;
        let stored = txn.open_table(DOCUMENTS).map_err(storage)?;
        ids.iter().map(|id| stored.get(*id).map_err(storage)?.map(|v| decode(v.value())).transpose()).collect()
    }

    /// Calls `visit` with every stored document and its chunk vectors, to rebuild the
    /// in-memory index at start.
    pub fn for_each_document(&self, mut visit: impl FnMut(String, DocumentRecord, Vec<Vec<f32>>)) -> Result<()> {
        let txn = self.db.begin_read().map_err(storage)?;
        let stored = txn.open_table(DOCUMENTS).map_err(storage)?;
        let vectors = txn.open_table(VECTORS).map_err(storage)?;
        for entry in stored.iter().map_err(storage)? {
            let (id, value) = entry.map_err(storage)?;
            let record: DocumentRecord = decode(value.value())?;
            let mut chunk_vectors = Vec::with_capacity(record.chunks.len());
            for chunk in &record.chunks {
                let vector = vectors
                    .get(&chunk.hash)
                    .map_err(storage)?
                    .ok_or_else(|| Error::Storage(format!("document {} has a chunk without a vector", id.value())))?;
                chunk_vectors.push(decode_vector(vector.value()).1);
            }
            visit(id.value().to_string(), record, chunk_vectors);
        }
        Ok(())
    }

    /// Distinct vectors stored.
    pub fn vector_count(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(storage)?;
        txn.open_table(VECTORS).map_err(storage)?.len().map_err(storage)
    }
}

/// Adds a reference to the vector of `hash`, storing it if new.
fn retain_vector(vectors: &mut redb::Table<&[u8; 32], &[u8]>, hash: &ContentHash, vector: &[f32]) -> Result<()> {
    let references = vectors.get(hash).map_err(storage)?.map(|v| decode_vector(v.value()).0).unwrap_or(0);
    vectors.insert(hash, encode_vector(references + 1, vector).as_slice()).map_err(storage)?;
    Ok(())
}

/// Drops a reference to the vector of `hash`, deleting it with the last one.
fn release_vector(vectors: &mut redb::Table<&[u8; 32], &[u8]>, hash: &ContentHash) -> Result<()> {
    let current = vectors.get(hash).map_err(storage)?.map(|v| decode_vector(v.value()));
    match current {
        Some((references, vector)) if references > 1 => {
            vectors.insert(hash, encode_vector(references - 1, &vector).as_slice()).map_err(storage)?;
        }
        Some(_) => {
            vectors.remove(hash).map_err(storage)?;
        }
        None => {}
    }
    Ok(())
}
