//! The vector index of the search feature: stored chunk embeddings, searched by cosine
//! similarity. Vectors are L2-normalized, so the score is the dot product.
//!
//! Two kinds, chosen by a server setting:
//! - [`IndexKind::Exact`] (default): scores every vector and returns the true top k
//!   with exact f32 scores; an int8 copy keeps the scan within memory bandwidth.
//! - [`IndexKind::Hnsw`]: an approximate graph index for collections too large to
//!   scan; hits still carry exact f32 scores.
//!
//! The index is plain data: the caller wraps it in a lock, searches under the read
//! lock (`search` takes `&self`) and inserts or removes under the write lock.
//!
//! # Layout
//! - `exact`: exhaustive search, int8 scan then exact rescoring.
//! - `hnsw`: the HNSW graph with tombstones for removals.
//! - `rows`: the f32 vectors and the id <-> row maps both kinds keep.
//! - `quantize`: int8 codes and the bound on their score error.
//! - `kernels`: SIMD dot products with run-time CPU detection.
//! - `top_k`: the bounded best-k selection.
//! - [`recall`]: HNSW's recall measured on the index's own vectors (how `ef_search`
//!   is chosen).
//! - [`synthetic`]: seeded clustered embeddings for tests and `index-bench`.

mod exact;
mod hnsw;
mod kernels;
mod quantize;
pub mod recall;
mod rows;
pub mod synthetic;
mod top_k;

use crate::error::{Error, Result};

use exact::ExactIndex;
pub use exact::ScanQuery;
use hnsw::HnswIndex;

/// A chunk's id, assigned by the store.
pub type ChunkId = u64;

/// A caller's predicate on chunk ids (metadata filters live with the caller).
pub type Filter<'a> = dyn Fn(ChunkId) -> bool + Sync + 'a;

/// Largest accepted dimension: far beyond any embedding model, and well below where
/// the int8 scan's i32 sums could overflow.
pub const MAX_DIM: usize = 65_536;

/// Which index to build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IndexKind {
    #[default]
    Exact,
    Hnsw,
}

/// Tuning of the index kinds; each kind reads only its own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexParams {
    /// Exact: threads one search's scan may use. More only pays off for large
    /// collections on an idle machine, since concurrent searches share the cores.
    pub scan_threads: usize,
    /// HNSW: links per node and layer (2..=255). More links, better recall, more
    /// memory and slower inserts.
    pub m: usize,
    /// HNSW: search width while inserting; higher builds a better graph, slower.
    pub ef_construction: usize,
    /// HNSW: search width at query time (at least `k` is used); the recall/latency knob.
    pub ef_search: usize,
}

impl Default for IndexParams {
    /// Measured with `index-bench` on 2 cores (1M clustered vectors of dim 384): a
    /// split scan did not lower exact p50 and cost throughput under concurrent
    /// searches. HNSW with m 16 and ef_construction 128 reached recall@10 0.83 at
    /// ef_search 128, 0.90 at 256 and 0.95 at 512 (p50 2.1 ms); ef_construction 64
    /// built in 40% less time but capped recall near 0.74.
    fn default() -> Self {
        IndexParams { scan_threads: 1, m: 16, ef_construction: 128, ef_search: 512 }
    }
}

/// The index: one of the two kinds, behind one API.
#[derive(Debug)]
pub struct VectorIndex {
    dim: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Exact(ExactIndex),
    Hnsw(HnswIndex),
}

impl VectorIndex {
    /// An empty index for vectors of `dim` floats. Fails on a dimension or parameter
    /// that cannot work, so bad settings are caught at start.
    pub fn new(kind: IndexKind, dim: usize, params: IndexParams) -> Result<VectorIndex> {
        if dim == 0 || dim > MAX_DIM {
            return Err(Error::Config(format!("index dimension {dim} outside 1..={MAX_DIM}")));
        }
        let kind = match kind {
            IndexKind::Exact => Kind::Exact(ExactIndex::new(dim, params.scan_threads)),
            IndexKind::Hnsw => {
                if !(2..=255).contains(&params.m) || params.ef_construction == 0 || params.ef_search == 0 {
                    return Err(Error::Config(format!(
                        "hnsw needs m in 2..=255 and non-zero ef_construction and ef_search, got {params:?}"
                    )));
                }
                Kind::Hnsw(HnswIndex::new(dim, params.m, params.ef_construction, params.ef_search)?)
            }
        };
        Ok(VectorIndex { dim, kind })
    }

