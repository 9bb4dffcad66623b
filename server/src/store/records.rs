//! The plain records every store keeps: documents as submitted and as indexed, their
//! chunks, and ingestion jobs. No store's encoding lives here; each engine converts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::corpus::text::ContentHash;

/// A document as a client submits it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewDocument {
    pub id: String,
    pub text: String,
    pub metadata: BTreeMap<String, String>,
}

/// A chunk of a stored document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredChunk {
    pub chunk_id: u64,
    pub start_byte: u32,
    pub end_byte: u32,
    pub start_char: u32,
    pub end_char: u32,
    pub hash: ContentHash,
}

/// A stored, indexed document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentRecord {
    /// The normalized text.
    pub text: String,
    pub metadata: BTreeMap<String, String>,
    pub chunks: Vec<StoredChunk>,
    /// Unix seconds.
    pub indexed_at: f64,
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Pending,
    Running,
    Completed,
    Failed,
}

/// The progress of one ingestion job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub state: JobState,
    pub total: u64,
    pub processed: u64,
    pub failed: u64,
    /// The first failure's reason.
    pub error: Option<String>,
    /// Unix seconds.
    pub started_at: f64,
    pub finished_at: Option<f64>,
    /// Sequence number the next appended document gets in `pending`.
    pub next_sequence: u64,
    /// An IngestStream is still adding documents.
    pub receiving: bool,
    /// Bumped by every stored change, so readers can tell newer states from older.
    pub revision: u64,
    /// Set while the job cannot make progress and its server retries it. A shared
    /// store that can keep it does (so every server shows it); the others, and the
    /// embedded store's file, do not: there the runner's own memory answers (see
    /// `JobBoard`). Not part of the embedded store's encoding, which has no room for
    /// new fields.
    #[serde(skip)]
    pub retrying: Option<JobRetry>,
}

/// Why a job cannot progress, while its server retries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRetry {
    /// The last failure, as the store explained it.
    pub error: String,
    /// When the failures began, in Unix seconds.
    pub since: f64,
}

impl JobState {
    /// The state's name where a store keeps it as text.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
        }
    }

    /// The state of a [`JobState::name`] (an unknown name reads as pending).
    pub fn from_name(name: &str) -> JobState {
        match name {
            "running" => JobState::Running,
            "completed" => JobState::Completed,
            "failed" => JobState::Failed,
            _ => JobState::Pending,
        }
    }
}

impl JobRecord {
    /// Whether the job has ended.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, JobState::Completed | JobState::Failed)
    }
}

/// A document to index, with the vectors of its chunks.
#[derive(Debug, Clone)]
pub struct IndexedDocument {
    /// Its place in `pending`.
    pub sequence: u64,
    pub id: String,
    pub record: DocumentRecord,
    /// One vector per chunk, in chunk order (chunk ids are assigned on commit).
    pub vectors: Vec<Vec<f32>>,
}
