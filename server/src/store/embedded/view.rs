//! The in-memory side of the corpus: the vector index plus what search needs to turn
//! a chunk id into a citation and to test filters, without touching the disk.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::redb_file::IndexChanges;
use crate::corpus::filter::Filter;
use crate::error::Result;
use crate::index::{ChunkId, IndexKind, IndexParams, VectorIndex};
use crate::store::DocumentRecord;

/// A searchable document's id and metadata.
#[derive(Debug)]
pub struct DocumentEntry {
    pub id: String,
    pub metadata: BTreeMap<String, String>,
    /// Its chunk ids, to remove them when the document goes.
    pub chunk_ids: Vec<ChunkId>,
}

/// A chunk: its document and where it sits in the document's text.
#[derive(Debug, Clone)]
pub struct ChunkEntry {
    pub document: Arc<DocumentEntry>,
    pub index: u32,
    pub start_byte: u32,
    pub end_byte: u32,
    pub start_char: u32,
    pub end_char: u32,
}

/// Index + lookups, behind the corpus' RwLock.
pub struct IndexView {
    pub index: VectorIndex,
    chunks: HashMap<ChunkId, ChunkEntry>,
    documents: HashMap<String, Arc<DocumentEntry>>,
}

impl IndexView {
    /// An empty view.
    pub fn new(kind: IndexKind, dim: usize, params: IndexParams) -> Result<Self> {
        Ok(IndexView { index: VectorIndex::new(kind, dim, params)?, chunks: HashMap::new(), documents: HashMap::new() })
    }

    /// Loads the stored documents at start, inserting all vectors in one batch (HNSW
    /// builds in parallel that way).
    pub fn load(&mut self, documents: Vec<(String, DocumentRecord, Vec<Vec<f32>>)>) -> Result<()> {
        let batch: Vec<(ChunkId, &[f32])> = documents
            .iter()
            .flat_map(|(_, record, vectors)| record.chunks.iter().zip(vectors).map(|(c, v)| (c.chunk_id, v.as_slice())))
            .collect();
        self.index.extend(&batch)?;
        for (id, record, _) in &documents {
            self.add_entries(id.clone(), record);
        }
        Ok(())
    }

    /// Adds (or replaces) a stored document and its chunk vectors.
    pub fn upsert(&mut self, id: String, record: &DocumentRecord, vectors: &[Vec<f32>]) -> Result<()> {
        self.remove_document(&id);
        for (chunk, vector) in record.chunks.iter().zip(vectors) {
            self.index.insert(chunk.chunk_id, vector)?;
        }
        self.add_entries(id, record);
        Ok(())
    }

    /// Records a document's chunks for lookups (its vectors are already indexed).
    fn add_entries(&mut self, id: String, record: &DocumentRecord) {
        let document = Arc::new(DocumentEntry {
            id: id.clone(),
            metadata: record.metadata.clone(),
            chunk_ids: record.chunks.iter().map(|c| c.chunk_id).collect(),
        });
        for (index, chunk) in record.chunks.iter().enumerate() {
            self.chunks.insert(
                chunk.chunk_id,
                ChunkEntry {
                    document: document.clone(),
                    index: index as u32,
                    start_byte: chunk.start_byte,
                    end_byte: chunk.end_byte,
                    start_char: chunk.start_char,
                    end_char: chunk.end_char,
                },
            );
        }
        self.documents.insert(id, document);
    }

    /// Follows a store commit. Vectors were checked against the model's dimension
    /// before the commit, so the index cannot refuse them.
    pub fn apply(&mut self, changes: IndexChanges) -> Result<()> {
        for chunk_id in changes.removed_chunks {
            self.index.remove(chunk_id);
            self.chunks.remove(&chunk_id);
        }
        for id in changes.removed_documents {
            self.documents.remove(&id);
        }
        for (id, record, vectors) in changes.upserted {
            self.upsert(id, &record, &vectors)?;
        }
        Ok(())
    }

    fn remove_document(&mut self, id: &str) {
        if let Some(previous) = self.documents.remove(id) {
            for chunk_id in &previous.chunk_ids {
                self.index.remove(*chunk_id);
                self.chunks.remove(chunk_id);
            }
        }
    }

    /// The chunk behind an index hit.
    pub fn chunk(&self, id: ChunkId) -> Option<&ChunkEntry> {
        self.chunks.get(&id)
    }

    /// Whether chunk `id` belongs to a document matching `filter`.
    pub fn chunk_matches(&self, id: ChunkId, filter: &Filter) -> bool {
        self.chunks.get(&id).is_some_and(|chunk| filter.matches(&chunk.document.metadata))
    }

    /// Ids of the chunks whose document's metadata match `filter`.
    pub fn chunk_ids_matching(&self, filter: &Filter) -> std::collections::HashSet<ChunkId> {
        self.documents
            .values()
            .filter(|d| filter.matches(&d.metadata))
            .flat_map(|d| d.chunk_ids.iter().copied())
            .collect()
    }

    /// Ids of the documents whose metadata match `filter`.
    pub fn document_ids_matching(&self, filter: &Filter) -> Vec<String> {
        self.documents.values().filter(|d| filter.matches(&d.metadata)).map(|d| d.id.clone()).collect()
    }

    /// Searchable documents.
    pub fn document_count(&self) -> usize {
        self.documents.len()
    }

    /// Indexed chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}