    pub fn kind(&self) -> IndexKind {
        match self.kind {
            Kind::Exact(_) => IndexKind::Exact,
            Kind::Hnsw(_) => IndexKind::Hnsw,
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Vectors stored (removed ones excluded).
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Exact(index) => index.len(),
            Kind::Hnsw(index) => index.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// HNSW nodes left behind by removed or replaced vectors (always 0 for exact).
    /// They cost memory and search effort until the index is rebuilt from the store;
    /// the caller decides when that pays.
    pub fn tombstones(&self) -> usize {
        match &self.kind {
            Kind::Exact(_) => 0,
            Kind::Hnsw(index) => index.tombstones(),
        }
    }

    /// The stored f32 vector of `id`.
    pub fn get(&self, id: ChunkId) -> Option<&[f32]> {
        match &self.kind {
            Kind::Exact(index) => index.get(id),
            Kind::Hnsw(index) => index.get(id),
        }
    }

    /// Stores `vector` under `id`, replacing what `id` had.
    pub fn insert(&mut self, id: ChunkId, vector: &[f32]) -> Result<()> {
        self.check("vector", vector)?;
        match &mut self.kind {
            Kind::Exact(index) => index.insert(id, vector),
            Kind::Hnsw(index) => index.insert(id, vector)?,
        }
        Ok(())
    }

    /// Stores a batch, as `insert` one by one would, but faster where the kind can
    /// (HNSW inserts in parallel). Nothing is stored if any vector is invalid.
    pub fn extend(&mut self, batch: &[(ChunkId, &[f32])]) -> Result<()> {
        for (i, (_, vector)) in batch.iter().enumerate() {
            self.check(&format!("vectors[{i}]"), vector)?;
        }
        match &mut self.kind {
            Kind::Exact(index) => {
                index.reserve(batch.len());
                batch.iter().for_each(|&(id, vector)| index.insert(id, vector));
            }
            Kind::Hnsw(index) => index.extend(batch)?,
        }
        Ok(())
    }

    /// Changes the HNSW search width (ignored by exact search): recall and latency can
    /// be traded without rebuilding.
    pub fn set_ef_search(&mut self, ef_search: usize) {
        if let Kind::Hnsw(index) = &mut self.kind {
            index.set_ef_search(ef_search);
        }
    }

    /// The HNSW search width in force (None for exact search).
    pub fn ef_search(&self) -> Option<usize> {
        match &self.kind {
            Kind::Exact(_) => None,
            Kind::Hnsw(index) => Some(index.ef_search()),
        }
    }

    /// HNSW: the `k` nearest ids the graph finds at width `ef` (None for exact
    /// search), for [`recall`].
    pub fn neighbours_at(&self, query: &[f32], k: usize, ef: usize) -> Result<Option<Vec<ChunkId>>> {
        Ok(match &self.kind {
            Kind::Exact(_) => None,
            Kind::Hnsw(index) => Some(index.neighbours_at(query, k, ef)?),
        })
    }

    /// Rows of live vectors, for a scan in blocks ([`recall::ExactNeighbours`]); HNSW
    /// only (the exact index keeps its rows in its own layout): 0 for exact.
    pub fn row_count(&self) -> usize {
        match &self.kind {
            Kind::Exact(_) => 0,
            Kind::Hnsw(index) => index.rows().len(),
        }
    }

    /// The id in row `row` (see [`VectorIndex::row_count`]).
    pub fn row_id(&self, row: usize) -> Option<ChunkId> {
        match &self.kind {
            Kind::Hnsw(index) if row < index.rows().len() => Some(index.rows().id(row)),
            _ => None,
        }
    }

    /// The vector in row `row` (see [`VectorIndex::row_count`]).
    pub fn row_vector(&self, row: usize) -> Option<&[f32]> {
        match &self.kind {
            Kind::Hnsw(index) if row < index.rows().len() => Some(index.rows().vector(row)),
            _ => None,
        }
    }

    /// Removes `id`'s vector; false if there was none.
    pub fn remove(&mut self, id: ChunkId) -> bool {
        match &mut self.kind {
            Kind::Exact(index) => index.remove(id),
            Kind::Hnsw(index) => index.remove(id),
        }
    }

    /// The `k` best hits, highest score first: only ids passing `filter`, only scores
    /// of at least `min_score`. Scores are exact f32 dot products; for
    /// [`IndexKind::Exact`] the hits are the true top k (ties broken by smaller id).
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        min_score: Option<f32>,
        filter: Option<&Filter>,
    ) -> Result<Vec<(ChunkId, f32)>> {
        self.check_query(query, min_score)?;
        Ok(match &self.kind {
            Kind::Exact(index) => index.search(query, k, min_score, filter),
            Kind::Hnsw(index) => index.search(query, k, min_score, filter)?,
        })
    }

    /// [`VectorIndex::search`] without a filter for several queries, answered in their
    /// order, each on its own (a bad query fails alone). The exact index scans them
    /// together; HNSW searches them one by one.
    pub fn search_many(&self, queries: &[ScanQuery<'_>]) -> Vec<Result<Vec<(ChunkId, f32)>>> {
        let checked: Vec<Result<()>> = queries.iter().map(|q| self.check_query(q.vector, q.min_score)).collect();
        match &self.kind {
            Kind::Exact(index) => {
                let valid: Vec<ScanQuery<'_>> =
                    queries.iter().zip(&checked).filter(|(_, check)| check.is_ok()).map(|(query, _)| *query).collect();
                let mut found = index.search_many(&valid).into_iter();
                checked.into_iter().map(|check| check.map(|()| found.next().expect("one answer a query"))).collect()
            }
            Kind::Hnsw(index) => queries
                .iter()
                .zip(checked)
                .map(|(query, check)| check.and_then(|()| index.search(query.vector, query.k, query.min_score, None)))
                .collect(),
        }
    }

    fn check_query(&self, query: &[f32], min_score: Option<f32>) -> Result<()> {
        self.check("query", query)?;
        if min_score.is_some_and(f32::is_nan) {
            return Err(Error::invalid("min_score", "is NaN"));
        }
        Ok(())
    }

    /// A vector must have the index's dimension and finite values; a NaN would
    /// silently poison every score it touches.
    fn check(&self, field: &str, vector: &[f32]) -> Result<()> {
        if vector.len() != self.dim {
            return Err(Error::invalid(field, format!("has {} dimensions, the index has {}", vector.len(), self.dim)));
        }
        if let Some(i) = vector.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(field, format!("value {i} is not finite")));
        }
        Ok(())
    }
}

/// The caller shares the index between threads behind an `RwLock`.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<VectorIndex>();
};

#[cfg(test)]
mod tests;
